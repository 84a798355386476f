"""Dominators, post-dominators and loops on known small CFGs."""

from __future__ import annotations

import textwrap

from ir_helpers import compile_to_ir
from enzcc.ir import (
    DominatorTree, LoopInfo, PostDominatorTree, parse_module, post_order, reverse_post_order,
)

NESTED = textwrap.dedent("""
    define void @nested(i32 %n, i32 %m) {
    entry:
      br label %outer

    outer:
      %i = phi i32 [ 0, %entry ], [ %i.next, %outer.latch ]
      br label %inner

    inner:
      %j = phi i32 [ 0, %outer ], [ %j.next, %inner ]
      %j.next = add i32 %j, 1
      %jc = icmp slt i32 %j.next, %m
      br i1 %jc, label %inner, label %outer.latch

    outer.latch:
      %i.next = add i32 %i, 1
      %ic = icmp slt i32 %i.next, %n
      br i1 %ic, label %outer, label %exit

    exit:
      ret void
    }
    """)

TWO_EXITS = textwrap.dedent("""
    define i32 @search(ptr %a, i32 %n, i32 %key) {
    entry:
      %empty = icmp sle i32 %n, 0
      br i1 %empty, label %notfound, label %header

    header:
      %i = phi i32 [ 0, %entry ], [ %i.next, %latch ]
      %p = getelementptr inbounds i32, ptr %a, i32 %i
      %v = load i32, ptr %p, align 4
      %hit = icmp eq i32 %v, %key
      br i1 %hit, label %found, label %latch

    latch:
      %i.next = add i32 %i, 1
      %more = icmp slt i32 %i.next, %n
      br i1 %more, label %header, label %notfound

    found:
      ret i32 %i

    notfound:
      ret i32 -1
    }
    """)

DIAMOND = textwrap.dedent("""
    define i32 @diamond(i1 %c) {
    entry:
      br i1 %c, label %left, label %right

    left:
      br label %join

    right:
      br label %join

    join:
      %r = phi i32 [ 1, %left ], [ 2, %right ]
      ret i32 %r

    dead:
      br label %join
    }
    """)


def names(blocks):
    return [b.name for b in blocks]


def test_orders():
    fn = parse_module(NESTED).get_function("nested")
    assert names(reverse_post_order(fn)) == ["entry", "outer", "inner", "outer.latch", "exit"]
    assert names(post_order(fn))[0] == "exit"


def test_dominators_nested():
    fn = parse_module(NESTED).get_function("nested")
    dt = DominatorTree(fn)
    b = {x.name: x for x in fn.blocks}
    idoms = {n: (dt.idom(x).name if dt.idom(x) else None) for n, x in b.items()}
    assert idoms == {"entry": None, "outer": "entry", "inner": "outer",
                     "outer.latch": "inner", "exit": "outer.latch"}
    assert dt.dominates(b["outer"], b["exit"])
    assert not dt.dominates(b["inner"], b["outer"])
    assert dt.strictly_dominates(b["entry"], b["inner"])
    assert not dt.strictly_dominates(b["inner"], b["inner"])
    assert dt.nearest_common_dominator(b["exit"], b["inner"]) is b["inner"]
    assert names(dt.dominated_blocks(b["inner"])) == ["inner", "outer.latch", "exit"]
    assert dt.depth(b["exit"]) == 4
    assert names(dt.dominance_frontier(b["inner"])) in (["inner", "outer"], ["outer", "inner"])
    assert names(dt.dominance_frontier(b["entry"])) == []
    # instruction-level dominance
    i_phi = b["outer"].instructions[0]
    j_next = b["inner"].instructions[1]
    assert dt.instruction_dominates(i_phi, j_next)
    assert not dt.instruction_dominates(j_next, i_phi)
    jc = b["inner"].instructions[2]
    assert dt.instruction_dominates(j_next, jc) and not dt.instruction_dominates(jc, j_next)
    # the phi use of %j.next (from %inner) is dominated even though it appears earlier
    j_phi = b["inner"].instructions[0]
    use = next(u for u in j_next.uses if u.user is j_phi)
    assert dt.dominates_use(j_next, use)


def test_loops_nested():
    fn = parse_module(NESTED).get_function("nested")
    li = LoopInfo(fn)
    assert len(li.top_level) == 1
    outer = li.top_level[0]
    assert outer.header.name == "outer"
    assert set(names(outer.blocks)) == {"outer", "inner", "outer.latch"}
    assert names(outer.latches) == ["outer.latch"]
    assert names(outer.exit_blocks) == ["exit"]
    assert names(outer.exiting_blocks) == ["outer.latch"]
    assert outer.preheader.name == "entry"
    assert outer.depth == 1 and outer.parent is None
    [inner] = outer.subloops
    assert inner.header.name == "inner" and inner.parent is outer and inner.depth == 2
    assert names(inner.blocks) == ["inner"]
    assert names(inner.latches) == ["inner"] and inner.latch.name == "inner"
    assert names(inner.exit_blocks) == ["outer.latch"]
    assert inner.preheader.name == "outer"
    b = {x.name: x for x in fn.blocks}
    assert li.loop_for(b["inner"]) is inner
    assert li.loop_for(b["outer.latch"]) is outer
    assert li.loop_for(b["exit"]) is None
    assert [li.loop_depth(b[n]) for n in ("entry", "outer", "inner", "outer.latch", "exit")] == \
        [0, 1, 2, 1, 0]
    assert li.is_loop_header(b["outer"]) and not li.is_loop_header(b["outer.latch"])
    assert li.loops == [outer, inner]
    assert outer.contains(inner) and not inner.contains(outer)
    assert outer.contains(b["inner"].instructions[0])


def test_loop_with_two_exits():
    fn = parse_module(TWO_EXITS).get_function("search")
    li = LoopInfo(fn)
    [loop] = li.top_level
    assert loop.header.name == "header"
    assert set(names(loop.blocks)) == {"header", "latch"}
    assert set(names(loop.exit_blocks)) == {"found", "notfound"}
    assert set(names(loop.exiting_blocks)) == {"header", "latch"}
    assert sorted((a.name, b.name) for a, b in loop.exit_edges) == \
        [("header", "found"), ("latch", "notfound")]
    assert loop.preheader is None  # entry also branches to %notfound
    dt = li.domtree
    b = {x.name: x for x in fn.blocks}
    assert dt.idom(b["notfound"]) is b["entry"]
    assert dt.idom(b["found"]) is b["header"]


def test_post_dominators_and_unreachable():
    fn = parse_module(DIAMOND).get_function("diamond")
    b = {x.name: x for x in fn.blocks}
    pdt = PostDominatorTree(fn)
    assert names(pdt.roots) == ["join"]
    assert pdt.idom(b["left"]) is b["join"] and pdt.idom(b["entry"]) is b["join"]
    assert pdt.dominates(b["join"], b["entry"])
    assert not pdt.dominates(b["left"], b["entry"])
    dt = DominatorTree(fn)
    assert not dt.is_reachable(b["dead"])
    assert dt.idom(b["join"]) is b["entry"]
    assert set(names(dt.dominance_frontier(b["left"]))) == {"join"}
    assert names(b["join"].predecessors) == ["dead", "right", "left"]

    fn2 = parse_module(TWO_EXITS).get_function("search")
    pdt2 = PostDominatorTree(fn2)
    c = {x.name: x for x in fn2.blocks}
    assert set(names(pdt2.roots)) == {"found", "notfound"}
    assert pdt2.idom(c["header"]) is None  # exits diverge: only the virtual exit post-dominates
    assert pdt2.idom(c["latch"]) is None
    assert pdt2.dominates(c["found"], c["found"])


def test_loops_on_compiled_code(tmp_path):
    text = compile_to_ir("c", ["-O1"], tmp_path)
    mod = parse_module(text)
    li = LoopInfo(mod.get_function("nested"))
    assert len(li.top_level) == 1
    outer = li.top_level[0]
    assert len(outer.subloops) == 1
    assert outer.subloops[0].depth == 2
    li2 = LoopInfo(mod.get_function("loop_two_exits"))
    assert len(li2.loops) == 1
    assert len(li2.loops[0].exit_blocks) == 2
