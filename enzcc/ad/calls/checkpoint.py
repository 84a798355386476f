"""Checkpointed time loops (``<enzyme/checkpoint.h>``): reverse mode driven by a checkpointing scheme.

``__enzyme_checkpoint_for(step, start, n, enzyme_scheme, scheme, data, [enzyme_checkpoint_region, ptr, bytes,]...
args...)`` is the loop ``for (j = 0; j < n; j++) step(start + j, args...)``; ``__enzyme_checkpoint_while(step,
markers..., args...)`` is ``int64_t i = 0; while (step(i++, args...));``. Where no derivative is taken, and in
forward mode (the tangent of each step, in order), they are those loops.

In reverse mode the loop's steps are not taped all at once. The scheme (a table of C functions, see the header)
answers, one action at a time, which state to store into which slot, which to restore, which steps to run
without taping and when to turn around. A snapshot holds the ``enzyme_checkpoint_region`` memory and every
mutable global the step (or what it calls) uses; the shadows are not part of it (adjoints add up across the
reverse sweep). The forward sweep (:func:`augment`) asks for actions until the first turn: it then stores the
state before the last step in the driver's slot -2, runs that step, and stores the final state in slot -1. The
reverse sweep (:func:`reverse`) restores slot -2 and differentiates the last step, then follows the actions
(each turn differentiates one step: its augmented primal, then its reverse, so no tape outlives a step) until
the scheme is done, and restores slot -1: the memory is left as the forward sweep left it.

Forward mode over this reverse mode (a Hessian-vector product) differentiates the drivers like other code: the
schedule replays and turns the steps' tangents, and the snapshots also hold the regions' tangents
(:func:`forward_snapshot`). Reverse mode over it is refused.

A step that writes memory a snapshot does not hold (through a pointer argument that no region covers, or a
pointer it loads) would be recomputed from a wrong state: that is a one-line error.
"""

from __future__ import annotations

from enzcc.ad.registry import (CallRule, loop_rule, register, register_called_function, register_lowering,
                               register_prepared_check)

from dataclasses import dataclass, field

from enzcc.ad.api import DUP, MarkerArgs, calls_named, loop_step, loop_step_kinds, loop_step_name
from enzcc.ad.emit import fail_at_run_time, internal_function, signed_i64
from enzcc.ad.errors import ad_error
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.function import Function
from enzcc.ir.instructions import Alloca, Call, Store
from enzcc.ir.values import Argument, ConstantExpr, ConstantInt, ConstantNull, ConstantZero, GlobalRef, Value

CHECKPOINT_FOR = "__enzyme_checkpoint_for"
CHECKPOINT_WHILE = "__enzyme_checkpoint_while"
_SCHEME, _REGION = "enzyme_scheme", "enzyme_checkpoint_region"
DRIVER_MARK = "__enzcc_checkpoint_driver"
"""Called where a sweep's driver starts, so that a later round of AD (a derivative of this derivative) finds the
driver after it was inlined, and refuses it; removed by :func:`lower`."""

_SCHEME_CALLS = {"init": (T.ptr, (T.ptr, T.i64, T.ptr, T.i64)), "next": (T.void, (T.ptr, T.ptr)),
                 "slot": (T.void, (T.ptr, T.i64, T.i64, T.ptr, T.i64)), "set_nsteps": (T.void, (T.ptr, T.i64)),
                 "finalize": (T.void, (T.ptr,))}
"""The drivers call the scheme's functions through these (``__enzcc_ckpt_<name>(function, args...)``: its
result and arguments), declared until no more derivatives are taken, then defined by :func:`lower`. The
optimizer between two rounds of nested AD therefore cannot inline the scheme (a constant table) into a driver,
and forward mode over a driver finds its snapshots (:func:`forward_snapshot`). ``init`` takes the regions and
adds up their sizes itself; ``slot`` is ``store`` or ``restore``."""
_SCHEME_PREFIX = "__enzcc_ckpt_scheme_"

# the header's ABI (ENZYME_CKPT_ABI_VERSION 1): action flags, and the byte offsets of the structures' fields
_STORE, _RESTORE, _FORWARD, _FIRSTUTURN, _UTURN, _DONE = 1, 2, 3, 4, 5, 7
_INIT, _NEXT, _STORE_FN, _RESTORE_FN, _SET_NSTEPS, _FINALIZE = 8, 16, 24, 32, 40, 48
_ACTION_BYTES, _REGION_BYTES = 32, 24


def is_checkpoint(name: str | None) -> bool:
    return (name or "").startswith((CHECKPOINT_FOR, CHECKPOINT_WHILE))


@dataclass
class Checkpoint:
    """One ``__enzyme_checkpoint_for`` / ``__enzyme_checkpoint_while`` call, understood."""

    call: Call
    step: Function
    """``step(i, args...)``; for a while loop it returns whether to go on."""
    is_while: bool
    start: Value
    """The index of the first step (i64; 0 for a while loop)."""
    n: Value
    """The number of steps (i64; -1 for a while loop: known when the step says stop)."""
    scheme: Value
    """The ``EnzymeCheckpointScheme`` table."""
    data: Value
    """What the scheme's ``init`` gets (the reference schemes' ``EnzymeCkptConfig``)."""
    regions: list[tuple[Value, Value]] = field(default_factory=list)
    """``enzyme_checkpoint_region``: (pointer, bytes as i64)."""
    args: list[Value] = field(default_factory=list)
    """What the step gets after the index."""

    @property
    def what(self) -> str:
        return CHECKPOINT_WHILE if self.is_while else CHECKPOINT_FOR


def step_name(call) -> str | None:
    """The step function of a checkpointed loop (None for other instructions)."""
    return loop_step_name(call, is_checkpoint)


def parse(call: Call, module) -> Checkpoint:
    """Read the call's markers; every misuse is a one-line error."""
    is_while = call.callee_name.startswith(CHECKPOINT_WHILE)
    what = CHECKPOINT_WHILE if is_while else CHECKPOINT_FOR
    step = loop_step(call, module, is_checkpoint, what)
    b = IRBuilder.before(call)
    args = list(call.args[1:])
    if is_while:
        start, n = ConstantInt(T.i64, 0), ConstantInt(T.i64, -1)
    else:
        if len(args) < 2 or not all(isinstance(a.type, T.IntType) for a in args[:2]):
            raise ad_error(f"{what} takes (step, start, number of steps, ...)", call)
        start, n = signed_i64(b, args[0]), signed_i64(b, args[1])
        args = args[2:]
    scheme = data = None
    regions = []
    reader = MarkerArgs(call, what, args)
    take = reader.take
    for marker in reader.markers():
        if marker == _SCHEME:
            scheme, data = take("the scheme after enzyme_scheme"), take("the scheme's data after the scheme")
            if not isinstance(scheme.type, T.PointerType) or not isinstance(data.type, T.PointerType):
                raise ad_error(f"{what}: enzyme_scheme takes the scheme and its data (two pointers)", call)
        elif marker == _REGION:
            p = take("the pointer after enzyme_checkpoint_region")
            nbytes = take("the size in bytes after enzyme_checkpoint_region")
            if not isinstance(p.type, T.PointerType) or not isinstance(nbytes.type, T.IntType):
                raise ad_error(f"{what}: enzyme_checkpoint_region takes a pointer and a size in bytes", call)
            regions.append((p, signed_i64(b, nbytes)))
        else:
            raise ad_error(f"{marker} is not supported in {what} (known: enzyme_scheme, "
                           "enzyme_checkpoint_region)", call)
    if scheme is None:
        raise ad_error(f"{what} needs its scheme: enzyme_scheme, &scheme, data", call)
    ck = Checkpoint(call, step, is_while, start, n, scheme, data, regions, reader.rest())
    params = step.args
    if len(params) != 1 + len(ck.args) or not isinstance(params[0].type, T.IntType) or \
            any(p.type != a.type for p, a in zip(params[1:], ck.args)):
        raise ad_error(f"{what}: '{step.name}' takes ({', '.join(str(p.type) for p in params)}): the step's "
                       f"index, then the arguments given after the markers "
                       f"({', '.join(str(a.type) for a in ck.args) or 'none'})", call)
    if is_while and not isinstance(step.return_type, T.IntType):
        raise ad_error(f"{what}: '{step.name}' must return whether to run another step (an integer)", call)
    return ck


# -- the loop itself -----------------------------------------------------------------------------------------

def _index(b: IRBuilder, ty: T.IntType, i: Value) -> Value:
    """The i64 step index as the step's index type."""
    return i if ty == T.i64 else b.trunc(i, ty)


def _loop(module, ck: Checkpoint, b: IRBuilder, callee: Function, call_args, name: str) -> Call:
    """At ``b``: the plain loop, calling ``callee(index, *call_args)`` for each step."""
    ity = ck.step.args[0].type
    fn = internal_function(module, f"__enzcc_ckpt_{name}_{ck.step.name}", T.void,
                           [T.i64, T.i64] + [a.type for a in call_args])
    start, n, *rest = fn.args
    entry, head, body, done = (fn.append_block(x) for x in ("entry", "head", "body", "done"))
    IRBuilder.at_end(entry).br(head)
    hb = IRBuilder.at_end(head)
    j = hb.phi(T.i64, [(ConstantInt(T.i64, 0), entry)])
    nb = IRBuilder.at_end(body)
    r = nb.call(callee, [_index(nb, ity, nb.add(start, j)), *rest])
    j1 = nb.add(j, ConstantInt(T.i64, 1))
    j.add_incoming(j1, body)
    if ck.is_while:  # (n is -1: the step decides)
        hb.br(body)
        go = r if not isinstance(r.type, T.StructType) else nb.extract_value(r, [0])
        nb.cond_br(nb.icmp("ne", go, ConstantInt(go.type, 0)), head, done)
    else:
        hb.cond_br(hb.icmp("slt", j, n), body, done)
        nb.br(head)
    IRBuilder.at_end(done).ret_void()
    return b.call(fn, [ck.start, ck.n, *call_args])


def lower(module) -> int:
    """Replace each remaining checkpointed loop (code that is not differentiated) by its loop, and remove the
    drivers' marks."""
    calls = calls_named(module, CHECKPOINT_FOR) + calls_named(module, CHECKPOINT_WHILE)
    for inst in calls:
        ck = parse(inst, module)
        _loop(module, ck, IRBuilder.before(inst), ck.step, ck.args, "loop")
        inst.erase()
    for inst in calls_named(module, DRIVER_MARK):
        inst.erase()
    if DRIVER_MARK in module.functions:
        module.remove_function(DRIVER_MARK)
    for what, (ret, params) in _SCHEME_CALLS.items():
        fn = module.functions.get(_SCHEME_PREFIX + what)
        if fn is not None and fn.is_declaration:
            _define_scheme_call(fn, what, ret, params)
    return len(calls)


def _scheme_call(module, b: IRBuilder, what: str, function: Value, args) -> Value:
    """At ``b``: the scheme's function ``what`` (see :data:`_SCHEME_CALLS`), called through its wrapper."""
    ret, params = _SCHEME_CALLS[what]
    name = _SCHEME_PREFIX + what
    fn = module.functions.get(name)
    if fn is None:
        fn = module.get_or_insert_function(name, T.FunctionType(ret, (T.ptr, *params)))
        fn.fn_attrs = ["nounwind"]
    return b.call(fn, [function, *args])


def _define_scheme_call(fn: Function, what: str, ret, params) -> None:
    """The body of a wrapper: the call through the function pointer (``init`` gets the regions' total size)."""
    fn.linkage = "internal"
    fn.fn_attrs = ["nounwind", "alwaysinline"]
    function, *args = fn.args
    b = IRBuilder.at_end(fn.append_block("entry"))
    if what == "init":
        data, n, regions, count = args
        head, body, done = (fn.append_block(x) for x in ("sum", "add", "call"))
        entry = b.block
        b.br(head)
        hb = IRBuilder.at_end(head)
        k = hb.phi(T.i64, [(ConstantInt(T.i64, 0), entry)])
        total = hb.phi(T.i64, [(ConstantInt(T.i64, 0), entry)])
        hb.cond_br(hb.icmp("slt", k, count), body, done)
        ab = IRBuilder.at_end(body)
        at = ab.gep(T.i8, regions, [ab.add(ab.mul(k, ConstantInt(T.i64, _REGION_BYTES)), ConstantInt(T.i64, 8))])
        k.add_incoming(ab.add(k, ConstantInt(T.i64, 1)), body)
        total.add_incoming(ab.add(total, ab.load(T.i64, at)), body)
        ab.br(head)
        db = IRBuilder.at_end(done)
        db.ret(db.call(function, [data, n, total], function_type=T.FunctionType(T.ptr, (T.ptr, T.i64, T.i64))))
        return
    r = b.call(function, list(args), function_type=T.FunctionType(ret, tuple(params)))
    b.ret_void() if isinstance(ret, T.VoidType) else b.ret(r)


def _mark_driver(module, b: IRBuilder) -> None:
    mark = module.functions.get(DRIVER_MARK)
    if mark is None:
        mark = module.get_or_insert_function(DRIVER_MARK, T.FunctionType(T.void, ()))
        mark.fn_attrs = ["nounwind", "memory(inaccessiblemem: readwrite)"]
    b.call(mark, [])


# -- what both modes need ----------------------------------------------------------------------------------

def step_kinds(mode, ck: Checkpoint) -> tuple[str, ...]:
    """The step's argument activity: pointers to memory with derivatives are ``dup``."""
    return loop_step_kinds(mode, ck.args, ck.call, ck.what)


def _begin(mode, inst: Call):
    ck = parse(inst, mode.module)
    kinds = step_kinds(mode, ck)
    info = getattr(mode.module, "enzcc_active_globals", None)
    differentiated = DUP in kinds or (info is not None and bool(info.reached_by(ck.step.name)))
    return ck, kinds, differentiated


def forward(mode, inst: Call) -> None:
    """Forward mode: the loop of the steps' tangents (no checkpointing: nothing is taped). In vector mode each
    lane gives its shadows and one loop runs the step's derivative for all lanes."""
    if id(inst) not in mode.lane_state:
        mode.lane_state[id(inst)] = _begin(mode, inst)
    ck, kinds, differentiated = mode.lane_state[id(inst)]

    def emit(lanes) -> None:
        b = IRBuilder.before(inst)
        if not differentiated:
            _loop(mode.module, ck, b, ck.step, ck.args, "loop")
        else:
            F = mode.logic.forward_of_call(inst, ck.step, kinds, [ConstantInt(ck.step.args[0].type, 0), *ck.args],
                                           width=mode.width)
            call_args, d = [], 0
            for a, k in zip(ck.args, kinds[1:]):
                call_args.append(a)
                if k == DUP:
                    call_args += [shadows[d] for shadows in lanes]
                    d += 1
            _loop(mode.module, ck, b, F, call_args, "tangent")
        inst.erase()

    mode._lane_call(inst, emit, [mode.shadows.of(a, inst) for a, k in zip(ck.args, kinds[1:]) if k == DUP]
                    if differentiated else None)


def is_snapshot_call(name: str | None) -> bool:
    """A driver's call of the scheme's ``init``, ``store`` or ``restore``: they take the regions."""
    return name in (_SCHEME_PREFIX + "init", _SCHEME_PREFIX + "slot")


def forward_snapshot(mode, inst: Call) -> None:
    """Forward mode over a checkpointed loop's reverse mode (forward over reverse: Hessian-vector products). The
    driver runs under its tangent as it is: the schedule replays the steps' tangents (their forward derivatives)
    and turns each step with the tangent of its augmented primal and reverse. A snapshot must then hold each
    region's tangent with its value: the regions the scheme's ``init``, ``store`` and ``restore`` get are the
    driver's, then their shadows (one set per vector lane; a region without one counts 0 bytes), so that every
    call of one schedule sees the same list."""
    regions, count = inst.args[-2], inst.args[-1]
    if not mode.activity.is_active_ptr(regions):
        return
    if not isinstance(count, ConstantInt):
        raise ad_error("forward mode over a checkpointed loop's reverse sweep whose number of regions is not "
                       "known at compile time is not supported", inst)

    def emit(lanes) -> None:
        k_regions = count.value
        size = (1 + len(lanes)) * k_regions * _REGION_BYTES
        fn = inst.parent.parent
        ext = IRBuilder.at_start(fn.entry_block).alloca(T.ArrayType(size, T.i8), align=8, in_entry=True)
        b = IRBuilder.before(inst)
        b.memcpy(ext, regions, ConstantInt(T.i64, k_regions * _REGION_BYTES))
        at = lambda base, off: b.gep(T.i8, base, [ConstantInt(T.i64, off)])  # noqa: E731
        for lane, shadow in enumerate(lanes):
            for k in range(k_regions):
                p = b.load(T.ptr, at(shadow, k * _REGION_BYTES))
                nbytes = b.load(T.i64, at(regions, k * _REGION_BYTES + 8))
                off = ((lane + 1) * k_regions + k) * _REGION_BYTES
                b.store(p, at(ext, off))
                b.store(b.select(b.icmp("eq", p, ConstantNull(T.ptr)), ConstantInt(T.i64, 0), nbytes),
                        at(ext, off + 8))
                b.store(ConstantInt(T.i64, 0), at(ext, off + 16))
        n = len(inst.args)
        inst.set_operand(n - 1, ext)  # (operands: the callee, then the arguments)
        inst.set_operand(n, ConstantInt(count.type, (1 + len(lanes)) * k_regions))

    mode._lane_call(inst, emit, mode.shadows.of(regions, inst))


# -- reverse mode -------------------------------------------------------------------------------------------

@dataclass
class _Entry:
    """What the reverse sweep needs of one checkpointed loop."""

    ck: Checkpoint
    kinds: tuple
    aug: Function
    rev: Function
    kept: list
    """The memory a snapshot holds: (pointer, bytes)."""
    state: Value
    """The scheme's state (null when its schedule ended in the forward sweep: no steps)."""
    turn: Value
    """The first turn's iteration: the number of steps."""
    anchor: Call
    """The forward sweep's call (where the step's shadows are taken)."""


def augment(mode, inst: Call):
    """Reverse mode's forward sweep: the schedule up to its first turn. Returns the call that replaces ``inst``
    and the :class:`_Entry` :func:`reverse` takes (None when no derivative flows through the loop)."""
    module = mode.module
    ck, kinds, differentiated = _begin(mode, inst)
    b = IRBuilder.before(inst)
    if not differentiated:
        anchor = _loop(module, ck, b, ck.step, ck.args, "loop")
        inst.erase()
        return anchor, None
    body = mode.logic.body_of(ck.step)
    kept = kept_memory(module, ck, body)
    aug, rev = mode.logic.split_of_call(inst, ck.step, kinds, False,
                                        args=[ConstantInt(ck.step.args[0].type, 0), *ck.args], width=mode.width)
    pairs = [x for pair in kept for x in pair]
    values = [ck.scheme, ck.data, ck.start, ck.n, *pairs, *ck.args]
    helper = internal_function(module, f"__enzcc_ckpt_forward_{ck.step.name}", T.StructType((T.ptr, T.i64)),
                               [v.type for v in values])
    _forward_sweep(module, helper, ck, len(kept))
    anchor = b.call(helper, values)
    state = b.extract_value(anchor, [0])
    turn = b.extract_value(anchor, [1])
    inst.erase()
    return anchor, _Entry(ck, kinds, aug, rev, kept, state, turn, anchor)


def kept_values(entry: _Entry) -> list:
    """The forward values :func:`reverse` reads: the scheme's state and the first turn."""
    return [entry.state, entry.turn]


def reverse(mode, entry: _Entry, block, b: IRBuilder) -> None:
    """Reverse sweep: the rest of the schedule, each turn differentiating one step (in vector mode, once for
    all lanes: from the last lane, the call alone in its block)."""
    if mode.lane != mode.width - 1:
        return
    ck = entry.ck
    P = lambda v: mode._primal(v, block, b)  # noqa: E731
    args, shadows = [], []
    for a, k in zip(ck.args, entry.kinds[1:]):
        args.append(P(a))
        if k == DUP:
            for lane in range(mode.width):
                mode._use_lane(lane)
                shadows.append(mode._shadow(a, block, b, entry.anchor))
    mode._use_lane(mode.width - 1)
    pairs = [P(x) for pair in entry.kept for x in pair]
    values = [P(entry.state), P(entry.turn), P(ck.scheme), P(ck.start), *pairs, *args, *shadows]
    helper = internal_function(mode.module, f"__enzcc_ckpt_reverse_{ck.step.name}", T.void,
                               [v.type for v in values])
    _reverse_sweep(mode.module, helper, entry, len(args), len(shadows))
    b.call(helper, values)


class _Driver:
    """The parts of a sweep's helper both sweeps share: the scheme's functions, the regions, the action."""

    def __init__(self, module, fn: Function, ck: Checkpoint, scheme: Value, kept: list, b: IRBuilder):
        self.module, self.fn, self.ck = module, fn, ck
        self.b = b
        ptr = lambda off: b.load(T.ptr, b.gep(T.i8, scheme, [ConstantInt(T.i64, off)]))  # noqa: E731
        self.init, self.next, self.store_fn, self.restore_fn, self.set_nsteps, self.finalize = (
            ptr(o) for o in (_INIT, _NEXT, _STORE_FN, _RESTORE_FN, _SET_NSTEPS, _FINALIZE))
        self.regions = b.alloca(T.ArrayType(max(1, len(kept)) * _REGION_BYTES, T.i8), align=8)
        for k, (p, n) in enumerate(kept):
            at = lambda off: b.gep(T.i8, self.regions, [ConstantInt(T.i64, k * _REGION_BYTES + off)])  # noqa
            b.store(p, at(0))
            b.store(n, at(8))
            b.store(ConstantInt(T.i32, 0), at(16))
            b.store(ConstantInt(T.i32, 0), at(20))
        self.nregions = ConstantInt(T.i64, len(kept))
        self.action = b.alloca(T.ArrayType(_ACTION_BYTES, T.i8))

    def check_scheme(self, scheme: Value) -> None:
        """The scheme's version, and a store and a restore of its own (save_state/load_state are not used)."""
        b = self.b
        ok = b.icmp("eq", b.load(T.i32, scheme), ConstantInt(T.i32, 1))
        for f in (self.store_fn, self.restore_fn, self.next, self.finalize):
            ok = b.and_(ok, b.icmp("ne", f, ConstantNull(T.ptr)))
        good, bad = self.fn.append_block("scheme_ok"), self.fn.append_block("scheme_bad")
        b.cond_br(ok, good, bad)
        fail_at_run_time(self.module, IRBuilder.at_end(bad),
                         f"{self.ck.what}: the scheme is not an EnzymeCheckpointScheme of version 1 with "
                         "next_action, store, restore and finalize (save_state/load_state are not supported)")
        b.position_at_end(good)

    def slot(self, b: IRBuilder, fn: Value, slot: Value, step: Value) -> None:
        """``store`` or ``restore`` of ``slot``."""
        _scheme_call(self.module, b, "slot", fn, [self.state, slot, step, self.regions, self.nregions])

    def ask(self, b: IRBuilder):
        """``next_action``: (flag, iteration, startiteration, cpnum)."""
        _scheme_call(self.module, b, "next", self.next, [self.state, self.action])
        at = lambda off: b.gep(T.i8, self.action, [ConstantInt(T.i64, off)])  # noqa: E731
        return (b.load(T.i32, self.action), b.load(T.i64, at(8)), b.load(T.i64, at(16)), b.load(T.i64, at(24)))

    def action_loop(self, b: IRBuilder, turn_flag: int):
        """From ``b``: the loop that asks for the next action and carries out stores and restores itself.
        Returns its head, the action's iteration and start iteration, and the (empty) blocks for a forward run,
        the turn ``turn_flag``, done and any other action."""
        fn = self.fn
        head = fn.append_block("action")
        b.br(head)
        hb = IRBuilder.at_end(head)
        flag, iteration, first, cpnum = self.ask(hb)
        store, restore, fwd, turn, done, bad = (fn.append_block(x) for x in
                                                ("store", "restore", "run", "turn", "done", "bad_action"))
        hb.switch(flag, bad, [(_STORE, store), (_RESTORE, restore), (_FORWARD, fwd), (turn_flag, turn),
                              (_DONE, done)])
        for block, slot_fn in ((store, self.store_fn), (restore, self.restore_fn)):
            sb = IRBuilder.at_end(block)
            self.slot(sb, slot_fn, cpnum, iteration)
            sb.br(head)
        return head, iteration, first, fwd, turn, done, bad

    def step(self, b: IRBuilder, callee: Value, j: Value, args) -> Value:
        """Run step ``j`` (counted from 0) of the loop."""
        i = _index(b, self.ck.step.args[0].type, b.add(self.start, j))
        return b.call(callee, [i, *args])

    def run_forward(self, b: IRBuilder, first: Value, end: Value, args, head, ended=None) -> None:
        """Steps ``first`` to ``end - 1`` without taping, then to ``head``; for a while loop whose step says stop,
        ``ended(builder, steps run)`` instead."""
        fn = self.fn
        check, body = fn.append_block("forward"), fn.append_block("forward_step")
        entry_block = b.block
        b.br(check)
        cb = IRBuilder.at_end(check)
        j = cb.phi(T.i64, [(first, entry_block)])
        cb.cond_br(cb.icmp("slt", j, end), body, head)
        sb = IRBuilder.at_end(body)
        r = self.step(sb, self.ck.step, j, args)
        j1 = sb.add(j, ConstantInt(T.i64, 1))
        j.add_incoming(j1, body)
        if ended is None:
            sb.br(check)
        else:
            stop = fn.append_block("loop_ended")
            sb.cond_br(sb.icmp("ne", r, ConstantInt(r.type, 0)), check, stop)
            ended(IRBuilder.at_end(stop), j1)


def _forward_sweep(module, fn: Function, ck: Checkpoint, nkept: int) -> None:
    it = iter(fn.args)
    scheme, data, start, n = next(it), next(it), next(it), next(it)
    kept = [(next(it), next(it)) for _ in range(nkept)]
    args = list(it)
    b = IRBuilder.at_end(fn.append_block("entry"))
    _mark_driver(module, b)
    d = _Driver(module, fn, ck, scheme, kept, b)
    d.start = start
    d.check_scheme(scheme)
    d.state = _scheme_call(module, b, "init", d.init, [data, n, d.regions, d.nregions])
    head, iteration, first, fwd, turn, done, bad = d.action_loop(b, _FIRSTUTURN)

    def ended(eb: IRBuilder, steps: Value) -> None:  # a while loop's step said stop: the scheme learns the count
        has = fn.append_block("set_nsteps")
        missing = fn.append_block("no_set_nsteps")
        eb.cond_br(eb.icmp("ne", d.set_nsteps, ConstantNull(T.ptr)), has, missing)
        fail_at_run_time(module, IRBuilder.at_end(missing),
                         f"{CHECKPOINT_WHILE}: the scheme has no set_nsteps (it cannot checkpoint while loops)")
        sb2 = IRBuilder.at_end(has)
        _scheme_call(module, sb2, "set_nsteps", d.set_nsteps, [d.state, steps])
        sb2.br(head)

    d.run_forward(IRBuilder.at_end(fwd), first, iteration, args, head, ended if ck.is_while else None)
    tb = IRBuilder.at_end(turn)
    last = tb.sub(iteration, ConstantInt(T.i64, 1))
    d.slot(tb, d.store_fn, ConstantInt(T.i64, -2), last)
    d.step(tb, ck.step, last, args)
    d.slot(tb, d.store_fn, ConstantInt(T.i64, -1), iteration)
    pair = tb.insert_value(ConstantZero(T.StructType((T.ptr, T.i64))), d.state, [0])
    tb.ret(tb.insert_value(pair, iteration, [1]))
    db = IRBuilder.at_end(done)  # no steps: nothing to reverse
    _scheme_call(module, db, "finalize", d.finalize, [d.state])
    db.ret(ConstantZero(T.StructType((T.ptr, T.i64))))
    fail_at_run_time(module, IRBuilder.at_end(bad),
                     f"{ck.what}: the scheme's action in the forward sweep is not store, restore, forward, "
                     "first turn or done")


def _reverse_sweep(module, fn: Function, entry: _Entry, nargs: int, nshadows: int) -> None:
    ck = entry.ck
    it = iter(fn.args)
    state, turn, scheme, start = next(it), next(it), next(it), next(it)
    kept = [(next(it), next(it)) for _ in entry.kept]
    args = [next(it) for _ in range(nargs)]
    shadows = [next(it) for _ in range(nshadows)]
    eb = IRBuilder.at_end(fn.append_block("entry"))
    go, out = fn.append_block("reverse"), fn.append_block("exit")
    eb.cond_br(eb.icmp("eq", state, ConstantNull(T.ptr)), out, go)
    IRBuilder.at_end(out).ret_void()
    b = IRBuilder.at_end(go)
    _mark_driver(module, b)
    d = _Driver(module, fn, ck, scheme, kept, b)
    d.start, d.state = start, state

    def differentiate(gb: IRBuilder, iteration: Value) -> None:
        """Step ``iteration - 1``, its augmented primal then its reverse (the state after it is left)."""
        j = gb.sub(iteration, ConstantInt(T.i64, 1))
        i = _index(gb, ck.step.args[0].type, gb.add(start, j))
        tape = gb.extract_value(gb.call(entry.aug, [i, *args, *shadows]), [0])
        gb.call(entry.rev, [i, *args, *shadows, tape])

    d.slot(b, d.restore_fn, ConstantInt(T.i64, -2), b.sub(turn, ConstantInt(T.i64, 1)))
    differentiate(b, turn)
    head, iteration, first, fwd, uturn, done, bad = d.action_loop(b, _UTURN)
    d.run_forward(IRBuilder.at_end(fwd), first, iteration, args, head)
    ub = IRBuilder.at_end(uturn)
    differentiate(ub, iteration)
    ub.br(head)
    db = IRBuilder.at_end(done)
    d.slot(db, d.restore_fn, ConstantInt(T.i64, -1), turn)
    _scheme_call(module, db, "finalize", d.finalize, [state])
    db.ret_void()
    fail_at_run_time(module, IRBuilder.at_end(bad),
                     f"{ck.what}: the scheme's action in the reverse sweep is not store, restore, forward, turn "
                     "or done")


# -- what a snapshot holds ---------------------------------------------------------------------------------

def _reached(module, step: Function) -> list[Function]:
    """The step and the functions with bodies whose address it uses (calls, or passes on: the step of a
    checkpointed loop inside it), directly or not."""
    from enzcc.ad.globals import used_globals

    out, todo, seen = [], [step], set()
    while todo:
        fn = todo.pop()
        if fn.name in seen or fn.is_declaration:
            continue
        seen.add(fn.name)
        out.append(fn)
        todo += [module.functions[sym] for sym in used_globals(fn) if sym in module.functions]
    return out


def kept_memory(module, ck: Checkpoint, body: Function) -> list[tuple[Value, Value]]:
    """The regions, and every mutable global defined here that the step and its callees use (written or read:
    a global a step reads may be written later, and the recomputed step must read it as it was). A step that
    writes memory outside them is refused (:func:`_check_writes`)."""
    from enzcc.ad.globals import used_globals

    out = list(ck.regions)
    listed = {base.symbol for base, _ in out if isinstance(base, GlobalRef)}
    dl = module.data_layout
    syms = set()
    for fn in _reached(module, ck.step):
        syms |= used_globals(fn, skip_callees=True)
    for sym in sorted(syms):
        gv = module.globals.get(sym)
        if gv is None or gv.kind != "global" or gv.is_constant or sym in listed or gv.value_type is None:
            continue
        if gv.is_declaration:
            if _writes_global(module, ck.step, sym):
                raise ad_error(f"{ck.what}: the step writes the global '{sym}', which is defined in another "
                               "object: its size is not known here (give it with enzyme_checkpoint_region)",
                               ck.call)
            continue
        out.append((module.global_ref(sym), ConstantInt(T.i64, dl.alloc_size(gv.value_type))))
    _check_writes(module, ck, body)
    return out


def _base(p: Value) -> Value:
    """The object a pointer points into, also through constant address arithmetic (``gep (@g, 8)``)."""
    from enzcc.ad.memory import base_object

    for _ in range(64):
        p = base_object(p)
        if not (isinstance(p, ConstantExpr) and p.opcode in ("getelementptr", "bitcast", "addrspacecast")):
            break
        p = p.operands[0]
    return p


def _writes_global(module, step: Function, sym: str) -> bool:
    for fn in _reached(module, step):
        for ptr in _written_pointers(fn):
            base = _base(ptr)
            if isinstance(base, GlobalRef) and base.symbol == sym:
                return True
    return False


_WRITING_INTRINSICS = ("llvm.memcpy", "llvm.memmove", "llvm.memset")


def _written_pointers(fn: Function):
    """The pointers ``fn`` writes through: stores, and the destination of memcpy/memmove/memset."""
    for inst in fn.instructions():
        if isinstance(inst, Store):
            yield inst.pointer
        elif isinstance(inst, Call) and (inst.callee_name or "").startswith(_WRITING_INTRINSICS):
            yield inst.args[0]


def _check_writes(module, ck: Checkpoint, body: Function) -> None:
    """Refuse a step (its prepared copy ``body``) that writes memory a snapshot does not hold: through a pointer
    argument no region covers, or through a pointer it did not make itself. A pointer passed to a function
    that was not inlined counts as written."""
    from enzcc.ad.activity import is_allocation

    covered = {id(_base(p)) for p, _ in ck.regions}
    params = {id(q): a for a, q in zip(ck.args, body.args[1:])}
    written = list(_written_pointers(body))
    for inst in body.instructions():
        callee = module.functions.get(inst.callee_name) if isinstance(inst, Call) and inst.callee_name else None
        if callee is not None and not callee.is_declaration:
            written += [a for a in inst.args if isinstance(a.type, T.PointerType)]
    for ptr in written:
        base = _base(ptr)
        if isinstance(base, (Alloca, GlobalRef)) or (isinstance(base, Call) and is_allocation(base)):
            continue
        if isinstance(base, Argument) and id(base) in params and id(_base(params[id(base)])) in covered:
            continue
        where = "a pointer it loads or computes"
        if isinstance(base, Argument) and base in body.args:
            k = body.args.index(base)
            where = f"its argument {k + 1}" + (f" ('{base.name}')" if base.name else "")
        raise ad_error(f"{ck.what}: the step '{ck.step.name}' writes through {where}, whose memory no snapshot "
                       "holds; pass it as enzyme_checkpoint_region, pointer, bytes", ck.call)



# -- the call rule ----------------------------------------------------------------------------------------

# (its step runs the program's code, and its reverse is made once for all lanes of vector mode)
register(loop_rule("checkpoint", forward, augment, kept_values, reverse),
         prefixes=(CHECKPOINT_FOR, CHECKPOINT_WHILE))
register_called_function(step_name)


def _forward_snapshot(mode, inst) -> bool:
    forward_snapshot(mode, inst)
    return True


def _refuse_reverse_over_driver(fn, call, forward: bool) -> None:
    if call.callee_name == DRIVER_MARK and not forward:
        raise ad_error(f"cannot differentiate '{fn.name}' in reverse mode: it runs the reverse mode of a "
                       "checkpointed loop (__enzyme_checkpoint_for/while), and reverse mode over that is not "
                       "supported (forward mode over it is)", call)


register(CallRule("checkpoint", forward=_forward_snapshot),
         names=(_SCHEME_PREFIX + "init", _SCHEME_PREFIX + "slot"))
register_prepared_check(_refuse_reverse_over_driver)
register_lowering(40, is_checkpoint, lower)


__all__ = ["CHECKPOINT_FOR", "CHECKPOINT_WHILE", "DRIVER_MARK", "augment", "forward", "forward_snapshot",
           "is_checkpoint", "is_snapshot_call", "kept_values",
           "lower", "parse", "reverse", "step_name"]
