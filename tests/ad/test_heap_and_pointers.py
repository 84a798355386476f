"""realloc'd buffers and calls through tables of function pointers, in both modes at -O0..-O3, against
analytic derivatives (the cases the fuzzer found refused)."""

import pytest

from adharness import build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

REALLOC = r"""
/* h grows by realloc while it is filled; f = sum_i h[i] h[i+1 mod n] with h[i] = x[i]^2 */
double f(double *x, int n) {
  int cap = 1;
  double *h = malloc(cap * sizeof(double));
  for (int i = 0; i < n; i++) {
    if (i >= cap) { cap *= 2; h = realloc(h, cap * sizeof(double)); }
    h[i] = x[i] * x[i];
  }
  double s = 0;
  for (int i = 0; i < n; i++) s += h[i] * h[(i + 1) % n];
  h = realloc(h, 2 * sizeof(double));  /* shrinking keeps the first two */
  s += 3 * h[1];
  free(h);
  return s;
}
int main(void) {
  enum { N = 7 };
  double x[N], dx[N] = {0};
  for (int i = 0; i < N; i++) x[i] = 0.3 + 0.1 * i;
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, N);
  char name[32];
  for (int j = 0; j < N; j++) {
    double tx[N] = {0};
    tx[j] = 1;
    double t = __enzyme_fwddiff((void *)f, enzyme_dup, x, tx, enzyme_const, N);
    double exact = 2 * x[j] * (x[(j + 1) % N] * x[(j + 1) % N] + x[(j + N - 1) % N] * x[(j + N - 1) % N])
                   + (j == 1 ? 6 * x[1] : 0);
    snprintf(name, sizeof name, "rev.%d", j); report(name, dx[j]);
    snprintf(name, sizeof name, "fwd.%d", j); report(name, t);
    snprintf(name, sizeof name, "exact.%d", j); report(name, exact);
  }
  return 0;
}
"""

TABLE = r"""
static double mul(double a, double b) { return a * b; }
static double hyp(double a, double b) { return sqrt(a * a + b * b); }
static double (*const ops[2])(double, double) = {mul, hyp};
/* the target depends on a run-time value: both entries of the table are differentiated */
double f(double *x, int n) {
  double s = 0;
  for (int i = 0; i + 1 < n; i++) s += ops[i % 2](x[i], x[i + 1]);
  double (*pick)(double, double) = x[0] > 0 ? hyp : mul;
  return s + pick(x[0], 2.0);
}
int main(void) {
  double x[3] = {0.5, 1.5, -2.0}, dx[3] = {0};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, 3);
  double tx[3] = {0, 0, 1};
  double t2 = __enzyme_fwddiff((void *)f, enzyme_dup, x, tx, enzyme_const, 3);
  /* f = x0 x1 + sqrt(x1^2 + x2^2) + sqrt(x0^2 + 4) */
  double r = sqrt(x[1] * x[1] + x[2] * x[2]);
  report("rev.0", dx[0]); report("exact.0", x[1] + x[0] / sqrt(x[0] * x[0] + 4));
  report("rev.1", dx[1]); report("exact.1", x[0] + x[1] / r);
  report("rev.2", dx[2]); report("exact.2", x[2] / r);
  report("fwd.2", t2);
  return 0;
}
"""


def _check(values, keys):
    for k in keys:
        exact = values[f"exact.{k}"]
        for mode in ("rev", "fwd"):
            if f"{mode}.{k}" in values:
                got = values[f"{mode}.{k}"]
                assert abs(got - exact) <= 1e-10 * max(1.0, abs(exact)), f"{mode}.{k}={got}, exact {exact}"


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_realloc_moves_derivatives(enzcc, opt):
    _check(build_and_run(enzcc, REALLOC, opt), range(7))


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_function_pointer_table_and_select(enzcc, opt):
    _check(build_and_run(enzcc, TABLE, opt), range(3))
