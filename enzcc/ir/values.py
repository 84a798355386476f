"""SSA values, uses and constants.

Every operand of an :class:`~enzcc.ir.instructions.Instruction` is a
:class:`Value`; each value keeps the list of :class:`Use` objects naming the
instructions (and operand slots) that read it.  Constants are plain values
too, but they are normally *not shared*: each use site owns its own constant
object (module-level globals are the exception, see :class:`GlobalRef`).
Operands nested inside constants (e.g. a global inside a constant expression)
are not tracked as uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from . import types as T
from .errors import IRError
from .floats import format_float, parse_float_text

if TYPE_CHECKING:  # pragma: no cover
    from .instructions import Instruction, DebugRecord
    from .function import Function

__all__ = [
    "Use", "Value", "Argument", "Placeholder", "Constant", "ConstantInt",
    "ConstantFloat", "ConstantNull", "ConstantUndef", "ConstantPoison",
    "ConstantZero", "ConstantNone", "ConstantAggregate", "ConstantString",
    "ConstantSplat", "ConstantExpr", "OpaqueConstant", "GlobalRef", "InlineAsm",
    "MetadataValue",
]


@dataclass(eq=False, slots=True)
class Use:
    """One operand slot of an instruction that reads a value."""

    user: "Instruction"
    """The instruction reading the value."""
    index: int
    """Operand index inside ``user.operands``."""

    @property
    def value(self) -> "Value":
        """The value being used."""
        return self.user.operands[self.index]


class Value:
    """Base class of everything that can be an operand.

    ``name`` is None for unnamed values (printed as ``%N`` with sequential
    numbering); names made only of digits are treated as unnamed.
    """

    def __init__(self, type: T.Type, name: str | None = None):
        self.type: T.Type = type
        """The IR type of the value."""
        self._name: str | None = None
        self.name = name
        self._uses: list[Use] = []

    #: debug records (``#dbg_value`` ...) referring to this value: a list of its own once there is one (most
    #: values have none, and an empty list per value was a tenth of the IR model's memory on large functions)
    _debug_users: "list[DebugRecord] | tuple" = ()

    def _add_debug_user(self, record: "DebugRecord") -> None:
        if not self._debug_users:
            self._debug_users = []
        self._debug_users.append(record)

    # -- naming -------------------------------------------------------------
    @property
    def name(self) -> str | None:
        """Local name without sigil, or None if unnamed."""
        return self._name

    @name.setter
    def name(self, value: str | None) -> None:
        if value is not None and (value == "" or value.isdigit()):
            value = None
        self._name = value

    # -- uses ---------------------------------------------------------------
    @property
    def uses(self) -> tuple[Use, ...]:
        """All operand slots (in instructions) that read this value."""
        return tuple(self._uses)

    @property
    def users(self) -> list["Instruction"]:
        """Distinct instructions using this value, in use order."""
        seen: dict[int, Instruction] = {}
        for use in self._uses:
            seen.setdefault(id(use.user), use.user)
        return list(seen.values())

    @property
    def num_uses(self) -> int:
        """Number of operand slots reading this value."""
        return len(self._uses)

    def has_uses(self) -> bool:
        """True if any instruction operand reads this value."""
        return bool(self._uses)

    @property
    def debug_users(self) -> list["DebugRecord"]:
        """Debug records (``#dbg_value`` ...) referring to this value."""
        return list(dict.fromkeys(self._debug_users))

    def replace_all_uses_with(self, new: "Value", check_type: bool = True) -> None:
        """Make every user (and debug record) of this value use ``new`` instead."""
        if new is self:
            return
        if check_type and new.type != self.type:
            raise IRError(f"replace_all_uses_with: type mismatch {self.type} vs {new.type}")
        for use in list(self._uses):
            use.user.set_operand(use.index, new)
        for rec in list(dict.fromkeys(self._debug_users)):
            rec.replace_value(self, new)

    def replace_uses_with_if(self, new: "Value", predicate) -> None:
        """Replace the uses for which ``predicate(use)`` is true (debug records untouched)."""
        if new is self:
            return
        for use in list(self._uses):
            if predicate(use):
                use.user.set_operand(use.index, new)

    # -- misc -----------------------------------------------------------------
    @property
    def is_constant(self) -> bool:
        """True for constants (including global references)."""
        return False

    def ref(self) -> str:
        """Short reference text (``%name`` or constant spelling); numbered
        values print as ``%<unnamed>`` outside a function printer."""
        from .printer import value_ref
        return value_ref(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.type} {self.ref()}>"


class Argument(Value):
    """A formal parameter of a function."""

    def __init__(self, type: T.Type, name: str | None = None, attrs: Sequence[str] = (),
                 parent: "Function | None" = None, index: int = 0):
        super().__init__(type, name)
        self.attrs: list[str] = list(attrs)
        """Parameter attributes as text, e.g. ``["noundef", "align 8"]``."""
        self.parent = parent
        """The owning function."""
        self.index = index
        """Position in the parameter list."""


class Placeholder(Value):
    """Temporary stand-in for a forward-referenced local value during parsing."""


# --------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------

class Constant(Value):
    """Base class of constants. Constants have no name."""

    def __init__(self, type: T.Type):
        super().__init__(type, None)

    @property
    def is_constant(self) -> bool:
        return True


class ConstantInt(Constant):
    """Integer constant (``i1`` prints as ``true``/``false``)."""

    def __init__(self, type: T.Type, value: int):
        super().__init__(type)
        self.value: int = int(value)
        """The integer value (as written; printing normalizes to signed)."""

    @property
    def signed_value(self) -> int:
        """Value interpreted as a signed integer of the type's width."""
        bits = self.type.scalar_type.bits
        v = self.value & ((1 << bits) - 1)
        return v - (1 << bits) if bits > 1 and v >> (bits - 1) else v

    @property
    def unsigned_value(self) -> int:
        """Value interpreted as an unsigned integer of the type's width."""
        return self.value & ((1 << self.type.scalar_type.bits) - 1)


class ConstantFloat(Constant):
    """Floating-point constant.

    The exact LLVM spelling is kept in :attr:`text` so that hex forms
    (``0x3FB999999999999A``, ``0xK...``) round-trip bit-exactly.
    """

    def __init__(self, type: T.Type, value: float | None = None, text: str | None = None):
        super().__init__(type)
        if text is None:
            if value is None:
                raise ValueError("ConstantFloat needs a value or a text")
            text = format_float(type.scalar_type.kind, float(value))
        self.text: str = text
        """LLVM spelling of the constant."""

    @property
    def value(self) -> float | None:
        """Python float approximation (None if the format is not decodable)."""
        return parse_float_text(self.text)


class ConstantNull(Constant):
    """``null`` pointer."""


class ConstantUndef(Constant):
    """``undef``."""


class ConstantPoison(Constant):
    """``poison``."""


class ConstantZero(Constant):
    """``zeroinitializer`` (any type)."""


class ConstantNone(Constant):
    """``none`` token."""


class ConstantAggregate(Constant):
    """Struct ``{ ... }``, packed struct ``<{ ... }>``, array ``[ ... ]`` or vector ``< ... >`` constant."""

    def __init__(self, type: T.Type, elements: Iterable[Value]):
        super().__init__(type)
        self.elements: list[Value] = list(elements)
        """Element constants (typed)."""


class ConstantString(Constant):
    """Byte-array constant ``c"..."``."""

    def __init__(self, type: T.Type, data: bytes):
        super().__init__(type)
        self.data: bytes = bytes(data)
        """Raw bytes (length equals the array length)."""


class ConstantSplat(Constant):
    """Vector splat ``splat (T v)``."""

    def __init__(self, type: T.Type, element: Value):
        super().__init__(type)
        self.element: Value = element
        """The repeated scalar constant."""


class ConstantExpr(Constant):
    """Constant expression such as ``getelementptr inbounds (i8, ptr @g, i64 4)``
    or ``ptrtoint (ptr @g to i64)``.

    The result type is :attr:`type`; for casts this is the destination type.
    """

    CASTS = frozenset({"trunc", "zext", "sext", "fptrunc", "fpext", "fptoui", "fptosi",
                       "uitofp", "sitofp", "ptrtoint", "ptrtoaddr", "inttoptr", "bitcast",
                       "addrspacecast"})

    def __init__(self, type: T.Type, opcode: str, operands: Iterable[Value],
                 flags: Sequence[str] = (), source_type: T.Type | None = None):
        super().__init__(type)
        self.opcode: str = opcode
        """Opcode keyword (``getelementptr``, ``bitcast``, ``add``, ...)."""
        self.operands: list[Value] = list(operands)
        """Typed constant operands."""
        self.flags: list[str] = list(flags)
        """Flag keywords (``inbounds``, ``nuw``, ``inrange(0, 8)``, predicates, ...)."""
        self.source_type: T.Type | None = source_type
        """Source element type of a ``getelementptr``."""


class OpaqueConstant(Constant):
    """A constant kept as its text (``blockaddress(@f, %bb)``, ``dso_local_equivalent @f``, ...)."""

    def __init__(self, type: T.Type, text: str):
        super().__init__(type)
        self.text: str = text
        """The verbatim spelling."""


class GlobalRef(Constant):
    """Reference to a module-level symbol ``@name`` (function, variable, alias).

    A module keeps a single ``GlobalRef`` per name (see
    :meth:`enzcc.ir.module.Module.global_ref`), so its :attr:`uses` list every
    use inside parsed function bodies.
    """

    def __init__(self, name: str, type: T.Type = T.ptr, module=None):
        super().__init__(type)
        self.symbol: str = name
        """Symbol name without the ``@`` sigil."""
        self.module = module
        """The owning module (None for free-standing references)."""

    @property
    def name(self) -> str | None:  # type: ignore[override]
        return getattr(self, "symbol", None)

    @name.setter
    def name(self, value) -> None:
        pass

    def resolve(self):
        """The :class:`Function` or global variable this refers to (or None)."""
        if self.module is None:
            return None
        return self.module.functions.get(self.symbol) or self.module.globals.get(self.symbol)


class InlineAsm(Value):
    """Inline assembly callee, e.g. ``asm sideeffect "", "r,~{memory}"``."""

    def __init__(self, text: str, type: T.Type = T.ptr):
        super().__init__(type)
        self.text: str = text
        """The verbatim ``asm ...`` spelling (without the function type)."""

    @property
    def is_constant(self) -> bool:
        return True


class MetadataValue(Value):
    """A metadata operand (``!12``, ``!"round.dynamic"``, ``!DIExpression()``), kept as text."""

    def __init__(self, text: str):
        super().__init__(T.metadata)
        self.text: str = text
        """The verbatim metadata spelling."""

    @property
    def is_constant(self) -> bool:
        return True
