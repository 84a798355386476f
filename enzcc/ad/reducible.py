"""Irreducible control flow made reducible before a function is differentiated.

Reverse mode walks loops through their natural-loop structure (one header each). A cycle entered at more than one
block (C's ``goto`` into a loop, or what the optimizer makes of an earlier round's derivative in nested AD: jump
threading through a loop) has no header. As LLVM's FixIrreducible pass does, such a cycle gets one: a dispatch
block that every edge into one of its entries now goes through, with a phi saying which entry the edge was for
and a ``switch`` on it to that entry. The entries' phis move into the dispatch block (their incoming values for
the other entries' edges are poison, never used). No block is duplicated; the cycle becomes a loop whose header is
the dispatch block, and nested cycles inside it are fixed in turn.
"""

from __future__ import annotations

from enzcc.ir import types as T
from enzcc.ir.block import BasicBlock
from enzcc.ir.builder import IRBuilder
from enzcc.ir.cfg import reverse_post_order
from enzcc.ir.instructions import Phi
from enzcc.ir.values import ConstantInt, ConstantPoison

_MAX_ROUNDS = 256


def make_reducible(fn) -> int:
    """Give every cycle of ``fn`` with several entries a dispatch block; returns how many were added."""
    added = 0
    for _ in range(_MAX_ROUNDS):
        cycle = _irreducible_cycle(fn)
        if cycle is None:
            return added
        _dispatch(fn, *cycle)
        added += 1
    return added  # (still irreducible after that many: the caller's check refuses the function)


def _irreducible_cycle(fn):
    """A cycle with several entries, as (its blocks, its entries in reverse post-order), or None. Cycles are the
    strongly connected components of the blocks, then of each component without the edges into its header, and
    so on inwards."""
    order = reverse_post_order(fn)
    rank = {id(b): i for i, b in enumerate(order)}
    work = [(order, set())]  # (blocks, edges (from, to) left out: the edges into enclosing headers)
    while work:
        blocks, cut = work.pop()
        inside = {id(b) for b in blocks}
        for scc in _components(blocks, inside, cut):
            members = {id(b) for b in scc}
            if len(scc) == 1:
                continue  # (a block alone, looping on itself or not, has one entry)
            entries = [b for b in scc if any(id(p) not in members for p in b.predecessors)]
            entries.sort(key=lambda b: rank[id(b)])
            if len(entries) > 1:
                return scc, entries
            header = entries[0] if entries else min(scc, key=lambda b: rank[id(b)])
            inner = [b for b in scc if b is not header]
            work.append((inner, cut | {(id(p), id(header)) for p in header.predecessors}))
    return None


def _components(blocks, inside: set, cut: set) -> list[list[BasicBlock]]:
    """Strongly connected components of ``blocks`` (edges among them, less ``cut``), iteratively (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in blocks:
        if id(root) in index:
            continue
        frames = [(root, iter(root.successors))]
        index[id(root)] = low[id(root)] = counter
        counter += 1
        stack.append(root)
        on.add(id(root))
        while frames:
            v, it = frames[-1]
            advanced = False
            for w in it:
                if id(w) not in inside or (id(v), id(w)) in cut:
                    continue
                if id(w) not in index:
                    index[id(w)] = low[id(w)] = counter
                    counter += 1
                    stack.append(w)
                    on.add(id(w))
                    frames.append((w, iter(w.successors)))
                    advanced = True
                    break
                if id(w) in on:
                    low[id(v)] = min(low[id(v)], index[id(w)])
            if advanced:
                continue
            frames.pop()
            if frames:
                u = frames[-1][0]
                low[id(u)] = min(low[id(u)], low[id(v)])
            if low[id(v)] == index[id(v)]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(id(w))
                    comp.append(w)
                    if w is v:
                        break
                out.append(comp)
    return out


def _dispatch(fn, scc: list[BasicBlock], entries: list[BasicBlock]) -> None:
    """Route every edge into ``entries`` through a new dispatch block (see the module docstring)."""
    head = BasicBlock("irr.dispatch")
    head.move_before(entries[0])
    which = Phi(T.i32)
    IRBuilder.at_start(head).insert(which)
    moved = {id(e): [(p, Phi(p.type)) for p in e.phis()] for e in entries}
    for e in entries:
        for _, q in moved[id(e)]:
            IRBuilder.at_end(head).insert(q)
    for i, e in enumerate(entries):
        for pred in e.predecessors:
            edge = pred.split_edge(e, "irr.edge")
            edge.terminator.set_operand(0, head)
            which.add_incoming(ConstantInt(T.i32, i), edge)
            for f in entries:
                for p, q in moved[id(f)]:
                    q.add_incoming(p.incoming_value_for(edge) if f is e else ConstantPoison(p.type), edge)
    IRBuilder.at_end(head).switch(which, entries[0], [(i, e) for i, e in enumerate(entries) if i])
    for e in entries:
        for p, q in moved[id(e)]:
            p.replace_all_uses_with(q)
            p.erase()


__all__ = ["make_reducible"]
