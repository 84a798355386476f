"""Atomic instructions of the primal: what their derivatives are, and which ones enzcc refuses.

``atomicrmw fadd`` / ``fsub`` on floats (a scalar or a vector of them: C11 ``__atomic_fetch_add``, ``#pragma omp
atomic``, CUDA's ``atomicAdd``) is supported when the value it returns (the memory's value before the add) carries
no derivative:

* forward mode: the tangent of the value is added to the target's shadow by the same atomic operation (same
  ordering and sync scope: a ``syncscope("block")`` stays one), just before the primal's, so that what the
  primal's release publishes, the tangent's does too;
* reverse mode: ``adjoint(value) += *shadow(target)`` (``-=`` for ``fsub``), read where the reverse sweep
  reaches the instruction; the shadow is left as it is, since an add keeps the adjoint of what it adds to. Where
  other threads may add to that shadow at the same time (OpenMP, GPU code), the read is an atomic load.

Refused with one line naming the function and the source line (never a zero derivative):

* an ``atomicrmw fadd``/``fsub`` whose returned value carries a derivative;
* any other atomic operation on floating-point data with derivatives: ``xchg``, ``fmax``, ``fmin``,
  ``fmaximum``, ``fminimum`` (on floats, or on a float's bits moved as an integer);
* a compare-and-exchange of a float's bits (the loop ``std::atomic<double>::fetch_add``, ``_Atomic double +=``
  and CUDA's ``atomicCAS`` idioms compile to);
* in reverse mode, an atomic load or store of a float with derivatives ordered more strongly than
  ``monotonic`` in code that runs in several threads at once: it synchronizes threads, and the reverse sweep
  would need that synchronization the other way round.

Integer atomics on data without derivatives (counters, locks, flags) stay as they are.
"""

from __future__ import annotations

from enzcc.ad.api import has_float
from enzcc.ad.emit import zero
from enzcc.ad.errors import ad_error
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import AtomicRMW, Cast, CmpXchg, ExtractValue, Instruction, Load, Store
from enzcc.ir.values import ConstantInt, Value

ADDS = {"fadd": 1.0, "fsub": -1.0}
"""The float operations with a derivative, and the sign their value's adjoint gets the target's adjoint with."""

_BIT_MOVES = ("trunc", "zext", "sext", "lshr", "ashr", "shl", "and", "or", "xor", "phi", "select", "bitcast",
              "freeze", "extractelement", "extractvalue", "insertelement", "insertvalue")
"""Instructions through which a float's bits move as an integer."""

_WEAK_ORDERINGS = (None, "unordered", "monotonic")
"""Orderings that synchronize nothing: an atomic access so ordered is, to the derivative, a plain one."""


def target(inst: Instruction) -> Value:
    """The address an ``atomicrmw`` or ``cmpxchg`` works on."""
    return inst.operands[0]


def check_atomics(mode, insts, concurrent: bool = False) -> None:
    """Refuse the atomic instructions among ``insts`` (the primal's) whose derivative enzcc does not make (see
    the module's docstring). ``mode``: a forward or reverse mode with its ``activity`` and ``memtypes``;
    ``concurrent``: the reverse code runs in several threads at once."""
    act = mode.activity
    for inst in insts:
        if isinstance(inst, AtomicRMW):
            _check_rmw(mode, inst)
        elif isinstance(inst, CmpXchg):
            values = [inst.operands[1], inst.operands[2]]
            if (act.is_active_ptr(target(inst)) and _float_bits(mode, inst, values)) or \
                    any(_from_float(v, act.varied) for v in values):
                raise _compare_exchange_error(inst)
        elif concurrent and isinstance(inst, (Load, Store)) and inst.ordering not in _WEAK_ORDERINGS:
            value = inst if isinstance(inst, Load) else inst.value
            if has_float(value.type) and act.is_active_ptr(inst.pointer):
                raise ad_error(f"an atomic {inst.opcode} ({inst.ordering}) of a floating-point value with "
                               "derivatives in code that runs in several threads at once: it synchronizes "
                               "threads, which the reverse sweep would have to do the other way round; enzcc "
                               "supports only monotonic (relaxed) atomic loads and stores there", inst)


def refuse_float_compare_exchange(activity, insts) -> None:
    """Refuse a compare-and-exchange of a float's bits (as its bitcasts show) in memory with derivatives: the
    activity analysis asks first, since such a loop's float rebuilt from the bits it loaded would otherwise be
    refused with a message that names no atomic."""
    for inst in insts:
        if isinstance(inst, CmpXchg) and activity.is_active_ptr(target(inst)) and \
                (any(_from_float(v) for v in inst.operands[1:]) or _becomes_float(inst)):
            raise _compare_exchange_error(inst)


def _compare_exchange_error(inst: Instruction):
    return ad_error("an atomic compare-and-exchange of a floating-point value (the loop that "
                    "std::atomic<double>::fetch_add, _Atomic double += or atomicCAS compile to) has no derivative "
                    "in enzcc; use an atomic add (__atomic_fetch_add, atomicAdd)", inst)


def _check_rmw(mode, inst: AtomicRMW) -> None:
    act = mode.activity
    p, v = target(inst), inst.operands[1]
    if has_float(inst.type):
        if not (act.is_active_ptr(p) or id(v) in act.varied):
            return
        if inst.operation not in ADDS:
            raise ad_error(f"atomicrmw {inst.operation} on floating-point data with derivatives has no derivative "
                           "in enzcc (only atomic adds and subtractions do)", inst)
        if act.is_active(inst):
            raise ad_error(f"the value an atomic {'add' if inst.operation == 'fadd' else 'subtraction'} returns "
                           "(the memory's value before it) carries a derivative here; enzcc supports atomic adds "
                           "only when that value is not used in the computation", inst)
    elif (act.is_active_ptr(p) and _float_bits(mode, inst, [v])) or _from_float(v, act.varied):
        raise ad_error(f"atomicrmw {inst.operation} on a floating-point value's bits (moved as an integer) has no "
                       "derivative in enzcc", inst)


def _float_bits(mode, inst: Instruction, values: list[Value]) -> bool:
    """Whether the integer atomic ``inst`` moves a float's bits: one of ``values`` (its operands) comes from a
    float (through bit moves), what it returns becomes a float, or the memory it works on holds floats of that
    width and is never accessed with that integer type otherwise."""
    if any(_from_float(v) for v in values) or _becomes_float(inst):
        return True
    ty = values[0].type
    memtypes = mode.memtypes
    return memtypes.float_of_width(target(inst), ty) is not None and ty not in memtypes.access_kinds(target(inst))


def _from_float(v: Value, varied: set | None = None) -> bool:
    """Whether integer ``v`` comes, through bit moves, from a bitcast of a float (of a varied one, if ``varied``:
    the ids of the values that depend on inputs with derivatives)."""
    stack, seen = [v], set()
    while stack:
        x = stack.pop()
        if id(x) in seen or not isinstance(x, Instruction):
            continue
        seen.add(id(x))
        if isinstance(x, Cast) and x.opcode == "bitcast" and has_float(x.value.type):
            if varied is None or id(x.value) in varied:
                return True
        elif x.opcode in _BIT_MOVES:
            stack += [op for op in x.operands if isinstance(op, Instruction)]
    return False


def _becomes_float(inst: Instruction) -> bool:
    """Whether what integer atomic ``inst`` returns (a cmpxchg's loaded value) becomes a float through bit
    moves."""
    stack, seen = [inst], set()
    while stack:
        x = stack.pop()
        for use in x.uses:
            u = use.user
            if id(u) in seen:
                continue
            seen.add(id(u))
            if isinstance(u, Cast) and u.opcode == "bitcast" and has_float(u.type):
                return True
            if u.opcode in _BIT_MOVES and not (isinstance(x, CmpXchg) and isinstance(u, ExtractValue)
                                               and list(u.indices) != [0]):
                stack.append(u)
    return False


# -- derivatives ---------------------------------------------------------------------------------------------

def forward_atomic_add(mode, inst: AtomicRMW) -> None:
    """Forward mode: ``atomicrmw fadd shadow(p), tangent(v)`` (the same operation, ordering and sync scope), just
    before the primal's. Nothing when the value has no tangent (the shadow is unchanged)."""
    p, v = target(inst), inst.operands[1]
    if inst.operation not in ADDS or not mode.activity.is_active_ptr(p) or id(v) not in mode.tangents:
        return
    b = IRBuilder.before(inst)
    b.insert(AtomicRMW(inst.operation, mode.shadows.of(p, inst), mode._t(v), inst.ordering, inst.align,
                       inst.volatile, inst.syncscope))


def reverse_atomic_add(mode, inst: AtomicRMW, block, b: IRBuilder, concurrent: bool) -> None:
    """Reverse mode: ``adjoint(v) += *shadow(p)`` (``-=`` for ``fsub``), an atomic load of the shadow where
    ``concurrent`` (other threads may be adding to it)."""
    p, v = target(inst), inst.operands[1]
    if inst.operation not in ADDS or not mode.activity.is_active_ptr(p) or not mode.activity.is_active(v):
        return
    d = read_shadow(b, v.type, mode._shadow(p, block, b, inst), inst.align, concurrent)
    if ADDS[inst.operation] < 0:
        d = b.fneg(d)
    mode._add_adjoint(b, v, d)


def read_shadow(b: IRBuilder, ty: T.Type, sp: Value, align, atomic: bool) -> Value:
    """``*sp`` as a ``ty``; with ``atomic``, as monotonic atomic loads (each lane of a vector on its own), since
    other threads may write it at the same time."""
    if not atomic:
        return b.load(ty, sp, align=align)
    if not isinstance(ty, T.VectorType):
        return b.insert(Load(ty, sp, align=align, ordering="monotonic"))
    out = zero(ty)
    size = max(1, ty.element.bits // 8)
    for k in range(ty.count):
        lane = b.gep(ty.element, sp, [ConstantInt(T.i64, k)]) if k else sp
        x = b.insert(Load(ty.element, lane, align=min(align or size, size), ordering="monotonic"))
        out = b.insert_element(out, x, ConstantInt(T.i64, k))
    return out


__all__ = ["ADDS", "check_atomics", "forward_atomic_add", "read_shadow", "refuse_float_compare_exchange",
           "reverse_atomic_add", "target"]
