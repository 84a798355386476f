"""The tape: a growable LIFO byte buffer private to one derivative call, plus small runtime helpers
emitted into the module once (as internal functions the optimizer inlines)."""

from __future__ import annotations

from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.function import Function
from enzcc.ir.values import ConstantInt, ConstantNull, Value

STATE = T.StructType((T.ptr, T.i64, T.i64))  # buffer, used bytes, capacity
SLOT = 8


def _slot_size(module, ty: T.Type) -> int:
    size = module.data_layout.store_size(ty)
    return (size + SLOT - 1) // SLOT * SLOT


class Tape:
    def __init__(self, module, fn: Function):
        self.module = module
        self.fn = fn
        b = IRBuilder.at_start(fn.entry_block)
        self.state = b.alloca(STATE, in_entry=True)
        first = next(i for i in fn.entry_block.instructions if i.opcode != "alloca")
        fb = IRBuilder.before(first)
        fb.store(ConstantNull(T.ptr), fb.struct_gep(STATE, self.state, 0))
        fb.store(ConstantInt(T.i64, 0), fb.struct_gep(STATE, self.state, 1))
        fb.store(ConstantInt(T.i64, 0), fb.struct_gep(STATE, self.state, 2))

    # -- runtime helpers (defined once per module) -------------------------------------------------

    def _helper(self, name: str, ftype: T.FunctionType, body) -> Function:
        fn = self.module.functions.get(name)
        if fn is not None:
            return fn
        fn = Function(name, ftype)
        fn.linkage = "internal"
        self.module.add_function(fn)
        body(fn)
        return fn

    def _libc(self, name: str, ftype: T.FunctionType) -> Function:
        return self.module.get_or_insert_function(name, ftype)

    def reserve_fn(self) -> Function:
        def body(fn):
            s, n = fn.args
            entry, grow, ok = fn.append_block("entry"), fn.append_block("grow"), fn.append_block("ok")
            b = IRBuilder.at_end(entry)
            used_p = b.struct_gep(STATE, s, 1)
            cap_p = b.struct_gep(STATE, s, 2)
            used = b.load(T.i64, used_p)
            new = b.add(used, n)
            cap = b.load(T.i64, cap_p)
            b.cond_br(b.icmp("ugt", new, cap), grow, ok)
            g = IRBuilder.at_end(grow)
            doubled = g.shl(cap, 1)
            want = g.select(g.icmp("ugt", new, doubled), new, doubled)
            want = g.select(g.icmp("ult", want, ConstantInt(T.i64, 4096)), ConstantInt(T.i64, 4096), want)
            buf = g.load(T.ptr, s)
            realloc = self._libc("realloc", T.FunctionType(T.ptr, (T.ptr, T.i64)))
            nb = g.call(realloc, [buf, want])
            fail, good = fn.append_block("fail"), fn.append_block("stored")
            g.cond_br(g.icmp("eq", nb, ConstantNull(T.ptr)), fail, good)
            f = IRBuilder.at_end(fail)
            f.call(self._libc("abort", T.FunctionType(T.void, ())), [])
            f.unreachable()
            gs = IRBuilder.at_end(good)
            gs.store(nb, s)
            gs.store(want, cap_p)
            gs.br(ok)
            o = IRBuilder.at_end(ok)
            cur = o.load(T.ptr, s)
            p = o.gep(T.i8, cur, [used])
            o.store(new, used_p)
            o.ret(p)
        return self._helper("__enzcc_tape_reserve", T.FunctionType(T.ptr, (T.ptr, T.i64)), body)

    def pop_fn(self) -> Function:
        def body(fn):
            s, n = fn.args
            b = IRBuilder.at_end(fn.append_block("entry"))
            used_p = b.struct_gep(STATE, s, 1)
            new = b.sub(b.load(T.i64, used_p), n)
            b.store(new, used_p)
            b.ret(b.gep(T.i8, b.load(T.ptr, s), [new]))
        return self._helper("__enzcc_tape_pop", T.FunctionType(T.ptr, (T.ptr, T.i64)), body)

    def memcpy_adjoint_helper(self, elem: T.Type) -> Function:
        """``helper(ddst, dsrc, nbytes, has_src)``: ``dsrc[i] += ddst[i]; ddst[i] = 0`` element-wise: the
        reverse of ``memcpy(dst, src, nbytes)`` on floating-point data."""
        size = self.module.data_layout.store_size(elem)

        def body(fn):
            ddst, dsrc, nbytes, has_src = fn.args
            entry, loop, done = fn.append_block("entry"), fn.append_block("loop"), fn.append_block("done")
            b = IRBuilder.at_end(entry)
            count = b.udiv(nbytes, ConstantInt(T.i64, size))
            b.cond_br(b.icmp("eq", count, ConstantInt(T.i64, 0)), done, loop)
            lb = IRBuilder.at_end(loop)
            i = lb.phi(T.i64, [(ConstantInt(T.i64, 0), entry)])
            pd = lb.gep(elem, ddst, [i])
            d = lb.load(elem, pd)
            lb.store(IRBuilder.const_zero(elem), pd)
            ps = lb.gep(elem, dsrc, [i])
            old = lb.load(elem, ps)
            lb.store(lb.select(has_src, lb.fadd(old, d), old), ps)
            nxt = lb.add(i, ConstantInt(T.i64, 1))
            i.add_incoming(nxt, loop)
            lb.cond_br(lb.icmp("eq", nxt, count), done, loop)
            IRBuilder.at_end(done).ret_void()
        return self._helper(f"__enzcc_memcpy_adjoint_{elem}", T.FunctionType(T.void, (T.ptr, T.ptr, T.i64, T.i1)),
                            body)

    # -- use ----------------------------------------------------------------------------------------

    def push_values(self, b: IRBuilder, values: list[Value], types: list[T.Type]) -> None:
        """Push ``values`` as one record (the last value ends up on top)."""
        offsets, total = [], 0
        for t in types:
            offsets.append(total)
            total += _slot_size(self.module, t)
        p = b.call(self.reserve_fn(), [self.state, ConstantInt(T.i64, total)])
        for v, off in zip(values, offsets):
            q = b.gep(T.i8, p, [ConstantInt(T.i64, off)]) if off else p
            b.store(v, q, align=SLOT)

    def pop_values(self, b: IRBuilder, types: list[T.Type]) -> list[Value]:
        """Pop one record pushed by :meth:`push_values` with the same types."""
        offsets, total = [], 0
        for t in types:
            offsets.append(total)
            total += _slot_size(self.module, t)
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
        b.call(self._libc("free", T.FunctionType(T.void, (T.ptr,))), [buf])
