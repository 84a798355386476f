"""Complex numbers: C ``double _Complex`` and C++ ``std::complex<double>`` (arithmetic through ``__muldc3`` /
``__divdc3``, and cexp, clog, csqrt, csin, ccos, ctan, csinh, ccosh, ctanh, cpow, cabs, carg), in both modes at
-O0..-O3, against central differences; complex arrays through memory with their shadows."""

import re

import pytest

from adharness import build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

C_SRC = r"""
#include <complex.h>
typedef struct { double a, b; } pair;
/* a real function of (a, b) through every complex routine */
double f(double a, double b) {
  double complex z = a + b * I;
  double complex w = cexp(z) * z / (z + 2.0);
  double complex v = ctan(z) + csinh(z) * ccosh(z) - ctanh(z) / ccos(z);
  return cabs(w) + creal(csin(z)) + cimag(clog(z) * csqrt(z)) + carg(cpow(z, 1.5 + 0.5 * I)) + creal(v * conj(v));
}
/* complex numbers in memory: sum of |z_i|^2 * Re(z_{i+1}) */
double g(const double complex *z, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += creal(z[i] * conj(z[i])) * creal(z[(i + 1) % n]);
  return s;
}
int main(void) {
  const double a = 0.7, b = -0.4, h = 1e-6;
  pair r = ((pair (*)(void *, ...))__enzyme_autodiff)((void *)f, a, b);
  report("rev.a", r.a);
  report("rev.b", r.b);
  report("fwd.a", __enzyme_fwddiff((void *)f, a, 1.0, b, 0.0));
  report("fwd.b", __enzyme_fwddiff((void *)f, a, 0.0, b, 1.0));
  report("fd.a", (f(a + h, b) - f(a - h, b)) / (2 * h));
  report("fd.b", (f(a, b + h) - f(a, b - h)) / (2 * h));
  double complex z[3] = {1 + 2 * I, -0.5 + I, 0.25 - 1.5 * I}, dz[3] = {0};
  __enzyme_autodiff((void *)g, z, dz, 3);
  report("mem.re1", creal(dz[1]));
  report("mem.im1", cimag(dz[1]));
  /* by hand: d/d re(z1) = 2 re(z1) re(z2) + |z0|^2, d/d im(z1) = 2 im(z1) re(z2) */
  report("an.re1", 2 * -0.5 * 0.25 + 5.0);
  report("an.im1", 2 * 1.0 * 0.25);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_c_complex(enzcc, opt):
    v = build_and_run(enzcc, C_SRC, opt)
    for mode in ("rev", "fwd"):
        for k in ("a", "b"):
            assert v[f"{mode}.{k}"] == pytest.approx(v[f"fd.{k}"], rel=1e-6, abs=1e-7), (mode, k)
    assert v["mem.re1"] == pytest.approx(v["an.re1"], rel=1e-14)
    assert v["mem.im1"] == pytest.approx(v["an.im1"], rel=1e-14)


CXX_SRC = r"""
#include <complex>
#include <cstdio>
#include <vector>
#include <enzyme/enzyme>
using cd = std::complex<double>;
double f(double a, double b) {
  cd z(a, b);
  cd w = std::exp(z) * z / (z + 2.0) + std::pow(z, cd(1.5, 0.5)) * std::log(z);
  return std::abs(w) + std::arg(std::sqrt(z) * std::sin(z)) + std::norm(std::cosh(z));
}
double energy(const std::vector<cd> &v) {
  double s = 0;
  for (size_t i = 0; i + 1 < v.size(); i++) s += std::real(v[i] * std::conj(v[i + 1])) + std::abs(v[i]);
  return s;
}
int main() {
  const double a = 0.7, b = -0.4, h = 1e-6;
  auto r = enzyme::autodiff<enzyme::Reverse>(f, enzyme::Active<double>(a), enzyme::Active<double>(b));
  printf("rev.a %.17g\nrev.b %.17g\n", enzyme::get<0>(enzyme::get<0>(r)), enzyme::get<1>(enzyme::get<0>(r)));
  auto t = enzyme::autodiff<enzyme::Forward>(f, enzyme::Duplicated<double>(a, 1.0), enzyme::Const<double>(b));
  printf("fwd.a %.17g\n", enzyme::get<0>(t));
  printf("fd.a %.17g\nfd.b %.17g\n", (f(a + h, b) - f(a - h, b)) / (2 * h), (f(a, b + h) - f(a, b - h)) / (2 * h));
  std::vector<cd> v{cd(1, 2), cd(-0.5, 1), cd(0.25, -1.5)}, dv(3);
  enzyme::autodiff<enzyme::Reverse>(energy, enzyme::Duplicated<const std::vector<cd> &>(v, dv));
  /* d/d re(v1) = re(v0) + re(v2) + re(v1)/|v1|, d/d im(v1) = im(v0) + im(v2) + im(v1)/|v1| */
  printf("vec.re %.17g\nvec.an.re %.17g\n", dv[1].real(), 1 + 0.25 + -0.5 / std::abs(v[1]));
  printf("vec.im %.17g\nvec.an.im %.17g\n", dv[1].imag(), 2 - 1.5 + 1 / std::abs(v[1]));
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_std_complex(enzcc, opt):
    enzcc.write("c.cpp", CXX_SRC)
    enzcc(opt, "c.cpp", "-o", "c", cmd="enzcc++")
    v = {m.group(1): float(m.group(2)) for m in re.finditer(r"(\S+) (\S+)", enzcc.run("./c").stdout)}
    for k in ("a", "b"):
        assert v[f"rev.{k}"] == pytest.approx(v[f"fd.{k}"], rel=1e-6, abs=1e-7), k
    assert v["fwd.a"] == pytest.approx(v["fd.a"], rel=1e-6, abs=1e-7)
    assert v["vec.re"] == pytest.approx(v["vec.an.re"], rel=1e-14)
    assert v["vec.im"] == pytest.approx(v["vec.an.im"], rel=1e-14)


FLOAT_SRC = r"""
#include <complex.h>
typedef struct { float a, b; } pairf;
/* the same function in float _Complex (passed as <2 x float>; __mulsc3 / __divsc3) */
float f(float a, float b) {
  float complex z = a + b * I;
  float complex w = cexpf(z) * z / (z + 2.0f);
  float complex v = ctanf(z) + csinhf(z) * ccoshf(z) - ctanhf(z) / ccosf(z);
  return cabsf(w) + crealf(csinf(z)) + cimagf(clogf(z) * csqrtf(z)) + cargf(cpowf(z, 1.5f + 0.5f * I))
         + crealf(v * conjf(v));
}
int main(void) {
  const float a = 0.7f, b = -0.4f;
  pairf r = ((pairf (*)(void *, ...))__enzyme_autodiff)((void *)f, a, b);
  report("rev.a", r.a);
  report("rev.b", r.b);
  report("fwd.a", ((float (*)(void *, ...))__enzyme_fwddiff)((void *)f, a, 1.0f, b, 0.0f));
  report("fwd.b", ((float (*)(void *, ...))__enzyme_fwddiff)((void *)f, a, 0.0f, b, 1.0f));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_float_complex_matches_double(enzcc, opt):
    fl = build_and_run(enzcc, FLOAT_SRC, opt, name="fl")
    db = build_and_run(enzcc, C_SRC, opt, name="db")
    for k in ("rev.a", "rev.b", "fwd.a", "fwd.b"):
        assert fl[k] == pytest.approx(db[k.replace("fwd", "fd").replace("rev", "fd")], rel=1e-4), k
