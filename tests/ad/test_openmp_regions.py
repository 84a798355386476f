"""OpenMP regions, reverse mode: a reduction region reading a pointer captured by reference that holds no
derivatives (an ``enzyme_const`` argument: its captured local's shadow holds null, which the region must not
add adjoints through), and a buffer the differentiated function allocated; checked against central
differences at 1, 2 and 4 threads (:mod:`enzcc.ad.calls.openmp`)."""

import pytest

from adharness import assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")


def _run_with_threads(enzcc, counts, rel: float, abs_: float) -> None:
    for n in counts:
        out = enzcc.run("./t", env={"OMP_NUM_THREADS": n}).stdout
        w = {k: float(x) for k, x in (line.split() for line in out.splitlines())}
        assert_close(w, "ad.", "fd.", rel=rel, abs_=abs_)


# the loss of bench/parallel/heat_omp.c as a reduction region: u allocated by f, target enzyme_const
CONST_CAPTURE = r"""
double f(const double *p, int n, const double *target) {
  long m = n;
  double *u = malloc(sizeof(double) * m);
  for (long k = 0; k < m; k++) u[k] = p[k] * p[k] + sin(p[k]);
  double loss = 0;
  #pragma omp parallel for reduction(+: loss)
  for (long k = 0; k < m; k++) { double d = u[k] - target[k]; loss += d * d; }
  free(u);
  return loss;
}
int main(void) {
  enum { N = 37 };
  double a[N], t[N], da[N] = {0}, h = 1e-6;
  for (int i = 0; i < N; i++) { a[i] = 0.3 + 0.01 * i; t[i] = 0.1 * i; }
  __enzyme_autodiff((void *)f, enzyme_dup, a, da, enzyme_const, N, enzyme_const, t);
  for (int k = 0; k < N; k++) {
    a[k] += h; double up = f(a, N, t); a[k] -= 2 * h; double dn = f(a, N, t); a[k] += h;
    char key[16];
    snprintf(key, 16, "ad.%d", k); report(key, da[k]);
    snprintf(key, 16, "fd.%d", k); report(key, (up - dn) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_reduction_reading_a_const_pointer_and_an_allocated_buffer(enzcc, opt):
    v = build_and_run(enzcc, CONST_CAPTURE, opt, extra=("-fopenmp",))
    assert_close(v, "ad.", "fd.", rel=1e-6, abs_=1e-7)
    _run_with_threads(enzcc, ("1", "2", "4"), 1e-6, 1e-7)


# memcpy into buffers used only inside parallel regions: their types come from the regions' loads and stores
# (the regions capture the buffers' pointers by reference); before: "cannot tell whether the memory this memcpy
# copies holds floating-point values"
MEMCPY_INTO_REGION_MEMORY = r"""
static void step(int n, const double *src, double *dst) {
  #pragma omp parallel for schedule(static)
  for (int i = 1; i < n - 1; i++) dst[i] = src[i] + 0.1 * (src[i - 1] - 2 * src[i] + src[i + 1]) + 0.05 * sin(src[i]);
}
double f(const double *p, int n, int steps) {
  double *u = malloc(sizeof(double) * n), *v = malloc(sizeof(double) * n);
  memcpy(u, p, sizeof(double) * n);
  memcpy(v, p, sizeof(double) * n);
  for (int s = 0; s < steps; s += 2) { step(n, u, v); step(n, v, u); }
  double loss = 0;
  #pragma omp parallel for reduction(+: loss)
  for (int k = 0; k < n; k++) loss += u[k] * u[k] * (k + 1);
  free(u); free(v);
  return loss;
}
/* (p from outside: the caller shows nothing of what its memory holds) */
__attribute__((noinline)) void grad(const double *p, double *dp, int n) {
  __enzyme_autodiff((void *)f, enzyme_dup, p, dp, enzyme_const, n, enzyme_const, 4);
}
int main(void) {
  enum { N = 29 };
  double a[N], da[N] = {0}, h = 1e-6;
  for (int i = 0; i < N; i++) a[i] = 0.3 + 0.2 * sin(0.7 * i);
  grad(a, da, N);
  for (int k = 0; k < N; k++) {
    a[k] += h; double up = f(a, N, 4); a[k] -= 2 * h; double dn = f(a, N, 4); a[k] += h;
    char key[16];
    snprintf(key, 16, "ad.%d", k); report(key, da[k]);
    snprintf(key, 16, "fd.%d", k); report(key, (up - dn) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_memcpy_into_memory_used_only_in_parallel_regions(enzcc, opt):
    v = build_and_run(enzcc, MEMCPY_INTO_REGION_MEMORY, opt, extra=("-fopenmp",))
    assert_close(v, "ad.", "fd.", rel=1e-6, abs_=1e-7)
    _run_with_threads(enzcc, ("1", "2", "4"), 1e-6, 1e-7)
