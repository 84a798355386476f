"""Basic blocks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from . import types as T
from .errors import IRError
from .instructions import Br, Instruction, Phi
from .values import Value

if TYPE_CHECKING:  # pragma: no cover
    from .function import Function

__all__ = ["BasicBlock"]


class BasicBlock(Value):
    """A basic block: a label plus a list of instructions ending in a terminator.

    Blocks are values of type ``label``; terminators reference their
    successors as operands, so :attr:`predecessors` is derived from the use
    list.  Phi incoming blocks are not uses (as in LLVM).
    """

    def __init__(self, name: str | None = None, parent: "Function | None" = None):
        super().__init__(T.label, name)
        self.parent: Function | None = parent
        """The function containing the block (None when detached)."""
        self.instructions: list[Instruction] = []
        """Instructions in order; the last one should be a terminator."""

    # -- contents -------------------------------------------------------------
    def __iter__(self) -> Iterator[Instruction]:
        return iter(list(self.instructions))

    def __len__(self) -> int:
        return len(self.instructions)

    def index_of(self, inst: Instruction) -> int:
        """Position of ``inst`` in this block.

        Each instruction remembers where it was last found (``_index_hint``); an insertion or a
        removal right before it moves it by one place, so the hint and its neighbours are looked at first and
        only a stale hint costs a walk over the block, which renews every instruction's hint (a builder
        inserting before an anchor, or an erase, in blocks of tens of thousands of instructions made this search
        quadratic)."""
        if inst.parent is self:
            insts = self.instructions
            hint = inst._index_hint
            for i in (hint, hint + 1, hint - 1):
                if 0 <= i < len(insts) and insts[i] is inst:
                    inst._index_hint = i
                    return i
            # a stale hint: every instruction of the block learns where it is now, so that a walk over the block
            # that replaces instructions (insert before one, erase it: the others keep their places) finds each
            # in one look instead of searching the block from its start each time
            found = None
            for i, other in enumerate(insts):
                other._index_hint = i
                if other is inst:
                    found = i
            if found is not None:
                return found
        raise IRError("instruction not in this block")

    def insert(self, index: int, inst: Instruction) -> Instruction:
        """Insert a detached instruction at position ``index``."""
        if inst.parent is not None:
            raise IRError("instruction already belongs to a block")
        self.instructions.insert(index, inst)
        inst.parent = self
        return inst

    def append(self, inst: Instruction) -> Instruction:
        """Append a detached instruction at the end of the block."""
        return self.insert(len(self.instructions), inst)

    def _remove(self, inst: Instruction) -> None:
        del self.instructions[self.index_of(inst)]
        inst.parent = None

    @property
    def terminator(self) -> Instruction | None:
        """The terminator (None if the block is not terminated yet)."""
        if self.instructions and self.instructions[-1].is_terminator:
            return self.instructions[-1]
        return None

    def phis(self) -> list[Phi]:
        """The leading phi nodes."""
        out = []
        for inst in self.instructions:
            if not isinstance(inst, Phi):
                break
            out.append(inst)
        return out

    @property
    def first_non_phi(self) -> Instruction | None:
        """First instruction that is not a phi (None if none)."""
        for inst in self.instructions:
            if not isinstance(inst, Phi):
                return inst
        return None

    # -- CFG ------------------------------------------------------------------
    @property
    def successors(self) -> list["BasicBlock"]:
        """Successor blocks in terminator order (may repeat)."""
        term = self.terminator
        return term.successors if term is not None else []

    @property
    def predecessors(self) -> list["BasicBlock"]:
        """Distinct predecessor blocks (blocks whose terminator targets this one)."""
        out: dict[int, BasicBlock] = {}
        for use in reversed(self._uses):  # most recent first, like LLVM's use lists
            user = use.user
            blk = user.parent
            if user.is_terminator and blk is not None and blk.parent is self.parent:
                out.setdefault(id(blk), blk)
        return list(out.values())

    def replace_successor_phi_uses(self, new: "BasicBlock") -> None:
        """In every successor's phis, rename incoming block ``self`` to ``new``."""
        for succ in dict.fromkeys(self.successors):
            for phi in succ.phis():
                phi.replace_incoming_block(self, new)

    # -- structure ------------------------------------------------------------
    @property
    def module(self):
        """The module containing the block."""
        return self.parent.module if self.parent is not None else None

    def remove_from_parent(self) -> "BasicBlock":
        """Detach from the function, keeping the instructions."""
        if self.parent is not None:
            blocks = self.parent.blocks
            for i, b in enumerate(blocks):
                if b is self:
                    del blocks[i]
                    break
            self.parent = None
        return self

    def erase(self) -> None:
        """Delete the block and its instructions.

        Raises :class:`IRError` if another block still branches here or if a
        value defined here is used outside the block.  Incoming entries for
        this block are removed from the phis of its successors.
        """
        for use in self._uses:
            if use.user.parent is not self:
                raise IRError("cannot erase block: it is still a branch target")
        for inst in self.instructions:
            for use in inst.uses:
                if use.user.parent is not self and not (
                        isinstance(use.user, Phi) and use.user.incoming_blocks[use.index] is self):
                    raise IRError(f"cannot erase block: {inst.opcode} result used outside it")
        for succ in dict.fromkeys(self.successors):
            if succ is self:
                continue
            for phi in succ.phis():
                for i in reversed(range(len(phi.incoming_blocks))):
                    if phi.incoming_blocks[i] is self:
                        phi.remove_incoming(i)
        for inst in reversed(list(self.instructions)):
            for rec in inst.debug_records:
                rec.detach()
            inst.debug_records = []
            for rec in list(inst._debug_users):
                from .values import ConstantPoison
                rec.replace_value(inst, ConstantPoison(inst.type))
            inst.drop_all_references()
            inst.parent = None
        self.instructions = []
        self.remove_from_parent()

    def move_after(self, other: "BasicBlock") -> None:
        """Place this block right after ``other`` in ``other``'s function."""
        fn = other.parent
        self.remove_from_parent()
        idx = fn.blocks.index(other)  # (blocks compare by identity)
        fn.blocks.insert(idx + 1, self)
        self.parent = fn

    def move_before(self, other: "BasicBlock") -> None:
        """Place this block right before ``other`` in ``other``'s function."""
        fn = other.parent
        self.remove_from_parent()
        idx = fn.blocks.index(other)  # (blocks compare by identity)
        fn.blocks.insert(idx, self)
        self.parent = fn

    def split_before(self, inst: Instruction, name: str | None = None) -> "BasicBlock":
        """Split the block before ``inst``.

        ``inst`` and everything after it move into a new block placed right
        after this one; this block ends with ``br label %new``.  Phis in the
        old successors are updated to name the new block.
        """
        if inst.parent is not self:
            raise IRError("split point is not in this block")
        if isinstance(inst, Phi):
            raise IRError("cannot split before a phi")
        idx = self.index_of(inst)
        new = BasicBlock(name)
        new.move_after(self)
        self.replace_successor_phi_uses(new)
        moved = self.instructions[idx:]
        del self.instructions[idx:]
        for x in moved:
            x.parent = new
        new.instructions = moved
        self.append(Br(new))
        return new

    def split_edge(self, succ: "BasicBlock", name: str | None = None) -> "BasicBlock":
        """A new block on the edge from this block to ``succ`` (placed right after this one, ending in
        ``br label %succ``): every branch of this block to ``succ`` goes to it, and ``succ``'s phis name it, once
        (a switch with several cases to ``succ`` gave one incoming entry per case; the new block is one edge)."""
        new = BasicBlock(name)
        new.move_after(self)
        new.append(Br(succ))
        term = self.terminator
        for i, op in enumerate(term.operands):
            if op is succ:
                term.set_operand(i, new)
        for phi in succ.phis():
            phi.replace_incoming_block(self, new)
            while phi.incoming_blocks.count(new) > 1:
                phi.remove_incoming(len(phi.incoming_blocks) - 1 - phi.incoming_blocks[::-1].index(new))
        return new

    def __str__(self) -> str:
        from .printer import format_block
        return format_block(self)
