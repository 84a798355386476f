"""Gradients and tangents of kernels with ``__shared__`` memory, barriers, warp shuffles and NVVM arithmetic, run
on the CPU by the host emulation of CUDA device code (``enzcc/backend/cuda_host.py``: per-block shared memory,
real barriers, warps in lock step) and checked against central differences of the primal kernel, in the thread
orders the emulation offers (a missing barrier or an unzeroed shadow shows in one of them)."""

from __future__ import annotations

import re

import pytest

from enzcc_testing import need
from enzcc.tools import cuda_path

cuda_host = pytest.importorskip("enzcc.backend.cuda_host", reason="needs the host emulation of CUDA device code")

pytestmark = [need("clang-22", "clang++-22"),
              pytest.mark.skipif(cuda_path(required=False) is None, reason="needs the CUDA toolkit")]

ORDERS = ("forward", "reverse", "shuffle:7")

PRELUDE = r"""
#include <cstdio>
#include <cmath>
extern "C" __device__ void __enzyme_autodiff(void *, ...);
extern "C" __device__ void __enzyme_fwddiff(void *, ...);
__device__ int enzyme_const;
"""

#: the host side: gradient (seeded with weights w) and tangent (along t) of sum_i w[i] out[i], each entry of the
#: gradient against central differences of the primal kernel; prints "name worst-relative-error" lines
CHECK = r"""
template <typename real, typename Primal, typename Grad, typename Tang>
void check(const char *name, int blocks, int threads, int n, int m, int mode, double h, Primal primal, Grad grad,
           Tang tang) {
  real *hx = new real[n], *g = new real[n], *t = new real[n], *w = new real[m], *ho = new real[m], *hz = new real[n];
  real *x, *dx, *out, *dout;
  for (int i = 0; i < n; i++) { hx[i] = 0.5 + 0.01 * (i % 17) - 0.003 * (i % 5); hz[i] = 0;
                                t[i] = 0.1 * ((i * 7) % 5) - 0.2; }
  for (int i = 0; i < m; i++) w[i] = 1 + 0.1 * (i % 7);
  cudaMalloc(&x, n * sizeof(real)); cudaMalloc(&dx, n * sizeof(real));
  cudaMalloc(&out, m * sizeof(real)); cudaMalloc(&dout, m * sizeof(real));
  auto F = [&](real *v) {
    cudaMemcpy(x, v, n * sizeof(real), cudaMemcpyHostToDevice);
    primal<<<blocks, threads>>>(x, out, mode);
    cudaMemcpy(ho, out, m * sizeof(real), cudaMemcpyDeviceToHost);
    double s = 0;
    for (int i = 0; i < m; i++) s += w[i] * ho[i];
    return s;
  };
  cudaMemcpy(x, hx, n * sizeof(real), cudaMemcpyHostToDevice);
  cudaMemcpy(dx, hz, n * sizeof(real), cudaMemcpyHostToDevice);
  cudaMemcpy(dout, w, m * sizeof(real), cudaMemcpyHostToDevice);
  grad<<<blocks, threads>>>(x, dx, out, dout, mode);
  cudaMemcpy(g, dx, n * sizeof(real), cudaMemcpyDeviceToHost);
  double worst = 0;
  for (int i = 0; i < n; i++) {
    real keep = hx[i];
    hx[i] = keep + h; double up = F(hx);
    hx[i] = keep - h; double down = F(hx);
    hx[i] = keep;
    double fd = (up - down) / (2 * h);
    worst = fmax(worst, fabs(fd - g[i]) / fmax(1.0, fabs(fd)));
  }
  cudaMemcpy(x, hx, n * sizeof(real), cudaMemcpyHostToDevice);
  cudaMemcpy(dx, t, n * sizeof(real), cudaMemcpyHostToDevice);
  tang<<<blocks, threads>>>(x, dx, out, dout, mode);
  cudaMemcpy(ho, dout, m * sizeof(real), cudaMemcpyDeviceToHost);
  double a = 0, b = 0;  // <w, J t> from the tangent and from the gradient
  for (int i = 0; i < m; i++) a += w[i] * ho[i];
  for (int i = 0; i < n; i++) b += g[i] * t[i];
  printf("%s %.3g %.3g\n", name, worst, fabs(a - b) / fmax(1.0, fabs(b)));
}
"""


def kernels(fn: str, real: str, suffix: str = "") -> str:
    """Primal, gradient and tangent kernels of ``void fn(const real *x, real *out, int mode)``."""
    return f"""
__global__ void primal{suffix}(const {real} *x, {real} *out, int mode) {{ {fn}(x, out, mode); }}
__global__ void grad{suffix}(const {real} *x, {real} *dx, {real} *out, {real} *dout, int mode) {{
  __enzyme_autodiff((void *){fn}, x, dx, out, dout, enzyme_const, mode);
}}
__global__ void tang{suffix}(const {real} *x, {real} *dx, {real} *out, {real} *dout, int mode) {{
  __enzyme_fwddiff((void *){fn}, x, dx, out, dout, enzyme_const, mode);
}}
"""


def run_checks(enzcc, tmp_path_factory, source: str, main: str) -> dict[str, dict[str, tuple[float, float]]]:
    """Build the program for the host emulation and run it in each thread order: {order: {name: (gradient's
    worst relative error, tangent's)}}."""
    enzcc.write("k.cu", PRELUDE + source + CHECK + "int main() {\n" + main + "\n  return 0;\n}\n")
    enzcc("-O2", "--cuda-gpu-arch=sm_90", "-S", "-emit-llvm", "k.cu", "-o", "k.ll")
    exe = str(enzcc.cwd / "k")
    cuda_host.build_host_emulation((enzcc.cwd / "k.ll").read_text(), [str(enzcc.cwd / "k.cu")], exe,
                                   workdir=str(enzcc.cwd / "emu"),
                                   runtime_dir=str(tmp_path_factory.getbasetemp() / "cuda-host-runtime"))
    results = {}
    for order in ORDERS:
        out = enzcc.run("./k", env={"ENZCC_CUDA_HOST_ORDER": order}).stdout
        results[order] = {m.group(1): (float(m.group(2)), float(m.group(3)))
                          for m in re.finditer(r"^(\S+) (\S+) (\S+)$", out, re.M)}
    return results


def assert_all_close(results, names, rel: float) -> None:
    for order, got in results.items():
        assert set(got) == set(names), (order, got)
        for name, (grad, tangent) in got.items():
            assert grad <= rel and tangent <= rel, f"{name} in {order} order: gradient {grad}, tangent {tangent}"


#: a block's reduction in shared memory: the sum of x^3 over the block, then levels of s[t] += s[t + k] * s[t]
#: with a barrier each (mode 0: over blockDim, a loop whose tape is device memory; mode 1: unrolled over 64)
REDUCTION = r"""
#define N 64
__device__ void blocksum(const double *x, double *out, int mode) {
  __shared__ double s[N];
  int t = threadIdx.x;
  double v = x[blockIdx.x * N + t];
  s[t] = v * v * v;
  __syncthreads();
  if (mode == 0) {
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
      if (t < k) s[t] += s[t + k] * s[t];
      __syncthreads();
    }
  } else {
#pragma unroll
    for (int k = N / 2; k > 0; k >>= 1) {
      if (t < k) s[t] += s[t + k] * 0.5;
      __syncthreads();
    }
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
"""


def test_shared_memory_block_reduction(enzcc, tmp_path_factory):
    results = run_checks(enzcc, tmp_path_factory, REDUCTION + kernels("blocksum", "double"), """
  check<double>("loop", 3, N, 3 * N, 3, 0, 1e-6, primal, grad, tang);
  check<double>("unrolled", 3, N, 3 * N, 3, 1, 1e-6, primal, grad, tang);""")
    assert_all_close(results, ["loop", "unrolled"], 1e-6)


#: warp shuffles: a reduction by __shfl_down_sync and a broadcast (mode 0), up/xor within segments and a
#: broadcast from a lane computed per thread (mode 1), offsets known only at run time (mode 2)
SHUFFLES = r"""
template <typename real> __device__ void warp(const real *x, real *out, int mode) {
  int t = threadIdx.x;
  real v = x[blockIdx.x * 32 + t];
  v = v * v * (real)(1 + t % 3);
  if (mode == 0) {
    for (int k = 16; k > 0; k >>= 1) v += __shfl_down_sync(0xffffffffu, v, k) * (real)(1 + (t & 1));
    v = __shfl_sync(0xffffffffu, v, 3) * v;
  } else if (mode == 1) {
    v += __shfl_up_sync(0xffffffffu, v, 3, 8) * (real)2 + __shfl_xor_sync(0xffffffffu, v, 5, 16);
    v = v * __shfl_sync(0xffffffffu, v, t / 4, 16);
  } else {
    int off = 1 + (x[0] > 0 ? 2 : 1);
    v += __shfl_down_sync(0xffffffffu, v, off) * v + __shfl_xor_sync(0xffffffffu, v, off + t % 2);
  }
  out[blockIdx.x * 32 + t] = v;
}
__device__ void warpd(const double *x, double *out, int mode) { warp(x, out, mode); }
__device__ void warpf(const float *x, float *out, int mode) { warp(x, out, mode); }
"""


def test_warp_shuffles(enzcc, tmp_path_factory):
    main = "\n".join(f'  check<{real}>("{real}-{mode}", 2, 32, 64, 64, {mode}, {h}, primal{s}, grad{s}, tang{s});'
                     for real, s, h in (("double", "d", "1e-6"), ("float", "f", "1e-2")) for mode in range(3))
    results = run_checks(enzcc, tmp_path_factory, SHUFFLES + kernels("warpd", "double", "d") +
                         kernels("warpf", "float", "f"), main)
    assert_all_close({o: {n: e for n, e in r.items() if n.startswith("double")} for o, r in results.items()},
                     [f"double-{m}" for m in range(3)], 1e-6)
    assert_all_close({o: {n: e for n, e in r.items() if n.startswith("float")} for o, r in results.items()},
                     [f"float-{m}" for m in range(3)], 2e-3)  # (float arithmetic: the differences' noise)


#: NVVM's rounding-mode and approximate arithmetic (mode 0: double, mode 1: float)
MATH = r"""
__device__ void nvvm_math(const double *x, double *out, int mode) {
  double a = x[0], b = x[1], c = x[2];
  if (mode == 0) {
    out[0] = __nvvm_mul_rn_d(a, c) + __nvvm_add_rn_d(a, b) + __nvvm_rsqrt_approx_d(b) + __nvvm_fma_rn_d(a, b, c)
           + __nvvm_div_rn_d(a, c) + __nvvm_rcp_rn_d(b) + __nvvm_sqrt_rn_d(c) + __nvvm_fmin_d(a, b) * __nvvm_fmax_d(b, c)
           + __nvvm_saturate_d(a - 0.3) + __nvvm_fabs_d(a - 1.0) * 2.0;
  } else {
    float fa = (float)a, fb = (float)b;
    out[0] = __nvvm_sin_approx_f(fa) + __nvvm_cos_approx_f(fb) * fa + __nvvm_ex2_approx_f(fa)
           + __nvvm_lg2_approx_f(fb + 2.0f) + __nvvm_d2f_rn(b) * fa + __nvvm_div_approx_f(fa, fb)
           + __nvvm_sqrt_approx_f(fb) + __nvvm_sin_approx_ftz_f(fb) * __nvvm_cos_approx_ftz_f(fa);
  }
}
"""


def test_nvvm_arithmetic(enzcc, tmp_path_factory):
    results = run_checks(enzcc, tmp_path_factory, MATH + kernels("nvvm_math", "double"), """
  check<double>("double", 1, 1, 3, 1, 0, 1e-6, primal, grad, tang);
  check<double>("float", 1, 1, 3, 1, 1, 1e-3, primal, grad, tang);""")
    assert_all_close({o: {n: e for n, e in r.items() if n == "double"} for o, r in results.items()}, ["double"], 1e-6)
    assert_all_close({o: {n: e for n, e in r.items() if n == "float"} for o, r in results.items()}, ["float"], 2e-3)
