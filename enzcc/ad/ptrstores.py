"""Pointers without derivatives kept in memory that has derivatives (Enzyme: "mismatched activity").

Storing a pointer that has no shadow (an ``enzyme_const`` argument, memory enzcc gives no shadow) into memory
with a shadow stores null into the shadow slot. A pointer loaded back from that slot is active (it comes from
memory with derivatives), and its shadow is that null: reading or writing floats through it in the derivative
dereferences null (a crash), or would lose the derivative. Where the optimizer forwarded the stored pointer to
its use, no load is left and nothing goes wrong; with ``enzyme_runtime_activity`` the pointer is its own
shadow there (:mod:`enzcc.ad.runtime_activity`). Otherwise a pointer read back from memory that may hold such
a slot, and used where its shadow is dereferenced, is refused at compile time, naming the store: the user
passes the pointer with ``enzyme_dup`` and a shadow, or asks for runtime activity. A pointer read back only to
be compared, or to read integers, keeps its null shadow, which is never dereferenced.

The analysis works on the Activity object of :mod:`enzcc.ad.activity` (it does not import it)."""

from __future__ import annotations

from enzcc.ad.api import has_float, has_pointer
from enzcc.ad.memory import base_object, byte_offset
from enzcc.ad.registry import called_function, is_inactive
from enzcc.ir import types as T
from enzcc.ir.instructions import Alloca, Call, ExtractValue, InsertValue, Instruction, Load, Phi, Select, Store
from enzcc.ir.values import (ConstantExpr, ConstantInt, ConstantNull, ConstantPoison, ConstantUndef, ConstantZero,
                              GlobalRef, Value)

#: instructions that move a pointer along without touching its memory
_FORWARD = ("getelementptr", "bitcast", "addrspacecast", "phi", "select", "freeze")
#: uses of a pointer that never touch its shadow
_HARMLESS = ("icmp", "ptrtoint")


def check(act, insts: list[Instruction], is_user_call) -> None:
    """Refuse a load of a pointer whose shadow may be the null stored for a pointer without derivatives and is
    then dereferenced for derivatives, here or in a call that is not inlined (``is_user_call``) given the
    memory (the error names the store and the pointer stored)."""
    slots = [s for inst in insts for s in _slots(act, inst)]
    if act.runtime_activity:  # (a pointer stored alone is its own shadow there: reads through it are inactive
        # at run time; one stored as a field of a whole record is not written to the shadow record)
        slots = [s for s in slots if not isinstance(s[0].value.type, T.PointerType)]
    if not slots:
        return
    dl = act.fn.module.data_layout
    loads = [i for i in insts if isinstance(i, Load) and has_pointer(i.type) and act.is_active_ptr(i.pointer)]
    checked: set[int] = set()
    grown = True
    while grown:  # (a pointer read back and stored again elsewhere with derivatives: that place too)
        grown = False
        for load in loads:
            hit = None if id(load) in checked else next((s for s in slots if _may_alias(s, load.pointer, dl)), None)
            if hit is None:
                continue
            checked.add(id(load))
            moved: list[Store] = []
            if _shadow_dereferenced(act, load, moved):
                _refuse(act, hit)
            slots += [(st, hit[1], st.pointer) for st in moved]
            grown = grown or bool(moved)
    for inst in insts:
        if isinstance(inst, Call) and is_user_call(inst):
            callee = inst.module.functions[inst.callee_name]
            if any(act.is_active_ptr(a) and _reads_back(callee, k, set())
                   for k, a in enumerate(inst.args) if isinstance(a.type, T.PointerType)):
                _refuse(act, slots[0])  # (which slot it reads: conservatively, any)


def null_based(v: Value, seen: set | None = None) -> bool:
    """Whether every address ``v`` can hold is null plus an offset (through getelementptr, casts, selects and
    phis): it points to no memory, so it needs no shadow (:mod:`enzcc.ad.shadow`), and one stored into memory
    with derivatives is no pointer without derivatives there."""
    seen = set() if seen is None else seen
    if id(v) in seen:
        return True
    seen.add(id(v))
    v = base_object(v)
    if isinstance(v, ConstantNull):
        return True
    if isinstance(v, ConstantExpr) and v.opcode == "inttoptr" and isinstance(v.operands[0], ConstantInt) and \
            0 <= v.operands[0].value < 4096:
        return True  # (the optimizer's null->field on a path a valid run never takes: inttoptr (i64 8 to ptr))
    if isinstance(v, Load) and null_based(v.pointer, seen):
        return True  # read from no memory: the path faults before its value is used
    if isinstance(v, Select):
        return null_based(v.true_value, seen) and null_based(v.false_value, seen)
    if isinstance(v, Phi):
        return all(null_based(x, seen) for x, _ in v.incoming)
    return False


def _slots(act, inst: Instruction) -> list[tuple[Instruction, object, object]]:
    """``(instruction, pointer stored, address)`` for each pointer without a shadow that ``inst`` puts into
    memory with derivatives: a store of it, a store of a record built with it (``insertvalue``)."""
    if not (isinstance(inst, Store) and act.is_active_ptr(inst.pointer) and has_pointer(inst.value.type)):
        return []
    if isinstance(inst.value.type, T.PointerType):
        return [(inst, inst.value, inst.pointer)] if _unshadowed(act, inst.value) else []
    out, v = [], inst.value
    while isinstance(v, InsertValue):
        if isinstance(v.value.type, T.PointerType) and _unshadowed(act, v.value):
            out.append((inst, v.value, None))  # (a field of the record: any offset of its address)
        v = v.aggregate
    return [(i, p, inst.pointer) for i, p, _ in out]


def _unshadowed(act, p) -> bool:
    """A pointer with no shadow that points to memory (not null, undef or poison)."""
    if act.is_active_ptr(p):
        return False
    if null_based(p):
        return False
    base = base_object(p)
    while isinstance(base, ConstantExpr) and base.opcode in ("getelementptr", "bitcast", "addrspacecast"):
        base = base_object(base.operands[0])
    if isinstance(base, GlobalRef):
        # a function, a vtable, typeinfo: read back to be called through (indirect calls have their own rules),
        # never to reach floats with derivatives
        target = base.resolve()
        return target is not None and base.symbol not in base.module.functions and \
            getattr(target, "value_type", None) is not None and not has_pointer(target.value_type)
    return not isinstance(base, (ConstantNull, ConstantUndef, ConstantPoison, ConstantZero))


def _may_alias(slot, q, dl) -> bool:
    """Whether the pointer slot a store wrote may be the one ``q`` reads: the same object at the same byte
    offset, or objects enzcc cannot tell apart (two arguments, or memory copied from one to the other)."""
    store, _, p = slot
    if isinstance(store.value.type, T.PointerType):
        base_p, off_p = byte_offset(p, dl)
    else:
        base_p, off_p = base_object(p), None
    base_q, off_q = byte_offset(q, dl)
    if base_p is not None and base_q is not None and base_p is not base_q and \
            _distinct_object(base_p) and _distinct_object(base_q):
        return False  # (two different locals: an OpenMP region's captured variables at -O0)
    if base_p is None or base_q is None or base_p is not base_q:
        return True
    return off_p is None or off_q is None or abs(off_p - off_q) < dl.alloc_size(T.ptr)


def _distinct_object(base) -> bool:
    """A local (``alloca``) only loaded from and stored to (or handed to a function the program runs through a
    call, an OpenMP region, whose own derivative sees what it holds): no pointer is read from it but what was
    stored into it, none copied from another local's bytes."""
    if not isinstance(base, Alloca):
        return False
    for use in base.uses:
        u = use.user
        if isinstance(u, Load) and use.index == 0 or isinstance(u, Store) and use.index == 1 and u.value is not base:
            continue
        if isinstance(u, Call) and ((u.callee_name or "").startswith("llvm.lifetime.") or called_function(u)):
            continue
        return False
    return True


def _reads_back(fn, k: int, seen: set) -> bool:
    """Whether ``fn`` (or a function it calls with the memory) loads a pointer from the memory its pointer
    parameter ``k`` points to and dereferences that pointer's shadow (:func:`_shadow_dereferenced`, without
    knowing which of its memory has derivatives); a local the parameter is spilled to (-O0) is followed."""
    if (fn.name, k) in seen or fn.is_declaration or k >= len(fn.args):
        return False
    seen.add((fn.name, k))
    fn.blocks  # (a body is parsed on first use)
    done, stack = {id(fn.args[k])}, [fn.args[k]]
    while stack:
        v = stack.pop()
        for use in v.uses:
            u, follow = use.user, None
            if u.opcode in _FORWARD or (isinstance(v, Alloca) and isinstance(u, Load)):
                follow = u  # (a load of the local a parameter was spilled to: the parameter again)
            elif isinstance(u, Load) and has_pointer(u.type):
                if _shadow_dereferenced(None, u):
                    return True
            elif isinstance(u, Store) and use.index == 0 and isinstance(u.pointer, Alloca):
                follow = u.pointer  # (spilled: what is loaded back from the local is the parameter again)
            elif isinstance(u, Call) and u.callee_name in fn.module.functions and use.index >= 1:
                if _reads_back(fn.module.functions[u.callee_name], use.index - 1, seen):
                    return True
            if follow is not None and id(follow) not in done:
                done.add(id(follow))
                stack.append(follow)
    return False


def _shadow_dereferenced(act, load: Load, moved: list | None = None) -> bool:
    """Whether the derivative code reads or writes through the shadow of the pointer ``load`` reads (or of
    one in the record it reads): floats or pointers loaded or stored through it, a copy or a call given it,
    the pointer returned, or stored into memory with derivatives (unless ``moved`` is given: such stores are
    put there, for the caller to follow what is read back from them). Comparisons and integer reads are not."""
    seen, stack = {id(load)}, [load]
    while stack:
        v = stack.pop()
        for use in v.uses:
            u = use.user
            if u.opcode in _HARMLESS:
                continue
            if u.opcode in _FORWARD or u.opcode == "extractvalue":
                if has_pointer(u.type) and id(u) not in seen:
                    seen.add(id(u))
                    stack.append(u)
                continue
            if isinstance(u, Load):
                if has_float(u.type) or has_pointer(u.type):
                    return True
                continue
            if isinstance(u, Store):
                if use.index == 1 and not (has_float(u.value.type) or has_pointer(u.value.type)):
                    continue  # (an integer written: it has no shadow)
                if use.index == 0 and act is not None and not act.is_active_ptr(u.pointer):
                    continue  # (kept in memory without derivatives: its shadow is not stored)
                if use.index == 0 and moved is not None and isinstance(u.value.type, T.PointerType):
                    moved.append(u)
                    continue
                return True
            if isinstance(u, Call) and use.index == 0:
                continue  # (called through: a function pointer, which indirect calls' own rules handle)
            if isinstance(u, Call) and (is_inactive(u.callee_name) or
                                        (u.callee_name or "").startswith(("llvm.lifetime", "llvm.dbg"))):
                continue
            return True
    return False


def _field_origin(v):
    """The value a record field was built from (``extractvalue`` of ``insertvalue``: a record returned by value
    and taken apart), for the message to name the argument rather than the extraction."""
    while isinstance(v, ExtractValue):
        agg = v.aggregate
        while isinstance(agg, InsertValue) and tuple(agg.indices) != tuple(v.indices):
            agg = agg.aggregate
        if not isinstance(agg, InsertValue):
            return v
        v = agg.value
    return v


def _refuse(act, slot) -> None:
    """One line naming the store and the pointer without derivatives it keeps there."""
    from enzcc.ad.errors import ad_error

    store, value, _ = slot
    value = _field_origin(value)
    const_args = {id(a) for a in act.fn.args if not act.is_active_ptr(a)}
    reached: dict = {}
    root = act._unknown_root(value, const_args, reached=reached)
    if root is None and reached:
        arg = next(iter(reached.values()))
        what, who = act.const_parameter_words(arg)
        fix = f"pass {who} with enzyme_dup and a shadow"
    else:
        from enzcc.ad.errors import describe_pointer

        what = describe_pointer(root if root is not None else value) + ", which has no shadow"
        fix = "give it a shadow (pass the memory it comes from with enzyme_dup)"
    if act.runtime_activity:
        fix += " (enzyme_runtime_activity does not cover a pointer stored as a field of a whole record)"
    else:
        fix += ", or use enzyme_runtime_activity"
    raise ad_error(f"a pointer without derivatives, {what}, is stored here into memory with derivatives, and a "
                   "pointer read back from there is used to read or write values with derivatives through its "
                   f"shadow, which would be null; {fix} (Enzyme: mismatched activity)", store)
