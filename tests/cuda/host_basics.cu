// Host emulation of CUDA (enzcc/backend/cuda_host.py): kernels whose values the host checks. Prints "ok", or
// "FAIL ..." lines and exits 1. Run in each thread order (ENZCC_CUDA_HOST_ORDER) by tests/test_cuda_host.py.
#include <cmath>
#include <cstdio>

__device__ double offset;
__constant__ double scale[2];

__global__ void saxpy(int n, double a, const double *x, double *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i] + offset * scale[1];
}

// one partial sum per block: a tree in shared memory, a barrier between levels
__global__ void block_sum(const double *x, double *partial) {
  __shared__ double s[128];
  int t = threadIdx.x;
  s[t] = x[blockIdx.x * 128 + t];
  __syncthreads();
  for (int k = 64; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = s[0];
}

__global__ void atomics(const double *x, double *total, int *count, unsigned *maxbits) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(total, x[i]);
  atomicAdd(count, 1);
  atomicMax(maxbits, (unsigned)i);
}

// dynamic shared memory (the launch's third argument), a 2-D block in a 2-D grid
__global__ void transpose_tiles(const double *in, double *out, int w) {
  extern __shared__ double tile[];
  int tx = threadIdx.x, ty = threadIdx.y, bx = blockIdx.x * blockDim.x, by = blockIdx.y * blockDim.y;
  tile[ty * blockDim.x + tx] = in[(by + ty) * w + bx + tx];
  __syncthreads();
  out[(bx + ty) * w + by + tx] = tile[tx * blockDim.x + ty];
}

// warp-synchronous operations: a shuffle reduction, a ballot, barrier counts, shuffles within 16 and 8 lanes
__global__ void warps(const int *v, int *sums, unsigned *ballots, int *counts) {
  int t = threadIdx.x, lane = t % 32;
  int x = v[t];
  for (int k = 16; k > 0; k >>= 1) x += __shfl_down_sync(0xffffffffu, x, k);
  if (lane == 0) sums[t / 32] = x;
  unsigned b = __ballot_sync(0xffffffffu, v[t] % 3 == 0);
  if (lane == 0) ballots[t / 32] = b;
  int c = __syncthreads_count(v[t] % 2 == 0);
  int all = __syncthreads_and(v[t] >= 0), any = __syncthreads_or(v[t] == 5);
  if (t == 0) counts[0] = c, counts[1] = all, counts[2] = any;
  int y = __shfl_xor_sync(0xffffffffu, t, 1);
  if (y != (t ^ 1)) counts[3] = 1;
  // sub-warp widths: lanes read within their segment of 16 (or 8)
  int z = __shfl_sync(0xffffffffu, t, 3, 16), base = t - lane;
  if (z != base + (lane & 16) + 3) counts[4] = 1;
  int u = __shfl_up_sync(0xffffffffu, t, 1, 8);
  if (u != (lane % 8 == 0 ? t : t - 1)) counts[5] = 1;
  __syncwarp();
  if (t < 48 && __activemask() != (t < 32 ? 0xffffffffu : 0x0000ffffu)) counts[6] = 1;
}

static int failures = 0;

static void expect(const char *what, double got, double want) {
  if (!(fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want)))) {
    printf("FAIL %s: %.17g, expected %.17g\n", what, got, want);
    failures++;
  }
}

#define CHECK(call)                                                            \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_));                  \
      return 1;                                                                \
    }                                                                          \
  } while (0)

int main() {
  const int N = 1000;
  static double hx[N], hy[N], out[N];
  for (int i = 0; i < N; i++) hx[i] = 0.25 * i, hy[i] = 1.0 - i;
  double *x, *y;
  CHECK(cudaMalloc(&x, N * sizeof(double)));
  CHECK(cudaMalloc(&y, N * sizeof(double)));
  CHECK(cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(y, hy, sizeof hy, cudaMemcpyHostToDevice));
  double off = 0.5, sc[2] = {0, 4};
  CHECK(cudaMemcpyToSymbol(offset, &off, sizeof off));
  CHECK(cudaMemcpyToSymbol(scale, sc, sizeof sc));
  saxpy<<<(N + 127) / 128, 128>>>(N, 3.0, x, y);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out, y, sizeof out, cudaMemcpyDeviceToHost));
  for (int i = 0; i < N; i++) expect("saxpy", out[i], 3.0 * hx[i] + hy[i] + 2.0);
  double back;
  CHECK(cudaMemcpyFromSymbol(&back, offset, sizeof back));
  expect("cudaMemcpyFromSymbol", back, 0.5);

  // block sums: 7 blocks of 128
  const int NB = 7;
  double *partial;
  CHECK(cudaMalloc(&partial, NB * sizeof(double)));
  block_sum<<<NB, 128>>>(x, partial);
  CHECK(cudaGetLastError());
  double hp[NB];
  CHECK(cudaMemcpy(hp, partial, sizeof hp, cudaMemcpyDeviceToHost));
  for (int b = 0; b < NB; b++) {
    double want = 0;
    for (int i = 0; i < 128; i++) want += hx[b * 128 + i];
    expect("block_sum", hp[b], want);
  }

  // atomics over 5 blocks of 96 threads
  double *total;
  int *count;
  unsigned *maxbits;
  CHECK(cudaMalloc(&total, sizeof(double)));
  CHECK(cudaMalloc(&count, sizeof(int)));
  CHECK(cudaMalloc(&maxbits, sizeof(unsigned)));
  CHECK(cudaMemset(total, 0, sizeof(double)));
  CHECK(cudaMemset(count, 0, sizeof(int)));
  CHECK(cudaMemset(maxbits, 0, sizeof(unsigned)));
  atomics<<<5, 96>>>(x, total, count, maxbits);
  CHECK(cudaGetLastError());
  double ht;
  int hc;
  unsigned hm;
  CHECK(cudaMemcpy(&ht, total, sizeof ht, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&hc, count, sizeof hc, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&hm, maxbits, sizeof hm, cudaMemcpyDeviceToHost));
  double want = 0;
  for (int i = 0; i < 480; i++) want += hx[i];
  expect("atomicAdd(double)", ht, want);
  expect("atomicAdd(int)", hc, 480);
  expect("atomicMax", hm, 479);

  // tiles of 8x4 in a 32x32 matrix, through dynamic shared memory
  const int W = 32;
  double *m, *mt;
  CHECK(cudaMalloc(&m, W * W * sizeof(double)));
  CHECK(cudaMalloc(&mt, W * W * sizeof(double)));
  CHECK(cudaMemcpy(m, hx, W * W * sizeof(double), cudaMemcpyHostToDevice));
  transpose_tiles<<<dim3(W / 8, W / 8), dim3(8, 8), 64 * sizeof(double)>>>(m, mt, W);
  CHECK(cudaGetLastError());
  static double hmt[W * W];
  CHECK(cudaMemcpy(hmt, mt, sizeof hmt, cudaMemcpyDeviceToHost));
  for (int r = 0; r < W; r++)
    for (int c = 0; c < W; c++) expect("transpose", hmt[c * W + r], hx[r * W + c]);

  // warps: a block of 64 threads
  int hv[96], *v, *sums, *counts;
  unsigned *ballots;
  for (int i = 0; i < 96; i++) hv[i] = (i * 7) % 11;
  CHECK(cudaMalloc(&v, sizeof hv));
  CHECK(cudaMalloc(&sums, 3 * sizeof(int)));
  CHECK(cudaMalloc(&ballots, 3 * sizeof(unsigned)));
  CHECK(cudaMalloc(&counts, 8 * sizeof(int)));
  CHECK(cudaMemcpy(v, hv, sizeof hv, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(counts, 0, 8 * sizeof(int)));
  warps<<<1, 64>>>(v, sums, ballots, counts);
  CHECK(cudaGetLastError());
  int hs[2], hcounts[8];
  unsigned hb[2];
  CHECK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hb, ballots, sizeof hb, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hcounts, counts, sizeof hcounts, cudaMemcpyDeviceToHost));
  int even = 0, any5 = 0;
  for (int w = 0; w < 2; w++) {
    int s = 0;
    unsigned b = 0;
    for (int l = 0; l < 32; l++) s += hv[w * 32 + l], b |= (unsigned)(hv[w * 32 + l] % 3 == 0) << l;
    expect("__shfl_down_sync sum", hs[w], s);
    expect("__ballot_sync", hb[w], b);
  }
  for (int i = 0; i < 64; i++) even += hv[i] % 2 == 0, any5 |= hv[i] == 5;
  expect("__syncthreads_count", hcounts[0], even);
  expect("__syncthreads_and", hcounts[1], 1);
  expect("__syncthreads_or", hcounts[2], any5);
  expect("__shfl_xor_sync", hcounts[3], 0);
  expect("__shfl_sync width 16", hcounts[4], 0);
  expect("__shfl_up_sync width 8", hcounts[5], 0);
  expect("__activemask", hcounts[6], 0);

  // a launch error the API reports
  saxpy<<<1, 2048>>>(N, 3.0, x, y);
  if (cudaGetLastError() != cudaErrorInvalidConfiguration) printf("FAIL 2048 threads per block\n"), failures++;

  if (failures) return printf("FAIL %d checks\n", failures), 1;
  printf("ok\n");
  return 0;
}
