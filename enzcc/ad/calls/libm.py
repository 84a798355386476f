"""libm and LLVM's math intrinsics: the derivative rules of ``derivatives.yaml`` (:mod:`enzcc.ad.rules`), for
``sin``, ``llvm.sin.f64``, ``llvm.sin.v4f32`` and every other name a rule lists (and the functions
``__enzyme_function_like`` says behave like one); ``llvm.vector.reduce.fadd``; and the intrinsics that carry no
derivative (lifetime markers, assumptions, integer arithmetic...).
"""

from __future__ import annotations

from enzcc.ad.activity import has_float
from enzcc.ad.emit import emit_partial, times, zero
from enzcc.ad.hints import rule_name
from enzcc.ad.registry import CallRule, register
from enzcc.ad.rules import load_rules
from enzcc.ir.builder import IRBuilder

#: intrinsics with no derivative and nothing to do in either sweep (they write no memory the function reads)
INACTIVE_INTRINSICS = ("llvm.lifetime.", "llvm.assume", "llvm.experimental.noalias.scope.decl", "llvm.dbg.",
                       "llvm.prefetch", "llvm.stacksave", "llvm.stackrestore", "llvm.invariant.", "llvm.trap",
                       "llvm.umax", "llvm.umin", "llvm.smax", "llvm.smin", "llvm.abs", "llvm.ctpop", "llvm.ctlz",
                       "llvm.cttz", "llvm.fshl", "llvm.fshr", "llvm.bswap", "llvm.is.fpclass", "llvm.sadd.",
                       "llvm.uadd.", "llvm.ssub.", "llvm.usub.", "llvm.smul.", "llvm.umul.", "llvm.expect",
                       "llvm.objectsize", "llvm.vscale",
                       # integers of floats (a rounding, a saturating conversion as Rust's `as i32`): piecewise
                       # constant, a zero derivative
                       "llvm.lround.", "llvm.llround.", "llvm.lrint.", "llvm.llrint.", "llvm.fptosi.sat.",
                       "llvm.fptoui.sat.")
#: libm functions whose result is an integer of a float (piecewise constant): no derivative
INTEGER_RESULT_CALLS = ("lround", "lroundf", "lroundl", "llround", "llroundf", "llroundl", "lrint", "lrintf",
                        "lrintl", "llrint", "llrintf", "llrintl", "ilogb", "ilogbf", "ilogbl")


def _table_rule(call):
    """The ``derivatives.yaml`` rule of a call, or None."""
    name = call.callee_name
    return load_rules().for_call(rule_name(call.module, name)) if name else None


def _forward(mode, inst) -> bool:
    if any(id(a) in mode.tangents for a in inst.args) and has_float(inst.type):
        mode._rule_tangent(IRBuilder.after(inst), _table_rule(inst), inst.args, inst)
    return True


def _reverse(mode, inst, entry, block, b: IRBuilder) -> bool:
    act = mode.activity
    if not act.is_active(inst):
        return True  # e.g. its result reaches no output: nothing flows back
    rule = _table_rule(inst)
    d = mode._take_adjoint(b, inst)
    P = lambda v: mode._primal(v, block, b)  # noqa: E731
    env = {n: (lambda v=v: P(v)) for n, v in zip(rule.args, inst.args)}
    env["ret"] = lambda: P(inst)
    for n, v in zip(rule.args, inst.args):
        if n in rule.inactive or not (act.is_active(v) or mode._is_out(v)):
            continue
        partial = emit_partial(b, rule, n, env, inst.type)
        mode._add_adjoint(b, v, times(b, partial, d))
    return True


def _forward_reduce(mode, inst) -> bool:
    if any(id(a) in mode.tangents for a in inst.args):
        start, vec = inst.args
        mode._set(inst, IRBuilder.after(inst).call_intrinsic("llvm.vector.reduce.fadd",
                                                            [mode._t(start), mode._t(vec)],
                                                            overload_types=[vec.type]))
    return True


def _reverse_reduce(mode, inst, entry, block, b: IRBuilder) -> bool:
    if mode.activity.is_active(inst):
        d = mode._take_adjoint(b, inst)
        start, vec = inst.args
        mode._add_adjoint(b, start, d)
        v = b.insert_element(zero(vec.type), d, 0)
        mode._add_adjoint(b, vec, b.shuffle_vector(v, zero(vec.type), [0] * vec.type.count))
    return True


register(CallRule("intrinsics", inactive=True, writes_no_memory=True), prefixes=INACTIVE_INTRINSICS)
register(CallRule("libm", inactive=True, writes_no_memory=True), names=INTEGER_RESULT_CALLS)
register(CallRule("intrinsics", forward=_forward_reduce, reverse=_reverse_reduce),
         prefixes=("llvm.vector.reduce.fadd",))
register(CallRule("libm", writes_no_memory=True, pure=True, forward=_forward, reverse=_reverse),
         match=lambda call: _table_rule(call) is not None)

__all__ = ["INACTIVE_INTRINSICS", "INTEGER_RESULT_CALLS"]
