"""BLAS routines the program defines itself (a reference BLAS compiled in, or a mock that logs each call into a
growable array, as Enzyme's BLAS tests do) are differentiated by the BLAS rules, as a library's would be: their
bodies run, never differentiated. Before, the bodies were inlined and the log refused ('cannot tell whether the
memory realloc moves holds floating-point values', 'a phi mixes memory with derivatives'). The definitions take
the order and transposition as ``char``, as Enzyme's mocks do; the derivative calls pass them as the definitions
take them. Gradients against the hand-written chain rule and central differences, and the logged calls: forward
mode makes the tangent calls before the call, the term of dx (dB) before that of dA, as Enzyme does. At -O1 and
above the definitions are kept from the optimizer's interprocedural passes until AD: a row-major-only gemv ignores
its order argument, which the calls then passed as poison, and the copy of A sized from it was lost (a silently
wrong gradient)."""

import re

import pytest

from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

SOURCE = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
extern "C" int enzyme_const, enzyme_dup;
template <typename RT, typename... T> RT __enzyme_fwddiff(void *, T...);
template <typename RT, typename... T> RT __enzyme_autodiff(void *, T...);
struct Entry { char op; char tag[4]; };
struct Log {                                   /* grows with realloc, as a call log does */
  Entry *data = nullptr; size_t cap = 0, len = 0;
  void push(char op, const char *tag) {
    if (len == cap) { cap = cap ? 2 * cap : 1; data = (Entry *)realloc(data, cap * sizeof(Entry)); }
    data[len].op = op; snprintf(data[len].tag, 4, "%s", tag); len++;
  }
} calls;
double *pA, *pdA, *px, *pdx, *py, *pdy;
static const char *tag(const double *p) {
  return p == pA ? "A" : p == pdA ? "dA" : p == px ? "x" : p == pdx ? "dx" : p == py ? "y" : p == pdy ? "dy" : "t";
}
extern "C" {
/* reference implementations, row-major only (order 101), trans 111 or 112 */
__attribute__((noinline)) double cblas_ddot(int n, double *x, int incx, double *y, int incy) {
  calls.push('d', tag(x)); double s = 0; for (int i = 0; i < n; i++) s += x[i * incx] * y[i * incy]; return s; }
__attribute__((noinline)) void cblas_daxpy(int n, double a, double *x, int incx, double *y, int incy) {
  calls.push('a', tag(x)); for (int i = 0; i < n; i++) y[i * incy] += a * x[i * incx]; }
__attribute__((noinline)) void cblas_dscal(int n, double a, double *x, int incx) {
  calls.push('s', tag(x)); for (int i = 0; i < n; i++) x[i * incx] *= a; }
__attribute__((noinline)) void cblas_dgemv(char order, char trans, int m, int n, double alpha, double *A, int lda,
                                           double *x, int incx, double beta, double *y, int incy) {
  calls.push('g', tag(A));
  int rows = trans == 111 ? m : n, cols = trans == 111 ? n : m;
  for (int i = 0; i < rows; i++) {
    double s = 0;
    for (int j = 0; j < cols; j++) s += (trans == 111 ? A[i * lda + j] : A[j * lda + i]) * x[j * incx];
    y[i * incy] = alpha * s + (beta == 0 ? 0 : beta * y[i * incy]);
  }
}
__attribute__((noinline)) void cblas_dger(char order, int m, int n, double alpha, double *x, int incx, double *y,
                                          int incy, double *A, int lda) {
  calls.push('r', tag(A));
  for (int i = 0; i < m; i++) for (int j = 0; j < n; j++) A[i * lda + j] += alpha * x[i * incx] * y[j * incy]; }
}
/* y = A x (2 x 3), f = y . y + sum(y) */
double f(double *A, double *x, double *y) {
  cblas_dgemv(101, 111, 2, 3, 1.5, A, 3, x, 1, 0.0, y, 1);
  return cblas_ddot(2, y, 1, y, 1);
}
double plain(const double *A, const double *x) {
  double s = 0;
  for (int i = 0; i < 2; i++) { double yi = 0; for (int j = 0; j < 3; j++) yi += 1.5 * A[i * 3 + j] * x[j]; s += yi * yi; }
  return s;
}
int main() {
  double A[6] = {0.3, -1.2, 0.7, 2.0, 0.1, -0.4}, x[3] = {0.9, -0.5, 1.3}, y[2], dA[6] = {0}, dx[3] = {0}, dy[2] = {0};
  pA = A; pdA = dA; px = x; pdx = dx; py = y; pdy = dy;
  double yy[2];
  for (int i = 0; i < 2; i++) { yy[i] = 0; for (int j = 0; j < 3; j++) yy[i] += 1.5 * A[i * 3 + j] * x[j]; }
  __enzyme_autodiff<void>((void *)f, enzyme_dup, A, dA, enzyme_dup, x, dx, enzyme_dup, y, dy);
  const double h = 1e-6;
  for (int j = 0; j < 3; j++) {  /* d/dx_j = sum_i 2 y_i 1.5 A_ij */
    double an = 0; for (int i = 0; i < 2; i++) an += 2 * yy[i] * 1.5 * A[i * 3 + j];
    double xp[3] = {x[0], x[1], x[2]}, xm[3] = {x[0], x[1], x[2]}; xp[j] += h; xm[j] -= h;
    printf("rx%d %.12g %.12g %.12g\n", j, dx[j], an, (plain(A, xp) - plain(A, xm)) / (2 * h));
  }
  for (int k = 0; k < 6; k++) {  /* d/dA_ij = 2 y_i 1.5 x_j */
    double an = 2 * yy[k / 3] * 1.5 * x[k % 3];
    double ap[6], am[6]; for (int q = 0; q < 6; q++) ap[q] = am[q] = A[q]; ap[k] += h; am[k] -= h;
    printf("rA%d %.12g %.12g %.12g\n", k, dA[k], an, (plain(ap, x) - plain(am, x)) / (2 * h));
  }
  printf("log-rev ");
  for (size_t i = 0; i < calls.len; i++) printf("%c", calls.data[i].op);
  printf("\n");
  calls.len = 0;
  double tA[6] = {0, 0, 1, 0, 0, 0}, tx[3] = {0, 1, 0}, ty[2];
  pdA = tA; pdx = tx; pdy = ty;
  double t = __enzyme_fwddiff<double>((void *)f, enzyme_dup, A, tA, enzyme_dup, x, tx, enzyme_dup, y, ty);
  double an = 0;  /* dA_02 = 1, dx_1 = 1: dy_i = 1.5 (A_i1 + [i == 0] x_2) */
  for (int i = 0; i < 2; i++) an += 2 * yy[i] * 1.5 * (A[i * 3 + 1] + (i == 0 ? x[2] : 0));
  printf("fwd %.12g %.12g %.12g\n", t, an, an);
  printf("log-fwd ");
  for (size_t i = 0; i < calls.len; i++) printf("%c:%s ", calls.data[i].op, calls.data[i].tag);
  printf("\n");
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_blas_defined_by_the_program_with_a_call_log(enzcc, opt):
    enzcc.write("b.cpp", SOURCE)
    enzcc(opt, "-fno-exceptions", "b.cpp", "-o", "b", cmd="enzcc++")
    out = enzcc.run("./b").stdout
    rows = {m.group(1): [float(v) for v in m.group(2).split()]
            for m in re.finditer(r"^(r[xA]\d|fwd) (.+)$", out, re.M)}
    assert len(rows) == 10, out
    for k, (ad, an, fd) in rows.items():
        assert abs(ad - an) <= 1e-10 * (1 + abs(an)), (k, ad, an)
        assert abs(ad - fd) <= 1e-5 * (1 + abs(an)), (k, ad, fd)
    log_rev = re.search(r"^log-rev (\S*)$", out, re.M).group(1)
    assert log_rev.startswith("gd") and "r" in log_rev, out  # the calls ran (never inlined), the reverse used BLAS
    # forward: the tangent calls before the call, dx's term before dA's
    log_fwd = re.search(r"^log-fwd (.*)$", out, re.M).group(1).split()
    assert log_fwd[:3] == ["g:A", "g:dA", "g:A"], out
