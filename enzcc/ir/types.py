"""LLVM IR types.

All types except :class:`NamedStructType` are immutable, hashable dataclasses
compared structurally.  Named structs (``%struct.foo``) are compared by name;
their body lives on the object and is owned by the module's named-type table
(:attr:`enzcc.ir.module.Module.named_types`).

``str(ty)`` prints the LLVM syntax of a type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "Type", "IntType", "FloatType", "PointerType", "VoidType", "LabelType",
    "MetadataType", "TokenType", "X86AMXType", "TargetExtType", "ArrayType",
    "VectorType", "StructType", "NamedStructType", "FunctionType",
    "FLOAT_KINDS", "is_floating", "quote_name",
    "i1", "i8", "i16", "i32", "i64", "i128", "half", "bfloat", "f32", "f64",
    "x86_fp80", "fp128", "ptr", "void", "label", "metadata", "token",
]

_BARE_NAME_RE = re.compile(r"[-a-zA-Z._][-a-zA-Z._0-9]*\Z")


def quote_name(name: str) -> str:
    """Return ``name`` as it must appear after a sigil (``%``, ``@``, ``$``).

    Names that are valid bare identifiers or pure numbers are returned as is;
    anything else is quoted with LLVM ``\\XX`` escapes.
    """
    if _BARE_NAME_RE.match(name) or name.isdigit():
        return name
    out = []
    for ch in name.encode("utf-8"):
        if ch == 0x22 or ch == 0x5C or ch < 0x20 or ch >= 0x7F:
            out.append("\\%02X" % ch)
        else:
            out.append(chr(ch))
    return '"' + "".join(out) + '"'


class Type:
    """Base class of all IR types."""

    @property
    def is_integer(self) -> bool:
        """True for scalar integer types."""
        return False

    @property
    def is_floating(self) -> bool:
        """True for scalar floating-point types."""
        return False

    @property
    def is_pointer(self) -> bool:
        """True for (scalar) pointer types."""
        return False

    @property
    def is_vector(self) -> bool:
        """True for vector types."""
        return False

    @property
    def is_aggregate(self) -> bool:
        """True for arrays and structs."""
        return False

    @property
    def is_void(self) -> bool:
        """True for ``void``."""
        return False

    @property
    def scalar_type(self) -> "Type":
        """The element type of a vector, else the type itself."""
        return self

    @property
    def is_fp_or_fp_vector(self) -> bool:
        """True for floating scalars and vectors of floating scalars."""
        return self.scalar_type.is_floating

    @property
    def is_int_or_int_vector(self) -> bool:
        """True for integer scalars and vectors of integers."""
        return self.scalar_type.is_integer

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"


@dataclass(frozen=True, repr=False)
class IntType(Type):
    """Arbitrary-width integer type ``iN``."""

    bits: int
    """Bit width (1 .. 2**23)."""

    @property
    def is_integer(self) -> bool:
        return True

    def __str__(self) -> str:
        return f"i{self.bits}"


FLOAT_KINDS = {
    "half": 16, "bfloat": 16, "float": 32, "double": 64,
    "x86_fp80": 80, "fp128": 128, "ppc_fp128": 128,
}
"""Floating-point type keywords and their bit widths."""


@dataclass(frozen=True, repr=False)
class FloatType(Type):
    """Floating-point type (``half``, ``bfloat``, ``float``, ``double``, ...)."""

    kind: str
    """One of the keys of :data:`FLOAT_KINDS`."""

    def __post_init__(self):
        if self.kind not in FLOAT_KINDS:
            raise ValueError(f"unknown floating-point type {self.kind!r}")

    @property
    def bits(self) -> int:
        """Bit width of the format."""
        return FLOAT_KINDS[self.kind]

    @property
    def is_floating(self) -> bool:
        return True

    def __str__(self) -> str:
        return self.kind


@dataclass(frozen=True, repr=False)
class PointerType(Type):
    """Opaque pointer type ``ptr`` / ``ptr addrspace(N)``."""

    addrspace: int = 0
    """Address space number."""

    @property
    def is_pointer(self) -> bool:
        return True

    def __str__(self) -> str:
        return "ptr" if self.addrspace == 0 else f"ptr addrspace({self.addrspace})"


@dataclass(frozen=True, repr=False)
class VoidType(Type):
    """The ``void`` type."""

    @property
    def is_void(self) -> bool:
        return True

    def __str__(self) -> str:
        return "void"


@dataclass(frozen=True, repr=False)
class LabelType(Type):
    """The ``label`` type of basic blocks."""

    def __str__(self) -> str:
        return "label"


@dataclass(frozen=True, repr=False)
class MetadataType(Type):
    """The ``metadata`` type (only for intrinsic call operands)."""

    def __str__(self) -> str:
        return "metadata"


@dataclass(frozen=True, repr=False)
class TokenType(Type):
    """The ``token`` type."""

    def __str__(self) -> str:
        return "token"


@dataclass(frozen=True, repr=False)
class X86AMXType(Type):
    """The ``x86_amx`` type."""

    def __str__(self) -> str:
        return "x86_amx"


@dataclass(frozen=True, repr=False)
class TargetExtType(Type):
    """Target extension type ``target("name", types..., ints...)``, kept as text."""

    text: str
    """The full spelling, e.g. ``target("spirv.Image", void, 1)``."""

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, repr=False)
class ArrayType(Type):
    """Array type ``[N x T]``."""

    count: int
    """Number of elements."""
    element: Type
    """Element type."""

    @property
    def is_aggregate(self) -> bool:
        return True

    def __str__(self) -> str:
        return f"[{self.count} x {self.element}]"


@dataclass(frozen=True, repr=False)
class VectorType(Type):
    """Vector type ``<N x T>`` or scalable ``<vscale x N x T>``."""

    count: int
    """Number of elements (minimum number for scalable vectors)."""
    element: Type
    """Element type (integer, floating point or pointer)."""
    scalable: bool = False
    """True for ``<vscale x N x T>``."""

    @property
    def is_vector(self) -> bool:
        return True

    @property
    def scalar_type(self) -> Type:
        return self.element

    def __str__(self) -> str:
        if self.scalable:
            return f"<vscale x {self.count} x {self.element}>"
        return f"<{self.count} x {self.element}>"


@dataclass(frozen=True, repr=False)
class StructType(Type):
    """Literal (anonymous) struct type ``{ T1, T2 }`` or packed ``<{ T1, T2 }>``."""

    elements: tuple[Type, ...]
    """Field types."""
    packed: bool = False
    """True for packed structs (no padding, alignment 1)."""

    def __post_init__(self):
        if not isinstance(self.elements, tuple):
            object.__setattr__(self, "elements", tuple(self.elements))

    @property
    def is_aggregate(self) -> bool:
        return True

    @property
    def body(self) -> "StructType":
        """The struct itself (for symmetry with :class:`NamedStructType`)."""
        return self

    def __str__(self) -> str:
        if not self.elements:
            inner = "{}"
        else:
            inner = "{ " + ", ".join(str(e) for e in self.elements) + " }"
        return f"<{inner}>" if self.packed else inner


class NamedStructType(Type):
    """Identified struct type referenced as ``%name``.

    Equality and hashing use the name only.  The body is ``None`` for opaque
    structs (``%T = type opaque``).
    """

    def __init__(self, name: str, body: StructType | None = None):
        self.name = name
        """Type name without the ``%`` sigil (unquoted)."""
        self.body = body
        """The struct definition, or None when opaque."""

    @property
    def elements(self) -> tuple[Type, ...]:
        """Field types (empty for opaque structs)."""
        return self.body.elements if self.body is not None else ()

    @property
    def packed(self) -> bool:
        """True if the body is packed."""
        return self.body.packed if self.body is not None else False

    @property
    def is_opaque(self) -> bool:
        """True for ``type opaque``."""
        return self.body is None

    @property
    def is_aggregate(self) -> bool:
        return True

    def definition(self) -> str:
        """The module-level definition line ``%name = type {...}``."""
        body = "opaque" if self.body is None else str(self.body)
        return f"%{quote_name(self.name)} = type {body}"

    def __eq__(self, other) -> bool:
        return isinstance(other, NamedStructType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("named-struct", self.name))

    def __str__(self) -> str:
        return "%" + quote_name(self.name)


@dataclass(frozen=True, repr=False)
class FunctionType(Type):
    """Function type ``R (P1, P2, ...)``."""

    ret: Type
    """Return type."""
    params: tuple[Type, ...] = ()
    """Fixed parameter types."""
    varargs: bool = False
    """True if the function takes ``...``."""

    def __post_init__(self):
        if not isinstance(self.params, tuple):
            object.__setattr__(self, "params", tuple(self.params))

    def __str__(self) -> str:
        ps = [str(p) for p in self.params]
        if self.varargs:
            ps.append("...")
        return f"{self.ret} ({', '.join(ps)})"


def is_floating(ty: Type) -> bool:
    """True if ``ty`` is a floating-point scalar or a vector of them."""
    return ty.scalar_type.is_floating


i1 = IntType(1)
i8 = IntType(8)
i16 = IntType(16)
i32 = IntType(32)
i64 = IntType(64)
i128 = IntType(128)
half = FloatType("half")
bfloat = FloatType("bfloat")
f32 = FloatType("float")
f64 = FloatType("double")
x86_fp80 = FloatType("x86_fp80")
fp128 = FloatType("fp128")
ptr = PointerType()
void = VoidType()
label = LabelType()
metadata = MetadataType()
token = TokenType()
