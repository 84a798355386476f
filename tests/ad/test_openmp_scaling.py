"""OpenMP reverse mode without needless atomic adds (:mod:`enzcc.ad.threads`): an element a thread writes in
a region without synchronisation is its own (``a[i] = g(a[i])``: plain adds), a shared scalar the region only
reads (captured by reference) is summed in each thread and added once; a stencil's neighbours, which other
threads read too, keep their atomic adds. Gradients = central differences at 1, 2 and 4 threads; the IR of the
reverse regions is counted (the old engine added atomically at every element and every read of ``s``)."""

import re

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

SOURCE = r"""
static void upd(double *a, double s, int n) {
  #pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++) a[i] = sin(a[i]) * s + s * s * a[i];
}
static void stencil(const double *a, double *b, double c, int n) {
  #pragma omp parallel for schedule(static)
  for (int i = 1; i < n - 1; i++) b[i] = a[i] + c * (a[i - 1] - 2 * a[i] + a[i + 1]) + a[i] * a[i + 1];
}
double f(double *a, double s, int n) {
  double *b = calloc(n, sizeof(double));
  upd(a, s, n);
  stencil(a, b, s * 0.1, n);
  double loss = 0;
  #pragma omp parallel for reduction(+: loss)
  for (int i = 0; i < n; i++) loss += b[i] * b[i] + a[i];
  free(b);
  return loss;
}
static double at(const double *a0, double s, int k, double dk, int n) {
  double a[64];
  for (int i = 0; i < n; i++) a[i] = a0[i];
  if (k >= 0) a[k] += dk;
  return f(a, s, n);
}
int main(void) {
  enum { N = 37 };
  double a0[N], a[N], da[N] = {0}, s = 0.8, h = 1e-6;
  for (int i = 0; i < N; i++) a[i] = a0[i] = 0.4 + 0.3 * sin(0.9 * i);
  double ds = __enzyme_autodiff((void *)f, enzyme_dup, a, da, s, enzyme_const, N);
  for (int k = 0; k < N; k++) {
    char key[16];
    snprintf(key, 16, "ad.a%d", k); report(key, da[k]);
    snprintf(key, 16, "fd.a%d", k); report(key, (at(a0, s, k, h, N) - at(a0, s, k, -h, N)) / (2 * h));
  }
  report("ad.s", ds); report("fd.s", (at(a0, s + h, -1, 0, N) - at(a0, s - h, -1, 0, N)) / (2 * h));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_gradients_at_one_two_and_four_threads(enzcc, opt):
    v = build_and_run(enzcc, SOURCE, opt, extra=("-fopenmp",))
    assert_close(v, "ad.", "fd.", rel=1e-6, abs_=1e-7)
    for n in ("1", "2", "4"):
        out = enzcc.run("./t", env={"OMP_NUM_THREADS": n}).stdout
        w = {k: float(x) for k, x in (line.split() for line in out.splitlines())}
        assert_close(w, "ad.", "fd.", rel=1e-6, abs_=1e-7)


def _atomic_adds(ir: str, region: str) -> int:
    """The atomic adds (and compare-exchange loops) in the reverse code of ``region``'s parallel function (its
    reverse function and the wrapper the fork runs, into which the optimizer may have inlined it)."""
    count = 0
    for m in re.finditer(r"^define [^\n]*@([\w.$]+)\(.*?^}", ir, re.M | re.S):
        if region in m.group(1) and "reverse" in m.group(1):
            count += len(re.findall(r"atomicrmw fadd|cmpxchg", m.group(0)))
    return count


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_atomic_adds_only_where_threads_may_collide(enzcc, opt):
    enzcc.write("t.c", PRELUDE + SOURCE)
    enzcc(opt, "-fopenmp", "-S", "-emit-llvm", "t.c", "-o", "t.ll")
    ir = (enzcc.cwd / "t.ll").read_text()
    # a[i] = sin(a[i]) s + s^2 a[i]: a[i] the thread's own, s summed in the thread: one atomic add, at the end
    assert _atomic_adds(ir, "upd.omp_outlined") == 1
    # the stencil: a[i-1], a[i], a[i+1] read by neighbouring threads too: atomic (c: once, at the end)
    assert _atomic_adds(ir, "stencil.omp_outlined") >= 3
    # forward mode needs none
    enzcc.write("g.c", PRELUDE + SOURCE.replace("__enzyme_autodiff((void *)f, enzyme_dup, a, da, s, enzyme_const, N)",
                                                "__enzyme_fwddiff((void *)f, a, da, s, 1.0, N)"))
    enzcc(opt, "-fopenmp", "-S", "-emit-llvm", "g.c", "-o", "g.ll")
    fwd = (enzcc.cwd / "g.ll").read_text()
    tangents = [m.group(0) for m in re.finditer(r"^define [^\n]*@fwddiffe[\w.$]*\(.*?^}", fwd, re.M | re.S)]
    assert tangents and not any(re.search(r"atomicrmw|cmpxchg", t) for t in tangents)
