"""Instructions and debug records.

All instructions share the :class:`Instruction` base: an opcode, a result
type, operands (tracked through :class:`~enzcc.ir.values.Use`), flags
(``nuw``, ``fast``, ...), metadata attachments kept as text, and the debug
records (``#dbg_value`` ...) printed just before the instruction.  Subclasses
add opcode-specific fields and named operand accessors.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Iterable, Sequence

from . import types as T
from .errors import IRError
from .values import ConstantPoison, GlobalRef, Use, Value

if TYPE_CHECKING:  # pragma: no cover
    from .block import BasicBlock
    from .function import Function

__all__ = [
    "Instruction", "BinaryOp", "UnaryOp", "Cast", "Cmp", "ICmp", "FCmp", "Select",
    "Phi", "Alloca", "Load", "Store", "GetElementPtr", "ExtractValue", "InsertValue",
    "ExtractElement", "InsertElement", "ShuffleVector", "Call", "Invoke", "Ret", "Br",
    "CondBr", "Switch", "IndirectBr", "Unreachable", "Resume", "LandingPad", "Fence",
    "CmpXchg", "AtomicRMW", "Freeze", "VAArg", "DebugRecord",
    "INT_BINOPS", "FLOAT_BINOPS", "CAST_OPS", "FAST_MATH_FLAGS", "aggregate_element_type",
]

INT_BINOPS = frozenset({"add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl",
                        "lshr", "ashr", "and", "or", "xor"})
"""Integer binary opcodes."""
FLOAT_BINOPS = frozenset({"fadd", "fsub", "fmul", "fdiv", "frem"})
"""Floating-point binary opcodes."""
CAST_OPS = frozenset({"trunc", "zext", "sext", "fptrunc", "fpext", "fptoui", "fptosi",
                      "uitofp", "sitofp", "ptrtoint", "ptrtoaddr", "inttoptr", "bitcast",
                      "addrspacecast"})
"""Cast opcodes."""
FAST_MATH_FLAGS = ("reassoc", "nnan", "ninf", "nsz", "arcp", "contract", "afn")
"""Individual fast-math flags (``fast`` implies all of them)."""


def aggregate_element_type(ty: T.Type, indices: Iterable[int]) -> T.Type:
    """Type reached by ``extractvalue``-style constant indices into ``ty``."""
    for idx in indices:
        if isinstance(ty, (T.StructType, T.NamedStructType)):
            ty = ty.elements[idx]
        elif isinstance(ty, (T.ArrayType, T.VectorType)):
            ty = ty.element
        else:
            raise IRError(f"cannot index into non-aggregate type {ty}")
    return ty


class DebugRecord:
    """A debug record line (``#dbg_value(...)``, ``#dbg_declare(...)``, ...).

    Records are not instructions; they are attached to the instruction that
    follows them.  :attr:`args` holds, per comma-separated argument, either a
    metadata string (kept verbatim), a :class:`Value` (a location operand
    printed as ``<type> <value>``), or a list of values (``!DIArgList(...)``).
    Values referenced here are not counted as uses, but
    ``replace_all_uses_with`` updates them and erasing them turns them into
    ``poison``.
    """

    def __init__(self, kind: str, args: Sequence[object]):
        self.kind: str = kind
        """``value``, ``declare``, ``assign`` or ``label``."""
        self.args: list[object] = []
        """Arguments: ``str`` (metadata text), ``Value`` or ``list[Value]``."""
        self.parent: Instruction | None = None
        """Instruction this record is attached to (precedes)."""
        for a in args:
            self.args.append(list(a) if isinstance(a, (list, tuple)) else a)
        for v in self.values():
            v._add_debug_user(self)

    def values(self) -> list[Value]:
        """All values referenced by the record."""
        out = []
        for a in self.args:
            if isinstance(a, Value):
                out.append(a)
            elif isinstance(a, list):
                out.extend(a)
        return out

    def replace_value(self, old: Value, new: Value) -> None:
        """Replace every reference to ``old`` with ``new``."""
        for i, a in enumerate(self.args):
            if a is old:
                self.args[i] = new
            elif isinstance(a, list):
                self.args[i] = [new if x is old else x for x in a]
        while self in old._debug_users:
            old._debug_users.remove(self)
        new._add_debug_user(self)

    def detach(self) -> None:
        """Forget the values this record refers to (before deleting it)."""
        for v in self.values():
            while self in v._debug_users:
                v._debug_users.remove(self)

    def __str__(self) -> str:
        from .printer import format_debug_record
        return format_debug_record(self)

    def __repr__(self) -> str:
        return f"<DebugRecord {self}>"


class Instruction(Value):
    """Base class of all instructions."""

    is_terminator = False
    """True for block terminators."""

    #: where the instruction was last found in its block (:meth:`BasicBlock.index_of`); an attribute of its own
    #: only once its block was searched, so that the instructions of blocks never searched take no memory for it
    _index_hint = 0

    def __init__(self, opcode: str, type: T.Type, operands: Iterable[Value] = (),
                 name: str | None = None, flags: Iterable[str] = (),
                 metadata: Iterable[tuple[str, str]] = ()):
        super().__init__(type, name)
        self.opcode: str = opcode
        """The opcode keyword (``fadd``, ``call``, ``br``, ...)."""
        self.parent: BasicBlock | None = None
        """The basic block containing the instruction (None when detached)."""
        self.flags: list[str] = list(flags)
        """Keyword flags in print order (``nuw``, ``nsw``, ``exact``, ``disjoint``,
        ``nneg``, ``samesign``, ``inbounds``, ``nusw``, fast-math flags ...)."""
        self.metadata: list[tuple[str, str]] = list(metadata)
        """Metadata attachments ``(kind, text)``, e.g. ``("dbg", "!12")``."""
        self.debug_records: list[DebugRecord] = []
        """Debug records printed immediately before this instruction."""
        self._operands: list[Value] = []
        self._op_uses: list[Use] = []
        for v in operands:
            self._append_operand(v)

    # -- operands -------------------------------------------------------------
    @property
    def operands(self) -> tuple[Value, ...]:
        """All operands, in LLVM order."""
        return tuple(self._operands)

    @property
    def num_operands(self) -> int:
        """Number of operands."""
        return len(self._operands)

    def operand(self, index: int) -> Value:
        """Operand ``index``."""
        return self._operands[index]

    def set_operand(self, index: int, value: Value) -> None:
        """Replace operand ``index`` with ``value`` (updating use lists)."""
        old = self._operands[index]
        use = self._op_uses[index]
        if old is value:
            return
        old._uses.remove(use)
        self._operands[index] = value
        value._uses.append(use)

    def replace_uses_of_with(self, old: Value, new: Value) -> None:
        """Replace every operand equal to ``old`` with ``new``."""
        for i, v in enumerate(self._operands):
            if v is old:
                self.set_operand(i, new)

    def _append_operand(self, value: Value) -> None:
        if not isinstance(value, Value):
            raise IRError(f"operand must be a Value, got {value!r}")
        use = Use(self, len(self._operands))
        self._operands.append(value)
        self._op_uses.append(use)
        value._uses.append(use)

    def _insert_operand(self, index: int, value: Value) -> None:
        use = Use(self, index)
        self._operands.insert(index, value)
        self._op_uses.insert(index, use)
        value._uses.append(use)
        for i in range(index + 1, len(self._op_uses)):
            self._op_uses[i].index = i

    def _remove_operands(self, start: int, stop: int) -> None:
        for i in range(start, stop):
            self._operands[i]._uses.remove(self._op_uses[i])
        del self._operands[start:stop]
        del self._op_uses[start:stop]
        for i in range(start, len(self._op_uses)):
            self._op_uses[i].index = i

    def drop_all_references(self) -> None:
        """Unregister this instruction from all its operands' use lists."""
        for v, use in zip(self._operands, self._op_uses):
            v._uses.remove(use)
        self._operands = []
        self._op_uses = []

    # -- position -------------------------------------------------------------
    @property
    def function(self) -> "Function | None":
        """The function containing the instruction."""
        return self.parent.parent if self.parent is not None else None

    @property
    def module(self):
        """The module containing the instruction."""
        fn = self.function
        return fn.module if fn is not None else None

    @property
    def index(self) -> int:
        """Position inside the parent block."""
        if self.parent is None:
            raise IRError("instruction is not in a block")
        return self.parent.index_of(self)

    @property
    def next(self) -> "Instruction | None":
        """The following instruction in the block (None at the end)."""
        if self.parent is None:
            return None
        insts = self.parent.instructions
        i = self.parent.index_of(self)
        return insts[i + 1] if i + 1 < len(insts) else None

    @property
    def prev(self) -> "Instruction | None":
        """The preceding instruction in the block (None at the start)."""
        if self.parent is None:
            return None
        i = self.parent.index_of(self)
        return self.parent.instructions[i - 1] if i > 0 else None

    def insert_before(self, other: "Instruction") -> "Instruction":
        """Insert this detached instruction right before ``other``."""
        if self.parent is not None:
            raise IRError("instruction already in a block; use move_before")
        if other.parent is None:
            raise IRError("anchor instruction is not in a block")
        other.parent.insert(other.parent.index_of(other), self)
        return self

    def insert_after(self, other: "Instruction") -> "Instruction":
        """Insert this detached instruction right after ``other``."""
        if self.parent is not None:
            raise IRError("instruction already in a block; use move_after")
        if other.parent is None:
            raise IRError("anchor instruction is not in a block")
        other.parent.insert(other.parent.index_of(other) + 1, self)
        return self

    def remove_from_parent(self) -> "Instruction":
        """Detach from the block, keeping operands (and attached debug records)."""
        if self.parent is not None:
            self.parent._remove(self)
        return self

    def move_before(self, other: "Instruction") -> None:
        """Move this instruction right before ``other``."""
        self.remove_from_parent()
        self.insert_before(other)

    def move_after(self, other: "Instruction") -> None:
        """Move this instruction right after ``other``."""
        self.remove_from_parent()
        self.insert_after(other)

    def move_to_end(self, block: "BasicBlock") -> None:
        """Move this instruction to the end of ``block``."""
        self.remove_from_parent()
        block.append(self)

    def erase(self) -> None:
        """Delete the instruction.

        Raises :class:`IRError` if the result still has uses.  Debug records
        referring to the result become ``poison``; records attached to this
        instruction move to the next instruction.
        """
        if self._uses:
            raise IRError(f"cannot erase {self.opcode}: result still has {len(self._uses)} use(s)")
        for rec in list(dict.fromkeys(self._debug_users)):
            rec.replace_value(self, ConstantPoison(self.type))
        if self.parent is not None:
            nxt = self.next
            if self.debug_records:
                if nxt is not None:
                    for rec in self.debug_records:
                        rec.parent = nxt
                    nxt.debug_records[0:0] = self.debug_records
                else:
                    for rec in self.debug_records:
                        rec.detach()
                self.debug_records = []
            self.parent._remove(self)
        self.drop_all_references()

    # -- flags / metadata -------------------------------------------------------
    def has_flag(self, flag: str) -> bool:
        """True if ``flag`` is set (``fast`` implies every fast-math flag)."""
        if flag in self.flags:
            return True
        return flag in FAST_MATH_FLAGS and "fast" in self.flags

    @property
    def fast_math_flags(self) -> list[str]:
        """The fast-math flags among :attr:`flags`."""
        return [f for f in self.flags if f == "fast" or f in FAST_MATH_FLAGS]

    def get_metadata(self, kind: str) -> str | None:
        """Text of attachment ``!kind`` (e.g. ``"!12"``) or None."""
        for k, v in self.metadata:
            if k == kind:
                return v
        return None

    def set_metadata(self, kind: str, text: str | None) -> None:
        """Set (or with None, remove) attachment ``!kind``."""
        for i, (k, _) in enumerate(self.metadata):
            if k == kind:
                if text is None:
                    del self.metadata[i]
                else:
                    self.metadata[i] = (kind, text)
                return
        if text is not None:
            self.metadata.append((kind, text))

    def add_debug_record(self, record: DebugRecord) -> None:
        """Attach a debug record before this instruction."""
        record.parent = self
        self.debug_records.append(record)

    # -- misc -----------------------------------------------------------------
    @property
    def successors(self) -> list["BasicBlock"]:
        """Successor blocks (terminators only; empty otherwise)."""
        return []

    def clone(self) -> "Instruction":
        """Detached copy with the same operands and fields, no name and no debug records."""
        new = copy.copy(self)
        Value.__init__(new, self.type, None)
        new.parent = None
        new.flags = list(self.flags)
        new.metadata = list(self.metadata)
        new.debug_records = []
        new._operands = []
        new._op_uses = []
        for v in self._operands:
            new._append_operand(v)
        new._copy_fields()
        return new

    def _copy_fields(self) -> None:
        """Hook for subclasses to deep-copy their mutable fields after :meth:`clone`."""

    def __str__(self) -> str:
        from .printer import format_instruction
        return format_instruction(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"


# ---------------------------------------------------------------------------
# Arithmetic
# ---------------------------------------------------------------------------

class BinaryOp(Instruction):
    """Integer or floating-point binary operator (``add``, ``fmul``, ...)."""

    def __init__(self, opcode: str, lhs: Value, rhs: Value, name: str | None = None,
                 flags: Iterable[str] = ()):
        if opcode not in INT_BINOPS and opcode not in FLOAT_BINOPS:
            raise IRError(f"unknown binary opcode {opcode!r}")
        super().__init__(opcode, lhs.type, (lhs, rhs), name, flags)

    @property
    def lhs(self) -> Value:
        """First operand."""
        return self._operands[0]

    @property
    def rhs(self) -> Value:
        """Second operand."""
        return self._operands[1]


class UnaryOp(Instruction):
    """Unary operator (``fneg``)."""

    def __init__(self, opcode: str, value: Value, name: str | None = None,
                 flags: Iterable[str] = ()):
        super().__init__(opcode, value.type, (value,), name, flags)

    @property
    def value(self) -> Value:
        """The operand."""
        return self._operands[0]


class Cast(Instruction):
    """Conversion ``<op> [flags] <ty> <v> to <dest>``."""

    def __init__(self, opcode: str, value: Value, dest_type: T.Type, name: str | None = None,
                 flags: Iterable[str] = ()):
        if opcode not in CAST_OPS:
            raise IRError(f"unknown cast opcode {opcode!r}")
        super().__init__(opcode, dest_type, (value,), name, flags)

    @property
    def value(self) -> Value:
        """The converted value."""
        return self._operands[0]

    @property
    def src_type(self) -> T.Type:
        """Source type."""
        return self._operands[0].type


def _bool_type_for(ty: T.Type) -> T.Type:
    if isinstance(ty, T.VectorType):
        return T.VectorType(ty.count, T.i1, ty.scalable)
    return T.i1


class Cmp(Instruction):
    """Comparison base class; :attr:`predicate` is the condition keyword."""

    def __init__(self, opcode: str, predicate: str, lhs: Value, rhs: Value,
                 name: str | None = None, flags: Iterable[str] = ()):
        super().__init__(opcode, _bool_type_for(lhs.type), (lhs, rhs), name, flags)
        self.predicate: str = predicate
        """Condition code (``eq``, ``slt``, ``olt``, ``une`` ...)."""

    @property
    def lhs(self) -> Value:
        """First operand."""
        return self._operands[0]

    @property
    def rhs(self) -> Value:
        """Second operand."""
        return self._operands[1]


class ICmp(Cmp):
    """Integer/pointer comparison ``icmp [samesign] <pred>``."""

    PREDICATES = ("eq", "ne", "ugt", "uge", "ult", "ule", "sgt", "sge", "slt", "sle")

    def __init__(self, predicate: str, lhs: Value, rhs: Value, name: str | None = None,
                 flags: Iterable[str] = ()):
        if predicate not in self.PREDICATES:
            raise IRError(f"bad icmp predicate {predicate!r}")
        super().__init__("icmp", predicate, lhs, rhs, name, flags)


class FCmp(Cmp):
    """Floating-point comparison ``fcmp [fmf] <pred>``."""

    PREDICATES = ("false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt",
                  "uge", "ult", "ule", "une", "uno", "true")

    def __init__(self, predicate: str, lhs: Value, rhs: Value, name: str | None = None,
                 flags: Iterable[str] = ()):
        if predicate not in self.PREDICATES:
            raise IRError(f"bad fcmp predicate {predicate!r}")
        super().__init__("fcmp", predicate, lhs, rhs, name, flags)


class Select(Instruction):
    """``select [fmf] i1 %c, T %a, T %b``."""

    def __init__(self, cond: Value, true_value: Value, false_value: Value,
                 name: str | None = None, flags: Iterable[str] = ()):
        super().__init__("select", true_value.type, (cond, true_value, false_value), name, flags)

    @property
    def condition(self) -> Value:
        """The selector."""
        return self._operands[0]

    @property
    def true_value(self) -> Value:
        """Value when the condition is true."""
        return self._operands[1]

    @property
    def false_value(self) -> Value:
        """Value when the condition is false."""
        return self._operands[2]


class Freeze(Instruction):
    """``freeze T %v``."""

    def __init__(self, value: Value, name: str | None = None):
        super().__init__("freeze", value.type, (value,), name)

    @property
    def value(self) -> Value:
        """The frozen value."""
        return self._operands[0]


class Phi(Instruction):
    """``phi T [v0, %bb0], [v1, %bb1] ...``.

    Incoming values are the operands; the matching blocks are kept in
    :attr:`incoming_blocks` (not tracked as uses, like LLVM).
    """

    def __init__(self, type: T.Type, incoming: Iterable[tuple[Value, "BasicBlock"]] = (),
                 name: str | None = None, flags: Iterable[str] = ()):
        super().__init__("phi", type, (), name, flags)
        self.incoming_blocks: list[BasicBlock] = []
        """Predecessor block of each incoming value."""
        for v, b in incoming:
            self.add_incoming(v, b)

    @property
    def incoming(self) -> list[tuple[Value, "BasicBlock"]]:
        """List of (value, block) pairs."""
        return list(zip(self._operands, self.incoming_blocks))

    def add_incoming(self, value: Value, block: "BasicBlock") -> None:
        """Append an incoming (value, block) pair."""
        self._append_operand(value)
        self.incoming_blocks.append(block)

    def remove_incoming(self, index: int) -> None:
        """Remove incoming pair ``index``."""
        self._remove_operands(index, index + 1)
        del self.incoming_blocks[index]

    def incoming_value_for(self, block: "BasicBlock") -> Value:
        """The value flowing in from ``block``."""
        for v, b in zip(self._operands, self.incoming_blocks):
            if b is block:
                return v
        raise IRError(f"phi has no incoming value for block {block.ref()}")

    def replace_incoming_block(self, old: "BasicBlock", new: "BasicBlock") -> None:
        """Rename predecessor ``old`` to ``new`` in every incoming pair."""
        self.incoming_blocks = [new if b is old else b for b in self.incoming_blocks]

    def _copy_fields(self) -> None:
        self.incoming_blocks = list(self.incoming_blocks)


# ---------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------

class Alloca(Instruction):
    """``alloca T [, <ty> <count>] [, align N] [, addrspace(N)]``."""

    def __init__(self, allocated_type: T.Type, num_elements: Value | None = None,
                 align: int | None = None, addrspace: int = 0, name: str | None = None,
                 flags: Iterable[str] = ()):
        super().__init__("alloca", T.PointerType(addrspace),
                         (num_elements,) if num_elements is not None else (), name, flags)
        self.allocated_type: T.Type = allocated_type
        """Type of the allocated object(s)."""
        self.align: int | None = align
        """Alignment in bytes (None if not printed)."""
        self.addrspace: int = addrspace
        """Address space of the result pointer."""

    @property
    def num_elements(self) -> Value | None:
        """Explicit element count operand, if written."""
        return self._operands[0] if self._operands else None


class Load(Instruction):
    """``load [atomic] [volatile] T, ptr %p [syncscope] [ordering], align N``."""

    def __init__(self, type: T.Type, pointer: Value, align: int | None = None,
                 volatile: bool = False, ordering: str | None = None,
                 syncscope: str | None = None, name: str | None = None):
        super().__init__("load", type, (pointer,), name)
        self.align: int | None = align
        """Alignment in bytes."""
        self.volatile: bool = volatile
        """True for volatile loads."""
        self.ordering: str | None = ordering
        """Atomic ordering (``monotonic``, ``acquire``, ``seq_cst``, ...) for atomic loads."""
        self.syncscope: str | None = syncscope
        """Sync scope string for atomics."""

    @property
    def pointer(self) -> Value:
        """Address operand."""
        return self._operands[0]


class Store(Instruction):
    """``store [atomic] [volatile] T %v, ptr %p [syncscope] [ordering], align N``."""

    def __init__(self, value: Value, pointer: Value, align: int | None = None,
                 volatile: bool = False, ordering: str | None = None,
                 syncscope: str | None = None):
        super().__init__("store", T.void, (value, pointer))
        self.align: int | None = align
        """Alignment in bytes."""
        self.volatile: bool = volatile
        """True for volatile stores."""
        self.ordering: str | None = ordering
        """Atomic ordering for atomic stores."""
        self.syncscope: str | None = syncscope
        """Sync scope string for atomics."""

    @property
    def value(self) -> Value:
        """Stored value."""
        return self._operands[0]

    @property
    def pointer(self) -> Value:
        """Address operand."""
        return self._operands[1]


def _gep_result_type(pointer: Value, indices: Sequence[Value]) -> T.Type:
    if isinstance(pointer.type, T.VectorType):
        return pointer.type
    for idx in indices:
        if isinstance(idx.type, T.VectorType):
            return T.VectorType(idx.type.count, pointer.type, idx.type.scalable)
    return pointer.type


class GetElementPtr(Instruction):
    """``getelementptr [inbounds|nusw|nuw] SrcTy, ptr %p, <idx>...``."""

    def __init__(self, source_type: T.Type, pointer: Value, indices: Iterable[Value],
                 name: str | None = None, flags: Iterable[str] = ()):
        indices = list(indices)
        super().__init__("getelementptr", _gep_result_type(pointer, indices),
                         [pointer, *indices], name, flags)
        self.source_type: T.Type = source_type
        """The source element type the first index steps over."""

    @property
    def pointer(self) -> Value:
        """Base address."""
        return self._operands[0]

    @property
    def indices(self) -> tuple[Value, ...]:
        """Index operands."""
        return tuple(self._operands[1:])

    def result_element_type(self) -> T.Type:
        """Type of the element the result points to."""
        ty = self.source_type
        for idx in self._operands[2:]:
            if isinstance(ty, (T.StructType, T.NamedStructType)):
                ty = ty.elements[idx.value]  # struct indices are constants
            else:
                ty = ty.element
        return ty


class Fence(Instruction):
    """``fence [syncscope("...")] <ordering>``."""

    def __init__(self, ordering: str, syncscope: str | None = None):
        super().__init__("fence", T.void)
        self.ordering: str = ordering
        """Atomic ordering."""
        self.syncscope: str | None = syncscope
        """Sync scope string, if any."""


class CmpXchg(Instruction):
    """``cmpxchg [weak] [volatile] ptr %p, T %cmp, T %new [syncscope] <succ> <fail>, align N``."""

    def __init__(self, pointer: Value, cmp: Value, new: Value, success: str, failure: str,
                 align: int | None = None, weak: bool = False, volatile: bool = False,
                 syncscope: str | None = None, name: str | None = None):
        super().__init__("cmpxchg", T.StructType((cmp.type, T.i1)), (pointer, cmp, new), name)
        self.success_ordering: str = success
        """Ordering on success."""
        self.failure_ordering: str = failure
        """Ordering on failure."""
        self.align: int | None = align
        """Alignment in bytes."""
        self.weak: bool = weak
        """True for ``weak``."""
        self.volatile: bool = volatile
        """True for ``volatile``."""
        self.syncscope: str | None = syncscope
        """Sync scope string, if any."""


class AtomicRMW(Instruction):
    """``atomicrmw [volatile] <op> ptr %p, T %v [syncscope] <ordering>, align N``."""

    def __init__(self, operation: str, pointer: Value, value: Value, ordering: str,
                 align: int | None = None, volatile: bool = False,
                 syncscope: str | None = None, name: str | None = None):
        super().__init__("atomicrmw", value.type, (pointer, value), name)
        self.operation: str = operation
        """RMW operation (``xchg``, ``add``, ``fadd``, ``umax`` ...)."""
        self.ordering: str = ordering
        """Atomic ordering."""
        self.align: int | None = align
        """Alignment in bytes."""
        self.volatile: bool = volatile
        """True for ``volatile``."""
        self.syncscope: str | None = syncscope
        """Sync scope string, if any."""


class VAArg(Instruction):
    """``va_arg ptr %ap, T``."""

    def __init__(self, valist: Value, type: T.Type, name: str | None = None):
        super().__init__("va_arg", type, (valist,), name)


# ---------------------------------------------------------------------------
# Aggregates and vectors
# ---------------------------------------------------------------------------

class ExtractValue(Instruction):
    """``extractvalue AggTy %agg, i0, i1, ...``."""

    def __init__(self, aggregate: Value, indices: Iterable[int], name: str | None = None):
        indices = tuple(indices)
        super().__init__("extractvalue", aggregate_element_type(aggregate.type, indices),
                         (aggregate,), name)
        self.indices: tuple[int, ...] = indices
        """Constant indices."""

    @property
    def aggregate(self) -> Value:
        """The aggregate operand."""
        return self._operands[0]


class InsertValue(Instruction):
    """``insertvalue AggTy %agg, T %v, i0, ...``."""

    def __init__(self, aggregate: Value, value: Value, indices: Iterable[int],
                 name: str | None = None):
        super().__init__("insertvalue", aggregate.type, (aggregate, value), name)
        self.indices: tuple[int, ...] = tuple(indices)
        """Constant indices."""

    @property
    def aggregate(self) -> Value:
        """The aggregate operand."""
        return self._operands[0]

    @property
    def value(self) -> Value:
        """The inserted value."""
        return self._operands[1]


class ExtractElement(Instruction):
    """``extractelement <N x T> %v, iK %idx``."""

    def __init__(self, vector: Value, index: Value, name: str | None = None):
        super().__init__("extractelement", vector.type.element, (vector, index), name)

    @property
    def vector(self) -> Value:
        """The vector operand."""
        return self._operands[0]

    @property
    def index_operand(self) -> Value:
        """The index operand."""
        return self._operands[1]


class InsertElement(Instruction):
    """``insertelement <N x T> %v, T %e, iK %idx``."""

    def __init__(self, vector: Value, element: Value, index: Value, name: str | None = None):
        super().__init__("insertelement", vector.type, (vector, element, index), name)

    @property
    def vector(self) -> Value:
        """The vector operand."""
        return self._operands[0]

    @property
    def element(self) -> Value:
        """The inserted scalar."""
        return self._operands[1]

    @property
    def index_operand(self) -> Value:
        """The index operand."""
        return self._operands[2]


class ShuffleVector(Instruction):
    """``shufflevector <N x T> %a, <N x T> %b, <M x i32> <mask>``.

    The mask is a constant kept in :attr:`mask` (not an operand, as in LLVM).
    """

    def __init__(self, a: Value, b: Value, mask: Value, name: str | None = None):
        mty = mask.type
        rty = T.VectorType(mty.count, a.type.element, mty.scalable)
        super().__init__("shufflevector", rty, (a, b), name)
        self.mask: Value = mask
        """Constant ``<M x i32>`` mask."""


# ---------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------

class Call(Instruction):
    """Function call.

    Operands are ``[callee, *args, *bundle_operands]``.  Argument attributes
    are kept per argument in :attr:`arg_attrs`; arguments of ``metadata``
    type that wrap a value (``metadata ptr %x``) are flagged in
    :attr:`metadata_args`.
    """

    def __init__(self, callee: Value, args: Sequence[Value], function_type: T.FunctionType,
                 name: str | None = None, flags: Iterable[str] = (),
                 arg_attrs: Sequence[Sequence[str]] | None = None, tail: str | None = None,
                 cconv: str | None = None, ret_attrs: Iterable[str] = (),
                 fn_attrs: Iterable[str] = (), addrspace: int | None = None,
                 bundles: Sequence[tuple[str, Sequence[Value]]] = (),
                 metadata_args: Iterable[int] = (), opcode: str = "call"):
        ops = [callee, *args]
        for _, bops in bundles:
            ops.extend(bops)
        super().__init__(opcode, function_type.ret, ops, name, flags)
        self.function_type: T.FunctionType = function_type
        """Type of the called function (params + varargs)."""
        self.num_args: int = len(args)
        """Number of call arguments."""
        self.arg_attrs: list[list[str]] = [list(a) for a in (arg_attrs or [[] for _ in args])]
        """Attributes of each argument (text, e.g. ``["noundef"]``)."""
        self.metadata_args: set[int] = set(metadata_args)
        """Indices of ``metadata``-typed arguments that wrap a value."""
        self.tail: str | None = tail
        """``tail``, ``musttail``, ``notail`` or None."""
        self.cconv: str | None = cconv
        """Calling convention keyword (``fastcc``, ``cc 10``) or None."""
        self.ret_attrs: list[str] = list(ret_attrs)
        """Return attributes (``noundef``, ``nofpclass(nan inf)`` ...)."""
        self.fn_attrs: list[str] = list(fn_attrs)
        """Function attributes of the call site (``#3``, ``nounwind`` ...)."""
        self.addrspace: int | None = addrspace
        """Explicit callee address space, if printed."""
        self.bundles: list[tuple[str, int]] = [(tag, len(bops)) for tag, bops in bundles]
        """Operand bundles: (tag, number of operands) in order."""

    @property
    def callee(self) -> Value:
        """Called value (a :class:`GlobalRef`, a local pointer, or :class:`InlineAsm`)."""
        return self._operands[0]

    @property
    def callee_name(self) -> str | None:
        """Name of a directly called function, else None."""
        c = self._operands[0]
        return c.symbol if isinstance(c, GlobalRef) else None

    @property
    def args(self) -> tuple[Value, ...]:
        """Call arguments."""
        return tuple(self._operands[1:1 + self.num_args])

    def arg(self, i: int) -> Value:
        """Argument ``i``."""
        if not 0 <= i < self.num_args:
            raise IndexError(i)
        return self._operands[1 + i]

    def set_arg(self, i: int, value: Value) -> None:
        """Replace argument ``i``."""
        self.set_operand(1 + i, value)

    @property
    def bundle_operands(self) -> list[tuple[str, list[Value]]]:
        """Operand bundles as (tag, values)."""
        out = []
        pos = 1 + self.num_args
        for tag, n in self.bundles:
            out.append((tag, list(self._operands[pos:pos + n])))
            pos += n
        return out

    @property
    def is_intrinsic(self) -> bool:
        """True for direct calls to ``llvm.*`` functions."""
        name = self.callee_name
        return name is not None and name.startswith("llvm.")

    def _copy_fields(self) -> None:
        self.arg_attrs = [list(a) for a in self.arg_attrs]
        self.metadata_args = set(self.metadata_args)
        self.ret_attrs = list(self.ret_attrs)
        self.fn_attrs = list(self.fn_attrs)
        self.bundles = list(self.bundles)


class Invoke(Call):
    """``invoke ... to label %normal unwind label %unwind`` (a terminator)."""

    is_terminator = True

    def __init__(self, callee: Value, args: Sequence[Value], function_type: T.FunctionType,
                 normal_dest: "BasicBlock", unwind_dest: "BasicBlock", **kw):
        super().__init__(callee, args, function_type, opcode="invoke", **kw)
        self._append_operand(normal_dest)
        self._append_operand(unwind_dest)

    @property
    def normal_dest(self) -> "BasicBlock":
        """Block reached on normal return."""
        return self._operands[-2]

    @property
    def unwind_dest(self) -> "BasicBlock":
        """Landing block on exception."""
        return self._operands[-1]

    @property
    def successors(self) -> list["BasicBlock"]:
        return [self._operands[-2], self._operands[-1]]


# ---------------------------------------------------------------------------
# Terminators
# ---------------------------------------------------------------------------

class Ret(Instruction):
    """``ret void`` / ``ret T %v``."""

    is_terminator = True

    def __init__(self, value: Value | None = None):
        super().__init__("ret", T.void, (value,) if value is not None else ())

    @property
    def value(self) -> Value | None:
        """Returned value (None for ``ret void``)."""
        return self._operands[0] if self._operands else None


class Br(Instruction):
    """Unconditional branch ``br label %dest``."""

    is_terminator = True

    def __init__(self, dest: "BasicBlock"):
        super().__init__("br", T.void, (dest,))

    @property
    def dest(self) -> "BasicBlock":
        """Target block."""
        return self._operands[0]

    @property
    def is_conditional(self) -> bool:
        """False for unconditional branches."""
        return False

    @property
    def successors(self) -> list["BasicBlock"]:
        return [self._operands[0]]


class CondBr(Instruction):
    """Conditional branch ``br i1 %c, label %t, label %f``."""

    is_terminator = True

    def __init__(self, cond: Value, true_dest: "BasicBlock", false_dest: "BasicBlock"):
        super().__init__("br", T.void, (cond, true_dest, false_dest))

    @property
    def condition(self) -> Value:
        """Branch condition."""
        return self._operands[0]

    @property
    def true_dest(self) -> "BasicBlock":
        """Target when true."""
        return self._operands[1]

    @property
    def false_dest(self) -> "BasicBlock":
        """Target when false."""
        return self._operands[2]

    @property
    def is_conditional(self) -> bool:
        """True for conditional branches."""
        return True

    @property
    def successors(self) -> list["BasicBlock"]:
        return [self._operands[1], self._operands[2]]


class Switch(Instruction):
    """``switch T %v, label %default [ T c, label %bb ... ]``.

    Operands: ``[cond, default, c0, bb0, c1, bb1, ...]``.
    """

    is_terminator = True

    def __init__(self, cond: Value, default: "BasicBlock",
                 cases: Iterable[tuple[Value, "BasicBlock"]] = ()):
        super().__init__("switch", T.void, (cond, default))
        for c, b in cases:
            self.add_case(c, b)

    @property
    def condition(self) -> Value:
        """Switched-on value."""
        return self._operands[0]

    @property
    def default(self) -> "BasicBlock":
        """Default destination."""
        return self._operands[1]

    @property
    def cases(self) -> list[tuple[Value, "BasicBlock"]]:
        """(constant, block) pairs."""
        ops = self._operands
        return [(ops[i], ops[i + 1]) for i in range(2, len(ops), 2)]

    def add_case(self, value: Value, block: "BasicBlock") -> None:
        """Append a case."""
        self._append_operand(value)
        self._append_operand(block)

    @property
    def successors(self) -> list["BasicBlock"]:
        ops = self._operands
        return [ops[1]] + [ops[i] for i in range(3, len(ops), 2)]


class IndirectBr(Instruction):
    """``indirectbr ptr %addr, [label %a, label %b]``."""

    is_terminator = True

    def __init__(self, address: Value, dests: Iterable["BasicBlock"]):
        super().__init__("indirectbr", T.void, (address, *dests))

    @property
    def address(self) -> Value:
        """Target address."""
        return self._operands[0]

    @property
    def successors(self) -> list["BasicBlock"]:
        return list(self._operands[1:])


class Unreachable(Instruction):
    """``unreachable``."""

    is_terminator = True

    def __init__(self):
        super().__init__("unreachable", T.void)


class Resume(Instruction):
    """``resume T %v``."""

    is_terminator = True

    def __init__(self, value: Value):
        super().__init__("resume", T.void, (value,))

    @property
    def value(self) -> Value:
        """The exception value."""
        return self._operands[0]


class LandingPad(Instruction):
    """``landingpad T [cleanup] (catch T v | filter T v)*``.

    Clause values are operands; their kinds are in :attr:`clause_kinds`.
    """

    def __init__(self, type: T.Type, cleanup: bool = False,
                 clauses: Iterable[tuple[str, Value]] = (), name: str | None = None):
        clauses = list(clauses)
        super().__init__("landingpad", type, [v for _, v in clauses], name)
        self.cleanup: bool = cleanup
        """True if the pad has the ``cleanup`` flag."""
        self.clause_kinds: list[str] = [k for k, _ in clauses]
        """``catch`` or ``filter`` for each clause operand."""

    @property
    def clauses(self) -> list[tuple[str, Value]]:
        """(kind, value) pairs."""
        return list(zip(self.clause_kinds, self._operands))

    def _copy_fields(self) -> None:
        self.clause_kinds = list(self.clause_kinds)
