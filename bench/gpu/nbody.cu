// N-body accelerations a_i = sum_j m_j (p_j - p_i) / (|p_j - p_i|^2 + eps)^(3/2), one thread per body, and the
// gradient of <r, a> with respect to the positions (every thread adds into every body's adjoint: atomics).
// Compute-bound.
#include "common.cuh"

__device__ void accel(const double *__restrict__ p, const double *__restrict__ m, double *__restrict__ a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double ax = 0, ay = 0, az = 0, xi = p[3 * i], yi = p[3 * i + 1], zi = p[3 * i + 2];
  for (int j = 0; j < n; j++) {
    double dx = p[3 * j] - xi, dy = p[3 * j + 1] - yi, dz = p[3 * j + 2] - zi;
    double r2 = dx * dx + dy * dy + dz * dz + 1e-3;
    double w = m[j] * rsqrt(r2 * r2 * r2);
    ax += w * dx, ay += w * dy, az += w * dz;
  }
  a[3 * i] = ax, a[3 * i + 1] = ay, a[3 * i + 2] = az;
}

__global__ void primal(const double *p, const double *m, double *a, int n) { accel(p, m, a, n); }
__global__ void gradient(const double *p, double *dp, const double *m, double *a, double *da, int n) {
  __enzyme_autodiff((void *)accel, enzyme_dup, p, dp, enzyme_const, m, enzyme_dup, a, da, enzyme_const, n);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 16384;
  size_t n3 = 3 * (size_t)n;
  double *p = device_array(n3), *dp = device_array(n3), *m = device_array(n), *a = device_array(n3),
         *da = device_array(n3);
  double *hp = (double *)malloc(n3 * 8), *hm = (double *)malloc(n * 8), *r = (double *)malloc(n3 * 8),
         *e = (double *)malloc(n3 * 8), *h = (double *)malloc(n3 * 8);
  for (size_t k = 0; k < n3; k++) hp[k] = sin(1.7 * k), r[k] = cos(0.3 * k), e[k] = sin(0.9 * k + 2);
  for (int k = 0; k < n; k++) hm[k] = 1.0 + 0.5 * cos(0.1 * k);
  put(p, hp, n3);
  put(m, hm, n);
  int B = 128, G = (n + B - 1) / B;
  double tp = time_ms([&] { primal<<<G, B>>>(p, m, a, n); }, 5);
  double tg = 0;
  for (int rep = 0; rep < 3; rep++) {
    put(da, r, n3);
    CHECK(cudaMemset(dp, 0, n3 * 8));
    double t = time_ms([&] { gradient<<<G, B>>>(p, dp, m, a, da, n); }, 1);
    tg = rep == 0 || t < tg ? t : tg;
  }
  put(da, r, n3);
  CHECK(cudaMemset(dp, 0, n3 * 8));
  gradient<<<G, B>>>(p, dp, m, a, da, n);
  get(h, dp, n3);
  double dot = 0, L[2], step_h = 1e-6;
  for (size_t k = 0; k < n3; k++) dot += h[k] * e[k];
  for (int s = 0; s < 2; s++) {
    for (size_t k = 0; k < n3; k++) h[k] = hp[k] + (s ? -step_h : step_h) * e[k];
    put(p, h, n3);
    primal<<<G, B>>>(p, m, a, n);
    get(h, a, n3);
    L[s] = 0;
    for (size_t k = 0; k < n3; k++) L[s] += r[k] * h[k];
  }
  double fd = (L[0] - L[1]) / (2 * step_h);
  // bytes: what must move at least (positions, masses, accelerations; the gradient also da and dp)
  report("nbody", n, tp, tg, 8.0 * (n3 + n + n3), 8.0 * (n3 + n + 2 * n3 + 2 * n3),
         fabs(dot - fd) / fmax(1.0, fabs(fd)));
  return 0;
}
