"""frexp, ldexp, scalbn, modf, fma, remainder, lgamma, tgamma, in double, float and long double, in both
modes at -O0..-O3, against analytic derivatives and central differences (computed in long double by the
program itself). ``modf`` and ``frexp`` also write through a pointer: the value written has no derivative,
and memory with derivatives written that way loses its old derivative."""

import math

import pytest

from adharness import build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

# name -> (C body over x (T is the type, S the suffix of the C functions), analytic derivative at X)
X = 2.3
DIGAMMA_X = 0.600039880363969  # psi(2.3)
CASES = {
    "frexp": ("int e; T m = frexp##S(x, &e); return m * m + e;", 2 * (X / 4) / 4),
    "ldexp": ("return ldexp##S(x * x, 3);", 16 * X),
    "scalbn": ("return scalbn##S(x, -2) * x;", X / 2),
    "modf": ("T ip; T fr = modf##S(x, &ip); return fr * fr + ip * x;", 2 * (X - 2) + 2),
    "fma": ("return fma##S(x, x, (T)2 * x);", 2 * X + 2),
    "remainder": ("return remainder##S((T)5.3 * x, (T)2.0);", 5.3),
    "lgamma": ("return lgamma##S(x);", DIGAMMA_X),
    "tgamma": ("return tgamma##S(x);", math.gamma(X) * DIGAMMA_X),
}

TYPES = {"double": ("double", ""), "float": ("float", "f"), "long double": ("long double", "l")}


def _source(ty: str, suffix: str) -> str:
    out = [f"typedef {ty} T;\n"]
    for name, (body, _) in CASES.items():
        body = body.replace("##S", suffix)
        out.append(f"T f_{name}(T x) {{ {body} }}\n")
    out.append("typedef T (*grad_t)(void *, T);\ntypedef T (*tang_t)(void *, T, T);\n")
    out.append("int main(void) {\n  const T x = 2.3L; const long double h = 1e-4L;\n")
    for name in CASES:
        out.append(f'  report("rev.{name}", (double)((grad_t)__enzyme_autodiff)((void *)f_{name}, x));\n')
        out.append(f'  report("fwd.{name}", (double)((tang_t)__enzyme_fwddiff)((void *)f_{name}, x, (T)1));\n')
        out.append(f'  report("fd.{name}", (double)(((long double)f_{name}(x + h) - f_{name}(x - h)) / (2 * h)));\n')
    out.append("  return 0;\n}\n")
    return "".join(out)


@pytest.mark.parametrize("ty", list(TYPES))
@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_libm_functions(enzcc, opt, ty):
    if ty != "double" and opt in ("-O1", "-O3"):
        pytest.skip("float and long double: -O0 and -O2 suffice")
    c_ty, suffix = TYPES[ty]
    v = build_and_run(enzcc, _source(c_ty, suffix), opt)
    rel = {"double": 1e-12, "float": 2e-5, "long double": 1e-12}[ty]
    for name, (_, analytic) in CASES.items():
        for mode in ("rev", "fwd"):
            assert v[f"{mode}.{name}"] == pytest.approx(analytic, rel=rel, abs=rel), (mode, name, ty)
        # float: the difference quotient at h = 1e-4 of a float function is only good to ~1e-3
        assert v[f"fd.{name}"] == pytest.approx(analytic, rel=1e-6 if ty != "float" else 5e-3), (name, ty)


def test_modf_into_memory_with_derivatives(enzcc):
    """``modf`` writes the integral part over x[1], whose derivative must go (reverse) or be zero (forward)."""
    src = r"""
double g(double *x) { double fr = modf(x[0], &x[1]); return fr * x[1] + x[1]; }
int main(void) {
  double x[2] = {2.3, 5.0}, dx[2] = {0, 7.0};
  __enzyme_autodiff((void *)g, x, dx);
  report("rev.dx0", dx[0]);
  report("rev.dx1", dx[1]);
  double y[2] = {2.3, 5.0}, ty[2] = {1.0, 1.0};
  report("fwd", __enzyme_fwddiff((void *)g, y, ty));
  return 0;
}
"""
    for opt in ("-O0", "-O2"):
        v = build_and_run(enzcc, src, opt)
        assert v["rev.dx0"] == pytest.approx(2.0)  # d/dx0 of fr * ip + ip, ip = 2
        assert v["rev.dx1"] == 0.0  # the old x[1] is overwritten (never read): its seed is consumed, none added
        assert v["fwd"] == pytest.approx(2.0)


def test_digamma_matches_python():
    from enzcc.ad.rules import digamma

    for x, expected in ((1.0, -0.5772156649015329), (0.5, -1.9635100260214235), (2.3, DIGAMMA_X),
                        (10.5, 2.3030010342976857), (-0.5, 0.03648997397857652)):
        assert digamma(x) == pytest.approx(expected, rel=1e-12, abs=1e-13)


# At the edges, Enzyme's conventions: fabs's derivative follows the sign bit (-1 at -0.0, as copysign(1, x)),
# and sqrt's derivative at 0 is 0 (not 0 * inf = NaN), so a guarded sqrt(0) passes a zero tangent through.
EDGES = r"""
double absf(double x) { return fabs(x); }
double root(double x) { return sqrt(x * x * x); }   /* x^1.5: derivative 0 at 0 */
double nested(double x) { return sqrt(x) * 0.0 + x; }
int main(void) {
  report("abs.rev", __enzyme_autodiff((void *)absf, -0.0));
  report("abs.fwd", __enzyme_fwddiff((void *)absf, -0.0, 1.0));
  report("abs.pos", __enzyme_fwddiff((void *)absf, 0.0, 1.0));
  report("root.rev", __enzyme_autodiff((void *)root, 0.0));
  report("root.fwd", __enzyme_fwddiff((void *)root, 0.0, 1.0));
  report("nested.fwd", __enzyme_fwddiff((void *)nested, 0.0, 1.0));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_fabs_at_negative_zero_and_sqrt_at_zero(enzcc, opt):
    v = build_and_run(enzcc, EDGES, opt)
    assert (v["abs.rev"], v["abs.fwd"], v["abs.pos"]) == (-1.0, -1.0, 1.0)
    assert (v["root.rev"], v["root.fwd"]) == (0.0, 0.0)
    assert v["nested.fwd"] == 1.0  # sqrt(0)'s tangent is 0 here, not NaN
