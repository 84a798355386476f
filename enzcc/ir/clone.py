"""Copying basic blocks between (or within) functions with a value map."""

from __future__ import annotations

from .block import BasicBlock
from .instructions import DebugRecord, Phi

__all__ = ["clone_blocks"]


def clone_blocks(src_blocks: list[BasicBlock], dst_fn, vmap: dict, after: BasicBlock | None = None,
                 suffix: str = "", strip_debug: bool = False) -> list[BasicBlock]:
    """Copy ``src_blocks`` into ``dst_fn`` and return the copies in order.

    ``vmap`` maps source values to their replacements and must already map the source arguments (to the
    destination's arguments, or to the actual values when inlining); it is extended with every copied block
    and instruction. Operands not in ``vmap`` (constants, globals, values outside the copied blocks) are kept.
    The copies go at the end of ``dst_fn``, or right after ``after``. Names get ``suffix``. With
    ``strip_debug`` the copies carry no debug records and no ``!dbg``/``!DIAssignID`` attachments.
    """
    new_blocks: list[BasicBlock] = []
    for block in src_blocks:
        nb = BasicBlock((block.name + suffix) if block.name else None)
        nb.parent = dst_fn
        vmap[block] = nb
        new_blocks.append(nb)
    if after is None:
        dst_fn.blocks.extend(new_blocks)
    else:  # (one search for the position, not one per block)
        idx = dst_fn.blocks.index(after)  # (blocks compare by identity)
        dst_fn.blocks[idx + 1:idx + 1] = new_blocks
    for block, nb in zip(src_blocks, new_blocks):
        for inst in block.instructions:
            c = inst.clone()
            if inst.name:
                c.name = inst.name + suffix
            if strip_debug:
                c.metadata = [(k, v) for k, v in c.metadata if k not in ("dbg", "DIAssignID")]
            vmap[inst] = c
            nb.append(c)
    for block in src_blocks:
        for inst in block.instructions:
            c = vmap[inst]
            for i, op in enumerate(c.operands):
                mapped = vmap.get(op)
                if mapped is not None and mapped is not op:
                    c.set_operand(i, mapped)
            if isinstance(c, Phi):
                c.incoming_blocks = [vmap.get(b, b) for b in c.incoming_blocks]
            if not strip_debug:
                for rec in inst.debug_records:
                    args = [[vmap.get(v, v) for v in a] if isinstance(a, list)
                            else vmap.get(a, a) if not isinstance(a, str) else a
                            for a in rec.args]
                    c.add_debug_record(DebugRecord(rec.kind, args))
    return new_blocks
