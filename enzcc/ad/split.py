"""Augmented primal and reverse functions for a callee that is not inlined (a recursive one).

The callee's gradient is first built in combined form (:class:`enzcc.ad.reverse.ReverseMode` with
``split=True``: the adjoint of its result comes in as a parameter), then cut where its forward code ends:

* ``augmented_g(args, shadows)`` runs the forward code and returns ``{tape, result}``. The tape is one heap
  block (the *frame*) holding every stack slot of the combined function (primal locals, caches, adjoint
  slots, the loop tape's state) and every value the reverse code reads from the forward code;
* ``reverse_g(args, shadows, [d_result], tape)`` reads those values back, runs the reverse code, returns the
  derivatives of the active scalar arguments and frees the frame.

A caller keeps the tape like any other value its own reverse sweep needs, so loops and recursion nest.
"""

from __future__ import annotations

from enzcc.ad.emit import fail_at_run_time
from enzcc.ad.errors import ad_error
from enzcc.ad.prepare import derivative_attributes
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.clone import clone_blocks
from enzcc.ir.function import Function
from enzcc.ir.instructions import Alloca, Ret
from enzcc.ir.values import ConstantInt


def make_split(logic, dc, kinds: tuple[str, ...], active_return: bool, key, parallel: bool = False,
               shadow_return: bool = False):
    """The (augmented primal, reverse) pair of ``dc.fn`` for argument activity ``kinds`` (``dc`` describes
    the call that asks for it; ``parallel``: its reverse runs in the threads of an OpenMP parallel region;
    ``shadow_return``: the augmented primal returns the shadow of the pointer ``dc.fn`` returns, after it).
    The combined function it is cut from stays until the module is done, for :func:`buffer_variant`."""
    from enzcc.ad.reverse import ReverseMode

    module = logic.module
    callee = dc.fn
    maker = ReverseMode(dc, module, logic.body_of(callee), logic=logic, split=True, active_return=active_return,
                        parallel=parallel)
    maker.shadow_return = shadow_return
    G = maker.G
    aug, rev = _declare_pair(module, callee, G, kinds, buffer=False, width=maker.width,
                             shadow_return=shadow_return)
    logic.cache[key] = (aug, rev)  # before the body is built: a recursive call finds the pair
    logic.split_makers[key] = maker
    maker.build()
    _cut(maker, aug, rev, buffer=False)
    logic.scratch.append(G.name)
    return aug, rev


def buffer_variant(logic, key):
    """The pair of ``key`` (made by :func:`make_split`) taking the tape's memory from the caller
    (``enzyme_allocated, N, enzyme_tape, buffer``): the augmented primal takes the buffer as its last
    parameter, the reverse function does not free it. Returns (augmented, reverse, bytes needed)."""
    vkey = key + ("buffer",)
    got = logic.cache.get(vkey)
    if got is None:
        maker = logic.split_makers[key]
        aug, rev = _declare_pair(logic.module, maker.dc.fn, maker.G, key[2], buffer=True, width=maker.width,
                                 shadow_return=maker.shadow_return)
        _cut(maker, aug, rev, buffer=True)
        got = logic.cache[vkey] = (aug, rev, maker.frame_size)
    return got


def _declare_pair(module, callee, G, kinds, buffer: bool, width: int = 1, shadow_return: bool = False):
    ndup = sum(1 for k in kinds if k in ("dup", "dupnoneed")) * width
    aug_params = tuple([a.type for a in callee.args] + [T.ptr] * ndup) + ((T.ptr,) if buffer else ())
    aug_ret = T.StructType((T.ptr,) + (() if isinstance(callee.return_type, T.VoidType) else
                                      (callee.return_type,)) + ((T.ptr,) if shadow_return else ()))
    suffix = "_inbuffer" if buffer else ""
    aug = _declare(module, callee, f"augmented_{callee.name}{suffix}", T.FunctionType(aug_ret, aug_params))
    rev = _declare(module, callee, f"reverse_{callee.name}{suffix}",
                   T.FunctionType(G.return_type, tuple(a.type for a in G.args) + (T.ptr,)))
    return aug, rev


def _declare(module, primal, name: str, ftype: T.FunctionType) -> Function:
    fn = Function(module.unique_function_name(name), ftype)
    fn.linkage = "internal"
    fn.fn_attrs = derivative_attributes(module, primal)
    fn.primal_name = getattr(primal, "primal_name", primal.name)
    module.add_function(fn)
    return fn


def _cut(maker, aug: Function, rev: Function, buffer: bool) -> None:
    G = maker.G
    ret_block = maker.ret_block
    rev_start = maker.rev[id(ret_block)]
    # forward region: what runs before the reverse code starts
    fwd_ids, stack = set(), [G.entry_block]
    while stack:
        b = stack.pop()
        if id(b) in fwd_ids:
            continue
        fwd_ids.add(id(b))
        if b is not ret_block:
            stack += b.successors
    fwd = [b for b in G.blocks if id(b) in fwd_ids]
    back = [b for b in G.blocks if id(b) not in fwd_ids]
    for b in back:
        for phi in b.phis():
            if any(id(p) in fwd_ids for p in phi.incoming_blocks):
                raise ad_error("internal error: the reverse code of a split derivative is entered twice", phi)
    allocas = [i for b in fwd for i in b.instructions if isinstance(i, Alloca)]
    for a in allocas:
        if a.parent is not G.entry_block or not (a.num_elements is None or isinstance(a.num_elements, ConstantInt)):
            raise ad_error("a stack allocation of variable size in a function differentiated as a call "
                           "(a recursive one) is not supported", a)
    back_ids = {id(b) for b in back}
    crossing = [i for b in fwd for i in b.instructions if not isinstance(i, Alloca) and
                any(id(u.user.parent) in back_ids for u in i.uses)]
    # the last field says whether a reverse call has used the frame (see the reverse function below)
    fields = [_alloca_type(a) for a in allocas] + [v.type for v in crossing] + [T.i8]
    frame_ty = T.StructType(tuple(fields))
    size = G.module.data_layout.alloc_size(frame_ty)
    maker.frame_size = size
    na = len(allocas)
    used_field = len(fields) - 1

    # augmented primal: the forward code; the frame on the heap instead of stack slots
    vmap = dict(zip(G.args, aug.args))
    new_fwd = clone_blocks(fwd, aug, vmap)
    entry = new_fwd[0]
    if buffer:
        frame = aug.args[-1]
    else:
        b = IRBuilder.before(entry.instructions[0])
        align = max([a.align or 1 for a in allocas] + [G.module.data_layout.abi_alignment(frame_ty) if fields else 1])
        if align <= 16:  # what malloc guarantees on the hosts enzcc targets
            malloc = G.module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,)))
            frame = b.call(malloc, [ConstantInt(T.i64, max(size, 1))])
        else:
            aligned = G.module.get_or_insert_function("aligned_alloc", T.FunctionType(T.ptr, (T.i64, T.i64)))
            frame = b.call(aligned, [ConstantInt(T.i64, align), ConstantInt(T.i64, -(-max(size, 1) // align) * align)])
    for k, a in enumerate(allocas):
        ca = vmap[a]
        ca.replace_all_uses_with(IRBuilder.before(ca).struct_gep(frame_ty, frame, k))
        ca.erase()
    last = vmap[ret_block]
    last.terminator.erase()
    b = IRBuilder.at_end(last)
    for j, v in enumerate(crossing):
        b.store(vmap[v], b.struct_gep(frame_ty, frame, na + j))
    b.store(ConstantInt(T.i8, 0), b.struct_gep(frame_ty, frame, used_field))
    result = IRBuilder.poison(aug.return_type)
    result = b.insert_value(result, frame, [0])
    if len(aug.return_type.elements) > 1:
        value = maker.primal_return_value
        result = b.insert_value(result, vmap.get(value, value), [1])
    if maker.shadow_return:
        shadow = maker.primal_return_shadow
        result = b.insert_value(result, vmap.get(shadow, shadow), [2])
    b.ret(result)

    # reverse: values and slots from the frame, then the reverse code; the frame is freed on return. The reverse
    # code pops the loop tape, frees what it holds and sums adjoints into the frame's slots, so a frame serves
    # one reverse call: a second one on a frame kept by enzyme_nofree stops with a message instead of giving a
    # wrong derivative
    vmap = dict(zip(G.args, rev.args))
    tape = rev.args[-1]
    start = rev.append_block("entry")
    b = IRBuilder.at_end(start)
    used = b.struct_gep(frame_ty, tape, used_field)
    again, first = rev.append_block("used_again"), rev.append_block("first_use")
    b.cond_br(b.icmp("ne", b.load(T.i8, used), ConstantInt(T.i8, 0)), again, first)
    name = getattr(maker.dc.fn, "primal_name", maker.dc.fn.name)
    fail_at_run_time(G.module, IRBuilder.at_end(again),
                     f"the tape of '{name}' was already used by a reverse call: enzcc's reverse function consumes "
                     "its tape (enzyme_nofree keeps its memory, not what it held), so a tape serves one "
                     "__enzyme_reverse")
    b = IRBuilder.at_end(first)
    b.store(ConstantInt(T.i8, 1), used)
    for k, a in enumerate(allocas):
        vmap[a] = b.struct_gep(frame_ty, tape, k)
    for j, v in enumerate(crossing):
        vmap[v] = b.load(v.type, b.struct_gep(frame_ty, tape, na + j))
    new_back = clone_blocks(back, rev, vmap)
    b.br(vmap[rev_start])
    free = G.module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))
    for nb in new_back:
        if isinstance(nb.terminator, Ret) and not buffer:
            IRBuilder.before(nb.terminator).call(free, [tape])


def _alloca_type(a: Alloca) -> T.Type:
    n = a.num_elements
    if n is None or (isinstance(n, ConstantInt) and n.value == 1):
        return a.allocated_type
    return T.ArrayType(n.value, a.allocated_type)


__all__ = ["buffer_variant", "make_split"]
