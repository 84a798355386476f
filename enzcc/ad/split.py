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

import enzcc.ad.shadow_reuse as shadow_reuse
from enzcc.ad.adjoint import NESTED_REVERSE, SHADOW_FREE
from enzcc.ad.emit import fail_at_run_time
from enzcc.ad.errors import ADError, ad_error
from enzcc.ad.hints import hints_of
from enzcc.ad.prepare import derivative_attributes
from enzcc.ad.tape import POOL_NODE, POOLED_RELEASE, frame_take_fn, heap_allocation, pool_give_fn, pool_of, pooling
from enzcc.ad.usercalls import SIZE_CUT_CALL, has_call_attribute
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.clone import clone_blocks
from enzcc.ir.errors import IRError
from enzcc.ir.function import Function
from enzcc.ir.instructions import Alloca, Call, Load, Ret, Store
from enzcc.ir.values import Constant, ConstantInt, ConstantNull, Value


def make_split(logic, dc, kinds: tuple[str, ...], active_return: bool, key, parallel: bool = False,
               shadow_return: bool = False):
    """The (augmented primal, reverse) pair of ``dc.fn`` for argument activity ``kinds`` (``dc`` describes
    the call that asks for it; ``parallel``: its reverse runs in the threads of an OpenMP parallel region;
    ``shadow_return``: the augmented primal returns the shadow of the pointer ``dc.fn`` returns, after it, one
    per lane).
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
    logic.pair_keys[rev.name] = key
    try:
        maker.build()
        _cut(maker, aug, rev, buffer=False)
    except ADError as exc:
        if not stop_instead(logic, key, G, (aug, rev), exc) or not has_call_attribute(dc.call, SIZE_CUT_CALL):
            raise
        return aug, rev
    logic.scratch.append(G.name)
    return aug, rev


def stop_instead(logic, key, G, derived, exc: ADError) -> bool:
    """After ``exc`` refused the derivative of a call that is not inlined: the derived functions already handed
    out (``derived``, cached under ``key``, still without a body) stop the program with the refusal's message
    when called, and the unfinished combined function ``G`` goes. A call left as a call for its size
    (:data:`SIZE_CUT_CALL`: a library's large machinery, such as REBOUND's other integrators beside the one a
    run uses) is then compiled, and stops the program only if the run reaches it; any other caller still gets
    the refusal (this only keeps the module whole for it). False when a derived function already has a body."""
    if any(fn.blocks for fn in derived):
        return False
    logic.split_makers.pop(key, None)
    module = logic.module
    message = f"{exc.location}: {exc.message}" if exc.location else exc.message
    for fn in derived:
        fail_at_run_time(module, IRBuilder.at_end(fn.append_block("entry")), message)
    if G.module is not None and G.name in module.functions:
        try:
            module.remove_function(G.name)
        except IRError:
            logic.scratch.append(G.name)
    return True


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
                                      (callee.return_type,)) + ((T.ptr,) * width if shadow_return else ()))
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


class _Frame:
    """Where :func:`_cut` cuts a combined function: its forward and reverse blocks and the frame's layout."""

    def __init__(self, maker):
        G = maker.G
        ret_block = maker.ret_block
        self.rev_start = maker.rev[id(ret_block)]
        # forward region: what runs before the reverse code starts
        fwd_ids, stack = set(), [G.entry_block]
        while stack:
            b = stack.pop()
            if id(b) in fwd_ids:
                continue
            fwd_ids.add(id(b))
            if b is not ret_block:
                stack += b.successors
        self.fwd = [b for b in G.blocks if id(b) in fwd_ids]
        self.back = [b for b in G.blocks if id(b) not in fwd_ids]
        for b in self.back:
            for phi in b.phis():
                if any(id(p) in fwd_ids for p in phi.incoming_blocks):
                    raise ad_error("internal error: the reverse code of a split derivative is entered twice", phi)
        allocas = [i for b in self.fwd for i in b.instructions if isinstance(i, Alloca)]
        for a in allocas:
            if a.parent is not G.entry_block or not (a.num_elements is None or isinstance(a.num_elements, ConstantInt)):
                raise ad_error("a stack allocation of variable size in a function differentiated as a call "
                               "(a recursive one) is not supported", a)
        back_ids = {id(b) for b in self.back}
        self.allocas, self.forward_local, self.reverse_local = _place_slots(allocas, back_ids, G.entry_block)
        self.crossing = [i for b in self.fwd for i in b.instructions if not isinstance(i, Alloca) and
                         any(id(u.user.parent) in back_ids for u in i.uses)]
        # the last field says whether a reverse call has used the frame (see _cut_reverse)
        layout = G.module.data_layout
        fields = [_alloca_type(a, layout) for a in self.allocas] + [v.type for v in self.crossing] + [T.i8]
        self.type = _frame_type(G.module, getattr(maker.dc.fn, "primal_name", maker.dc.fn.name), fields)
        self.used_field = len(fields) - 1
        maker.frame_size = G.module.data_layout.alloc_size(self.type)


def _place_slots(allocas, back_ids: set, entry) -> tuple[list, list, list]:
    """Which stack slots of the combined function the frame holds: (framed, forward-local, reverse-local). A
    slot only the forward code uses through plain loads and stores of it stays on the augmented primal's
    stack; a slot the forward code only sets to constants in the entry block (an adjoint's slot, zeroed there)
    and the reverse code uses otherwise goes on the reverse function's stack, set there. REBOUND's stage
    functions (one derived call each per step) had frames of 3-5 KB, mostly adjoint slots the augmented primal
    zeroed for the reverse call; the rest is what crosses from one half to the other. Reverse-local: a list of
    (slot, its constant stores in entry order)."""
    framed, forward_local, reverse_local = [], [], []
    for a in allocas:
        users = [u.user for u in a.uses]
        forward = [i for i in users if id(i.parent) not in back_ids]
        if len(forward) == len(users) and all(_plain_access(i, a) for i in forward):
            forward_local.append(a)
        elif len(forward) < len(users) and all(_constant_set(i, a, entry) for i in forward):
            reverse_local.append((a, [i for i in entry.instructions if any(i is f for f in forward)]))
        else:
            framed.append(a)
    return framed, forward_local, reverse_local


def _plain_access(inst, slot) -> bool:
    """A load or store of ``slot`` itself, which does not hand its address on."""
    return (isinstance(inst, Load) and inst.pointer is slot) or \
        (isinstance(inst, Store) and inst.pointer is slot and inst.value is not slot)


def _constant_set(inst, slot, entry) -> bool:
    """A store of a constant into ``slot`` itself in the entry block."""
    return isinstance(inst, Store) and inst.parent is entry and inst.pointer is slot and \
        isinstance(inst.value, Constant)


#: a frame with more fields than this gets a named type (``%enzcc.frame.f = type {...}``)
NAMED_FRAME_FIELDS = 16


def _frame_type(module, name: str, fields: list) -> T.Type:
    """The frame's struct type; a large one named, since every getelementptr into it spells its type out: a
    frame of 5,000 fields (a large function's values crossing to its reverse code) written literally in each of
    its thousands of getelementptrs made a derivative of 170 MB of text (REBOUND's integrators: 1.1 GB in all).
    The layout is the same either way."""
    if len(fields) <= NAMED_FRAME_FIELDS:
        return T.StructType(tuple(fields))
    base, k = f"enzcc.frame.{name}", 0
    while (f"{base}.{k}" if k else base) in module.named_types:
        k += 1
    return module.add_named_type(f"{base}.{k}" if k else base, T.StructType(tuple(fields)))


def _frame(maker) -> _Frame:
    frame = getattr(maker, "frame", None)
    if frame is None:
        frame = maker.frame = _Frame(maker)
    return frame


def _cut(maker, aug: Function, rev: Function, buffer: bool) -> None:
    _cut_augmented(maker, aug, buffer)
    _cut_reverse(maker, rev, buffer)


def _cut_augmented(maker, aug: Function, buffer: bool) -> None:
    G = maker.G
    F = _frame(maker)
    frame_ty, size, na = F.type, maker.frame_size, len(F.allocas)

    # augmented primal: the forward code; the frame on the heap instead of stack slots
    vmap = dict(zip(G.args, aug.args))
    new_fwd = clone_blocks(F.fwd, aug, vmap)
    entry = new_fwd[0]
    if buffer:
        frame = aug.args[-1]
    else:
        b = IRBuilder.before(entry.instructions[0])
        align = max([a.align or 1 for a in F.allocas] + [G.module.data_layout.abi_alignment(frame_ty)])
        frame = _new_frame(maker, b, size, align)
    for k, a in enumerate(F.allocas):
        ca = vmap[a]
        ca.replace_all_uses_with(IRBuilder.before(ca).struct_gep(frame_ty, frame, k))
        ca.erase()
    for a, stores in F.reverse_local:  # (set in the reverse function instead)
        for st in stores:
            vmap[st].erase()
        vmap[a].erase()
    last = vmap[maker.ret_block]
    last.terminator.erase()
    b = IRBuilder.at_end(last)
    for j, v in enumerate(F.crossing):
        b.store(vmap[v], b.struct_gep(frame_ty, frame, na + j))
    b.store(ConstantInt(T.i8, 0), b.struct_gep(frame_ty, frame, F.used_field))
    result = IRBuilder.poison(aug.return_type)
    result = b.insert_value(result, frame, [0])
    if len(aug.return_type.elements) > 1:
        value = maker.primal_return_value
        result = b.insert_value(result, vmap.get(value, value), [1])
    if maker.shadow_return:  # (one per lane)
        for lane, shadow in enumerate(maker.primal_return_shadows):
            result = b.insert_value(result, vmap.get(shadow, shadow), [2 + lane])
    b.ret(result)


def _cut_reverse(maker, rev: Function, buffer: bool, replay: bool = False, logic=None) -> None:
    """The reverse function: values and slots from the frame, then the reverse code; the frame is freed on return
    (not ``buffer``: the caller's). The reverse code pops the loop tape, frees what it holds and sums adjoints
    into the frame's slots, so a frame serves one reverse call: a second one on a frame kept by enzyme_nofree
    stops with a message instead of giving a wrong derivative. ``replay`` (:func:`replay_variant`): the reverse
    code runs on a copy of the frame and releases nothing, so that it can run again on the same tape."""
    G = maker.G
    F = _frame(maker)
    frame_ty, na = F.type, len(F.allocas)
    module = G.module
    vmap = dict(zip(G.args, rev.args))
    tape = rev.args[-1]
    start = rev.append_block("entry")
    b = IRBuilder.at_end(start)
    for a, stores in F.reverse_local:
        vmap[a] = slot = b.alloca(a.allocated_type, a.num_elements, a.align)
        for st in stores:
            b.store(st.value, slot, st.align, st.volatile)
    free = module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))
    if replay:
        malloc = module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,)))
        frame = b.call(malloc, [ConstantInt(T.i64, maker.frame_size)])
        b.memcpy(frame, tape, maker.frame_size)
    else:
        frame = tape
        used = b.struct_gep(frame_ty, tape, F.used_field)
        again, first = rev.append_block("used_again"), rev.append_block("first_use")
        b.cond_br(b.icmp("ne", b.load(T.i8, used), ConstantInt(T.i8, 0)), again, first)
        name = getattr(maker.dc.fn, "primal_name", maker.dc.fn.name)
        fail_at_run_time(module, IRBuilder.at_end(again),
                         f"the tape of '{name}' was already used by a reverse call: enzcc's reverse function "
                         "consumes its tape (enzyme_nofree keeps its memory, not what it held), so a tape "
                         "serves one __enzyme_reverse")
        b = IRBuilder.at_end(first)
        b.store(ConstantInt(T.i8, 1), used)
    for k, a in enumerate(F.allocas):
        vmap[a] = b.struct_gep(frame_ty, frame, k)
    for j, v in enumerate(F.crossing):
        vmap[v] = b.load(v.type, b.struct_gep(frame_ty, frame, na + j))
    new_back = clone_blocks(F.back, rev, vmap)
    b.br(vmap[F.rev_start])
    for nb in new_back:
        if isinstance(nb.terminator, Ret) and (replay or not buffer):
            if replay:
                IRBuilder.before(nb.terminator).call(free, [frame])
            else:
                _release_frame(maker, IRBuilder.before(nb.terminator), frame)
    if replay:
        for call, kind in maker.reverse_frees.values():
            c = vmap.get(call)
            if c is None or c.parent is None:
                continue
            if kind == NESTED_REVERSE:
                c.set_operand(0, module.global_ref(replay_variant(logic, logic.pair_keys[c.callee_name]).name))
                continue
            if kind == SHADOW_FREE:  # zeroed for the next run instead (adjoints left in memory read but not written)
                IRBuilder.before(c).call(_zero_block_fn(module), [c.args[-1]])
            c.erase()
        for nb in new_back:  # the loop tape's buffer, when a finished call hands it to the next one
            for c in [i for i in nb.instructions if isinstance(i, Call) and
                      i.callee_name in (TAPE_RELEASE, POOLED_RELEASE)]:
                c.erase()


#: calls of reverse code that release memory or a tape
_RELEASING = ("free", "realloc", "__enzcc_tape_chunk_pop")


def _replayable(logic, key, seen: set) -> str | None:
    """Why the reverse function of the pair ``key`` cannot replay its tape (None: it can). It can when each call
    of its reverse code that releases memory is one the maker recorded (:attr:`ReverseMode.reverse_frees`) and
    the reverse functions of its callees can too."""
    if key in seen:
        return None
    seen.add(key)
    maker = logic.split_makers[key]
    if "parallel" in key or getattr(maker.module, "enzcc_chunked_tape", False):
        return "its reverse code runs in an OpenMP parallel region or in nested AD"
    hints = hints_of(maker.module)
    releasing = set(_RELEASING) | {shadow_reuse.RELEASE} | set(hints.deallocators) | \
        {rev for _, rev in hints.gradient.values()}
    for block in _frame(maker).back:
        for inst in block.instructions:
            if not isinstance(inst, Call):
                continue
            noted = maker.reverse_frees.get(id(inst))
            if noted is not None and noted[1] == NESTED_REVERSE:
                why = _replayable(logic, logic.pair_keys[inst.callee_name], seen) \
                    if inst.callee_name in logic.pair_keys else "a callee's reverse function is unknown"
                if why is not None:
                    return why
            elif noted is None and (inst.callee_name in releasing or inst.callee_name in logic.pair_keys):
                return f"its reverse code calls '{inst.callee_name}'"
    return None


def replay_variant(logic, key):
    """The reverse function of the pair ``key`` for ``__enzyme_reverse`` with ``enzyme_nofree``, which may run
    several times on one tape (as Enzyme's, which reads its tape without consuming it): it works on a copy of the
    frame and releases nothing (the loop tape, the callees' tapes and the primal memory the reverse code reads
    stay for the next run; shadow memory is zeroed instead of freed). None when the reverse code releases
    memory enzcc does not know how to keep (:func:`_replayable`)."""
    vkey = key + ("replay",)
    if vkey in logic.cache:
        return logic.cache[vkey]
    if _replayable(logic, key, set()) is not None:
        logic.cache[vkey] = None
        return None
    maker = logic.split_makers[key]
    _, rev = logic.cache[key][:2]
    fn = _declare(logic.module, maker.dc.fn, f"{rev.name}_replay", rev.function_type)
    logic.cache[vkey] = fn  # (before the body: a recursive callee finds it)
    _cut_reverse(maker, fn, buffer=True, replay=True, logic=logic)
    return fn


def _zero_block_fn(module) -> Function:
    """``zero(p)``: the whole heap block ``p`` (null: nothing) set to zero."""
    name = "__enzcc_zero_block"
    fn = module.functions.get(name)
    if fn is None:
        fn = Function(name, T.FunctionType(T.void, (T.ptr,)))
        fn.linkage = "internal"
        module.add_function(fn)
        entry, zero, done = fn.append_block("entry"), fn.append_block("zero"), fn.append_block("done")
        b = IRBuilder.at_end(entry)
        (p,) = fn.args
        b.cond_br(b.icmp("eq", p, ConstantNull(T.ptr)), done, zero)
        z = IRBuilder.at_end(zero)
        usable = module.get_or_insert_function("malloc_usable_size", T.FunctionType(T.i64, (T.ptr,)))
        z.memset(p, 0, z.call(usable, [p]))
        z.br(done)
        IRBuilder.at_end(done).ret_void()
    return fn


# -- frames kept for the next call --------------------------------------------------------------------


def _new_frame(maker, b: IRBuilder, size: int, align: int) -> Value:
    """The frame of one augmented call: a frame an earlier reverse call of the same pair gave back, else new heap
    memory. A derived call in a loop (each stage of a simulation's step a function of its own) made a ``malloc``
    of a 3-5 KB frame per iteration and the reverse sweep a ``free`` of it: glibc serves such sizes from its
    bins, not its per-thread cache, and gives the top of the heap back to the kernel when the sweep has freed
    it (REBOUND over 1000 steps: 40% of the gradient's time in malloc, free and page faults). Frames of one pair
    all have its size, so a pool per pair (:func:`enzcc.ad.tape.pool_of`) serves them in any order."""
    module = maker.G.module
    size = max(size, POOL_NODE if pooling(module) else 1)
    if align > 16:  # (more than malloc guarantees on the hosts enzcc targets)
        size = -(-size // align) * align
    maker.frame_bytes = size
    if not pooling(module):
        return b.call(*heap_allocation(module, size, align))
    return b.call(frame_take_fn(module), [pool_of(maker, "frames"), ConstantInt(T.i64, size),
                                          ConstantInt(T.i64, align)])


def _release_frame(maker, b: IRBuilder, frame: Value) -> None:
    """At the end of a reverse call: its frame back to the pool of its pair (:func:`_new_frame`), or freed."""
    module = maker.G.module
    if not pooling(module):
        b.call(module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,))), [frame])
        return
    b.call(pool_give_fn(module), [pool_of(maker, "frames"), frame, ConstantInt(T.i64, maker.frame_bytes)])


def _alloca_type(a: Alloca, layout) -> T.Type:
    """The frame field of a stack slot. A slot aligned past its type's own alignment (``alloca [2 x double],
    align 16``, whose users may store a 16-byte vector at ``align 16``) gets a field of that alignment: the
    type led by a zero-length array of that many bytes as a vector (``{ [0 x <16 x i8>], [2 x double] }``: the
    same address, and that alignment in the frame's layout); a plain field could fall at an offset that is a
    multiple of 8 only, where a ``movapd`` faults."""
    n = a.num_elements
    ty = a.allocated_type
    if not (n is None or (isinstance(n, ConstantInt) and n.value == 1)):
        ty = T.ArrayType(n.value, a.allocated_type)
    if a.align and a.align > layout.abi_alignment(ty):
        ty = T.StructType((T.ArrayType(0, T.VectorType(a.align, T.i8)), ty))
    return ty


TAPE_RELEASE = "__enzcc_tape_release"

__all__ = ["buffer_variant", "make_split", "replay_variant"]
