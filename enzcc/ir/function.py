"""Functions (definitions and declarations)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from . import types as T
from .block import BasicBlock
from .errors import IRError
from .values import Argument, GlobalRef

if TYPE_CHECKING:  # pragma: no cover
    from .instructions import Instruction
    from .module import Module

__all__ = ["Function"]


class Function:
    """A function definition or declaration.

    The header (signature, linkage, attributes) is always available.  The
    body of a parsed module is kept as text until :attr:`blocks` (or
    :attr:`body`) is first accessed; an unparsed function prints its body
    verbatim.  A function with no blocks is a declaration.

    Functions are not values: use :attr:`ref` (a :class:`GlobalRef`) to call
    or take the address of one.
    """

    def __init__(self, name: str, function_type: T.FunctionType,
                 arg_names: Sequence[str | None] | None = None, module: "Module | None" = None):
        self.name: str = name
        """Symbol name without ``@``."""
        self.module: Module | None = module
        """The owning module (set by :meth:`Module.add_function`)."""
        self.function_type: T.FunctionType = function_type
        """The signature."""
        names = list(arg_names) if arg_names is not None else [None] * len(function_type.params)
        self.args: list[Argument] = [
            Argument(ty, nm, parent=self, index=i)
            for i, (ty, nm) in enumerate(zip(function_type.params, names))
        ]
        """Formal parameters."""
        self.linkage: str | None = None
        """Linkage keyword (``internal``, ``linkonce_odr`` ...) or None (external)."""
        self.preemption: str | None = None
        """``dso_local`` / ``dso_preemptable`` or None."""
        self.visibility: str | None = None
        """``hidden`` / ``protected`` / ``default`` or None."""
        self.dll_storage: str | None = None
        """``dllimport`` / ``dllexport`` or None."""
        self.cconv: str | None = None
        """Calling convention keyword or None."""
        self.ret_attrs: list[str] = []
        """Return attributes as text."""
        self.unnamed_addr: str | None = None
        """``unnamed_addr`` / ``local_unnamed_addr`` or None."""
        self.addrspace: int | None = None
        """Explicit address space, if printed."""
        self.fn_attrs: list[str] = []
        """Function attributes (``#0``, ``nounwind``, ``"key"="value"``)."""
        self.section: str | None = None
        """Section name (unescaped) or None."""
        self.partition: str | None = None
        """Partition name or None."""
        self.comdat: str | None = None
        """Comdat spelling (``comdat`` or ``comdat($name)``) or None."""
        self.align: int | None = None
        """Function alignment or None."""
        self.gc: str | None = None
        """GC strategy name or None."""
        self.prefix: str | None = None
        """``prefix`` constant as text (``i32 123``) or None."""
        self.prologue: str | None = None
        """``prologue`` constant as text or None."""
        self.personality: str | None = None
        """Personality as text (``ptr @__gxx_personality_v0``) or None."""
        self.metadata: list[tuple[str, str]] = []
        """Function metadata attachments, e.g. ``[("dbg", "!28")]``."""
        self._blocks: list[BasicBlock] = []
        self._body_text: str | None = None
        self._body_line: int = 0

    # -- signature ------------------------------------------------------------
    @property
    def return_type(self) -> T.Type:
        """Return type."""
        return self.function_type.ret

    @property
    def is_varargs(self) -> bool:
        """True if the function takes ``...``."""
        return self.function_type.varargs

    @property
    def ref(self) -> GlobalRef:
        """The module's :class:`GlobalRef` for ``@name``."""
        if self.module is not None:
            return self.module.global_ref(self.name)
        return GlobalRef(self.name)

    @property
    def is_intrinsic(self) -> bool:
        """True for ``llvm.*`` functions."""
        return self.name.startswith("llvm.")

    # -- body -----------------------------------------------------------------
    @property
    def is_parsed(self) -> bool:
        """False while the body is still kept as unparsed text."""
        return self._body_text is None

    @property
    def is_declaration(self) -> bool:
        """True if the function has no body."""
        return self._body_text is None and not self._blocks

    @property
    def blocks(self) -> list[BasicBlock]:
        """Basic blocks (parses the body on first access)."""
        if self._body_text is not None:
            from .parser import parse_function_body
            parse_function_body(self)
        return self._blocks

    @property
    def body(self) -> list[BasicBlock]:
        """Alias of :attr:`blocks` (forces parsing)."""
        return self.blocks

    def parse(self) -> "Function":
        """Parse the body now (no-op if already parsed); returns self."""
        _ = self.blocks
        return self

    @property
    def entry_block(self) -> BasicBlock:
        """The first block."""
        blocks = self.blocks
        if not blocks:
            raise IRError(f"@{self.name} is a declaration")
        return blocks[0]

    def append_block(self, name: str | None = None) -> BasicBlock:
        """Create a new block at the end of the function."""
        block = BasicBlock(name, parent=self)
        self.blocks.append(block)
        return block

    def insert_block(self, index: int, block: BasicBlock) -> BasicBlock:
        """Insert a detached block at position ``index``."""
        if block.parent is not None:
            raise IRError("block already belongs to a function")
        self.blocks.insert(index, block)
        block.parent = self
        return block

    def instructions(self) -> Iterator["Instruction"]:
        """Iterate over all instructions in block order."""
        for block in list(self.blocks):
            yield from list(block.instructions)

    def get_block(self, name: str) -> BasicBlock:
        """Block with the given name."""
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(name)

    def clone(self, name: str, keep_metadata: bool = False,
              strip_debug: bool = False) -> tuple["Function", dict]:
        """Deep copy of this function under a new name (not added to any module).

        Returns ``(new_function, value_map)`` where ``value_map`` maps every
        argument, block and instruction of ``self`` to its copy.  Function
        metadata (e.g. ``!dbg``, whose DISubprogram may not be shared) is
        dropped unless ``keep_metadata``.  Instruction metadata is kept, so
        ``!dbg`` locations still point into the original subprogram; with
        ``strip_debug`` the copy gets no debug records, ``!dbg`` or
        ``!DIAssignID`` attachments.
        """
        new = Function(name, self.function_type, [a.name for a in self.args])
        for attr in ("linkage", "preemption", "visibility", "dll_storage", "cconv",
                     "unnamed_addr", "addrspace", "section", "partition", "align", "gc",
                     "prefix", "prologue", "personality"):
            setattr(new, attr, getattr(self, attr))
        new.ret_attrs = list(self.ret_attrs)
        new.fn_attrs = list(self.fn_attrs)
        new.metadata = list(self.metadata) if keep_metadata else []
        vmap: dict = {}
        for old_arg, new_arg in zip(self.args, new.args):
            new_arg.attrs = list(old_arg.attrs)
            vmap[old_arg] = new_arg
        from .clone import clone_blocks

        clone_blocks(self.blocks, new, vmap, strip_debug=strip_debug)
        return new, vmap

    def __str__(self) -> str:
        from .printer import format_function
        return format_function(self)

    def __repr__(self) -> str:
        kind = "declare" if self.is_declaration else "define"
        return f"<Function {kind} {self.function_type.ret} @{self.name}>"
