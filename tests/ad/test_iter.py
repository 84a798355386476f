"""``__enzyme_iter(n, step)``: ``n`` in the primal, ``n + k step`` in code differentiated ``k`` times (nested
AD, in reverse and forward mode), at -O0..-O3. The values tell the levels apart: a count left at ``n`` (or
advanced twice in one level) gives other numbers."""

import pytest

from adharness import build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

PROGRAM = r"""
#include <stdint.h>
uint64_t __enzyme_iter(uint64_t, uint64_t);
/* f = n x^2 with n = 3 + 2k; g = sum over n = 2 + 3k iterations of x^2 */
double f(double x) { uint64_t n = __enzyme_iter(3, 2); return x * x * (double)n; }
double g(double x) { double r = 0; for (uint64_t i = 0; i < __enzyme_iter(2, 3); i++) r += x * x; return r; }
double df(double x) { return __enzyme_autodiff((void *)f, x); }
double ddf(double x) { return __enzyme_autodiff((void *)df, x); }
double fdf(double x) { return __enzyme_fwddiff((void *)df, x, 1.0); }
double dg(double x) { return __enzyme_fwddiff((void *)g, x, 1.0); }
double ddg(double x) { return __enzyme_autodiff((void *)dg, x); }
int main(void) {
  double x = 2.0;
  report("f", f(x)); report("df", df(x)); report("ddf", ddf(x)); report("fdf", fdf(x));
  report("g", g(x)); report("dg", dg(x)); report("ddg", ddg(x));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_iteration_count_grows_with_the_order(enzcc, opt):
    v = build_and_run(enzcc, PROGRAM, opt)
    # f = 3 x^2; df = 2 x (3 + 2) = 20; ddf = d/dx 2 x (3 + 4) = 14, by reverse or forward mode
    # g = 2 x^2; dg = 2 x (2 + 3) = 20; ddg = 2 (2 + 6) = 16
    assert v == {"f": 12, "df": 20, "ddf": 14, "fdf": 14, "g": 8, "dg": 20, "ddg": 16}
