"""``__enzyme_fixed_point``: loops whose derivative is taken at their converged state only.

``__enzyme_fixed_point(step, enzyme_fp_state, z, bytes, [options], args...)`` is the loop
``int64_t i = 0; while (step(i++, args...));`` that iterates a state ``z <- phi(z, x)`` to its fixed point
(``<enzyme/fixed_point.h>`` documents the options). Its iterations are not differentiated one by one:

* **reverse mode** keeps one snapshot of the converged state (and of the ``enzyme_checkpoint_region`` memory and
  the mutable globals the step uses), and the reverse sweep iterates the adjoint of one step at that state,
  ``w <- phi_z^T w``, starting from the state's incoming adjoint, until it converges: each iteration restores
  the snapshot, runs the step's augmented primal and its reverse, whose seed is what the previous iteration
  left in the state's shadow. The parameters' adjoints add up over the iterations (the adjoint is linear),
  the outputs the step writes are seeded in the first one only (their shadows are consumed), and the state's
  shadow is zero afterwards (the converged state does not depend on the initial guess). The memory it
  restored is put back as the reverse sweep found it;
* **forward mode** runs the loop, then iterates the tangent of one step at the converged state,
  ``s <- phi_z s + phi_x xdot`` from ``s = 0``, until the change of the state's tangent converges.

The convergence test: the squared 2-norm of the state's adjoint (of the change of its tangent) falls below
``enzyme_fp_reduction`` (default 1e-12) times its value after the first iteration, or grows again after five;
at most ``enzyme_fp_max_iters`` iterations (default 1000, 0 for no limit); or ``enzyme_fp_control``'s
``int control(double *cumul, double *reduction)`` decides, called with ``*cumul = -1`` first and then with each
squared norm. ``__enzyme_set_fixed_point`` marks a loop from inside; :mod:`enzcc.ad.calls.outline` turns it into
this call.
"""

from __future__ import annotations

from enzcc.ad.registry import loop_rule, register, register_called_function, register_lowering

from dataclasses import dataclass, field

from enzcc.ad.api import DUP, MarkerArgs, calls_named, loop_step, loop_step_kinds, loop_step_name
from enzcc.ad.emit import internal_function, round_function, signed_i64
from enzcc.ad.errors import ad_error
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.function import Function
from enzcc.ir.instructions import Call
from enzcc.ir.values import ConstantFloat, ConstantInt, ConstantNull, GlobalRef, Value

FIXED_POINT = "__enzyme_fixed_point"

_STATE, _REDUCTION, _MAX_ITERS, _CONTROL, _REGION = ("enzyme_fp_state", "enzyme_fp_reduction",
                                                     "enzyme_fp_max_iters", "enzyme_fp_control",
                                                     "enzyme_checkpoint_region")
FLAG_MARKER = "enzyme_fp_outlined_flag"
"""enzcc's own marker (a loop outlined from ``__enzyme_set_fixed_point``): the pointer to :attr:`FixedPoint.flag`."""


def is_fixed_point(name: str | None) -> bool:
    return (name or "").startswith(FIXED_POINT)


@dataclass
class FixedPoint:
    """One ``__enzyme_fixed_point`` call, understood."""

    call: Call
    step: Function
    """The step function: ``step(i, args...)`` returns whether to iterate again."""
    states: list[tuple[Value, Value]] = field(default_factory=list)
    """``enzyme_fp_state``: (pointer, bytes as i64)."""
    regions: list[tuple[Value, Value]] = field(default_factory=list)
    """``enzyme_checkpoint_region``: (pointer, bytes as i64)."""
    reduction: Value | None = None
    max_iters: Value | None = None
    control: Value | None = None
    args: list[Value] = field(default_factory=list)
    """What the step gets after the iteration index."""
    flag: Value | None = None
    """A loop outlined from ``__enzyme_set_fixed_point`` (:mod:`enzcc.ad.calls.outline`): an ``i8`` the adjoint and
    tangent iterations set to 1, so that its step runs the loop's body even where the loop's test would stop."""


def step_name(call) -> str | None:
    """The step function of an ``__enzyme_fixed_point`` call (None for other instructions)."""
    return loop_step_name(call, is_fixed_point)


def parse(call: Call, module) -> FixedPoint:
    """Read the call's markers; every misuse is a one-line error."""
    step = loop_step(call, module, is_fixed_point, FIXED_POINT)
    fp = FixedPoint(call, step)
    b = IRBuilder.before(call)
    reader = MarkerArgs(call, FIXED_POINT, call.args[1:])
    take = reader.take
    for marker in reader.markers():
        if marker in (_STATE, _REGION):
            p = take(f"the pointer after {marker}")
            n = take(f"the size in bytes after {marker}")
            if not isinstance(p.type, T.PointerType) or not isinstance(n.type, T.IntType):
                raise ad_error(f"__enzyme_fixed_point: {marker} takes a pointer and a size in bytes", call)
            (fp.states if marker == _STATE else fp.regions).append((p, signed_i64(b, n)))
        elif marker == _REDUCTION:
            r = take("the value after enzyme_fp_reduction")
            if not isinstance(r.type, T.FloatType):
                raise ad_error("__enzyme_fixed_point: enzyme_fp_reduction takes a double", call)
            fp.reduction = r if r.type == T.f64 else b.cast("fpext", r, T.f64)
        elif marker == _MAX_ITERS:
            m = take("the count after enzyme_fp_max_iters")
            if not isinstance(m.type, T.IntType):
                raise ad_error("__enzyme_fixed_point: enzyme_fp_max_iters takes an integer", call)
            fp.max_iters = signed_i64(b, m)
        elif marker == FLAG_MARKER:
            fp.flag = take("the flag")
        elif marker == _CONTROL:
            c = take("the function after enzyme_fp_control")
            if not isinstance(c.type, T.PointerType):
                raise ad_error("__enzyme_fixed_point: enzyme_fp_control takes a function", call)
            fp.control = c
        else:
            raise ad_error(f"{marker} is not supported in __enzyme_fixed_point (known: enzyme_fp_state, "
                           "enzyme_fp_reduction, enzyme_fp_max_iters, enzyme_fp_control, "
                           "enzyme_checkpoint_region)", call)
    fp.args = reader.rest()
    if not fp.states:
        raise ad_error("__enzyme_fixed_point needs the state: enzyme_fp_state, pointer, bytes", call)
    params = step.args
    if len(params) != 1 + len(fp.args) or not isinstance(params[0].type, T.IntType) or \
            any(p.type != a.type for p, a in zip(params[1:], fp.args)):
        raise ad_error(f"__enzyme_fixed_point: '{step.name}' takes ({', '.join(str(p.type) for p in params)}): "
                       "the iteration index, then the arguments given after the markers", call)
    if not isinstance(step.return_type, T.IntType):
        raise ad_error(f"__enzyme_fixed_point: '{step.name}' must return whether to iterate again (an integer)",
                       call)
    return fp


# -- what every mode needs ------------------------------------------------------------------------------

def solve(module, fp: FixedPoint, b: IRBuilder) -> Value:
    """The primal loop, at ``b``; returns the index of the last step (the one that said stop)."""
    step = fp.step
    idx = step.args[0].type
    helper = internal_function(module, f"__enzcc_fp_solve_{step.name}", idx, [a.type for a in fp.args])
    entry, loop, done = (helper.append_block(n) for n in ("entry", "loop", "done"))
    IRBuilder.at_end(entry).br(loop)
    lb = IRBuilder.at_end(loop)
    i = lb.phi(idx, [(ConstantInt(idx, 0), entry)])
    r = lb.call(step, [i, *helper.args])
    i.add_incoming(lb.add(i, ConstantInt(idx, 1)), loop)
    lb.cond_br(lb.icmp("ne", r, ConstantInt(r.type, 0)), loop, done)
    IRBuilder.at_end(done).ret(i)
    return b.call(helper, list(fp.args))


def kept_memory(module, fp: FixedPoint, body) -> list[tuple[Value, Value]]:
    """The memory the adjoint/tangent iterations restore: the states, the checkpoint regions, and the mutable
    floating-point globals the step (``body``, its prepared copy) uses."""
    from enzcc.ad.globals import used_globals, writable_global

    out = list(fp.states) + list(fp.regions)
    listed = {base.symbol for base, _ in out if isinstance(base, GlobalRef)}
    dl = module.data_layout
    for sym in sorted(used_globals(body)):
        gv = writable_global(module, sym)
        if gv is not None and sym not in listed:
            out.append((module.global_ref(sym), ConstantInt(T.i64, dl.alloc_size(gv.value_type))))
    return out


def state_types(mode, fp: FixedPoint) -> list[T.FloatType]:
    """The floating-point type each state holds (its squared norm is summed in that type's elements)."""
    from enzcc.ad.memory import MemoryTypes, base_object, call_site_kinds

    body = mode.logic.body_of(fp.step) if mode.logic is not None else fp.step
    inner = MemoryTypes(body)
    out = []
    for p, _ in fp.states:
        kinds = set(mode.memtypes.kinds(p)) | call_site_kinds(fp.call, [p])[0]
        for a, q in zip(fp.args, body.args[1:]):
            if base_object(a) is base_object(p):
                kinds |= inner.kinds(q)
        if isinstance(base_object(p), GlobalRef):
            for inst in body.instructions():
                ptr = getattr(inst, "pointer", None)
                if ptr is not None and isinstance(base_object(ptr), GlobalRef) and \
                        base_object(ptr).symbol == base_object(p).symbol:
                    kinds |= inner.kinds(ptr)
        floats = {k for k in kinds if isinstance(k, T.FloatType)}
        if len(floats) != 1:
            raise ad_error("__enzyme_fixed_point: cannot tell the floating-point type of the state (it must hold "
                           "doubles or floats)", fp.call)
        out.append(floats.pop())
    return out


def drop_inactive_states(mode, fp: FixedPoint) -> None:
    """An outlined loop's carried values without derivatives (a tolerance it tightens) are kept, not iterated
    to convergence: they move from the states to the kept regions."""
    if fp.flag is None:
        return
    act = mode.activity
    fp.regions += [s for s in fp.states if not act.is_active_ptr(s[0])]
    fp.states = [s for s in fp.states if act.is_active_ptr(s[0])]


def step_kinds(mode, fp: FixedPoint) -> tuple[str, ...]:
    """The step's argument activity: pointers to memory with derivatives are ``dup``."""
    return loop_step_kinds(mode, fp.args, fp.call, FIXED_POINT)


def _begin(mode, inst: Call):
    """What both modes do first: read the call, emit the primal loop before it. Returns (the fixed point, the
    step's argument activity, a builder before the call, the index of the last step, whether derivatives flow
    through the loop)."""
    if mode.width > 1:
        raise ad_error("vector mode (enzyme_width) with __enzyme_fixed_point is not supported", inst)
    fp = parse(inst, mode.module)
    drop_inactive_states(mode, fp)
    kinds = step_kinds(mode, fp)
    b = IRBuilder.before(inst)
    last = solve(mode.module, fp, b)
    info = getattr(mode.module, "enzcc_active_globals", None)
    differentiated = DUP in kinds or (info is not None and bool(info.reached_by(fp.step.name)))
    if differentiated:
        for p, _ in fp.states:
            if not mode.activity.is_active_ptr(p):
                raise ad_error("__enzyme_fixed_point: the state has no derivative while the step's arguments do "
                               "(pass it to the step too)", inst)
    return fp, kinds, b, last, differentiated


# -- reverse mode -------------------------------------------------------------------------------------

def augment(mode, inst: Call):
    """Reverse mode's forward sweep: the primal loop, then a snapshot of what the adjoint iterations need.
    Returns the call that runs the loop, and the entry :func:`reverse` takes (None when no derivative flows
    through the loop)."""
    module = mode.module
    fp, kinds, b, last, differentiated = _begin(mode, inst)
    entry = None
    if differentiated:
        kept = kept_memory(module, fp, mode.logic.body_of(fp.step))
        snap = _snapshot(module, b, kept)
        aug, rev = mode.logic.split_of_call(inst, fp.step, kinds, False,
                                            args=[ConstantInt(fp.step.args[0].type, 0), *fp.args])
        entry = (snap, fp, kinds, aug, rev, kept, state_types(mode, fp), last)
    inst.erase()
    return last, entry


def kept_values(entry) -> list:
    """The forward values :func:`reverse` reads: the snapshot and the index of the last step."""
    return [entry[0], entry[-1]]


def reverse(mode, entry, block, b: IRBuilder) -> None:
    """Reverse sweep: iterate the adjoint of one step at the converged state."""
    snap, fp, kinds, aug, rev, kept, types, last = entry
    module = mode.module
    P = lambda v: mode._primal(v, block, b)  # noqa: E731
    args, shadows = [], []
    for a, k in zip(fp.args, kinds[1:]):
        args.append(P(a))
        if k == DUP:
            shadows.append(mode._shadow(a, block, b, snap))
    state_shadows = [mode._shadow(p, block, b, snap) for p, _ in fp.states]
    values = ([P(last)] + args + shadows + [P(snap)] + [P(x) for pair in kept for x in pair] +
              [x for s, (_, n) in zip(state_shadows, fp.states) for x in (s, P(n))] + _options(fp, P))
    helper = internal_function(module, f"__enzcc_fp_adjoint_{fp.step.name}", T.void, [v.type for v in values])
    _adjoint_body(module, helper, fp, kinds, aug, rev, len(args), len(shadows), len(kept), types)
    b.call(helper, values)


def _adjoint_body(module, fn, fp, kinds, aug, rev, nargs, nshadows, nkept, types) -> None:
    it = iter(fn.args)
    last = next(it)
    args = [next(it) for _ in range(nargs)]
    shadows = [next(it) for _ in range(nshadows)]
    snap = next(it)
    kept = [(next(it), next(it)) for _ in range(nkept)]
    states = [(next(it), next(it)) for _ in types]
    reduction, max_iters, control, flag = next(it), next(it), next(it), next(it)

    entry = fn.append_block("entry")
    b = IRBuilder.at_end(entry)
    cur = _snapshot(module, b, kept)  # the memory as the reverse sweep found it
    _set_flag(fp, b, flag, True)
    loop = _Loop(module, fn, b, reduction, max_iters, control)

    lb = loop.body
    _restore(module, lb, kept, snap)
    # (the augmented primal and the reverse take the shadows after all the arguments)
    tape = lb.extract_value(lb.call(aug, [last, *args, *shadows]), [0])
    lb.call(rev, [last, *args, *shadows, tape])
    norm = None
    for (s, n), ty in zip(states, types):
        q = lb.call(_sumsq(module, ty), [s, n, ConstantNull(T.ptr)])
        norm = q if norm is None else lb.fadd(norm, q)
    loop.close(norm)

    d = loop.done
    for s, n in states:
        d.memset(s, 0, n)
    _finish(module, fp, d, kept, cur, flag, [cur, snap])


# -- forward mode -------------------------------------------------------------------------------------

def forward(mode, inst: Call) -> None:
    """Forward mode: the loop, then the tangent of one step iterated at the converged state."""
    module = mode.module
    fp, kinds, b, last, differentiated = _begin(mode, inst)
    if differentiated:
        F = mode.logic.forward_of_call(inst, fp.step, kinds, [ConstantInt(fp.step.args[0].type, 0), *fp.args])
        kept = kept_memory(module, fp, mode.logic.body_of(fp.step))
        types = state_types(mode, fp)
        shadows = [mode.shadows.of(a, inst) for a, k in zip(fp.args, kinds[1:]) if k == DUP]
        state_shadows = [mode.shadows.of(p, inst) for p, _ in fp.states]
        values = ([last] + list(fp.args) + shadows + [x for pair in kept for x in pair] +
                  [x for s, (_, n) in zip(state_shadows, fp.states) for x in (s, n)] + _options(fp, lambda v: v))
        helper = internal_function(module, f"__enzcc_fp_tangent_{fp.step.name}", T.void, [v.type for v in values])
        _tangent_body(module, helper, fp, kinds, F, len(fp.args), len(shadows), len(kept), types)
        b.call(helper, values)
    inst.erase()


def _tangent_body(module, fn, fp, kinds, F, nargs, nshadows, nkept, types) -> None:
    it = iter(fn.args)
    last = next(it)
    args = [next(it) for _ in range(nargs)]
    shadows = [next(it) for _ in range(nshadows)]
    kept = [(next(it), next(it)) for _ in range(nkept)]
    states = [(next(it), next(it)) for _ in types]
    reduction, max_iters, control, flag = next(it), next(it), next(it), next(it)
    call_args, sh = [last], iter(shadows)
    for a, k in zip(args, kinds[1:]):
        call_args.append(a)
        if k == DUP:
            call_args.append(next(sh))

    entry = fn.append_block("entry")
    b = IRBuilder.at_end(entry)
    snap = _snapshot(module, b, kept)  # the state the loop ended in
    prev = _snapshot(module, b, states)  # the states' tangents before each pass
    for s, n in states:
        b.memset(s, 0, n)  # the initial guess's tangent has no effect
    _set_flag(fp, b, flag, True)
    loop = _Loop(module, fn, b, reduction, max_iters, control)

    lb = loop.body
    _restore(module, lb, kept, snap)
    _copy_into(module, lb, states, prev)
    lb.call(F, call_args)
    norm, off = None, ConstantInt(T.i64, 0)
    for (s, n), ty in zip(states, types):
        q = lb.call(_sumsq(module, ty), [s, n, lb.gep(T.i8, prev, [off])])
        norm = q if norm is None else lb.fadd(norm, q)
        off = lb.add(off, n)
    loop.close(norm)

    _finish(module, fp, loop.done, kept, snap, flag, [snap, prev])


# -- the primal, where no derivative is taken -------------------------------------------------------------

def lower(module) -> int:
    """Replace each remaining ``__enzyme_fixed_point`` call (code that is not differentiated) by its loop."""
    calls = calls_named(module, FIXED_POINT)
    for inst in calls:
        solve(module, parse(inst, module), IRBuilder.before(inst))
        inst.erase()
    return len(calls)


# -- helpers -------------------------------------------------------------------------------------------

class _Loop:
    """The iteration and its convergence test: ``body`` (a builder in the loop) runs, then :meth:`close`
    with the squared norm decides whether to go round again; ``done`` follows."""

    def __init__(self, module, fn, b: IRBuilder, reduction, max_iters, control):
        self.module, self.fn = module, fn
        self.reduction, self.control = reduction, control
        red = b.alloca(T.f64)
        b.store(b.select(b.fcmp("olt", reduction, ConstantFloat(T.f64, 0.0)),
                         ConstantFloat(T.f64, 1e-12), reduction), red)
        self.red = red
        self.cumul = b.alloca(T.f64)
        self.limit = b.select(b.icmp("slt", max_iters, ConstantInt(T.i64, 0)), ConstantInt(T.i64, 1000), max_iters)
        self.head = fn.append_block("iterate")
        self.done_block = fn.append_block("done")
        self.done = IRBuilder.at_end(self.done_block)
        has_control = b.icmp("ne", control, ConstantNull(T.ptr))
        self.has_control = has_control
        ask, start = fn.append_block("ask"), b.block
        b.cond_br(has_control, ask, self.head)
        ab = IRBuilder.at_end(ask)
        ab.store(ConstantFloat(T.f64, -1.0), self.cumul)
        go = self._ask(ab)
        ab.cond_br(go, self.head, self.done_block)
        self.body = IRBuilder.at_end(self.head)
        self.k = self.body.phi(T.i64, [(ConstantInt(T.i64, 0), start), (ConstantInt(T.i64, 0), ask)])
        self.prev = self.body.phi(T.f64, [(ConstantFloat(T.f64, float("inf")), start),
                                             (ConstantFloat(T.f64, float("inf")), ask)])
        self.first = self.body.phi(T.f64, [(ConstantFloat(T.f64, 0.0), start),
                                              (ConstantFloat(T.f64, 0.0), ask)])

    def _ask(self, b: IRBuilder) -> Value:
        ctl = b.call(self.control, [self.cumul, self.red], function_type=T.FunctionType(T.i32, (T.ptr, T.ptr)))
        return b.icmp("ne", ctl, ConstantInt(T.i32, 0))

    def close(self, norm: Value) -> None:
        b = self.body
        k1 = b.add(self.k, ConstantInt(T.i64, 1))
        first = b.select(b.icmp("eq", self.k, ConstantInt(T.i64, 0)), norm, self.first)
        # the test: above the reduction of the first value, and not growing again after five iterations
        red = b.load(T.f64, self.red)
        above = b.fcmp("ogt", norm, b.fmul(red, first))
        growing = b.and_(b.icmp("sgt", k1, ConstantInt(T.i64, 5)), b.fcmp("ogt", norm, self.prev))
        tested = b.and_(above, b.xor(growing, ConstantInt(T.i1, 1)))
        block = b.block
        ask, merge = self.fn.append_block("control"), self.fn.append_block("decided")
        b.cond_br(self.has_control, ask, merge)
        ab = IRBuilder.at_end(ask)
        ab.store(norm, self.cumul)
        said = self._ask(ab)
        ab.br(merge)
        mb = IRBuilder.at_end(merge)
        go = mb.phi(T.i1, [(tested, block), (said, ask)])
        under = mb.or_(mb.icmp("eq", self.limit, ConstantInt(T.i64, 0)), mb.icmp("slt", k1, self.limit))
        mb.cond_br(mb.and_(go, under), self.head, self.done_block)
        self.k.add_incoming(k1, merge)
        self.prev.add_incoming(norm, merge)
        self.first.add_incoming(first, merge)


def _options(fp: FixedPoint, P) -> list[Value]:
    return [P(fp.reduction) if fp.reduction is not None else ConstantFloat(T.f64, -1.0),
            P(fp.max_iters) if fp.max_iters is not None else ConstantInt(T.i64, -1),
            P(fp.control) if fp.control is not None else ConstantNull(T.ptr),
            P(fp.flag) if fp.flag is not None else ConstantNull(T.ptr)]


def _finish(module, fp: FixedPoint, b: IRBuilder, kept, saved: Value, flag: Value, buffers) -> None:
    """After the iterations: the kept memory as ``saved`` holds it, the flag down, ``buffers`` freed."""
    _restore(module, b, kept, saved)
    _set_flag(fp, b, flag, False)
    free = module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))
    for buf in buffers:
        b.call(free, [buf])
    b.ret_void()


def _set_flag(fp: FixedPoint, b: IRBuilder, flag: Value, on: bool) -> None:
    """Store ``on`` into an outlined loop's flag (:attr:`FixedPoint.flag`)."""
    if fp.flag is not None:
        b.store(ConstantInt(T.i8, int(on)), flag)


def _snapshot(module, b: IRBuilder, regions) -> Value:
    """A heap copy of ``regions`` (pointer, bytes), one after the other."""
    total = ConstantInt(T.i64, 0)
    for _, n in regions:
        total = b.add(total, n)
    malloc = module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,)))
    buf = b.call(malloc, [b.add(total, ConstantInt(T.i64, 1))])
    _copy_into(module, b, regions, buf)
    return buf


def _copy_into(module, b: IRBuilder, regions, buf) -> None:
    off = ConstantInt(T.i64, 0)
    for p, n in regions:
        b.memcpy(b.gep(T.i8, buf, [off]), p, n)
        off = b.add(off, n)


def _restore(module, b: IRBuilder, regions, buf) -> None:
    off = ConstantInt(T.i64, 0)
    for p, n in regions:
        b.memcpy(p, b.gep(T.i8, buf, [off]), n)
        off = b.add(off, n)


def _sumsq(module, ty: T.FloatType) -> Function:
    """``sumsq(p, bytes, prev)``: the sum of squares of the ``ty`` elements of ``p`` (minus ``prev``'s, when
    ``prev`` is not null), in double."""
    return round_function(module, f"__enzcc_fp_sumsq_{ty}", T.FunctionType(T.f64, (T.ptr, T.i64, T.ptr)),
                          lambda fn: _sumsq_body(fn, ty), ["p", "bytes", "prev"])


def _sumsq_body(fn, ty: T.FloatType) -> None:
    module = fn.module
    p, nbytes, prev = fn.args
    entry, loop, done = (fn.append_block(n) for n in ("entry", "loop", "done"))
    b = IRBuilder.at_end(entry)
    count = b.udiv(nbytes, ConstantInt(T.i64, module.data_layout.store_size(ty)))
    has_prev = b.icmp("ne", prev, ConstantNull(T.ptr))
    b.cond_br(b.icmp("eq", count, ConstantInt(T.i64, 0)), done, loop)
    lb = IRBuilder.at_end(loop)
    i = lb.phi(T.i64, [(ConstantInt(T.i64, 0), entry)])
    acc = lb.phi(T.f64, [(ConstantFloat(T.f64, 0.0), entry)])
    v = lb.load(ty, lb.gep(ty, p, [i]))
    v = v if ty == T.f64 else lb.cast("fpext", v, T.f64)
    old = lb.select(has_prev, prev, p)  # (no prev: subtract zero, read from p only to have an address)
    w = lb.load(ty, lb.gep(ty, old, [i]))
    w = w if ty == T.f64 else lb.cast("fpext", w, T.f64)
    diff = lb.fsub(v, lb.select(has_prev, w, ConstantFloat(T.f64, 0.0)))
    nacc = lb.fadd(acc, lb.fmul(diff, diff))
    nxt = lb.add(i, ConstantInt(T.i64, 1))
    i.add_incoming(nxt, loop)
    acc.add_incoming(nacc, loop)
    lb.cond_br(lb.icmp("eq", nxt, count), done, loop)
    db = IRBuilder.at_end(done)
    r = db.phi(T.f64, [(ConstantFloat(T.f64, 0.0), entry), (nacc, loop)])
    db.ret(r)



# -- the call rule ----------------------------------------------------------------------------------------

# (its step runs the program's code, and its reverse is made once for all lanes of vector mode)
register(loop_rule("fixed point", forward, augment, kept_values, reverse), prefixes=(FIXED_POINT,))
register_called_function(step_name)
register_lowering(30, is_fixed_point, lower)


__all__ = ["FIXED_POINT", "augment", "forward", "is_fixed_point", "kept_values", "lower", "parse", "reverse",
           "step_name"]
