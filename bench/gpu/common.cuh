// Shared by the GPU benchmarks (bench/gpu.py): timing with CUDA events, one JSON line per benchmark.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>

__device__ int enzyme_dup;
__device__ int enzyme_const;
__device__ int enzyme_out;
template <typename... T> __device__ void __enzyme_autodiff(void *, T...);

#define CHECK(call)                                                                                    \
  do {                                                                                                 \
    cudaError_t e_ = (call);                                                                           \
    if (e_ != cudaSuccess) {                                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));           \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0)

// milliseconds per call of f(), the median of `reps` timed calls after one warm-up call
template <typename F> static double time_ms(F f, int reps) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  f();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  double ts[64];
  if (reps > 64) reps = 64;
  for (int r = 0; r < reps; r++) {
    CHECK(cudaEventRecord(a));
    f();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    ts[r] = ms;
  }
  for (int i = 1; i < reps; i++)  // (insertion sort: a handful of values)
    for (int j = i; j > 0 && ts[j] < ts[j - 1]; j--) {
      double t = ts[j]; ts[j] = ts[j - 1]; ts[j - 1] = t;
    }
  return ts[reps / 2];
}

static double *device_array(size_t n) {
  double *p;
  CHECK(cudaMalloc(&p, n * sizeof(double)));
  return p;
}

static void put(double *d, const double *h, size_t n) { CHECK(cudaMemcpy(d, h, n * sizeof(double), cudaMemcpyHostToDevice)); }
static void get(double *h, const double *d, size_t n) { CHECK(cudaMemcpy(h, d, n * sizeof(double), cudaMemcpyDeviceToHost)); }

static void report(const char *name, size_t n, double primal_ms, double gradient_ms, double primal_bytes,
                   double gradient_bytes, double check_err) {
  printf("{\"name\": \"%s\", \"n\": %zu, \"primal_ms\": %.5f, \"gradient_ms\": %.5f, \"ratio\": %.3f, "
         "\"primal_gbs\": %.1f, \"gradient_gbs\": %.1f, \"check_rel_err\": %.3g, \"ok\": %s}\n",
         name, n, primal_ms, gradient_ms, gradient_ms / primal_ms, primal_bytes / primal_ms / 1e6,
         gradient_bytes / gradient_ms / 1e6, check_err, check_err < 1e-6 ? "true" : "false");
}
