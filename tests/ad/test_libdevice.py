"""CUDA's libdevice in derivatives (``enzcc/ad/calls/libdevice.py``, ``enzcc/backend/libdevice.py``) and tapes
in GPU code (``enzcc/ad/tape.py``).

- The rules' values: a CPU program calls the ``__nv_*`` functions, defined in a native object the AD never
  sees (libm underneath), so its derivatives come from the family's rules; both modes against central
  differences, double and float.
- Device code: kernels with libm math (CUDA and C for NVPTX) differentiated in both modes give PTX that ptxas
  takes, libdevice inlined, no ``realloc``; the derivative calls libdevice's functions (``__nv_cos`` for
  ``__nv_sin``), not ``cos``.
- Device tapes: the derivative of a function whose loops need a tape, made in an NVPTX module, then run on the
  CPU (JIT: the same IR with the host's triple) against central differences: counted loops (the exact record
  made at entry) and a loop of unknown count (malloc + copy + free).
- Errors: no libdevice, LLVM's code generation failing: one line, no traceback, no temporary left.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess

import pytest

from enzcc_testing import have, jit, need
from enzcc.tools import cuda_path

pytestmark = need("clang-22", "llvm-objcopy-22")

needs_cuda = pytest.mark.skipif(not have("ptxas") or cuda_path(required=False) is None,
                                reason="needs the CUDA toolkit (ptxas, libdevice)")

# -- the rules' values on the CPU ------------------------------------------------------------------------------

#: native definitions of the libdevice functions the programs and their derivatives call (libm underneath)
NV = r"""
#include <math.h>
#define D1(n, e) double __nv_##n(double x) { return e; } float __nv_##n##f(float xf) { double x = xf; return e; }
#define D2(n, e) double __nv_##n(double x, double y) { return e; } \
                 float __nv_##n##f(float xf, float yf) { double x = xf, y = yf; return e; }
D1(sin, sin(x)) D1(cos, cos(x)) D1(tan, tan(x)) D1(exp, exp(x)) D1(exp2, exp2(x)) D1(exp10, pow(10, x))
D1(expm1, expm1(x)) D1(log, log(x)) D1(log2, log2(x)) D1(log10, log10(x)) D1(log1p, log1p(x)) D1(sqrt, sqrt(x))
D1(rsqrt, 1 / sqrt(x)) D1(cbrt, cbrt(x)) D1(rcbrt, 1 / cbrt(x)) D1(tanh, tanh(x)) D1(sinh, sinh(x))
D1(cosh, cosh(x)) D1(asin, asin(x)) D1(acos, acos(x)) D1(atan, atan(x)) D1(asinh, asinh(x)) D1(acosh, acosh(x))
D1(atanh, atanh(x)) D1(erf, erf(x)) D1(erfc, erfc(x)) D1(fabs, fabs(x)) D1(floor, floor(x)) D1(trunc, trunc(x))
D1(rint, rint(x)) D1(sinpi, sin(M_PI * x)) D1(cospi, cos(M_PI * x)) D1(normcdf, 0.5 * erfc(-x / sqrt(2)))
D1(erfcx, exp(x * x) * erfc(x)) D1(j0, j0(x)) D1(j1, j1(x)) D1(y0, y0(x)) D1(y1, y1(x)) D1(lgamma, lgamma(x))
D1(tgamma, tgamma(x)) D1(cyl_bessel_i0, bessel_i(0, x)) D1(cyl_bessel_i1, bessel_i(1, x))
D1(erfinv, erfinv(x)) D1(erfcinv, erfinv(1 - x)) D1(normcdfinv, sqrt(2) * erfinv(2 * x - 1))
D2(pow, pow(x, y)) D2(atan2, atan2(x, y)) D2(hypot, hypot(x, y)) D2(rhypot, 1 / hypot(x, y))
D2(fmin, fmin(x, y)) D2(fmax, fmax(x, y)) D2(fdim, fdim(x, y)) D2(copysign, copysign(x, y)) D2(fmod, fmod(x, y))
D2(remainder, remainder(x, y))
"""
NV_HEAD = r"""
#include <math.h>
static double bessel_i(int n, double x) {  /* the series of I_n */
  double term = n ? x / 2 : 1, sum = 0;
  for (int k = 0; k < 40; k++) { sum += term; term *= x * x / 4 / ((k + 1) * (k + 1 + n)); }
  return sum;
}
static double erfinv(double x) {  /* Newton on erf */
  double y = 0;
  for (int k = 0; k < 60; k++) y -= (erf(y) - x) / (1.1283791670955126 * exp(-y * y));
  return y;
}
"""
NV_TAIL = r"""
double __nv_powi(double x, int n) { return pow(x, n); }
double __nv_ldexp(double x, int n) { return ldexp(x, n); }
double __nv_norm3d(double a, double b, double c) { return sqrt(a * a + b * b + c * c); }
double __nv_rnorm3d(double a, double b, double c) { return 1 / sqrt(a * a + b * b + c * c); }
double __nv_fma(double a, double b, double c) { return fma(a, b, c); }
void __nv_sincos(double x, double *s, double *c) { *s = sin(x); *c = cos(x); }
double __nv_frexp(double x, int *e) { return frexp(x, e); }
double __nv_modf(double x, double *i) { return modf(x, i); }
double __nv_remquo(double x, double y, int *q) { return remquo(x, y, q); }
double __nv_dadd_rn(double a, double b) { return a + b; }
double __nv_dsub_rz(double a, double b) { return a - b; }
double __nv_dmul_ru(double a, double b) { return a * b; }
double __nv_ddiv_rn(double a, double b) { return a / b; }
double __nv_drcp_rn(double a) { return 1 / a; }
double __nv_dsqrt_rd(double a) { return sqrt(a); }
double __nv_fma_rn(double a, double b, double c) { return fma(a, b, c); }
float __nv_double2float_rn(double x) { return (float)x; }
float __nv_fast_sinf(float x) { return sinf(x); }
float __nv_fast_cosf(float x) { return cosf(x); }
float __nv_fast_expf(float x) { return expf(x); }
float __nv_fast_logf(float x) { return logf(x); }
float __nv_fast_powf(float x, float y) { return powf(x, y); }
float __nv_fast_fdividef(float a, float b) { return a / b; }
float __nv_powif(float x, int n) { return powf(x, n); }
float __nv_fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
float __nv_frcp_rn(float a) { return 1 / a; }
float __nv_saturatef(float a) { return fminf(fmaxf(a, 0), 1); }
int __nv_float2int_rn(float x) { return (int)rintf(x); }
int __nv_isnand(double x) { return isnan(x); }
"""

#: name -> (expression of a, b, c, the point): double
DOUBLE = {
    "sin": ("__nv_sin(a) * a", (0.7,)), "cos": ("__nv_cos(a)", (0.7,)), "tan": ("__nv_tan(a)", (0.4,)),
    "exp": ("__nv_exp(a) * a", (0.3,)), "exp2": ("__nv_exp2(a)", (0.3,)), "exp10": ("__nv_exp10(a)", (0.3,)),
    "expm1": ("__nv_expm1(a)", (0.3,)), "log": ("__nv_log(a)", (1.3,)), "log2": ("__nv_log2(a)", (1.3,)),
    "log10": ("__nv_log10(a)", (1.3,)), "log1p": ("__nv_log1p(a)", (0.3,)),
    "pow": ("__nv_pow(a, b)", (1.3, 0.7)), "powi": ("__nv_powi(a, 3)", (1.3,)), "sqrt": ("__nv_sqrt(a)", (1.3,)),
    "rsqrt": ("__nv_rsqrt(a)", (1.3,)), "cbrt": ("__nv_cbrt(a)", (1.3,)), "rcbrt": ("__nv_rcbrt(a)", (1.3,)),
    "tanh": ("__nv_tanh(a)", (0.6,)), "sinh": ("__nv_sinh(a)", (0.6,)), "cosh": ("__nv_cosh(a)", (0.6,)),
    "asin": ("__nv_asin(a)", (0.4,)), "acos": ("__nv_acos(a)", (0.4,)), "atan": ("__nv_atan(a)", (0.4,)),
    "atan2": ("__nv_atan2(a, b)", (0.4, 1.1)), "asinh": ("__nv_asinh(a)", (0.4,)),
    "acosh": ("__nv_acosh(a)", (1.5,)), "atanh": ("__nv_atanh(a)", (0.4,)), "erf": ("__nv_erf(a)", (0.4,)),
    "erfc": ("__nv_erfc(a)", (0.4,)), "hypot": ("__nv_hypot(a, b)", (0.4, 1.1)),
    "fmin": ("__nv_fmin(a, b)", (0.4, 1.1)), "fmax": ("__nv_fmax(a, b) * a", (0.4, 1.1)),
    "fabs": ("__nv_fabs(a) * b", (-0.4, 1.1)), "fma": ("__nv_fma(a, b, c)", (0.4, 1.1, 0.3)),
    "floor": ("__nv_floor(a) * a", (2.4,)), "sinpi": ("__nv_sinpi(a)", (0.3,)), "cospi": ("__nv_cospi(a)", (0.3,)),
    "normcdf": ("__nv_normcdf(a)", (0.3,)), "erfcx": ("__nv_erfcx(a)", (0.3,)), "erfinv": ("__nv_erfinv(a)", (0.3,)),
    "erfcinv": ("__nv_erfcinv(a)", (0.7,)), "normcdfinv": ("__nv_normcdfinv(a)", (0.3,)),
    "j0": ("__nv_j0(a)", (0.8,)), "j1": ("__nv_j1(a)", (0.8,)), "y0": ("__nv_y0(a)", (0.8,)),
    "y1": ("__nv_y1(a)", (0.8,)), "i0": ("__nv_cyl_bessel_i0(a)", (0.8,)), "i1": ("__nv_cyl_bessel_i1(a)", (0.8,)),
    "fdim": ("__nv_fdim(a, b)", (1.4, 1.1)), "rhypot": ("__nv_rhypot(a, b)", (0.4, 1.1)),
    "norm3d": ("__nv_norm3d(a, b, c)", (0.4, 1.1, 0.3)), "rnorm3d": ("__nv_rnorm3d(a, b, c)", (0.4, 1.1, 0.3)),
    "lgamma": ("__nv_lgamma(a)", (1.7,)), "tgamma": ("__nv_tgamma(a)", (1.7,)),
    "fmod": ("__nv_fmod(a, b)", (4.3, 1.1)), "remainder": ("__nv_remainder(a, b)", (4.3, 1.1)),
    "ldexp": ("__nv_ldexp(a, 3)", (0.4,)), "copysign": ("__nv_copysign(a, -1.0)", (0.4,)),
    "sincos": ("({ double s, c; __nv_sincos(a, &s, &c); s * c + s * a; })", (0.4,)),
    "frexp": ("({ int e; __nv_frexp(a, &e) * e; })", (3.3,)),
    "modf": ("({ double i; __nv_modf(a, &i) * b + i; })", (3.3, 1.1)),
    "remquo": ("({ int q; __nv_remquo(a, b, &q); })", (4.3, 1.1)),
    "dadd_rn": ("__nv_dadd_rn(a, b) * a", (0.4, 1.1)), "dsub_rz": ("__nv_dsub_rz(a, b) * a", (0.4, 1.1)),
    "dmul_ru": ("__nv_dmul_ru(a, b) * a", (0.4, 1.1)), "ddiv_rn": ("__nv_ddiv_rn(a, b)", (0.4, 1.1)),
    "drcp_rn": ("__nv_drcp_rn(a)", (0.4,)), "dsqrt_rd": ("__nv_dsqrt_rd(a)", (0.4,)),
    "fma_rn": ("__nv_fma_rn(a, b, c)", (0.4, 1.1, 0.3)),
    "float2int": ("a * __nv_float2int_rn((float)(a * 3)) + (__nv_isnand(a) ? 0 : a)", (0.7,)),
}
#: the same for float functions (``af``...: the arguments as floats)
FLOAT = {
    "sinf": ("__nv_sinf(af)", (0.7,)), "expf": ("__nv_expf(af)", (0.3,)), "powf": ("__nv_powf(af, bf)", (1.3, 0.7)),
    "tanhf": ("__nv_tanhf(af)", (0.6,)), "atan2f": ("__nv_atan2f(af, bf)", (0.4, 1.1)),
    "rsqrtf": ("__nv_rsqrtf(af)", (1.3,)), "erff": ("__nv_erff(af)", (0.4,)), "sinpif": ("__nv_sinpif(af)", (0.3,)),
    "fast_sinf": ("__nv_fast_sinf(af)", (0.7,)), "fast_expf": ("__nv_fast_expf(af)", (0.3,)),
    "fast_powf": ("__nv_fast_powf(af, bf)", (1.3, 0.7)), "fast_fdividef": ("__nv_fast_fdividef(af, bf)", (0.4, 1.1)),
    "powif": ("__nv_powif(af, 3)", (1.3,)), "fmaf_rn": ("__nv_fmaf_rn(af, bf, cf)", (0.4, 1.1, 0.3)),
    "frcp_rn": ("__nv_frcp_rn(af)", (0.4,)), "saturatef": ("__nv_saturatef(af) * bf", (0.4, 1.1)),
    "double2float": ("(double)__nv_double2float_rn(a) * a", (0.4,)),
}


def _program(cases: dict, step: float) -> str:
    decls = "\n".join(sorted(set(re.findall(r"__nv_\w+", NV_TAIL + " ".join(e for e, _ in cases.values())))))
    lines = [r"""
#include <stdio.h>
#include <string.h>
extern int enzyme_dup, enzyme_const;
void __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
""", NV_PROTOTYPES(decls)]
    for name, (expr, point) in cases.items():
        lines.append(f"static double f_{name}(double *x) {{ double a = x[0], b = x[1], c = x[2]; "
                     f"float af = a, bf = b, cf = c; (void)b; (void)c; (void)af; (void)bf; (void)cf; "
                     f"return {expr}; }}")
    lines.append("int main(void) {")
    for name, (expr, point) in cases.items():
        init = ", ".join(map(repr, point))
        lines.append(f"""  {{ double x[3] = {{{init}}}, dx[3] = {{0}}, h = {step};
    __enzyme_autodiff((void *)f_{name}, enzyme_dup, x, dx);
    for (int i = 0; i < {len(point)}; i++) {{
      double t[3] = {{0}}, xp[3], xm[3];
      t[i] = 1;
      double fwd = __enzyme_fwddiff((void *)f_{name}, enzyme_dup, x, t);
      memcpy(xp, x, sizeof xp); memcpy(xm, x, sizeof xm); xp[i] += h; xm[i] -= h;
      printf("{name} %d %.17g %.17g %.17g\\n", i, dx[i], fwd, (f_{name}(xp) - f_{name}(xm)) / (2 * h));
    }} }}""")
    lines.append("  return 0;\n}\n")
    return "\n".join(lines)


def NV_PROTOTYPES(names: str) -> str:
    """Prototypes of the ``__nv_*`` functions named (one a line), read from the native definitions."""
    source = NV + NV_TAIL
    out = []
    for name in names.split():
        m = re.search(rf"\b(double|float|void|int) {name}\(([^)]*)\)", source)
        if m:
            out.append(f"{m.group(1)} {name}({m.group(2)});")
            continue
        stem = name[len("__nv_"):]
        single = stem.endswith("f") and re.search(rf"D[12]\({stem[:-1]},", NV)
        m = re.search(rf"D([12])\({stem[:-1] if single else stem},", NV)
        ty = "float" if single else "double"
        out.append(f"{ty} {name}({', '.join([ty] * int(m.group(1)))});")
    return "\n".join(out)


def _results(enzcc, cases: dict, step: float) -> list[tuple[str, int, float, float, float]]:
    enzcc.write("nv.c", NV_HEAD + NV + NV_TAIL)
    subprocess.run(["clang-22", "-O1", "-c", "nv.c", "-o", "nv.o"], cwd=enzcc.cwd, check=True)
    enzcc.write("t.c", _program(cases, step))
    enzcc("-O2", "t.c", "nv.o", "-lm", "-o", "t")
    out = []
    for line in enzcc.run("./t").stdout.splitlines():
        name, i, rev, fwd, fd = line.split()
        out.append((name, int(i), float(rev), float(fwd), float(fd)))
    return out


def _check(results, cases: dict, rel: float, abs_: float) -> None:
    assert {r[0] for r in results} == set(cases)
    bad = [r for r in results
           if not all(abs(v - r[4]) <= abs_ + rel * abs(r[4]) for v in (r[2], r[3]))]
    assert not bad, "derivative (reverse, forward) != central difference: " + "; ".join(
        f"{n}[{i}]: {rev:.10g}, {fwd:.10g} vs {fd:.10g}" for n, i, rev, fwd, fd in bad)


def test_libdevice_rules_in_double_match_central_differences_in_both_modes(enzcc):
    _check(_results(enzcc, DOUBLE, 1e-6), DOUBLE, 1e-6, 1e-7)


def test_libdevice_rules_in_float_match_central_differences_in_both_modes(enzcc):
    _check(_results(enzcc, FLOAT, 1e-2), FLOAT, 2e-3, 2e-3)



VECTOR = r"""
#include <stdio.h>
extern int enzyme_width;
void __enzyme_fwddiff_v(void *, ...);
void __enzyme_autodiff_v(void *, ...);
double __nv_sin(double), __nv_exp(double), __nv_pow(double, double), __nv_atan2(double, double);
double __nv_tanh(double);
/* y_0 = sin(x_0) exp(x_1), y_1 = pow(x_0, x_1) + atan2(x_1, x_0) + tanh(x_0) */
void f(const double *x, double *y) {
  y[0] = __nv_sin(x[0]) * __nv_exp(x[1]);
  y[1] = __nv_pow(x[0], x[1]) + __nv_atan2(x[1], x[0]) + __nv_tanh(x[0]);
}
int main(void) {
  double x[2] = {0.7, 1.3}, y[2], h = 1e-6;
  for (int j = 0; j < 2; j++) {  /* central differences: column j */
    double xp[2] = {x[0], x[1]}, xm[2] = {x[0], x[1]}, yp[2], ym[2];
    xp[j] += h; xm[j] -= h; f(xp, yp); f(xm, ym);
    for (int i = 0; i < 2; i++) printf("fd %d %d %.17g\n", i, j, (yp[i] - ym[i]) / (2 * h));
  }
  double e0[2] = {1, 0}, e1[2] = {0, 1}, t0[2], t1[2];  /* forward, width 2: the columns */
  __enzyme_fwddiff_v((void *)f, enzyme_width, 2, x, e0, e1, y, t0, t1);
  for (int i = 0; i < 2; i++) printf("fwd %d 0 %.17g\nfwd %d 1 %.17g\n", i, t0[i], i, t1[i]);
  double r0[2] = {0}, r1[2] = {0}, s0[2] = {1, 0}, s1[2] = {0, 1};  /* reverse, width 2: the rows */
  __enzyme_autodiff_v((void *)f, enzyme_width, 2, x, r0, r1, y, s0, s1);
  for (int j = 0; j < 2; j++) printf("rev 0 %d %.17g\nrev 1 %d %.17g\n", j, r0[j], j, r1[j]);
  return 0;
}
"""


def test_libdevice_rules_in_vector_mode(enzcc):
    enzcc.write("nv.c", NV_HEAD + NV + NV_TAIL)
    subprocess.run(["clang-22", "-O1", "-c", "nv.c", "-o", "nv.o"], cwd=enzcc.cwd, check=True)
    enzcc.write("v.c", VECTOR)
    enzcc("-O2", "v.c", "nv.o", "-lm", "-o", "v")
    values = {}
    for line in enzcc.run("./v").stdout.splitlines():
        kind, i, j, v = line.split()
        values[kind, int(i), int(j)] = float(v)
    for kind in ("fwd", "rev"):
        for i in range(2):
            for j in range(2):
                fd = values["fd", i, j]
                assert abs(values[kind, i, j] - fd) <= 1e-5 * abs(fd) + 1e-6, (kind, i, j, values[kind, i, j], fd)


def test_the_bits_of_a_float_with_derivatives_are_refused(enzcc):
    enzcc.write("nv.c", "#include <string.h>\n"
                "int __nv_double2hiint(double x) { long long b; memcpy(&b, &x, 8); return (int)(b >> 32); }\n"
                "int __nv_double2loint(double x) { long long b; memcpy(&b, &x, 8); return (int)b; }\n"
                "double __nv_hiloint2double(int h, int l) {\n"
                "  long long b = ((long long)h << 32) | (unsigned)l; double x; memcpy(&x, &b, 8); return x; }\n")
    subprocess.run(["clang-22", "-O1", "-c", "nv.c", "-o", "nv.o"], cwd=enzcc.cwd, check=True)
    for call in ("__enzyme_autodiff((void *)f, enzyme_dup, x, dx)", "__enzyme_fwddiff((void *)f, enzyme_dup, x, dx)"):
        enzcc.write("b.c", f"""
extern int enzyme_dup;
double __enzyme_autodiff(void *, ...), __enzyme_fwddiff(void *, ...);
int __nv_double2hiint(double), __nv_double2loint(double);
double __nv_hiloint2double(int, int);
/* |x| through the bits of x: its derivative would be lost in the integers */
static double f(double *x) {{ return __nv_hiloint2double(__nv_double2hiint(x[0]) & 0x7fffffff,
                                                         __nv_double2loint(x[0])); }}
int main(void) {{ double x[1] = {{-0.7}}, dx[1] = {{1}}; return (int){call}; }}
""")
        proc = enzcc("-O2", "b.c", "nv.o", "-o", "b", check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "it takes apart or puts together the bits of a float with derivatives" in proc.stderr, proc.stderr

# -- device code: PTX ------------------------------------------------------------------------------------------

KERNELS = r"""
#include <math.h>
__device__ int enzyme_dup;
__device__ int enzyme_const;
__device__ void __enzyme_autodiff(void *, ...);
__device__ double __enzyme_fwddiff(void *, ...);
__device__ double f(double *x, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) {
    double a, b;
    sincos(x[i], &a, &b);
    s = s * cos(s) + sin(x[i]) * exp(x[i]) + pow(x[i], 2.5) + tanh(x[i]) + atan2(x[i], 2.0) + a * b + erf(x[i]);
  }
  return s;
}
__device__ float ff(float *x, int n) {
  float s = 0;
  for (int i = 0; i < n; i++)
    s = s * cosf(s) + sinf(x[i]) * expf(x[i]) + powf(x[i], 2.5f) + tanhf(x[i]) + atan2f(x[i], 2.0f) + rsqrtf(x[i]);
  return s;
}
__global__ void grad(double *x, double *dx, int n) {
  __enzyme_autodiff((void *)f, enzyme_dup, x + threadIdx.x * n, dx + threadIdx.x * n, enzyme_const, n);
}
__global__ void gradf(float *x, float *dx, int n) {
  __enzyme_autodiff((void *)ff, enzyme_dup, x + threadIdx.x * n, dx + threadIdx.x * n, enzyme_const, n);
}
__global__ void tangent(double *x, double *dx, double *out, int n) {
  out[threadIdx.x] = __enzyme_fwddiff((void *)f, enzyme_dup, x + threadIdx.x * n, dx + threadIdx.x * n,
                                      enzyme_const, n);
}
"""


def _ptxas(enzcc, name: str) -> None:
    proc = subprocess.run(["ptxas", "-arch=sm_90", name, "-o", "/dev/null"], cwd=enzcc.cwd, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def _calls(ptx: str) -> set[str]:
    return set(re.findall(r"call(?:\.uni)?\s*(?:\([^)]*\),\s*)?([\w$]+)", ptx))


@needs_cuda
@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_cuda_kernels_with_math_differentiate_to_ptx_that_ptxas_takes(enzcc, opt):
    enzcc.write("k.cu", KERNELS)
    enzcc(opt, "-S", "k.cu", "-o", "k.ptx")
    _ptxas(enzcc, "k.ptx")
    ptx = (enzcc.cwd / "k.ptx").read_text()
    assert all(f".entry {k}" in ptx for k in ("_Z4gradPdS_i", "_Z5gradfPfS_i", "_Z7tangentPdS_S_i"))
    calls = _calls(ptx)
    # libdevice inlined (nothing left to resolve), the tapes in device memory, growing without realloc
    assert not {c for c in calls if c.startswith("__nv_") or c in ("realloc", "abort", "cos", "sin")}, calls
    assert {"malloc", "free", "vprintf"} <= calls, calls


def _device_ir(enzcc, name: str, source: str, cuda: bool = True, optimized: bool = False) -> str:
    """The device side of ``source`` as clang makes it for enzcc (unoptimized, libdevice not linked), or
    ``optimized`` as enzcc optimizes before AD (no unrolling or vectorization)."""
    enzcc.write(name, source)
    from enzcc.frontends.cuda import CUDA_STUB_DIR

    lang = ["--target=nvptx64-nvidia-cuda", "-march=sm_90"]
    if cuda:
        lang = ["-x", "cuda", f"--cuda-path={cuda_path()}", "--cuda-gpu-arch=sm_90", "--cuda-device-only",
                "-nocudalib", "-Wno-unknown-cuda-version", "-idirafter", CUDA_STUB_DIR]
    opt = ["-fno-unroll-loops", "-fno-vectorize", "-fno-slp-vectorize"] if optimized else \
        ["-Xclang", "-disable-llvm-passes"]
    subprocess.run(["clang++-22" if cuda else "clang-22", *lang, "-O2", *opt, "-emit-llvm", "-S", name, "-o",
                    "out.ll"], cwd=enzcc.cwd, check=True)
    return (enzcc.cwd / "out.ll").read_text()


@needs_cuda
def test_derivative_code_calls_libdevice_not_libm(enzcc):
    import llvmlite.binding as llvm

    from enzcc.ad import differentiate_text
    from enzcc.backend.pipeline import unmangle_api_names

    mod = llvm.parse_assembly(_device_ir(enzcc, "k.cu", KERNELS))
    unmangle_api_names(mod)  # (C++'s __enzyme_autodiff, as the pipeline does)
    text, count = differentiate_text(str(mod))
    assert count == 3
    declared = set(re.findall(r"^declare [^@]*@([\w.$]+)\(", text, re.M))
    # sin's derivative is __nv_cos, cosf's __nv_sinf...; no libm function, no math intrinsic NVPTX lacks
    assert {"__nv_cos", "__nv_sin", "__nv_sinf", "__nv_cosf", "__nv_pow", "__nv_powf", "__nv_exp"} <= declared
    assert not declared & {"cos", "sin", "cosf", "sinf", "pow", "exp", "llvm.cos.f64", "llvm.sin.f64",
                           "llvm.pow.f64", "llvm.cos.f32", "llvm.exp.f64"}, declared
    derivatives = "".join(re.findall(r"^define [^@]*@(?:fwd)?diffe_.*?^}$", text, re.M | re.S))
    assert derivatives.count("define") == 3 and "@__nv_sincos(" not in derivatives  # (sin, cos and stores)


C_KERNEL = r"""
double sin(double), exp(double), pow(double, double), erf(double), cbrt(double), tanh(double);
float expf(float), atan2f(float, float);
int enzyme_dup, enzyme_const;
void __enzyme_autodiff(void *, ...);
static double f(double *x, int n) {
  double s = 0;
  for (int i = 0; i < n; i++)
    s += sin(x[i]) * exp(x[i]) + pow(x[i], 1.5) + erf(x[i]) + cbrt(x[i]) + tanh(x[i]) + __builtin_powi(x[i], 3) +
         expf((float)x[i]) + atan2f((float)x[i], 2.0f);
  return s;
}
__attribute__((nvptx_kernel)) void primal(double *x, double *y, int n) { y[0] = f(x, n); }
__attribute__((nvptx_kernel)) void grad(double *x, double *dx, int n) {
  int t = __nvvm_read_ptx_sreg_tid_x();
  __enzyme_autodiff((void *)f, enzyme_dup, x + t * n, dx + t * n, enzyme_const, n);
}
"""


@needs_cuda
@pytest.mark.parametrize("ad_mode", ["after-opt", "before-opt"])
def test_c_math_for_nvptx_calls_libdevice(enzcc, ad_mode):
    enzcc.write("k.c", C_KERNEL)
    enzcc("--target=nvptx64-nvidia-cuda", "-march=sm_90", "-O2", f"--ad-mode={ad_mode}", "-S", "k.c", "-o",
          "k.ptx")
    _ptxas(enzcc, "k.ptx")
    calls = _calls((enzcc.cwd / "k.ptx").read_text())
    assert not {c for c in calls if c.startswith("__nv_") or c in ("sin", "exp", "pow", "erf", "realloc")}, calls
    enzcc("--target=nvptx64-nvidia-cuda", "-O2", "-S", "-emit-llvm", "k.c", "-o", "k.ll")
    text = (enzcc.cwd / "k.ll").read_text()
    assert '!"nvvm-reflect-ftz", i32 0}' in text and "__nvvm_reflect" not in text  # (resolved by NVVMReflect)
    assert not re.search(r"define (?!internal)[^@]*@__nv_", text)  # libdevice's functions are internal


# -- device tapes, run on the CPU ------------------------------------------------------------------------------

TAPED = r"""
int enzyme_dup, enzyme_const;
void __enzyme_autodiff(void *, ...);
double f(const double *x, int n, int m) {
  double t = 0.5;
  for (int i = 0; i < n; i++)  /* counted: one record per iteration, made room for at the loop's entry */
    t = t * t * 0.25 + x[i] * t + 0.1;
  double s = t;
  int k = 0;
  while (s < 40.0 && k < 1000) {  /* a count known only at the end: the tape grows */
    for (int j = 0; j < m; j++)  /* counted, inside: its records made room for at each entry */
      s = s * (1.0 + 0.01 * x[(k + j) % n]) + x[j % n] * x[j % n] * 0.01 * s;
    s = s + 0.3 + 0.05 * x[k % n] * s;
    k++;
  }
  return s;
}
void grad(const double *x, double *dx, int n, int m) {
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, n, enzyme_const, m);
}
"""


def _host_text(enzcc) -> str:
    """TAPED's derivative made in an NVPTX module, then given the host's triple (its allocations logged)."""
    import llvmlite.binding as llvm

    from enzcc.ad import differentiate_text

    text, count = differentiate_text(_device_ir(enzcc, "t.c", TAPED, cuda=False, optimized=True))
    assert count == 1
    for banned in ("@realloc(", "@abort("):
        assert banned not in text
    assert "@malloc(" in text and "@vprintf(" in text and "cudaLimitMallocHeapSize" in text
    text = re.sub(r'^target (datalayout|triple) = .*$', "", text, flags=re.M)
    text = re.sub(r'"target-(cpu|features)"="[^"]*"', "", text)
    text = text.replace("@malloc(", "@logged_malloc(")
    llvm.parse_assembly(text)  # (still valid)
    return f'target triple = "{llvm.get_default_triple()}"\n' + text


class _DeviceHeap:
    """``malloc`` (logging sizes, failing above ``limit``) and ``vprintf`` (writing the format with its one i64 to
    standard error) for the JIT."""

    def __init__(self):
        self.sizes: list[int] = []
        self.limit = 1 << 40
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]

        @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
        def malloc(n):
            self.sizes.append(n)
            return libc.malloc(n) if n <= self.limit else None

        @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64))
        def vprintf(fmt, args):
            text = fmt.decode().replace("%llu", str(args[0]))
            return os.write(2, text.encode())

        self._keep = (malloc, vprintf)
        import llvmlite.binding as llvm
        llvm.add_symbol("logged_malloc", ctypes.cast(malloc, ctypes.c_void_p).value)
        llvm.add_symbol("vprintf", ctypes.cast(vprintf, ctypes.c_void_p).value)


def _taped(enzcc):
    heap = _DeviceHeap()
    engine = jit(_host_text(enzcc))
    f = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.POINTER(ctypes.c_double), ctypes.c_int, ctypes.c_int)(
        engine.get_function_address("f"))
    grad = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double), ctypes.c_int,
                            ctypes.c_int)(engine.get_function_address("grad"))
    return heap, engine, f, grad


def test_device_tapes_give_the_gradient_on_the_cpu(enzcc):
    import math

    heap, engine, f, grad = _taped(enzcc)
    n, m = 7, 3
    x = (ctypes.c_double * n)(*[0.3 + 0.1 * i for i in range(n)])
    dx = (ctypes.c_double * n)()
    grad(x, dx, n, m)
    sizes = heap.sizes
    assert sizes[0] == 8 * n, sizes  # exactly the counted loop's records (one double each)
    assert len(sizes) > 3 and all(b >= 2 * a for a, b in zip(sizes, sizes[1:])), sizes  # then doubling
    h = 1e-6
    for i in range(n):
        xp, xm = (ctypes.c_double * n)(*x), (ctypes.c_double * n)(*x)
        xp[i] += h
        xm[i] -= h
        fd = (f(xp, n, m) - f(xm, n, m)) / (2 * h)
        assert math.isclose(dx[i], fd, rel_tol=1e-5, abs_tol=1e-6), (i, dx[i], fd)


def test_a_full_device_heap_stops_the_kernel_saying_how_to_raise_it(enzcc):
    heap, engine, f, grad = _taped(enzcc)
    n = 7
    x = (ctypes.c_double * n)(*[0.3 + 0.1 * i for i in range(n)])
    dx = (ctypes.c_double * n)()
    err = os.memfd_create("stderr")
    pid = os.fork()
    if pid == 0:  # the child runs out of heap and traps
        try:
            import faulthandler
            faulthandler.disable()  # (pytest's would report the trap)
            os.dup2(err, 2)
            heap.limit = 300
            grad(x, dx, n, 3)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    os.lseek(err, 0, os.SEEK_SET)
    message = os.read(err, 1 << 16).decode()
    os.close(err)
    assert os.WIFSIGNALED(status), (status, message)  # (llvm.trap)
    assert message.startswith("enzcc: a derivative's tape needs 512 bytes more of the device heap") and \
        "cudaDeviceSetLimit(cudaLimitMallocHeapSize" in message, message



# -- kernels run on the CPU (host emulation: enzcc/backend/cuda_host.py) -----------------------------------------

EMULATED = r"""#include <cmath>
#include <cstdio>
__device__ int enzyme_dup;
__device__ int enzyme_const;
template <typename... T> __device__ void __enzyme_autodiff(void *, T...);
template <typename... T> __device__ double __enzyme_fwddiff(void *, T...);

#define N 6
#define THREADS 8
/* a counted loop and one of unknown count, both needing a tape; libdevice's math in double */
__host__ __device__ double f(const double *x, int n) {
  double t = 0.5;
  for (int i = 0; i < n; i++)
    t = sin(t) * exp(x[i] * 0.3) + pow(fabs(x[i]) + 1.0, 1.5) * 0.1 + tanh(t * x[i]);
  double s = t;
  for (int k = 0; s < 30.0 && k < 500; k++)
    s = s + 0.5 + 0.2 * atan2(x[k % n], 1.5) * s + erf(s * 0.01) + log1p(cbrt(s * s));
  return s;
}
/* float: sinf(u) expf(u) + powf(u, 1.5) for u = x0 x1, derivative known */
__host__ __device__ double g(const double *x, int n) {
  float u = (float)x[0] * (float)x[1];
  return (double)(sinf(u) * expf(u) + powf(u, 1.5f) + tanhf(u));
}
__global__ void grad(const double *x, double *dx, double *dg, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  __enzyme_autodiff((void *)f, enzyme_dup, x + i * n, dx + i * n, enzyme_const, n);
  __enzyme_autodiff((void *)g, enzyme_dup, x + i * n, dg + i * n, enzyme_const, n);
}
__global__ void tangent(const double *x, const double *v, double *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = __enzyme_fwddiff((void *)f, enzyme_dup, x + i * n, v + i * n, enzyme_const, n);
}
int main() {
  double hx[THREADS * N], hdx[THREADS * N], hdg[THREADS * N], hv[THREADS * N] = {0}, ht[THREADS];
  for (int i = 0; i < THREADS * N; i++) hx[i] = 0.2 + 0.07 * (i % 11) - 0.03 * (i / N);
  for (int t = 0; t < THREADS; t++) hv[t * N + t % N] = 1;
  double *x, *dx, *dg, *v, *out;
  cudaMalloc(&x, sizeof hx); cudaMalloc(&dx, sizeof hx); cudaMalloc(&dg, sizeof hx);
  cudaMalloc(&v, sizeof hx); cudaMalloc(&out, sizeof ht);
  cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
  cudaMemcpy(v, hv, sizeof hv, cudaMemcpyHostToDevice);
  cudaMemset(dx, 0, sizeof hx); cudaMemset(dg, 0, sizeof hx);
  grad<<<2, THREADS / 2>>>(x, dx, dg, N);
  tangent<<<2, THREADS / 2>>>(x, v, out, N);
  cudaMemcpy(hdx, dx, sizeof hx, cudaMemcpyDeviceToHost);
  cudaMemcpy(hdg, dg, sizeof hx, cudaMemcpyDeviceToHost);
  cudaMemcpy(ht, out, sizeof ht, cudaMemcpyDeviceToHost);
  const double h = 1e-6;
  for (int t = 0; t < THREADS; t++) {
    for (int j = 0; j < N; j++) {
      double xp[N], xm[N];
      for (int k = 0; k < N; k++) xp[k] = xm[k] = hx[t * N + k];
      xp[j] += h, xm[j] -= h;
      double fd = (f(xp, N) - f(xm, N)) / (2 * h);
      printf("rev %d %d %.17g %.17g\n", t, j, hdx[t * N + j], fd);
      if (j == t % N) printf("fwd %d %d %.17g %.17g\n", t, j, ht[t], fd);
    }
    double a = hx[t * N], b = hx[t * N + 1], u = a * b;
    double du = cos(u) * exp(u) + sin(u) * exp(u) + 1.5 * sqrt(u) + 1 - tanh(u) * tanh(u);
    printf("float %d 0 %.17g %.17g\nfloat %d 1 %.17g %.17g\n", t, hdg[t * N], du * b, t, hdg[t * N + 1], du * a);
  }
  return 0;
}
"""


@needs_cuda
def test_kernel_gradients_with_libdevice_and_device_tapes_in_host_emulation(enzcc):
    """Each thread differentiates a function with a counted loop and one of unknown count (a tape in the device
    heap) and libdevice's math, in both modes; the host side's finite differences of the same function (host
    libm) and, for float math, the analytic derivative."""
    from enzcc.backend.cuda_host import build_host_emulation

    enzcc.write("p.cu", EMULATED)
    enzcc("-O2", "-S", "-emit-llvm", "p.cu", "-o", "p.ll")
    device = (enzcc.cwd / "p.ll").read_text()
    assert "@malloc(" in device and "@realloc(" not in device and not re.search(r"declare[^@]*@__nv_", device)
    build_host_emulation(device, [str(enzcc.cwd / "p.cu")], str(enzcc.cwd / "p"),
                         workdir=str(enzcc.cwd / "emulation"), cuda_path=cuda_path())
    seen = set()
    for line in enzcc.run("./p").stdout.splitlines():
        kind, t, j, value, want = line.split()
        value, want = float(value), float(want)
        rel = 1e-5 if kind == "float" else 1e-6
        assert abs(value - want) <= rel * abs(want) + 1e-6, line
        seen.add(kind)
    assert seen == {"rev", "fwd", "float"}

# -- errors ----------------------------------------------------------------------------------------------------

def _one_line_error(enzcc, tmp_path, args, env=None) -> str:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    proc = enzcc(*args, check=False, env={"TMPDIR": str(tmp), **(env or {})})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not list(tmp.iterdir())  # (the run's temporaries removed)
    return proc.stderr


@needs_cuda
def test_no_libdevice_is_a_one_line_error_when_device_code_needs_it(enzcc, tmp_path):
    enzcc.write("k.c", C_KERNEL)
    args = ["--target=nvptx64-nvidia-cuda", "-O2", "-S", "k.c", "-o", "k.ptx"]
    enzcc(*args[:-1], "cached.ptx")  # (the build cache's key names the libdevice: no hit below)
    err = _one_line_error(enzcc, tmp_path, args, {"ENZCC_LIBDEVICE": "/nonexistent/libdevice.10.bc"})
    assert "ENZCC_LIBDEVICE=/nonexistent/libdevice.10.bc: no such file (the device code calls llvm." in err, err
    fake = tmp_path / "cuda"  # a toolkit without nvvm/libdevice
    (fake / "include").mkdir(parents=True)
    (fake / "include" / "cuda_runtime.h").write_text("")
    err = _one_line_error(enzcc, tmp_path, args, {"CUDA_PATH": str(fake)})
    assert f"the CUDA toolkit at {fake} has no nvvm/libdevice/libdevice.10.bc" in err, err
    assert not (enzcc.cwd / "k.ptx").exists()
    # code without math needs no libdevice
    enzcc.write("plain.c", "__attribute__((nvptx_kernel)) void k(double *y) { y[0] = y[0] * 2; }\n")
    enzcc("--target=nvptx64-nvidia-cuda", "-O2", "-S", "plain.c", "-o", "plain.ptx",
          env={"ENZCC_LIBDEVICE": "/nonexistent/libdevice.10.bc"})


def test_llvm_code_generation_errors_are_one_line(enzcc, tmp_path):
    # NVPTX cannot lower a vector sine (libdevice's functions are scalar): LLVM ends its process on it
    enzcc.write("v.ll", 'target triple = "nvptx64-nvidia-cuda"\n'
                "declare <2 x double> @llvm.sin.v2f64(<2 x double>)\n"
                "define <2 x double> @f(<2 x double> %x) {\n"
                "  %r = call <2 x double> @llvm.sin.v2f64(<2 x double> %x)\n  ret <2 x double> %r\n}\n")
    err = _one_line_error(enzcc, tmp_path, ["--target=nvptx64-nvidia-cuda", "-O2", "--no-cache", "-S", "v.ll",
                                            "-o", "v.ptx"])
    assert err.startswith("enzcc: error: LLVM cannot generate code for nvptx64-nvidia-cuda: Cannot select"), err
    assert not (enzcc.cwd / "v.ptx").exists()


def test_math_calls_map_to_libdevice_by_name_and_type():
    import llvmlite.binding as llvm

    from enzcc.backend.libdevice import device_math_calls, find_libdevice, libdevice_functions

    try:
        functions = libdevice_functions(find_libdevice())
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no libdevice: {exc}")
    mod = llvm.parse_assembly("""
target triple = "nvptx64-nvidia-cuda"
declare double @llvm.cos.f64(double)
declare double @__nv_cos(double)
declare float @llvm.pow.f32(float, float)
declare double @llvm.powi.f64.i32(double, i32)
declare double @llvm.sqrt.f64(double)
declare float @erff(float)
declare i32 @sin(i32)
define double @f(double %x, float %y, i32 %n) {
  %a = call double @llvm.cos.f64(double %x)
  %b = call double @__nv_cos(double %a)
  %c = call fast float @llvm.pow.f32(float %y, float %y)
  %d = call double @llvm.powi.f64.i32(double %b, i32 %n)
  %e = call double @llvm.sqrt.f64(double %d)
  %g = call float @erff(float %c)
  %h = call i32 @sin(i32 %n)
  ret double %e
}
""")
    text = str(device_math_calls(mod, functions, "<test>"))
    assert text.count("declare double @__nv_cos(double)") == 1 and text.count("call double @__nv_cos(") == 2
    assert "call fast float @__nv_powf(" in text and "@__nv_powi(double %" in text and "@__nv_erff(" in text
    assert "@llvm.sqrt.f64(" in text and "call i32 @sin(i32" in text  # (NVPTX has sqrt; sin(int) is not libm's)


@needs_cuda
def test_an_ir_input_for_nvptx_compiled_alone_gets_libdevice(enzcc):
    enzcc.write("m.ll", 'target triple = "nvptx64-nvidia-cuda"\ndeclare double @llvm.sin.f64(double)\n'
                "define double @f(double %x) {\n  %r = call double @llvm.sin.f64(double %x)\n  ret double %r\n}\n")
    enzcc("--target=nvptx64-nvidia-cuda", "-O2", "-c", "m.ll", "-o", "m.o")
    assert (enzcc.cwd / "m.o").stat().st_size > 0
