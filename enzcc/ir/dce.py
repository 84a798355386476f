"""Dead code elimination: instructions whose results are unused and that do nothing else."""

from __future__ import annotations

from .instructions import (BinaryOp, Cast, Cmp, ExtractElement, ExtractValue, Freeze, GetElementPtr,
                           InsertElement, InsertValue, Instruction, Load, Phi, Select, ShuffleVector, UnaryOp)

__all__ = ["remove_dead_instructions"]

#: instructions that only compute their result (a non-volatile, non-atomic load only reads)
_PURE = (BinaryOp, UnaryOp, Cast, Cmp, Select, Freeze, Phi, GetElementPtr, ExtractValue, InsertValue,
         ExtractElement, InsertElement, ShuffleVector)


def _removable(inst: Instruction) -> bool:
    if isinstance(inst, Load):
        return not inst.volatile and inst.ordering is None
    return isinstance(inst, _PURE)


def remove_dead_instructions(fn) -> int:
    """Erase the instructions of ``fn`` whose results nothing uses and that have no other effect, and those
    that become so. Returns how many were erased. (Calls stay: whether one has an effect is not known here.)"""
    work = [i for i in fn.instructions() if not i.uses and _removable(i)]
    erased = 0
    while work:
        inst = work.pop()
        if inst.parent is None or inst.uses or not _removable(inst):
            continue
        operands = [op for op in inst.operands if isinstance(op, Instruction)]
        inst.erase()
        erased += 1
        work.extend(op for op in operands if not op.uses)
    return erased
