"""Target data layout: sizes, alignments and struct field offsets.

Parses an LLVM ``target datalayout`` string and answers the same questions as
LLVM's ``DataLayout``: store size, alloc size, ABI/preferred alignment and
struct layouts.  The rules follow LLVM's defaults and lookup logic (integer
alignment falls back to the next larger specified width, unspecified float and
vector widths use the power-of-two ceiling of their store size).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .types import (
    ArrayType, FloatType, IntType, NamedStructType, PointerType, StructType,
    TargetExtType, Type, VectorType, X86AMXType,
)

__all__ = ["DataLayout", "StructLayout", "X86_64_LINUX_LAYOUT", "NVPTX64_LAYOUT"]

X86_64_LINUX_LAYOUT = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
"""Data layout clang 22 uses for x86_64-unknown-linux-gnu."""

NVPTX64_LAYOUT = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
"""Data layout clang 22 uses for nvptx64-nvidia-cuda."""


def _align_to(value: int, align: int) -> int:
    return (value + align - 1) // align * align


def _pow2_ceil(value: int) -> int:
    p = 1
    while p < value:
        p *= 2
    return p


@dataclass
class StructLayout:
    """Layout of one struct type."""

    offsets: list[int]
    """Byte offset of each field."""
    size: int
    """Alloc size of the struct in bytes (including tail padding)."""
    alignment: int
    """ABI alignment of the struct in bytes."""

    def element_containing_offset(self, offset: int) -> int:
        """Index of the field whose storage contains byte ``offset``."""
        idx = bisect.bisect_right(self.offsets, offset) - 1
        return max(idx, 0)


@dataclass
class DataLayout:
    """Parsed ``target datalayout`` string.

    Alignments are stored in bytes, sizes of specs in bits (as in the string).
    """

    text: str = ""
    """The original layout string."""
    big_endian: bool = False
    """True for ``E``."""
    int_specs: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Integer bit width -> (ABI alignment, preferred alignment) in bytes."""
    float_specs: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Float bit width -> (ABI alignment, preferred alignment) in bytes."""
    vector_specs: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Vector bit width -> (ABI alignment, preferred alignment) in bytes."""
    pointer_specs: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    """Address space -> (size bits, ABI align, preferred align, index size bits)."""
    aggregate_align: tuple[int, int] = (1, 8)
    """(ABI, preferred) alignment of aggregates, in bytes."""
    stack_align: int | None = None
    """Natural stack alignment in bytes, if given."""
    native_ints: tuple[int, ...] = ()
    """Native integer widths (``n8:16:32:64``)."""
    _struct_cache: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def parse(cls, text: str | None) -> "DataLayout":
        """Parse a layout string (None or "" gives LLVM's defaults)."""
        dl = cls(text=text or "")
        dl.int_specs = {1: (1, 1), 8: (1, 1), 16: (2, 2), 32: (4, 4), 64: (4, 8)}
        dl.float_specs = {16: (2, 2), 32: (4, 4), 64: (8, 8), 128: (16, 16)}
        dl.vector_specs = {64: (8, 8), 128: (16, 16)}
        dl.pointer_specs = {0: (64, 8, 8, 64)}
        for spec in (text or "").split("-"):
            if not spec:
                continue
            dl._parse_spec(spec)
        return dl

    def _parse_spec(self, spec: str) -> None:
        head = spec[0]
        if spec == "e":
            self.big_endian = False
        elif spec == "E":
            self.big_endian = True
        elif head == "S" and spec[1:].isdigit():
            self.stack_align = int(spec[1:]) // 8
        elif head == "n" and not spec.startswith("ni"):
            self.native_ints = tuple(int(x) for x in spec[1:].split(":") if x)
        elif head == "p" and (len(spec) == 1 or spec[1] in "0123456789:"):
            parts = spec[1:].split(":")
            addrspace = int(parts[0]) if parts[0] else 0
            nums = [int(x) for x in parts[1:]]
            size = nums[0]
            abi = nums[1] // 8
            pref = nums[2] // 8 if len(nums) > 2 else abi
            idx = nums[3] if len(nums) > 3 else size
            self.pointer_specs[addrspace] = (size, abi, pref, idx)
        elif head in "ifv" and spec[1:2].isdigit():
            parts = spec[1:].split(":")
            bits = int(parts[0])
            abi = int(parts[1]) // 8 if len(parts) > 1 else bits // 8
            pref = int(parts[2]) // 8 if len(parts) > 2 else abi
            table = {"i": self.int_specs, "f": self.float_specs, "v": self.vector_specs}[head]
            table[bits] = (max(abi, 1), max(pref, 1))
        elif head == "a" and spec[1:2] == ":":
            parts = spec[2:].split(":")
            abi = max(int(parts[0]) // 8, 1) if parts[0] else 1
            pref = int(parts[1]) // 8 if len(parts) > 1 else abi
            self.aggregate_align = (abi, max(pref, 1))
        # m:, P, A, G, F, ni:, and unknown specs do not affect layout here.

    # -- pointers -----------------------------------------------------------
    def _pointer_spec(self, addrspace: int) -> tuple[int, int, int, int]:
        return self.pointer_specs.get(addrspace, self.pointer_specs[0])

    def pointer_size(self, addrspace: int = 0) -> int:
        """Pointer size in bytes for an address space."""
        return self._pointer_spec(addrspace)[0] // 8

    def index_size(self, addrspace: int = 0) -> int:
        """GEP index width in bits for an address space."""
        return self._pointer_spec(addrspace)[3]

    # -- sizes --------------------------------------------------------------
    def size_in_bits(self, ty: Type) -> int:
        """Size of ``ty`` in bits (``getTypeSizeInBits``); min size for scalable vectors."""
        if isinstance(ty, IntType):
            return ty.bits
        if isinstance(ty, FloatType):
            return ty.bits
        if isinstance(ty, PointerType):
            return self._pointer_spec(ty.addrspace)[0]
        if isinstance(ty, ArrayType):
            return ty.count * self.alloc_size(ty.element) * 8
        if isinstance(ty, (StructType, NamedStructType)):
            return self.struct_layout(ty).size * 8
        if isinstance(ty, VectorType):
            return ty.count * self.size_in_bits(ty.element)
        if isinstance(ty, X86AMXType):
            return 8192
        if isinstance(ty, TargetExtType):
            raise ValueError(f"size of target extension type {ty} is unknown")
        raise ValueError(f"type {ty} has no size")

    def store_size(self, ty: Type) -> int:
        """Bytes written by a store of ``ty`` (``getTypeStoreSize``)."""
        return (self.size_in_bits(ty) + 7) // 8

    def alloc_size(self, ty: Type) -> int:
        """Bytes between consecutive array elements of ``ty`` (``getTypeAllocSize``)."""
        return _align_to(self.store_size(ty), self.abi_alignment(ty))

    # -- alignment ----------------------------------------------------------
    def abi_alignment(self, ty: Type) -> int:
        """ABI alignment in bytes."""
        return self._alignment(ty, abi=True)

    def pref_alignment(self, ty: Type) -> int:
        """Preferred alignment in bytes."""
        return self._alignment(ty, abi=False)

    def _alignment(self, ty: Type, abi: bool) -> int:
        pick = 0 if abi else 1
        if isinstance(ty, IntType):
            widths = sorted(self.int_specs)
            pos = bisect.bisect_left(widths, ty.bits)
            if pos == len(widths):
                pos -= 1
            return self.int_specs[widths[pos]][pick]
        if isinstance(ty, PointerType):
            spec = self._pointer_spec(ty.addrspace)
            return spec[1] if abi else spec[2]
        if isinstance(ty, FloatType):
            if ty.bits in self.float_specs:
                return self.float_specs[ty.bits][pick]
            return _pow2_ceil(self.store_size(ty))
        if isinstance(ty, VectorType):
            bits = self.size_in_bits(ty)
            if bits in self.vector_specs:
                return self.vector_specs[bits][pick]
            return _pow2_ceil(self.store_size(ty))
        if isinstance(ty, ArrayType):
            return self._alignment(ty.element, abi)
        if isinstance(ty, (StructType, NamedStructType)):
            if ty.packed and abi:
                return 1
            base = self.aggregate_align[pick]
            return max(base, self.struct_layout(ty).alignment)
        if isinstance(ty, X86AMXType):
            return 64
        raise ValueError(f"type {ty} has no alignment")

    # -- structs ------------------------------------------------------------
    def struct_layout(self, ty: StructType | NamedStructType) -> StructLayout:
        """Field offsets, size and alignment of a struct type."""
        key = (ty, ty.body)
        cached = self._struct_cache.get(key)
        if cached is not None:
            return cached
        if isinstance(ty, NamedStructType) and ty.body is None:
            raise ValueError(f"opaque struct {ty} has no layout")
        offsets = []
        offset = 0
        struct_align = 1
        for elem in ty.elements:
            align = 1 if ty.packed else self.abi_alignment(elem)
            offset = _align_to(offset, align)
            struct_align = max(struct_align, align)
            offsets.append(offset)
            offset += self.alloc_size(elem)
        size = _align_to(offset, struct_align)
        layout = StructLayout(offsets=offsets, size=size, alignment=struct_align)
        self._struct_cache[key] = layout
        return layout

    def field_offset(self, ty: StructType | NamedStructType, index: int) -> int:
        """Byte offset of field ``index`` of a struct."""
        return self.struct_layout(ty).offsets[index]

    def scalar_leaves(self, ty: Type, base: int = 0) -> list[tuple[int, Type]]:
        """All scalar (non-aggregate) components of ``ty`` with their byte offsets.

        Vectors are expanded into their elements.  Useful for deciding which
        bytes of a memory object hold floating-point data.
        """
        out: list[tuple[int, Type]] = []
        if isinstance(ty, ArrayType):
            step = self.alloc_size(ty.element)
            for i in range(ty.count):
                out.extend(self.scalar_leaves(ty.element, base + i * step))
        elif isinstance(ty, (StructType, NamedStructType)):
            layout = self.struct_layout(ty)
            for off, elem in zip(layout.offsets, ty.elements):
                out.extend(self.scalar_leaves(elem, base + off))
        elif isinstance(ty, VectorType) and not ty.scalable and self.size_in_bits(ty.element) % 8 == 0:
            step = self.size_in_bits(ty.element) // 8
            for i in range(ty.count):
                out.append((base + i * step, ty.element))
        else:
            out.append((base, ty))
        return out
