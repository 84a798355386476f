"""Type analysis for memory: which bytes hold floating-point data.

LLVM IR memory is untyped: ``memcpy`` copies bytes, and optimized code may move a ``double`` through an
``i64``. The reverse sweep must know whether copied bytes are floats (their adjoints move back from the
destination's shadow to the source's) or pointers (the shadow pointers are copied forward) or plain integers.
The type of a memory object is found from how the function accesses it (loads, stores and the pointers derived
from the same base object), and from TBAA type tags that clang and flang attach.
"""

from __future__ import annotations

import re
import weakref

from enzcc.ir import types as T
from enzcc.ad.errors import ad_error
from enzcc.ad.registry import called_arguments, called_function, rule_named
from enzcc.ir.instructions import Alloca, AtomicRMW, Call, Cast, GetElementPtr, Load, Phi, Select, Store
from enzcc.ir.values import Argument, ConstantInt, GlobalRef, Value

_TBAA_FLOATS = {"double": T.FloatType("double"), "float": T.FloatType("float"),
                "long double": T.FloatType("x86_fp80")}
#: TBAA names of integer types (C and C++; ``omnipotent char`` is any type, so it is not among them)
_TBAA_INT_BITS = {"bool": 8, "_Bool": 8, "short": 16, "int": 32, "long": 64, "long long": 64, "__int128": 128}
_TBAA_INTS = tuple(_TBAA_INT_BITS)


#: allocation functions whose result is fresh memory (shadowed when it holds floats)
ALLOCATORS = {"malloc", "calloc", "realloc", "_Znwm", "_Znam", "aligned_alloc"}

def is_allocation(call) -> bool:
    """A call that allocates memory: malloc & co., or a function registered with ``__enzyme_allocation_like``."""
    name = call.callee_name
    if not name:
        return False
    if name in ALLOCATORS:
        return True
    module = call.module
    if module is None:
        return False
    from enzcc.ad.hints import hints_of

    return name in hints_of(module).allocators


def base_object(p: Value) -> Value:
    """Strip address arithmetic down to the object a pointer points into."""
    seen = 0
    while seen < 64:
        seen += 1
        if isinstance(p, GetElementPtr):
            p = p.pointer
        elif isinstance(p, Cast) and p.opcode in ("bitcast", "addrspacecast"):
            p = p.value
        else:
            return p
    return p


def byte_offset(p, dl):
    """(object, constant byte offset) of an address made by ``getelementptr`` with constant indices."""
    base, lo, hi = _offset_range(p, dl)
    return (base, lo) if base is not None and lo == hi else (None, None)



class MemoryTypes:
    """Access-type facts about the memory objects of one function."""

    def __init__(self, fn, seeds: dict[int, set] | None = None, _depth: int = 0):
        self.fn = fn
        self._types: dict[int, set] = {}
        self._fields: dict[int, dict[int, set]] = {}
        """id(object) -> byte offset -> the kinds accessed there."""
        self._loose: set[int] = set()
        """Objects accessed at an offset that is not constant (or through a cast): their fields are unknown."""
        self._seeds = dict(seeds or {})
        """id(argument) -> kinds its memory is known to hold from outside (the caller, at the call site); id(object)
        -> kinds a function the program runs through a call (an OpenMP region) accesses it with."""
        for inst in fn.instructions():
            if isinstance(inst, Load):
                if _tbaa_float(inst) is not None:  # a double moved as an i64, tagged as a double
                    self._note(inst.pointer, _tbaa_float(inst))
                elif not _is_bit_copy(inst):
                    self._note(inst.pointer, inst.type)
                if isinstance(inst.type, T.PointerType):
                    pointee = _pointee_kind(tbaa_access_type(inst))
                    if pointee is not None:  # loaded from a field of type float * (clang's pointer TBAA)
                        self._note(inst, pointee)
            elif isinstance(inst, Store):
                if _tbaa_float(inst) is not None:
                    self._note(inst.pointer, _tbaa_float(inst))
                elif not (isinstance(inst.value, Load) and _is_bit_copy(inst.value)):
                    self._note(inst.pointer, inst.value.type)
            elif isinstance(inst, AtomicRMW) and inst.operation != "xchg":  # (an exchange may move a float's bits)
                self._note(inst.operands[0], inst.type)
            elif isinstance(inst, Alloca):
                self._types.setdefault(id(inst), set()).update(_declared_kinds(inst.allocated_type))
            elif isinstance(inst, Call) and inst.args and _declared_type(inst) is not None:
                self._note(inst.args[0], _declared_type(inst))  # (__enzyme_double(p) and the like)
            if isinstance(inst, Call) and _depth < 4:
                self._note_called(inst, _depth)

    def _note_called(self, call: Call, depth: int) -> None:
        """The memory a call hands to a function it runs (an OpenMP region: :func:`called_arguments`) holds what
        that function accesses it with: memory used only inside a parallel region is typed by the region's
        loads and stores (a ``memcpy`` into it before the region). A pointer captured by reference (a local the
        call's argument points to, holding it) counts as well: what the function reads through the pointer it
        loads from its parameter is what the memory of each pointer stored into that local holds."""
        pairs = called_arguments(call)
        module = getattr(self.fn, "module", None)
        name = called_function(call) if pairs else None
        if name and module is not None:  # (the prepared copy: simplified, its parameters used directly)
            name = getattr(module, "enzcc_prepared", {}).get(name, name)
        callee = module.functions.get(name) if module is not None and name else None
        if callee is None or callee.is_declaration:
            return
        inner = MemoryTypes(callee, _depth=depth + 1)
        for arg, k in pairs:
            if not (isinstance(arg.type, T.PointerType) and 0 <= k < len(callee.args)):
                continue
            param = callee.args[k]
            self._seed(arg, inner.kinds(param))
            held = set()
            for use in param.uses:
                if isinstance(use.user, Load) and isinstance(use.user.type, T.PointerType):
                    held |= inner.kinds(use.user)
            if held and isinstance(arg, Alloca):
                self._seed_held(arg, held)

    def _seed(self, p: Value, kinds: set) -> None:
        if kinds:
            key = id(base_object(p))
            self._seeds[key] = self._seeds.get(key, set()) | kinds

    def _seed_held(self, slot: Alloca, kinds: set, depth: int = 0) -> None:
        """The memory of every pointer local ``slot`` holds (stored into it, loaded from it) holds ``kinds``; a
        pointer stored there that was itself loaded from another local (unoptimized code keeps each variable
        in one) stands for every pointer that local holds too."""
        for use in slot.uses:
            u = use.user
            if isinstance(u, Store) and use.index == 1 and isinstance(u.value.type, T.PointerType):
                self._seed(u.value, kinds)
                if isinstance(u.value, Load) and isinstance(u.value.pointer, Alloca) and depth < 2:
                    self._seed_held(u.value.pointer, kinds, depth + 1)
            elif isinstance(u, Load) and use.index == 0 and isinstance(u.type, T.PointerType):
                self._seed(u, kinds)

    def _note(self, p: Value, ty: T.Type) -> None:
        base = base_object(p)
        kind = _scalar_kind(ty)
        self._types.setdefault(id(base), set()).add(kind)
        # fields: the kind at each constant byte offset from the object (an access elsewhere makes them unknown)
        dl = getattr(getattr(self.fn, "module", None), "data_layout", None)
        at, off = byte_offset(p, dl) if dl is not None else (None, None)
        if at is base and off is not None and kind is ty:
            self._fields.setdefault(id(base), {}).setdefault(off, set()).add(kind)
        else:
            self._loose.add(id(base))

    def copy_fields(self, call: Call):
        """For a memcpy/memmove of constant size between two objects whose accesses all have constant offsets
        (a record of floats, pointers and integers, copied as bytes: a C++ closure captured by ``std::function``
        and copied into a container): ``[(byte offset in the copy, kind), ...]`` of every typed field it covers,
        when at least one holds a float and no two kinds overlap, or when the fields are integers and pointers
        that cover every byte of the copy (an Eigen tensor's dimensions copied in from a local array, next to
        its data pointer: the object as a whole holds both, the bytes copied only integers); None otherwise."""
        n = call.args[2]
        dl = getattr(call.module, "data_layout", None)
        if not isinstance(n, ConstantInt) or dl is None:
            return None
        tagged = _tbaa_struct_fields(call, n.value) or _declared_fields(call, n.value, dl)
        if tagged is not None:
            return tagged
        fields: dict[int, set] = {}
        ends, loose = [], []
        for p in call.args[:2]:
            base, off = byte_offset(p, dl)
            if base is None or base is not base_object(p) or id(base) in self._loose or not self._placed(base):
                loose.append(p)  # (its kinds, wherever they are, must be among the fields found on the other side)
                continue
            ends.append((id(base), off))
            for at, kinds in self._fields.get(id(base), {}).items():
                if 0 <= at - off < n.value:
                    fields.setdefault(at - off, set()).update(kinds)
        if not ends or (len(ends) == 2 and ends[0][0] == ends[1][0] and abs(ends[0][1] - ends[1][1]) < n.value):
            return None  # no side with known fields, or a move within one object
        found = set().union(*fields.values()) if fields else set()
        if any(isinstance(k, T.FloatType) and k not in found for p in loose for k in self.access_kinds(p)):
            return None
        out, end, gaps = [], 0, False
        for at in sorted(fields):
            if len(fields[at]) != 1 or at < end:
                return None
            gaps |= at > end
            kind = next(iter(fields[at]))
            out.append((at, kind))
            end = at + dl.store_size(kind)
        if end > n.value:
            return None
        if not any(isinstance(k, T.FloatType) for _, k in out) and (gaps or end < n.value):
            return None  # (bytes no access types may be floats: without a float field, only a full cover tells)
        return out

    def copied_records(self, call: Call):
        """For a memcpy of an array of records mixing floats with pointers and integers (REBOUND's particles
        copied into a backup of any length: ``memcpy(b, r->particles, N * sizeof(struct reb_particle))``),
        where both ends are at a record's start and the memory on both sides is indexed as one record type
        (``getelementptr %struct.R``, or clang's pointer TBAA on the load of its pointer, as for
        :meth:`reallocated_records`): ``(record bytes, [(byte offset, kind), ...])`` of every scalar field, when
        one is a float and every float type the memory holds is a field's; else None. Not for memmove (its
        records may overlap)."""
        dl = call.module.data_layout if call.module is not None else None
        n = call.args[2]
        if dl is None or not (call.callee_name or "").startswith("llvm.memcpy"):
            return None
        records = _indexed_records([v for p in call.args[:2] for v in memory_web(p)], dl)
        if len(records) != 1:
            return None
        record = records.pop()
        if _holds_union(record):
            return None
        stride = dl.alloc_size(record)
        if isinstance(n, ConstantInt) and n.value % stride or \
                any(_offset_mod(p, dl, stride) != 0 for p in call.args[:2]):
            return None
        fields = dl.scalar_leaves(record)
        kinds = {k for _, k in fields}
        floats = {k for p in call.args[:2] for k in self.web_kinds(p) if isinstance(k, T.FloatType)}
        if not any(isinstance(k, T.FloatType) for k in kinds) or not floats <= kinds or \
                any(isinstance(k, T.VectorType) for k in kinds):
            return None
        return stride, fields

    def _placed(self, base: Value) -> bool:
        """Whether every kind the caller says ``base``'s memory holds has a place among its fields (the caller's
        kinds have no offsets): then its fields are all there is to know."""
        seeds = self._seeds.get(id(base))
        if not seeds:
            return True
        placed = {k for kinds in self._fields.get(id(base), {}).values() for k in kinds}
        return all(k in placed for k in seeds)

    def kinds(self, p: Value) -> set:
        base = id(base_object(p))
        return self._types.get(base, set()) | self._seeds.get(base, set())

    def bits_type(self, load: Load, required: bool):
        """The floating-point type an integer load really moves (optimizers copy a ``double`` as an ``i64``,
        a ``float`` as an ``i32``), or None for an integer. A value only copied from memory that nothing else
        types is unknown: an error when ``required`` (reverse mode must know it is adding floats), else the
        float of that width (forward mode copies the tangent's bits, right for any type)."""
        found = self.float_of_width(load.pointer, load.type)
        if found is not None or not _is_bit_copy(load):
            return found
        if self.piecewise_float_copy(load):
            raise ad_error(f"a floating-point value is copied here piece by piece (as {load.type}, a byte loop at "
                           "-O0?); enzcc cannot follow its derivative through the pieces: copy it whole (memcpy, "
                           "an assignment) or build at -O1 or above, where the loop becomes one copy", load)
        known = self.access_kinds(load.pointer)
        for use in load.uses:
            found = found or self.float_of_width(use.user.pointer, load.type)
            known |= self.access_kinds(use.user.pointer)
        if found is not None:
            return found
        if integer_field(load.pointer, load.type) or \
                any(integer_field(u.user.pointer, load.type) for u in load.uses):
            return None  # (a struct's integer field, by its declared type: -O0 code has no TBAA to say so)
        if not known:  # (-O0: a pointer kept in a local, an inlined ``int *`` parameter: REBOUND's *p2 = *p1)
            for q in (load.pointer, *(u.user.pointer for u in load.uses)):
                known |= self.slot_held_kinds(q)
            if any(not isinstance(k, (T.IntType, T.PointerType)) for k in known):
                known = set()  # (a float there: unknown, as before)
        if not known:  # (-O0: the array's pointer is read from its struct field again for each access)
            for q in (load.pointer, *(u.user.pointer for u in load.uses)):
                known |= self.field_sibling_kinds(q, load.type)
            if any(not isinstance(k, T.IntType) for k in known):
                known = set()  # (a float or a pointer there: unknown, as before)
        if not known:  # (-O0: what every function of the program indexes the array's struct field as)
            kinds = {field_array_kind(q) for q in (load.pointer, *(u.user.pointer for u in load.uses))} - {None}
            same = [k for k in kinds if isinstance(k, T.FloatType) and k.bits == load.type.bits]
            if same:
                return same[0]
            if kinds and not any(isinstance(k, T.FloatType) for k in kinds):
                return None  # (REBOUND's TRACE current_Ks, ints shuffled within the array)
        if known:
            return None  # the memory on both sides holds integers or pointers
        ty = {16: T.FloatType("half"), 32: T.FloatType("float"), 64: T.FloatType("double")}.get(load.type.bits)
        if ty is None or not required:
            return ty
        raise ad_error(f"cannot tell whether the {load.type} copied here is a floating-point value (nothing "
                       "else reads or writes that memory with a type)", load)

    def slot_held_kinds(self, p: Value) -> set:
        """Kinds of the locals whose address ``p`` may be, when ``p`` (or the object it indexes) is read from a
        pointer local of this function that only ever holds addresses of its own locals: unoptimized code keeps
        an inlined parameter (``int *p1`` of REBOUND's reb_simulation_two_largest_particles, called with
        ``&l1``) in a local and reads it again for each access, so the accesses through it type no object. Each
        such pointer local must be only stored into and loaded from, each local it holds must have known kinds
        (a byte buffer's say nothing) and have its address go nowhere but into such pointer locals, and what
        every read of those pointer locals accesses counts too (a double stored through another read)."""
        base = base_object(p)
        if not (isinstance(base, Load) and isinstance(base.pointer, Alloca)):
            return set()
        kinds: set = set()
        slots, held, todo = set(), set(), [base.pointer]
        while todo:
            slot = todo.pop()
            if id(slot) in slots:
                continue
            slots.add(id(slot))
            locals_ = self._slot_locals(slot)
            if locals_ is None:
                return set()
            for local in locals_:
                if id(local) in held:
                    continue
                held.add(id(local))
                others = _address_slots(local)
                if others is None or not self.kinds(local):
                    return set()
                kinds |= self.kinds(local)
                todo += others
            kinds |= {k for use in slot.uses if isinstance(use.user, Load) for k in self.kinds(use.user)}
        return kinds

    @staticmethod
    def _slot_locals(slot: Alloca):
        """The locals whose addresses a pointer local holds, when it is only stored into (with such addresses)
        and loaded from; else None."""
        out = []
        for use in slot.uses:
            u = use.user
            if isinstance(u, Load) and use.index == 0:
                continue
            if not (isinstance(u, Store) and use.index == 1 and isinstance(u.value, Alloca)):
                return None
            out.append(u.value)
        return out

    def field_sibling_kinds(self, p: Value, access: T.Type) -> set:
        """Kinds of the memory that the same struct field points to wherever this function reads that pointer
        (``getelementptr %struct.S, q, 0, k`` then a load), when ``p`` indexes, with elements of the type
        ``access``, an array whose pointer was read from such a field: unoptimized code reads a GSL
        permutation's ``size_t *data`` again for each access, and copies one element (``tmp = p->data[i]``)
        where another access compares them as integers. Every read of the field must index it with elements of
        that type only (a ``void *`` field cast to ``double *`` somewhere: nothing is known)."""
        field = _field_of_array(p, access)
        if field is None:
            return set()
        kinds: set = set()
        for block in self.fn.blocks:
            for inst in block.instructions:
                if not (isinstance(inst, Load) and isinstance(inst.type, T.PointerType) and
                        _same_field(inst.pointer, field)):
                    continue
                if not all(_indexed_as(u, access) for u in inst.uses):
                    return set()
                kinds |= self.kinds(inst)
        return kinds

    def piecewise_float_copy(self, load: Load) -> bool:
        """An integer narrower than any float type (a byte) copied from where a float may lie to where a float
        may lie (or to memory then copied into floats): a float moved byte by byte, whose derivative cannot be
        moved in pieces. (Read as an integer it lost its derivative without a message.)"""
        if not (isinstance(load.type, T.IntType) and load.type.bits < 16 and _is_bit_copy(load)):
            return False
        if not self._float_may_overlap(load.pointer, load.type):
            return False
        return any(self._float_may_overlap(u.user.pointer, load.type) or self._copied_into_floats(u.user.pointer)
                   for u in load.uses)

    def _float_may_overlap(self, p: Value, access: T.Type) -> bool:
        """Whether an access of type ``access`` through ``p`` may touch bytes of a float: its object holds floats,
        and their places are unknown (no constant offset, accesses elsewhere at unknown offsets, kinds known
        only from the caller) or one of them overlaps the access."""
        if not any(isinstance(k, T.FloatType) for k in self.access_kinds(p)):
            return False
        dl = getattr(getattr(self.fn, "module", None), "data_layout", None)
        base, lo, hi = _offset_range(p, dl) if dl is not None else (None, None, None)
        fields = self._fields.get(id(base))
        if base is None or base is not base_object(p) or id(base) in self._loose or not fields:
            return True
        if not self._placed(base):
            return True  # the caller's kinds may lie anywhere
        n = dl.store_size(access)
        return any(isinstance(k, T.FloatType) and at < hi + n and lo < at + dl.store_size(k)
                   for at, kinds in fields.items() for k in kinds)

    def _copied_into_floats(self, p: Value) -> bool:
        """Whether ``p``'s object is the source of a memcpy/memmove into memory that holds floats."""
        stack, seen = [base_object(p)], set()
        while stack:
            v = stack.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            for u in getattr(v, "uses", []):
                user = u.user
                if isinstance(user, (GetElementPtr, Cast)) and isinstance(user.type, T.PointerType):
                    stack.append(user)
                elif isinstance(user, Call) and u.index == 2 and \
                        (user.callee_name or "").startswith(("llvm.memcpy", "llvm.memmove")) and \
                        any(isinstance(k, T.FloatType) for k in self.access_kinds(user.args[0])):
                    return True
        return False

    def access_kinds(self, p: Value) -> set:
        """Kinds of ``p``'s object, or, when it has no typed access of its own, or is a phi or select of
        pointers, of every object it may be (:meth:`web_kinds`): accesses through a merged pointer see only
        part of what the objects behind it hold (a loop that shifts records reads their int field through the
        phi, and copies the whole records; taken as ints, the doubles' adjoints were dropped)."""
        if isinstance(base_object(p), (Phi, Select)):
            return self.web_kinds(p)
        return self.kinds(p) or self.web_kinds(p)

    def web_kinds(self, p: Value) -> set:
        """Kinds of every object ``p``'s memory flows through or from (:func:`memory_web`); accesses through
        address arithmetic count for their base object."""
        kinds = set()
        for v in memory_web(p):
            kinds |= self.kinds(v)
        return kinds

    def reallocated_kind(self, call: Call):
        """What the memory ``realloc`` moves holds: the one float type, ``T.ptr`` or an IntType found on
        the old and the new pointer and everything they flow through (:meth:`web_kinds`); ``"bytes"`` for
        one float type mixed with integers and pointers in a buffer that only this function's allocations
        and null ever were (a growable record stack such as a derivative's own tape, differentiated again
        in nested AD); None when that is unknown or mixed otherwise."""
        kinds = self.web_kinds(call)
        floats = {k for k in kinds if isinstance(k, T.FloatType)}
        if len(floats) == 1 and len(kinds) == 1:
            return floats.pop()
        if kinds and not floats and all(isinstance(k, (T.IntType, T.PointerType)) for k in kinds):
            return T.ptr if T.ptr in kinds else next(iter(kinds))
        if len(floats) == 1 and all(isinstance(k, (T.FloatType, T.IntType, T.PointerType)) for k in kinds) \
                and self._web_is_local(call):
            return "bytes"
        if not kinds:
            return _untouched_pointee_kind(call)
        return None

    def reallocated_records(self, call: Call):
        """For memory ``realloc`` moves that is an array of records (REBOUND's particles: doubles, a pointer and
        an integer each), indexed as such (``getelementptr %struct.R, ptr %p, i64 %i``) on the old or the new
        pointer or anything they flow through: ``(record bytes, [(byte offset, float type), ...])`` of the
        record's float fields, when every such index uses one record type, it has a float field, and every float
        type found in the memory is one of its fields' types; else None."""
        dl = call.module.data_layout if call.module is not None else None
        if dl is None:
            return None
        records = _indexed_records(list(memory_web(call)), dl)
        if len(records) != 1:
            return None
        record = records.pop()
        if isinstance(record, T.NamedStructType) and record.is_opaque:
            return None
        fields = [(at, k) for at, k in dl.scalar_leaves(record) if isinstance(k, T.FloatType)]
        floats = {k for k in self.web_kinds(call) if isinstance(k, T.FloatType)}
        if not fields or not floats <= {k for _, k in fields}:
            return None
        return dl.alloc_size(record), fields

    def _web_is_local(self, call: Call) -> bool:
        """Every object in ``call``'s realloc web (:func:`memory_web`) is null, an allocation made here, or a
        phi or select of them."""
        from enzcc.ir.values import ConstantNull

        return all(isinstance(v, ConstantNull) or
                   (isinstance(v, Call) and v.callee_name in ("malloc", "calloc", "realloc")) or
                   getattr(v, "opcode", None) in ("phi", "select") for v in memory_web(call))

    def float_of_width(self, p: Value, access: T.Type):
        """The floating-point type an integer access through ``p`` may really be moving (optimizers copy a
        ``double`` as an ``i64``), or None. Integers in the same object are harmless to treat so: their
        shadow bytes stay zero."""
        if not isinstance(access, T.IntType):
            return None
        floats = [k for k in self.access_kinds(p) if isinstance(k, T.FloatType)]
        for k in floats:
            if k.bits == access.bits:
                return k
        for k in floats:  # several floats at once (memcpy of two floats as an i64): a vector of them
            if access.bits % k.bits == 0:
                return T.VectorType(access.bits // k.bits, k)
        return None

    def overwrites_float(self, store: Store) -> bool:
        """An integer stored where the memory holds floats of its width (and no pointers): it overwrites a
        float (optimizers store ``1.5`` as ``i64 4609434218613702656``)."""
        kinds = self.access_kinds(store.pointer)
        return isinstance(store.value.type, T.IntType) and T.ptr not in kinds and \
            self.float_of_width(store.pointer, store.value.type) is not None

    def copy_kind(self, call: Call):
        """What a memcpy/memmove copies: a FloatType, ``T.ptr``, an IntType, or None when unknown."""
        dl = call.module.data_layout if call.module is not None else None
        if dl is not None and any(_string_characters(p, dl) for p in call.args[:2]):
            return T.i8
        kinds = self.access_kinds(call.args[0]) | self.access_kinds(call.args[1])
        floats = {k for k in kinds if isinstance(k, T.FloatType)}
        if len(floats) == 1 and not any(isinstance(k, T.PointerType) for k in kinds):
            k = floats.pop()
            if dl is not None and any(isinstance(x, T.IntType) for x in kinds) and \
                    any(_offset_mod(p, dl, dl.store_size(k)) != 0 for p in call.args[:2]):
                # floats among integers, copied from or to a place that is not a float's boundary (the part of
                # a record after an int field, split off by SROA): the copy is not an array of floats, so
                # field by field (copy_fields) or not at all
                return None
            return k
        if floats:
            return None  # mixed: not supported precisely
        tb = _tbaa_struct_kind(call)
        if tb is not None:
            return tb
        if _tbaa_struct_untyped(call) and any(isinstance(k, T.PointerType) for k in kinds):
            # a union's bytes (clang tags them char: any type), in an object whose pointers are elsewhere (a
            # std::function's storage, which holds a captured double, next to its manager and invoker)
            return None
        if kinds and all(isinstance(k, T.PointerType) for k in kinds):
            return T.ptr
        if kinds and all(isinstance(k, T.IntType) for k in kinds):
            return kinds.pop()
        if kinds and all(isinstance(k, (T.PointerType, T.IntType)) for k in kinds):
            return T.ptr  # a struct of pointers and integers: the pointers' shadows are what matters
        return None


_STRING_CLASS = "class.std::__cxx11::basic_string"


def _string_characters(p: Value, dl) -> bool:
    """An address in the character buffer a local ``std::string`` keeps in itself (libstdc++'s short strings:
    bytes 16 to 31 of the object): what a copy moves there or from there is characters (a map's key moved into
    its node, where a float-typed bit copy or the node's value would otherwise leave the bytes' type unknown)."""
    base, off = byte_offset(p, dl)
    ty = base.allocated_type if isinstance(base, Alloca) else None
    return isinstance(ty, T.NamedStructType) and ty.name.startswith(_STRING_CLASS) and off is not None and \
        16 <= off < 32


def _gep_walk(p, dl):
    """(object, constant byte offset, [(stride, count)]) of an address made by ``getelementptr``: each variable
    index adds ``stride`` bytes times a value below ``count`` (an index into an array or vector), or times any
    value (``count`` None: pointer arithmetic); None when an index cannot be followed."""
    off, variable = 0, []
    while isinstance(p, GetElementPtr):
        ty = p.source_type
        first, *rest = p.indices
        if isinstance(first, ConstantInt):
            off += first.value * dl.alloc_size(ty)
        else:
            variable.append((dl.alloc_size(ty), None))
        for i in rest:
            if isinstance(ty, (T.StructType, T.NamedStructType)) and isinstance(i, ConstantInt):
                off += dl.field_offset(ty, i.value)
                ty = ty.elements[i.value]
            elif isinstance(ty, (T.ArrayType, T.VectorType)):
                count, ty = ty.count, ty.element
                if isinstance(i, ConstantInt):
                    off += i.value * dl.alloc_size(ty)
                else:
                    variable.append((dl.alloc_size(ty), count))
            else:
                return None
        p = p.pointer
    return p, off, variable


def _offset_range(p, dl):
    """(object, lowest, highest byte offset) an address made by ``getelementptr`` may have: a variable index into
    an array inside a record ranges over the array; (None, None, None) when the address moves by a variable
    index of its own (pointer arithmetic)."""
    walk = _gep_walk(p, dl)
    if walk is None or any(count is None for _, count in walk[2]):
        return None, None, None
    base, off, variable = walk
    return base, off, off + sum(stride * (count - 1) for stride, count in variable)


def _offset_mod(p, dl, m: int):
    """The byte offset of address ``p`` from its object modulo ``m``, through ``getelementptr`` (a variable index
    counts when its stride is a multiple of ``m``), or None when unknown."""
    walk = _gep_walk(p, dl)
    if walk is None or any(stride % m for stride, _ in walk[2]):
        return None
    return walk[1] % m


def _indexed_records(web: list, dl) -> set:
    """The record types the memory of ``web`` (pointers into it, and what is reloaded from it) is indexed as
    (``getelementptr %struct.R, ptr %p, ...``); where none is, the records clang's pointer TBAA names
    (:func:`_pointee_records`)."""
    records = set()
    for v in _with_reloads(web, dl):
        for use in getattr(v, "uses", []):
            u = use.user
            if isinstance(u, GetElementPtr) and use.index == 0 and \
                    isinstance(u.source_type, (T.StructType, T.NamedStructType)):
                records.add(u.source_type)
    return records or _pointee_records(web) or _field_records(web, dl)


def _pointee_records(values: list) -> set:
    """The struct types that the ``!tbaa`` tags of the loads of ``values``, and of the stores of them, say the
    pointer points to (clang's ``p1 _ZTS12reb_particle``: a pointer to ``struct reb_particle``), found among the
    module's types: memory the function never reads or writes itself (a buffer grown for a mode of another
    integrator) is typed by the field its pointer is kept in."""
    found = set()
    accesses = [v for v in values if isinstance(v, Load)]
    accesses += [u.user for v in values for u in getattr(v, "uses", []) if isinstance(u.user, Store) and u.index == 0]
    for inst in accesses:
        m = re.fullmatch(r"p1 _ZTS(\d+)(\w+)", tbaa_access_type(inst) or "")
        module = inst.module
        if m is None or len(m.group(2)) != int(m.group(1)) or module is None:
            continue
        # (the link renames a type defined in several translation units: struct.rec.0)
        names = {f"{prefix}{m.group(2)}" for prefix in ("struct.", "class.")}
        types = [ty for key, ty in module.named_types.items()
                 if key in names or re.fullmatch(r"(.*)\.\d+", key) and key.rsplit(".", 1)[0] in names]
        if len({str(ty.body) for ty in types}) == 1:
            found.add(types[0])
    return found


def _field_key(addr):
    """(struct name without the link's ``.N`` suffix, its body, the constant field indices) of a field address
    made by ``getelementptr %struct.S, ptr %p, <any>, K...`` (unoptimized code spells ``p->field`` so), or None."""
    ty = addr.source_type if isinstance(addr, GetElementPtr) else None
    if not isinstance(ty, T.NamedStructType) or ty.is_opaque or len(addr.indices) < 2 or \
            not all(isinstance(i, ConstantInt) for i in addr.indices[1:]):
        return None
    return re.sub(r"\.\d+$", "", ty.name), _unsuffixed(str(ty.body)), tuple(i.value for i in addr.indices[1:])


def _unsuffixed(text: str) -> str:
    """A type's text without the ``.N`` the link appends to the names of struct types several translation units
    define (``%struct.reb_dp7.12``): one C type, whichever copy a function's code names."""
    return re.sub(r"(%[\w.\"]*?)\.\d+\b", r"\1", text)


def _field_records(web: list, dl, depth: int = 0) -> set:
    """The record types that every function of the module indexes the pointers kept in the struct fields of
    ``web``'s pointers as (those loaded from, or stored to, ``getelementptr %struct.S, ptr, 0, K``): without
    TBAA (-O0), the element type of a buffer this function only grows (another integrator's, in REBOUND) is
    still spelled by the code that uses it elsewhere. Empty unless there is exactly one such field, its pointers
    are indexed as exactly one record type, and nothing reads or writes a float through them as a scalar array
    (a ``void *`` field used as records here and as doubles there says nothing). A pointer that code only
    copies records into or out of (``memcpy(ri->backup, r->particles, N * sizeof *r->particles)``) counts as
    indexed as the other side's records, where the copy starts at a record's start (:func:`_copy_partner_records`)."""
    uses = _field_uses(web, dl, depth)
    if uses is None:
        return set()
    records, scalars = uses
    if len(records) != 1 or any(isinstance(k, T.FloatType) for k in scalars):
        return set()
    record = next(iter(records))
    return set() if isinstance(record, T.NamedStructType) and record.is_opaque else records


def _field_scalar_kind(web: list, dl):
    """The one scalar type every function of the module indexes the pointers kept in ``web``'s struct field as
    (``getelementptr double, ptr %p, i64 %i`` on a load of the field; :func:`_field_records`), counting the
    fields of records it is indexed as too (REBOUND's ``csa0``, doubles also read as ``struct reb_vec3d``): the
    float type, or for integers and pointers ``T.ptr`` or the widest integer; else None (a float mixed with
    anything else, a union)."""
    uses = _field_uses(web, dl, 0)
    if uses is None or any(_holds_union(r) for r in uses[0]):
        return None
    scalars = uses[1] | {k for r in uses[0] for _, k in dl.scalar_leaves(r)}
    if not scalars:
        return None
    if all(isinstance(k, (T.IntType, T.PointerType)) for k in scalars):
        return T.ptr if T.ptr in scalars else max(scalars, key=lambda k: k.bits)
    return next(iter(scalars)) if len(scalars) == 1 and isinstance(next(iter(scalars)), T.FloatType) else None


def _field_uses(web: list, dl, depth: int):
    """(record types, scalar types) that the pointers kept in the one struct field ``web``'s pointers are
    loaded from or stored to are indexed or accessed as, in every function of the module (byte arithmetic,
    ``getelementptr i8``, says nothing); records copied in or out count (:func:`_copy_partner_records`). None
    when ``web`` is kept in no field or in several."""
    if dl is None or depth > 1:
        return None
    keys = {_field_key(u.user.pointer) for v in web for u in getattr(v, "uses", [])
            if isinstance(u.user, Store) and u.index == 0}
    keys |= {_field_key(v.pointer) for v in web if isinstance(v, Load)}
    keys.discard(None)
    module = next((v.module for v in web if getattr(v, "module", None) is not None), None)
    if len(keys) != 1 or module is None:
        return None
    key = keys.pop()
    cache = _FIELD_CACHE.setdefault(module, {})
    if (key, depth) not in cache:  # (REBOUND asks about one field for many reallocs and copies)
        cache[(key, depth)] = _field_uses_in_module(module, key, dl, depth)
    records, scalars = cache[(key, depth)]
    return set(records), set(scalars)  # (callers take them apart)


#: module -> (field key, depth) -> what :func:`_field_uses` found (the functions that use a field are the
#: program's; the derived ones made since use the same types)
_FIELD_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _field_uses_in_module(module, key, dl, depth: int):
    """:func:`_field_uses` of the struct field ``key`` (:func:`_field_key`), over every function of ``module``."""
    records, scalars = set(), set()
    for v in _field_pointers(module, key):
        for w in _with_reloads(list(memory_web(v)), dl):
            for use in getattr(w, "uses", []):
                u = use.user
                if isinstance(u, GetElementPtr) and use.index == 0:
                    ty = u.source_type
                    if isinstance(ty, (T.StructType, T.NamedStructType)):
                        records.add(ty)
                    elif not (isinstance(ty, T.IntType) and ty.bits == 8):
                        scalars.add(_scalar_kind(ty))
                elif isinstance(u, Load) and use.index == 0:
                    scalars.add(_scalar_kind(u.type))
                elif isinstance(u, Store) and use.index == 1:
                    scalars.add(_scalar_kind(u.value.type))
                elif isinstance(u, Call) and use.index in (1, 2) and \
                        (u.callee_name or "").startswith(("llvm.memcpy", "llvm.memmove")):  # (operand 0: callee)
                    records |= _copy_partner_records(u.args[2 - use.index], dl, depth)
    return _one_per_type(records), scalars


def _one_per_type(records: set) -> set:
    """``records`` with the copies the link makes of one C type (``struct.rec``, ``struct.rec.0``: the same name
    and body) counted once."""
    seen = {}
    for ty in sorted(records, key=str):
        name = re.sub(r"\.\d+$", "", ty.name) if isinstance(ty, T.NamedStructType) else str(ty)
        seen.setdefault((name, _unsuffixed(str(getattr(ty, "body", ty)))), ty)
    return set(seen.values())


def _copy_partner_records(p: Value, dl, depth: int) -> set:
    """The record types the other side ``p`` of a copy is indexed as (here, or, kept in a struct field, by
    every function: :func:`_field_records`), when ``p`` is at a record's start; else empty."""
    web = list(memory_web(p))
    records = {u.user.source_type for v in _with_reloads(web, dl) for u in getattr(v, "uses", [])
               if isinstance(u.user, GetElementPtr) and u.index == 0 and
               isinstance(u.user.source_type, (T.StructType, T.NamedStructType))}
    records = _one_per_type(records or _pointee_records(web) or _field_records(web, dl, depth + 1))
    if len(records) != 1 or _offset_mod(p, dl, dl.alloc_size(next(iter(records)))) != 0:
        return set()
    return records


def field_array_kind(p: Value):
    """For an address into an array whose pointer was read from a struct field (``p->data[i]`` at -O0), the one
    element type every function of the module indexes that field as (:func:`_field_scalar_kind`), or None."""
    base = base_object(p)
    module = getattr(base, "module", None)
    if not isinstance(base, Load) or module is None:
        return None
    return _field_scalar_kind([base], module.data_layout)


def _field_pointers(module, key) -> list:
    """The pointers loaded from, and stored to, the struct field ``key`` (:func:`_field_key`) in every function
    of ``module``; functions whose text does not name the struct are not parsed."""
    name, _, indices = key
    out = []
    for fn in module.definitions():
        text = getattr(fn, "_body_text", None)
        if text is not None and (name not in text or f"i32 {indices[-1]}" not in text):
            continue
        for inst in fn.instructions():
            if isinstance(inst, Load) and isinstance(inst.type, T.PointerType) and _field_key(inst.pointer) == key:
                out.append(inst)
            elif isinstance(inst, Store) and isinstance(inst.value.type, T.PointerType) and \
                    _field_key(inst.pointer) == key:
                out.append(inst.value)
    return out


def _untouched_pointee_kind(call: Call):
    """For memory ``realloc`` moves that the function never reads or writes itself (a buffer of another
    integrator grown on the way: REBOUND's JANUS particles of integer coordinates), what clang's pointer TBAA on
    the loads and stores of its pointer says it points to, when that holds no float: ``T.ptr`` for records of
    pointers and integers, the IntType of integer records or an integer pointee; else None. Without TBAA (-O0),
    what every function indexes the struct field it is kept in as (:func:`_field_records`,
    :func:`_field_scalar_kind`: an array of one float type too)."""
    web = list(memory_web(call))
    records = _pointee_records(web) or _field_records(web, call.module.data_layout if call.module else None)
    if len(records) == 1:
        record = records.pop()
        if _holds_union(record) or call.module is None:
            return None
        kinds = {k for _, k in call.module.data_layout.scalar_leaves(record)}
        if kinds and all(isinstance(k, (T.IntType, T.PointerType)) for k in kinds):
            return T.ptr if T.ptr in kinds else max(kinds, key=lambda k: k.bits)
        return None
    pointees = {_pointee_kind(tbaa_access_type(v)) for v in web if isinstance(v, Load)}
    if len(pointees) == 1 and isinstance(next(iter(pointees)), (T.IntType, T.PointerType)):
        return pointees.pop()
    if not records and pointees <= {None}:  # (-O0: no TBAA; the field's uses elsewhere)
        return _field_scalar_kind(web, call.module.data_layout if call.module else None)
    return None


def _with_reloads(values: list, dl) -> list:
    """``values`` and the loads, in the same function, of a place one of them is stored to (the same base object
    and constant offset): a pointer kept in a struct field and read back from it (unoptimized code)."""
    places = set()
    for v in values:
        for use in getattr(v, "uses", []):
            if isinstance(use.user, Store) and use.index == 0:
                base, off = byte_offset(use.user.pointer, dl)
                if base is not None and off is not None:
                    places.add((id(base), off))
    fn = getattr(values[0], "function", None) if values else None
    if not places or fn is None:
        return values
    out = list(values)
    for inst in fn.instructions():
        if isinstance(inst, Load) and isinstance(inst.type, T.PointerType):
            base, off = byte_offset(inst.pointer, dl)
            if base is not None and (id(base), off) in places:
                out.append(inst)
    return out


def memory_web(p: Value):
    """Every object ``p``'s memory flows through or from: phis, selects and reallocs of it, both ways (a buffer
    reallocated in a loop is one phi of several allocations); each once, starting with ``p``'s base object."""
    def forwards(v) -> bool:
        return getattr(v, "opcode", None) in ("phi", "select") or \
            (isinstance(v, Call) and v.callee_name == "realloc")

    seen, stack = set(), [base_object(p)]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        yield v
        stack += [u.user for u in getattr(v, "uses", []) if forwards(u.user)
                  and (not isinstance(u.user, Call) or u.index == 1)]
        if isinstance(v, Call):
            if v.callee_name == "realloc":
                stack.append(base_object(v.args[0]))
        elif forwards(v):
            stack += [base_object(op) for op in v.operands if isinstance(op.type, T.PointerType)]


def integer_field(p: Value, access: T.Type) -> bool:
    """Whether ``p`` is ``getelementptr %struct.S, q, 0, k...`` with constant indices landing on an integer
    field of the type ``access``: the field is an integer, as clang's integer TBAA says at -O2 (at -O0 it
    emits none). A float's bits copied as an integer go through no integer field of a struct."""
    if not (isinstance(p, GetElementPtr) and isinstance(access, T.IntType) and
            isinstance(p.source_type, (T.StructType, T.NamedStructType)) and len(p.indices) >= 2 and
            all(isinstance(i, ConstantInt) for i in p.indices)):
        return False
    try:
        return p.result_element_type() == access
    except (AttributeError, IndexError, TypeError):
        return False


def _indexed_as(use, access: T.Type) -> bool:
    """A use of an array's pointer that indexes it with elements of the type ``access``, frees it, or compares
    it (none says it holds anything else)."""
    u = use.user
    if isinstance(u, GetElementPtr):
        return use.index == 0 and u.source_type == access
    return isinstance(u, Call) and u.callee_name == "free" or u.opcode == "icmp"


def _same_base(a: Value, b: Value) -> bool:
    """The same pointer value, or two reads of the same local (unoptimized code reads a variable again for each
    use)."""
    return a is b or (isinstance(a, Load) and isinstance(b, Load) and isinstance(a.pointer, Alloca) and
                      a.pointer is b.pointer)


def _field_of_array(p: Value, access: T.Type):
    """``(base, struct type, indices)`` of the struct field ``p``'s array pointer was loaded from, when ``p`` is
    ``getelementptr <access>, (load (getelementptr %struct.S, q, 0, k)), i`` (unoptimized C's ``s->a[i]``)."""
    if not (isinstance(p, GetElementPtr) and p.source_type == access and isinstance(p.pointer, Load)):
        return None
    f = p.pointer.pointer
    if not (isinstance(f, GetElementPtr) and isinstance(f.source_type, (T.StructType, T.NamedStructType)) and
            len(f.indices) >= 2 and all(isinstance(i, ConstantInt) for i in f.indices)):
        return None
    return f.pointer, f.source_type, tuple(i.value for i in f.indices)


def _same_field(q: Value, field) -> bool:
    """``q`` addresses the same field of the same struct (the IR linker merges struct types of one layout:
    a GSL permutation's and a block's, so the base must be the same value too)."""
    base, ty, indices = field
    return isinstance(q, GetElementPtr) and _same_base(q.pointer, base) and q.source_type == ty and \
        len(q.indices) == len(indices) and \
        all(isinstance(i, ConstantInt) and i.value == v for i, v in zip(q.indices, indices))


def _address_slots(local: Alloca):
    """The pointer locals ``local``'s address is stored into, when it goes nowhere else (its other uses read,
    write or index it here); else None."""
    out = []
    for use in local.uses:
        u = use.user
        if isinstance(u, Store) and use.index == 0:
            if not isinstance(u.pointer, Alloca):
                return None
            out.append(u.pointer)
        elif isinstance(u, (Load, Store)):
            continue
        elif isinstance(u, GetElementPtr) and use.index == 0:
            if any(not isinstance(g.user, (Load, Store)) or (isinstance(g.user, Store) and g.index == 0)
                   for g in u.uses):
                return None
        else:
            return None
    return out


def _is_bit_copy(load: Load) -> bool:
    """An integer load whose value is only stored back to memory: moved bits of unknown type."""
    return isinstance(load, Load) and isinstance(load.type, T.IntType) and bool(load.uses) and all(
        isinstance(u.user, Store) and u.index == 0 for u in load.uses)


def _declared_kinds(ty: T.Type) -> set:
    """Kinds a declared memory type (an alloca's, a global's) holds; byte arrays say nothing."""
    ty = _scalar_kind(ty)
    if isinstance(ty, (T.StructType, T.NamedStructType)):
        return set().union(*(_declared_kinds(e) for e in ty.elements)) if ty.elements else set()
    if isinstance(ty, T.IntType) and ty.bits == 8:
        return set()
    return {ty}


def _declared_type(call):
    """The type a call's rule says the memory its first argument points to holds (a type hint), or None."""
    rule = rule_named(call.callee_name)
    return rule.declares_type if rule is not None else None


def is_thread_private(p: Value) -> bool:
    """``p`` points into the function's own stack (memory no other thread touches)."""
    return isinstance(base_object(p), Alloca)


def memory_types_for(dc, fn, params: list[Value]) -> MemoryTypes:
    """:class:`MemoryTypes` of ``fn`` (a copy of ``dc.fn`` whose primal parameters are ``params``), with what
    the caller's memory at the ``__enzyme_*`` call ``dc`` shows about each pointer argument."""
    kinds = call_site_kinds(dc.call, [s.primal for s in dc.args])
    return MemoryTypes(fn, {id(params[s.param.index]): k for s, k in zip(dc.args, kinds) if k})


def call_site_kinds(call: Call, values: list[Value]) -> list[set]:
    """What the memory each pointer in ``values`` (arguments of ``call``) holds, as far as the calling
    function shows: its accesses, and the declared type of a local or global it points into."""
    caller = MemoryTypes(call.function)
    out = []
    for v in values:
        kinds = set(caller.kinds(v)) if isinstance(v.type, T.PointerType) else set()
        base = base_object(v)
        if isinstance(base, GlobalRef):
            target = base.resolve()
            vt = getattr(target, "value_type", None)
            if vt is not None:
                kinds |= _declared_kinds(vt)
        out.append(kinds)
    return out


def _scalar_kind(ty: T.Type):
    while isinstance(ty, (T.VectorType, T.ArrayType)):
        ty = ty.element
    return ty


def _tbaa_float(inst):
    """The float type an integer load or store of the same width moves, by its ``!tbaa`` tag (clang copies a
    ``double`` member as an ``i64`` and keeps the member's tag), or None."""
    ty = inst.type if isinstance(inst, Load) else inst.value.type
    kind = _TBAA_FLOATS.get(tbaa_access_type(inst)) if isinstance(ty, T.IntType) else None
    return kind if kind is not None and kind.bits == ty.bits else None


def _tbaa_struct_untyped(call: Call) -> bool:
    """The copy's ``!tbaa.struct`` says every byte it copies is ``omnipotent char``: of any type."""
    ref = call.get_metadata("tbaa.struct")
    module = call.module
    node = _md(module, ref) if ref and module is not None else None
    tags = re.findall(r"!(\d+)", node or "")
    return bool(tags) and all(_tbaa_type_name(module, module.metadata.get(int(t))) == "omnipotent char"
                              for t in tags)


def _tbaa_struct_fields(call: Call, size: int):
    """From ``!tbaa.struct`` on a memcpy (clang's copy of a C struct: ``a = b``, ``r->particles[i] = p``), which
    lists each field it copies as (offset, size, type): ``[(offset, kind), ...]`` when the fields hold a float and
    each is a float, a pointer or an integer (a record of doubles and pointers moved within an array, where no
    access tells the copy's layout: REBOUND's particles); None otherwise (a union's or a character array's
    bytes, ``omnipotent char``, may be anything). Not for memmove: its fields may overlap."""
    if not (call.callee_name or "").startswith("llvm.memcpy"):
        return None
    ref = call.get_metadata("tbaa.struct")
    module = call.module
    node = _md(module, ref) if ref and module is not None else None
    if node is None:
        return None
    out, end = [], 0
    for off, n, tag in re.findall(r"i64 (\d+), i64 (\d+), !(\d+)", node):
        off, n = int(off), int(n)
        name = _tbaa_type_name(module, module.metadata.get(int(tag)))
        if name in _TBAA_FLOATS and _tbaa_float_bytes(_TBAA_FLOATS[name]) == n:
            kind = _TBAA_FLOATS[name]
        elif (name == "any pointer" or re.fullmatch(r"p\d+ .+", name or "")) and n == 8:
            kind = T.ptr
        elif name in _TBAA_INT_BITS and _TBAA_INT_BITS[name] == 8 * n or name == "omnipotent char" and n == 1:
            kind = T.IntType(8 * n)
        else:
            return None
        if off < end:
            return None
        out.append((off, kind))
        end = off + n
    if end > size or not any(isinstance(k, T.FloatType) for _, k in out):
        return None
    return out


def _declared_fields(call: Call, size: int, dl):
    """For a copy to or from a local whose type is a struct (SROA's ``alloca { double, ..., ptr, i32, ptr }``
    holding the part of a record it split off) or a struct passed by value (``byval(%struct.R)``, REBOUND's
    ``reb_simulation_add(r, particle)``), where no access types the other side: ``[(offset, kind), ...]`` of
    the scalar fields of that type the copy covers, when one is a float and the copy splits none; else None.
    (A union's type names one member only: not taken.)"""
    for p in call.args[:2]:
        base, off = byte_offset(p, dl)
        ty = _declared_record(base)
        if off is None or ty is None or _holds_union(ty) or off + size > dl.alloc_size(ty):
            continue
        fields, cut = [], False
        for at, k in dl.scalar_leaves(ty):
            end = at + dl.store_size(k)
            if off <= at and end <= off + size:
                fields.append((at - off, k))
            elif at < off + size and end > off:
                cut = True  # (a field only partly copied)
        if not cut and any(isinstance(k, T.FloatType) for _, k in fields):
            return fields
    return None


def _declared_record(base):
    """The struct type an alloca declares, or the one a ``byval`` parameter is passed as (asked of the user's
    function, whose attributes a prepared copy of it does not have); else None."""
    if isinstance(base, Alloca):
        ty = base.allocated_type if base.num_elements is None else None
        return ty if isinstance(ty, (T.StructType, T.NamedStructType)) else None
    if not isinstance(base, Argument) or base.parent is None or base.parent.module is None:
        return None
    module = base.parent.module
    primal = module.functions.get(getattr(base.parent, "primal_name", base.parent.name))
    args = primal.args if primal is not None else []
    attrs = args[base.index].attrs if base.index < len(args) else base.attrs
    for a in attrs:
        m = re.fullmatch(r"byval\(%(\S+)\)", a)
        if m is not None:
            return module.named_types.get(m.group(1).strip('"'))
    return None


def _holds_union(ty: T.Type) -> bool:
    """A type that is, or has inside it, a union (clang's ``%union.X`` names one member's type only) or an
    opaque struct."""
    if isinstance(ty, T.NamedStructType):
        return ty.is_opaque or ty.name.startswith("union.") or _holds_union(ty.body)
    if isinstance(ty, T.StructType):
        return any(_holds_union(e) for e in ty.elements)
    if isinstance(ty, (T.ArrayType, T.VectorType)):
        return _holds_union(ty.element)
    return False


def _tbaa_float_bytes(kind: T.FloatType) -> int:
    """Bytes of a C floating-point type as TBAA names it (``long double``: x87's 80 bits in 16 bytes)."""
    return {"double": 8, "float": 4}.get(kind.kind, 16)


def _tbaa_struct_kind(call: Call):
    """From ``!tbaa.struct`` on a memcpy, which names every field copied: the single float type all fields
    have; ``T.ptr`` (or an integer type) when the fields are pointers and integers only; else None."""
    ref = call.get_metadata("tbaa.struct")
    module = call.module
    if not ref or module is None:
        return None
    node = _md(module, ref)
    if node is None:
        return None
    names = set()
    for tag in re.findall(r"!(\d+)", node):
        names.add(_tbaa_type_name(module, module.metadata.get(int(tag))))
    if len(names) == 1 and next(iter(names)) in _TBAA_FLOATS:
        return _TBAA_FLOATS[names.pop()]
    pointers = {n for n in names if n == "any pointer" or (n and n.startswith("p1 "))}
    if names and all(n in _TBAA_INTS for n in names - pointers):
        # no float field: the shadow copy made in the forward sweep carries the pointers' shadows, and nothing
        # accumulates in reverse
        return T.ptr if pointers else T.i64
    return None


def _pointee_kind(name: str | None):
    """What memory a pointer points to, from the TBAA name of the field it was loaded from (clang's pointer
    TBAA: ``p1 float`` is ``float *``, ``p2 double`` is ``double **``): a float type, an integer type, ``T.ptr``
    for pointers to pointers; None for ``any pointer``, ``void *``, structures and the rest."""
    m = re.fullmatch(r"p(\d+) (.+)", name or "")
    if m is None:
        return None
    if int(m.group(1)) > 1:
        return T.ptr
    if m.group(2) in _TBAA_FLOATS:
        return _TBAA_FLOATS[m.group(2)]
    bits = _TBAA_INT_BITS.get(m.group(2))
    return T.IntType(bits) if bits else None


def tbaa_access_type(inst) -> str | None:
    """The name of the type a load or store's ``!tbaa`` tag says it accesses, or None."""
    ref = inst.get_metadata("tbaa")
    module = inst.module
    if not ref or module is None:
        return None
    return _tbaa_type_name(module, _md(module, ref))


def _md(module, ref: str):
    m = re.fullmatch(r"!(\d+)", ref.strip())
    return module.metadata.get(int(m.group(1))) if m else None


def _tbaa_type_name(module, tag_text: str | None, depth: int = 0) -> str | None:
    """Name of the base type of a TBAA access tag ``!{!base, !access, i64 off}`` or type node."""
    if tag_text is None or depth > 8:
        return None
    m = re.match(r'\s*!\{!"([^"]*)"', tag_text)
    if m:
        return m.group(1)
    m = re.match(r'\s*!\{!\d+, i64 \d+, !"([^"]*)"', tag_text)  # a type node of the new struct-path format
    if m:
        return m.group(1)
    refs = re.findall(r"!(\d+)", tag_text)
    if len(refs) >= 2:  # access tag: the access type is the second node
        return _tbaa_type_name(module, module.metadata.get(int(refs[1])), depth + 1)
    return None


__all__ = ["ALLOCATORS", "MemoryTypes", "base_object", "byte_offset", "call_site_kinds", "is_allocation",
           "is_thread_private", "memory_types_for"]
