"""``__enzyme_fixed_point`` (``<enzyme/fixed_point.h>``), at -O0..-O3: reverse mode iterates the adjoint of one step
at the converged state, forward mode its tangent. Checked against the derivative through every iteration of the
same loop (to 1e-12), central differences, and the protocol: the state's shadow is zero after the reverse pass,
the outputs' shadows are consumed, the state is left as the reverse sweep found it, a control function decides
how many adjoint iterations run."""

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

OPTS = ["-O0", "-O1", "-O2", "-O3"]

PROGRAM = r"""
#include <stdint.h>
#include <enzyme/fixed_point.h>
extern int enzyme_dup, enzyme_const;
enum { N = 3 };
/* z <- 0.5 cos(z_k + z_{k+1}) / (1 + w_k^2) + w_k: a contraction; it also writes out = z * w */
__attribute__((noinline)) static int step(int64_t i, double *z, const double *w, double *out, const double *tol) {
  (void)i;
  double t[N], err = 0;
  for (int k = 0; k < N; k++) t[k] = 0.5 * cos(z[k] + z[(k + 1) % N]) / (1 + w[k] * w[k]) + w[k];
  for (int k = 0; k < N; k++) { err = fmax(err, fabs(t[k] - z[k])); out[k] = t[k] * w[k]; z[k] = t[k]; }
  return err > *tol;
}
static double loss(const double *z, const double *out) {
  double s = 0;
  for (int k = 0; k < N; k++) s += z[k] * z[k] * (k + 1) + sin(out[k]);
  return s;
}
static double plain(double *z, double *w, double *out, const double *tol) {
  int64_t i = 0;
  while (step(i++, z, w, out, tol));
  return loss(z, out);
}
static double fixed(double *z, double *w, double *out, const double *tol) {
  __enzyme_fixed_point((void *)step, enzyme_fp_state, z, (int64_t)sizeof(double) * N, enzyme_fp_reduction, 1e-28,
                       enzyme_checkpoint_region, w, (int64_t)sizeof(double) * N, z, w, out, tol);
  double r = loss(z, out);
  /* later code overwrites the state and the parameters: the reverse pass must linearize at what the loop saw */
  z[0] = 42;
  w[1] = 7;
  return r;
}
static int calls, limit;
static int two(double *cumul, double *reduction) { (void)cumul; (void)reduction; return calls++ < limit; }
static double controlled(double *z, double *w, double *out, const double *tol) {
  __enzyme_fixed_point((void *)step, enzyme_fp_state, z, (int64_t)sizeof(double) * N, enzyme_fp_control, two,
                       z, w, out, tol);
  return loss(z, out);
}
int main(void) {
  double tol = 1e-15, w0[N] = {0.3, -0.2, 0.5};
  double z[N], w[N], out[N], dz[N], dw[N], dout[N], dw_plain[N], h = 1e-6;
  /* the gradient through every iteration */
  memset(z, 0, sizeof z); memcpy(w, w0, sizeof w); memset(dz, 0, sizeof dz); memset(dw_plain, 0, sizeof dw);
  memset(dout, 0, sizeof dout);
  __enzyme_autodiff((void *)plain, enzyme_dup, z, dz, enzyme_dup, w, dw_plain, enzyme_dup, out, dout,
                    enzyme_const, &tol);
  /* at the fixed point only */
  memset(z, 0, sizeof z); memset(dz, 0, sizeof dz); memset(dw, 0, sizeof dw); memset(dout, 0, sizeof dout);
  __enzyme_autodiff((void *)fixed, enzyme_dup, z, dz, enzyme_dup, w, dw, enzyme_dup, out, dout, enzyme_const, &tol);
  double zr[N], outr[N];
  memcpy(w, w0, sizeof w); memset(zr, 0, sizeof zr); fixed(zr, w, outr, &tol);
  for (int k = 0; k < N; k++) {
    double t[N], up, dn, zz[N], oo[N];
    memcpy(t, w0, sizeof t); t[k] += h; memset(zz, 0, sizeof zz); up = plain(zz, t, oo, &tol);
    memcpy(t, w0, sizeof t); t[k] -= h; memset(zz, 0, sizeof zz); dn = plain(zz, t, oo, &tol);
    char key[32];
    snprintf(key, 32, "fp.w%d", k); report(key, dw[k]);
    snprintf(key, 32, "plain.w%d", k); report(key, dw_plain[k]);
    snprintf(key, 32, "fd.w%d", k); report(key, (up - dn) / (2 * h));
    snprintf(key, 32, "dz%d", k); report(key, dz[k]);
    snprintf(key, 32, "dout%d", k); report(key, dout[k]);
    snprintf(key, 32, "zdiff%d", k); report(key, z[k] - zr[k]);
  }
  /* forward mode: the tangent of the loss along w's first direction */
  double tw[N] = {1, 0, 0}, tz[N] = {0}, tout[N] = {0};
  memcpy(w, w0, sizeof w); memset(z, 0, sizeof z);
  double fwd = __enzyme_fwddiff((void *)fixed, enzyme_dup, z, tz, enzyme_dup, w, tw, enzyme_dup, out, tout,
                                enzyme_const, &tol);
  report("fwd.w0", fwd);
  /* the control function decides: two adjoint iterations (not converged), then 300 (converged) */
  int limits[2] = {2, 300};
  for (int j = 0; j < 2; j++) {
    calls = 0; limit = limits[j]; memcpy(w, w0, sizeof w);
    memset(z, 0, sizeof z); memset(dz, 0, sizeof dz); memset(dw, 0, sizeof dw); memset(dout, 0, sizeof dout);
    __enzyme_autodiff((void *)controlled, enzyme_dup, z, dz, enzyme_dup, w, dw, enzyme_dup, out, dout,
                      enzyme_const, &tol);
    report(j ? "control300.calls" : "control2.calls", calls);
    report(j ? "control300.w0" : "control2.w0", dw[0]);
  }
  /* the primal alone */
  memcpy(w, w0, sizeof w); memset(z, 0, sizeof z);
  report("primal", fixed(z, w, out, &tol));
  memcpy(w, w0, sizeof w); memset(z, 0, sizeof z);
  report("primal.plain", plain(z, w, out, &tol));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_fixed_point_reverse_and_forward(enzcc, opt):
    v = build_and_run(enzcc, PROGRAM, opt)
    assert_close(v, "fp.", "plain.", rel=1e-12, abs_=1e-13)
    assert_close(v, "fp.", "fd.", rel=1e-6, abs_=1e-7)
    for k in range(3):
        assert v[f"dz{k}"] == 0 and v[f"dout{k}"] == 0 and v[f"zdiff{k}"] == 0
    assert abs(v["fwd.w0"] - v["plain.w0"]) <= 1e-12 * abs(v["plain.w0"])
    # the control function: called once before the first adjoint iteration and once after each
    assert v["control2.calls"] == 3 and abs(v["control2.w0"] - v["plain.w0"]) > 1e-3
    assert v["control300.calls"] == 301 and abs(v["control300.w0"] - v["plain.w0"]) <= 1e-12 * abs(v["plain.w0"])
    assert v["primal"] == v["primal.plain"]


# the state is a global array of floats that later code overwrites; the parameter a global too
GLOBAL = r"""
#include <stdint.h>
#include <enzyme/fixed_point.h>
extern int enzyme_dup, enzyme_const;
float u[4];
double q[4];
__attribute__((noinline)) static int step(int64_t i) {
  (void)i;
  float t[4], err = 0;
  for (int k = 0; k < 4; k++) t[k] = 0.25f * tanhf(u[k] - u[(k + 1) % 4]) + (float)q[k];
  for (int k = 0; k < 4; k++) { err = fmaxf(err, fabsf(t[k] - u[k])); u[k] = t[k]; }
  return err > 1e-7f;
}
static double tail(void) {
  double s = 0;
  for (int k = 0; k < 4; k++) { s += u[k] * u[k] * q[k]; u[k] = -1; }
  return s;
}
static double plain(const double *x) {
  for (int k = 0; k < 4; k++) { u[k] = 0; q[k] = x[k]; }
  int64_t i = 0;
  while (step(i++));
  return tail();
}
static double fixed(const double *x) {
  for (int k = 0; k < 4; k++) { u[k] = 0; q[k] = x[k]; }
  __enzyme_fixed_point((void *)step, enzyme_fp_state, u, (int64_t)sizeof u, enzyme_fp_max_iters, (int64_t)200);
  return tail();
}
int main(void) {
  double x[4] = {0.1, 0.4, -0.3, 0.2}, d0[4] = {0}, d[4] = {0};
  __enzyme_autodiff((void *)plain, enzyme_dup, x, d0);
  __enzyme_autodiff((void *)fixed, enzyme_dup, x, d);
  for (int k = 0; k < 4; k++) {
    char key[16];
    snprintf(key, 16, "fp.%d", k); report(key, d[k]);
    snprintf(key, 16, "plain.%d", k); report(key, d0[k]);
  }
  report("u0", u[0]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_fixed_point_of_a_global_float_state(enzcc, opt):
    v = build_and_run(enzcc, GLOBAL, opt)
    assert_close(v, "fp.", "plain.", rel=1e-5, abs_=1e-6)  # (float arithmetic)
    assert v["u0"] == -1  # the state as the rest of the program left it


def _refused(enzcc, source: str, message: str) -> None:
    enzcc.write("r.c", PRELUDE + "#include <stdint.h>\n#include <enzyme/fixed_point.h>\n" + source)
    r = enzcc("-O2", "-w", "r.c", "-lm", "-o", "r", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and message in r.stderr, r.stderr
    assert not (enzcc.cwd / "r").exists()


STEP = r"""
static int step(int64_t i, double *z) { double t = 0.5 * cos(*z); int go = fabs(t - *z) > 1e-12; *z = t; return go; }
"""


def test_fixed_point_without_a_state_is_refused(enzcc):
    _refused(enzcc, STEP + r"""
double f(double *z) { __enzyme_fixed_point((void *)step, z); return *z; }
int main(void) { double z = 0, dz = 0; __enzyme_autodiff((void *)f, &z, &dz); return 0; }
""", "__enzyme_fixed_point needs the state: enzyme_fp_state, pointer, bytes")


def test_fixed_point_with_a_step_of_another_signature_is_refused(enzcc):
    _refused(enzcc, STEP + r"""
double f(double *z) { __enzyme_fixed_point((void *)step, enzyme_fp_state, z, (int64_t)8, z, 1.0); return *z; }
int main(void) { double z = 0, dz = 0; __enzyme_autodiff((void *)f, &z, &dz); return 0; }
""", "'step' takes (i64, ptr): the iteration index, then the arguments given after the markers")


# __enzyme_set_fixed_point: loops marked from inside (outlined into a step), tested in the header or the
# latch, carrying locals (an error, a count, a tolerance it tightens), the iteration inlined with a scratch
# array on the caller's stack, and a constant trip count the optimizer would otherwise unroll
MARKED = r"""
#include <stdint.h>
void __enzyme_set_fixed_point(double reduction, int64_t max_iters, void *control, ...);
extern int enzyme_dup;
#define N 3
double u[N], q[N];
long count;
static double iterate(double *tmp, double tol) {
  double err = 0;
  for (int k = 0; k < N; k++) tmp[k] = 0.3 * sin(u[k] + 0.4 * u[(k + 2) % N]) + q[k] * q[(k + 1) % N];
  for (int k = 0; k < N; k++) { err = fmax(err, fabs(tmp[k] - u[k])); u[k] = tmp[k]; }
  return err > tol ? err : 0;
}
static void setup(const double *x) { for (int k = 0; k < N; k++) { u[k] = 0; q[k] = x[k]; } }
static double loss(void) { double s = 0; for (int k = 0; k < N; k++) s += u[k] * u[k] * q[k] + cos(u[k]); return s; }
#define MARK(on) if (on) __enzyme_set_fixed_point(1e-30, (int64_t)-1, (void *)0, u, (int64_t)sizeof u)
#define HEADER(name, on) static double name(const double *x) { \
    setup(x); double tmp[N], err = 1, tol = 1e-6; long n = 0; \
    while (err > 0) { MARK(on); err = iterate(tmp, tol); tol = fmax(tol * 0.1, 1e-15); n++; } \
    count = n; return loss(); }
#define LATCH(name, on) static double name(const double *x) { \
    setup(x); double tmp[N], err; do { MARK(on); err = iterate(tmp, 1e-15); } while (err > 0); return loss(); }
#define COUNTED(name, on) static double name(const double *x) { \
    setup(x); double tmp[N]; for (int i = 0; i < 60; i++) { MARK(on); iterate(tmp, 0); } return loss(); }
HEADER(header_plain, 0) HEADER(header_fp, 1)
LATCH(latch_plain, 0) LATCH(latch_fp, 1)
COUNTED(counted_plain, 0) COUNTED(counted_fp, 1)
static long n0;
static double u0[N];
static void report_pair(const char *name, const double *d0, const double *d) {
  char key[32];
  for (int k = 0; k < N; k++) {
    snprintf(key, 32, "fp.%s%d", name, k); report(key, d[k]);
    snprintf(key, 32, "plain.%s%d", name, k); report(key, d0[k]);
    snprintf(key, 32, "same_u.%s%d", name, k); report(key, u[k] == u0[k]);
  }
  snprintf(key, 32, "same_count.%s", name); report(key, count == n0);
}
#define compare(name, plain, fp) { \
    double x[N] = {0.3, -0.2, 0.5}, d0[N] = {0}, d[N] = {0}; \
    __enzyme_autodiff((void *)plain, enzyme_dup, x, d0); \
    n0 = count; for (int k = 0; k < N; k++) u0[k] = u[k]; \
    __enzyme_autodiff((void *)fp, enzyme_dup, x, d); \
    report_pair(name, d0, d); }
int main(void) {
  compare("header", header_plain, header_fp);
  compare("latch", latch_plain, latch_fp);
  compare("counted", counted_plain, counted_fp);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_loops_marked_with_set_fixed_point(enzcc, opt):
    v = build_and_run(enzcc, MARKED, opt)
    assert_close(v, "fp.", "plain.", rel=1e-12, abs_=1e-13)
    assert all(x == 1 for k, x in v.items() if k.startswith("same_")), v


def test_set_fixed_point_outside_a_loop_is_refused(enzcc):
    _refused(enzcc, r"""
void __enzyme_set_fixed_point(double, int64_t, void *, ...);
double f(double *z) { __enzyme_set_fixed_point(1e-12, (int64_t)-1, (void *)0, z, (int64_t)8); *z = cos(*z); return *z; }
int main(void) { double z = 0, dz = 0; __enzyme_autodiff((void *)f, &z, &dz); return 0; }
""", "__enzyme_set_fixed_point must be in the body of the loop it marks")


def test_set_fixed_point_in_a_loop_with_two_exits_is_refused(enzcc):
    _refused(enzcc, r"""
void __enzyme_set_fixed_point(double, int64_t, void *, ...);
double f(double *z) {
  for (int i = 0; i < 50; i++) {
    __enzyme_set_fixed_point(1e-12, (int64_t)-1, (void *)0, z, (int64_t)8);
    double t = 0.5 * cos(*z);
    if (fabs(t - *z) < 1e-14) break;
    *z = t;
  }
  return *z;
}
int main(void) { double z = 0, dz = 0; __enzyme_autodiff((void *)f, &z, &dz); return 0; }
""", "must have one latch and one exit")
