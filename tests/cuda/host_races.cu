// Host emulation of CUDA: programs with GPU bugs, which the emulation must expose deterministically (and
// device printf and assert). The scenario is the first argument; each prints its result ("ok" when right).
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstring>

#define B 64

// the block sum of block_sum without the barrier between the load and the tree: a race on s
__global__ void sum_no_barrier(const double *x, double *out) {
  __shared__ double s[B];
  int t = threadIdx.x;
  s[t] = x[blockIdx.x * B + t];
  for (int k = B / 2; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// a block's scratch in global memory instead of __shared__: every block uses the same one
__device__ double scratch[B];
__global__ void sum_global_scratch(const double *x, double *out) {
  int t = threadIdx.x;
  scratch[t] = x[blockIdx.x * B + t];
  __syncthreads();
  for (int k = B / 2; k > 0; k >>= 1) {
    if (t < k) scratch[t] += scratch[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = scratch[0];
}

// shared memory read before it is written (an accumulator never zeroed)
__global__ void sum_unzeroed(const double *x, double *out) {
  __shared__ double acc;
  atomicAdd(&acc, x[blockIdx.x * B + threadIdx.x]);
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

// a barrier that only half of the block reaches
__global__ void divergent(double *out) {
  if (threadIdx.x < B / 2) __syncthreads();
  out[threadIdx.x] = 1;
}

// a shuffle whose mask names lanes that wait at a barrier meanwhile (exited lanes would not count)
__global__ void warp_deadlock(int *out) {
  int t = threadIdx.x;
  if (t < 16) out[t] = __shfl_sync(0xffffffffu, t, 0);
  __syncthreads();
}

// s[t + 2] for the last threads: past the end of the block's shared memory
__global__ void shared_overflow(const double *x, double *out) {
  __shared__ double s[B];
  int t = threadIdx.x;
  s[t + 2] = x[t];
  __syncthreads();
  out[t] = s[t];
}

__device__ double deep(const double *x, int n) {
  volatile double frame[512];
  frame[n % 512] = x[0];
  return n == 0 ? frame[0] : deep(x, n - 1) + frame[n % 512];
}

__global__ void stack_overflow(const double *x, double *out, int n) { out[threadIdx.x] = deep(x, n); }

__global__ void bad_pointer(double *out) { out[threadIdx.x] = *(double *)(0x10 + 8 * (size_t)threadIdx.x); }

// more than CUDA's 8 MiB device heap: NULL, as on a GPU
__global__ void heap_limit(double **ptrs) {
  ptrs[0] = (double *)malloc(1024);
  ptrs[1] = (double *)malloc(16 << 20);
}

__global__ void dynamic_shared(double *out) {
  extern __shared__ double big[];
  big[threadIdx.x * 2000] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = big[((threadIdx.x + 1) % 4) * 2000];
}

__global__ void say(int n) {
  if (threadIdx.x == 1 && blockIdx.x == 1) printf("block %d thread %d: n=%d x=%.3f %s %c %5ld|%-4u|%x\n", blockIdx.x, threadIdx.x, n, 2.5, "str", 'c', -7L, 3u, 255);
}

__global__ void fails(int n) { assert(n < threadIdx.x + 100); }

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "";
  const int NB = 3;
  double hx[NB * B], want[NB], got[NB], *x, *out;
  for (int i = 0; i < NB * B; i++) hx[i] = 1.0 + i % 7;
  for (int b = 0; b < NB; b++) {
    want[b] = 0;
    for (int i = 0; i < B; i++) want[b] += hx[b * B + i];
  }
  cudaMalloc(&x, sizeof hx);
  cudaMalloc(&out, B * sizeof(double));
  cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
  if (!strcmp(what, "no_barrier"))
    sum_no_barrier<<<NB, B>>>(x, out);
  else if (!strcmp(what, "global_scratch"))
    sum_global_scratch<<<NB, B>>>(x, out);
  else if (!strcmp(what, "unzeroed"))
    sum_unzeroed<<<NB, B>>>(x, out);
  else if (!strcmp(what, "divergent"))
    divergent<<<1, B>>>(out);
  else if (!strcmp(what, "warp_deadlock")) {
    int *o;
    cudaMalloc(&o, 32 * sizeof(int));
    warp_deadlock<<<1, 32>>>(o);
  } else if (!strcmp(what, "shared_overflow"))
    shared_overflow<<<2, B>>>(x, out);
  else if (!strcmp(what, "stack_overflow"))
    stack_overflow<<<1, 2>>>(x, out, 100000);
  else if (!strcmp(what, "bad_pointer"))
    bad_pointer<<<2, 4>>>(out);
  else if (!strcmp(what, "heap_limit")) {
    double *p[2];
    heap_limit<<<1, 1>>>((double **)out);
    cudaMemcpy(p, out, sizeof p, cudaMemcpyDeviceToHost);
    printf("small %d big %d\n", p[0] != nullptr, p[1] != nullptr);
    size_t limit = 0;
    cudaDeviceSetLimit(cudaLimitMallocHeapSize, 32 << 20);
    cudaDeviceGetLimit(&limit, cudaLimitMallocHeapSize);
    heap_limit<<<1, 1>>>((double **)out);
    cudaMemcpy(p, out, sizeof p, cudaMemcpyDeviceToHost);
    printf("limit %zu: small %d big %d\n", limit, p[0] != nullptr, p[1] != nullptr);
    return 0;
  } else if (!strcmp(what, "api_errors")) {
    // what the emulated runtime checks: copies into host memory as device memory, frees and symbols it does not know
    int e1 = cudaMemcpy(hx, want, 8, cudaMemcpyHostToDevice), e2 = cudaMemcpy(got, hx, 8, cudaMemcpyDeviceToHost);
    int e3 = cudaFree(hx), e4 = cudaMemcpyToSymbol(hx, want, 8), e5 = cudaMemset(hx, 0, 8);
    int e6 = cudaMemcpy(out, x, 8, cudaMemcpyDeviceToDevice);
    printf("%d %d %d %d %d %d %s\n", e1, e2, e3, e4, e5, e6, cudaGetErrorString(cudaGetLastError()));
    // dynamic shared memory beyond 48 KiB needs the kernel's opt-in
    dynamic_shared<<<1, 4, 64 * 1024>>>(out);
    int e7 = cudaGetLastError();
    int e8 = cudaFuncSetAttribute(dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    dynamic_shared<<<1, 4, 64 * 1024>>>(out);
    int e9 = cudaGetLastError(), major = 0, warp = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, 0);
    printf("%d %d %d sm_%d0 warp %d\n", e7, e8, e9, major, warp);
    return 0;
  } else if (!strcmp(what, "printf")) {
    say<<<2, 4>>>(42);
    cudaDeviceSynchronize();
    return 0;
  } else if (!strcmp(what, "assert")) {
    fails<<<1, 8>>>(103);
    cudaDeviceSynchronize();
    return 0;
  } else
    return printf("unknown scenario '%s'\n", what), 2;
  if (cudaGetLastError() != cudaSuccess) return printf("launch failed\n"), 2;
  cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int b = 0; b < NB; b++) wrong += !(got[b] == want[b]);
  if (wrong) {
    for (int b = 0; b < NB; b++) printf("block %d: %g (expected %g)\n", b, got[b], want[b]);
    return 1;
  }
  printf("ok\n");
  return 0;
}
