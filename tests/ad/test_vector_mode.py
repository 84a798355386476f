"""Vector (batch) mode: ``enzyme_width, N`` with one shadow per lane (``enzyme_dup, x, dx_1 .. dx_N``; scalar
tangents in forward mode) or shadows at a byte stride (``enzyme_dupv`` / ``enzyme_dupnoneedv``), in forward and
reverse mode, widths 2 and 4, at -O0..-O3: whole Jacobians against the analytic ones and central differences."""

import math

import pytest

from adharness import build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

SRC = r"""
extern int enzyme_width, enzyme_dupv, enzyme_dupnoneedv;
typedef struct { double d[2]; } two;
typedef struct { double d[4]; } four;
two __enzyme_fwddiff2(void *, ...);
four __enzyme_fwddiff4(void *, ...);
void __enzyme_fwddiff_v(void *, ...);
void __enzyme_autodiff_v(void *, ...);

#define N 4
/* y_i = x_i^2 exp(x_{i+1}) + sin(x_i x_{i+2}), indices mod N; a loop, memory in and out */
void f(const double *x, double *y, int n) {
  for (int i = 0; i < n; i++) y[i] = x[i] * x[i] * exp(x[(i + 1) % n]) + sin(x[i] * x[(i + 2) % n]);
}
double g(double a, double b) { return a * a * b + cos(b) / a; }

static double fi(const double *x0, int i, int j, double t) {  /* y_i with x_j = t */
  double x[N], y[N];
  for (int k = 0; k < N; k++) x[k] = x0[k];
  x[j] = t;
  f(x, y, N);
  return y[i];
}

int main(void) {
  const double x[N] = {0.5, 1.0, 1.5, 0.7};
  double y[N], h = 1e-6;
  char name[32];
  /* central differences: the whole Jacobian */
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      snprintf(name, sizeof name, "fd.%d.%d", i, j);
      report(name, (fi(x, i, j, x[j] + h) - fi(x, i, j, x[j] - h)) / (2 * h));
    }
  /* forward, width 4, shadows at a stride: lane k's tangent input is e_k, its output column k */
  double dx[N * N] = {0}, dy[N * N];
  for (int k = 0; k < N; k++) dx[k * N + k] = 1;
  __enzyme_fwddiff_v((void *)f, enzyme_width, 4, enzyme_dupv, sizeof(double) * N, x, dx,
                     enzyme_dupnoneedv, (long)(sizeof(double) * N), y, dy, N);
  for (int k = 0; k < N; k++)
    for (int i = 0; i < N; i++) { snprintf(name, sizeof name, "fwd4.%d.%d", i, k); report(name, dy[k * N + i]); }
  /* forward, width 2, one shadow per lane */
  double e0[N] = {0, 1, 0, 0}, e1[N] = {0, 0, 0, 1}, t0[N], t1[N];
  __enzyme_fwddiff_v((void *)f, enzyme_width, 2, x, e0, e1, y, t0, t1, N);
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "fwd2.%d.1", i); report(name, t0[i]);
    snprintf(name, sizeof name, "fwd2.%d.3", i); report(name, t1[i]);
  }
  /* reverse, width 4, at a stride: lane k's seed is e_k on y, its result row k of the Jacobian */
  double bx[N * N] = {0}, by[N * N] = {0};
  for (int k = 0; k < N; k++) by[k * N + k] = 1;
  __enzyme_autodiff_v((void *)f, enzyme_width, 4, enzyme_dupv, sizeof(double) * N, x, bx,
                      enzyme_dupnoneedv, sizeof(double) * N, y, by, N);
  for (int k = 0; k < N; k++)
    for (int j = 0; j < N; j++) { snprintf(name, sizeof name, "rev4.%d.%d", k, j); report(name, bx[k * N + j]); }
  /* reverse, width 2, one shadow per lane */
  double r0[N] = {0}, r1[N] = {0}, s0[N] = {1, 0, 0, 0}, s1[N] = {0, 0, 1, 0};
  __enzyme_autodiff_v((void *)f, enzyme_width, 2, x, r0, r1, y, s0, s1, N);
  for (int j = 0; j < N; j++) {
    snprintf(name, sizeof name, "rev2.0.%d", j); report(name, r0[j]);
    snprintf(name, sizeof name, "rev2.2.%d", j); report(name, r1[j]);
  }
  /* scalars, forward: lane tangents follow each value; the result is one tangent per lane */
  two t = __enzyme_fwddiff2((void *)g, enzyme_width, 2, 1.3, 1.0, 0.0, 0.4, 0.0, 1.0);
  report("g.da", t.d[0]);
  report("g.db", t.d[1]);
  four q = __enzyme_fwddiff4((void *)g, enzyme_width, 4, 1.3, 1.0, 0.0, 2.0, 1.0, 0.4, 0.0, 1.0, 0.0, -1.0);
  for (int k = 0; k < 4; k++) { snprintf(name, sizeof name, "g4.%d", k); report(name, q.d[k]); }
  return 0;
}
"""

X = [0.5, 1.0, 1.5, 0.7]


def jacobian(i: int, j: int) -> float:
    n = len(X)
    d = 0.0
    a, b, c = X[i], X[(i + 1) % n], X[(i + 2) % n]
    if j == i:
        d += 2 * a * math.exp(b) + math.cos(a * c) * c
    if j == (i + 1) % n:
        d += a * a * math.exp(b)
    if j == (i + 2) % n:
        d += math.cos(a * c) * a
    return d


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_vector_mode_jacobians(enzcc, opt):
    v = build_and_run(enzcc, SRC, opt)
    n = len(X)
    for i in range(n):
        for j in range(n):
            jac = jacobian(i, j)
            assert v[f"fd.{i}.{j}"] == pytest.approx(jac, abs=1e-6)
            assert v[f"fwd4.{i}.{j}"] == pytest.approx(jac, rel=1e-12, abs=1e-14), ("forward", i, j)
            assert v[f"rev4.{i}.{j}"] == pytest.approx(jac, rel=1e-12, abs=1e-14), ("reverse", i, j)
        for j in (1, 3):
            assert v[f"fwd2.{i}.{j}"] == pytest.approx(jacobian(i, j), rel=1e-12, abs=1e-14)
    for i in (0, 2):
        for j in range(n):
            assert v[f"rev2.{i}.{j}"] == pytest.approx(jacobian(i, j), rel=1e-12, abs=1e-14)
    a, b = 1.3, 0.4
    ga, gb = 2 * a * b - math.cos(b) / a ** 2, a * a - math.sin(b) / a
    assert v["g.da"] == pytest.approx(ga) and v["g.db"] == pytest.approx(gb)
    for k, (ta, tb) in enumerate(((1, 0), (0, 1), (2, 0), (1, -1))):
        assert v[f"g4.{k}"] == pytest.approx(ta * ga + tb * gb)


@pytest.mark.parametrize("call, message", [
    ("__enzyme_autodiff_v((void *)g, enzyme_width, 2, 1.0, 2.0)",
     "enzyme_out (parameter 1 of 'g') with enzyme_width is not supported"),
    ("__enzyme_fwddiff_v((void *)g, enzyme_width, w, 1.0, 1.0, 0.0, 2.0, 0.0, 1.0)",
     "enzyme_width must be followed by a constant number of lanes"),
    ("__enzyme_fwddiff_v((void *)h, enzyme_width, 2, x, dx)", "missing the shadow of lane 2 of 2"),
    ("__enzyme_autodiff_v((void *)hr, enzyme_width, 2, x, dx, dx2)",
     "vector mode (enzyme_width) with a call to 'r' that is not inlined and takes a float with a derivative by "
     "value (argument 1) is not supported"),
])
def test_vector_mode_errors(enzcc, call, message):
    src = f"""
extern int enzyme_width;
void __enzyme_fwddiff_v(void *, ...);
void __enzyme_autodiff_v(void *, ...);
double g(double a, double b) {{ return a * b; }}
double h(double *x) {{ return x[0] * x[0]; }}
double r(double a, int n) {{ return n < 2 ? a : r(a * a, n / 2) * r(a, n - n / 2); }}  /* stays recursive */
double hr(double *x) {{ return r(x[0], 5); }}
int main(int argc, char **argv) {{
  int w = argc + 1;
  double x[1] = {{1}}, dx[1] = {{0}}, dx2[1] = {{0}};
  {call};
  return 0;
}}
"""
    enzcc.write("e.c", src)
    proc = enzcc("-O2", "e.c", "-o", "e", check=False)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


BATCH = r"""
extern int enzyme_width, enzyme_vector, enzyme_scalar;
typedef struct { double r[4]; } four;
four __enzyme_batch(void *, ...);
void __enzyme_batch_v(void *, ...);
double axpb(double a, double x) { return a * x + sin(x); }
typedef struct { double x, res; } item;
void scale(item *p) { p->res = p->x * 3; }
/* two results come back in registers ({double, double}); the batched function itself calls __enzyme_fwddiff */
typedef struct { double a, b; } two;
two __enzyme_batch_2(void *, ...);
double cube(double g, double x) { return g * x * x * x; }
double dcube(double g, double x) { return __enzyme_fwddiff((void *)cube, g, 0.0, x, 1.0); }
int main(void) {
  two d = __enzyme_batch_2((void *)dcube, enzyme_width, 2, enzyme_scalar, 2.0, enzyme_vector, 1.0, 3.0);
  report("batch2.a", d.a);
  report("batch2.b", d.b);
  /* lanes: a scalar shared by all, and one value per lane */
  four r = __enzyme_batch((void *)axpb, enzyme_width, 4, enzyme_scalar, 2.0, enzyme_vector, 1.0, 2.0, 3.0, 4.0);
  for (int k = 0; k < 4; k++) {
    char name[16];
    snprintf(name, sizeof name, "batch.%d", k);
    report(name, r.r[k]);
  }
  item a = {2, 0}, b = {5, 0};
  __enzyme_batch_v((void *)scale, enzyme_width, 2, &a, &b);
  report("batch.a", a.res);
  report("batch.b", b.res);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_enzyme_batch(enzcc, opt):
    v = build_and_run(enzcc, BATCH, opt)
    for k in range(4):
        assert v[f"batch.{k}"] == pytest.approx(2.0 * (k + 1) + math.sin(k + 1), rel=1e-15)
    assert v["batch.a"] == 6.0 and v["batch.b"] == 15.0
    assert (v["batch2.a"], v["batch2.b"]) == (6.0, 54.0)  # 3 g x^2


RECURSIVE = r"""
extern int enzyme_width;
void __enzyme_autodiff_v(void *, ...);
void __enzyme_fwddiff_v(void *, ...);
typedef struct { double d[2]; } two;
two __enzyme_fwddiff2(void *, ...);
/* recursive (halving, not a tail call: it stays recursive after optimization), so never inlined: each lane's
   shadows go through the callees' derived functions, one call for all lanes. rstep writes both outputs and
   overwrites x; rdot returns an active double */
void rstep(double *x, double *out, int lo, int hi) {
  if (hi - lo == 1) {
    double a = x[lo];
    out[0] += sin(a) * a;
    out[1] += a * a * x[0];
    x[lo] = cos(a) + a;
    return;
  }
  int mid = (lo + hi) / 2;
  rstep(x, out, mid, hi);
  rstep(x, out, lo, mid);
}
double rdot(const double *x, int lo, int hi) {
  if (hi - lo <= 1) return hi > lo ? x[lo] * x[lo] * x[0] : 0.0;
  int mid = (lo + hi) / 2;
  return rdot(x, lo, mid) * 0.75 + rdot(x, mid, hi);
}
void f(double *x, double *out, int n) {
  x[0] = x[0] * 1.5 + sin(x[1]);  /* (in the calls' block: its reverse must follow theirs in every lane) */
  rstep(x, out, 0, n);
  out[0] += rdot(x, 0, n);
  out[1] *= rdot(x, 0, n - 1);
}
double s(double *x, int n) { double out[2] = {0, 0}; f(x, out, n); return out[0] + 3 * out[1]; }
static const double x0[3] = {0.3, 0.7, 1.1};
int main(void) {
  char key[48];
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < 3; k++) {  /* central differences of out_j */
      double h = 1e-6, p[3], m[3], op[2] = {0}, om[2] = {0};
      memcpy(p, x0, sizeof p); memcpy(m, x0, sizeof m);
      p[k] += h; m[k] -= h; f(p, op, 3); f(m, om, 3);
      snprintf(key, sizeof key, "fd.%d.%d", j, k); report(key, (op[j] - om[j]) / (2 * h));
    }
  /* reverse, width 2: lane j seeded on out_j gives row j of the Jacobian */
  double x[3], dx[2][3] = {{0}}, out[2] = {0}, dout[2][2] = {{1, 0}, {0, 1}};
  memcpy(x, x0, sizeof x);
  __enzyme_autodiff_v((void *)f, enzyme_width, 2, enzyme_dup, x, dx[0], dx[1], enzyme_dup, out, dout[0], dout[1],
                      enzyme_const, 3);
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < 3; k++) { snprintf(key, sizeof key, "rev.%d.%d", j, k); report(key, dx[j][k]); }
  /* forward, width 3: lane k along x_k gives column k */
  double t[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, o[2] = {0}, dt[3][2] = {{0}};
  memcpy(x, x0, sizeof x);
  __enzyme_fwddiff_v((void *)f, enzyme_width, 3, enzyme_dup, x, t[0], t[1], t[2], enzyme_dup, o, dt[0], dt[1],
                     dt[2], enzyme_const, 3);
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < 3; k++) { snprintf(key, sizeof key, "fwd.%d.%d", j, k); report(key, dt[k][j]); }
  /* an active result returned by a recursive callee, and the result's tangent per lane */
  double v[2][3] = {{1, 0, 0}, {0.5, -1, 2}};
  memcpy(x, x0, sizeof x);
  two r = __enzyme_fwddiff2((void *)s, enzyme_width, 2, enzyme_dup, x, v[0], v[1], enzyme_const, 3);
  report("s.0", r.d[0]);
  report("s.1", r.d[1]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_vector_mode_through_recursive_calls(enzcc, opt):
    v = build_and_run(enzcc, RECURSIVE, opt)
    for j in range(2):
        for k in range(3):
            fd = v[f"fd.{j}.{k}"]
            assert v[f"rev.{j}.{k}"] == pytest.approx(fd, rel=1e-6, abs=1e-7), (j, k)
            assert v[f"fwd.{j}.{k}"] == pytest.approx(v[f"rev.{j}.{k}"], rel=1e-12, abs=1e-14), (j, k)
    col = lambda k: v[f"rev.0.{k}"] + 3 * v[f"rev.1.{k}"]  # noqa: E731
    assert v["s.0"] == pytest.approx(col(0), rel=1e-12)
    assert v["s.1"] == pytest.approx(0.5 * col(0) - col(1) + 2 * col(2), rel=1e-12)
    assert abs(v["rev.1.0"] - v["rev.0.0"]) > 1e-3  # (the lanes do differ)


NOT_INLINED = r"""
extern int enzyme_width;
void __enzyme_autodiff_v(void *, ...);
/* with --ad-inline=none g stays a call, between code whose reverse must come after (the store to x[0]) and
   before (out[0] *= x[1]) its own, in every lane */
__attribute__((noinline)) void g(double *x, double *out) {
  out[0] += x[0] * x[1];
  out[1] += sin(x[0]);
  x[1] = x[1] * x[0];
}
void f(double *x, double *out) {
  x[0] = x[0] * 1.5 + sin(x[1]);
  g(x, out);
  out[0] *= x[1];
}
int main(void) {
  char key[32];
  const double x0[2] = {0.4, 0.9};
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < 2; k++) {
      double h = 1e-6, p[2] = {x0[0], x0[1]}, m[2] = {x0[0], x0[1]}, op[2] = {0.5, 0.25}, om[2] = {0.5, 0.25};
      p[k] += h; m[k] -= h; f(p, op); f(m, om);
      snprintf(key, sizeof key, "fd.%d.%d", j, k); report(key, (op[j] - om[j]) / (2 * h));
    }
  double x[2] = {x0[0], x0[1]}, dx[2][2] = {{0}}, out[2] = {0.5, 0.25}, dout[2][2] = {{1, 0}, {0, 1}};
  __enzyme_autodiff_v((void *)f, enzyme_width, 2, enzyme_dup, x, dx[0], dx[1], enzyme_dup, out, dout[0], dout[1]);
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < 2; k++) { snprintf(key, sizeof key, "rev.%d.%d", j, k); report(key, dx[j][k]); }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_vector_mode_with_calls_not_inlined(enzcc, opt):
    v = build_and_run(enzcc, NOT_INLINED, opt, extra=("--ad-inline=none",))
    for j in range(2):
        for k in range(2):
            assert v[f"rev.{j}.{k}"] == pytest.approx(v[f"fd.{j}.{k}"], rel=1e-6, abs=1e-7), (j, k)


PRIMAL_AND_LANES = r"""
extern int enzyme_width, enzyme_primal_return;
typedef struct { double r; double d[2]; } res2;     /* 24 bytes: returned through memory */
typedef struct { float r; float d[3]; } res3f;      /* 16 bytes: in registers */
res2 __enzyme_fwddiff_r2(void *, ...);
res3f __enzyme_fwddiff_f(void *, ...);
double p(double a, int n) { return n == 0 ? 1 : a * p(a, n - 1); }  /* stays recursive */
double f(double a, double b) { return a * b + sin(a) * p(b, 3); }
float g(float a, const float *x) { return a * x[0] * x[1]; }
int main(void) {
  double a = 0.7, b = 1.3;
  res2 r = __enzyme_fwddiff_r2((void *)f, enzyme_width, 2, enzyme_primal_return, a, 1.0, 0.0, b, 0.0, 1.0);
  report("f", r.r); report("f.a", r.d[0]); report("f.b", r.d[1]);
  report("exact.f", a * b + sin(a) * b * b * b);
  report("exact.f.a", b + cos(a) * b * b * b); report("exact.f.b", a + 3 * sin(a) * b * b);
  float x[2] = {2, 3}, t0[2] = {1, 0}, t1[2] = {0, 1}, t2[2] = {0, 0};
  res3f s = __enzyme_fwddiff_f((void *)g, enzyme_width, 3, enzyme_primal_return, 0.5f, 0.0f, 0.0f, 1.0f,
                               enzyme_dup, x, t0, t1, t2);
  report("g", s.r); report("g.0", s.d[0]); report("g.1", s.d[1]); report("g.2", s.d[2]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_vector_mode_with_the_primal_result(enzcc, opt):
    """enzyme_primal_return with enzyme_width: the result, then one tangent per lane (it was refused)."""
    v = build_and_run(enzcc, PRIMAL_AND_LANES, opt)
    for k in ("f", "f.a", "f.b"):
        assert v[k] == pytest.approx(v[f"exact.{k}"], rel=1e-12), k
    assert (v["g"], v["g.0"], v["g.1"], v["g.2"]) == (3.0, 1.5, 1.0, 6.0)
