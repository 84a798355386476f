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
])
def test_vector_mode_errors(enzcc, call, message):
    src = f"""
extern int enzyme_width;
void __enzyme_fwddiff_v(void *, ...);
void __enzyme_autodiff_v(void *, ...);
double g(double a, double b) {{ return a * b; }}
double h(double *x) {{ return x[0] * x[0]; }}
int main(int argc, char **argv) {{
  int w = argc + 1;
  double x[1] = {{1}}, dx[1] = {{0}};
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
