"""``__enzyme_set_fixed_point``: a fixed-point loop marked from inside, outlined into a step function.

``__enzyme_set_fixed_point(reduction, max_iters, control, state, bytes, ...)`` in a loop's body (as a Fortran
``!DIR$ ENZYME FIXED_POINT`` directive lowers) marks the loop as a fixed-point iteration: the loop's iteration
becomes a step function and the loop a call to ``__enzyme_fixed_point`` (:mod:`enzcc.ad.calls.fixed_point`), in the
copy of the function a derivative is made from. A negative ``reduction`` or ``max_iters``, or a null
``control``, asks for the default; the arguments after ``control`` are (pointer, bytes) pairs of state, and
after ``enzyme_checkpoint_region`` (pointer, bytes) pairs of other memory the iterations read.

The loop must have one latch and one exit, taken from its header (``while``) or its latch (``do ... while``),
and the marker's arguments must be computed before the loop. The step gets the values the loop uses from
before it, and the loop's own carried values (the header's phis) in memory: it loads them, runs one
iteration, and stores them for the next one (returning 1), or stores the values used after the loop
(returning 0 where the loop exits). In the adjoint or tangent iterations at the converged state a flag makes
the step run the loop's body even where the loop's test would stop it.
"""

from __future__ import annotations

from enzcc.ad.registry import register_lowering, register_module_preparation

from enzcc.ad.emit import internal_function, signed_i64
from enzcc.ad.errors import ad_error
from enzcc.ad.calls.fixed_point import FLAG_MARKER
from enzcc.ad.api import calls_named, marker_symbol
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.cfg import DominatorTree, LoopInfo
from enzcc.ir.clone import clone_blocks
from enzcc.ir.instructions import Call, CondBr, Instruction, Phi
from enzcc.ir.values import Argument, ConstantInt, ConstantPoison, Value

SET_FIXED_POINT = "__enzyme_set_fixed_point"


def is_set_fixed_point(name: str | None) -> bool:
    return (name or "").startswith(SET_FIXED_POINT)


def outline_marked_loops(module, fn) -> list[str]:
    """Outline every loop of ``fn`` marked by ``__enzyme_set_fixed_point``; returns the step functions made."""
    steps = []
    while True:
        marks = [i for i in fn.instructions() if isinstance(i, Call) and is_set_fixed_point(i.callee_name)]
        if not marks:
            return steps
        steps.append(_outline(module, fn, marks[0]))


def lower(module) -> int:
    """Drop the markers left in code that is not differentiated (the loop runs as written)."""
    calls = calls_named(module, SET_FIXED_POINT)
    for inst in calls:
        inst.erase()
    return len(calls)


def _outline(module, fn, mark: Call) -> str:
    li = LoopInfo(fn, DominatorTree(fn))
    loop = li.loop_for(mark.parent)
    if loop is None:
        raise ad_error(f"{SET_FIXED_POINT} must be in the body of the loop it marks", mark)
    latch, pre, exits = loop.latch, loop.preheader or _make_preheader(fn, loop), loop.exit_edges
    if latch is None or pre is None or len(exits) != 1 or exits[0][0] not in (loop.header, latch) or \
            not isinstance(exits[0][0].terminator, CondBr):
        raise ad_error(f"the loop {SET_FIXED_POINT} marks must have one latch and one exit, tested in its header or "
                       "its latch", mark)
    exiting, exit_block = exits[0]
    inside = {id(b) for b in loop.blocks}

    def defined_inside(v) -> bool:
        return isinstance(v, Instruction) and v.parent is not None and id(v.parent) in inside

    args = list(mark.args)
    if len(args) < 3:
        raise ad_error(f"{SET_FIXED_POINT} takes (reduction, max_iters, control, state, bytes, ...)", mark)
    reduction, max_iters, control, rest = args[0], args[1], args[2], args[3:]
    states, regions, target = [], [], None
    k = 0
    while k < len(rest):
        name = marker_symbol(rest[k])
        if name == "enzyme_checkpoint_region":
            target = regions
            k += 1
            continue
        if name is not None:
            raise ad_error(f"{name} is not supported in {SET_FIXED_POINT} (after control: state, bytes pairs, then "
                           "enzyme_checkpoint_region and its pairs)", mark)
        if k + 1 >= len(rest) or not isinstance(rest[k].type, T.PointerType) or \
                not isinstance(rest[k + 1].type, T.IntType):
            raise ad_error(f"{SET_FIXED_POINT}: after control come (pointer, bytes) pairs", mark)
        (regions if target is regions else states).append((rest[k], rest[k + 1]))
        k += 2
    if not states:
        raise ad_error(f"{SET_FIXED_POINT} needs the state: pointer, bytes", mark)
    values = [reduction, max_iters, control] + [x for pair in states + regions for x in pair]
    if any(defined_inside(v) for v in values):
        raise ad_error(f"the arguments of {SET_FIXED_POINT} must be computed before the loop", mark)
    if not isinstance(reduction.type, T.FloatType) or not isinstance(max_iters.type, T.IntType) or \
            not isinstance(control.type, T.PointerType):
        raise ad_error(f"{SET_FIXED_POINT} takes (double reduction, int64_t max_iters, void *control, ...)", mark)

    header_phis = loop.header.phis()
    # what the loop uses from before it (in order), and what is used after it
    live_ins: list[Value] = []
    seen = set()
    for block in loop.blocks:
        for inst in block.instructions:
            ops = inst.operands
            if isinstance(inst, Phi) and inst.parent is loop.header:
                ops = [v for v, b in inst.incoming if b is not pre]
            for op in ops:
                if (isinstance(op, Argument) or (isinstance(op, Instruction) and not defined_inside(op))) and \
                        id(op) not in seen:
                    seen.add(id(op))
                    live_ins.append(op)
    live_outs = [i for b in loop.blocks for i in b.instructions
                 if any(not defined_inside(u.user) for u in i.uses)]

    # memory for the carried values, the values used after the loop, and the flag
    eb = IRBuilder.at_start(fn.entry_block)
    slots = [eb.alloca(h.type, in_entry=True) for h in header_phis]
    outs = [eb.alloca(v.type, in_entry=True) for v in live_outs]
    flag = eb.alloca(T.i8, in_entry=True)

    # the step: step(i, live-ins..., slots..., outs..., flag) -> i32
    params = [T.i64] + [v.type for v in live_ins] + [T.ptr] * (len(slots) + len(outs) + 1)
    step = internal_function(module, f"__enzcc_fp_step_{fn.name}", T.i32, params)
    p_live = step.args[1:1 + len(live_ins)]
    p_slots = step.args[1 + len(live_ins):1 + len(live_ins) + len(slots)]
    p_outs = step.args[1 + len(live_ins) + len(slots):-1]
    p_flag = step.args[-1]
    vmap = dict(zip(live_ins, p_live))
    entry = step.append_block("entry")
    sb = IRBuilder.at_end(entry)
    loads = [sb.load(h.type, s) for h, s in zip(header_phis, p_slots)]
    forced = sb.icmp("ne", sb.load(T.i8, p_flag), ConstantInt(T.i8, 0))
    copies = clone_blocks(loop.blocks, step, vmap)
    sb.br(vmap[loop.header])
    for h, v in zip(header_phis, loads):
        c = vmap[h]
        c.replace_all_uses_with(v)
        c.erase()
    vmap[mark].erase()

    def mapped(v):
        return vmap.get(v, v)

    cont, stop = step.append_block("continue"), step.append_block("stop")
    def store_outs(b):
        # the values used after the loop: where it exits, and also where it goes on, so that in the adjoint
        # iterations (which always go on) their adjoints flow back into the iteration
        for v, s in zip(live_outs, p_outs):
            value = mapped(v)
            if isinstance(v, Phi) and v.parent is loop.header:
                value = loads[header_phis.index(v)]
            b.store(value, s)

    cb = IRBuilder.at_end(cont)
    store_outs(cb)
    nexts = [mapped(h.incoming_value_for(latch)) for h in header_phis]
    for v, s in zip(nexts, p_slots):
        cb.store(v, s)
    cb.ret(ConstantInt(T.i32, 1))
    tb = IRBuilder.at_end(stop)
    store_outs(tb)
    tb.ret(ConstantInt(T.i32, 0))
    # the back edge continues, the exit stops (unless forced: the adjoint/tangent iterations run the body)
    new_latch = vmap[latch]
    term = new_latch.terminator
    for i, op in enumerate(term.operands):
        if op is vmap[loop.header]:
            term.set_operand(i, cont)
    new_exiting = vmap[exiting]
    term = new_exiting.terminator
    exit_is_true = term.operands[1] is exit_block
    for i, op in enumerate(term.operands):
        if op is exit_block:
            term.set_operand(i, stop)
    b = IRBuilder.before(term)
    cond = term.condition
    term.set_operand(0, b.and_(cond, b.xor(forced, ConstantInt(T.i1, 1))) if exit_is_true else b.or_(cond, forced))
    del copies

    # the function: the loop becomes the fixed-point call
    pb = IRBuilder.before(pre.terminator)
    for h, s in zip(header_phis, slots):
        pb.store(h.incoming_value_for(pre), s)
    pb.store(ConstantInt(T.i8, 0), flag)
    solved = fn.append_block("fixed_point")
    solved.move_after(pre)
    fixed = module.get_or_insert_function("__enzyme_fixed_point", T.FunctionType(T.void, (T.ptr,), varargs=True))
    dl = module.data_layout
    cb = IRBuilder.at_end(solved)
    i64 = lambda v: signed_i64(cb, v)  # noqa: E731
    marks = []  # the call says all of it with markers, so that the copies derivatives are made from say it too
    # the loop's carried floating-point values are state too (the optimizer may keep the state in them): a
    # state without derivatives is only kept (fixed_point.drop_inactive_states)
    carried = [(s, ConstantInt(T.i64, dl.store_size(h.type))) for s, h in zip(slots, header_phis)]
    floats = [c for c, h in zip(carried, header_phis) if isinstance(h.type, T.FloatType)]
    others = [c for c, h in zip(carried, header_phis) if not isinstance(h.type, T.FloatType)]
    for p, n in states + floats:
        marks += [_marker(module, "enzyme_fp_state"), p, i64(n)]
    for p, n in regions + others + [(o, ConstantInt(T.i64, dl.store_size(v.type))) for o, v in zip(outs, live_outs)]:
        marks += [_marker(module, "enzyme_checkpoint_region"), p, i64(n)]
    r = reduction if reduction.type == T.f64 else cb.cast("fpext", reduction, T.f64)
    marks += [_marker(module, "enzyme_fp_reduction"), r, _marker(module, "enzyme_fp_max_iters"), i64(max_iters),
              _marker(module, "enzyme_fp_control"), control, _marker(module, FLAG_MARKER), flag]
    cb.call(fixed, [module.global_ref(step.name), *marks, *live_ins, *slots, *outs, flag])
    ab = IRBuilder.at_end(solved)
    after = {id(v): ab.load(v.type, o) for v, o in zip(live_outs, outs)}
    ab.br(exit_block)
    for v in live_outs:
        for use in list(v.uses):
            user = use.user
            if defined_inside(user):
                continue
            if isinstance(user, Phi) and user.parent is exit_block:
                continue  # (below)
            user.set_operand(use.index, after[id(v)])
    for phi in exit_block.phis():
        for i, (v, blk) in enumerate(phi.incoming):
            if blk is exiting:
                phi.set_operand(i, after.get(id(v), v))
        phi.replace_incoming_block(exiting, solved)
    term = pre.terminator
    for i, op in enumerate(term.operands):
        if op is loop.header:
            term.set_operand(i, solved)
    _delete(loop.blocks)
    return step.name


def _marker(module, name: str) -> Value:
    """The address of marker global ``name`` (declared if the program does not)."""
    if name not in module.globals:
        module.add_global(name, T.i32, linkage="external")
    return module.global_ref(name)


def _make_preheader(fn, loop):
    """A block between the loop's only entering edge and its header (None if several edges enter)."""
    from enzcc.ir.block import BasicBlock

    outside = [p for p in loop.header.predecessors if not loop.contains(p)]
    if len(outside) != 1:
        return None
    (pred,) = outside
    pre = BasicBlock("fp.preheader")
    pre.parent = fn
    fn.blocks.insert(fn.blocks.index(loop.header), pre)
    IRBuilder.at_end(pre).br(loop.header)
    term = pred.terminator
    for i, op in enumerate(term.operands):
        if op is loop.header:
            term.set_operand(i, pre)
    for phi in loop.header.phis():
        phi.replace_incoming_block(pred, pre)
    return pre


def _delete(blocks) -> None:
    for b in blocks:
        for inst in b.instructions:
            if inst.has_uses():
                inst.replace_all_uses_with(ConstantPoison(inst.type) if not isinstance(inst.type, T.VoidType)
                                           else inst)
    for b in blocks:
        for inst in reversed(list(b.instructions)):
            inst.erase()
    for b in blocks:
        b.remove_from_parent()



# -- the call rule ----------------------------------------------------------------------------------------

def _outline_all(module, prepared: dict) -> list[str]:
    """Loops marked by ``__enzyme_set_fixed_point``, outlined into step functions (kept: they are called)."""
    steps = []
    for name in list(prepared.values()):
        steps += outline_marked_loops(module, module.functions[name])
    return steps


register_lowering(20, is_set_fixed_point, lower)
register_module_preparation(10, _outline_all)


__all__ = ["SET_FIXED_POINT", "is_set_fixed_point", "lower", "outline_marked_loops"]
