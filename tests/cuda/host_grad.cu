// Host emulation of CUDA: kernel gradients checked against analytic values and central finite differences.
//  square:   __enzyme_autodiff of a __device__ function per thread (y = x*x: dx = 2x)
//  stencil:  a __shared__ tile, a barrier, each thread reading its neighbours (s[t-1], s[t+1]) and atomicAdd of
//            the block's energy: the reverse sweep needs the shadow of s per block, zeroed, and a barrier before
//            the shadow's values go back to dx
//  blocksum: a block sum of squares by a tree in shared memory, a barrier per level
// Prints one line per wrong value, "ok" at the end (exit 0) or "FAIL n" (exit 1).
#include <cmath>
#include <cstdio>

__device__ int enzyme_dup;
__device__ int enzyme_const;
template <typename... T> __device__ void __enzyme_autodiff(void *, T...);
template <typename... T> __device__ void __enzyme_fwddiff(void *, T...);

__device__ void square(const double *x, double *y) { *y = *x * *x; }

__global__ void square_grad(const double *x, double *dx, double *y, double *dy, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) __enzyme_autodiff((void *)square, enzyme_dup, x + i, dx + i, enzyme_dup, y + i, dy + i);
}

#define B 64

__device__ void stencil(const double *x, double *energy, int n) {
  __shared__ double s[B];
  int t = threadIdx.x, i = blockIdx.x * B + t;
  s[t] = i < n ? x[i] : 0.0;
  __syncthreads();
  double left = t > 0 ? s[t - 1] : 0.0, right = t < B - 1 ? s[t + 1] : 0.0;
  double e = s[t] * (left + right) + sin(s[t]) * right;
  atomicAdd(energy, e);
}

__global__ void stencil_primal(const double *x, double *energy, int n) { stencil(x, energy, n); }

__global__ void stencil_grad(const double *x, double *dx, double *energy, double *denergy, int n) {
  __enzyme_autodiff((void *)stencil, enzyme_dup, x, dx, enzyme_dup, energy, denergy, enzyme_const, n);
}

__global__ void stencil_tangent(const double *x, const double *vx, double *energy, double *tenergy, int n) {
  __enzyme_fwddiff((void *)stencil, enzyme_dup, x, vx, enzyme_dup, energy, tenergy, enzyme_const, n);
}

__device__ void blocksum(const double *x, double *out) {
  __shared__ double s[B];
  int t = threadIdx.x;
  double v = x[blockIdx.x * B + t];
  s[t] = v * v;
  __syncthreads();
#pragma unroll
  for (int k = B / 2; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

__global__ void blocksum_grad(const double *x, double *dx, double *out, double *dout) {
  __enzyme_autodiff((void *)blocksum, enzyme_dup, x, dx, enzyme_dup, out, dout);
}

static int failures = 0;

static void expect(const char *what, int i, double got, double want, double tol) {
  if (!(fabs(got - want) <= tol * fmax(1.0, fabs(want)))) {
    printf("%s[%d]: %.12g, expected %.12g\n", what, i, got, want);
    failures++;
  }
}

static double *to_device(const double *h, int n) {
  double *d;
  cudaMalloc(&d, n * sizeof(double));
  cudaMemcpy(d, h, n * sizeof(double), cudaMemcpyHostToDevice);
  return d;
}

static void to_host(double *h, const double *d, int n) { cudaMemcpy(h, d, n * sizeof(double), cudaMemcpyDeviceToHost); }

const int N = 200, BLOCKS = (N + B - 1) / B;

static double stencil_energy(const double *hx) {
  double zero = 0, e;
  double *x = to_device(hx, N), *energy = to_device(&zero, 1);
  stencil_primal<<<BLOCKS, B>>>(x, energy, N);
  to_host(&e, energy, 1);
  cudaFree(x);
  cudaFree(energy);
  return e;
}

int main() {
  static double hx[BLOCKS * B], zeros[BLOCKS * B], ones[BLOCKS * B], g[BLOCKS * B];
  for (int i = 0; i < BLOCKS * B; i++) hx[i] = 0.3 + 0.8 * sin(0.41 * i), ones[i] = 1.0;

  // square: dx = 2x * dy
  double *x = to_device(hx, N), *dx = to_device(zeros, N), *y = to_device(zeros, N), *dy = to_device(ones, N);
  square_grad<<<(N + 31) / 32, 32>>>(x, dx, y, dy, N);
  if (cudaGetLastError() != cudaSuccess) return printf("FAIL launch\n"), 1;
  to_host(g, dx, N);
  for (int i = 0; i < N; i++) expect("square dx", i, g[i], 2 * hx[i], 1e-14);

  // stencil: reverse mode against finite differences (several probes, block edges among them), forward mode
  double one = 1, zero = 0, h = 1e-6;
  double *dx2 = to_device(zeros, N), *energy = to_device(&zero, 1), *denergy = to_device(&one, 1);
  stencil_grad<<<BLOCKS, B>>>(x, dx2, energy, denergy, N);
  to_host(g, dx2, N);
  int probes[] = {0, 1, 31, 62, 63, 64, 65, 127, 128, 150, N - 1};
  for (int p : probes) {
    double xp[N], xm[N];
    for (int i = 0; i < N; i++) xp[i] = xm[i] = hx[i];
    xp[p] += h;
    xm[p] -= h;
    expect("stencil dx", p, g[p], (stencil_energy(xp) - stencil_energy(xm)) / (2 * h), 1e-6);
  }
  double vx[N], xp[N], xm[N], t;
  for (int i = 0; i < N; i++) vx[i] = cos(0.13 * i), xp[i] = hx[i] + h * vx[i], xm[i] = hx[i] - h * vx[i];
  double *dvx = to_device(vx, N), *energy2 = to_device(&zero, 1), *tenergy = to_device(&zero, 1);
  stencil_tangent<<<BLOCKS, B>>>(x, dvx, energy2, tenergy, N);
  to_host(&t, tenergy, 1);
  expect("stencil tangent", 0, t, (stencil_energy(xp) - stencil_energy(xm)) / (2 * h), 1e-6);

  // blocksum: dx = 2x
  double *xb = to_device(hx, BLOCKS * B), *dxb = to_device(zeros, BLOCKS * B), *out = to_device(zeros, BLOCKS),
         *dout = to_device(ones, BLOCKS);
  blocksum_grad<<<BLOCKS, B>>>(xb, dxb, out, dout);
  to_host(g, dxb, BLOCKS * B);
  for (int i = 0; i < BLOCKS * B; i++) expect("blocksum dx", i, g[i], 2 * hx[i], 1e-14);

  if (failures) return printf("FAIL %d\n", failures), 1;
  printf("ok\n");
  return 0;
}
