"""``enzyme_runtime_activity``: a pointer whose shadow is the pointer itself when the derivative runs is inactive
(``enzyme_dup, x, x``); a pointer without a shadow merged with one that has one (a select or phi between an
``enzyme_const`` buffer and an ``enzyme_dup`` one) is its own shadow. Derivatives are never read from, added
to or written over such memory, so the primal values there stay intact; where that would lose a derivative
(a value with derivatives stored there and read back for a result), the program stops with a message, or, for
memory reached only through an ``enzyme_const`` argument, compilation is refused. Every gradient is checked
against analytic values and central finite differences, at -O0 and -O2, in reverse and forward mode. (Before
runtime activity was built, the marker itself was refused: each of these tests failed.)"""

import os

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22")

OPTS = ["-O0", "-O2"]

RA = PRELUDE + r"""
extern int enzyme_runtime_activity, enzyme_noret;
void *__enzyme_augmentfwd(void *, ...);
void __enzyme_reverse(void *, ...);
double __enzyme_fwdsplit(void *, ...);
"""


def _run(enzcc, src, opt, *args):
    """Build ``src`` and run it with ``args``, without checking its exit status."""
    enzcc.write("t.c", RA + src)
    enzcc(opt, "t.c", "-lm", "-o", "t")
    return enzcc.run("./t", *args, check=False)


def _values(out: str) -> dict:
    v = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            v[parts[0]] = float(parts[1])
    return v


# -- 1. enzyme_dup, x, x: x has no derivative in this call, and its values are left alone ----------------------

ALIASED = r"""
/* reads x and y, writes out */
double f(double *x, double *y, double *out, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) { out[i] = x[i] * y[i]; s += x[i] * sin(y[i]) + y[i] * y[i] * x[0]; }
  return s;
}
static double fy(double *x, double *y, int k, double h) {
  double out[3], yy[3] = {y[0], y[1], y[2]}; yy[k] += h; return f(x, yy, out, 3);
}
int main(void) {
  double x[3] = {1.5, -2, 0.75}, y[3] = {0.3, 1.1, -0.4}, out[3] = {0}, dy[3] = {0};
  __enzyme_autodiff((void *)f, enzyme_runtime_activity, enzyme_dup, x, x, enzyme_dup, y, dy,
                    enzyme_dup, out, out, enzyme_const, 3);
  for (int k = 0; k < 3; k++) {
    char name[16];
    sprintf(name, "ad.r%d", k); report(name, dy[k]);
    sprintf(name, "an.r%d", k); report(name, x[k] * cos(y[k]) + 2 * y[k] * x[0]);
    sprintf(name, "fd.r%d", k); report(name, (fy(x, y, k, 1e-6) - fy(x, y, k, -1e-6)) / 2e-6);
    sprintf(name, "x.r%d", k); report(name, x[k]);         /* untouched */
    sprintf(name, "out.r%d", k); report(name, out[k]);     /* the primal's values, not derivatives */
  }
  double ty[3] = {1, 1, 1};
  for (int k = 0; k < 3; k++) out[k] = 0;
  double t = __enzyme_fwddiff((void *)f, enzyme_runtime_activity, enzyme_dup, x, x, enzyme_dup, y, ty,
                              enzyme_dup, out, out, enzyme_const, 3);
  report("ad.f", t);
  double an = 0;
  for (int k = 0; k < 3; k++) an += x[k] * cos(y[k]) + 2 * y[k] * x[0];
  report("an.f", an);
  for (int k = 0; k < 3; k++) {
    char name[16];
    sprintf(name, "x.f%d", k); report(name, x[k]);
    sprintf(name, "out.f%d", k); report(name, out[k]);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_shadow_that_is_the_memory_itself(enzcc, opt):
    v = build_and_run(enzcc, "extern int enzyme_runtime_activity;\n" + ALIASED, opt)
    assert_close(v, "ad.", "an.", rel=1e-12)
    assert_close(v, "ad.r", "fd.r", rel=1e-6)
    x, y = [1.5, -2, 0.75], [0.3, 1.1, -0.4]
    for k in range(3):
        assert v[f"x.r{k}"] == x[k] and v[f"x.f{k}"] == x[k]
        assert v[f"out.r{k}"] == x[k] * y[k] and v[f"out.f{k}"] == x[k] * y[k]


SPLIT = r"""
/* the same function in split mode: x and out are their own shadows */
int main(void) {
  double x[3] = {1.5, -2, 0.75}, y[3] = {0.3, 1.1, -0.4}, out[3] = {0}, dy[3] = {0};
  void *tape = __enzyme_augmentfwd((void *)f, enzyme_runtime_activity, enzyme_noret, enzyme_dup, x, x,
                                   enzyme_dup, y, dy, enzyme_dup, out, out, enzyme_const, 3);
  __enzyme_reverse((void *)f, enzyme_runtime_activity, enzyme_dup, x, x, enzyme_dup, y, dy, enzyme_dup, out, out,
                   enzyme_const, 3, 1.0, tape);
  for (int k = 0; k < 3; k++) {
    char name[16];
    sprintf(name, "ad.%d", k); report(name, dy[k]);
    sprintf(name, "an.%d", k); report(name, x[k] * cos(y[k]) + 2 * y[k] * x[0]);
    sprintf(name, "x%d", k); report(name, x[k]);
    sprintf(name, "out%d", k); report(name, out[k]);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_split_mode(enzcc, opt):
    src = ALIASED[:ALIASED.index("static double fy")] + SPLIT
    enzcc.write("t.c", RA + src)
    enzcc(opt, "t.c", "-lm", "-o", "t")
    v = _values(enzcc.run("./t").stdout)
    assert_close(v, "ad.", "an.", rel=1e-12)
    x, y = [1.5, -2, 0.75], [0.3, 1.1, -0.4]
    for k in range(3):
        assert v[f"x{k}"] == x[k] and v[f"out{k}"] == x[k] * y[k]


VECTOR = r"""
/* vector mode: lane 0 has x as its own shadow, lane 1 has y */
typedef struct { double a, b; } d2;
d2 __enzyme_fwddiff_d2(void *, ...) __asm__("__enzyme_fwddiff");
void __enzyme_autodiff_v(void *, ...) __asm__("__enzyme_autodiff");
extern int enzyme_width;
void g(double *x, double *y, double *res, int n) { *res = f(x, y, res + 1, n); }
int main(void) {
  double x[3] = {1.5, -2, 0.75}, y[3] = {0.3, 1.1, -0.4}, out[3] = {0}, t0[3] = {1, 0, 0}, t1[3] = {0, 1, 0};
  d2 r = __enzyme_fwddiff_d2((void *)f, enzyme_runtime_activity, enzyme_width, 2, enzyme_dup, x, x, t1,
                             enzyme_dup, y, t0, y, enzyme_dup, out, out, out, enzyme_const, 3);
  report("ad.f0", r.a); report("an.f0", x[0] * cos(y[0]) + 2 * y[0] * x[0]);
  report("ad.f1", r.b); report("an.f1", sin(y[1]));
  double res[4] = {0}, dres0[4] = {1, 0, 0, 0}, dres1[4] = {1, 0, 0, 0}, dx1[3] = {0}, dy0[3] = {0};
  __enzyme_autodiff_v((void *)g, enzyme_runtime_activity, enzyme_width, 2, enzyme_dup, x, x, dx1,
                      enzyme_dup, y, dy0, y, enzyme_dup, res, dres0, dres1, enzyme_const, 3);
  for (int k = 0; k < 3; k++) {
    char name[16];
    sprintf(name, "ad.y%d", k); report(name, dy0[k]);
    sprintf(name, "an.y%d", k); report(name, x[k] * cos(y[k]) + 2 * y[k] * x[0]);
    sprintf(name, "ad.x%d", k); report(name, dx1[k]);
    sprintf(name, "an.x%d", k); report(name, sin(y[k]) + (k == 0 ? y[0] * y[0] + y[1] * y[1] + y[2] * y[2] : 0));
  }
  report("x0", x[0]); report("y0", y[0]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_vector_mode_lanes_inactive_apart(enzcc, opt):
    src = ALIASED[:ALIASED.index("static double fy")] + VECTOR
    enzcc.write("t.c", RA + src)
    enzcc(opt, "t.c", "-lm", "-o", "t")
    v = _values(enzcc.run("./t").stdout)
    assert_close(v, "ad.", "an.", rel=1e-12)
    assert v["x0"] == 1.5 and v["y0"] == 0.3


# -- 2. an enzyme_const buffer and an enzyme_dup one merged in a select and a phi ---------------------------------

MIXED = r"""
double pick(double *a, const double *c, int k) {     /* a select: either buffer */
  const double *p = k ? a : c;
  return p[0] * p[1] + a[0] * a[2];
}
double alternate(double *a, double *c, int n) {      /* a phi: one buffer, then the other */
  double s = 0;
  for (int i = 0; i < n; i++) { double *p = (i & 1) ? c : a; s += p[i] * p[i] * p[i]; }
  return s;
}
static double fd_pick(double *a, double *c, int k, int i) {
  double h = 1e-6, ap[3] = {a[0], a[1], a[2]}, am[3] = {a[0], a[1], a[2]};
  ap[i] += h; am[i] -= h;
  return (pick(ap, c, k) - pick(am, c, k)) / (2 * h);
}
int main(void) {
  double a[4] = {1.25, -0.5, 2, 3}, c[4] = {5, 6, 7, 8}, da[4], ta[4];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 4; i++) da[i] = 0;
    __enzyme_autodiff((void *)pick, enzyme_runtime_activity, enzyme_dup, a, da, enzyme_const, c, enzyme_const, k);
    double an[3] = {(k ? a[1] : 0) + a[2], k ? a[0] : 0, a[0]};
    for (int i = 0; i < 3; i++) {
      char name[24];
      sprintf(name, "ad.pick%d%d", k, i); report(name, da[i]);
      sprintf(name, "an.pick%d%d", k, i); report(name, an[i]);
      sprintf(name, "fd.pick%d%d", k, i); report(name, fd_pick(a, c, k, i));
      ta[0] = ta[1] = ta[2] = 0; ta[i] = 1;
      sprintf(name, "ad.fpick%d%d", k, i);
      report(name, __enzyme_fwddiff((void *)pick, enzyme_runtime_activity, enzyme_dup, a, ta, enzyme_const, c,
                                    enzyme_const, k));
      sprintf(name, "an.fpick%d%d", k, i); report(name, an[i]);
    }
  }
  for (int i = 0; i < 4; i++) da[i] = 0, ta[i] = 1;
  __enzyme_autodiff((void *)alternate, enzyme_runtime_activity, enzyme_dup, a, da, enzyme_const, c, enzyme_const, 4);
  for (int i = 0; i < 4; i++) {
    char name[16];
    sprintf(name, "ad.alt%d", i); report(name, da[i]);
    sprintf(name, "an.alt%d", i); report(name, (i & 1) ? 0 : 3 * a[i] * a[i]);
  }
  report("ad.falt", __enzyme_fwddiff((void *)alternate, enzyme_runtime_activity, enzyme_dup, a, ta, enzyme_const, c,
                                     enzyme_const, 4));
  report("an.falt", 3 * a[0] * a[0] + 3 * a[2] * a[2]);
  report("c0", c[0]); report("c1", c[1]); report("c3", c[3]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_const_buffer_mixed_with_active_one(enzcc, opt):
    v = build_and_run(enzcc, "extern int enzyme_runtime_activity;\n" + MIXED, opt)
    assert_close(v, "ad.", "an.", rel=1e-12)
    assert_close(v, "ad.pick", "fd.pick", rel=1e-6)
    assert (v["c0"], v["c1"], v["c3"]) == (5, 6, 8)


def test_const_buffer_mixed_without_the_marker_is_refused(enzcc):
    enzcc.write("e.c", PRELUDE + MIXED.replace("enzyme_runtime_activity, ", "").replace(
        "int main(void)", "extern int enzyme_runtime_activity;\nint main(void)"))
    r = enzcc("-O2", "e.c", "-lm", "-o", "e", check=False)
    assert r.returncode != 0 and "mixes memory with derivatives" in r.stderr, r.stderr


# -- 3. Enzyme's BLAS program with runtime activity, in plain C: each argument in turn inactive at run time -------

BLAS = r"""
#ifdef USE_CBLAS   /* the BLAS family's rules, which compare each array with its shadow */
#include <cblas.h>
void gemv(int m, int n, double alpha, double *A, double *x, double beta, double *y) {
  cblas_dgemv(CblasRowMajor, CblasNoTrans, m, n, alpha, A, n, x, 1, beta, y, 1);
}
double dot(int n, double *a, double *b) { return cblas_ddot(n, a, 1, b, 1); }
void gemm(double alpha, double *A, double *B, double beta, double *C) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 3, alpha, A, 3, B, 2, beta, C, 2);
}
#else              /* the same in loops */
/* y = alpha A x + beta y, A m x n, row-major */
void gemv(int m, int n, double alpha, double *A, double *x, double beta, double *y) {
  for (int i = 0; i < m; i++) {
    y[i] = beta * y[i];
    for (int j = 0; j < n; j++) y[i] += alpha * A[i * n + j] * x[j];
  }
}
double dot(int n, double *a, double *b) { double s = 0; for (int i = 0; i < n; i++) s += a[i] * b[i]; return s; }
#endif

static double Ai[6] = {1, 2, 3, 4, 5, 6}, xi[3] = {0.5, -1, 2}, yi[2] = {3, -4}, dyi[2] = {1.5, -0.25};
static double A[6], x[3], y[2], dA[6], dx[3], dy[2];
static void reset(void) {
  for (int k = 0; k < 6; k++) A[k] = Ai[k], dA[k] = 0;
  for (int k = 0; k < 3; k++) x[k] = xi[k], dx[k] = 0;
  for (int k = 0; k < 2; k++) y[k] = yi[k], dy[k] = dyi[k];
}
static void show(const char *what, double *v, const double *expect, int n) {
  char name[32];
  for (int k = 0; k < n; k++) {
    sprintf(name, "ad.%s%d", what, k); report(name, v[k]);
    sprintf(name, "an.%s%d", what, k); report(name, expect[k]);
  }
}
int main(void) {
  const double alpha = 0.5, beta = 2;
  double yout[2], zero[6] = {0}, ex[6], ed[2];
  for (int i = 0; i < 2; i++) { yout[i] = beta * yi[i]; for (int j = 0; j < 3; j++) yout[i] += alpha * Ai[i*3+j] * xi[j]; }
  for (int i = 0; i < 2; i++) ed[i] = beta * dyi[i];

  /* dot with b inactive at run time: da = b, b untouched */
  reset();
  __enzyme_autodiff((void *)dot, enzyme_runtime_activity, enzyme_const, 3, enzyme_dup, A, dA, enzyme_dup, x, x);
  show("dot_da", dA, xi, 3); show("dot_b", x, xi, 3);

  /* gemv, x inactive at run time: dA = alpha dy x^T, dy = beta dy */
  reset();
  __enzyme_autodiff((void *)gemv, enzyme_runtime_activity, enzyme_const, 2, enzyme_const, 3, enzyme_const, alpha, enzyme_dup, A, dA,
                    enzyme_dup, x, x, enzyme_const, beta, enzyme_dup, y, dy);
  for (int i = 0; i < 2; i++) for (int j = 0; j < 3; j++) ex[i*3+j] = alpha * dyi[i] * xi[j];
  show("gx_dA", dA, ex, 6); show("gx_dy", dy, ed, 2); show("gx_x", x, xi, 3); show("gx_y", y, yout, 2);

  /* gemv, A inactive at run time: dx = alpha A^T dy, dy = beta dy */
  reset();
  __enzyme_autodiff((void *)gemv, enzyme_runtime_activity, enzyme_const, 2, enzyme_const, 3, enzyme_const, alpha, enzyme_dup, A, A,
                    enzyme_dup, x, dx, enzyme_const, beta, enzyme_dup, y, dy);
  for (int j = 0; j < 3; j++) { ex[j] = 0; for (int i = 0; i < 2; i++) ex[j] += alpha * Ai[i*3+j] * dyi[i]; }
  show("gA_dx", dx, ex, 3); show("gA_dy", dy, ed, 2); show("gA_A", A, Ai, 6); show("gA_y", y, yout, 2);

  /* gemv, y inactive at run time: nothing flows (its derivative is not wanted), y gets its primal values */
  reset();
  __enzyme_autodiff((void *)gemv, enzyme_runtime_activity, enzyme_const, 2, enzyme_const, 3, enzyme_const, alpha, enzyme_dup, A, dA,
                    enzyme_dup, x, dx, enzyme_const, beta, enzyme_dup, y, y);
  show("gy_dA", dA, zero, 6); show("gy_dx", dx, zero, 3); show("gy_y", y, yout, 2);

  /* forward mode, y inactive at run time: y gets its primal values, not tangents */
  reset();
  double tA[6] = {1, 1, 1, 1, 1, 1};
  __enzyme_fwddiff((void *)gemv, enzyme_runtime_activity, enzyme_const, 2, enzyme_const, 3, enzyme_const, alpha, enzyme_dup, A, tA,
                   enzyme_dup, x, x, enzyme_const, beta, enzyme_dup, y, y);
  show("fy_y", y, yout, 2);
  /* forward mode, x inactive at run time: dy = alpha tA x */
  reset();
  double ty[2] = {0, 0}, et[2];
  __enzyme_fwddiff((void *)gemv, enzyme_runtime_activity, enzyme_const, 2, enzyme_const, 3, enzyme_const, alpha, enzyme_dup, A, tA,
                   enzyme_dup, x, x, enzyme_const, beta, enzyme_dup, y, ty);
  for (int i = 0; i < 2; i++) { et[i] = 0; for (int j = 0; j < 3; j++) et[i] += alpha * xi[j]; }
  show("fx_ty", ty, et, 2); show("fx_x", x, xi, 3);
#ifdef USE_CBLAS
  /* gemm, C = alpha A B + beta C (2x3 times 3x2), B inactive at run time: dA = alpha dC B^T, dC = beta dC */
  double B[6] = {0.5, -1, 2, 1.5, -0.25, 3}, C[4] = {1, 2, 3, 4}, dC[4] = {1, -2, 0.5, 0.25}, dAm[6] = {0};
  double Cout[4], eA[6], edC[4];
  for (int i = 0; i < 2; i++) for (int j = 0; j < 2; j++) {
    Cout[i*2+j] = beta * C[i*2+j];
    for (int k = 0; k < 3; k++) Cout[i*2+j] += alpha * Ai[i*3+k] * B[k*2+j];
  }
  for (int i = 0; i < 2; i++) for (int k = 0; k < 3; k++) {
    eA[i*3+k] = 0;
    for (int j = 0; j < 2; j++) eA[i*3+k] += alpha * dC[i*2+j] * B[k*2+j];
  }
  for (int k = 0; k < 4; k++) edC[k] = beta * dC[k];
  reset();
  __enzyme_autodiff((void *)gemm, enzyme_runtime_activity, enzyme_const, alpha, enzyme_dup, A, dAm, enzyme_dup, B, B,
                    enzyme_const, beta, enzyme_dup, C, dC);
  show("mm_dA", dAm, eA, 6); show("mm_dC", dC, edC, 4); show("mm_C", C, Cout, 4);
  /* C inactive at run time: nothing flows, C gets its primal values */
  double C2[4] = {1, 2, 3, 4}, dB[6] = {0};
  for (int k = 0; k < 6; k++) dAm[k] = 0;
  __enzyme_autodiff((void *)gemm, enzyme_runtime_activity, enzyme_const, alpha, enzyme_dup, A, dAm, enzyme_dup, B, dB,
                    enzyme_const, beta, enzyme_dup, C2, C2);
  show("mc_dA", dAm, zero, 6); show("mc_dB", dB, zero, 6); show("mc_C", C2, Cout, 4);
  /* forward, B inactive at run time: dC = alpha tA B + beta tC */
  double C3[4] = {1, 2, 3, 4}, tC[4] = {0, 0, 0, 0}, ftC[4];
  for (int i = 0; i < 2; i++) for (int j = 0; j < 2; j++) {
    ftC[i*2+j] = 0;
    for (int k = 0; k < 3; k++) ftC[i*2+j] += alpha * B[k*2+j];
  }
  __enzyme_fwddiff((void *)gemm, enzyme_runtime_activity, enzyme_const, alpha, enzyme_dup, A, tA, enzyme_dup, B, B,
                   enzyme_const, beta, enzyme_dup, C3, tC);
  show("fm_tC", tC, ftC, 4); show("fm_C", C3, Cout, 4);
#endif
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_blas_like_arguments_inactive_at_run_time(enzcc, opt):
    v = build_and_run(enzcc, "extern int enzyme_runtime_activity;\n" + BLAS, opt)
    assert_close(v, "ad.", "an.", rel=1e-12, abs_=1e-13)


@pytest.mark.skipif(not os.path.exists("/usr/include/x86_64-linux-gnu/cblas.h"),
                    reason="needs libopenblas-dev (make setup installs it)")
@pytest.mark.parametrize("opt", OPTS)
def test_cblas_arguments_inactive_at_run_time(enzcc, opt):
    """Enzyme's BLAS program with runtime activity (ddot and dgemv, each array in turn its own shadow) through
    OpenBLAS: the BLAS calls on a shadow that is the memory itself are not made."""
    v = build_and_run(enzcc, "#define USE_CBLAS\nextern int enzyme_runtime_activity;\n" + BLAS, opt,
                      extra=("-lopenblas",))
    assert_close(v, "ad.", "an.", rel=1e-12, abs_=1e-13)


# -- 4. a function that writes through a pointer passed without derivatives -------------------------------------

CONST_OUT = r"""
double h(double *out, const double *x) { out[0] = x[0] * x[0]; return x[0] * x[1]; }   /* out never read back */
double g(double *s, const double *x, int n) {       /* s read back after the store, through a loop */
  for (int i = 0; i < n; i++) s[i] = x[i] * x[i];
  double t = 0;
  for (int i = 0; i < n; i++) t += s[i] * s[n - 1 - i];
  return t;
}
struct S { double v[3]; };
double cp(struct S *dst, const struct S *src) { *dst = *src; return dst->v[0] * dst->v[1] + src->v[2]; }
__attribute__((noinline)) double rd(const double *s, int i) { return i < 0 ? 0 : s[i] * s[i] + rd(s, i - 1); }
double viacall(double *s, const double *x) { s[0] = x[0] * x[0]; s[1] = x[1]; return rd(s, 1); }  /* read back by a call */
int main(int argc, char **argv) {
  double out[1] = {0}, x[2] = {2, 5}, dx[2] = {0}, s[2], ds[2] = {0};
  __enzyme_autodiff((void *)h, enzyme_runtime_activity, enzyme_const, out, enzyme_dup, x, dx);
  report("ad.h0", dx[0]); report("an.h0", x[1]); report("ad.h1", dx[1]); report("an.h1", x[0]);
  report("out", out[0]);
  dx[0] = dx[1] = 0;
  __enzyme_autodiff((void *)g, enzyme_runtime_activity, enzyme_dup, s, ds, enzyme_dup, x, dx, enzyme_const, 2);
  report("ad.g0", dx[0]); report("an.g0", 4 * x[0] * x[1] * x[1]);
  report("ad.g1", dx[1]); report("an.g1", 4 * x[1] * x[0] * x[0]);
  struct S a = {{1, 2, 3}}, d, dd = {{0}}, da = {{0}};
  __enzyme_autodiff((void *)cp, enzyme_runtime_activity, enzyme_dup, &d, &dd, enzyme_dup, &a, &da);
  report("ad.cp0", da.v[0]); report("an.cp0", 2); report("ad.cp1", da.v[1]); report("an.cp1", 1);
  report("ad.cp2", da.v[2]); report("an.cp2", 1);
  dx[0] = dx[1] = 0;
  __enzyme_autodiff((void *)viacall, enzyme_runtime_activity, enzyme_dup, s, ds, enzyme_dup, x, dx);
  report("ad.vc0", dx[0]); report("an.vc0", 4 * x[0] * x[0] * x[0]);
  report("ad.vc1", dx[1]); report("an.vc1", 2 * x[1]);
  fflush(stdout);
  if (argc > 1 && argv[1][0] == 'g') {   /* s is its own shadow: the derivative would be lost */
    dx[0] = dx[1] = 0;
    if (argv[1][1] == 'f') { double t[2] = {1, 0}; __enzyme_fwddiff((void *)g, enzyme_runtime_activity, enzyme_dup, s, s, enzyme_dup, x, t, enzyme_const, 2); }
    else __enzyme_autodiff((void *)g, enzyme_runtime_activity, enzyme_dup, s, s, enzyme_dup, x, dx, enzyme_const, 2);
    report("lost", dx[0]);
  }
  if (argc > 1 && argv[1][0] == 'r') {   /* s is its own shadow, read back by a call that is not inlined */
    __enzyme_autodiff((void *)viacall, enzyme_runtime_activity, enzyme_dup, s, s, enzyme_dup, x, dx);
    report("lost", dx[0]);
  }
  if (argc > 1 && argv[1][0] == 'c') {   /* the copy's destination is its own shadow */
    __enzyme_autodiff((void *)cp, enzyme_runtime_activity, enzyme_dup, &d, &d, enzyme_dup, &a, &da);
    report("lost", da.v[0]);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_writes_through_pointers_passed_without_derivatives(enzcc, opt):
    r = _run(enzcc, CONST_OUT, opt)
    assert r.returncode == 0, r.stderr
    v = _values(r.stdout)
    assert_close(v, "ad.", "an.", rel=1e-12)
    assert v["out"] == 4


@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("case", ["g", "gf", "c", "r"])
def test_lost_derivative_stops_the_program(enzcc, opt, case):
    r = _run(enzcc, CONST_OUT, opt, case)
    assert r.returncode != 0 and "lost" not in r.stdout, (r.stdout, r.stderr)
    assert "enzcc: enzyme_runtime_activity: in '" in r.stderr and "its derivative would be lost" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


FILLED_BY_CALL = r"""
__attribute__((noinline)) void fill(double *s, const double *x, int i) { if (i < 0) return; s[i] = x[i] * x[i]; fill(s, x, i - 1); }
double use(double *s, const double *x) { fill(s, x, 1); return s[0] + s[1]; }
int main(int argc, char **argv) {
  double s[2], ds[2] = {0}, x[2] = {1, 2}, dx[2] = {0};
  __enzyme_autodiff((void *)use, enzyme_runtime_activity, enzyme_dup, s, argc > 1 ? s : ds, enzyme_dup, x, dx);
  report("ad.0", dx[0]); report("an.0", 2 * x[0]); report("ad.1", dx[1]); report("an.1", 2 * x[1]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_lost_derivative_in_a_call_that_is_not_inlined(enzcc, opt):
    """A call that is not inlined stores values with derivatives into memory the caller then reads: with a shadow of
    its own, the gradient; with the memory as its own shadow, a stop at run time (before the call)."""
    enzcc.write("t.c", RA + FILLED_BY_CALL)
    enzcc(opt, "--ad-inline=none", "t.c", "-lm", "-o", "t")
    r = enzcc.run("./t", check=False)
    assert r.returncode == 0, r.stderr
    assert_close(_values(r.stdout), "ad.", "an.", rel=1e-12)
    r = enzcc.run("./t", "same", check=False)
    assert r.returncode != 0 and "ad." not in r.stdout
    assert "a value with derivatives is stored by a call to 'fill' into memory whose shadow is the memory itself" \
        in r.stderr, r.stderr


POINTER_KEPT = r"""
struct node { double *p; double w; };
double f(struct node *n, double *x) { n->p = x; return n->p[0] * 2 + n->w; }
int main(int argc, char **argv) {
  double x[1] = {3}, dx[1] = {0}, t[1] = {1};
  struct node n = {0, 1}, dn = {0, 0};
  __enzyme_autodiff((void *)f, enzyme_runtime_activity, enzyme_dup, &n, &dn, enzyme_dup, x, dx);
  report("ad.r", dx[0]); report("an.r", 2); report("ad.w", dn.w); report("an.w", 1);
  dn.w = 0;   /* (the tangent of n->w) */
  report("ad.f", __enzyme_fwddiff((void *)f, enzyme_runtime_activity, enzyme_dup, &n, &dn, enzyme_dup, x, t));
  report("an.f", 2);
  fflush(stdout);
  if (argc > 1) {   /* the node is its own shadow: the pointer's shadow would read back as the pointer */
    dx[0] = 0;
    if (argv[1][0] == 'f') report("same.f", __enzyme_fwddiff((void *)f, enzyme_runtime_activity, enzyme_dup, &n, &n,
                                                             enzyme_dup, x, t));
    else { __enzyme_autodiff((void *)f, enzyme_runtime_activity, enzyme_dup, &n, &n, enzyme_dup, x, dx);
           report("same.r", dx[0]); }
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("mode", ["r", "f"])
def test_pointer_stored_into_memory_that_is_its_own_shadow(enzcc, opt, mode):
    """A pointer to memory with derivatives stored into memory that is its own shadow and read back would come back
    with itself as shadow (inactive): the program stops. Where the optimizer forwards the pointer instead of
    reading it back (-O2), nothing is lost and the gradient is right; never a zero."""
    r = _run(enzcc, POINTER_KEPT, opt)
    assert r.returncode == 0, r.stderr
    assert_close(_values(r.stdout), "ad.", "an.", rel=1e-12)
    r = _run(enzcc, POINTER_KEPT, opt, mode)
    v = _values(r.stdout)
    if opt == "-O0" or r.returncode != 0:
        assert r.returncode != 0 and f"same.{mode}" not in v, r.stdout
        assert "a pointer to memory with derivatives is stored into memory whose shadow is the memory itself" \
            in r.stderr, r.stderr
    else:
        assert v[f"same.{mode}"] == 2


CHOSEN = r"""
double f(double *a, double *c, const double *x, int k, int n) {   /* stores into whichever buffer k chooses */
  double *p = k ? a : c;
  for (int i = 0; i < n; i++) p[i] = x[i] * x[i];
  double s = 0;
  for (int i = 0; i < n; i++) s += p[i] * p[n - 1 - i];
  return s;
}
int main(int argc, char **argv) {
  double a[2], da[2] = {0}, c[2], x[2] = {1, 2}, dx[2] = {0};
  int k = argc > 1 ? 0 : 1;
  __enzyme_autodiff((void *)f, enzyme_runtime_activity, enzyme_dup, a, da, enzyme_const, c, enzyme_dup, x, dx,
                    enzyme_const, k, enzyme_const, 2);
  report("ad.0", dx[0]); report("an.0", 4 * x[0] * x[1] * x[1]);
  report("ad.1", dx[1]); report("an.1", 4 * x[1] * x[0] * x[0]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_stores_into_the_const_buffer_a_select_chooses(enzcc, opt):
    """Values with derivatives stored through a select of an enzyme_dup and an enzyme_const buffer and read back:
    the gradient where the dup buffer is chosen; a stop at run time where the const one is (its derivative
    would be lost). Without the marker the select is refused at compile time."""
    r = _run(enzcc, CHOSEN, opt)
    assert r.returncode == 0, r.stderr
    assert_close(_values(r.stdout), "ad.", "an.", rel=1e-12)
    r = _run(enzcc, CHOSEN, opt, "const")
    assert r.returncode != 0 and "ad.0" not in r.stdout
    assert "(inactive at run time: passed as its own shadow, or an enzyme_const buffer) and read back for a " \
        "result: its derivative would be lost" in r.stderr, r.stderr


REALLOC = r"""
double grow(double **pp, const double *x, int n) {   /* grows the caller's buffer */
  double *p = realloc(*pp, 2 * n * sizeof(double));
  for (int i = 0; i < n; i++) p[n + i] = x[i] * p[i];
  *pp = p;
  double s = 0;
  for (int i = 0; i < 2 * n; i++) s += p[i] * p[i];
  return s;
}
double grow_own(double *p0, const double *x, int n) {   /* grows and releases it */
  double *p = realloc(p0, 2 * n * sizeof(double));
  for (int i = 0; i < n; i++) p[n + i] = x[i] * p[i];
  double s = 0;
  for (int i = 0; i < 2 * n; i++) s += p[i] * p[i];
  free(p);
  return s;
}
int main(void) {
  double x[2] = {2, 3}, dx[2] = {0}, t[2] = {1, 0};
  double *p = malloc(2 * sizeof(double)), *dp = calloc(2, sizeof(double)), *q = p, *dq = dp;
  p[0] = 1; p[1] = 5;
  __enzyme_autodiff((void *)grow, enzyme_runtime_activity, enzyme_dup, &q, &dq, enzyme_dup, x, dx, enzyme_const, 2);
  report("ad.x0", dx[0]); report("an.x0", 2 * x[0]); report("ad.x1", dx[1]); report("an.x1", 2 * x[1] * 25);
  report("ad.p0", dp[0]); report("an.p0", 2 + 2 * x[0] * x[0]); report("ad.p1", dp[1]); report("an.p1", 10 + 2 * x[1] * x[1] * 5);
  double *r = malloc(2 * sizeof(double));
  r[0] = 1; r[1] = 5; dx[0] = dx[1] = 0;
  __enzyme_autodiff((void *)grow_own, enzyme_runtime_activity, enzyme_dup, r, r, enzyme_dup, x, dx, enzyme_const, 2);
  report("ad.o0", dx[0]); report("an.o0", 2 * x[0]); report("ad.o1", dx[1]); report("an.o1", 2 * x[1] * 25);
  r = malloc(2 * sizeof(double));
  r[0] = 1; r[1] = 5;
  report("ad.of", __enzyme_fwddiff((void *)grow_own, enzyme_runtime_activity, enzyme_dup, r, r, enzyme_dup, x, t,
                                   enzyme_const, 2));
  report("an.of", 2 * x[0]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_realloc(enzcc, opt):
    """realloc of memory with derivatives: with a shadow of its own, the adjoints go back to the old shadow; where
    the old memory is its own shadow, the new memory gets a fresh zero shadow and nothing goes back to the
    released memory."""
    v = build_and_run(enzcc, "extern int enzyme_runtime_activity;\n" + REALLOC, opt)
    assert_close(v, "ad.", "an.", rel=1e-12)


CONST_POINTER_KEPT = r"""
struct S { double *p; double v; };
double f(struct S *s, double *x, double *c) {   /* a pointer without derivatives kept in memory with them */
  s->p = c;
  s->v = x[0];
  return s->p[0] * s->v;
}
int main(void) {
  struct S s, ds = {0, 0};
  double x[1] = {2}, dx[1] = {0}, c[1] = {3}, t[1] = {1};
  __enzyme_autodiff((void *)f, enzyme_runtime_activity, enzyme_dup, &s, &ds, enzyme_dup, x, dx, enzyme_const, c);
  report("ad.r", dx[0]); report("an.r", c[0]);
  ds.p = 0; ds.v = 0;
  report("ad.f", __enzyme_fwddiff((void *)f, enzyme_runtime_activity, enzyme_dup, &s, &ds, enzyme_dup, x, t,
                                  enzyme_const, c));
  report("an.f", c[0]);
  report("c", c[0]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_const_pointer_kept_in_memory_with_derivatives(enzcc, opt):
    """The shadow slot of a pointer without derivatives holds the pointer itself (its own shadow: inactive), so
    reading through it after loading it back gives no derivative instead of going through a null shadow."""
    v = build_and_run(enzcc, "extern int enzyme_runtime_activity;\n" + CONST_POINTER_KEPT, opt)
    assert_close(v, "ad.", "an.", rel=1e-12)
    assert v["c"] == 3


IN_PLACE = r"""
double sq(double *x, double *y) {   /* x updated in place, then read back */
  x[1] = x[0] * x[0];
  for (int i = 0; i < 2; i++) x[i] = sin(x[i]) + 1;
  return x[1] * y[0] + x[0];
}
int main(void) {
  double x[2] = {0.5, 0}, y[1] = {2}, t[1] = {1}, dy[1] = {0};
  double x1 = sin(0.5 * 0.5) + 1;
  report("ad.f", __enzyme_fwddiff((void *)sq, enzyme_runtime_activity, enzyme_dup, x, x, enzyme_dup, y, t));
  report("an.f", x1);
  x[0] = 0.5;
  __enzyme_autodiff((void *)sq, enzyme_runtime_activity, enzyme_dup, x, x, enzyme_dup, y, dy);
  report("ad.r", dy[0]); report("an.r", x1);
  report("x1", x[1]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_update_in_place_of_inactive_memory(enzcc, opt):
    """Memory that is its own shadow, updated in place from its own values and read back: what is stored there has
    no derivative at run time either, so nothing is lost and the program does not stop."""
    v = build_and_run(enzcc, "extern int enzyme_runtime_activity;\n" + IN_PLACE, opt)
    assert_close(v, "ad.", "an.", rel=1e-12)
    assert abs(v["x1"] - (__import__("math").sin(0.25) + 1)) < 1e-15


SCRATCH = r"""
struct plan { int n; double *scratch; };
void f(const struct plan *p, const double *x, double *y) {
  for (int i = 0; i < p->n; i++) p->scratch[i] = x[i] * x[i];
  double s = 0;
  for (int i = 0; i < p->n; i++) s += p->scratch[i];
  *y = s;
}
int main(void) {
  double buf[3], x[3] = {1, 2, 3}, dx[3] = {0}, y = 0, dy = 1;
  struct plan pl = {3, buf};
  __enzyme_autodiff((void *)f, enzyme_runtime_activity, enzyme_const, &pl, enzyme_dup, x, dx, enzyme_dup, &y, &dy);
  printf("%g %g %g\n", dx[0], dx[1], dx[2]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_const_scratch_read_back_is_still_refused(enzcc, opt):
    """Memory reached only through an enzyme_const argument has no shadow: runtime activity cannot keep a
    derivative there, so the mismatched-activity refusal stays (never a zero), and says so."""
    enzcc.write("e.c", RA + SCRATCH)
    r = enzcc(opt, "e.c", "-o", "e", check=False)
    assert r.returncode != 0 and not (enzcc.cwd / "e").exists()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "mismatched activity" in lines[0] and \
        "enzyme_runtime_activity does not help" in lines[0], r.stderr


# -- 5. calls that are not inlined: their derived functions are made with runtime activity too ----------------------

RECURSIVE = r"""
double rsum(const double *a, const double *b, int n) { return n == 0 ? 0 : a[n-1] * sin(b[n-1]) + rsum(a, b, n - 1); }
int main(void) {
  double a[3] = {1, 2, 3}, b[3] = {0.5, 0.25, 1}, db[3] = {0}, t[3] = {1, 1, 1};
  __enzyme_autodiff((void *)rsum, enzyme_runtime_activity, enzyme_dup, a, a, enzyme_dup, b, db, enzyme_const, 3);
  for (int k = 0; k < 3; k++) {
    char name[16];
    sprintf(name, "ad.%d", k); report(name, db[k]);
    sprintf(name, "an.%d", k); report(name, a[k] * cos(b[k]));
  }
  report("ad.f", __enzyme_fwddiff((void *)rsum, enzyme_runtime_activity, enzyme_dup, a, t, enzyme_dup, b, b,
                                  enzyme_const, 3));
  report("an.f", sin(b[0]) + sin(b[1]) + sin(b[2]));
  report("a0", a[0]); report("b0", b[0]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_recursive_calls(enzcc, opt):
    v = build_and_run(enzcc, "extern int enzyme_runtime_activity;\n" + RECURSIVE, opt)
    assert_close(v, "ad.", "an.", rel=1e-12)
    assert v["a0"] == 1 and v["b0"] == 0.5


# -- 6. what runtime activity does not cover: one line each ----------------------------------------------------------

@pytest.mark.parametrize("src, message", [
    (r"""
double f(double *a, double *b) { return modf(a[0], b) * a[1] + *b; }
int main(void) { double a[2], b[1], da[2], db[1];
  __enzyme_autodiff((void *)f, enzyme_runtime_activity, enzyme_dup, a, da, enzyme_dup, b, db); return 0; }
""", "enzyme_runtime_activity with a call to 'modf' given memory with derivatives is not supported"),
    (r"""
double f(double *a) { return a[0] * a[0]; }
int main(void) { double a[1], da[1];
  void *t = __enzyme_augmentfwd((void *)f, enzyme_noret, enzyme_dup, a, da);
  __enzyme_fwdsplit((void *)f, enzyme_runtime_activity, enzyme_dup, a, da, t); return 0; }
""", "enzyme_runtime_activity is supported with __enzyme_fwddiff, __enzyme_autodiff, __enzyme_augmentfwd, "
     "__enzyme_reverse and __enzyme_augmentsize, not __enzyme_fwdsplit"),
    (r"""
double f(double *a) { return a[0] * a[0]; }
int main(void) { double a[1], da[1];
  void *t = __enzyme_augmentfwd((void *)f, enzyme_runtime_activity, enzyme_noret, enzyme_dup, a, da);
  __enzyme_reverse((void *)f, enzyme_dup, a, da, 1.0, t); return 0; }
""", "__enzyme_augmentfwd of 'f' has enzyme_runtime_activity and __enzyme_reverse with the same argument activity "
     "does not"),
], ids=["libm-writing-through-pointer", "forward-split-mode", "split-mode-mismatch"])
def test_refusals(enzcc, src, message):
    enzcc.write("e.c", RA + src)
    r = enzcc("-O2", "e.c", "-lm", "-o", "e", check=False)
    assert r.returncode not in (0, 134) and "Traceback" not in r.stderr, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and message in lines[0], r.stderr
