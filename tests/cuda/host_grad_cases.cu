// Host emulation of CUDA: gradients of kernel patterns (reverse and forward mode against central finite
// differences of the primal kernel, a weighted sum of the outputs): time steps in shared memory with barriers in
// the loop, a block accumulator in shared memory (atomicAdd), a thread writing another thread's shared slot,
// 2-D blocks adding into one output per row, threads reading another thread's input, a tree reduction over
// blockDim.x (a loop with a barrier), a __device__ helper with barriers called twice. The first argument picks a
// case ("all" by default); prints "<case>: ok" or the wrong values and "<case>: WRONG" (exit 1).
#include <cmath>
#include <cstdio>
#include <cstring>
__device__ int enzyme_dup;
__device__ int enzyme_const;
template <typename... T> __device__ void __enzyme_autodiff(void *, T...);
template <typename... T> __device__ void __enzyme_fwddiff(void *, T...);
#define B 32
#define NB 3
#define N (B * NB)

// 1: time steps in shared memory, a barrier in the loop
__device__ void heat(const double *x, double *out, int steps) {
  __shared__ double s[B + 2];
  int t = threadIdx.x, i = blockIdx.x * B + t;
  double u = x[i];
  if (t == 0) s[0] = 0, s[B + 1] = 0;
  for (int k = 0; k < steps; k++) {
    s[t + 1] = u;
    __syncthreads();
    u = u + 0.1 * (s[t] - 2 * u + s[t + 2]) + 0.01 * u * u;
    __syncthreads();
  }
  atomicAdd(out, u * u);
}
// 2: shared atomics: a block accumulator in shared memory
__device__ void sharedacc(const double *x, double *out, int) {
  __shared__ double acc;
  int t = threadIdx.x, i = blockIdx.x * B + t;
  if (t == 0) acc = 0;
  __syncthreads();
  atomicAdd(&acc, sin(x[i]) * x[i]);
  __syncthreads();
  if (t == 0) out[blockIdx.x] = acc * acc;
}
// 3: a thread writes another thread's slot
__device__ void rotate(const double *x, double *out, int) {
  __shared__ double s[B];
  int t = threadIdx.x, i = blockIdx.x * B + t;
  s[(t + 1) % B] = x[i] * x[i];
  __syncthreads();
  out[i] = s[t] * x[i];
}
// 4: 2-D blocks: each (x, y) thread adds to out[y]
__device__ void twod(const double *x, double *out, int) {
  int i = blockIdx.x * blockDim.x * blockDim.y + threadIdx.y * blockDim.x + threadIdx.x;
  atomicAdd(&out[threadIdx.y], exp(0.1 * x[i]));
}
// 5: every thread reads x[0] and a neighbour in global memory
__device__ void shared_read(const double *x, double *out, int) {
  int i = blockIdx.x * B + threadIdx.x;
  out[i] = x[0] * x[(i + 1) % N] + cos(x[i]);
}

// 6: a tree reduction over blockDim.x (a loop with a barrier, not unrolled)
__device__ void tree(const double *x, double *out, int) {
  __shared__ double s[B];
  int t = threadIdx.x;
  double v = x[blockIdx.x * blockDim.x + t];
  s[t] = v * v * v;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k] * s[t];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
// 7: a __device__ helper with the barrier, called twice
__device__ double smooth(double u) {
  __shared__ double s[B];
  int t = threadIdx.x;
  s[t] = u;
  __syncthreads();
  double r = 0.5 * u + 0.25 * (s[(t + 1) % B] + s[(t + B - 1) % B]);
  __syncthreads();
  return r;
}
__device__ void twice(const double *x, double *out, int) {
  int i = blockIdx.x * B + threadIdx.x;
  double u = smooth(smooth(x[i]) * x[i]);
  out[i] = u * u;
}
typedef void (*fn_t)(const double *, double *, int);
template <fn_t F> __global__ void primal(const double *x, double *out, int p) { F(x, out, p); }
template <fn_t F> __global__ void grad(const double *x, double *dx, double *out, double *dout, int p) {
  __enzyme_autodiff((void *)F, enzyme_dup, x, dx, enzyme_dup, out, dout, enzyme_const, p);
}
template <fn_t F> __global__ void tang(const double *x, const double *vx, double *out, double *tout, int p) {
  __enzyme_fwddiff((void *)F, enzyme_dup, x, vx, enzyme_dup, out, tout, enzyme_const, p);
}
static double *dev(const double *h, int n) { double *d; cudaMalloc(&d, n * 8); cudaMemcpy(d, h, n * 8, cudaMemcpyHostToDevice); return d; }
template <fn_t F> int check(const char *name, dim3 block, int nout, int p) {
  double hx[N], zeros[N] = {0}, w[N], g[N], h = 1e-6;
  for (int i = 0; i < N; i++) hx[i] = 0.4 + 0.5 * sin(0.7 * i), w[i] = 1 + 0.1 * i;
  auto energy = [&](const double *xx) {
    double o[N], *x = dev(xx, N), *out = dev(zeros, nout), e = 0;
    primal<F><<<NB, block>>>(x, out, p);
    cudaMemcpy(o, out, nout * 8, cudaMemcpyDeviceToHost);
    for (int k = 0; k < nout; k++) e += w[k] * o[k];
    cudaFree(x); cudaFree(out);
    return e;
  };
  double *x = dev(hx, N), *dx = dev(zeros, N), *out = dev(zeros, nout), *dout = dev(w, nout);
  grad<F><<<NB, block>>>(x, dx, out, dout, p);
  if (cudaGetLastError() != cudaSuccess) { printf("%s: launch failed\n", name); return 1; }
  cudaMemcpy(g, dx, N * 8, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int k = 0; k < N; k += 7) {
    double xp[N], xm[N];
    memcpy(xp, hx, sizeof xp); memcpy(xm, hx, sizeof xm);
    xp[k] += h; xm[k] -= h;
    double fd = (energy(xp) - energy(xm)) / (2 * h);
    if (!(fabs(fd - g[k]) <= 1e-6 * fmax(1, fabs(fd)))) { bad++; if (bad < 3) printf("%s reverse dx[%d] %.10g fd %.10g\n", name, k, g[k], fd); }
  }
  double vx[N], xp[N], xm[N], to[N];
  for (int i = 0; i < N; i++) vx[i] = cos(0.3 * i), xp[i] = hx[i] + h * vx[i], xm[i] = hx[i] - h * vx[i];
  double *dvx = dev(vx, N), *out2 = dev(zeros, nout), *tout = dev(zeros, nout);
  tang<F><<<NB, block>>>(x, dvx, out2, tout, p);
  cudaMemcpy(to, tout, nout * 8, cudaMemcpyDeviceToHost);
  double t = 0; for (int k = 0; k < nout; k++) t += w[k] * to[k];
  double fd = (energy(xp) - energy(xm)) / (2 * h);
  if (!(fabs(fd - t) <= 1e-6 * fmax(1, fabs(fd)))) { bad++; printf("%s forward %.10g fd %.10g\n", name, t, fd); }
  printf("%s: %s\n", name, bad ? "WRONG" : "ok");
  return bad != 0;
}
int main(int argc, char **argv) {
  const char *w = argc > 1 ? argv[1] : "all";
  int f = 0;
  if (!strcmp(w, "heat") || !strcmp(w, "all")) f += check<heat>("heat", dim3(B), 1, 3);
  if (!strcmp(w, "sharedacc") || !strcmp(w, "all")) f += check<sharedacc>("sharedacc", dim3(B), NB, 0);
  if (!strcmp(w, "rotate") || !strcmp(w, "all")) f += check<rotate>("rotate", dim3(B), N, 0);
  if (!strcmp(w, "twod") || !strcmp(w, "all")) f += check<twod>("twod", dim3(8, 4), 4, 0);
  if (!strcmp(w, "shared_read") || !strcmp(w, "all")) f += check<shared_read>("shared_read", dim3(B), N, 0);
  if (!strcmp(w, "tree") || !strcmp(w, "all")) f += check<tree>("tree", dim3(B), NB, 0);
  if (!strcmp(w, "twice") || !strcmp(w, "all")) f += check<twice>("twice", dim3(B), N, 0);
  return f != 0;
}
