"""Copying function bodies (with a value map), the basis of inlining and of derivative synthesis."""

from __future__ import annotations

from enzcc.ir.block import BasicBlock
from enzcc.ir.instructions import Phi
from enzcc.ir.values import Value


class ValueMap:
    """Maps values of a source function to values of a copy (by identity: constants may compare equal)."""

    def __init__(self):
        self._map: dict[int, Value] = {}
        self._keep: list[Value] = []  # keeps ids stable

    def __setitem__(self, old: Value, new: Value) -> None:
        self._map[id(old)] = new
        self._keep.append(old)

    def __getitem__(self, old: Value) -> Value:
        return self._map[id(old)]

    def get(self, old: Value, default=None):
        return self._map.get(id(old), default)

    def __contains__(self, old: Value) -> bool:
        return id(old) in self._map

    def lookup(self, v: Value) -> Value:
        """``v``'s copy, or ``v`` itself (constants, globals, values outside the copied body)."""
        return self._map.get(id(v), v)


def clone_blocks(src_blocks: list[BasicBlock], dst_fn, vmap: ValueMap, after: BasicBlock | None = None,
                 suffix: str = "") -> list[BasicBlock]:
    """Copy ``src_blocks`` into ``dst_fn`` (placed after ``after``, or at the end), remapping operands through
    ``vmap`` (which should already map the source arguments). Returns the new blocks in order."""
    new_blocks: list[BasicBlock] = []
    anchor = after
    for b in src_blocks:
        nb = BasicBlock((b.name + suffix) if b.name else None)
        if anchor is None:
            dst_fn.blocks.append(nb)
            nb.parent = dst_fn
        else:
            nb.parent = None
            nb.move_after(anchor)
        anchor = nb
        vmap[b] = nb
        new_blocks.append(nb)
    for b, nb in zip(src_blocks, new_blocks):
        for inst in b.instructions:
            c = inst.clone()
            if inst.name:
                c.name = inst.name + suffix
            vmap[inst] = c
            nb.append(c)
    for b in src_blocks:
        for inst in b.instructions:
            c = vmap[inst]
            for i, op in enumerate(c.operands):
                new = vmap.lookup(op)
                if new is not op:
                    c.set_operand(i, new)
            if isinstance(c, Phi):
                c.incoming_blocks = [vmap.lookup(bb) for bb in c.incoming_blocks]
    return new_blocks
