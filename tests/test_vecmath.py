"""-fveclib=libmvec (enzcc.backend.vecmath): a program's math calls (its derivatives' too) become calls of glibc's
vector variants where the loop vectorizer vectorizes them; without the flag nothing changes. Values
and gradients are checked against the scalar build (libmvec is accurate to 4 ulp) and against the analytic
derivative."""

from __future__ import annotations

import re

import pytest

from enzcc_testing import need

pytestmark = need("clang-22")

PROGRAM = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
void __enzyme_autodiff(void *, ...);
int enzyme_dup, enzyme_const;

void f(const double *x, long n, double *y) {
  for (long i = 0; i < n; i++) y[i] = sin(x[i]) * exp(0.25 * x[i]) + pow(x[i], 2.0);
}

int main(void) {
  enum { N = 1000 };
  double *x = malloc(N * sizeof *x), *dx = calloc(N, sizeof *dx), *y = malloc(N * sizeof *y);
  double *dy = malloc(N * sizeof *dy);
  for (long i = 0; i < N; i++) { x[i] = -3.0 + 6.0 * i / N; dy[i] = 1.0; }
  f(x, N, y);
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, (long)N, enzyme_dup, y, dy);
  for (long i = 0; i < N; i++) printf("%.17g %.17g %.17g\n", x[i], y[i], dx[i]);
  return 0;
}
"""


def run(enzcc, *flags) -> list[tuple[float, float, float]]:
    enzcc.write("p.c", PROGRAM)
    enzcc("-O2", *flags, "p.c", "-o", "p", "-lm")
    out = enzcc.run("./p").stdout
    return [tuple(map(float, line.split())) for line in out.splitlines()]


def called(enzcc, *flags) -> set[str]:
    enzcc("-O2", *flags, "-S", "-emit-llvm", "p.c", "-o", "p.ll")
    return set(re.findall(r"call [^@\n]*@(\w[\w.]*)\(", (enzcc.cwd / "p.ll").read_text()))


def test_libmvec_vectorizes_the_program_and_its_derivative(enzcc):
    import math
    scalar = run(enzcc)
    vector = run(enzcc, "-fveclib=libmvec", "-fno-math-errno")
    assert len(vector) == len(scalar) == 1000
    for (x, y0, g0), (x1, y1, g1) in zip(scalar, vector):
        assert x == x1
        want = math.cos(x) * math.exp(0.25 * x) + 0.25 * math.sin(x) * math.exp(0.25 * x) + 2 * x
        assert abs(y1 - y0) <= 1e-14 * max(1.0, abs(y0))
        assert abs(g1 - g0) <= 1e-14 * max(1.0, abs(g0))
        assert abs(g1 - want) <= 1e-13 * max(1.0, abs(want))
    plain = called(enzcc)
    assert not [c for c in plain if c.startswith("_ZGV")]
    vec = called(enzcc, "-fveclib=libmvec", "-fno-math-errno")
    assert {"_ZGVbN2v_sin", "_ZGVbN2v_exp"} <= vec, vec  # (generic x86-64: SSE's two-wide variants)


def test_unknown_library_is_one_line_error(enzcc):
    enzcc.write("p.c", PROGRAM)
    proc = enzcc("-O2", "-fveclib=SVML", "-c", "p.c", "-o", "p.o", check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "-fveclib=SVML" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (enzcc.cwd / "p.o").exists()


def test_annotate_marks_math_calls_only():
    from enzcc.backend import vecmath
    text = ('define void @g(ptr %p, double %x, float %z) #0 {\n'
            '  %a = call double @llvm.sin.f64(double %x)\n'
            '  %b = tail call fast double @pow(double %x, double %a) #1\n'
            '  %c = call float @expf(float %z)\n'
            '  %d = call double @foo(double %x)\n'
            '  ret void\n}\n'
            'declare double @llvm.sin.f64(double)\ndeclare double @pow(double, double)\n'
            'declare float @expf(float)\ndeclare double @foo(double)\n'
            'attributes #0 = { "target-features"="+avx2,+sse2" }\nattributes #1 = { nounwind }\n')
    out = vecmath.annotate(text, "libmvec")
    assert '@llvm.sin.f64(double %x) "vector-function-abi-variant"="_ZGV_LLVM_N2v_llvm.sin.f64(_ZGVbN2v_sin),' \
           '_ZGV_LLVM_N4v_llvm.sin.f64(_ZGVdN4v_sin)"' in out
    assert '_ZGV_LLVM_N4vv_pow(_ZGVdN4vv_pow)' in out and "(_ZGVdN8v_expf)" in out
    assert "@foo(double %x)\n" in out
    assert "declare <4 x double> @_ZGVdN4vv_pow(<4 x double>, <4 x double>)" in out
    assert vecmath.annotate(text, "none") == text
    with pytest.raises(Exception, match="libmvec"):
        vecmath.check_library("SVML", "x86_64-unknown-linux-gnu")
