"""Control-flow graph analyses: orders, dominators, post-dominators, natural loops.

All analyses are snapshots: recompute them after changing the CFG.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .block import BasicBlock
from .function import Function
from .instructions import Instruction, Phi
from .values import Use

__all__ = ["successors", "predecessors", "post_order", "reverse_post_order",
           "DominatorTree", "PostDominatorTree", "Loop", "LoopInfo"]


def successors(block: BasicBlock) -> list[BasicBlock]:
    """Distinct successors in terminator order."""
    return list(dict.fromkeys(block.successors))


def predecessors(block: BasicBlock) -> list[BasicBlock]:
    """Distinct predecessors."""
    return block.predecessors


def _post_order(roots: Sequence, succ: Callable[[object], Iterable]) -> list:
    seen: set[int] = set()
    order: list = []
    for root in roots:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(succ(root)))]
        while stack:
            node, it = stack[-1]
            for nxt in it:
                if id(nxt) not in seen:
                    seen.add(id(nxt))
                    stack.append((nxt, iter(succ(nxt))))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def post_order(fn: Function) -> list[BasicBlock]:
    """Blocks reachable from the entry, in DFS post-order."""
    return _post_order([fn.entry_block], successors)


def reverse_post_order(fn: Function) -> list[BasicBlock]:
    """Blocks reachable from the entry, in reverse post-order (entry first)."""
    return post_order(fn)[::-1]


def _compute_idoms(rpo: list, preds: Callable[[object], Iterable]) -> dict[int, object]:
    """Cooper-Harvey-Kennedy iterative dominators. Returns id(node) -> idom (root -> itself)."""
    number = {id(n): i for i, n in enumerate(rpo)}
    idom: dict[int, object] = {id(rpo[0]): rpo[0]}

    def intersect(a, b):
        while a is not b:
            while number[id(a)] > number[id(b)]:
                a = idom[id(a)]
            while number[id(b)] > number[id(a)]:
                b = idom[id(b)]
        return a

    changed = True
    while changed:
        changed = False
        for node in rpo[1:]:
            new = None
            for p in preds(node):
                if id(p) in idom and id(p) in number:
                    new = p if new is None else intersect(p, new)
            if new is not None and idom.get(id(node)) is not new:
                idom[id(node)] = new
                changed = True
    return idom


class _DomBase:
    def __init__(self):
        self._idom: dict[int, BasicBlock | None] = {}
        self._children: dict[int, list[BasicBlock]] = {}
        self._level: dict[int, int] = {}
        self.roots: list[BasicBlock] = []
        """Tree roots (entry block for dominators; exit blocks for post-dominators)."""

    def _finish(self, order: list[BasicBlock]) -> None:
        for b in order:
            p = self._idom.get(id(b))
            self._children.setdefault(id(b), [])
            if p is not None:
                self._children.setdefault(id(p), []).append(b)
        for b in order:  # order lists parents before children
            p = self._idom.get(id(b))
            self._level[id(b)] = 0 if p is None else self._level[id(p)] + 1

    def is_reachable(self, block: BasicBlock) -> bool:
        """True if the block is part of the tree."""
        return id(block) in self._level

    def idom(self, block: BasicBlock) -> BasicBlock | None:
        """Immediate (post-)dominator; None for roots and unreachable blocks."""
        return self._idom.get(id(block))

    def children(self, block: BasicBlock) -> list[BasicBlock]:
        """Blocks immediately (post-)dominated by ``block``."""
        return list(self._children.get(id(block), []))

    def depth(self, block: BasicBlock) -> int:
        """Depth in the tree (roots are 0)."""
        return self._level[id(block)]

    def dominates(self, a: BasicBlock, b: BasicBlock) -> bool:
        """True if ``a`` (post-)dominates ``b`` (reflexive). Unreachable ``b`` is dominated by all."""
        if a is b:
            return True
        if id(b) not in self._level:
            return True
        if id(a) not in self._level:
            return False
        la = self._level[id(a)]
        node = b
        while node is not None and self._level[id(node)] > la:
            node = self._idom.get(id(node))
        return node is a

    def strictly_dominates(self, a: BasicBlock, b: BasicBlock) -> bool:
        """``dominates(a, b)`` and ``a is not b``."""
        return a is not b and self.dominates(a, b)

    def nearest_common_dominator(self, a: BasicBlock, b: BasicBlock) -> BasicBlock | None:
        """Deepest block dominating both (None if they are in different trees)."""
        while a is not b:
            if a is None or b is None:
                return None
            if self._level[id(a)] < self._level[id(b)]:
                a, b = b, a
            a = self._idom.get(id(a))
        return a

    def dominated_blocks(self, block: BasicBlock) -> list[BasicBlock]:
        """All blocks (post-)dominated by ``block`` (including itself), tree pre-order."""
        out, stack = [], [block]
        while stack:
            b = stack.pop()
            out.append(b)
            stack.extend(reversed(self._children.get(id(b), [])))
        return out


class DominatorTree(_DomBase):
    """Dominator tree of a function (Cooper–Harvey–Kennedy)."""

    def __init__(self, fn: Function):
        super().__init__()
        self.function = fn
        """The analyzed function."""
        rpo = reverse_post_order(fn)
        self.rpo: list[BasicBlock] = rpo
        """Reachable blocks in reverse post-order."""
        idoms = _compute_idoms(rpo, lambda b: b.predecessors)
        for b in rpo:
            d = idoms.get(id(b))
            self._idom[id(b)] = None if d is b else d
        self.roots = [rpo[0]]
        self._finish(rpo)
        self._frontier: dict[int, list[BasicBlock]] | None = None

    def instruction_dominates(self, a: Instruction, b: Instruction) -> bool:
        """True if ``a`` executes before ``b`` on every path to ``b`` (strict for a is b: False)."""
        if a is b:
            return False
        ba, bb = a.parent, b.parent
        if ba is bb:
            return ba.index_of(a) < bb.index_of(b)
        return self.dominates(ba, bb)

    def dominates_use(self, value: Instruction, use: Use) -> bool:
        """True if definition ``value`` dominates ``use`` (phi uses count at the end of the
        incoming block)."""
        user = use.user
        if isinstance(user, Phi):
            incoming = user.incoming_blocks[use.index]
            return self.dominates(value.parent, incoming)
        return self.instruction_dominates(value, user)

    def dominance_frontier(self, block: BasicBlock) -> list[BasicBlock]:
        """Dominance frontier of ``block``."""
        if self._frontier is None:
            df: dict[int, dict[int, BasicBlock]] = {id(b): {} for b in self.rpo}
            for b in self.rpo:
                preds = [p for p in b.predecessors if self.is_reachable(p)]
                if len(preds) < 2:
                    continue
                for p in preds:
                    runner = p
                    while runner is not None and runner is not self._idom.get(id(b)):
                        df[id(runner)].setdefault(id(b), b)
                        runner = self._idom.get(id(runner))
            self._frontier = {k: list(v.values()) for k, v in df.items()}
        return list(self._frontier.get(id(block), []))


class PostDominatorTree(_DomBase):
    """Post-dominator tree; roots are the exit blocks (no successors).

    Blocks that cannot reach an exit (infinite loops) are not in the tree.
    """

    def __init__(self, fn: Function):
        super().__init__()
        self.function = fn
        """The analyzed function."""
        blocks = [b for b in reverse_post_order(fn)]
        exits = [b for b in blocks if not b.successors]
        self.roots = exits
        virtual = object()

        def rev_succ(n):  # successors in the reversed CFG
            return exits if n is virtual else n.predecessors

        def rev_pred(n):  # predecessors in the reversed CFG
            if n is virtual:
                return []
            return successors(n) or [virtual]

        rpo = _post_order([virtual], rev_succ)[::-1]
        idoms = _compute_idoms(rpo, rev_pred)
        for b in rpo[1:]:
            d = idoms.get(id(b))
            self._idom[id(b)] = None if d is virtual else d
        self._finish(rpo[1:])


@dataclass(eq=False)
class Loop:
    """A natural loop."""

    header: BasicBlock
    """The loop header (target of the back edges)."""
    blocks: list[BasicBlock] = field(default_factory=list)
    """All blocks of the loop, header first, including nested loops' blocks."""
    latches: list[BasicBlock] = field(default_factory=list)
    """Blocks inside the loop with a back edge to the header."""
    parent: "Loop | None" = None
    """The enclosing loop (None for outermost loops)."""
    subloops: list["Loop"] = field(default_factory=list)
    """Directly nested loops."""
    _ids: set = field(default_factory=set, repr=False)

    def contains(self, x: BasicBlock | Instruction | "Loop") -> bool:
        """True if the block / instruction / loop is inside this loop."""
        if isinstance(x, Loop):
            return id(x.header) in self._ids
        if isinstance(x, Instruction):
            x = x.parent
        return id(x) in self._ids

    @property
    def depth(self) -> int:
        """1 for outermost loops, +1 per nesting level."""
        d, loop = 1, self.parent
        while loop is not None:
            d, loop = d + 1, loop.parent
        return d

    @property
    def exiting_blocks(self) -> list[BasicBlock]:
        """Loop blocks with a successor outside the loop."""
        return [b for b in self.blocks if any(not self.contains(s) for s in b.successors)]

    @property
    def exit_blocks(self) -> list[BasicBlock]:
        """Distinct blocks outside the loop that are targets of exiting edges."""
        out: dict[int, BasicBlock] = {}
        for b in self.blocks:
            for s in b.successors:
                if not self.contains(s):
                    out.setdefault(id(s), s)
        return list(out.values())

    @property
    def exit_edges(self) -> list[tuple[BasicBlock, BasicBlock]]:
        """(exiting block, exit block) pairs."""
        return [(b, s) for b in self.blocks for s in successors(b) if not self.contains(s)]

    @property
    def preheader(self) -> BasicBlock | None:
        """The unique out-of-loop predecessor of the header if it has the header as its
        only successor, else None."""
        outside = [p for p in self.header.predecessors if not self.contains(p)]
        if len(outside) != 1:
            return None
        pre = outside[0]
        return pre if successors(pre) == [self.header] else None

    @property
    def latch(self) -> BasicBlock | None:
        """The single latch, or None if there are several."""
        return self.latches[0] if len(self.latches) == 1 else None

    def __repr__(self) -> str:
        names = ", ".join(b.name or "?" for b in self.blocks)
        return f"<Loop header={self.header.name or '?'} blocks=[{names}]>"


class LoopInfo:
    """Natural loops of a function, with nesting."""

    def __init__(self, fn: Function, domtree: DominatorTree | None = None):
        self.function = fn
        """The analyzed function."""
        dt = domtree or DominatorTree(fn)
        self.domtree = dt
        """The dominator tree used."""
        loops: list[Loop] = []
        for header in dt.rpo:
            latches = [p for p in header.predecessors
                       if dt.is_reachable(p) and dt.dominates(header, p)]
            if not latches:
                continue
            loop = Loop(header, latches=latches)
            ids = {id(header)}
            body = [header]
            stack = [l for l in latches if l is not header]
            for l in stack:
                ids.add(id(l))
            body.extend(stack)
            while stack:
                b = stack.pop()
                for p in b.predecessors:
                    if id(p) not in ids and dt.is_reachable(p):
                        ids.add(id(p))
                        body.append(p)
                        stack.append(p)
            order = {id(b): i for i, b in enumerate(dt.rpo)}
            loop.blocks = sorted(body, key=lambda b: order[id(b)])
            loop._ids = ids
            loops.append(loop)
        # nesting: the parent is the smallest other loop containing the header
        for loop in loops:
            best = None
            for other in loops:
                if other is not loop and other.contains(loop.header) and \
                        len(other.blocks) > len(loop.blocks):
                    if best is None or len(other.blocks) < len(best.blocks):
                        best = other
            loop.parent = best
            if best is not None:
                best.subloops.append(loop)
        self.top_level: list[Loop] = [l for l in loops if l.parent is None]
        """Outermost loops."""
        self._all = loops
        self._innermost: dict[int, Loop] = {}
        for loop in sorted(loops, key=lambda l: -len(l.blocks)):
            for b in loop.blocks:
                self._innermost[id(b)] = loop

    @property
    def loops(self) -> list[Loop]:
        """All loops (outer loops before the loops they contain)."""
        return list(self._all)

    def loop_for(self, block: BasicBlock) -> Loop | None:
        """Innermost loop containing ``block``."""
        return self._innermost.get(id(block))

    def loop_depth(self, block: BasicBlock) -> int:
        """Nesting depth of ``block`` (0 outside loops)."""
        loop = self.loop_for(block)
        return loop.depth if loop is not None else 0

    def is_loop_header(self, block: BasicBlock) -> bool:
        """True if ``block`` is the header of some loop."""
        loop = self.loop_for(block)
        return loop is not None and loop.header is block
