"""A call family added from outside the engine: this file registers rules for a library function that ships its
own derivative routines (``ext_sumsq(x, n) = sum x[i]^2``, with ``ext_sumsq_grad`` and ``ext_sumsq_tangent``),
touching no file of ``enzcc/ad``. Gradients and tangents are checked against the analytic values and finite
differences, run with llvmlite's JIT; the lookup order of the registry is checked on its own."""

import ctypes

import pytest

from enzcc.ad import differentiate_text, registry
from enzcc.ad.errors import ADError
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc_testing import jit

HEADER = """target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"
@enzyme_dup = external global i32
declare double @__enzyme_autodiff(ptr, ...)
declare double @__enzyme_fwddiff(ptr, ...)
declare double @{name}(ptr, i64)
declare double @llvm.sin.f64(double)
"""

PROGRAM = """
define double @f(ptr %x, i64 %n) {{
entry:
  %s = call double @{name}(ptr %x, i64 %n)
  %r = call double @llvm.sin.f64(double %s)
  ret double %r
}}
define void @grad(ptr %x, ptr %dx, i64 %n) {{
  %r = call double (ptr, ...) @__enzyme_autodiff(ptr @f, ptr %x, ptr %dx, i64 %n)
  ret void
}}
define double @tangent(ptr %x, ptr %dx, i64 %n) {{
  %d = load i32, ptr @enzyme_dup
  %r = call double (ptr, ...) @__enzyme_fwddiff(ptr @f, i32 %d, ptr %x, ptr %dx, i64 %n)
  ret double %r
}}
"""

# -- the library: ext_sumsq and its derivative routines, as native functions ------------------------------------

_SUMSQ = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.POINTER(ctypes.c_double), ctypes.c_int64)
_GRAD = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double), ctypes.c_int64,
                         ctypes.c_double)
_TANGENT = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
                            ctypes.c_int64)


@_SUMSQ
def _sumsq(x, n):
    return sum(x[i] * x[i] for i in range(n))


@_GRAD
def _sumsq_grad(x, dx, n, d):
    for i in range(n):
        dx[i] += 2 * x[i] * d


@_TANGENT
def _sumsq_tangent(x, dx, n):
    return sum(2 * x[i] * dx[i] for i in range(n))


def _add_symbols():
    import llvmlite.binding as llvm

    for name, fn in (("ext_sumsq", _sumsq), ("ext_sumsq_grad", _sumsq_grad),
                     ("ext_sumsq_tangent", _sumsq_tangent)):
        llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)


# -- its family: two hooks, registered from here ---------------------------------------------------------------

def _forward(mode, call) -> bool:
    x, n = call.args
    if mode.activity.is_active_ptr(x):
        fn = mode.module.get_or_insert_function("ext_sumsq_tangent", T.FunctionType(T.f64, (T.ptr, T.ptr, T.i64)))
        mode._set(call, IRBuilder.after(call).call(fn, [x, mode.shadows.of(x, call), n]))
    return True


def _reverse(mode, call, entry, block, b) -> bool:
    x, n = call.args
    if mode.activity.is_active(call) and mode.activity.is_active_ptr(x):
        d = mode._take_adjoint(b, call)
        fn = mode.module.get_or_insert_function("ext_sumsq_grad",
                                                T.FunctionType(T.void, (T.ptr, T.ptr, T.i64, T.f64)))
        b.call(fn, [mode._primal(x, block, b), mode._shadow(x, block, b, call), mode._primal(n, block, b), d])
    return True


if registry.rule_named("ext_sumsq") is None:
    registry.register(registry.CallRule("ext", writes_no_memory=True, forward=_forward, reverse=_reverse),
                      names=("ext_sumsq",))


def _f(xs):
    import math

    return math.sin(sum(v * v for v in xs))


def test_a_family_registered_from_outside_the_engine_gives_exact_derivatives():
    import math

    out, count = differentiate_text(HEADER.format(name="ext_sumsq") + PROGRAM.format(name="ext_sumsq"))
    assert count == 2 and "@ext_sumsq_grad(" in out and "@ext_sumsq_tangent(" in out
    _add_symbols()
    engine = jit(out)
    xs = [0.3, -0.2, 0.5, 0.1]
    n = len(xs)
    arr = ctypes.c_double * n
    grad = ctypes.CFUNCTYPE(None, arr, arr, ctypes.c_int64)(engine.get_function_address("grad"))
    x, dx = arr(*xs), arr(*([0.0] * n))
    grad(x, dx, n)
    s = sum(v * v for v in xs)
    h = 1e-6
    for i in range(n):
        assert dx[i] == pytest.approx(math.cos(s) * 2 * xs[i], rel=1e-12)
        up, down = list(xs), list(xs)
        up[i] += h
        down[i] -= h
        assert dx[i] == pytest.approx((_f(up) - _f(down)) / (2 * h), rel=1e-6)
    tangent = ctypes.CFUNCTYPE(ctypes.c_double, arr, arr, ctypes.c_int64)(engine.get_function_address("tangent"))
    direction = [1.0, -2.0, 0.5, 3.0]
    t = tangent(arr(*xs), arr(*direction), n)
    assert t == pytest.approx(math.cos(s) * sum(2 * a * d for a, d in zip(xs, direction)), rel=1e-12)


def test_without_a_rule_the_call_is_refused_by_name():
    text = HEADER.format(name="ext_unknown") + PROGRAM.format(name="ext_unknown")
    with pytest.raises(ADError, match="ext_unknown"):
        differentiate_text(text)


def test_lookup_order_first_name_prefix_predicate():
    class Call:
        def __init__(self, name):
            self.callee_name = name
            self.module = None
            self.args = []
            self.type = None

    by_name = registry.CallRule("t-name")
    by_prefix = registry.CallRule("t-prefix")
    longer = registry.CallRule("t-longer-prefix")
    by_match = registry.CallRule("t-match")
    registry.register(by_name, names=("zz_enzcc_test_a",))
    registry.register(by_prefix, prefixes=("zz_enzcc_test_",))
    registry.register(longer, prefixes=("zz_enzcc_test_bb",))
    registry.register(by_match, match=lambda c: (c.callee_name or "").startswith("yy_enzcc_test"))
    assert registry.rule_for(Call("zz_enzcc_test_a")) is by_name
    assert registry.rule_for(Call("zz_enzcc_test_c")) is by_prefix
    assert registry.rule_for(Call("zz_enzcc_test_bbq")) is longer
    assert registry.rule_for(Call("yy_enzcc_test")) is by_match
    assert registry.rule_named("yy_enzcc_test") is None  # (predicates need the call)
    with pytest.raises(ValueError, match="zz_enzcc_test_a"):
        registry.register(registry.CallRule("t-other"), names=("zz_enzcc_test_a",))
