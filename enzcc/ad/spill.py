"""Values carried from the forward sweep to the reverse sweep of a large function go through memory.

In combined reverse mode the reverse code reads forward values directly (SSA). In generated straight-line code
of thousands of statements that is thousands of values live across the whole function at once; the register
allocator then spends time far out of proportion to the code size (superlinear), and spills them anyway. Past
:data:`THRESHOLD` such values, each is stored once into a buffer right after it is computed and loaded where
the reverse code needs it. The accesses are volatile so that no pass turns them back into long-lived
registers; the code runs as if the allocator had spilled them, and compiles in time proportional to its size.
"""

from __future__ import annotations

import os

from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import Alloca, GetElementPtr, Instruction, Load, Phi, Store
from enzcc.ir.values import ConstantInt, ConstantPoison

#: carried values from which the function's reverse code reads them from memory (``ENZCC_SPILL_THRESHOLD``
#: overrides it, for tests and tuning)
THRESHOLD = 2000
#: accesses that share one load of the buffer's address
GROUP = 64


def spill_crossing_values(G, primal_blocks: list, once_blocks: list, exit_block) -> int:
    """Route the values of ``once_blocks`` (forward blocks outside loops: computed at most once per call) that
    the blocks of ``G`` other than ``primal_blocks`` (the reverse code) read through a heap buffer, when there
    are more than :data:`THRESHOLD`. Returns the number of values spilled."""
    primal = {id(b) for b in primal_blocks}
    once = {id(b) for b in once_blocks}
    carried: dict[int, Instruction] = {}
    sites: list[tuple] = []  # (value, user, operand index)
    for block in G.blocks:
        if id(block) in primal:
            continue
        for inst in block.instructions:
            for i, op in enumerate(inst.operands):
                if isinstance(op, Instruction) and op.parent is not None and id(op.parent) in once and \
                        not isinstance(op, Alloca) and not op.is_terminator and _storable(op.type):
                    carried[id(op)] = op
                    sites.append((op, inst, i))
    if len(carried) <= int(os.environ.get("ENZCC_SPILL_THRESHOLD", THRESHOLD)):
        return 0
    dl = G.module.data_layout
    offsets: dict[int, int] = {}
    size = 0
    for v in carried.values():
        n = dl.alloc_size(v.type)
        size += -size % min(16, max(1, n))
        offsets[id(v)] = size
        size += n
    malloc = G.module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,)))
    free = G.module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))
    entry = G.entry_block
    first = next(i for i in entry.instructions if not isinstance(i, (Phi, Alloca)))
    b = IRBuilder.before(first)
    buf = b.call(malloc, [ConstantInt(T.i64, size)])
    # the accesses take the buffer's address from a volatile slot, anew every GROUP of them: one register
    # used by every access made LLVM's two-address pass quadratic (8,000 statements: 10 s of 18 s)
    slot = b.alloca(T.ptr, in_entry=True)
    b.store(buf, slot, volatile=True)
    IRBuilder.before(exit_block.terminator).call(free, [buf])

    # new instructions are collected per anchor and each block is rebuilt once (inserting them one by one
    # would cost a search of the block each: quadratic in these long blocks)
    before: dict[int, list] = {}
    after: dict[int, list] = {}

    geps: set[int] = set()

    def address(v) -> Instruction:  # (its base is set when the blocks are rebuilt, in program order)
        gep = GetElementPtr(T.i8, ConstantPoison(T.ptr), [ConstantInt(T.i64, offsets[id(v)])], flags=["inbounds"])
        geps.add(id(gep))
        return gep

    for v in carried.values():
        gep = address(v)
        new = [gep, Store(v, gep, None, True)]
        if isinstance(v, Phi):
            before.setdefault(id(v.parent.first_non_phi), []).extend(new)
        else:
            after.setdefault(id(v), []).extend(new)
    loaded: dict[tuple[int, int], Instruction] = {}
    for v, user, i in sites:  # (in block order: the first user of a value in a block comes first)
        where = user.incoming_blocks[i] if isinstance(user, Phi) else user.parent
        key = (id(v), id(where))
        load = loaded.get(key)
        if load is None:
            gep = address(v)
            load = loaded[key] = Load(v.type, gep, None, True)
            anchor = where.terminator if isinstance(user, Phi) else user
            before.setdefault(id(anchor), []).extend([gep, load])
        user.set_operand(i, load)
    for block in G.blocks:
        if not any(id(i) in before or id(i) in after for i in block.instructions):
            continue
        rebuilt = []
        for inst in block.instructions:
            rebuilt += before.get(id(inst), ())
            rebuilt.append(inst)
            rebuilt += after.get(id(inst), ())
        with_bases, base, count = [], None, 0
        for inst in rebuilt:
            if id(inst) in geps:
                if base is None or count == GROUP:
                    base, count = Load(T.ptr, slot, None, True), 0
                    with_bases.append(base)
                inst.set_operand(0, base)
                count += 1
            with_bases.append(inst)
        rebuilt = with_bases
        for inst in rebuilt:
            inst.parent = block
        block.instructions[:] = rebuilt
    return len(carried)


def _storable(ty) -> bool:
    return isinstance(ty, (T.FloatType, T.IntType, T.PointerType, T.VectorType))


__all__ = ["THRESHOLD", "spill_crossing_values"]
