"""The tape: a growable LIFO byte buffer private to one derivative call, plus small runtime helpers
emitted into the module once (as internal functions the optimizer inlines). When a later round of AD
differentiates the derivatives (nested AD, ``module.enzcc_chunked_tape``), the tape is a chain of chunks instead,
never reallocated or copied (:meth:`Tape._chunk_reserve_fn`).

When the module's derivatives are not differentiated again and it runs on a CPU
(``module.enzcc_reuse_tape``), a finished call hands its buffer to the next one instead of freeing it
(:data:`SPARE`, one buffer per module, taken and given back with an atomic exchange, kept only up to
:data:`KEEP_LIMIT` bytes): repeated gradient calls then neither grow a new buffer nor fault its pages in again.
"""

from __future__ import annotations

import zlib

from enzcc.ad.emit import round_function
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.function import Function
from enzcc.ir.values import ConstantInt, ConstantNull, Value

STATE = T.StructType((T.ptr, T.i64, T.i64))  # buffer, used bytes, capacity
SLOT = 8
SPARE = "__enzcc_tape_spare"
"""Internal global: a finished call's buffer (its capacity in its first 8 bytes), or null."""
KEEP_LIMIT = 64 << 20
"""Buffers larger than this are freed, not kept."""
FIRST = 4096
"""The least capacity of a tape's buffer on a CPU."""
SPLIT_FIRST = 256
"""The least capacity of the tape of a split pair (:mod:`enzcc.ad.split`): its augmented calls in a loop each
hold one until the reverse sweep, mostly a few records each (REBOUND: six per leapfrog step, 4 KiB each made
24 MB of buffers over 1,000 steps, whose cache misses cost more than the growth of a buffer that needs more)."""
CHUNK = 64 << 10
"""Bytes of a chunk of a tape that a later round of AD differentiates (``module.enzcc_chunked_tape``)."""
CHUNK_HEADER = 24
"""A chunk starts with the previous chunk, its used bytes and its capacity."""


def slot_size(module, ty: T.Type) -> int:
    size = module.data_layout.store_size(ty)
    return (size + SLOT - 1) // SLOT * SLOT


def _counter(inst):
    """Tag a load or store of a tape's byte counts (``used``, ``capacity``) as an integer access (``!tbaa``
    "long" under a root of enzcc's own, which orders nothing against the program's accesses). When the tape
    lives in memory with derivatives (a callee's tape record in nested AD), the next round's activity analysis
    then knows these bits are no float (see ``enzcc.ad.activity._integer_tbaa``)."""
    module = inst.module
    tag = getattr(module, "_enzcc_counter_tbaa", None)
    if tag is None:
        root = module.add_metadata('!{!"enzcc tape"}')
        char = module.add_metadata(f'!{{!"omnipotent char", {root}, i64 0}}')
        long = module.add_metadata(f'!{{!"long", {char}, i64 0}}')
        tag = module.add_metadata(f"!{{{long}, {long}, i64 0}}")
        module._enzcc_counter_tbaa = tag
    inst.set_metadata("tbaa", tag)
    return inst


class Tape:
    def __init__(self, module, fn: Function, first: int = None):
        self.module = module
        self.fn = fn
        self.first = FIRST if first is None else first
        """The least capacity of its buffer (:data:`FIRST`; a split pair's tape: :data:`SPLIT_FIRST`)."""
        b = IRBuilder.at_start(fn.entry_block)
        self.state = b.alloca(STATE, in_entry=True)
        first = next(i for i in fn.entry_block.instructions if i.opcode != "alloca")
        fb = IRBuilder.before(first)
        self._init = store_state(fb, self.state, ConstantNull(T.ptr), ConstantInt(T.i64, 0))
        self._frees: list = []
        self.used = False
        """Some record is pushed: see :meth:`finish`."""

    # -- runtime helpers (defined once per module) -------------------------------------------------

    def _helper(self, name: str, ftype: T.FunctionType, body) -> Function:
        return round_function(self.module, name, ftype, body)

    def _abort_if_null(self, fn: Function, b: IRBuilder, p: Value, name: str, size: Value | None = None) -> IRBuilder:
        return _abort_if_null(self.module, fn, b, p, name, size)

    def _libc(self, name: str, ftype: T.FunctionType) -> Function:
        return self.module.get_or_insert_function(name, ftype)

    def reserve_fn(self) -> Function:
        if getattr(self.module, "enzcc_chunked_tape", False):
            return self._chunk_reserve_fn()
        return reserve_helper(self.module, self.first)

    def pop_fn(self) -> Function:
        if getattr(self.module, "enzcc_chunked_tape", False):
            return self._chunk_pop_fn()

        def body(fn):
            s, n = fn.args
            b = IRBuilder.at_end(fn.append_block("entry"))
            used_p = b.struct_gep(STATE, s, 1)
            new = b.sub(_counter(b.load(T.i64, used_p)), n)
            _counter(b.store(new, used_p))
            b.ret(b.gep(T.i8, b.load(T.ptr, s), [new]))
        return self._helper("__enzcc_tape_pop", T.FunctionType(T.ptr, (T.ptr, T.i64)), body)

    # -- chunks: the tape of derivatives that a later round differentiates again --------------------

    def _chunk_reserve_fn(self) -> Function:
        """``reserve(state, n)`` on a chain of chunks: a record that does not fit starts a new chunk, whose
        header keeps the previous chunk and its used bytes and capacity. Nothing is ever copied or reallocated,
        so the next round of AD (nested AD) differentiates plain stores and loads of typed values, not a
        ``realloc`` or ``memcpy`` of records whose layout it cannot know."""
        def body(fn):
            s, n = fn.args
            entry, grow, ok = fn.append_block("entry"), fn.append_block("grow"), fn.append_block("ok")
            b = IRBuilder.at_end(entry)
            used_p, cap_p = b.struct_gep(STATE, s, 1), b.struct_gep(STATE, s, 2)
            buf = b.load(T.ptr, s)
            used = _counter(b.load(T.i64, used_p))
            cap = _counter(b.load(T.i64, cap_p))
            b.cond_br(b.icmp("ugt", b.add(used, n), cap), grow, ok)
            g = IRBuilder.at_end(grow)
            want = g.call_intrinsic("llvm.umax", [g.add(n, ConstantInt(T.i64, CHUNK_HEADER)),
                                                  ConstantInt(T.i64, CHUNK)], [T.i64])
            nb = g.call(self._libc("malloc", T.FunctionType(T.ptr, (T.i64,))), [want])
            k = self._abort_if_null(fn, g, nb, "linked", want)
            good = k.block
            k.store(buf, nb)
            _counter(k.store(used, k.gep(T.i8, nb, [ConstantInt(T.i64, 8)])))
            _counter(k.store(cap, k.gep(T.i8, nb, [ConstantInt(T.i64, 16)])))
            k.store(nb, s)
            _counter(k.store(want, cap_p))
            k.br(ok)
            o = IRBuilder.at_end(ok)
            base = o.phi(T.ptr, [(buf, entry), (nb, good)])
            at = o.phi(T.i64, [(used, entry), (ConstantInt(T.i64, CHUNK_HEADER), good)])
            _counter(o.store(o.add(at, n), used_p))
            o.ret(o.gep(T.i8, base, [at]))
        return self._chunk_helper("__enzcc_tape_chunk_reserve", body)

    def _chunk_pop_fn(self) -> Function:
        """``pop(state, n)`` on a chain of chunks: an emptied chunk is freed and its predecessor resumed."""
        def body(fn):
            s, n = fn.args
            entry, back, take = fn.append_block("entry"), fn.append_block("back"), fn.append_block("take")
            b = IRBuilder.at_end(entry)
            used_p, cap_p = b.struct_gep(STATE, s, 1), b.struct_gep(STATE, s, 2)
            used = _counter(b.load(T.i64, used_p))
            b.cond_br(b.icmp("eq", used, ConstantInt(T.i64, CHUNK_HEADER)), back, take)
            k = IRBuilder.at_end(back)
            buf = k.load(T.ptr, s)
            prev = k.load(T.ptr, buf)
            prev_used = _counter(k.load(T.i64, k.gep(T.i8, buf, [ConstantInt(T.i64, 8)])))
            prev_cap = _counter(k.load(T.i64, k.gep(T.i8, buf, [ConstantInt(T.i64, 16)])))
            k.call(self._libc("free", T.FunctionType(T.void, (T.ptr,))), [buf])
            k.store(prev, s)
            _counter(k.store(prev_cap, cap_p))
            k.br(take)
            t = IRBuilder.at_end(take)
            at = t.phi(T.i64, [(used, entry), (prev_used, back)])
            new = t.sub(at, n)
            _counter(t.store(new, used_p))
            t.ret(t.gep(T.i8, t.load(T.ptr, s), [new]))
        return self._chunk_helper("__enzcc_tape_chunk_pop", body)

    def _chunk_helper(self, name: str, body) -> Function:
        """A chunk helper stays a call until the next round of AD inlines it into its prepared copy: inlined by
        the optimizer in between, its branches were threaded through the derivative's loops into irreducible
        control flow, which that round cannot differentiate."""
        fn = self._helper(name, T.FunctionType(T.ptr, (T.ptr, T.i64)), body)
        if "noinline" not in fn.fn_attrs:
            fn.fn_attrs = [*fn.fn_attrs, "noinline"]
        return fn

    def memcpy_adjoint_helper(self, elem: T.Type, atomic: bool = False) -> Function:
        """``helper(ddst, dsrc, nbytes, has_src)``: ``dsrc[i] += ddst[i]; ddst[i] = 0`` element-wise: the
        reverse of ``memcpy(dst, src, nbytes)`` or ``memmove`` on floating-point data (``atomic``: the adds to
        ``dsrc`` are atomic, for code that runs in several threads at once). Overlapping shadows (a memmove
        within one array) are walked from the end that ``dsrc`` leaves first, opposite to the copy itself, so
        that no element's adjoint is read after an addition into it: downwards when ``ddst`` lies below
        ``dsrc``, upwards otherwise."""
        size = self.module.data_layout.store_size(elem)

        def body(fn):
            ddst, dsrc, nbytes, has_src = fn.args
            entry, nonempty, up, down, done = (fn.append_block(n) for n in ("entry", "nonempty", "up", "down", "done"))
            b = IRBuilder.at_end(entry)
            count = b.udiv(nbytes, ConstantInt(T.i64, size))
            b.cond_br(b.icmp("eq", count, ConstantInt(T.i64, 0)), done, nonempty)
            nb = IRBuilder.at_end(nonempty)
            nb.cond_br(nb.icmp("ult", ddst, dsrc), down, up)

            def move(lb: IRBuilder, i: Value) -> None:
                pd = lb.gep(elem, ddst, [i])
                d = lb.load(elem, pd)
                lb.store(IRBuilder.const_zero(elem), pd)
                ps = lb.gep(elem, dsrc, [i])
                if atomic:  # (has_src false: dsrc is ddst, whose element is zero now)
                    lb.atomic_rmw("fadd", ps, lb.select(has_src, d, IRBuilder.const_zero(elem)), "monotonic")
                else:
                    old = lb.load(elem, ps)
                    lb.store(lb.select(has_src, lb.fadd(old, d), old), ps)

            ub = IRBuilder.at_end(up)
            i = ub.phi(T.i64, [(ConstantInt(T.i64, 0), nonempty)])
            move(ub, i)
            nxt = ub.add(i, ConstantInt(T.i64, 1))
            i.add_incoming(nxt, up)
            ub.cond_br(ub.icmp("eq", nxt, count), done, up)
            db = IRBuilder.at_end(down)
            j = db.phi(T.i64, [(count, nonempty)])
            prev = db.sub(j, ConstantInt(T.i64, 1))
            move(db, prev)
            j.add_incoming(prev, down)
            db.cond_br(db.icmp("eq", prev, ConstantInt(T.i64, 0)), done, down)
            IRBuilder.at_end(done).ret_void()
        return self._helper(f"__enzcc_memcpy_adjoint{'_atomic' if atomic else ''}_{elem}",
                            T.FunctionType(T.void, (T.ptr, T.ptr, T.i64, T.i1)),
                            body)

    # -- use ----------------------------------------------------------------------------------------

    def _layout(self, types: list[T.Type]) -> tuple[list[int], int]:
        """A record of ``types``: each value's offset (a whole number of slots) and the record's bytes."""
        offsets, total = [], 0
        for t in types:
            offsets.append(total)
            total += slot_size(self.module, t)
        return offsets, total

    @property
    def can_reserve_ahead(self) -> bool:
        """Whether :meth:`reserve_ahead` is possible (not on a tape of chunks)."""
        return not getattr(self.module, "enzcc_chunked_tape", False)

    def reserve_ahead(self, b: IRBuilder, count: Value, types: list[T.Type]) -> None:
        """At a loop's entry: room for ``count`` (an i64) more records of ``types``, which the loop then pushes
        with ``reserved=True``, without a test of the capacity in each iteration. A count of 0 (a loop that
        runs at least once, so one whose count wrapped around) or one past what memory can hold asks for more
        than realloc gives, which aborts."""
        size = self._layout(types)[1]
        most = ConstantInt(T.i64, (1 << 62) // size)
        count = b.select(b.icmp("eq", count, ConstantInt(T.i64, 0)), most, count)
        count = b.select(b.icmp("ugt", count, most), most, count)
        b.call(ensure_helper(self.module, self.first), [self.state, b.mul(count, ConstantInt(T.i64, size))])

    def _bump_fn(self) -> Function:
        """``bump(state, n) -> ptr``: the next ``n`` bytes, which :meth:`reserve_ahead` made room for."""
        def body(fn):
            s, n = fn.args
            b = IRBuilder.at_end(fn.append_block("entry"))
            used_p = b.struct_gep(STATE, s, 1)
            used = _counter(b.load(T.i64, used_p))
            _counter(b.store(b.add(used, n), used_p))
            b.ret(b.gep(T.i8, b.load(T.ptr, s), [used]))
        return self._helper("__enzcc_tape_bump", T.FunctionType(T.ptr, (T.ptr, T.i64)), body)

    def push_values(self, b: IRBuilder, values: list[Value], types: list[T.Type], reserved: bool = False) -> None:
        """Push ``values`` as one record (the last value ends up on top); ``reserved``: there is room for it
        (:meth:`reserve_ahead`)."""
        offsets, total = self._layout(types)
        p = b.call(self._bump_fn() if reserved else self.reserve_fn(), [self.state, ConstantInt(T.i64, total)])
        self.used = True
        for v, off in zip(values, offsets):
            q = b.gep(T.i8, p, [ConstantInt(T.i64, off)]) if off else p
            b.store(v, q, align=SLOT)

    def pop_values(self, b: IRBuilder, types: list[T.Type]) -> list[Value]:
        """Pop one record pushed by :meth:`push_values` with the same types."""
        offsets, total = self._layout(types)
        p = b.call(self.pop_fn(), [self.state, ConstantInt(T.i64, total)])
        out = []
        for t, off in zip(types, offsets):
            q = b.gep(T.i8, p, [ConstantInt(T.i64, off)]) if off else p
            out.append(b.load(t, q, align=SLOT))
        return out

    def pop_value(self, b: IRBuilder, ty: T.Type) -> Value:
        return self.pop_values(b, [ty])[0]

    def free(self, b: IRBuilder) -> None:
        buf = b.load(T.ptr, b.struct_gep(STATE, self.state, 0))
        self._frees.append(b.call(self._libc("free", T.FunctionType(T.void, (T.ptr,))), [buf]))

    def finish(self, owner=None) -> None:
        """Once every record is pushed: a tape in use takes the buffer a finished call left (:data:`SPARE`)
        and leaves its own to the next call, where the module allows it (``module.enzcc_reuse_tape``).
        ``owner``: the maker of a split pair (:mod:`enzcc.ad.split`), whose tapes go to the pair's pool
        (:func:`pool_of`) instead: its augmented calls in a loop all hold a tape until the reverse sweep, one
        spare served one of them and each of the others grew a buffer of its own (REBOUND: 6,000 4 KiB
        buffers a gradient of 1,000 steps)."""
        if not (self.used and getattr(self.module, "enzcc_reuse_tape", False)):
            return
        pool = pool_of(owner, "tapes") if owner is not None and pooling(self.module) else None
        first = IRBuilder.before(self._init[0])
        if pool is None:
            first.call(self._take_fn(), [self.state])
        else:
            first.call(_pooled_take_fn(self.module), [self.state, pool])
        for inst in reversed(self._init):
            if inst is not self.state and not inst.uses:
                inst.erase()
        for call in self._frees:
            load = call.args[0]
            if pool is None:
                IRBuilder.before(call).call(self._release_fn(), [self.state])
            else:
                IRBuilder.before(call).call(_pooled_release_fn(self.module), [self.state, pool])
            call.erase()
            if not load.uses:
                load.erase()

    def _spare(self):
        if SPARE not in self.module.globals:
            self.module.add_global(SPARE, T.ptr, ConstantNull(T.ptr), align=8)
        return self.module.global_ref(SPARE)

    def _take_fn(self) -> Function:
        """``take(state)``: the state starts on the spare buffer if there is one, else empty."""
        def body(fn):
            (s,) = fn.args
            entry, got, empty = fn.append_block("entry"), fn.append_block("got"), fn.append_block("empty")
            b = IRBuilder.at_end(entry)
            p = b.atomic_rmw("xchg", self._spare(), ConstantNull(T.ptr), "acq_rel", align=8)
            b.cond_br(b.icmp("eq", p, ConstantNull(T.ptr)), empty, got)
            g = IRBuilder.at_end(got)
            store_state(g, s, p, g.load(T.i64, p))
            g.ret_void()
            e = IRBuilder.at_end(empty)
            store_state(e, s, ConstantNull(T.ptr), ConstantInt(T.i64, 0))
            e.ret_void()
        return self._helper("__enzcc_tape_take", T.FunctionType(T.void, (T.ptr,)), body)

    def _release_fn(self) -> Function:
        """``release(state)``: the buffer becomes the spare (a spare left meanwhile is freed), or is freed
        when it is larger than :data:`KEEP_LIMIT`."""
        def body(fn):
            (s,) = fn.args
            b = IRBuilder.at_end(fn.append_block("entry"))
            buf = b.load(T.ptr, b.struct_gep(STATE, s, 0))
            cap = b.load(T.i64, b.struct_gep(STATE, s, 2))
            keep_or_free(fn, b, self._spare(), buf, cap, self._libc("free", T.FunctionType(T.void, (T.ptr,))),
                         lambda k: k.store(cap, buf))  # (the next take finds the capacity at the start)
        return self._helper("__enzcc_tape_release", T.FunctionType(T.void, (T.ptr,)), body)



def _grow_if_needed(module, fn: Function, b: IRBuilder, s: Value, used: Value, new: Value, name: str,
                    exact: bool = False, first: int = None) -> IRBuilder:
    """At ``b``: when ``new`` bytes exceed the capacity of the state ``s`` (``used`` bytes of it in use),
    reallocate its buffer (doubled, at least ``first`` bytes (:data:`FIRST`), at least ``new``; abort when memory
    runs out). Returns a builder at a new block ``name``. On a GPU: :func:`_grow_on_device`."""
    first = FIRST if first is None else first
    grow, ok = fn.append_block("grow"), fn.append_block(name)
    cap_p = b.struct_gep(STATE, s, 2)
    cap = _counter(b.load(T.i64, cap_p))
    b.cond_br(b.icmp("ugt", new, cap), grow, ok)
    g = IRBuilder.at_end(grow)
    if module.targets_gpu:
        gs, want = _grow_on_device(module, fn, g, s, cap, used, new, exact)
    else:
        doubled = g.shl(cap, 1)
        want = g.select(g.icmp("ugt", new, doubled), new, doubled)
        want = g.select(g.icmp("ult", want, ConstantInt(T.i64, first)), ConstantInt(T.i64, first), want)
        buf = g.load(T.ptr, s)
        realloc = module.get_or_insert_function("realloc", T.FunctionType(T.ptr, (T.ptr, T.i64)))
        nb = g.call(realloc, [buf, want])
        gs = _abort_if_null(module, fn, g, nb, "stored")
        gs.store(nb, s)
    _counter(gs.store(want, cap_p))
    gs.br(ok)
    return IRBuilder.at_end(ok)


DEVICE_FIRST = 256
"""Bytes of the first buffer of a device tape that grows (one per thread, from the device heap: 8 MiB by
default for the whole GPU)."""


def _grow_on_device(module, fn: Function, g: IRBuilder, s: Value, cap: Value, used: Value, new: Value,
                    exact: bool) -> tuple[IRBuilder, Value]:
    """The growth of a tape in GPU code, which has ``malloc`` and ``free`` but no ``realloc``: a new buffer,
    the ``used`` bytes copied into it, the old one freed. Its size: ``new`` bytes, at least double the old one
    (amortized copies) and, unless ``exact``, at least :data:`DEVICE_FIRST`: a tape's first buffer made at the
    entry of a loop whose records are counted there (``exact``) holds just those, each thread's tape taking no
    more of the small device heap than it needs. A failed ``malloc`` stops the kernel saying how to raise the
    device heap's size. Returns a builder in the block where the buffer is in place, and its size."""
    doubled = g.shl(cap, 1)
    want = g.select(g.icmp("ugt", new, doubled), new, doubled)
    if not exact:
        want = g.select(g.icmp("ult", want, ConstantInt(T.i64, DEVICE_FIRST)), ConstantInt(T.i64, DEVICE_FIRST),
                        want)
    malloc = module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,)))
    nb = g.call(malloc, [want])
    gs = _abort_if_null(module, fn, g, nb, "stored", size=want)
    buf = gs.load(T.ptr, s)
    gs.memcpy(nb, buf, used)
    gs.call(module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,))), [buf])
    gs.store(nb, s)
    return gs, want


def _sized(name: str, first: int) -> str:
    """The name of a helper for tapes of least capacity ``first``."""
    return name if first == FIRST else f"{name}_{first}"


def reserve_helper(module, first: int = None) -> Function:
    """``reserve(state, n) -> ptr``: ``n`` more bytes at the end of the growing buffer of ``state``
    (``{ptr, i64 used, i64 capacity}``), reallocated (doubled, at least ``first`` bytes) when they do not fit;
    aborts when memory runs out."""
    first = FIRST if first is None else first
    def body(fn):
        s, n = fn.args
        b = IRBuilder.at_end(fn.append_block("entry"))
        used_p = b.struct_gep(STATE, s, 1)
        used = _counter(b.load(T.i64, used_p))
        new = b.add(used, n)
        o = _grow_if_needed(module, fn, b, s, used, new, "ok", first=first)
        cur = o.load(T.ptr, s)
        p = o.gep(T.i8, cur, [used])
        _counter(o.store(new, used_p))
        o.ret(p)
    return round_function(module, _sized("__enzcc_tape_reserve", first), T.FunctionType(T.ptr, (T.ptr, T.i64)),
                          body)


def ensure_helper(module, first: int = None) -> Function:
    """``ensure(state, n)``: ``n`` more bytes fit in the buffer of ``state`` without growing it again (it grows
    now if they do not; on a GPU, a first buffer of exactly that size: the records of a loop whose count is
    known at its entry); nothing is pushed."""
    def body(fn):
        s, n = fn.args
        b = IRBuilder.at_end(fn.append_block("entry"))
        used = _counter(b.load(T.i64, b.struct_gep(STATE, s, 1)))
        _grow_if_needed(module, fn, b, s, used, b.add(used, n), "ok", exact=True, first=first).ret_void()
    first = FIRST if first is None else first
    return round_function(module, _sized("__enzcc_tape_ensure", first), T.FunctionType(T.void, (T.ptr, T.i64)),
                          body)


HEAP_MESSAGE = ("enzcc: a derivative's tape needs %llu bytes more of the device heap in a thread, and the heap is "
                "full: raise its size with cudaDeviceSetLimit(cudaLimitMallocHeapSize, bytes) before the kernel "
                "runs (8 MiB by default)\n")
"""What a kernel prints (``vprintf``) before it stops when its tape finds the device heap full."""


def _abort_if_null(module, fn: Function, b: IRBuilder, p: Value, name: str, size: Value | None = None) -> IRBuilder:
    """At ``b``: abort when the allocation ``p`` (of ``size`` bytes) failed; returns a builder at the end of the
    block where it did not (named ``name``). GPU code has no ``abort``: it stops with ``llvm.trap``, after
    printing :data:`HEAP_MESSAGE` (NVPTX)."""
    fail, good = fn.append_block("fail"), fn.append_block(name)
    b.cond_br(b.icmp("eq", p, ConstantNull(T.ptr)), fail, good)
    f = IRBuilder.at_end(fail)
    if module.targets_gpu:
        if (module.triple or "").startswith("nvptx"):
            _device_print(module, f, HEAP_MESSAGE, size if size is not None else ConstantInt(T.i64, 0))
        f.call_intrinsic("llvm.trap", [], overload_types=[], function_type=T.FunctionType(T.void, ()))
    else:
        f.call(module.get_or_insert_function("abort", T.FunctionType(T.void, ())), [])
    f.unreachable()
    return IRBuilder.at_end(good)


def _device_print(module, b: IRBuilder, text: str, value: Value) -> None:
    """``printf(text, value)`` in NVPTX code: ``vprintf`` with the format and a buffer holding the i64 ``value``."""
    from enzcc.ir.values import ConstantString

    data = text.encode() + b"\0"
    name = f"__enzcc_message_{zlib.crc32(data):08x}"  # (one per module and text)
    ty = T.ArrayType(len(data), T.i8)
    if name not in module.globals:
        module.add_global(name, ty, ConstantString(ty, data), constant=True, linkage="private")
    args = b.alloca(T.i64, in_entry=True)
    b.store(value, args, align=8)
    vprintf = module.get_or_insert_function("vprintf", T.FunctionType(T.i32, (T.ptr, T.ptr)))
    b.call(vprintf, [module.global_ref(name), args])


def keep_or_free(fn: Function, b: IRBuilder, spare: Value, buf: Value, size: Value, free: Function,
                 before_keeping=None) -> None:
    """The end of a helper that gives ``buf`` (``size`` bytes, or null) back, emitted at ``b``: it becomes the
    ``spare`` (the one there meanwhile is freed) when it is not null and at most :data:`KEEP_LIMIT` bytes, else
    it is freed; then ``ret void``. ``before_keeping(builder)`` emits what comes first when it is kept."""
    keep, freeold, drop, done = (fn.append_block(x) for x in ("keep", "free_old", "drop", "done"))
    small = b.icmp("ule", size, ConstantInt(T.i64, KEEP_LIMIT))
    b.cond_br(b.and_(small, b.icmp("ne", buf, ConstantNull(T.ptr))), keep, drop)
    k = IRBuilder.at_end(keep)
    if before_keeping is not None:
        before_keeping(k)
    old = k.atomic_rmw("xchg", spare, buf, "acq_rel", align=8)
    k.cond_br(k.icmp("eq", old, ConstantNull(T.ptr)), done, freeold)
    f = IRBuilder.at_end(freeold)
    f.call(free, [old])
    f.br(done)
    d = IRBuilder.at_end(drop)
    d.call(free, [buf])
    d.br(done)
    IRBuilder.at_end(done).ret_void()


def store_state(b: IRBuilder, state: Value, buf: Value, capacity: Value) -> list:
    """Start a state on ``buf`` of ``capacity`` bytes, none used; returns the instructions."""
    out = []
    for field, value in enumerate((buf, ConstantInt(T.i64, 0), capacity)):
        gep = b.struct_gep(STATE, state, field)
        out += [gep, b.store(value, gep)]
    return out


# -- pools: heap blocks a split pair's calls hand on to its next ones -----------------------------------------

POOL = "__enzcc_pool"
"""Per split pair: a thread-local pool ``{ptr head, i64 bytes, i64 registered}`` of blocks (its frames and its
tapes' buffers) that its reverse calls gave back. A block in a pool holds its size in its first 8 bytes and the
next block in the next 8."""
POOL_TYPE = T.StructType((T.ptr, T.i64, T.i64))
POOL_NODE = 16
"""The least size of a pooled block."""
POOLED_RELEASE = "__enzcc_tape_release_pooled"


def pooling(module) -> bool:
    """Whether split pairs keep their blocks in pools: where the tape is reused too (no later round of AD
    differentiates the derivatives, no GPU: ``module.enzcc_reuse_tape``) and on glibc, whose
    ``__cxa_thread_atexit_impl`` frees a thread's pools when the thread ends."""
    return bool(getattr(module, "enzcc_reuse_tape", False)) and "-linux-gnu" in (module.triple or "")


def pool_of(owner, kind: str) -> Value:
    """The thread-local pool global of ``kind`` (``frames``: all of one size; ``tapes``: buffers of any
    capacity) of the split pair whose maker is ``owner`` (made on first request)."""
    module = owner.G.module
    names = owner.__dict__.setdefault("pool_names", {})
    name = names.get(kind)
    if name is None:
        k = 0
        while f"{POOL}.{kind}.{k}" in module.globals:
            k += 1
        name = names[kind] = f"{POOL}.{kind}.{k}"
        gv = module.add_global(name, POOL_TYPE, None, align=8)
        gv.text = gv.text.replace(" = internal global ", " = internal thread_local global ", 1)
    return module.global_ref(name)


def heap_allocation(module, size, align):
    """(function, arguments) of a heap allocation of ``size`` bytes: ``malloc``, or ``aligned_alloc`` when
    ``align`` is not a constant of at most 16 (what malloc guarantees on the hosts enzcc targets)."""
    as_value = lambda v: v if isinstance(v, Value) else ConstantInt(T.i64, v)  # noqa: E731
    if isinstance(align, int) and align <= 16:
        return module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,))), [as_value(size)]
    return (module.get_or_insert_function("aligned_alloc", T.FunctionType(T.ptr, (T.i64, T.i64))),
            [as_value(align), as_value(size)])


def _pool_pop(fn, b: IRBuilder, pool: Value, empty) -> tuple[IRBuilder, Value]:
    """At ``b``: the pool's first block taken off it (a builder after that, and the block), or a branch to
    ``empty`` (a thread's first use of the pool registers :func:`_pool_drain_fn` on the way there)."""
    module = fn.module
    reuse, fresh, register = (fn.append_block(x) for x in ("reuse", "fresh", "register"))
    head = b.load(T.ptr, pool)
    b.cond_br(b.icmp("eq", head, ConstantNull(T.ptr)), fresh, reuse)
    f = IRBuilder.at_end(fresh)
    registered = f.struct_gep(POOL_TYPE, pool, 2)
    f.cond_br(f.icmp("eq", f.load(T.i64, registered), ConstantInt(T.i64, 0)), register, empty)
    g = IRBuilder.at_end(register)
    g.store(ConstantInt(T.i64, 1), registered)
    if "__dso_handle" not in module.globals:
        module.add_global("__dso_handle", T.i8, None, linkage="external")
        module.globals["__dso_handle"].text = "@__dso_handle = external hidden global i8"
    atexit = module.get_or_insert_function("__cxa_thread_atexit_impl", T.FunctionType(T.i32, (T.ptr, T.ptr, T.ptr)))
    g.call(atexit, [module.global_ref(_pool_drain_fn(module).name), pool, module.global_ref("__dso_handle")])
    g.br(empty)
    r = IRBuilder.at_end(reuse)
    r.store(r.load(T.ptr, r.gep(T.i8, head, [ConstantInt(T.i64, 8)])), pool)
    held = r.struct_gep(POOL_TYPE, pool, 1)
    r.store(r.sub(r.load(T.i64, held), r.load(T.i64, head)), held)
    return r, head


def frame_take_fn(module) -> Function:
    """``take(pool, size, align)``: the pool's first block (a frame of its pair, ``size`` bytes), else new
    memory."""
    def body(fn):
        pool, size, align = fn.args
        entry, alloc = fn.append_block("entry"), fn.append_block("alloc")
        r, head = _pool_pop(fn, IRBuilder.at_end(entry), pool, alloc)
        r.ret(head)
        a = IRBuilder.at_end(alloc)
        small, big = fn.append_block("small"), fn.append_block("big")
        a.cond_br(a.icmp("ule", align, ConstantInt(T.i64, 16)), small, big)
        s = IRBuilder.at_end(small)
        s.ret(s.call(*heap_allocation(module, size, 16)))
        g = IRBuilder.at_end(big)
        g.ret(g.call(*heap_allocation(module, size, align)))
    return round_function(module, "__enzcc_frame_take", T.FunctionType(T.ptr, (T.ptr, T.i64, T.i64)), body)


def pool_give_fn(module) -> Function:
    """``give(pool, block, size)``: the block goes first in the pool, or is freed when the pool would hold more
    than :data:`KEEP_LIMIT` bytes."""
    def body(fn):
        pool, block, size = fn.args
        entry, keep, drop = (fn.append_block(x) for x in ("entry", "keep", "drop"))
        b = IRBuilder.at_end(entry)
        held_p = b.struct_gep(POOL_TYPE, pool, 1)
        held = b.add(b.load(T.i64, held_p), size)
        b.cond_br(b.icmp("ugt", held, ConstantInt(T.i64, KEEP_LIMIT)), drop, keep)
        k = IRBuilder.at_end(keep)
        k.store(size, block)
        k.store(k.load(T.ptr, pool), k.gep(T.i8, block, [ConstantInt(T.i64, 8)]))
        k.store(block, pool)
        k.store(held, held_p)
        k.ret_void()
        d = IRBuilder.at_end(drop)
        d.call(module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,))), [block])
        d.ret_void()
    return round_function(module, "__enzcc_pool_give", T.FunctionType(T.void, (T.ptr, T.ptr, T.i64)), body)


def _pooled_take_fn(module) -> Function:
    """``take(state, pool)``: the tape starts on the pool's first block (its size is the capacity), else empty."""
    def body(fn):
        s, pool = fn.args
        entry, empty = fn.append_block("entry"), fn.append_block("empty")
        r, head = _pool_pop(fn, IRBuilder.at_end(entry), pool, empty)
        store_state(r, s, head, r.load(T.i64, head))
        r.ret_void()
        e = IRBuilder.at_end(empty)
        store_state(e, s, ConstantNull(T.ptr), ConstantInt(T.i64, 0))
        e.ret_void()
    return round_function(module, "__enzcc_tape_take_pooled", T.FunctionType(T.void, (T.ptr, T.ptr)), body)


def _pooled_release_fn(module) -> Function:
    """``release(state, pool)``: the tape's buffer (if any) to the pool (:func:`pool_give_fn`)."""
    def body(fn):
        s, pool = fn.args
        entry, give, done = (fn.append_block(x) for x in ("entry", "give", "done"))
        b = IRBuilder.at_end(entry)
        buf = b.load(T.ptr, b.struct_gep(STATE, s, 0))
        b.cond_br(b.icmp("eq", buf, ConstantNull(T.ptr)), done, give)
        g = IRBuilder.at_end(give)
        g.call(pool_give_fn(module), [pool, buf, g.load(T.i64, g.struct_gep(STATE, s, 2))])
        g.br(done)
        IRBuilder.at_end(done).ret_void()
    return round_function(module, POOLED_RELEASE, T.FunctionType(T.void, (T.ptr, T.ptr)), body)


def _pool_drain_fn(module) -> Function:
    """``drain(pool)``, when a thread ends: every block of its pool freed, the pool empty again."""
    def body(fn):
        (pool,) = fn.args
        entry, loop, done = (fn.append_block(x) for x in ("entry", "loop", "done"))
        b = IRBuilder.at_end(entry)
        head = b.load(T.ptr, pool)
        b.cond_br(b.icmp("eq", head, ConstantNull(T.ptr)), done, loop)
        lb = IRBuilder.at_end(loop)
        p = lb.phi(T.ptr, [(head, entry)])
        nxt = lb.load(T.ptr, lb.gep(T.i8, p, [ConstantInt(T.i64, 8)]))
        lb.call(module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,))), [p])
        p.add_incoming(nxt, loop)
        lb.cond_br(lb.icmp("eq", nxt, ConstantNull(T.ptr)), done, loop)
        d = IRBuilder.at_end(done)
        for field in range(3):
            d.store(IRBuilder.const_zero(POOL_TYPE.elements[field]), d.struct_gep(POOL_TYPE, pool, field))
        d.ret_void()
    return round_function(module, "__enzcc_pool_drain", T.FunctionType(T.void, (T.ptr,)), body)
