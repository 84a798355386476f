// A kernel that differentiates a __device__ function with a loop (its values taped on the device), libdevice
// math, shared memory with a barrier, several threads reading one input (shared s[(t+k)%B], the weight w[0]) and an
// atomicAdd, in reverse and forward mode; the gradients are checked against central finite differences of the
// primal kernel. Prints one line per check and "ok" at the end, or "FAIL ..." and exits 1.
// Built with `enzcc++ gradient.cu` for a GPU, or `enzcc++ --cuda-host-emulation gradient.cu` to run on the CPU.
#include <cmath>
#include <cstdio>
#include <cstdlib>

__device__ int enzyme_dup;
__device__ int enzyme_const;
template <typename... T> __device__ void __enzyme_autodiff(void *, T...);
template <typename... T> __device__ void __enzyme_fwddiff(void *, T...);

#define B 64

__device__ void energy(const double *x, const double *w, double *out, int n, int m) {
  __shared__ double s[B];
  int t = threadIdx.x, i = blockIdx.x * B + t;
  s[t] = i < n ? x[i] : 0.0;
  __syncthreads();
  double acc = 0;
  for (int k = 1; k <= m; k++) {
    double a = s[(t + k) % B];
    acc += sin(a * s[t]) * exp(-0.1 * k * a) + w[0] * a;
  }
  if (i < n) atomicAdd(out, acc * acc);
}

__global__ void primal(const double *x, const double *w, double *out, int n, int m) { energy(x, w, out, n, m); }

__global__ void gradient(const double *x, double *dx, const double *w, double *dw, double *out, double *dout,
                         int n, int m) {
  __enzyme_autodiff((void *)energy, enzyme_dup, x, dx, enzyme_dup, w, dw, enzyme_dup, out, dout,
                    enzyme_const, n, enzyme_const, m);
}

__global__ void tangent(const double *x, const double *vx, const double *w, const double *vw, double *out,
                        double *tout, int n, int m) {
  __enzyme_fwddiff((void *)energy, enzyme_dup, x, vx, enzyme_dup, w, vw, enzyme_dup, out, tout,
                   enzyme_const, n, enzyme_const, m);
}

static void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

static double *device_copy(const double *h, int n) {
  double *d;
  check(cudaMalloc(&d, n * sizeof(double)), "cudaMalloc");
  check(cudaMemcpy(d, h, n * sizeof(double), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

static double *fetch(const double *d, double *h, int n) {
  check(cudaMemcpy(h, d, n * sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy back");
  return h;
}

const int N = 200, M = 5, BLOCKS = (N + B - 1) / B;

static double energy_at(const double *hx, double hw) {
  double zero = 0, e;
  double *x = device_copy(hx, N), *w = device_copy(&hw, 1), *out = device_copy(&zero, 1);
  primal<<<BLOCKS, B>>>(x, w, out, N, M);
  check(cudaGetLastError(), "launch primal");
  fetch(out, &e, 1);
  cudaFree(x); cudaFree(w); cudaFree(out);
  return e;
}

static int failures = 0;

static void expect(const char *what, double got, double want) {
  double err = fabs(got - want) / fmax(1.0, fabs(want));
  printf("%s: %.10g (finite differences %.10g)%s\n", what, got, want, err < 1e-6 ? "" : "  <-- WRONG");
  failures += err >= 1e-6;
}

int main() {
  double hx[N], hw = 0.3, zeros[N] = {0}, one = 1, h = 1e-6;
  for (int i = 0; i < N; i++) hx[i] = 0.5 + 0.7 * sin(0.37 * i);
  // reverse mode: dout = 1 gives dE/dx and dE/dw
  double *x = device_copy(hx, N), *dx = device_copy(zeros, N), *w = device_copy(&hw, 1), *dw = device_copy(zeros, 1);
  double *out = device_copy(zeros, 1), *dout = device_copy(&one, 1);
  gradient<<<BLOCKS, B>>>(x, dx, w, dw, out, dout, N, M);
  check(cudaGetLastError(), "launch gradient");
  check(cudaDeviceSynchronize(), "gradient");
  double gx[N], gw;
  fetch(dx, gx, N);
  fetch(dw, &gw, 1);
  int probes[] = {0, 1, 37, 63, 64, 65, 130, N - 1};
  for (int p : probes) {
    double xp[N], xm[N];
    for (int i = 0; i < N; i++) xp[i] = xm[i] = hx[i];
    xp[p] += h;
    xm[p] -= h;
    char what[64];
    snprintf(what, sizeof what, "reverse dE/dx[%d]", p);
    expect(what, gx[p], (energy_at(xp, hw) - energy_at(xm, hw)) / (2 * h));
  }
  expect("reverse dE/dw", gw, (energy_at(hx, hw + h) - energy_at(hx, hw - h)) / (2 * h));
  // forward mode: the directional derivative along (vx, vw)
  double vx[N], vw = -0.4, xp[N], xm[N];
  for (int i = 0; i < N; i++) vx[i] = cos(0.11 * i);
  for (int i = 0; i < N; i++) xp[i] = hx[i] + h * vx[i], xm[i] = hx[i] - h * vx[i];
  double *dvx = device_copy(vx, N), *dvw = device_copy(&vw, 1), *out2 = device_copy(zeros, 1);
  double *tout = device_copy(zeros, 1), t;
  tangent<<<BLOCKS, B>>>(x, dvx, w, dvw, out2, tout, N, M);
  check(cudaGetLastError(), "launch tangent");
  fetch(tout, &t, 1);
  expect("forward dE.v", t, (energy_at(xp, hw + h * vw) - energy_at(xm, hw - h * vw)) / (2 * h));
  if (failures) {
    printf("FAIL %d gradient(s) wrong\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
