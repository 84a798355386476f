"""Mutable globals written by differentiated code: their shadow globals.

A global variable that differentiated code writes floating-point data into (a store, ``memcpy`` or ``memset``
whose address is the global or a field of it) holds derivatives: like Enzyme, enzcc gives it a zero-filled
*shadow global* of the same type, used by every derived function of the module (so a derived callee that
only reads the global sees what its caller wrote). A global that differentiated code only reads keeps no
derivative: its value does not depend on the active inputs.

The shadow's contents at entry to an ``__enzyme_*`` call would be left over from an earlier call, so the call
zero-fills the shadows of the globals its function (and what it calls) uses: the incoming value of a global has
no derivative. ``__enzyme_reverse`` is the exception: it continues what its ``__enzyme_augmentfwd`` started.

A shadow lives in its global's address space: the shadow of a GPU ``__shared__`` array is in shared memory, one
per thread block; a family zeroes such shadows (:func:`enzcc.ad.registry.register_global_shadow_zeroing`: the
nvvm family's block of threads, between barriers), ``memset`` the others.
"""

from __future__ import annotations

from enzcc.ad.registry import called_function, copied_arguments, global_shadow_zeroings
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import Call, Cast, GetElementPtr, Phi, Select, Store
from enzcc.ir.values import ConstantExpr, ConstantUndef, GlobalRef, Value

_WRITES = ("llvm.memcpy", "llvm.memmove", "llvm.memset")


def writable_global(module, symbol: str):
    """The global variable ``@symbol`` if it is a definition enzcc can shadow (mutable, defined here, holding
    floating-point data), else None."""
    from enzcc.ad.api import has_float
    from enzcc.ad.hints import hints_of

    gv = module.globals.get(symbol)
    if gv is None or gv.kind != "global" or gv.is_constant or gv.is_declaration or gv.value_type is None:
        return None
    if not has_float(gv.value_type) or symbol in hints_of(module).inactive_globals:
        return None
    return gv


def global_roots(p: Value) -> list[GlobalRef]:
    """The globals an address is directly computed from (address arithmetic, casts, phis, selects; not
    pointers loaded from memory)."""
    out, seen, stack = [], set(), [p]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, GlobalRef):
            out.append(v)
        elif isinstance(v, GetElementPtr):
            stack.append(v.pointer)
        elif isinstance(v, Cast) and v.opcode in ("bitcast", "addrspacecast"):
            stack.append(v.value)
        elif isinstance(v, ConstantExpr) and v.opcode in ("getelementptr", "bitcast", "addrspacecast"):
            stack.append(v.operands[0])
        elif isinstance(v, Select):
            stack += [v.true_value, v.false_value]
        elif isinstance(v, Phi):
            stack += [x for x, _ in v.incoming]
    return out


def written_globals(fn) -> set[str]:
    """The shadowable globals ``fn`` writes into."""
    module = fn.module
    out = set()
    for inst in fn.instructions():
        if isinstance(inst, Store):
            dest = inst.pointer
        elif isinstance(inst, Call) and (inst.callee_name or "").startswith(_WRITES):
            dest = inst.args[0]
        elif isinstance(inst, Call) and copied_arguments(inst):  # (a copy a rule names: cudaMemcpy)
            dest = copied_arguments(inst)[0]
        else:
            continue
        for g in global_roots(dest):
            if writable_global(module, g.symbol) is not None:
                out.add(g.symbol)
    return out


def used_globals(fn, skip_callees: bool = False) -> set[str]:
    """The globals (and functions) whose address ``fn`` uses, directly or in a constant expression;
    ``skip_callees``: not counting the callee of a direct call."""
    out = set()
    for inst in fn.instructions():
        direct = skip_callees and isinstance(inst, Call) and inst.callee_name is not None
        for op in inst.operands[1:] if direct else inst.operands:
            stack = [op]
            while stack:
                v = stack.pop()
                if isinstance(v, GlobalRef):
                    out.add(v.symbol)
                elif isinstance(v, ConstantExpr):
                    stack += v.operands
    return out


def eligible(module, symbol: str):
    """The global ``@symbol`` if a context holds a shadow of it: defined here, mutable, holding floats or
    pointers, not enzcc's or the API's own."""
    from enzcc.ad.api import has_float, has_pointer

    gv = module.globals.get(symbol)
    if gv is None or gv.kind != "global" or gv.is_constant or gv.is_declaration or gv.value_type is None:
        return None
    if symbol.startswith(("llvm.", "__enzcc", "enzyme_", "__enzyme_")):
        return None
    if not (has_float(gv.value_type) or has_pointer(gv.value_type)):
        return None
    return gv


class ActiveGlobals:
    """Which globals of a module hold derivatives, and which of them each differentiated function reaches."""

    def __init__(self, module, prepared: dict[str, str], context_functions: set[str] = frozenset()):
        self.names: set[str] = set()
        """Globals written by some prepared (differentiated) function, and those a function differentiated
        with ``enzyme_context`` uses (:mod:`enzcc.ad.calls.context`)."""
        self._calls: dict[str, set[str]] = {}
        """Prepared function -> the original names of the prepared functions it calls."""
        self._uses: dict[str, set[str]] = {}
        self.shadow_names: dict[tuple[str, int], str] = {}
        """(global, lane) -> its shadow global in this round (:func:`shadow_global`)."""
        for orig, prep in prepared.items():
            fn = module.functions[prep]
            self.names |= written_globals(fn)
            self._uses[orig] = used_globals(fn)
            self._calls[orig] = {i.callee_name for i in fn.instructions()
                                 if isinstance(i, Call) and i.callee_name in prepared}
            self._calls[orig] |= {called_function(i) for i in fn.instructions()} & prepared.keys()
        self.in_context: set[str] = set()
        """The globals with derivatives only because a context gives them shadows (read-only ones, pointers)."""
        for name in context_functions:
            for symbol in self._used_by(name):
                if eligible(module, symbol) is not None and symbol not in self.names:
                    self.names.add(symbol)
                    self.in_context.add(symbol)
        from enzcc.ad.hints import hints_of

        declared = hints_of(module).shadows
        for name in prepared if declared else ():  # a global with a declared shadow has derivatives, read or not
            self.names |= self._used_by(name) & declared.keys()
        for symbol, shadow in declared.items():
            if shadow in self.names:
                from enzcc.ad.errors import ad_error

                raise ad_error(f"differentiated code writes '{shadow}', the shadow enzyme_shadow declares for "
                               f"'{symbol}' (nested AD over code that accumulates into it, or code that writes it "
                               "itself): not supported")

    def reached_by(self, name: str) -> list[str]:
        """The active globals the differentiated function ``name`` (or what it calls) uses."""
        return sorted(self._used_by(name) & self.names)

    def _used_by(self, name: str) -> set[str]:
        seen, stack, out = set(), [name], set()
        while stack:
            f = stack.pop()
            if f in seen or f not in self._uses:
                continue
            seen.add(f)
            out |= self._uses[f]
            stack += self._calls[f]
        return out


def active_globals(module) -> set[str]:
    info = getattr(module, "enzcc_active_globals", None)
    return info.names if info is not None else set()


def shadow_global(module, symbol: str, lane: int = 0) -> GlobalRef:
    """The zero-filled shadow of global ``@symbol`` (one per vector lane), shared by the derived functions of
    one AD round. A later round (nested AD) gets shadows of its own: the earlier round's shadow of ``@symbol``
    is a global that round's code reads and writes, which now has a derivative of its own."""
    declared = declared_shadow(module, symbol)
    if declared is not None:
        return _declared(module, symbol, declared, lane)
    info = getattr(module, "enzcc_active_globals", None)
    names = info.shadow_names if info is not None else {}
    name = names.get((symbol, lane))
    if name is None:
        name = module.unique_function_name(f"__enzcc_shadow.{symbol}" + (f".lane{lane}" if lane else ""))
        gv = module.globals[symbol]
        # in the primal's address space (GPU shared memory: one shadow per thread block, as the array is); left
        # uninitialized where the primal is (shared memory cannot have an initial value): each call zeroes it
        init = ConstantUndef(gv.value_type) if _uninitialized(gv) else None
        module.add_global(name, gv.value_type, initializer=init, align=16, addrspace=gv.addrspace)
        names[(symbol, lane)] = name
    return module.global_ref(name)


def _uninitialized(gv) -> bool:
    """Whether global ``gv``'s initial value is ``undef`` (GPU shared memory, which has none)."""
    return any(f" {gv.value_type} {x}" in gv.text for x in ("undef", "poison"))


def _declared(module, symbol: str, shadow: str, lane: int) -> GlobalRef:
    """The shadow the program declared for ``@symbol`` (``enzyme_shadow``): one lane, of the same type."""
    from enzcc.ad.errors import ad_error

    if lane:
        raise ad_error(f"'{symbol}' has the one shadow enzyme_shadow declares: vector mode (enzyme_width) with "
                       "derivatives through it is not supported")
    have, want = module.globals[shadow], module.globals[symbol]
    if have.kind != "global" or have.is_constant or have.value_type != want.value_type:
        raise ad_error(f"enzyme_shadow: '{shadow}' must be a mutable global of the type of '{symbol}' "
                       f"({want.value_type})")
    return module.global_ref(shadow)


def declared_shadow(module, symbol: str) -> str | None:
    """The global the program declared as ``@symbol``'s shadow with ``enzyme_shadow``, if any: enzcc never
    zeroes it (the program reads and seeds it)."""
    from enzcc.ad.hints import hints_of

    return hints_of(module).shadows.get(symbol)


def zero_shadows(b: IRBuilder, module, fn_name: str, width: int = 1) -> None:
    """Before an ``__enzyme_*`` call of ``fn_name``: zero the shadows of the globals it uses."""
    from enzcc.ad.api import has_pointer
    from enzcc.ad.errors import ad_error

    info = getattr(module, "enzcc_active_globals", None)
    if info is None:
        return
    dl = module.data_layout
    todo = []
    for symbol in info.reached_by(fn_name):
        if declared_shadow(module, symbol) is not None:
            continue  # the program's own: it accumulates across calls
        if symbol in info.in_context and has_pointer(module.globals[symbol].value_type):
            raise ad_error(f"'{fn_name}' reaches global '{symbol}', which holds pointers and has derivatives only "
                           "in an enzyme_context: differentiate it with enzyme_context here too")
        size = dl.alloc_size(module.globals[symbol].value_type)
        todo += [(symbol, shadow_global(module, symbol, lane), size) for lane in range(width)]
    done = set()
    for zero in global_shadow_zeroings():  # (memory that is not one copy for the program: a family zeroes it)
        done |= zero(b, module, [t for t in todo if t[1].symbol not in done])
    for _, shadow, size in todo:
        if shadow.symbol not in done:
            b.memset(shadow, 0, size)


def expand_global_addresses(fn) -> None:
    """Address constants of shadowed globals (``getelementptr (..., @g, ...)``) used by instructions become
    instructions, so that activity and shadows see them like any other address computation."""
    names = active_globals(fn.module)
    if not names:
        return

    def rooted(c) -> bool:
        return isinstance(c, ConstantExpr) and c.opcode in ("getelementptr", "bitcast", "addrspacecast") and \
            (isinstance(c.operands[0], GlobalRef) and c.operands[0].symbol in names or rooted(c.operands[0]))

    def materialize(c, b: IRBuilder) -> Value:
        base = c.operands[0]
        if isinstance(base, ConstantExpr):
            base = materialize(base, b)
        if c.opcode == "getelementptr":
            flags = [f for f in c.flags if f in ("inbounds", "nuw", "nusw")]
            g = GetElementPtr(c.source_type, base, c.operands[1:], flags=flags)
            b.insert(g)
            return g
        return b.cast(c.opcode, base, c.type)

    for inst in list(fn.instructions()):
        for i, op in enumerate(inst.operands):
            if not rooted(op):
                continue
            if isinstance(inst, Phi):
                block = inst.incoming[i][1]
                b = IRBuilder.before(block.terminator)
            else:
                b = IRBuilder.before(inst)
            inst.set_operand(i, materialize(op, b))


__all__ = ["ActiveGlobals", "active_globals", "declared_shadow", "expand_global_addresses", "global_roots", "shadow_global",
           "used_globals", "writable_global", "written_globals", "zero_shadows"]
