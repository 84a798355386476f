// Split mode in a kernel: __enzyme_augmentfwd keeps a tape (in the device heap), __enzyme_reverse takes it.
// The reverse checks at run time that a tape serves one reverse call (on a GPU: device printf and a trap).
// dx = d/dx (sin(x) x) = cos(x) x + sin(x), checked for each thread; prints "ok" or the wrong values.
#include <cmath>
#include <cstdio>

__device__ int enzyme_dup, enzyme_const;
template <typename... T> __device__ void *__enzyme_augmentfwd(void *, T...);
template <typename... T> __device__ void __enzyme_reverse(void *, T...);

__device__ void f(const double *x, double *y) {
  int i = threadIdx.x;
  y[i] = sin(x[i]) * x[i];
}

__global__ void k(const double *x, double *dx, double *y, double *dy) {
  void *tape = __enzyme_augmentfwd((void *)f, enzyme_dup, x, dx, enzyme_dup, y, dy);
  __enzyme_reverse((void *)f, enzyme_dup, x, dx, enzyme_dup, y, dy, tape);
}

int main() {
  const int n = 32;
  double hx[n], ones[n], zeros[n] = {0}, g[n];
  for (int i = 0; i < n; i++) hx[i] = 0.1 * i - 1, ones[i] = 1;
  double *x, *dx, *y, *dy;
  cudaMalloc(&x, sizeof hx); cudaMalloc(&dx, sizeof hx); cudaMalloc(&y, sizeof hx); cudaMalloc(&dy, sizeof hx);
  cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
  cudaMemcpy(dx, zeros, sizeof hx, cudaMemcpyHostToDevice);
  cudaMemcpy(dy, ones, sizeof hx, cudaMemcpyHostToDevice);
  k<<<1, n>>>(x, dx, y, dy);
  if (cudaDeviceSynchronize() != cudaSuccess) { printf("FAIL launch\n"); return 1; }
  cudaMemcpy(g, dx, sizeof g, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    double want = cos(hx[i]) * hx[i] + sin(hx[i]);
    if (fabs(g[i] - want) > 1e-12) bad++, printf("dx[%d] = %.17g, want %.17g\n", i, g[i], want);
  }
  printf(bad ? "FAIL\n" : "ok\n");
  return bad != 0;
}
