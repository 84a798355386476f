"""Runtime activity (Enzyme's ``enzyme_runtime_activity``): a pointer whose shadow is the pointer itself when
the derivative runs is inactive.

Without it, activity is decided at compile time, and a pointer with derivatives must have a shadow that is
other memory. With it, the caller may pass ``enzyme_dup, x, x`` (``x`` has no derivative in this call), and a
pointer without a shadow merged with one that has one (a ``select`` or ``phi`` between an ``enzyme_const``
buffer and a ``enzyme_dup`` one) gets itself as its shadow. Every access of derivatives through a shadow then
first compares it with its primal:

- a tangent loaded through it is zero where they are equal (forward mode);
- a tangent or a pointer's shadow stored through it stores the primal value again where they are equal, so the
  primal memory is never overwritten with derivatives (forward mode, and pointer shadows in reverse mode);
- an adjoint added to memory through it adds nothing where they are equal, and the reverse of a store neither
  reads an adjoint from it nor zeroes it (reverse mode);
- copies and fills of shadow memory (``memcpy``, ``memset``) have a byte count of zero where they are equal,
  and releasing a shadow releases nothing (:mod:`enzcc.ad.calls.memfns`).

The comparisons are made from the primal pointer and its shadow, which the reverse sweep has (kept or
recomputed as any primal value): no extra tape.

Runtime activity cannot give a derivative to memory that has no shadow: a value with derivatives stored
there and read back has lost them. Memory reached only through an ``enzyme_const`` argument is refused at
compile time, as without the marker (:meth:`enzcc.ad.activity.Activity._refuse_const_read_back`); memory whose
shadow turns out to be itself when the derivative runs stops the program there with a message
(:func:`guard_lost_stores`), never a silent zero. Calls whose rules do not compare pointers with their shadows
(BLAS, libm functions writing through a pointer, registered derivatives...) are refused when they are given
memory with derivatives (:func:`check_calls`).
"""

from __future__ import annotations

from enzcc.ad.errors import ad_error
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder, const_float
from enzcc.ir.instructions import AtomicRMW, Call, Cast, GetElementPtr, Instruction, Load, Phi, Ret, Select, Store
from enzcc.ir.values import ConstantFloat, ConstantInt, ConstantSplat, Value


def enabled(activity) -> bool:
    """Whether the function is differentiated with runtime activity."""
    return getattr(activity, "runtime_activity", False)


def differs(b: IRBuilder, primal: Value, shadow: Value) -> Value:
    """``primal != shadow`` (an ``i1``): the memory has derivatives when the derivative runs. A shadow that is the
    primal value itself (a pointer merged with memory that has derivatives) is never active."""
    if shadow is primal:
        return ConstantInt(T.i1, 0)
    return b.icmp("ne", primal, shadow)


def tangent_or_zero(b: IRBuilder, active: Value, tangent: Value) -> Value:
    """The tangent loaded through a shadow, or zero where the memory is inactive (the shadow is the primal
    memory: what was loaded is a primal value)."""
    from enzcc.ad.emit import zero

    return b.select(active, tangent, zero(tangent.type))


def shadow_or_primal(b: IRBuilder, active: Value, shadow_value: Value, primal_value: Value) -> Value:
    """What to store through a shadow: the derivative, or the primal value where the memory is inactive (the
    store then writes back what the primal store wrote)."""
    return b.select(active, shadow_value, primal_value)


def no_adjoint(ty: T.Type) -> Value:
    """``-0.0``: adding it leaves every float as it is (``+0.0`` would turn ``-0.0`` into ``+0.0``), the adjoint
    an atomic add puts into inactive memory."""
    if isinstance(ty, T.VectorType):
        return ConstantSplat(ty, ConstantFloat(ty.element, -0.0))
    return const_float(ty, -0.0)


def count_or_zero(b: IRBuilder, active: Value, n: Value) -> Value:
    """A byte count for code on shadow memory (a copy, a fill): zero where the memory is inactive."""
    return b.select(active, n, ConstantInt(n.type, 0))


# -- what runtime activity cannot do ----------------------------------------------------------------------------

def check_calls(mode, insts: list[Instruction], what: str) -> None:
    """Refuse the atomic adds and calls given memory with derivatives whose rules do not compare that memory with
    its shadow (a rule says so with ``runtime_activity=True``; calls that are not inlined use derived functions
    made with runtime activity themselves)."""
    from enzcc.ad.registry import rule_for

    act = mode.activity
    for inst in insts:
        if isinstance(inst, AtomicRMW) and act.is_active_ptr(inst.operands[0]):
            raise ad_error(f"enzyme_runtime_activity with an atomic '{inst.operation}' on memory with derivatives "
                           f"is not supported in {what}", inst)
        if not isinstance(inst, Call) or not any(act.is_active_ptr(a) for a in inst.args):
            continue
        rule = rule_for(inst)
        if rule is None or rule.inactive or rule.runtime_activity:
            continue  # (a call that is not inlined: its derived functions are made with runtime activity)
        raise ad_error(f"enzyme_runtime_activity with a call to '{inst.callee_name}' given memory with derivatives "
                       f"is not supported (its rule does not check at run time whether a shadow is the memory "
                       f"itself)", inst)


def guard_lost_stores(mode, insts: list[Instruction]) -> None:
    """Stop the program where runtime activity would lose a derivative: a store of a value with derivatives (or
    a copy from memory with derivatives at run time, or a pointer to such memory) through a pointer whose shadow
    is the memory itself when it runs, into memory that the function reads back for another result (the
    function's result, or memory reached otherwise). Where the memory is read back only to be written there again
    (``y[i] = beta * y[i] + ...`` with ``enzyme_dup, y, y``), the lost derivative is the one of that memory, which
    the caller declared inactive: no check; nor where the value derives only from that memory (an update in
    place). The check is a call to a function that stops the program when the condition
    (:func:`_lost_condition`) holds."""
    from enzcc.ad.api import has_float
    from enzcc.ad.emit import fail_call_at_run_time_if

    act = mode.activity
    writes = [i for i in insts if (isinstance(i, Store) and act.is_active_ptr(i.pointer) and
                                   (has_float(i.value.type) and act.is_active(i.value) or
                                    isinstance(i.value.type, T.PointerType) and act.is_active_ptr(i.value)))
              or _active_copy(act, i)]
    calls = [(i, a) for i in insts for a in _written_by_call(act, i)]
    if not writes and not calls:
        return
    results = {id(v) for v in getattr(mode, "primal_returns", {}).values() if v is not None}
    escaping = _escaping_roots(act, insts, results)
    pointers_read = _pointer_read_roots(act, insts)
    for w in writes:
        if _may_lose(act, w, escaping, pointers_read):
            b = IRBuilder.after(w)
            fail_call_at_run_time_if(mode.module, b, _lost_condition(mode, w, b), _lost_message(mode, w))
    for call, dest in calls:
        if _roots(dest) & escaping and not _own_allocation(dest):
            b = IRBuilder.before(call)
            fail_call_at_run_time_if(mode.module, b, b.icmp("eq", dest, mode.shadows.of(dest, call)),
                                     _lost_message(mode, call))


def _may_lose(act, w: Instruction, escaping: set[int], pointers_read: set[int]) -> bool:
    """Whether the store or copy ``w`` may lose a derivative: its memory is read back (floats for a float, pointers
    for a pointer, either for a copy), is not the function's own allocation, and what it stores does not come
    only from that same memory."""
    dest = w.pointer if isinstance(w, Store) else w.args[0]
    read = escaping | pointers_read if not isinstance(w, Store) else \
        pointers_read if isinstance(w.value.type, T.PointerType) else escaping
    if not (_roots(dest) & read) or _own_allocation(dest):
        return False
    return not (isinstance(w, Store) and not isinstance(w.value.type, T.PointerType) and
                _derived_only_from(act, w.value, _roots(dest)))


def _lost_condition(mode, w: Instruction, b: IRBuilder) -> Value:
    """When the derivative is lost at ``w``: its memory is its own shadow, and what it stores has one (a copy's
    source has a shadow of its own; a pointer too; forward mode: the tangent stored is not zero)."""
    act = mode.activity
    dest = w.pointer if isinstance(w, Store) else w.args[0]
    lost = b.icmp("eq", dest, mode.shadows.of(dest, w))
    if not isinstance(w, Store):
        return b.and_(lost, differs(b, w.args[1], mode.shadows.of(w.args[1], w)))
    if isinstance(w.value.type, T.PointerType):
        return b.and_(lost, differs(b, w.value, mode.shadows._of_operand(w.value, w)))
    if act.mode == "forward" and isinstance(w.value.type, T.FloatType):
        return b.and_(lost, b.fcmp("une", mode._t(w.value), const_float(w.value.type, 0.0)))
    return lost


def _derived_only_from(act, value: Value, roots: set[int]) -> bool:
    """Whether the derivative of ``value`` comes only from floats loaded from memory based on ``roots`` (an update
    in place, ``x[1] = x[0] * x[0]``): where that memory is its own shadow, those loads have no derivative, so
    neither has ``value``, and storing it there loses nothing."""
    from enzcc.ir.instructions import BinaryOp, ExtractElement, ExtractValue, Freeze, InsertElement, InsertValue, \
        UnaryOp

    todo, seen = [value], set()
    while todo:
        v = todo.pop()
        if id(v) in seen or id(v) not in act.varied:
            continue
        seen.add(id(v))
        if isinstance(v, Load):
            if not _roots(v.pointer) <= roots:
                return False
        elif isinstance(v, (BinaryOp, UnaryOp, Cast, Select, Phi, Freeze, ExtractValue, InsertValue,
                            ExtractElement, InsertElement)):
            todo += [x for x, _ in v.incoming] if isinstance(v, Phi) else list(v.operands)
        elif isinstance(v, Call) and _pure(v):
            todo += list(v.args)
        else:
            return False
    return True


def _own_allocation(p: Value) -> bool:
    """Whether ``p`` points only into memory the function allocates (a local array, a ``malloc``): its shadow is
    a shadow allocation, never the memory itself."""
    from enzcc.ad.activity import is_allocation
    from enzcc.ir.instructions import Alloca

    roots = _roots(p, values=True)
    return bool(roots) and all(isinstance(r, Alloca) or (isinstance(r, Call) and is_allocation(r))
                               for r in roots)


def _written_by_call(act, inst: Instruction) -> list[Value]:
    """The pointers with derivatives into which a call that is not inlined, given derivatives, may store floats
    (its body says: :func:`enzcc.ad.paramuse.float_access`)."""
    from enzcc.ad.activity import is_user_call
    from enzcc.ad.paramuse import float_access

    if not (isinstance(inst, Call) and is_user_call(inst)) or inst.callee_name not in inst.module.functions:
        return []
    if not any(act.is_active(a) or act.is_active_ptr(a) for a in inst.args):
        return []
    callee = inst.module.functions[inst.callee_name]
    return [a for k, a in enumerate(inst.args) if isinstance(a.type, T.PointerType) and act.is_active_ptr(a) and
            float_access(callee, k)[1]]


def _is_copy(inst: Instruction) -> bool:
    return isinstance(inst, Call) and (inst.callee_name or "").startswith(("llvm.memcpy", "llvm.memmove"))


def _active_copy(act, inst: Instruction) -> bool:
    """A ``memcpy`` / ``memmove`` between memory with derivatives."""
    return _is_copy(inst) and act.is_active_ptr(inst.args[0]) and act.is_active_ptr(inst.args[1])


def _lost_message(mode, st: Instruction) -> str:
    from enzcc.ad.debuginfo import instruction_location

    where = instruction_location(st)
    at = f" ({where})" if where else ""
    what = "stored" if isinstance(st, Store) else "copied" if _is_copy(st) else \
        f"stored by a call to '{st.callee_name}'"
    if isinstance(st, Store) and isinstance(st.value.type, T.PointerType):
        what = "stored"
        return (f"enzyme_runtime_activity: in '{mode.dc.fn.name}'{at}, a pointer to memory with derivatives is "
                f"{what} into memory whose shadow is the memory itself (inactive at run time: passed as its own shadow, or an enzyme_const buffer) and read back: "
                "its shadow would be lost; pass that memory a shadow of its own")
    return (f"enzyme_runtime_activity: in '{mode.dc.fn.name}'{at}, a value with derivatives is {what} into memory "
            "whose shadow is the memory itself (inactive at run time: passed as its own shadow, or an enzyme_const buffer) and read back for a result: its "
            "derivative would be lost; pass that memory a shadow of its own")


def _roots(p: Value, values: bool = False):
    """Where a pointer comes from, through address arithmetic, casts, selects and phis: the arguments and
    other values (loads, calls, allocations) it may be based on, by id (``values``: a list of them)."""
    out: set[int] = set()
    found: list[Value] = []
    stack, seen = [p], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, GetElementPtr):
            stack.append(v.pointer)
        elif isinstance(v, Cast) and isinstance(v.value.type, T.PointerType):
            stack.append(v.value)
        elif isinstance(v, Select):
            stack += [v.true_value, v.false_value]
        elif isinstance(v, Phi):
            stack += [x for x, _ in v.incoming]
        else:
            out.add(id(v))
            found.append(v)
    return found if values else out


def _escaping_roots(act, insts: list[Instruction], results: set[int]) -> set[int]:
    """The roots (:func:`_roots`) of memory from which the function reads floats that reach something other than
    memory with the same roots: its result, a call, a store elsewhere."""
    from enzcc.ad.api import has_float

    out: set[int] = set()
    primal = {id(i) for i in insts}
    for ld in insts:
        if isinstance(ld, Call):
            out |= _read_by_call(act, ld)
        if not (isinstance(ld, Load) and has_float(ld.type) and act.is_active_ptr(ld.pointer)):
            continue
        roots = _roots(ld.pointer)
        if not roots <= out and _reaches_elsewhere(ld, roots, primal, results):
            out |= roots
    return out


def _pointer_read_roots(act, insts: list[Instruction]) -> set[int]:
    """The roots of memory with derivatives that the function reads pointers from (their shadows are read from
    the same place in the shadow memory)."""
    out: set[int] = set()
    for ld in insts:
        if isinstance(ld, Load) and isinstance(ld.type, T.PointerType) and act.is_active_ptr(ld.pointer):
            out |= _roots(ld.pointer)
    return out


def _read_by_call(act, call: Call) -> set[int]:
    """The roots of memory with derivatives that a call reads for something else: the source of a copy into other
    memory, or what a call that is not inlined reads floats from (its body says:
    :func:`enzcc.ad.paramuse.float_access`)."""
    from enzcc.ad.activity import is_user_call
    from enzcc.ad.paramuse import float_access

    if _is_copy(call):
        src = _roots(call.args[1])
        return src if act.is_active_ptr(call.args[1]) and not (_roots(call.args[0]) <= src) else set()
    if not is_user_call(call) or call.callee_name not in call.module.functions:
        return set()
    callee = call.module.functions[call.callee_name]
    out: set[int] = set()
    for k, a in enumerate(call.args):
        if isinstance(a.type, T.PointerType) and act.is_active_ptr(a) and float_access(callee, k)[0]:
            out |= _roots(a)
    return out


def _reaches_elsewhere(load: Load, roots: set[int], primal: set[int], results: set[int]) -> bool:
    """Whether the value of ``load`` flows (through arithmetic) into a result, a call, a branch condition
    ignored, or a store into memory not based on ``roots``; only the primal instructions (by id: ``primal``)
    count, not the derivative code made next to them (``results``: the values the primal returned, where forward
    mode's ``ret`` now returns a tangent)."""
    todo, seen = [load], set()
    while todo:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if id(v) in results:
            return True
        for u in v.uses:
            user = u.user
            if id(user) not in primal:
                continue
            if isinstance(user, Store):
                if user.value is v and not (_roots(user.pointer) <= roots):
                    return True
            elif isinstance(user, Call) and _pure(user):
                todo.append(user)  # (math: its result goes on)
            elif isinstance(user, (Ret, Call, AtomicRMW)):
                return True
            elif isinstance(user, Instruction) and user.type is not None and not isinstance(user.type, T.VoidType) \
                    and user.opcode not in ("fcmp", "icmp", "br", "switch"):
                todo.append(user)
    return False


def _pure(call: Call) -> bool:
    from enzcc.ad.registry import rule_for

    rule = rule_for(call)
    return rule is not None and rule.pure


__all__ = ["check_calls", "count_or_zero", "differs", "enabled", "guard_lost_stores", "no_adjoint",
           "shadow_or_primal", "tangent_or_zero"]
