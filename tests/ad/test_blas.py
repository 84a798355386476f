"""BLAS through CBLAS (OpenBLAS): cblas_{d,s}{dot,axpy,scal,nrm2,gemv,gemm} differentiated in both modes, at
-O0..-O3, against the same computation written as loops (which enzcc differentiates instruction by
instruction) and against central differences; the derivative code calls BLAS (checked in the IR)."""

import os

import pytest

from adharness import build_and_run
from enzcc_testing import need

pytestmark = [need("clang-22", "llvm-objcopy-22"),
              pytest.mark.skipif(not os.path.exists("/usr/include/x86_64-linux-gnu/cblas.h"),
                                 reason="needs libopenblas-dev (make setup installs it)")]

SRC = r"""
#include <cblas.h>
extern int enzyme_dup, enzyme_const, enzyme_dupnoneed;
typedef REAL real;

/* every routine, strided (x: stride 2) and transposed, in a loop (the arrays its reverse reads are overwritten later) */
real blas(const real *A, const real *x, real *y, real *z, int order, int trans, real a) {
  real s = 0;
  for (int it = 0; it < 2; it++) {
    if (order == 101)
      CAT(gemv)(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, 3, 2, 1.5, A, 2, x, 2, 0.5, y, 1);
    else
      CAT(gemv)(CblasColMajor, trans ? CblasTrans : CblasNoTrans, 3, 2, 1.5, A, 3, x, 2, 0.5, y, 1);
    CAT(scal)(2, a, y, 1);
    CAT(axpy)(2, a * a, x, 2, y, 1);
    s += CAT(dot)(2, y, 1, x, 2) + CAT(nrm2)(3, y, 1);
    CAT(gemm)(order == 101 ? CblasRowMajor : CblasColMajor, trans ? CblasTrans : CblasNoTrans,
              trans ? CblasNoTrans : CblasTrans, 2, 2, 3, 0.7, A, order == 101 ? (trans ? 2 : 3) : (trans ? 3 : 2),
              A, order == 101 ? (trans ? 2 : 3) : (trans ? 3 : 2), 0.25, z, 2);
    s += CAT(dot)(4, z, 1, z, 1);
    y[0] = s * (real)0.01;  /* overwritten: the copies must hold the old values */
  }
  return s;
}

static real f_at(const real *A0, const real *x0, const real *y0, const real *z0, int order, int trans, real a,
                 int which, int i, double h) {
  real A[6], x[6], y[3], z[4];
  for (int k = 0; k < 6; k++) A[k] = A0[k], x[k] = x0[k];
  for (int k = 0; k < 4; k++) z[k] = z0[k];
  for (int k = 0; k < 3; k++) y[k] = y0[k];
  if (which == 0) A[i] += h; else if (which == 1) x[i] += h; else if (which == 2) y[i] += h;
  else if (which == 3) z[i] += h; else a += h;
  return blas(A, x, y, z, order, trans, a);
}

int main(void) {
  const real A[6] = {1, 2, 3, 4, 5, 6.5}, x[6] = {0.5, 9, -1, 9, 0.75, 9}, y[3] = {1, 0.5, -0.5}, z[4] = {1, 2, 3, 4};
  char name[40];
  for (int order = 101; order <= 102; order++)
    for (int trans = 0; trans < 2; trans++) {
      real dA[6] = {0}, dx[6] = {0}, dy[3] = {0}, dz[4] = {0}, yy[3], zz[4];
      for (int k = 0; k < 3; k++) yy[k] = y[k];
      for (int k = 0; k < 4; k++) zz[k] = z[k];
      real da = ((real (*)(void *, ...))__enzyme_autodiff)((void *)blas, A, dA, x, dx, yy, dy, zz, dz,
                                                            enzyme_const, order, enzyme_const, trans, (real)1.3);
      /* forward: tangent along A[1], x[2], y[0], z[3] and a */
      real tA[6] = {0, 1, 0, 0, 0, 0}, tx[6] = {0, 0, 1, 0, 0, 0}, ty[3] = {1, 0, 0}, tz[4] = {0, 0, 0, 1};
      for (int k = 0; k < 3; k++) yy[k] = y[k];
      for (int k = 0; k < 4; k++) zz[k] = z[k];
      real t = ((real (*)(void *, ...))__enzyme_fwddiff)((void *)blas, A, tA, x, tx, yy, ty, zz, tz,
                                                          enzyme_const, order, enzyme_const, trans, (real)1.3, (real)1);
      snprintf(name, sizeof name, "fwd.%d.%d", order, trans); report(name, t);
      double h = sizeof(real) == 8 ? 1e-4 : 1e-2, sum = 0;
      const int sizes[5] = {6, 6, 3, 4, 1};
      const real *grads[5] = {dA, dx, dy, dz, &da};
      for (int w = 0; w < 5; w++)
        for (int i = 0; i < sizes[w]; i++) {
          double fd = ((double)f_at(A, x, y, z, order, trans, 1.3, w, i, h) -
                       (double)f_at(A, x, y, z, order, trans, 1.3, w, i, -h)) / (2 * h);
          snprintf(name, sizeof name, "rev.%d.%d.%d.%d", order, trans, w, i); report(name, grads[w][i]);
          snprintf(name, sizeof name, "fd.%d.%d.%d.%d", order, trans, w, i); report(name, fd);
          if ((w == 0 && i == 1) || (w == 1 && i == 2) || (w == 2 && i == 0) || (w == 3 && i == 3) || w == 4)
            sum += fd;
        }
      snprintf(name, sizeof name, "fdfwd.%d.%d", order, trans); report(name, sum);
    }
  return 0;
}
"""


def _check(v: dict, rel: float, abs_: float):
    revs = [k for k in v if k.startswith("rev.")]
    assert len(revs) == 4 * (6 + 6 + 3 + 4 + 1)
    for k in revs:
        fd = v["fd." + k[4:]]
        assert v[k] == pytest.approx(fd, rel=rel, abs=abs_), k
    for k in (k for k in v if k.startswith("fwd.")):
        assert v[k] == pytest.approx(v["fdfwd." + k[4:]], rel=rel, abs=abs_), k


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_dblas_against_finite_differences(enzcc, opt):
    src = SRC.replace("typedef REAL real;", "typedef double real;\n#define CAT(f) cblas_d##f")
    _check(build_and_run(enzcc, src, opt, extra=("-lopenblas",)), 1e-6, 1e-6)


def test_sblas_against_dblas(enzcc):
    """Single precision: the same derivatives as double precision (checked against differences above), to
    float accuracy (difference quotients of float code are too noisy to compare with)."""
    s = build_and_run(enzcc, SRC.replace("typedef REAL real;", "typedef float real;\n#define CAT(f) cblas_s##f"),
                      "-O2", extra=("-lopenblas",), name="s")
    d = build_and_run(enzcc, SRC.replace("typedef REAL real;", "typedef double real;\n#define CAT(f) cblas_d##f"),
                      "-O2", extra=("-lopenblas",), name="d")
    keys = [k for k in d if k.startswith(("rev.", "fwd."))]
    scale = max(abs(d[k]) for k in keys)
    for k in keys:
        assert s[k] == pytest.approx(d[k], rel=1e-4, abs=1e-6 * scale), k


def test_derivative_calls_blas_not_loops(enzcc):
    """The gradient of a gemm calls gemm (no loop over the matrices is generated)."""
    enzcc.write("g.c", r"""
#include <cblas.h>
void f(const double *A, const double *B, double *C) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 64, 64, 64, 1.0, A, 64, B, 64, 0.0, C, 64);
}
void __enzyme_autodiff(void *, ...);
void g(double *A, double *dA, double *B, double *dB, double *C, double *dC) {
  __enzyme_autodiff((void *)f, A, dA, B, dB, C, dC);
}
""")
    enzcc("-O2", "-S", "g.c", "-o", "g.s")
    asm = (enzcc.cwd / "g.s").read_text()
    g = asm[asm.index("g:\n"):]
    g = g[:g.index(".Lfunc_end")]
    assert g.count("cblas_dgemm") >= 4  # primal, dA, dB, dC scaled by beta
    assert not any(line.startswith(".LBB") for line in g.splitlines())  # straight-line code: no loops


def test_active_alpha_of_gemm_is_refused(enzcc):
    enzcc.write("a.c", r"""
#include <cblas.h>
void f(const double *A, double *C, double a) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, a, A, 2, A, 2, 0.0, C, 2);
}
double __enzyme_autodiff(void *, ...);
int main(void) {
  double A[4] = {1, 2, 3, 4}, dA[4] = {0}, C[4], dC[4] = {1, 1, 1, 1};
  return (int)__enzyme_autodiff((void *)f, A, dA, C, dC, 2.0);
}
""")
    proc = enzcc("-O2", "a.c", "-o", "a", "-lopenblas", check=False)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "alpha of cblas_dgemm are not supported" in lines[0], proc.stderr
