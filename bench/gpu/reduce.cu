// A shared-memory block reduction of sum x_i^2 (a tree with __syncthreads, the block's sum added atomically), and
// its gradient dx_i = 2 x_i dout: shared-memory shadows, barriers in the reverse sweep, an atomicAdd in the primal.
// Memory-bound.
#include "common.cuh"

#define B 256

__device__ void sumsq(const double *x, double *out, size_t n) {
  __shared__ double s[B];
  int t = threadIdx.x;
  size_t i = (size_t)blockIdx.x * B + t;
  s[t] = i < n ? x[i] * x[i] : 0.0;
  __syncthreads();
  for (int w = B / 2; w > 0; w /= 2) {
    if (t < w) s[t] += s[t + w];
    __syncthreads();
  }
  if (t == 0) atomicAdd(out, s[0]);
}

__global__ void primal(const double *x, double *out, size_t n) { sumsq(x, out, n); }
__global__ void gradient(const double *x, double *dx, double *out, double *dout, size_t n) {
  __enzyme_autodiff((void *)sumsq, enzyme_dup, x, dx, enzyme_dup, out, dout, enzyme_const, n);
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? atol(argv[1]) : (size_t)1 << 26;
  double *x = device_array(n), *dx = device_array(n), *out = device_array(1), *dout = device_array(1);
  double *h = (double *)malloc(n * 8), *e = (double *)malloc(n * 8), one = 1;
  for (size_t k = 0; k < n; k++) h[k] = sin(0.001 * k), e[k] = cos(0.0003 * k);
  put(x, h, n);
  put(dout, &one, 1);
  int G = (int)((n + B - 1) / B);
  double tp = time_ms([&] { primal<<<G, B>>>(x, out, n); }, 20);
  CHECK(cudaMemset(dx, 0, n * 8));
  double tg = time_ms([&] { gradient<<<G, B>>>(x, dx, out, dout, n); }, 20);  // (dout is not zeroed by an add)
  CHECK(cudaMemset(dx, 0, n * 8));
  gradient<<<G, B>>>(x, dx, out, dout, n);
  double *g = (double *)malloc(n * 8), dot = 0, L[2], step_h = 1e-4;
  get(g, dx, n);
  for (size_t k = 0; k < n; k++) dot += g[k] * e[k];
  for (int s = 0; s < 2; s++) {
    for (size_t k = 0; k < n; k++) g[k] = h[k] + (s ? -step_h : step_h) * e[k];
    put(x, g, n);
    CHECK(cudaMemset(out, 0, 8));
    primal<<<G, B>>>(x, out, n);
    get(&L[s], out, 1);
  }
  double fd = (L[0] - L[1]) / (2 * step_h);
  report("reduce", n, tp, tg, 8.0 * n, 24.0 * n, fabs(dot - fd) / fmax(1.0, fabs(fd)));
  return 0;
}
