"""OpenMP parallel regions in forward mode, at -O0..-O3 (``enzcc -fopenmp``): the outlined function of each
region is forked again as its forward derivative, so tangents are computed in the same threads as their primal
values. What is not supported is a one-line error: reverse mode through a parallel region, a floating-point
value captured by value (``firstprivate``)."""

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

OPTS = ["-O0", "-O1", "-O2", "-O3"]

# two regions: an elementwise loop (a shared scalar read in every thread), then a reduction into a shared
# variable inside a critical section
PROGRAM = r"""
#include <omp.h>
double f(double *a, double s, int n) {
  #pragma omp parallel for
  for (int i = 0; i < n; i++) a[i] = sin(a[i]) * s + a[i] * a[i];
  double total = 0;
  #pragma omp parallel
  {
    double mine = 0;
    #pragma omp for
    for (int i = 0; i < n; i++) mine += a[i] * a[i] * (i + 1);
    #pragma omp critical
    total += mine;
  }
  return total;
}
int main(void) {
  enum { N = 100 };
  double a[N], da[N], b[N], ok = 0;
  for (int i = 0; i < N; i++) { a[i] = 0.01 * i - 0.3; da[i] = 0.5 + 0.001 * i; b[i] = a[i]; }
  double s = 1.7, ds = -0.4;
  double t = __enzyme_fwddiff((void *)f, a, da, s, ds, N);
  /* analytic: a'[i] = cos(b) s db + sin(b) ds + 2 b db; total' = sum 2 a[i] a'[i] (i+1) */
  double expect = 0;
  for (int i = 0; i < N; i++) {
    double db = 0.5 + 0.001 * i, ai = sin(b[i]) * s + b[i] * b[i];
    double dai = cos(b[i]) * s * db + sin(b[i]) * ds + 2 * b[i] * db;
    expect += 2 * ai * dai * (i + 1);
    char k[16]; snprintf(k, 16, "ad.a%d", i); report(k, da[i]); snprintf(k, 16, "an.a%d", i); report(k, dai);
  }
  report("ad.total", t); report("an.total", expect);
  report("threads", omp_get_max_threads());
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_forward_mode_through_parallel_regions(enzcc, opt):
    v = build_and_run(enzcc, PROGRAM, opt, extra=("-fopenmp",))
    assert_close(v, "ad.", "an.", rel=1e-12, abs_=1e-12)


def _refused(enzcc, source: str, message: str) -> None:
    enzcc.write("r.c", PRELUDE + source)
    r = enzcc("-O2", "-fopenmp", "-w", "r.c", "-lm", "-o", "r", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and message in r.stderr, r.stderr
    assert not (enzcc.cwd / "r").exists()


def test_firstprivate_float_is_refused(enzcc):
    # each thread's first iteration writes `in`, the rest 0: a zero tangent for `in` would be silently wrong
    _refused(enzcc, r"""
void f(double *a, double in, int n) {
  #pragma omp parallel for firstprivate(in)
  for (int i = 0; i < n; i++) { a[i] = in; in = 0; }
}
int main(void) { double a[8], da[8]; __enzyme_fwddiff((void *)f, a, da, 1.0, 1.0, 8); return 0; }
""", "captures a floating-point value by value")


def test_reverse_mode_through_a_parallel_region_is_refused(enzcc):
    _refused(enzcc, r"""
double f(double *a, int n) {
  double s = 0;
  #pragma omp parallel for reduction(+:s)
  for (int i = 0; i < n; i++) s += a[i] * a[i];
  return s;
}
int main(void) { double a[8] = {1}, da[8] = {0}; __enzyme_autodiff((void *)f, a, da, 8); return 0; }
""", "reverse mode through an OpenMP parallel region is not supported")
