"""Every derivative rule in derivatives.yaml against central finite differences."""

import random

import pytest

from enzcc.ad.rules import PRIMALS, PythonBackend, evaluate, load_rules, parse_expr

TABLE = load_rules()
ALL = [("instructions", r) for r in TABLE.instructions.values()] + [("functions", r) for r in TABLE.functions.values()]


def test_parse_expr():
    assert parse_expr("(fmul y (f pow x (fsub y 1.0)))") == ("fmul", "y", ("f", "pow", "x", ("fsub", "y", 1.0)))
    assert parse_expr("ret") == "ret" and parse_expr("-1.0") == -1.0 and parse_expr(2) == 2.0
    for bad in ("(fmul x", "fmul x)", "(fmul x))"):
        with pytest.raises(ValueError):
            parse_expr(bad)


@pytest.mark.parametrize("kind,rule", ALL, ids=[r.name for _, r in ALL])
def test_rule_matches_finite_differences(kind, rule):
    assert rule.name in PRIMALS, f"no Python primal for {rule.name}"
    f = PRIMALS[rule.name]
    rng = random.Random(hash(rule.name) & 0xFFFF)
    domain = rule.domain or tuple((-2.0, 2.0) for _ in rule.args)
    backend = PythonBackend()
    for _ in range(5):
        xs = [rng.uniform(lo, hi) if a not in rule.inactive else int(lo) for a, (lo, hi) in zip(rule.args, domain)]
        ret = f(*xs)
        env = dict(zip(rule.args, xs), ret=ret)
        for i, a in enumerate(rule.args):
            if a in rule.inactive:
                continue
            analytic = evaluate(rule.partial(a), env, backend)
            h = 1e-6 * max(1.0, abs(xs[i]))
            up, down = list(xs), list(xs)
            up[i] += h
            down[i] -= h
            fd = (f(*up) - f(*down)) / (2 * h)
            assert analytic == pytest.approx(fd, rel=1e-5, abs=1e-6), (rule.name, a, xs)


def test_lookup_by_c_name_and_intrinsic():
    assert TABLE.for_call("sin").name == "sin" and TABLE.for_call("sinf").name == "sin"
    assert TABLE.for_call("llvm.sin.f64").name == "sin"
    assert TABLE.for_call("llvm.fmuladd.v4f64").name == "fmuladd"
    assert TABLE.for_call("llvm.powi.f64.i32").name == "powi"
    assert TABLE.for_call("llvm.maxnum.f32").name == "fmax"
    assert TABLE.for_call("printf") is None and TABLE.for_call("llvm.memcpy.p0.p0.i64") is None


def test_every_libm_function_the_issue_names_has_a_rule():
    for name in "sin cos tan exp log log10 pow sqrt cbrt fabs fmax fmin tanh sinh cosh atan atan2 asin acos erf hypot".split():
        assert TABLE.for_call(name) is not None, name
    for intr in ("llvm.fmuladd.f64", "llvm.powi.f32.i32", "llvm.copysign.f64", "llvm.maxnum.f64", "llvm.minnum.f64"):
        assert TABLE.for_call(intr) is not None, intr
