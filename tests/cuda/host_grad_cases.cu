// Host emulation of CUDA: gradients of kernel patterns (reverse and forward mode against central finite
// differences of the primal kernel, a weighted sum of the outputs): time steps in shared memory with barriers in
// the loop, a block accumulator in shared memory (atomicAdd), a thread writing another thread's shared slot,
// 2-D blocks adding into one output per row, threads reading another thread's input, a tree reduction over
// blockDim.x (a loop with a barrier), a __device__ helper with barriers called twice; a tiled matrix product (two
// shared tiles, barriers in the loop over tiles, 2-D blocks and grid) and single-precision loops whose counts
// differ per thread (a device tape) against their derivatives by hand. The first argument picks a
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
#define TILE 8
#define M 24  // matrices M x M, tiles TILE x TILE
// tiled matmul: C = A B, a shared tile of A and of B per step, barriers in the loop
__device__ void matmul(const double *A, const double *Bm, double *C) {
  __shared__ double ta[TILE][TILE], tb[TILE][TILE];
  int tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  double acc = 0;
  for (int k0 = 0; k0 < M; k0 += TILE) {
    ta[ty][tx] = A[row * M + k0 + tx];
    tb[ty][tx] = Bm[(k0 + ty) * M + col];
    __syncthreads();
    for (int k = 0; k < TILE; k++) acc += ta[ty][k] * tb[k][tx];
    __syncthreads();
  }
  C[row * M + col] = acc;
}
__global__ void mm_grad(const double *A, double *dA, const double *Bm, double *dB, double *C, double *dC) {
  __enzyme_autodiff((void *)matmul, enzyme_dup, A, dA, enzyme_dup, Bm, dB, enzyme_dup, C, dC);
}
// per-thread loop count from the input (a device tape), single precision
__device__ void ragged(const float *x, const int *cnt, float *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = x[i], acc = 0;
  for (int k = 0; k < cnt[i]; k++) { v = sinf(v) + 0.5f * v; acc += v * v; }
  atomicAdd(out, acc);
}
__global__ void ragged_grad(const float *x, float *dx, const int *cnt, float *out, float *dout) {
  __enzyme_autodiff((void *)ragged, enzyme_dup, x, dx, enzyme_const, cnt, enzyme_dup, out, dout);
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

// the tiled matrix product against dA = W B^T, dB = A^T W
static int check_matmul() {
  static double A[M * M], Bm[M * M], W[M * M], zeros[M * M], g[M * M], g2[M * M];
  for (int i = 0; i < M * M; i++) A[i] = sin(0.3 * i), Bm[i] = cos(0.17 * i), W[i] = 1 + 0.01 * i;
  double *a = dev(A, M * M), *da = dev(zeros, M * M), *b = dev(Bm, M * M), *db = dev(zeros, M * M), *c = dev(zeros, M * M), *dc = dev(W, M * M);
  mm_grad<<<dim3(M / TILE, M / TILE), dim3(TILE, TILE)>>>(a, da, b, db, c, dc);
  cudaMemcpy(g, da, sizeof g, cudaMemcpyDeviceToHost);
  cudaMemcpy(g2, db, sizeof g2, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < M; i++) for (int k = 0; k < M; k++) {
    double wa = 0, wb = 0;  // dA = W B^T, dB = A^T W
    for (int j = 0; j < M; j++) wa += W[i * M + j] * Bm[k * M + j], wb += A[j * M + i] * W[j * M + k];
    if (fabs(wa - g[i * M + k]) > 1e-12 * fmax(1, fabs(wa)) && bad++ < 3) printf("dA[%d,%d] %g want %g\n", i, k, g[i * M + k], wa);
    if (fabs(wb - g2[i * M + k]) > 1e-12 * fmax(1, fabs(wb)) && bad++ < 3) printf("dB[%d,%d] %g want %g\n", i, k, g2[i * M + k], wb);
  }
  printf("matmul: %s\n", bad ? "WRONG" : "ok");
  return bad != 0;
}

// the ragged loops against their derivative by hand
static int check_ragged() {
  const int NR = 96;
  float hx[NR], hz[NR] = {0}, gx[NR], one = 1, zero = 0;
  int hc[NR];
  for (int i = 0; i < NR; i++) hx[i] = 0.3f + 0.01f * i, hc[i] = i % 5;
  float *x, *dx, *o, *dout; int *cnt;
  cudaMalloc(&x, sizeof hx); cudaMalloc(&dx, sizeof hx); cudaMalloc(&cnt, sizeof hc); cudaMalloc(&o, 4); cudaMalloc(&dout, 4);
  cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice); cudaMemcpy(dx, hz, sizeof hz, cudaMemcpyHostToDevice);
  cudaMemcpy(cnt, hc, sizeof hc, cudaMemcpyHostToDevice); cudaMemcpy(o, &zero, 4, cudaMemcpyHostToDevice); cudaMemcpy(dout, &one, 4, cudaMemcpyHostToDevice);
  ragged_grad<<<3, 32>>>(x, dx, cnt, o, dout);
  cudaMemcpy(gx, dx, sizeof gx, cudaMemcpyDeviceToHost);
  int bad2 = 0;
  for (int i = 0; i < NR; i++) {
    double v = hx[i], dv = 1, dacc = 0;
    for (int k = 0; k < hc[i]; k++) { dv = (cos(v) + 0.5) * dv; v = sin(v) + 0.5 * v; dacc += 2 * v * dv; }
    if (fabs(dacc - gx[i]) > 1e-4 * fmax(1, fabs(dacc)) && bad2++ < 3) printf("ragged dx[%d] %g want %g\n", i, gx[i], dacc);
  }
  printf("ragged: %s\n", bad2 ? "WRONG" : "ok");
  return bad2 != 0;
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
  if (!strcmp(w, "matmul") || !strcmp(w, "all")) f += check_matmul();
  if (!strcmp(w, "ragged") || !strcmp(w, "all")) f += check_ragged();
  return f != 0;
}
