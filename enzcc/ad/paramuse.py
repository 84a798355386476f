"""Whether a function reads or writes floats through a pointer parameter, the functions it calls included.

Activity analysis looks at one function; a call that is not inlined (a recursive one, ``--ad-inline=none``, a
large callee) hides what it does with the memory it is given. To refuse values with derivatives put into
memory that has no shadow and read back (:meth:`enzcc.ad.activity.Activity._check_lost_stores`), the caller
needs to know whether such a call stores floats into, or loads floats from, the memory behind one of its pointer
arguments. The answer here follows the parameter's pointers (geps, casts, phis, pointers loaded from its
memory, a local it is spilled to at -O0) through the callee and the functions it calls in turn, and errs on
the side of "yes" for code it cannot see that may be handed the memory (BLAS, an OpenMP fork: their rules say
``passes_arguments``)."""

from __future__ import annotations

from enzcc.ad.registry import hook, passes_arguments
from enzcc.ir import types as T
from enzcc.ir.instructions import Alloca, AtomicRMW, Call, Load, Store

_FORWARD = ("getelementptr", "bitcast", "addrspacecast", "phi", "select", "freeze")


def float_access(fn, index: int) -> tuple[bool, bool]:
    """``(reads, writes)``: whether ``fn`` (or a function it calls with the memory) may load, or store, floats in
    the memory reached through its parameter ``index`` (a pointer)."""
    from enzcc.ad.api import has_float

    reads = writes = False
    seen_params: set[tuple[str, int]] = set()
    todo = [(fn, index)]
    while todo and not (reads and writes):
        f, k = todo.pop()
        if (f.name, k) in seen_params or f.is_declaration or k >= len(f.args):
            continue
        seen_params.add((f.name, k))
        f.blocks  # (a body is parsed on first use: before that its parameters have no uses)
        seen, stack = {id(f.args[k])}, [f.args[k]]
        while stack:
            p = stack.pop()
            for use in p.uses:
                u = use.user
                follow = None
                if isinstance(u, Load):
                    if has_float(u.type):
                        reads = True
                    elif isinstance(u.type, T.PointerType):
                        follow = u  # a pointer kept in that memory: its memory is reached too
                elif isinstance(u, Store):
                    if use.index == 1 and has_float(u.value.type):
                        writes = True
                    elif use.index == 0 and isinstance(u.pointer, Alloca):
                        follow = u.pointer  # spilled to a local (-O0): what is loaded back from it
                elif isinstance(u, AtomicRMW) and has_float(u.type):
                    reads = writes = True
                elif isinstance(u, Call):
                    r, w = _call_access(u, use.index - 1, todo)
                    reads, writes = reads or r, writes or w
                elif u.opcode in _FORWARD and isinstance(u.type, T.PointerType):
                    follow = u
                if follow is not None and id(follow) not in seen:
                    seen.add(id(follow))
                    stack.append(follow)
    return reads, writes


def _call_access(call: Call, k: int, todo: list) -> tuple[bool, bool]:
    """What a call given the memory as its argument ``k`` does with it, as far as it is known here; a callee with
    a body is queued in ``todo`` (its parameter ``k``)."""
    name = call.callee_name or ""
    if name.startswith(("llvm.memcpy", "llvm.memmove")) or hook(call, "copies") is not None:
        where = hook(call, "copies") or (0, 1, 2)
        return k == where[1], k == where[0]  # (raw bytes: they may be floats)
    if passes_arguments(call):
        return True, True
    module = call.module
    callee = module.functions.get(name) if module is not None and name else None
    if callee is not None and not callee.is_declaration:
        todo.append((callee, k))
    return False, False
