"""Reduce a failing program: delete helpers and statements, unwrap loops and branches, replace expressions
by a subexpression or a constant, for as long as the same failure stays (greedy, first improvement)."""

from __future__ import annotations

from typing import Callable, Iterator

from tests.fuzz.gen import Expr, Program, Stmt, clone


def _sites(prog: Program) -> list[tuple[list[Stmt], int]]:
    """(block, index) of every statement, in a fixed preorder (the same in a clone)."""
    out = []

    def walk(block):
        for i, s in enumerate(block):
            out.append((block, i))
            for b in s.blocks():
                walk(b)
    for block in (prog.decls, prog.body, prog.epilogue):
        walk(block)
    return out


def _expr_nodes(prog: Program) -> list[Expr]:
    return [n for e in prog.all_exprs() for n in e.nodes()]


def candidates(prog: Program) -> Iterator[Program]:
    """Smaller variants of ``prog``, biggest cuts first."""
    for i in range(len(prog.helpers)):
        c = clone(prog)
        del c.helpers[i]
        yield c
    n = len(_sites(prog))
    for k in range(n):  # unwrap a loop or branch: its statements stay, the control flow goes
        c = clone(prog)
        block, i = _sites(c)[k]
        s = block[i]
        if s.body is not None and not s.pinned:
            block[i:i + 1] = [t for t in s.body if not t.head.startswith("if (") or not t.head.endswith("break;")] \
                + (s.orelse or [])
            yield c
    for k in range(n):
        c = clone(prog)
        block, i = _sites(c)[k]
        if not block[i].pinned:
            del block[i]
            yield c
    for k in range(len(_expr_nodes(prog))):
        node = _expr_nodes(prog)[k]
        for j in range(len(node.args)):
            c = clone(prog)
            target = _expr_nodes(c)[k]
            child = target.args[j]
            target.template, target.args = child.template, child.args
            yield c
        if node.args or node.template not in ("0.5", "x[0]"):
            for repl in ("0.5", "x[0]"):
                c = clone(prog)
                target = _expr_nodes(c)[k]
                target.template, target.args = repl, []
                yield c


def shrink(prog: Program, still_fails: Callable[[Program], bool], max_tries: int = 300) -> tuple[Program, int]:
    """The smallest variant found for which ``still_fails`` holds, and the number of tries made."""
    tries = 0
    improved = True
    tried: set[str] = set()
    while improved and tries < max_tries:
        improved = False
        size = prog.size()
        for cand in candidates(prog):
            text = cand.function_text()
            if cand.size() >= size or text in tried:
                continue
            tried.add(text)
            tries += 1
            if still_fails(cand):
                prog, improved = cand, True
                break
            if tries >= max_tries:
                break
    return prog, tries
