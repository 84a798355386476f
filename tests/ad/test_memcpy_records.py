"""A memcpy of integers into a record that also holds a pointer to floats: an Eigen tensor's dimensions
(std::array<long, 4>, built in a local array) copied next to its data pointer. The record as a whole holds a
pointer and integers, but the bytes copied are integers only: the copy carries no derivative. Before, the copy
was refused ('cannot tell whether the memory this memcpy copies holds floating-point values'). Gradients against
the hand-written chain rule."""

import os
import re

import pytest

from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

FLAGS = ["-fno-unroll-loops", "-fno-vectorize", "-fno-slp-vectorize", "-fno-exceptions"]

GRID = r"""
#include <array>
#include <cmath>
#include <cstdio>
extern "C" void __enzyme_autodiff(void *, ...);
extern "C" int enzyme_dup;
struct Grid { float *data; std::array<long, 4> dims; };
/* out = f(in, w) on one fewer row: the new dimensions are made in a local array and copied into out */
__attribute__((noinline)) static void shrink(Grid *out, const Grid *in, const float *w) {
  std::array<long, 4> d;
  for (int i = 0; i < 4; i++) d[i] = in->dims[i] - (i == 1);
  long n = d[0] * d[1] * d[2] * d[3];
  if (n > out->dims[0] * out->dims[1] * out->dims[2] * out->dims[3]) __builtin_trap();  /* (as a resize checks) */
  out->dims = d;
  for (long i = 0; i < n; i++) out->data[i] = in->data[i] * in->data[i + 1] * w[0] + std::sin(w[1] * in->data[i]);
}
int main() {
  float a[30], da[30] = {0}, o[30], g[30];
  for (int i = 0; i < 30; i++) { a[i] = 0.1f * i; g[i] = 1.0f + 0.01f * i; }
  float w[2] = {1.5f, 0.7f}, dw[2] = {0, 0};
  Grid in{a, {1, 3, 2, 5}}, din{da, {1, 3, 2, 5}}, out{o, {1, 2, 3, 5}}, dout{g, {1, 2, 3, 5}};
  __enzyme_autodiff((void *)shrink, enzyme_dup, &out, &dout, enzyme_dup, &in, &din, enzyme_dup, w, dw);
  double e0 = 0, e1 = 0, ea = 0, maxerr = 0;
  for (int i = 0; i < 20; i++) {
    e0 += (1.0 + 0.01 * i) * a[i] * a[i + 1];
    e1 += (1.0 + 0.01 * i) * std::cos(0.7 * a[i]) * a[i];
  }
  for (int i = 0; i < 21; i++) {  /* d/da[i]: from out[i] and out[i-1] */
    double want = 0;
    if (i < 20) want += (1.0 + 0.01 * i) * (a[i + 1] * 1.5 + 0.7 * std::cos(0.7 * a[i]));
    if (i > 0) want += (1.0 + 0.01 * (i - 1)) * a[i - 1] * 1.5;
    double err = std::fabs(da[i] - want) / (1 + std::fabs(want));
    if (err > maxerr) maxerr = err;
  }
  printf("dw0 %.9g %.9g\ndw1 %.9g %.9g\nda %.3g\ndims %ld\n", dw[0], e0, dw[1], e1, maxerr, out.dims[1]);
}
"""


def _run(enzcc, source, opt, name):
    enzcc.write(f"{name}.cpp", source)
    enzcc(opt, *FLAGS, "-std=c++17", "-I/usr/include/eigen3", f"{name}.cpp", "-o", name, cmd="enzcc++")
    return enzcc.run(f"./{name}").stdout


@pytest.mark.parametrize("opt", ["-O1", "-O2"])
def test_integer_fields_copied_beside_a_data_pointer(enzcc, opt):
    out = _run(enzcc, GRID, opt, "grid")
    rows = {m.group(1): [float(x) for x in m.group(2).split()] for m in re.finditer(r"(\w+) (.+)", out)}
    for k in ("dw0", "dw1"):
        got, want = rows[k]
        assert abs(got - want) <= 1e-4 * (1 + abs(want)), (k, got, want)
    assert rows["da"][0] < 1e-5 and rows["dims"][0] == 2


TENSOR = r"""
#define EIGEN_DONT_VECTORIZE 1
#include <cstdio>
#include <unsupported/Eigen/CXX11/Tensor>
using Eigen::Tensor;
extern "C" void __enzyme_autodiff(void *, ...);
__attribute__((noinline)) static void conv(const Tensor<float, 2> *k, const Tensor<float, 4> *in, Tensor<float, 4> *out) {
  Eigen::array<ptrdiff_t, 2> dims({1, 2});
  *out = in->convolve(*k, dims);
}
int main() {
  Tensor<float, 4> in(2, 3, 4, 3), din(2, 3, 4, 3), out(2, 2, 3, 3), dout(2, 2, 3, 3);
  Tensor<float, 2> k(2, 2), dk(2, 2);
  in.setRandom(); k.setRandom(); dout.setRandom(); din.setZero(); dk.setZero();
  double want[2][2] = {{0, 0}, {0, 0}}, worst = 0;  /* d sum(dout * out) / d k(p, q), by hand (the reverse
                                                      sweep zeroes dout: before it) */
  for (int p = 0; p < 2; p++) for (int q = 0; q < 2; q++)
    for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j) for (int a = 0; a < 3; ++a) for (int l = 0; l < 3; ++l)
      want[p][q] += dout(i, j, a, l) * in(i, j + p, a + q, l);
  __enzyme_autodiff((void *)conv, &k, &dk, &in, &din, &out, &dout);
  for (int p = 0; p < 2; p++)
    for (int q = 0; q < 2; q++) {
      double w = want[p][q], err = (dk(p, q) - w) / (1 + (w < 0 ? -w : w));
      worst = err < 0 ? (-err > worst ? -err : worst) : (err > worst ? err : worst);
    }
  printf("worst %g\n", worst);
}
"""


@pytest.mark.skipif(not os.path.exists("/usr/include/eigen3/unsupported/Eigen/CXX11/Tensor"),
                    reason="needs libeigen3-dev")
@pytest.mark.parametrize("opt", ["-O1", "-O3"])
def test_eigen_tensor_convolution(enzcc, opt):
    out = _run(enzcc, TENSOR, opt, "tensor")
    assert float(out.split()[1]) < 1e-5, out
