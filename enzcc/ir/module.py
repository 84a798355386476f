"""Modules and global variables."""

from __future__ import annotations

import re

from typing import Iterator

from . import types as T
from .datalayout import DataLayout
from .errors import IRError
from .function import Function
from .values import GlobalRef, Value

__all__ = ["Module", "GlobalVariable"]


SYMBOL_REF = re.compile(r'@(?:"([^"]+)"|([-\w.$]+))')
"""``@name`` or ``@"quoted name"`` in LLVM text; group 1 or 2 is the name."""


class GlobalVariable:
    """A module-level variable, alias or ifunc.

    The definition line is kept verbatim in :attr:`text`; a few header facts
    are extracted for convenience.
    """

    def __init__(self, name: str, text: str, kind: str = "global",
                 value_type: T.Type | None = None, is_constant: bool = False,
                 addrspace: int = 0, linkage: str | None = None):
        self.name: str = name
        """Symbol name without ``@``."""
        self.text: str = text
        """Full definition line, e.g. ``@x = global i32 0, align 4``."""
        self.kind: str = kind
        """``global`` (variables and constants), ``alias`` or ``ifunc``."""
        self.value_type: T.Type | None = value_type
        """Type of the stored value (or aliasee type)."""
        self.is_constant: bool = is_constant
        """True for ``constant`` globals."""
        self.addrspace: int = addrspace
        """Address space of the symbol."""
        self.linkage: str | None = linkage
        """Linkage keyword or None."""

    @property
    def is_declaration(self) -> bool:
        """True for external declarations without initializer."""
        return self.linkage in ("external", "extern_weak") and self.kind == "global"

    def initializer_symbols(self) -> list[str]:
        """The ``@symbols`` named in the initializer, in order, each once (empty for a declaration)."""
        if "=" not in self.text:
            return []
        init = self.text.split("=", 1)[1]
        return list(dict.fromkeys(m.group(1) or m.group(2) for m in SYMBOL_REF.finditer(init)))

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<GlobalVariable {self.text[:60]}>"


class Module:
    """An LLVM module.

    Everything that is not a function body is kept as (mostly verbatim)
    text: globals, attribute groups, metadata, comdats.  Named struct types
    are parsed into :attr:`named_types`.  Function bodies are parsed lazily
    (see :class:`Function`).  ``str(module)`` prints LLVM 22 text.
    """

    def __init__(self, source_filename: str | None = None, datalayout: str | None = None,
                 triple: str | None = None):
        self.source_filename: str | None = source_filename
        """``source_filename`` value (unescaped) or None."""
        self.datalayout: str | None = datalayout
        """``target datalayout`` string or None."""
        self.triple: str | None = triple
        """``target triple`` string or None."""
        self.module_asm: list[str] = []
        """``module asm "..."`` lines, verbatim."""
        self.named_types: dict[str, T.NamedStructType] = {}
        """Identified struct types by name (definition order)."""
        self.comdats: list[str] = []
        """``$name = comdat any`` lines, verbatim."""
        self.globals: dict[str, GlobalVariable] = {}
        """Global variables, aliases and ifuncs by name (definition order)."""
        self.functions: dict[str, Function] = {}
        """Functions by name (definition order)."""
        self.attribute_groups: dict[int, str] = {}
        """``attributes #N = { text }``: N -> text between the braces."""
        self.named_metadata: list[str] = []
        """Named metadata lines (``!llvm.ident = !{!4}``), verbatim."""
        self.metadata: dict[int, str] = {}
        """Numbered metadata ``!N = text``: N -> text after ``=``."""
        self.other: list[str] = []
        """Any other top-level lines (``uselistorder`` ...), verbatim."""
        self._global_refs: dict[str, GlobalRef] = {}
        self._dl_cache: DataLayout | None = None

    # -- construction ---------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> "Module":
        """Parse LLVM textual IR (function bodies stay lazy)."""
        from .parser import parse_module
        return parse_module(text)

    @property
    def targets_gpu(self) -> bool:
        """Whether the module's code runs on a GPU (an ``nvptx``, ``amdgcn`` or ``spir`` triple)."""
        return (self.triple or "").startswith(("nvptx", "amdgcn", "spir"))

    # -- functions ------------------------------------------------------------
    def get_function(self, name: str) -> Function:
        """Function ``@name`` (KeyError if absent). Its body stays lazy until used."""
        try:
            return self.functions[name]
        except KeyError:
            raise KeyError(f"no function @{name} in module") from None

    def parse_function(self, name: str) -> Function:
        """Function ``@name`` with its body parsed."""
        return self.get_function(name).parse()

    def parse_all(self) -> "Module":
        """Parse every function body; returns self."""
        for fn in list(self.functions.values()):
            fn.parse()
        return self

    def definitions(self) -> Iterator[Function]:
        """Functions that have a body."""
        return (f for f in list(self.functions.values()) if not f.is_declaration)

    def add_function(self, fn: Function) -> Function:
        """Add a new function (definition or declaration) to the module."""
        if fn.name in self.functions:
            raise IRError(f"function @{fn.name} already exists")
        if fn.name in self.globals:
            raise IRError(f"symbol @{fn.name} already used by a global")
        fn.module = self
        self.functions[fn.name] = fn
        return fn

    def remove_function(self, name: str) -> Function:
        """Remove ``@name`` from the module (IRError if parsed code still refers to it)."""
        fn = self.get_function(name)
        ref = self._global_refs.get(name)
        if ref is not None and ref.has_uses():
            raise IRError(f"@{name} is still used by {ref.num_uses} instruction operand(s)")
        _drop_references(fn)
        del self.functions[name]
        fn.module = None
        return fn

    def get_or_insert_function(self, name: str, function_type: T.FunctionType) -> Function:
        """Existing function ``@name`` or a new declaration with the given type."""
        fn = self.functions.get(name)
        if fn is not None:
            if fn.function_type != function_type:
                raise IRError(f"@{name} exists with type {fn.function_type}, "
                              f"requested {function_type}")
            return fn
        return self.add_function(Function(name, function_type))

    def declare_intrinsic(self, base: str, overload_types=(), function_type=None) -> Function:
        """Declaration of an intrinsic such as ``llvm.sin`` with ``[f64]`` (-> ``llvm.sin.f64``)."""
        from .intrinsics import declare_intrinsic
        return declare_intrinsic(self, base, overload_types, function_type)

    def unique_function_name(self, base: str) -> str:
        """``base`` or ``base.N`` so that the name is unused."""
        name, n = base, 0
        while name in self.functions or name in self.globals:
            n += 1
            name = f"{base}.{n}"
        return name

    # -- globals --------------------------------------------------------------
    def global_ref(self, name: str, type_hint: T.Type | None = None) -> GlobalRef:
        """The unique :class:`GlobalRef` for symbol ``@name`` in this module.

        Its type is ``ptr`` in the symbol's address space; ``type_hint`` (the
        type written at a use) is used when the symbol is not defined yet.
        """
        ref = self._global_refs.get(name)
        if ref is None:
            fn = self.functions.get(name)
            gv = self.globals.get(name)
            if fn is not None:
                ty = T.PointerType(fn.addrspace or 0)
            elif gv is not None:
                ty = T.PointerType(gv.addrspace)
            elif isinstance(type_hint, T.PointerType):
                ty = type_hint
            else:
                ty = T.ptr
            ref = GlobalRef(name, ty, module=self)
            self._global_refs[name] = ref
        return ref

    def add_global(self, name: str, value_type: T.Type, initializer: Value | None = None,
                   constant: bool = False, linkage: str | None = "internal",
                   align: int | None = None, addrspace: int = 0,
                   extra: str = "") -> GlobalVariable:
        """Define a new global variable.

        With ``initializer=None`` and ``linkage="external"`` this is a
        declaration; otherwise a missing initializer means ``zeroinitializer``.
        """
        from .printer import format_constant
        if name in self.globals or name in self.functions:
            raise IRError(f"symbol @{name} already exists")
        parts = [f"@{T.quote_name(name)} ="]
        if linkage:
            parts.append(linkage)
        if addrspace:
            parts.append(f"addrspace({addrspace})")
        parts.append("constant" if constant else "global")
        parts.append(str(value_type))
        if initializer is not None:
            parts.append(format_constant(initializer))
        elif linkage not in ("external", "extern_weak"):
            parts.append("zeroinitializer")
        text = " ".join(parts)
        if align is not None:
            text += f", align {align}"
        if extra:
            text += extra
        gv = GlobalVariable(name, text, "global", value_type, constant, addrspace, linkage)
        self.globals[name] = gv
        return gv

    # -- types ----------------------------------------------------------------
    def get_named_type(self, name: str) -> T.NamedStructType:
        """Identified struct ``%name`` (KeyError if absent)."""
        return self.named_types[name]

    def add_named_type(self, name: str, body: T.StructType | None) -> T.NamedStructType:
        """Define a new identified struct type."""
        if name in self.named_types:
            raise IRError(f"type %{name} already exists")
        ty = T.NamedStructType(name, body)
        self.named_types[name] = ty
        return ty

    @property
    def data_layout(self) -> DataLayout:
        """Parsed :class:`DataLayout` of :attr:`datalayout`."""
        if self._dl_cache is None or self._dl_cache.text != (self.datalayout or ""):
            self._dl_cache = DataLayout.parse(self.datalayout)
        return self._dl_cache

    # -- attributes and metadata ------------------------------------------------
    def add_attribute_group(self, text: str) -> str:
        """Add ``attributes #N = { text }`` (reusing an identical group); returns ``#N``."""
        for k, v in self.attribute_groups.items():
            if v == text:
                return f"#{k}"
        n = max(self.attribute_groups, default=-1) + 1
        self.attribute_groups[n] = text
        return f"#{n}"

    def add_metadata(self, text: str) -> str:
        """Add numbered metadata ``!N = text``; returns ``!N``."""
        n = max(self.metadata, default=-1) + 1
        self.metadata[n] = text
        return f"!{n}"

    def verify(self) -> None:
        """Print the module, parse it with llvmlite and run LLVM's verifier.

        Raises :class:`IRError` with LLVM's message on failure.  (LLVM aborts
        the process instead of raising for some broken modules with debug
        info; run in a subprocess if that matters.)
        """
        import llvmlite.binding as llvm
        try:
            parsed = llvm.parse_assembly(self.to_text(), llvm.create_context())
            parsed.verify()
        except RuntimeError as exc:
            raise IRError(str(exc)) from None

    # -- printing -------------------------------------------------------------
    def to_text(self) -> str:
        """LLVM textual IR of the whole module."""
        from .printer import format_module
        return format_module(self)

    __str__ = to_text

    def __repr__(self) -> str:
        return f"<Module {self.source_filename!r}: {len(self.functions)} functions>"


def _drop_references(fn: Function) -> None:
    """Unregister every instruction of ``fn`` from its operands' use lists, each list filtered once: removing
    the uses one at a time (``Instruction.drop_all_references``) searched a value's whole list per use, which
    for a large function whose values have thousands of uses (a derivative given up for a refused construct)
    took a quarter of the engine's time. The lists keep their order."""
    dropped: dict[int, tuple] = {}
    for block in list(fn._blocks):
        for inst in block.instructions:
            for v, use in zip(inst._operands, inst._op_uses):
                entry = dropped.get(id(v))
                if entry is None:
                    dropped[id(v)] = (v, {id(use)})
                else:
                    entry[1].add(id(use))
            inst._operands = []
            inst._op_uses = []
    for v, ids in dropped.values():
        v._uses = [u for u in v._uses if id(u) not in ids]
