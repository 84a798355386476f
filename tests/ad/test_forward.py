"""Forward mode (__enzyme_fwddiff): tangents against analytic values and finite differences."""

import pytest

from adharness import assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_scalar_tangent(enzcc, opt):
    src = r"""
double f(double x, double y) { return x * y + sin(x) / y + pow(x, 3.0) * exp(-y); }
int main(void) {
  double x = 1.1, y = 0.6;
  report("ad.x", __enzyme_fwddiff((void *)f, enzyme_dup, x, 1.0, enzyme_dup, y, 0.0));
  report("an.x", y + cos(x) / y + 3 * x * x * exp(-y));
  report("ad.y", __enzyme_fwddiff((void *)f, x, 0.0, y, 1.0));   /* no marker: doubles are dup */
  report("an.y", x - sin(x) / (y * y) - pow(x, 3.0) * exp(-y));
  report("ad.c", __enzyme_fwddiff((void *)f, enzyme_const, x, enzyme_dup, y, 1.0));
  report("an.c", x - sin(x) / (y * y) - pow(x, 3.0) * exp(-y));
  return 0;
}
"""
    assert_close(build_and_run(enzcc, src, opt), "ad.", "an.", rel=1e-12, abs_=1e-14)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_directional_derivative_through_memory_and_loops(enzcc, opt):
    src = r"""
void step(double *state, double *out, int n) {
  double *tmp = malloc(n * sizeof(double));
  for (int i = 0; i < n; i++) tmp[i] = state[i] * state[(i + 1) % n];
  int it = 0;
  while (it < 3) { for (int i = 0; i < n; i++) tmp[i] = sin(tmp[i]) + 0.5 * tmp[(i + n - 1) % n]; it++; }
  for (int i = 0; i < n; i++) out[i] = tmp[i] * tmp[i];
  free(tmp);
}
int main(void) {
  enum { N = 4 };
  double s[N] = {0.3, -0.7, 1.1, 0.5}, v[N] = {1, -2, 0.5, 0.25}, out[N], dout[N] = {0}, o1[N], o2[N];
  __enzyme_fwddiff((void *)step, enzyme_dup, s, v, enzyme_dup, out, dout, enzyme_const, N);
  double h = 1e-6, sp[N], sm[N];
  for (int i = 0; i < N; i++) { sp[i] = s[i] + h * v[i]; sm[i] = s[i] - h * v[i]; }
  step(sp, o1, N); step(sm, o2, N);
  for (int i = 0; i < N; i++) { char k[16];
    snprintf(k, 16, "ad.%d", i); report(k, dout[i]);
    snprintf(k, 16, "fd.%d", i); report(k, (o1[i] - o2[i]) / (2 * h)); }
  return 0;
}
"""
    assert_close(build_and_run(enzcc, src, opt), "ad.", "fd.", rel=1e-5, abs_=1e-6)


def test_forward_and_reverse_agree(enzcc):
    """<grad f, v> from reverse mode equals the forward-mode tangent along v."""
    src = r"""
double f(double *x, int n) { double s = 1; for (int i = 0; i < n; i++) s = s * cos(x[i]) + x[i] * x[i] * s; return s; }
int main(void) {
  double x[5] = {0.1, 0.4, -0.3, 0.9, 0.2}, g[5] = {0}, v[5] = {1, 0.5, -1, 2, 0.25}, dot = 0;
  __enzyme_autodiff((void *)f, enzyme_dup, x, g, enzyme_const, 5);
  for (int i = 0; i < 5; i++) dot += g[i] * v[i];
  report("ad.fwd", __enzyme_fwddiff((void *)f, enzyme_dup, x, v, enzyme_const, 5));
  report("rev.fwd", dot);
  return 0;
}
"""
    assert_close(build_and_run(enzcc, src, "-O2"), "ad.", "rev.", rel=1e-12)
