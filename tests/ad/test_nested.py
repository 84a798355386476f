"""Nested AD: a derivative of a function that itself calls ``__enzyme_autodiff`` / ``__enzyme_fwddiff``
(second derivatives: forward over reverse, reverse over forward, reverse over reverse, forward over forward),
at -O0..-O3 and with every ``--ad-inline`` policy, against a hand-written gradient differenced centrally.
The inner call is differentiated first and the optimized result is differentiated again, as for the first
level; the inner derivative's own tape (records of floats, integers and pointers in one growable buffer)
is differentiated like any other memory."""

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

OPTS = ["-O0", "-O1", "-O2", "-O3"]

# f(x) = sum_i p_i^2 with p_i = p_{i-1} sin(x_i) + x_i overwritten in a loop (its values go on the tape)
THREE_WAYS = r"""#define N 5
/* p is overwritten every iteration: its values go on the tape */
static double f(const double *x, int n) {
  double s = 0, p = 1;
  for (int i = 0; i < n; i++) { p = p * sin(x[i]) + x[i]; s += p * p; }
  return s;
}
/* the same gradient by hand */
static void grad_by_hand(const double *x, int n, double *g) {
  double p[N + 1]; p[0] = 1;
  for (int i = 0; i < n; i++) p[i + 1] = p[i] * sin(x[i]) + x[i];
  double dp = 0;
  for (int i = n - 1; i >= 0; i--) {
    dp += 2 * p[i + 1];
    g[i] = dp * (p[i] * cos(x[i]) + 1);
    dp = dp * sin(x[i]);
  }
}
void grad(const double *x, double *g, int n) {
  __enzyme_autodiff((void *)f, enzyme_dup, x, g, enzyme_const, n);
}
/* directional derivative of f along v (forward mode) */
double dirder(const double *x, const double *v, int n) {
  return __enzyme_fwddiff((void *)f, enzyme_dup, x, v, enzyme_const, n);
}
/* <w, grad f(x)> (reverse mode) */
double wgrad(const double *x, const double *w, int n) {
  double g[N] = {0};
  grad(x, g, n);
  double s = 0;
  for (int i = 0; i < n; i++) s += w[i] * g[i];
  return s;
}
int main(void) {
  double x[N] = {0.3, -0.7, 1.1, 0.5, -0.2}, v[N] = {0.4, 1.0, -0.6, 0.2, 0.9};
  double g[N] = {0}, tg[N] = {0}, h1[N] = {0}, h2[N] = {0};
  /* forward over reverse: H v */
  __enzyme_fwddiff((void *)grad, enzyme_dup, x, v, enzyme_dup, g, tg, enzyme_const, N);
  /* reverse over forward: grad_x <grad f, v> = H v */
  __enzyme_autodiff((void *)dirder, enzyme_dup, x, h1, enzyme_const, v, enzyme_const, N);
  /* reverse over reverse: grad_x <w, grad f> = H w, with w = v */
  __enzyme_autodiff((void *)wgrad, enzyme_dup, x, h2, enzyme_const, v, enzyme_const, N);
  double gh[N], xp[N], xm[N], gp[N], gm[N];
  grad_by_hand(x, N, gh);
  for (int i = 0; i < N; i++) { xp[i] = x[i] + 1e-5 * v[i]; xm[i] = x[i] - 1e-5 * v[i]; }
  grad_by_hand(xp, N, gp); grad_by_hand(xm, N, gm);
  for (int i = 0; i < N; i++) {
    char k[32];
    sprintf(k, "g.%d", i); report(k, g[i]);
    sprintf(k, "gh.%d", i); report(k, gh[i]);
    sprintf(k, "fwdrev.%d", i); report(k, tg[i]);
    sprintf(k, "revfwd.%d", i); report(k, h1[i]);
    sprintf(k, "revrev.%d", i); report(k, h2[i]);
    sprintf(k, "fd.%d", i); report(k, (gp[i] - gm[i]) / 2e-5);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt,inline", [(o, i) for o in OPTS for i in ("auto", "none")] +
                         [("-O0", "all"), ("-O2", "all")])
def test_hessian_vector_products_three_ways(enzcc, opt, inline):
    v = build_and_run(enzcc, THREE_WAYS, opt, extra=[f"--ad-inline={inline}"])
    assert_close(v, "g.", "gh.", rel=1e-12, abs_=1e-14)  # the first-order gradient is right
    for way in ("fwdrev.", "revfwd.", "revrev."):
        assert_close(v, way, "fd.", rel=1e-6)
        assert_close(v, way, "fwdrev.", rel=1e-12, abs_=1e-14)
    assert all(v[f"fwdrev.{i}"] != 0 for i in range(5))


# the shape the framework plugins use (enzcc_plugins, ABI 3): arguments and their shadows in arrays of
# pointers, an active scalar whose gradient is stored through a pointer, and forward mode over that
POINTER_TABLES = r"""
#include <math.h>
#include <stddef.h>
#include <stdio.h>
extern int enzyme_dup, enzyme_dupnoneed, enzyme_const, enzyme_out;
double __enzyme_autodiff(void *, ...);
void __enzyme_fwddiff(void *, ...);
void f(const double *x, size_t n, double alpha, double *y) {
  double p = 1;
  for (size_t i = 0; i < n; i++) { p = p * sin(x[i]) + alpha * x[i]; y[i] = p * p; }
}
void f_vjp(void *const *a, void *const *d) {
  double ga = __enzyme_autodiff((void *)f, enzyme_dup, a[0], d[0], enzyme_const, *(size_t *)a[1],
                                enzyme_out, *(double *)a[2], enzyme_dupnoneed, a[3], d[3]);
  *(double *)d[2] = ga;
}
void f_vjp_jvp(void *const *a, void *const *d, void *const *ta, void *const *td) {
  __enzyme_fwddiff((void *)f_vjp, enzyme_dup, a, ta, enzyme_dup, d, td);
}
int main() {
  enum { N = 4 };
  double x[N] = {0.3, -0.7, 1.1, 0.5}, alpha = 0.8, y[N], dx[N] = {0}, seed[N] = {1, 0.5, -1, 2}, galpha = 0;
  size_t n = N;
  double tx[N] = {0.4, 1.0, -0.6, 0.2}, talpha = 0.3, tdx[N] = {0}, tseed[N] = {0}, tgalpha = 0, ty[N];
  void *a[4] = {x, &n, &alpha, y}, *d[4] = {dx, NULL, &galpha, seed};
  void *ta[4] = {tx, NULL, &talpha, ty}, *td[4] = {tdx, NULL, &tgalpha, tseed};
  f_vjp_jvp(a, d, ta, td);
  for (int i = 0; i < N; i++) printf("%g %g\n", dx[i], tdx[i]);
  printf("galpha %g tgalpha %g\n", galpha, tgalpha);
  /* fd of the vjp along (tx, talpha) */
  double h = 1e-6, xp[N], xm[N], ap = alpha + h * talpha, am = alpha - h * talpha, dp[N] = {0}, dm[N] = {0}, gp, gm;
  double s1[N] = {1, 0.5, -1, 2}, s2[N] = {1, 0.5, -1, 2};
  for (int i = 0; i < N; i++) { xp[i] = x[i] + h * tx[i]; xm[i] = x[i] - h * tx[i]; }
  void *a1[4] = {xp, &n, &ap, y}, *d1[4] = {dp, NULL, &gp, s1};
  void *a2[4] = {xm, &n, &am, y}, *d2[4] = {dm, NULL, &gm, s2};
  f_vjp(a1, d1); f_vjp(a2, d2);
  for (int i = 0; i < N; i++) printf("fd %g\n", (dp[i] - dm[i]) / (2 * h));
  printf("fd galpha %g\n", (gp - gm) / (2 * h));
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
@pytest.mark.parametrize("inline", ["auto", "none"])
def test_forward_over_reverse_through_tables_of_pointers(enzcc, opt, inline):
    enzcc.write("w.c", POINTER_TABLES)
    enzcc(opt, "w.c", "-lm", "-o", "w", f"--ad-inline={inline}")
    lines = enzcc.run("./w").stdout.split("\n")
    ad = [float(x) for x in " ".join(lines[:4]).split()]  # dx, tdx per element
    fd = [float(line.split()[1]) for line in lines if line.startswith("fd ") and "galpha" not in line]
    assert len(fd) == 4
    tdx = ad[1::2]
    for a, b in zip(tdx, fd[:4]):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-9)
    galpha_line = next(line for line in lines if line.startswith("galpha"))
    tgalpha = float(galpha_line.split()[3])
    assert tgalpha == pytest.approx(float(next(line for line in lines if line.startswith("fd galpha")).split()[2]),
                                    rel=1e-6)
    assert tgalpha != 0


# forward over forward: the second derivative of a scalar function, d2/dx2 (x^3 sin x)
#   = 6x sin x + 6x^2 cos x - x^3 sin x
@pytest.mark.parametrize("opt", OPTS)
def test_second_derivative_forward_over_forward(enzcc, opt):
    v = build_and_run(enzcc, r"""
static double f(double x) { return x * x * x * sin(x); }
double d1(double x) { return __enzyme_fwddiff((void *)f, x, 1.0); }
int main(void) {
  report("d2", __enzyme_fwddiff((void *)d1, 0.9, 1.0));
  report("d2r", __enzyme_autodiff((void *)d1, 0.9));
  return 0;
}
""", opt)
    import math

    x = 0.9
    want = 6 * x * math.sin(x) + 6 * x * x * math.cos(x) - x ** 3 * math.sin(x)
    assert v["d2"] == pytest.approx(want, rel=1e-12)
    assert v["d2r"] == pytest.approx(want, rel=1e-12)


# a global written by the differentiated function: each level has a shadow of its own (the inner derivative's
# shadow of g is a global its code reads and writes, with a derivative at the outer level; sharing one global
# for both gave 15 instead of 9 at -O0)
@pytest.mark.parametrize("opt", OPTS)
def test_second_derivatives_through_a_global(enzcc, opt):
    v = build_and_run(enzcc, r"""
double g;
static double f(double x) { g = x * x; return g * x + sin(g); }
double rev(double x) { return __enzyme_autodiff((void *)f, x); }
double fwd(double x) { return __enzyme_fwddiff((void *)f, x, 1.0); }
int main(void) {
  double x = 1.5;
  report("fr", __enzyme_fwddiff((void *)rev, x, 1.0));
  report("rr", __enzyme_autodiff((void *)rev, x));
  report("ff", __enzyme_fwddiff((void *)fwd, x, 1.0));
  report("rf", __enzyme_autodiff((void *)fwd, x));
  return 0;
}
""", opt)
    import math

    x = 1.5  # f = x^3 + sin(x^2): f'' = 6x + 2 cos(x^2) - 4x^2 sin(x^2)
    want = 6 * x + 2 * math.cos(x * x) - 4 * x * x * math.sin(x * x)
    for k in ("fr", "rr", "ff", "rf"):
        assert v[k] == pytest.approx(want, rel=1e-12), k


def test_a_function_that_differentiates_itself_is_refused(enzcc):
    enzcc.write("r.c", PRELUDE + r"""
double f(double x) { return x < 0 ? x : sin(x) + __enzyme_autodiff((void *)f, x - 1.0); }
int main(void) { report("d", __enzyme_autodiff((void *)f, 0.7)); return 0; }
""")
    r = enzcc("-O1", "-c", "r.c", "-o", "r.o", check=False)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "cannot differentiate 'f': nested AD must not be recursive" in r.stderr
    assert not (enzcc.cwd / "r.o").exists()


THIRD_ORDER_LOOP = r"""
#include <stdint.h>
double pow(double, double);
__attribute__((noinline)) uint64_t factorial(uint64_t x) { return x == 0 ? 1 : x * factorial(x - 1); }
uint64_t __enzyme_iter(uint64_t, uint64_t);
double my_sin(double x) {  /* Taylor series whose length grows with the order of the derivative */
  double result = 0;
  uint64_t n = __enzyme_iter(12, 1);
  for (uint64_t i = 0; i <= n; i++) {
    if (i % 2 == 0) continue;
    result += pow(x, i) / factorial(i) * (i % 4 == 1 ? 1 : -1);
  }
  return result;
}
double d1(double x) { return __enzyme_autodiff((void *)my_sin, x); }
double d2(double x) { return __enzyme_autodiff((void *)d1, x); }
double d3(double x) { return __enzyme_autodiff((void *)d2, x); }
int main(void) {
  report("d1", d1(1.23));
  report("d2", d2(1.23));
  report("d3", d3(1.23));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_fourth_order_through_a_loop(enzcc, opt):
    """Four rounds of reverse mode through a loop whose tape grows: the tapes of the first three rounds are chains
    of chunks (never reallocated or copied), so each next round differentiates typed stores and loads; optimized,
    the third derivative has irreducible control flow (jump threading), which gets a dispatch block."""
    import math

    src = THIRD_ORDER_LOOP.replace('report("d3", d3(1.23));', 'report("d3", d3(1.23));\n  report("d4", d4(1.23));')
    src = src.replace("int main(void) {",
                      "double d4(double x) { return __enzyme_autodiff((void *)d3, x); }\nint main(void) {")
    out = build_and_run(enzcc, src, opt)
    assert out["d3"] == pytest.approx(-math.cos(1.23), rel=1e-8)
    assert out["d4"] == pytest.approx(math.sin(1.23), rel=1e-8)


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2"])
def test_third_order_through_a_loop(enzcc, opt):
    """Reverse over reverse over reverse through a loop whose tape grows (the inner rounds' tapes are chains of
    chunks: see test_fourth_order_through_a_loop)."""
    import math

    out = {k: float(v) for k, v in build_and_run(enzcc, THIRD_ORDER_LOOP, opt).items()}
    assert out["d1"] == pytest.approx(math.cos(1.23), rel=1e-8)
    assert out["d2"] == pytest.approx(-math.sin(1.23), rel=1e-8)
    assert float(out["d3"]) == pytest.approx(-math.cos(1.23), rel=1e-8)
