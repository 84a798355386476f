"""Adjoint slots kept in SSA values when they live in one block.

Reverse mode keeps each adjoint in a stack slot (zeroed at entry, ``load``/``fadd``/``store`` for each
contribution, ``load`` + ``store 0`` when it is taken), which is right for any control flow. In straight-line
code nearly every slot is only touched inside one reverse block; LLVM's SROA would promote them, but it takes
time proportional to (slots x block size) there, which makes large generated functions compile in quadratic
time. This pass promotes such slots itself, in one walk per block.

A slot qualifies when, apart from its zeroing store in the entry block, it is only loaded from and stored to,
all in one block other than the entry block, and the last of those accesses stores zero (it was taken): the
slot then holds zero whenever that block starts, so each load is the value last stored before it in the block,
or zero.
"""

from __future__ import annotations

from enzcc.ir.instructions import Alloca, BinaryOp, Load, Store
from enzcc.ir.values import ConstantFloat, ConstantZero


def _is_zero(v) -> bool:
    return isinstance(v, ConstantZero) or (isinstance(v, ConstantFloat) and v.value == 0.0)


def _fold_additions_of_zero(load: Load) -> list:
    """The slot is known to hold zero where ``load`` reads it: each ``fadd load, c`` (an adjoint's first
    contribution) becomes ``c``. LLVM keeps ``x + 0.0`` without fast-math flags (it is ``+0.0`` when ``x`` is
    ``-0.0``), so these additions would stay in the derivative; as a contribution ``-0.0`` and ``+0.0`` are the
    same adjoint. Returns the additions, now unused."""
    out = []
    for use in list(load.uses):
        add = use.user
        if isinstance(add, BinaryOp) and add.opcode == "fadd" and add.type == load.type and \
                add.operands[0] is not add.operands[1]:
            add.replace_all_uses_with(add.operands[1 - use.index])
            out.append(add)
    return out


def promote_single_block_slots(fn, slots: list[Alloca]) -> int:
    """Promote the qualifying ``slots`` of ``fn``; returns how many were promoted."""
    entry = fn.entry_block
    plans = []
    for slot in slots:
        if slot.parent is not entry:
            continue
        init, accesses, block, ok = None, [], None, True
        for use in slot.uses:
            u = use.user
            if isinstance(u, Store) and use.index == 1 and u.parent is entry and init is None and \
                    _is_zero(u.value):
                init = u
            elif (isinstance(u, Load) or (isinstance(u, Store) and use.index == 1)) and u.parent is not entry \
                    and (block is None or u.parent is block) and not getattr(u, "volatile", False):
                block = u.parent
                accesses.append(u)
            else:
                ok = False
                break
        if ok and init is not None and block is not None:
            plans.append((slot, init, block, accesses))
    if not plans:
        return 0
    positions: dict[int, dict[int, int]] = {}
    dead_insts = []
    folded: list = []
    count = 0
    for slot, init, block, accesses in plans:
        pos = positions.get(id(block))
        if pos is None:
            pos = positions[id(block)] = {id(i): k for k, i in enumerate(block.instructions)}
        accesses.sort(key=lambda i: pos[id(i)])
        last = accesses[-1]
        if not (isinstance(last, Store) and _is_zero(last.value)):
            continue
        current = None
        for inst in accesses:
            if isinstance(inst, Load):
                if current is None:
                    from enzcc.ir.builder import const_zero

                    current = const_zero(inst.type)
                if current.type != inst.type:
                    break  # a slot read as another type: leave it to LLVM
                if _is_zero(current):
                    folded += _fold_additions_of_zero(inst)
                inst.replace_all_uses_with(current)
            else:
                current = inst.value
        else:
            dead_insts += accesses + [init, slot]
            count += 1
            continue
        # (not promoted: the loads replaced before the break got the value they would have read)
    dead_insts += folded
    dead = {id(inst) for inst in dead_insts}
    touched = set()
    for inst in dead_insts:
        inst.drop_all_references()
        touched.add(id(inst.parent))
    for block in fn.blocks:
        if id(block) in touched:
            kept = []
            for inst in block.instructions:
                if id(inst) in dead:
                    inst.parent = None
                else:
                    kept.append(inst)
            block.instructions[:] = kept
    return count


__all__ = ["promote_single_block_slots"]
