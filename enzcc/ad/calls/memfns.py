"""Memory functions: ``malloc`` & co. (and the functions registered with ``__enzyme_allocation_like``),
``free``, ``posix_memalign``, and LLVM's ``memset`` / ``memcpy`` / ``memmove`` intrinsics.

Shadow memory is allocated with the primal's (:class:`enzcc.ad.shadow.Shadows`, which knows the allocators); the
rules here make the derivative code of the calls: a memset or a copy is repeated on the shadows in the forward
code (pointers) and its adjoints flow back in the reverse sweep (floats); the reverse of an allocation releases
its shadow; ``realloc`` gives the adjoints of the bytes it moved back to the old shadow.
"""

from __future__ import annotations

import enzcc.ad.shadow_reuse as shadow_reuse
from enzcc.ad.activity import is_allocation
from enzcc.ad.adjoint import SHADOW_FREE
from enzcc.ad.emit import call_again
from enzcc.ad.errors import ad_error
from enzcc.ad.hints import hints_of
from enzcc.ad.memory import is_thread_private
from enzcc.ad.registry import CallRule, register
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
        IRBuilder.after(inst).memset(mode.shadows.of(inst.args[0], inst), 0, inst.args[2])
    return True


def _reverse_memset(mode, inst: Call, entry, block, b: IRBuilder) -> bool:
    dest = inst.args[0]
    if mode.activity.is_active_ptr(dest):
        b.memset(mode._shadow(dest, block, b, inst), 0, mode._primal(inst.args[2], block, b))
    return True


# -- memcpy, memmove ------------------------------------------------------------------------------------------

def _forward_memcpy(mode, inst: Call) -> bool:
    act = mode.activity
    dest, src = inst.args[0], inst.args[1]
    if act.is_active_ptr(dest):
        if act.is_active_ptr(src):
            call_again(inst, [mode.shadows.of(dest, inst), mode.shadows.of(src, inst), *inst.args[2:]])
        else:
            IRBuilder.after(inst).memset(mode.shadows.of(dest, inst), 0, inst.args[2])
    return True


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
        IRBuilder.after(inst).call(free, [mode.shadows.of(p)])
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
        old = self._primal(old, block, b)
        n = b.call_intrinsic("llvm.umin", [usable_size(b, self.module, old),
                                           to_i64(b, self._primal(inst.args[1], block, b))], [T.i64])
        b.call_intrinsic("llvm.memmove", [old, self._primal(shadow, block, b), n, ConstantInt(T.i1, 0)],
                         [T.ptr, T.ptr, T.i64])
        return
    if not isinstance(kind, T.FloatType):
        raise ad_error("cannot tell whether the memory realloc moves holds floating-point values", inst)
    if self.parallel:
        raise ad_error("reverse mode through realloc in an OpenMP parallel region is not supported", inst)
    old = self.shadows.shadow_or_null(inst.args[0])
    if isinstance(old, Constant):
        return  # the old memory had no derivatives (or was null): nothing to give back
    old = self._primal(old, block, b)
    n = b.call_intrinsic("llvm.umin", [usable_size(b, self.module, old),
                                       to_i64(b, self._primal(inst.args[1], block, b))], [T.i64])
    b.call(self.tape.memcpy_adjoint_helper(kind), [self._primal(shadow, block, b), old, n,
                                                    ConstantInt(T.i1, 1)])

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
        b.memset(self._shadow(dest, block, b, inst), 0, self._primal(size, block, b))
        return
    if kind is None:
        fields = self.memtypes.copy_fields(inst)
        if fields is None:
            raise ad_error("cannot tell whether the memory this memcpy copies holds floating-point values "
                           "(nothing in the function or its caller reads or writes it with one type, or it "
                           "mixes them with pointers or integers at offsets enzcc cannot follow)", inst)
        if act.is_active_ptr(dest):  # each float field's adjoint goes back to the source's
            ddest = self._shadow(dest, block, b, inst)
            dsrc = self._shadow(src, block, b, inst)
            for at, k in fields:
                if isinstance(k, T.FloatType):
                    pd, ps = b.gep(T.i8, ddest, [ConstantInt(T.i64, at)]), b.gep(T.i8, dsrc, [ConstantInt(T.i64, at)])
                    d = b.load(k, pd)
                    b.store(IRBuilder.const_zero(k), pd)
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
    b.call(helper, [ddest, dsrc if dsrc is not None else ddest, n,
                    ConstantInt(T.i1, int(dsrc is not None))])


register(CallRule("memory", forward=_forward_memset, reverse=_reverse_memset), prefixes=("llvm.memset",))
register(CallRule("memory", forward=_forward_memcpy, reverse=_reverse_copy), prefixes=("llvm.memcpy", "llvm.memmove"))
register(CallRule("memory", forward=_forward_allocation, reverse=_reverse_allocation), names=("posix_memalign",),
         match=is_allocation)
# (the reverse of a release is nothing: a shadow goes at the reverse of its allocation)
register(CallRule("memory", inactive=True, forward=_forward_free), names=FREE)

__all__ = ["FREE"]
