"""Memory functions: ``malloc`` & co. (and the functions registered with ``__enzyme_allocation_like``),
``free``, ``posix_memalign``, and LLVM's ``memset`` / ``memcpy`` / ``memmove`` intrinsics.

Shadow memory is allocated with the primal's (:class:`enzcc.ad.shadow.Shadows`, which knows the allocators); the
rules here make the derivative code of the calls: a memset or a copy is repeated on the shadows in the forward
code (pointers) and its adjoints flow back in the reverse sweep (floats); the reverse of an allocation releases
its shadow; ``realloc`` gives the adjoints of the bytes it moved back to the old shadow.
"""

from __future__ import annotations

import enzcc.ad.runtime_activity as runtime_activity
import enzcc.ad.shadow_reuse as shadow_reuse
from enzcc.ad.activity import is_allocation
from enzcc.ad.adjoint import SHADOW_FREE
from enzcc.ad.emit import call_again, counted_loop_function
from enzcc.ad.errors import ad_error
from enzcc.ad.hints import hints_of
from enzcc.ad.memory import is_thread_private
from enzcc.ad.registry import CallRule, register
from enzcc.ad.runtime_activity import no_adjoint
from enzcc.ad.shadow import to_i64, usable_size
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import Call
from enzcc.ir.values import Constant, ConstantInt, ConstantNull, Value

#: C and C++ deallocation functions: the shadow of what the primal releases goes with it in forward mode
FREE = ("free", "_ZdlPv", "_ZdlPvm", "_ZdaPv")


# -- memset ---------------------------------------------------------------------------------------------------

def _forward_memset(mode, inst: Call) -> bool:
    if mode.activity.is_active_ptr(inst.args[0]):
        b = IRBuilder.after(inst)
        sp = mode.shadows.of(inst.args[0], inst)
        b.memset(sp, 0, _ra_count(mode, b, inst.args[0], sp, inst.args[2]))
    return True


def _reverse_memset(mode, inst: Call, entry, block, b: IRBuilder) -> bool:
    dest = inst.args[0]
    if mode.activity.is_active_ptr(dest):
        sp = mode._shadow(dest, block, b, inst)
        n = mode._primal(inst.args[2], block, b)
        if runtime_activity.enabled(mode.activity):
            n = runtime_activity.count_or_zero(b, runtime_activity.differs(b, mode._primal(dest, block, b), sp), n)
        b.memset(sp, 0, n)
    return True


def _ra_count(mode, b: IRBuilder, p: Value, sp: Value, n: Value) -> Value:
    """Forward code: the byte count ``n`` of code on shadow ``sp`` of ``p``; with runtime activity, zero where the
    shadow is the memory itself (:mod:`enzcc.ad.runtime_activity`)."""
    if not runtime_activity.enabled(mode.activity):
        return n
    return runtime_activity.count_or_zero(b, runtime_activity.differs(b, p, sp), n)


# -- memcpy, memmove ------------------------------------------------------------------------------------------

def _forward_memcpy(mode, inst: Call) -> bool:
    act = mode.activity
    dest, src = inst.args[0], inst.args[1]
    if act.is_active_ptr(dest) and runtime_activity.enabled(act):
        _forward_memcpy_at_run_time(mode, inst)
    elif act.is_active_ptr(dest):
        if act.is_active_ptr(src):
            call_again(inst, [mode.shadows.of(dest, inst), mode.shadows.of(src, inst), *inst.args[2:]])
        else:
            IRBuilder.after(inst).memset(mode.shadows.of(dest, inst), 0, inst.args[2])
    return True


def _forward_memcpy_at_run_time(mode, inst: Call) -> None:
    """With runtime activity: the copy of the tangents where both shadows are other memory; a zero-filled
    destination shadow where only the destination's is; nothing where the destination's shadow is itself."""
    dest, src, n = inst.args[0], inst.args[1], inst.args[2]
    b = IRBuilder.after(inst)
    sd = mode.shadows.of(dest, inst)
    to = runtime_activity.differs(b, dest, sd)
    if mode.activity.is_active_ptr(src):
        ss = mode.shadows.of(src, inst)
        both = b.and_(to, runtime_activity.differs(b, src, ss))
        callee = inst.callee.resolve() if hasattr(inst.callee, "resolve") else inst.callee
        b.call(callee, [sd, ss, runtime_activity.count_or_zero(b, both, n), *inst.args[3:]])
        to = b.and_(to, b.xor(both, ConstantInt(T.i1, 1)))
    b.memset(sd, 0, runtime_activity.count_or_zero(b, to, n))


def _reverse_copy(mode, inst: Call, entry, block, b: IRBuilder) -> bool:
    _reverse_memcpy(mode, inst, block, b)
    return True


# -- allocations ----------------------------------------------------------------------------------------------

def _forward_allocation(mode, inst: Call) -> bool:
    return True  # the shadow allocation was made with the shadows


def _reverse_allocation(self, inst: Call, entry, block, b: IRBuilder) -> bool:
    """The reverse of an allocation with a shadow releases the shadow (with the allocator's own deallocation
    function, or for the next call: :mod:`enzcc.ad.shadow_reuse`)."""
    name = inst.callee_name
    for call, shadow in self.shadows.allocations:
        if call is inst:
            if name == "realloc":
                _reverse_realloc(self, inst, shadow, block, b)
            if name in hints_of(self.module).allocators:  # its own deallocation function
                _, dealloc, sources = hints_of(self.module).allocators[name]
                b.call(self.module.functions[dealloc],
                       [self._primal(shadow if k < 0 else inst.args[k], block, b) for k in sources])
                continue
            spare = self.shadows.spares.get(id(shadow))
            if spare is not None:  # (kept for the next call: enzcc.ad.shadow_reuse)
                self.note_free(shadow_reuse.release(b, self.module, spare,
                                                    self._primal(shadow, block, b)), SHADOW_FREE)
                continue
            free = self.module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))
            self.note_free(b.call(free, [self._primal(shadow, block, b)]), SHADOW_FREE)
    return True


def _forward_free(mode, inst: Call) -> bool:
    """The primal is released: so is its shadow (shadows made in forward mode come from malloc)."""
    p = inst.args[0]
    if mode._releases_shadow(p):
        free = mode.module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))
        b = IRBuilder.after(inst)
        shadow = mode.shadows.of(p)
        if runtime_activity.enabled(mode.activity):  # (the memory itself: released once, by the primal)
            shadow = b.select(runtime_activity.differs(b, p, shadow), shadow, ConstantNull(T.ptr))
        b.call(free, [shadow])
    return True


def _reverse_realloc(self, inst: Call, shadow: Value, block, b: IRBuilder) -> None:
    """The adjoints of the bytes ``realloc`` moved go back to the old shadow (kept alive until here)."""
    kind = self.memtypes.reallocated_kind(inst)
    if isinstance(kind, (T.PointerType, T.IntType)):
        return  # shadow pointers were copied going forward; integers and pointers carry no adjoint
    if kind == "bytes":
        # records of floats, integers and pointers in memory only this function allocated: the old
        # shadow's float slots still hold the zeros the forward sweep left there, its pointer slots the
        # shadow pointers copied going forward, so the new shadow's bytes are exactly what the old
        # shadow must hold now (adjoints, and the same pointers)
        old = self.shadows.shadow_or_null(inst.args[0])
        if isinstance(old, Constant):
            return
        old = _live_old_shadow(self, inst, self._primal(old, block, b), block, b)
        n = b.call_intrinsic("llvm.umin", [usable_size(b, self.module, old),
                                           to_i64(b, self._primal(inst.args[1], block, b))], [T.i64])
        b.call_intrinsic("llvm.memmove", [old, self._primal(shadow, block, b), n, ConstantInt(T.i1, 0)],
                         [T.ptr, T.ptr, T.i64])
        return
    if kind is None and not self.parallel:
        records = self.memtypes.reallocated_records(inst)
        if records is not None:
            _reverse_realloc_records(self, inst, shadow, records, block, b)
            return
    if not isinstance(kind, T.FloatType):
        raise ad_error("cannot tell whether the memory realloc moves holds floating-point values", inst)
    if self.parallel:
        raise ad_error("reverse mode through realloc in an OpenMP parallel region is not supported", inst)
    old = self.shadows.shadow_or_null(inst.args[0])
    if isinstance(old, Constant):
        return  # the old memory had no derivatives (or was null): nothing to give back
    old = _live_old_shadow(self, inst, self._primal(old, block, b), block, b)
    n = b.call_intrinsic("llvm.umin", [usable_size(b, self.module, old),
                                       to_i64(b, self._primal(inst.args[1], block, b))], [T.i64])
    b.call(self.tape.memcpy_adjoint_helper(kind), [self._primal(shadow, block, b), old, n,
                                                    ConstantInt(T.i1, 1)])

def _reverse_realloc_records(self, inst: Call, shadow: Value, records, block, b: IRBuilder) -> None:
    """The reverse of a ``realloc`` of an array of records mixing floats with pointers and integers
    (:meth:`enzcc.ad.memory.MemoryTypes.reallocated_records`): each float field's adjoints in the records
    moved go back to the old shadow (added; the new shadow's zeroed), the other fields stay as they are."""
    stride, fields = records
    old = self.shadows.shadow_or_null(inst.args[0])
    if isinstance(old, Constant):
        return  # the old memory had no derivatives (or was null): nothing to give back
    old = _live_old_shadow(self, inst, self._primal(old, block, b), block, b)
    new = self._primal(shadow, block, b)
    n = b.call_intrinsic("llvm.umin", [usable_size(b, self.module, old),
                                       to_i64(b, self._primal(inst.args[1], block, b))], [T.i64])
    count = b.udiv(n, ConstantInt(T.i64, stride))
    for at, kind in fields:
        b.call(_strided_adjoint_helper(self.module, kind),
               [b.gep(T.i8, new, [ConstantInt(T.i64, at)]), b.gep(T.i8, old, [ConstantInt(T.i64, at)]),
                ConstantInt(T.i64, stride), count])


def _reverse_copy_records(self, inst: Call, records, block, b: IRBuilder) -> None:
    """The reverse of a memcpy of an array of records (:meth:`enzcc.ad.memory.MemoryTypes.copied_records`):
    each float field's adjoints in the destination's records go back to the source's (added; the destination's
    zeroed), record by record; the pointer fields' shadows were copied in the forward sweep."""
    stride, fields = records
    dest, src = inst.args[0], inst.args[1]
    if not self.activity.is_active_ptr(dest):
        return
    ddest, dsrc = self._shadow(dest, block, b, inst), self._shadow(src, block, b, inst)
    count = b.udiv(to_i64(b, self._primal(inst.args[2], block, b)), ConstantInt(T.i64, stride))
    for at, kind in fields:
        if isinstance(kind, T.FloatType):
            b.call(_strided_adjoint_helper(self.module, kind),
                   [b.gep(T.i8, ddest, [ConstantInt(T.i64, at)]), b.gep(T.i8, dsrc, [ConstantInt(T.i64, at)]),
                    ConstantInt(T.i64, stride), count])


def _strided_adjoint_helper(module, kind: T.Type):
    """``helper(dnew, dold, stride, count)``: for each of ``count`` records ``stride`` bytes apart,
    ``dold += dnew; dnew = 0`` on the float of type ``kind`` at the start of each."""
    def step(lb, args, i):
        dnew, dold, stride = args
        at = lb.mul(i, stride)
        pn, po = lb.gep(T.i8, dnew, [at]), lb.gep(T.i8, dold, [at])
        d = lb.load(kind, pn)
        lb.store(IRBuilder.const_zero(kind), pn)
        lb.store(lb.fadd(lb.load(kind, po), d), po)
    return counted_loop_function(module, f"__enzcc_realloc_record_adjoint_{kind}", (T.ptr, T.ptr, T.i64), step)


def _live_old_shadow(self, inst: Call, old: Value, block, b: IRBuilder) -> Value:
    """The old shadow of a ``realloc`` in the reverse sweep; with runtime activity, null where it was the old
    memory itself (inactive, and released by the ``realloc``: nothing goes back there)."""
    if not runtime_activity.enabled(self.activity):
        return old
    return b.select(runtime_activity.differs(b, self._primal(inst.args[0], block, b), old), old, ConstantNull(T.ptr))


def _reverse_memcpy(self, inst: Call, block, b: IRBuilder) -> None:
    dest, src, size = inst.args[0], inst.args[1], inst.args[2]
    act = self.activity
    if not act.is_active_ptr(dest) and not act.is_active_ptr(src):
        return
    if isinstance(dest, ConstantNull):
        return  # a copy into null (a path the optimizer left that would crash first): no adjoint
    kind = self.memtypes.copy_kind(inst)
    if kind is None and not act.is_active_ptr(src):
        # bytes without derivatives overwrite memory with them: whatever they are, the copy's shadow is zero
        # (the forward sweep zeroed it too), and so is the adjoint of what they overwrote
        sd = self._shadow(dest, block, b, inst)
        n = self._primal(size, block, b)
        if runtime_activity.enabled(self.activity):
            n = runtime_activity.count_or_zero(b, runtime_activity.differs(b, self._primal(dest, block, b), sd), n)
        b.memset(sd, 0, n)
        return
    if kind is None:
        fields = self.memtypes.copy_fields(inst)
        records = self.memtypes.copied_records(inst) if fields is None else None
        if records is not None and not self.concurrent and not runtime_activity.enabled(self.activity):
            _reverse_copy_records(self, inst, records, block, b)
            return
        if fields is None:
            raise ad_error("cannot tell whether the memory this memcpy copies holds floating-point values "
                           "(nothing in the function or its caller reads or writes it with one type, or it "
                           "mixes them with pointers or integers at offsets enzcc cannot follow)", inst)
        if act.is_active_ptr(dest):  # each float field's adjoint goes back to the source's
            ddest = self._shadow(dest, block, b, inst)
            dsrc = self._shadow(src, block, b, inst)
            to, back = _ra_copy_conditions(self, b, block, dest, ddest, src, dsrc)
            for at, k in fields:
                if isinstance(k, T.FloatType):
                    pd, ps = b.gep(T.i8, ddest, [ConstantInt(T.i64, at)]), b.gep(T.i8, dsrc, [ConstantInt(T.i64, at)])
                    d = b.load(k, pd)
                    if to is None:
                        b.store(IRBuilder.const_zero(k), pd)
                    else:  # (runtime activity: nothing taken from inactive memory, nothing given back to it)
                        b.store(b.select(to, IRBuilder.const_zero(k), d), pd)
                        d = b.select(back, d, no_adjoint(k))
                    self._add_to_memory(b, src, ps, d, None)  # (atomically where other threads may add too)
        return
    if isinstance(kind, T.PointerType) or isinstance(kind, T.IntType):
        return  # pointers were copied into the shadow in the forward sweep; integers carry nothing
    n = self._primal(size, block, b)
    ddest = self._shadow(dest, block, b, inst) if act.is_active_ptr(dest) else None
    dsrc = self._shadow(src, block, b, inst) if act.is_active_ptr(src) else None
    if ddest is None:
        return
    if not isinstance(kind, T.FloatType) and self.concurrent:
        raise ad_error(f"the reverse of a memcpy of {kind} in code that runs in several threads at once (an OpenMP "
                       "parallel region, a GPU kernel) is not supported", inst)
    helper = self.tape.memcpy_adjoint_helper(kind, atomic=self.concurrent and not is_thread_private(src))
    has_src = ConstantInt(T.i1, int(dsrc is not None))
    to, back = _ra_copy_conditions(self, b, block, dest, ddest, src, dsrc)
    if to is not None:  # (runtime activity: nothing taken from inactive memory, nothing given back to it)
        n = runtime_activity.count_or_zero(b, to, n)
        has_src = back
        dsrc = b.select(back, dsrc, ddest) if dsrc is not None else None
    b.call(helper, [ddest, dsrc if dsrc is not None else ddest, n, has_src])


def _ra_copy_conditions(self, b: IRBuilder, block, dest, ddest, src, dsrc):
    """With runtime activity, the reverse of a copy: (the destination's shadow is other memory, and so is the
    source's as well); (None, None) without it."""
    if not runtime_activity.enabled(self.activity):
        return None, None
    to = runtime_activity.differs(b, self._primal(dest, block, b), ddest)
    if dsrc is None:
        return to, ConstantInt(T.i1, 0)
    return to, b.and_(to, runtime_activity.differs(b, self._primal(src, block, b), dsrc))


register(CallRule("memory", forward=_forward_memset, reverse=_reverse_memset, runtime_activity=True),
         prefixes=("llvm.memset",))
register(CallRule("memory", forward=_forward_memcpy, reverse=_reverse_copy, runtime_activity=True),
         prefixes=("llvm.memcpy", "llvm.memmove"))
register(CallRule("memory", forward=_forward_allocation, reverse=_reverse_allocation, runtime_activity=True),
         names=("posix_memalign",), match=is_allocation)
# (the reverse of a release is nothing: a shadow goes at the reverse of its allocation)
register(CallRule("memory", inactive=True, forward=_forward_free, runtime_activity=True), names=FREE)

__all__ = ["FREE"]
