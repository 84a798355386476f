"""Tape records made room for at a loop's entry (enzcc.ad.cache._loops_reserved_ahead): a loop whose iteration
count is known when it is entered pushes its records without a capacity test in each iteration. Gradients of
loops of every shape that test (counting up and down, i32 and i64 counters, do-while, a count that depends on
the outer loop, buffers swapped every step, a data-dependent exit, a break) against central differences, at
-O0 to -O2; the tape must also grow right when the reserved loop runs inside another one."""

import pytest

from adharness import assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

SOURCE = r"""
double f(const double *x, int n) {
  double *u = malloc(sizeof(double) * n), *v = malloc(sizeof(double) * n);
  for (int k = 0; k < n; k++) u[k] = v[k] = x[k];
  for (int s = 0; s < 7; s++) {                    /* buffers swapped each step (a stencil) */
    for (int k = 1; k < n - 1; k++) {
      double a = u[k];
      v[k] = a + 0.1 * (u[k - 1] + u[k + 1] - 2 * a) + 0.05 * (a - a * a * a);
    }
    double *t = u; u = v; v = t;
  }
  double acc = 0;
  for (long i = n - 1; i >= 0; i--) acc = sin(acc) + u[i];       /* counting down, i64 */
  unsigned j = 0;
  do { acc = acc * cos(u[j]) + 0.5; j++; } while (j != (unsigned)n);   /* do-while, i32, "ne" */
  for (int i = 0; i < n; i++)                       /* a triangle: the inner count depends on i */
    for (int k = 0; k <= i; k++) acc += 0.01 * sin(u[k] * acc);
  int m = 0;
  while (acc > 0.1 && m < 50) { acc = 0.9 * acc * acc / (1 + acc); m++; }   /* a data-dependent exit */
  for (int i = 0; i < n; i++) {                     /* a break */
    if (u[i] > 10.0) break;
    acc += u[i] * exp(-acc * 0.1);
  }
  free(u); free(v);
  return acc;
}

int main(void) {
  enum { N = 9 };
  double x[N], dx[N] = {0};
  for (int i = 0; i < N; i++) x[i] = 0.3 * sin(1.7 * i + 0.4);
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, N);
  for (int i = 0; i < N; i++) {
    double h = 1e-6, up[N], down[N];
    memcpy(up, x, sizeof x); memcpy(down, x, sizeof x);
    up[i] += h; down[i] -= h;
    char name[16];
    snprintf(name, sizeof name, "ad%d", i); report(name, dx[i]);
    snprintf(name, sizeof name, "fd%d", i); report(name, (f(up, N) - f(down, N)) / (2 * h));
  }
  /* many calls, longer arrays: the tape grows while a reserved loop runs inside another loop */
  enum { M = 300 };
  double *y = malloc(sizeof(double) * M), *dy = calloc(M, sizeof(double));
  for (int i = 0; i < M; i++) y[i] = 0.2 * cos(0.01 * i);
  __enzyme_autodiff((void *)f, enzyme_dup, y, dy, enzyme_const, M);
  for (int i = 0; i < M; i += 97) {
    double h = 1e-6, keep = y[i];
    y[i] = keep + h; double fu = f(y, M);
    y[i] = keep - h; double fd = f(y, M);
    y[i] = keep;
    char name[16];
    snprintf(name, sizeof name, "bigad%d", i); report(name, dy[i]);
    snprintf(name, sizeof name, "bigfd%d", i); report(name, (fu - fd) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2"])
def test_loops_with_records_made_room_for_at_entry(enzcc, opt):
    v = build_and_run(enzcc, SOURCE, opt)
    assert_close(v, "ad", "fd", rel=1e-5, abs_=1e-7)
    assert_close(v, "bigad", "bigfd", rel=1e-5, abs_=1e-7)
    assert any(abs(v[f"ad{i}"]) > 1e-3 for i in range(9))
