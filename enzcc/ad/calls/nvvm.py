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
  integer arithmetic carry no derivative. Fences (``__threadfence``) are kept in forward mode and refused in
  reverse mode: they order an exchange through memory without a barrier, which the reverse sweep cannot mirror.
* NVVM's float arithmetic (rounding modes, ``ftz``, approximations: ``llvm.nvvm.fma.rn.d``,
  ``llvm.nvvm.rsqrt.approx.d``...) takes the derivative rules of ``derivatives.yaml`` (its ``same_as`` section,
  applied by the libm family); the approximate sine and cosine, and the rounding of double to float
  (``llvm.nvvm.d2f.*``), are here.
* Warp shuffles (``__shfl_sync``, ``__shfl_up/down/xor_sync``: ``llvm.nvvm.shfl.sync.*.f32``, and a double as
  the two ``i32`` shuffles of its halves, fused into one call on the derivative's copy): the tangent is the same
  shuffle of the tangent; the adjoint goes back to the lanes read, by one shuffle (or a butterfly sum for a
  broadcast) when the lane operand and width are constants, else by each lane gathering from the whole warp.
* Refused when they carry derivatives, with one line naming the call: the bits of a double taken apart or put
  together (``llvm.nvvm.d2i.hi``/``lo``, ``llvm.nvvm.lohi.i2d``, a byte permute, a shuffle of the halves that is
  not the pair of one double), the shuffles with a predicate result. Any other ``llvm.nvvm.*`` call given values
  or memory with derivatives is refused by the engine as having no derivative rule.
"""

from __future__ import annotations

from enzcc.ad.api import has_float
from enzcc.ad.emit import round_function, times
from enzcc.ad.errors import ad_error
from enzcc.ad.registry import (CallRule, register, register_copy_preparation, register_global_shadow_zeroing,
                               register_lowering, register_module_preparation)
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

#: memory ordering: kept as it is in forward mode (and as a write of any memory, for the cache), refused in reverse
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
    """Before an ``__enzyme_*`` call (:func:`enzcc.ad.registry.register_global_shadow_zeroing`): the shadows in
    shared memory, zeroed by the threads of the block together, between two barriers. Other globals of GPU code
    (``__device__`` variables: one for the whole device) are refused: every thread would zero their shadows,
    racing with the others' use of them."""
    if not module.targets_gpu or not shadows:
        return set()
    for symbol, shadow, _ in shadows:
        if not targets_nvptx(module) or module.globals[shadow.symbol].addrspace != SHARED:
            raise ad_error(f"'{symbol}' is a global variable of GPU code that differentiated code writes floats "
                           "into: its shadow is one for the whole device, which each thread's __enzyme_* call would "
                           "zero while other threads use it (pass the array as an argument, with its shadow)",
                           fn=b.function)
    barrier(b)  # (threads still reading the shadows in an earlier call of a derivative)
    for _, shadow, size in shadows:
        word = T.i64 if size % 8 == 0 else T.i8  # (shadows are 16-byte aligned)
        b.call(_zero_function(module, word), [shadow, ConstantInt(T.i64, size // (word.bits // 8))])
    barrier(b)
    return {shadow.symbol for _, shadow, _ in shadows}


def refuse_dynamic_shared_memory(module, prepared: dict) -> None:
    """Differentiated code that writes floats into dynamic shared memory (``extern __shared__ double s[]``: an
    ``addrspace(3)`` declaration, sized at launch) is refused: enzcc cannot size its shadow, and without one
    the derivative through it would be lost."""
    from enzcc.ad.globals import global_roots

    if not any(gv.addrspace == SHARED and gv.is_declaration for gv in module.globals.values()):
        return  # (none to write into: CPU code, most GPU code; the scan took 3 s of REBOUND's 45 s of AD)
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


def _refuse_reverse_fence(mode, call, entry, block, b) -> bool:
    """A memory fence (``__threadfence``) orders writes that other threads read without a barrier between (a
    flag, a counter: the last block of a grid summing the others' results). The reverse sweep would have to run
    that exchange backwards, with no barrier to wait at: refused rather than mirrored wrong."""
    raise ad_error(f"reverse mode through a memory fence ('{call.callee_name}', __threadfence): threads that "
                   "exchange data through memory without a barrier cannot be mirrored in the reverse sweep", call)


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


# -- warp shuffles ---------------------------------------------------------------------------------------
#
# shfl.sync.MODE(membermask, a, b, c) in lane l reads a from lane j (PTX ISA): with bval = b & 31, cval = c & 31,
# segmask = (c >> 8) & 31, maxLane = (l & segmask) | (cval & ~segmask), minLane = l & segmask:
#   up: j = l - bval, valid when j >= maxLane;  down: j = l + bval, valid when j <= maxLane;
#   bfly: j = l ^ bval, valid when j <= maxLane;  idx: j = minLane | (bval & ~segmask), valid when j <= maxLane;
# an invalid j reads the lane's own a. The shuffle is linear in a: its tangent is the same shuffle of the tangent
# (any b and c), and its adjoint moves back: lane j adds up the adjoints of the lanes that read it. With b and c
# known at compile time, that set is known for every lane (:func:`shuffle_sources`); up/down/bfly read from one
# lane each, so the adjoint comes back in one shuffle (from the lane that read j); idx (a broadcast in each
# segment) comes back as a sum over the segment (a butterfly, all 32 lanes taking part).

SHUFFLE_MODES = ("up", "down", "bfly", "idx")
#: a shuffle of a double: CUDA's __shfl_*_sync(double) shuffles the two 32-bit halves of its bits; on a
#: derivative's private copy (:func:`fuse_double_shuffles`) the pair is this call, lowered back to the pair once
#: the derivatives are made (:func:`define_double_shuffles`)
F64_SHUFFLE = "__enzcc_shfl_f64."


def shuffle_sources(mode: str, b: int, c: int) -> list[int]:
    """The lane each of the 32 lanes reads in ``shfl.sync.MODE`` with lane operand ``b`` and clamp ``c``."""
    bval, cval, segmask = b & 31, c & 31, (c >> 8) & 31
    out = []
    for lane in range(32):
        max_lane, min_lane = (lane & segmask) | (cval & ~segmask & 31), lane & segmask
        j = {"up": lane - bval, "down": lane + bval, "bfly": lane ^ bval,
             "idx": min_lane | (bval & ~segmask & 31)}[mode]
        valid = j >= max_lane if mode == "up" else j <= max_lane
        out.append(j if valid else lane)
    return out


def _lane_mask(lanes) -> int:
    return sum(1 << lane for lane in set(lanes))


def _shuffle_plan(mode: str, b: int, c: int):
    """How the adjoint of ``shfl.sync.MODE(b, c)`` comes back: ``("one", own, other, inverse)`` (lane j adds its
    own adjoint when its bit of ``own`` is set, that of lane ``inverse(j)`` when its bit of ``other`` is) or
    ``("sum", own, movers, sources, width)`` (the adjoints of the ``movers`` summed over each segment of
    ``width`` lanes go to its source lane); None when the lanes' reads fit neither form."""
    src = shuffle_sources(mode, b, c)
    own = _lane_mask(j for j in range(32) if src[j] == j)
    readers = {j: [lane for lane in range(32) if src[lane] == j and lane != j] for j in range(32)}
    if mode != "idx":
        inverse = {"up": lambda j: j + (b & 31), "down": lambda j: j - (b & 31), "bfly": lambda j: j ^ (b & 31)}[mode]
        if any(r != [inverse(j)] for j, r in readers.items() if r):
            return None
        return "one", own, _lane_mask(j for j, r in readers.items() if r), inverse
    segmask = (c >> 8) & 31
    width = 32 - segmask
    if width & (width - 1):  # segments of 2^k lanes
        return None
    movers = _lane_mask(lane for lane in range(32) if src[lane] != lane)
    for j, r in readers.items():  # every mover of a segment reads the same lane of it
        if r and set(r) != {lane for lane in range(32) if lane & segmask == j & segmask and movers >> lane & 1} - {j}:
            return None
    return "sum", own, movers, _lane_mask(j for j, r in readers.items() if r), width


def _shuffle_mode(call) -> str:
    name = call.callee_name
    return name[len(F64_SHUFFLE):] if name.startswith(F64_SHUFFLE) else name.split(".")[4]


def _move(b: IRBuilder, mode: str, mask: Value, v: Value, lane: Value, c: int) -> Value:
    """``shfl.sync.MODE(mask, v, lane, c)`` of a float or a double (two 32-bit halves)."""
    module = b.module
    if v.type == T.f32:
        fn = module.get_or_insert_function(f"{_NVVM}shfl.sync.{mode}.f32",
                                           T.FunctionType(T.f32, (T.i32, T.f32, T.i32, T.i32)))
        return b.call(fn, [mask, v, lane, ConstantInt(T.i32, c)])
    fn = module.get_or_insert_function(f"{_NVVM}shfl.sync.{mode}.i32", T.FunctionType(T.i32, (T.i32,) * 4))
    bits = b.bitcast(v, T.i64)
    halves = [b.trunc(bits, T.i32), b.trunc(b.lshr(bits, ConstantInt(T.i64, 32)), T.i32)]
    lo, hi = (b.zext(b.call(fn, [mask, h, lane, ConstantInt(T.i32, c)]), T.i64) for h in halves)
    return b.bitcast(b.or_(b.shl(hi, ConstantInt(T.i64, 32)), lo), T.f64)


def _lane_bit(b: IRBuilder, bits, lane: Value) -> Value:
    """Whether bit ``lane`` of ``bits`` (an i32 constant or value) is set."""
    bits = ConstantInt(T.i32, bits - (1 << 32) if bits >= 1 << 31 else bits) if isinstance(bits, int) else bits
    return b.icmp("ne", b.and_(b.lshr(bits, lane), ConstantInt(T.i32, 1)), ConstantInt(T.i32, 0))


def _shuffle_adjoint(b: IRBuilder, mode: str, plan, mask: Value, d: Value) -> Value:
    """What lane j adds to the adjoint of the shuffled value: the adjoints ``d`` of the lanes that read it."""
    zero_d = IRBuilder.const_zero(d.type)
    lane = _sreg(b, "laneid")
    own = b.select(_lane_bit(b, plan[1], lane), d, zero_d)
    if plan[0] == "one":
        _, _, other, inverse = plan
        j = {"up": lambda: b.add(lane, ConstantInt(T.i32, inverse(0))),
             "down": lambda: b.sub(lane, ConstantInt(T.i32, -inverse(0))),
             "bfly": lambda: b.xor(lane, ConstantInt(T.i32, inverse(0)))}[mode]()
        j = b.and_(j, ConstantInt(T.i32, 31))
        v = _move(b, "idx", mask, d, j, 31)
        take = b.and_(_lane_bit(b, other, lane), _lane_bit(b, mask, j))
        return b.fadd(b.select(take, v, zero_d), own)
    _, _, movers, sources, width = plan
    total = b.select(_lane_bit(b, movers, lane), d, zero_d)
    off = width // 2
    while off:
        total = b.fadd(total, _move(b, "bfly", mask, total, ConstantInt(T.i32, off), 31))
        off //= 2
    return b.fadd(b.select(_lane_bit(b, sources, lane), total, zero_d), own)


def _forward_shuffle(mode, call) -> bool:
    """The tangent of a shuffle: the same shuffle of the tangent."""
    mask, v, lane, c = call.args
    if id(v) in mode.tangents:
        if getattr(mode, "width", 1) > 1:
            raise ad_error(f"vector mode (enzyme_width) with '{call.callee_name}' of a value with derivatives is "
                           "not supported", call)
        b = IRBuilder.after(call)
        mode._set(call, b.call(call.callee, [mask, mode._t(v), lane, c], function_type=call.function_type))
    return True


def _reverse_shuffle(mode, call, entry, block, b: IRBuilder) -> bool:
    """The adjoint of a shuffle goes back to the lanes read: with its lane operand and clamp known at compile
    time, by the plan of :func:`_shuffle_plan` (one shuffle, or a butterfly for a broadcast of the full warp);
    otherwise each lane gathers the adjoints of the lanes whose source it was (:func:`_gather_function`: 32
    rounds of shuffles)."""
    act, (mask, v, lane, c) = mode.activity, call.args
    if not act.is_active(call) or not (act.is_active(v) or mode._is_out(v)):
        return True
    kind = _shuffle_mode(call)
    plan = None
    if isinstance(lane, ConstantInt) and isinstance(c, ConstantInt):
        plan = _shuffle_plan(kind, lane.value, c.value)
    full = isinstance(mask, ConstantInt) and mask.value & 0xFFFFFFFF == 0xFFFFFFFF
    if plan is not None and plan[0] == "sum" and not full:
        plan = None  # (the butterfly reads every lane)
    primal_mask = mode._primal(mask, block, b)
    d = mode._take_adjoint(b, call)
    if plan is not None:
        mode._add_adjoint(b, v, _shuffle_adjoint(b, kind, plan, primal_mask, d))
        return True
    src = _source_lane(b, kind, mode._primal(lane, block, b), mode._primal(c, block, b))
    mode._add_adjoint(b, v, b.call(_gather_function(b.module, d.type), [primal_mask, d, src]))
    return True


def _source_lane(b: IRBuilder, kind: str, lane_op: Value, c: Value) -> Value:
    """The lane this lane reads in ``shfl.sync.KIND(lane_op, c)``, by PTX's rules (:func:`shuffle_sources`)."""
    k = lambda x: ConstantInt(T.i32, x)  # noqa: E731
    lane = _sreg(b, "laneid")
    bval, cval = b.and_(lane_op, k(31)), b.and_(c, k(31))
    segmask = b.and_(b.lshr(c, k(8)), k(31))
    outside = b.and_(b.xor(segmask, k(-1)), k(31))
    max_lane = b.or_(b.and_(lane, segmask), b.and_(cval, outside))
    if kind == "up":
        j = b.sub(lane, bval)
        valid = b.icmp("sge", j, max_lane)
    else:
        j = {"down": lambda: b.add(lane, bval), "bfly": lambda: b.xor(lane, bval),
             "idx": lambda: b.or_(b.and_(lane, segmask), b.and_(bval, outside))}[kind]()
        valid = b.icmp("sle", j, max_lane)
    return b.select(valid, j, lane)


def _gather_function(module, ty: T.Type):
    """``gather(mask, d, src)``: the sum of ``d`` over the lanes of ``mask`` whose ``src`` is this lane (each
    lane of the mask in turn gives its two by shuffles; all of the mask's lanes run it together)."""
    def body(fn):
        mask, d, src = fn.args
        entry, loop, take, nxt, done = (fn.append_block(x) for x in ("entry", "loop", "take", "next", "done"))
        b = IRBuilder.at_end(entry)
        lane = _sreg(b, "laneid")
        b.br(loop)
        lp = IRBuilder.at_end(loop)
        k = lp.phi(T.i32, [(ConstantInt(T.i32, 0), entry)])
        acc = lp.phi(ty, [(IRBuilder.const_zero(ty), entry)])
        lp.cond_br(_lane_bit(lp, mask, k), take, nxt)
        t = IRBuilder.at_end(take)
        v = _move(t, "idx", mask, d, k, 31)
        s = t.call(module.get_or_insert_function(f"{_NVVM}shfl.sync.idx.i32", T.FunctionType(T.i32, (T.i32,) * 4)),
                   [mask, src, k, ConstantInt(T.i32, 31)])
        added = t.fadd(acc, t.select(t.icmp("eq", s, lane), v, IRBuilder.const_zero(ty)))
        t.br(nxt)
        n = IRBuilder.at_end(nxt)
        acc2 = n.phi(ty, [(acc, loop), (added, take)])
        k2 = n.add(k, ConstantInt(T.i32, 1))
        k.add_incoming(k2, nxt)
        acc.add_incoming(acc2, nxt)
        n.cond_br(n.icmp("eq", k2, ConstantInt(T.i32, 32)), done, loop)
        IRBuilder.at_end(done).ret(acc2)
    fn = round_function(module, f"__enzcc_shfl_gather.{ty}", T.FunctionType(ty, (T.i32, ty, T.i32)), body,
                        ["mask", "d", "src"])
    fn.fn_attrs = ["convergent", "nounwind"]
    return fn


def fuse_double_shuffles(fn) -> None:
    """On a derivative's private copy: each shuffle of a double as the two 32-bit halves of its bits (CUDA's
    ``__shfl_*_sync(double)``) becomes one call of ``__enzcc_shfl_f64.MODE``, whose derivative the family makes
    (the halves alone carry the bits of a float, which is refused). Before the engine's preparation (whose
    retyping then sees a double where the joined bits are stored as an ``i64``) and after it (for what inlining
    brought)."""
    if fn.module is None or not targets_nvptx(fn.module):
        return
    for inst in list(fn.instructions()):
        if isinstance(inst, BinaryOp) and inst.opcode == "or" and inst.parent is not None:
            found = _double_shuffle(inst)
            if found is not None:
                _replace_double_shuffle(inst, *found)


def _double_shuffle(v: Value):
    """``(mode, mask, double, lane, clamp, shuffles)`` when integer ``v`` is ``hi << 32 | lo`` of the shuffled
    halves of one double's bits, else None."""
    if not (isinstance(v, BinaryOp) and v.opcode == "or" and v.type == T.i64):
        return None
    for hi_part, lo_part in ((v.operands[0], v.operands[1]), (v.operands[1], v.operands[0])):
        if not (isinstance(hi_part, BinaryOp) and hi_part.opcode == "shl" and _is_const(hi_part.operands[1], 32)):
            continue
        hi, lo = _zext_of(hi_part.operands[0]), _zext_of(lo_part)
        if not (_is_i32_shuffle(hi) and _is_i32_shuffle(lo) and hi.callee_name == lo.callee_name):
            continue
        if not all(_same(x, y) for x, y in zip((hi.args[0], hi.args[2], hi.args[3]), (lo.args[0], lo.args[2],
                                                                                      lo.args[3]))):
            continue
        d_lo, d_hi = _low_half_of(lo.args[1]), _high_half_of(hi.args[1])
        if d_lo is not None and d_lo is d_hi and hi.parent is lo.parent:
            return hi.callee_name.split(".")[4], lo.args[0], d_lo, lo.args[2], lo.args[3], (hi, lo)
    return None


def _is_const(v: Value, k: int) -> bool:
    return isinstance(v, ConstantInt) and v.value == k


def _same(x: Value, y: Value) -> bool:
    return x is y or isinstance(x, ConstantInt) and isinstance(y, ConstantInt) and x.value == y.value


def _zext_of(v: Value):
    return v.value if isinstance(v, Cast) and v.opcode == "zext" and v.value.type == T.i32 else None


def _is_i32_shuffle(v) -> bool:
    return isinstance(v, Call) and (v.callee_name or "") in {f"{_NVVM}shfl.sync.{m}.i32" for m in SHUFFLE_MODES}


def _double_of_bits(v: Value):
    return v.value if isinstance(v, Cast) and v.opcode == "bitcast" and v.value.type == T.f64 else None


def _low_half_of(v: Value):
    """The double whose bits' low half ``v`` is (``trunc (bitcast d to i64) to i32``), or None."""
    return _double_of_bits(v.value) if isinstance(v, Cast) and v.opcode == "trunc" and v.type == T.i32 else None


def _high_half_of(v: Value):
    """The double whose bits' high half ``v`` is (``trunc (lshr (bitcast d to i64), 32) to i32``), or None."""
    if not (isinstance(v, Cast) and v.opcode == "trunc" and v.type == T.i32):
        return None
    s = v.value
    if isinstance(s, BinaryOp) and s.opcode == "lshr" and _is_const(s.operands[1], 32):
        return _double_of_bits(s.operands[0])
    return None


def _replace_double_shuffle(joined, mode: str, mask, d, lane, clamp, shuffles) -> None:
    """``joined`` (the i64 of the shuffled halves) becomes the bits of one ``__enzcc_shfl_f64.MODE`` call, the
    pair and its integer code go."""
    fn = joined.module.get_or_insert_function(F64_SHUFFLE + mode,
                                              T.FunctionType(T.f64, (T.i32, T.f64, T.i32, T.i32)))
    fn.fn_attrs = ["convergent", "nounwind"]  # (a call the optimizer may not move into a branch, as the pair)
    block = shuffles[0].parent
    later = max(shuffles, key=block.instructions.index)  # (where the pair is: its join may have sunk into a branch)
    b = IRBuilder.after(later)
    new = b.call(fn, [mask, d, lane, clamp])
    for u in list(joined.uses):
        user = u.user
        if isinstance(user, Cast) and user.opcode == "bitcast" and user.type == T.f64:
            user.replace_all_uses_with(new)
            user.erase()
    if joined.has_uses():
        joined.replace_all_uses_with(b.bitcast(new, T.i64))
    dead = [joined]
    while dead:  # the integer code of the pair, and the pair, once nothing else uses them
        inst = dead.pop()
        if inst.parent is None or inst.has_uses():
            continue
        ops = [op for op in inst.operands if isinstance(op, (BinaryOp, Cast, Call))]
        inst.erase()
        dead += [op for op in ops if not isinstance(op, Call) or op in shuffles]


def define_double_shuffles(module) -> int:
    """Once no more derivatives are made: ``__enzcc_shfl_f64.MODE`` gets its body (the pair of 32-bit shuffles
    again); returns how many it defined."""
    count = 0
    for name, fn in list(module.functions.items()):
        if name.startswith(F64_SHUFFLE) and fn.is_declaration:
            mode = name[len(F64_SHUFFLE):]
            mask, v, lane, c = fn.args
            b = IRBuilder.at_end(fn.append_block("entry"))
            i32 = module.get_or_insert_function(f"{_NVVM}shfl.sync.{mode}.i32", T.FunctionType(T.i32, (T.i32,) * 4))
            bits = b.bitcast(v, T.i64)
            halves = [b.trunc(bits, T.i32), b.trunc(b.lshr(bits, ConstantInt(T.i64, 32)), T.i32)]
            lo, hi = (b.zext(b.call(i32, [mask, h, lane, c]), T.i64) for h in halves)
            b.ret(b.bitcast(b.or_(b.shl(hi, ConstantInt(T.i64, 32)), lo), T.f64))
            fn.linkage = "internal"
            fn.fn_attrs = ["alwaysinline", "convergent"]
            count += 1
    return count


# -- registration ----------------------------------------------------------------------------------------

register(CallRule("nvvm", inactive=True, writes_no_memory=True), prefixes=INACTIVE)
register(CallRule("nvvm", inactive=True, forward=_nothing, reverse=_refuse_reverse_fence), prefixes=FENCES)
register(CallRule("nvvm", inactive=True, forward=_nothing, reverse=_reverse_barrier),
         prefixes=(*CTA_BARRIERS, WARP_BARRIER))
register(CallRule("nvvm", inactive=True, forward=_nothing, reverse=_refuse_reverse_barrier),
         prefixes=UNMIRRORED_BARRIERS)
register(CallRule("nvvm", writes_no_memory=True, forward=_check_bits, reverse=_check_bits_reverse),
         prefixes=(*SHUFFLES, *BIT_CALLS))
register(CallRule("nvvm", writes_no_memory=True, forward=_forward_shuffle, reverse=_reverse_shuffle),
         names=tuple(f"{_NVVM}shfl.sync.{m}.f32" for m in SHUFFLE_MODES))
register(CallRule("nvvm", writes_no_memory=True, forward=_forward_shuffle, reverse=_reverse_shuffle),
         prefixes=(F64_SHUFFLE,))
register_copy_preparation(-20, fuse_double_shuffles)
register_copy_preparation(30, fuse_double_shuffles)
register_lowering(0, lambda name: (name or "").startswith(F64_SHUFFLE), define_double_shuffles)
_fwd, _rev = _unary(partial=_sin_cos_partial)
register(CallRule("nvvm", writes_no_memory=True, pure=True, forward=_fwd, reverse=_rev),
         prefixes=(_NVVM + "sin.approx.", _NVVM + "cos.approx."))
_fwd, _rev = _unary(convert=_fp_cast)
register(CallRule("nvvm", writes_no_memory=True, pure=True, forward=_fwd, reverse=_rev),
         prefixes=(_NVVM + "d2f.",))
register_global_shadow_zeroing(zero_shared_shadows)
register_module_preparation(-10, refuse_dynamic_shared_memory)

__all__ = ["CTA_BARRIERS", "FENCES", "INACTIVE", "SHARED", "SYNCTHREADS", "barrier", "carries_float_bits",
           "refuse_dynamic_shared_memory", "targets_nvptx", "zero_shared_shadows"]
