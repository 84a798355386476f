"""NVVM intrinsics: what CUDA device code compiled for ``nvptx`` calls (thread indices, barriers, fences, warp
primitives, NVVM's float arithmetic), and the shadows of ``__shared__`` arrays.

* Shared memory. A ``__shared__`` array is an ``addrspace(3)`` global, one per thread block; its shadow is one
  too (:func:`enzcc.ad.globals.shadow_global` keeps the primal's address space). It is uninitialized at block
  start, so before a derivative of a function that uses it runs, the block's threads zero it together
  (:func:`zero_shared_shadows`: thread ``t`` of ``T`` zeroes words ``t, t + T, ...``) between two barriers: the
  first waits for the threads still reading it in an earlier call, the second for the zeroing to end before any
  thread adds to it. Like ``__syncthreads``, this asks that every thread of the block makes the ``__enzyme_*``
  call at the same point (Enzyme asks it too); the derivative cannot check it.
* Barriers (``__syncthreads``: ``llvm.nvvm.barrier.cta.sync.aligned.all``, its ``count`` and reduction
  variants; ``__syncwarp``: ``llvm.nvvm.bar.warp.sync``) carry no derivative and are kept in the forward code; the
  reverse sweep gets the same barrier at the mirrored point, so the adjoints that what follows the barrier adds
  to shared memory are all there before any thread reads those of what precedes it. A barrier that only arrives
  (``barrier.cta.arrive``: producer and consumer warps) or spans a cluster is refused in reverse mode.
* Thread and block indices and sizes (``llvm.nvvm.read.ptx.sreg.*``), votes, ballots, integer conversions and
  integer arithmetic carry no derivative; fences (``__threadfence``) are kept as they are.
* NVVM's float arithmetic (rounding modes, ``ftz``, approximations: ``llvm.nvvm.fma.rn.d``,
  ``llvm.nvvm.rsqrt.approx.d``...) takes the derivative rules of ``derivatives.yaml`` (its ``same_as`` section,
  applied by the libm family); the approximate sine and cosine, and the rounding of double to float
  (``llvm.nvvm.d2f.*``), are here.
* Refused when they carry derivatives, with one line naming the call: the bits of a double taken apart or put
  together (``llvm.nvvm.d2i.hi``/``lo``, ``llvm.nvvm.lohi.i2d``, a byte permute), and warp shuffles of values with
  derivatives (``__shfl_*_sync``, also of a double's bits as two ``i32`` shuffles). Any other ``llvm.nvvm.*``
  call given values or memory with derivatives is refused by the engine as having no derivative rule.
"""

from __future__ import annotations

from enzcc.ad.api import has_float
from enzcc.ad.emit import round_function, times
from enzcc.ad.errors import ad_error
from enzcc.ad.registry import CallRule, register, register_global_shadow_zeroing, register_module_preparation
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import BinaryOp, Call, Cast, ExtractValue, Phi, Select, Store
from enzcc.ir.values import ConstantInt, Value

#: the address space of CUDA's shared memory
SHARED = 3

#: the barrier the derivative uses itself (``__syncthreads``)
SYNCTHREADS = "llvm.nvvm.barrier.cta.sync.aligned.all"

_NVVM = "llvm.nvvm."

#: calls without derivatives and without effect on memory: indices and sizes, votes, integer conversions (of
#: floats: piecewise constant; to floats: from integers) and integer arithmetic
INACTIVE = tuple(_NVVM + p for p in (
    "read.ptx.sreg.", "vote.", "activemask", "match.", "isspacep.", "mulhi.", "mul24.", "sad.", "flo.", "bmsk.",
    "nanosleep", "d2i.rn", "d2i.rz", "d2i.rm", "d2i.rp", "d2ui.", "d2ll.", "d2ull.", "f2i.", "f2ui.", "f2ll.",
    "f2ull.", "i2d.", "i2f.", "ui2d.", "ui2f.", "ll2d.", "ll2f.", "ull2d.", "ull2f.", "redux.sync.add",
    "redux.sync.and", "redux.sync.or", "redux.sync.xor", "redux.sync.min", "redux.sync.max", "redux.sync.umin",
    "redux.sync.umax"))

#: memory ordering without derivatives: kept as it is (and as a write of any memory, for the cache)
FENCES = (_NVVM + "membar.", _NVVM + "fence.")

#: barriers of a thread block mirrored in the reverse sweep; of a warp (``__syncwarp``)
CTA_BARRIERS = (_NVVM + "barrier.cta.sync.", _NVVM + "barrier.cta.red.")
WARP_BARRIER = _NVVM + "bar.warp.sync"
#: barriers whose reverse enzcc does not make (producer/consumer arrivals, clusters)
UNMIRRORED_BARRIERS = (_NVVM + "barrier.cta.arrive", _NVVM + "barrier.cluster.")

SHUFFLES = (_NVVM + "shfl.",)
#: calls that take apart or put together the bits of floats
BIT_CALLS = (_NVVM + "d2i.hi", _NVVM + "d2i.lo", _NVVM + "lohi.i2d", _NVVM + "prmt")


# -- shared memory ---------------------------------------------------------------------------------------

def targets_nvptx(module) -> bool:
    return (module.triple or "").startswith("nvptx")


def zero_shared_shadows(b: IRBuilder, module, shadows) -> set[str]:
    """Before an ``__enzyme_*`` call (:func:`enzcc.registry.register_global_shadow_zeroing`): the shadows in
    shared memory, zeroed by the threads of the block together, between two barriers."""
    mine = [(shadow, size) for _, shadow, size in shadows
            if targets_nvptx(module) and module.globals[shadow.symbol].addrspace == SHARED]
    if not mine:
        return set()
    barrier(b)  # (threads still reading the shadows in an earlier call of a derivative)
    for shadow, size in mine:
        word = T.i64 if size % 8 == 0 else T.i8  # (shadows are 16-byte aligned)
        b.call(_zero_function(module, word), [shadow, ConstantInt(T.i64, size // (word.bits // 8))])
    barrier(b)
    return {shadow.symbol for shadow, _ in mine}


def refuse_dynamic_shared_memory(module, prepared: dict) -> None:
    """Differentiated code that writes floats into dynamic shared memory (``extern __shared__ double s[]``: an
    ``addrspace(3)`` declaration, sized at launch) is refused: enzcc cannot size its shadow, and without one
    the derivative through it would be lost."""
    from enzcc.ad.globals import global_roots

    for orig, name in prepared.items():
        for inst in module.functions[name].instructions():
            if isinstance(inst, Store) and has_float(inst.value.type):
                dest = inst.pointer
            elif isinstance(inst, Call) and (inst.callee_name or "").startswith(("llvm.memcpy", "llvm.memmove")):
                dest = inst.args[0]
            else:
                continue
            for g in global_roots(dest):
                gv = module.globals.get(g.symbol)
                if gv is not None and gv.addrspace == SHARED and gv.is_declaration:
                    raise ad_error(f"'{g.symbol}' is dynamic shared memory (extern __shared__), whose size is "
                                   "known only at launch: enzcc cannot size the shadow of the floats written into "
                                   "it (use a __shared__ array of a fixed size)", inst, fn=module.functions[orig])


def barrier(b: IRBuilder) -> Call:
    """``__syncthreads()``."""
    fn = b.module.get_or_insert_function(SYNCTHREADS, T.FunctionType(T.void, (T.i32,)))
    return b.call(fn, [ConstantInt(T.i32, 0)])


def _sreg(b: IRBuilder, name: str) -> Value:
    fn = b.module.get_or_insert_function(f"llvm.nvvm.read.ptx.sreg.{name}", T.FunctionType(T.i32, ()))
    return b.call(fn, [])


def _zero_function(module, word: T.Type):
    """``zero(ptr addrspace(3) p, i64 n)``: the calling thread's share of zeroing ``n`` words at ``p``: words
    ``t, t + T, ...`` for thread ``t`` of the ``T`` threads of its block (linear index x + X (y + Y z))."""
    def body(fn):
        p, n = fn.args
        entry, head, loop, done = (fn.append_block(x) for x in ("entry", "head", "loop", "done"))
        b = IRBuilder.at_end(entry)
        nx, ny, nz = (_sreg(b, f"ntid.{c}") for c in "xyz")
        tx, ty, tz = (_sreg(b, f"tid.{c}") for c in "xyz")
        t = b.zext(b.add(tx, b.mul(nx, b.add(ty, b.mul(ny, tz)))), T.i64)
        step = b.zext(b.mul(nx, b.mul(ny, nz)), T.i64)
        b.br(head)
        h = IRBuilder.at_end(head)
        i = h.phi(T.i64, [(t, entry)])
        h.cond_br(h.icmp("ult", i, n), loop, done)
        lp = IRBuilder.at_end(loop)
        lp.store(ConstantInt(word, 0), lp.gep(word, p, [i]))
        i.add_incoming(lp.add(i, step), loop)
        lp.br(head)
        IRBuilder.at_end(done).ret_void()
    return round_function(module, f"__enzcc_zero_shared.{word}", T.FunctionType(T.void, (T.PointerType(SHARED),
                                                                                          T.i64)), body, ["p", "n"])


# -- barriers --------------------------------------------------------------------------------------------

def _reverse_barrier(mode, call, entry, block, b: IRBuilder) -> bool:
    """The same barrier at the mirrored point of the reverse sweep (a reduction barrier: its plain version)."""
    name = call.callee_name
    args = [mode._primal(a, block, b) for a in call.args]
    if name.startswith(_NVVM + "barrier.cta.red."):  # (id, [count,] predicate) -> (id, [count])
        kind = name.rsplit(".", 1)[1]  # all / count
        name = _NVVM + "barrier.cta.sync." + ("aligned." if ".aligned." in call.callee_name else "") + kind
        args = args[:-1]
    fn = mode.module.get_or_insert_function(name, T.FunctionType(T.void, tuple(a.type for a in args)))
    b.call(fn, args)
    return True


def _refuse_reverse_barrier(mode, call, entry, block, b) -> bool:
    raise ad_error(f"'{call.callee_name}' in differentiated code: reverse mode mirrors barriers that every thread "
                   "waits at (__syncthreads, __syncwarp), not arrivals or cluster barriers", call)


def _nothing(mode, call) -> bool:
    return True


# -- float arithmetic ------------------------------------------------------------------------------------

def _sin_cos_partial(b: IRBuilder, call, x: Value) -> Value:
    """d/dx of NVVM's approximate sine (cosine): its approximate cosine (minus its sine), ftz as the call."""
    name = call.callee_name
    sine = ".sin." in name
    other = name.replace(".sin.", ".cos.") if sine else name.replace(".cos.", ".sin.")
    v = b.call(b.module.get_or_insert_function(other, T.FunctionType(x.type, (x.type,))), [x])
    return v if sine else b.fneg(v)


def _unary(partial=None, convert=None):
    """The rule of a unary float call: ``partial(b, call, x)`` (None: 1), or a conversion of the adjoint
    between the result's and the argument's type (``convert(b, v, ty)``)."""
    def forward(mode, call) -> bool:
        x = call.args[0]
        if id(x) in mode.tangents:
            b = IRBuilder.after(call)
            t = mode._t(x)
            mode._set(call, convert(b, t, call.type) if convert else times(b, partial(b, call, x), t))
        return True

    def reverse(mode, call, entry, block, b: IRBuilder) -> bool:
        act, x = mode.activity, call.args[0]
        if not act.is_active(call) or not (act.is_active(x) or mode._is_out(x)):
            return True
        d = mode._take_adjoint(b, call)
        if convert:
            mode._add_adjoint(b, x, convert(b, d, x.type))
        else:
            mode._add_adjoint(b, x, times(b, partial(b, call, mode._primal(x, block, b)), d))
        return True
    return forward, reverse


def _fp_cast(b: IRBuilder, v: Value, ty: T.Type) -> Value:
    return b.fptrunc(v, ty) if ty.bits < v.type.bits else b.fpext(v, ty)


# -- bits of floats, shuffles ----------------------------------------------------------------------------

def carries_float_bits(act, v: Value, seen: set | None = None) -> bool:
    """Whether integer ``v`` is computed (through integer arithmetic, casts, selects and phis) from the bits of a
    float with derivatives (a bitcast of one, or NVVM's halves of a double)."""
    seen = set() if seen is None else seen
    if id(v) in seen:
        return False
    seen.add(id(v))
    if isinstance(v, Cast):
        if v.opcode == "bitcast" and has_float(v.value.type):
            return id(v.value) in act.varied
        return v.opcode in ("trunc", "zext", "sext", "bitcast") and carries_float_bits(act, v.value, seen)
    if isinstance(v, Call) and (v.callee_name or "").startswith((_NVVM + "d2i.hi", _NVVM + "d2i.lo")):
        return id(v.args[0]) in act.varied
    if isinstance(v, BinaryOp) or isinstance(v, Call) and (v.callee_name or "").startswith(SHUFFLES):
        return any(carries_float_bits(act, op, seen) for op in v.operands if isinstance(op.type, T.IntType))
    if isinstance(v, ExtractValue):  # (a shuffle's value and predicate)
        return carries_float_bits(act, v.aggregate, seen)
    if isinstance(v, Select):
        return carries_float_bits(act, v.true_value, seen) or carries_float_bits(act, v.false_value, seen)
    if isinstance(v, Phi):
        return any(carries_float_bits(act, x, seen) for x, _ in v.incoming)
    return False


def _check_bits(mode, call) -> bool:
    """Refuse a call that takes apart or moves the bits of a float with derivatives (they would be lost)."""
    act, name = mode.activity, call.callee_name
    floats = [a for a in call.args if has_float(a.type) and id(a) in act.varied]
    if floats or any(isinstance(a.type, T.IntType) and carries_float_bits(act, a) for a in call.args):
        what = "warp shuffles of values with derivatives are not supported" if name.startswith(SHUFFLES) else \
            "it takes apart or puts together the bits of a float with derivatives, whose derivative would be lost"
        raise ad_error(f"cannot differentiate '{name}': {what}", call)
    return True


def _check_bits_reverse(mode, call, entry, block, b) -> bool:
    return _check_bits(mode, call)


# -- registration ----------------------------------------------------------------------------------------

register(CallRule("nvvm", inactive=True, writes_no_memory=True), prefixes=INACTIVE)
register(CallRule("nvvm", inactive=True), prefixes=FENCES)
register(CallRule("nvvm", inactive=True, forward=_nothing, reverse=_reverse_barrier),
         prefixes=(*CTA_BARRIERS, WARP_BARRIER))
register(CallRule("nvvm", inactive=True, forward=_nothing, reverse=_refuse_reverse_barrier),
         prefixes=UNMIRRORED_BARRIERS)
register(CallRule("nvvm", writes_no_memory=True, forward=_check_bits, reverse=_check_bits_reverse),
         prefixes=(*SHUFFLES, *BIT_CALLS))
_fwd, _rev = _unary(partial=_sin_cos_partial)
register(CallRule("nvvm", writes_no_memory=True, forward=_fwd, reverse=_rev),
         prefixes=(_NVVM + "sin.approx.", _NVVM + "cos.approx."))
_fwd, _rev = _unary(convert=_fp_cast)
register(CallRule("nvvm", writes_no_memory=True, forward=_fwd, reverse=_rev), prefixes=(_NVVM + "d2f.",))
register_global_shadow_zeroing(zero_shared_shadows)
register_module_preparation(-10, refuse_dynamic_shared_memory)

__all__ = ["CTA_BARRIERS", "FENCES", "INACTIVE", "SHARED", "SYNCTHREADS", "barrier", "carries_float_bits",
           "refuse_dynamic_shared_memory", "targets_nvptx", "zero_shared_shadows"]
