// Host code that is differentiated and calls the CUDA runtime (cudaMalloc, cudaMemcpy in every direction,
// cudaMemset, cudaFree, their async forms on a stream, managed and pinned memory): the derivative repeats the calls
// on shadow buffers (Enzyme's cudaMemcpy rules). Each case's reverse gradient (a weighted sum of its outputs) and
// forward tangent are checked against central finite differences, some against their analytic values too. Device
// memory starts as NaN bytes under --cuda-host-emulation, so a shadow not zeroed shows. The first argument picks a
// case ("all" by default); prints "<case>: ok" or the wrong values and "<case>: WRONG" (exit 1).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int enzyme_dup, enzyme_const;
template <typename... T> void __enzyme_autodiff(void *, T...);
template <typename... T> void __enzyme_fwddiff(void *, T...);

#define N 7
#define BYTES (N * sizeof(double))
typedef void (*case_fn)(const double *, double *, int);

// 1: the round trip of the GPU issue: host -> device -> host, then squared
void roundtrip(const double *x, double *out, int n) {
  double *d;
  cudaMalloc(&d, n * sizeof(double));
  cudaMemcpy(d, x, n * sizeof(double), cudaMemcpyHostToDevice);
  cudaMemcpy(out, d, n * sizeof(double), cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; i++) out[i] = out[i] * out[i];
  cudaFree(d);
}

// 2: device to device, shifted by one (two copies at offsets), back through a heap buffer
void rotate(const double *x, double *out, int n) {
  double *a, *b;
  cudaMalloc(&a, n * sizeof(double));
  cudaMalloc(&b, n * sizeof(double));
  cudaMemcpy(a, x, n * sizeof(double), cudaMemcpyHostToDevice);
  cudaMemcpy(b, a + 1, (n - 1) * sizeof(double), cudaMemcpyDeviceToDevice);
  cudaMemcpy(b + n - 1, a, sizeof(double), cudaMemcpyDeviceToDevice);
  double *h = (double *)malloc(n * sizeof(double));
  cudaMemcpy(h, b, n * sizeof(double), cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; i++) out[i] = sin(h[i]) * x[i];
  free(h);
  cudaFree(a);
  cudaFree(b);
}

// 3: cudaMemset overwrites the second half on the device: those outputs no longer depend on x through it
void overwrite(const double *x, double *out, int n) {
  double *d;
  cudaMalloc(&d, n * sizeof(double));
  cudaMemcpy(d, x, n * sizeof(double), cudaMemcpyHostToDevice);
  cudaMemset(d + n / 2, 0, (n - n / 2) * sizeof(double));
  cudaMemcpy(out, d, n * sizeof(double), cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; i++) out[i] = out[i] * out[i] * out[i] + x[i];
  cudaFree(d);
}

// 4: one device buffer read twice (its adjoints add up), cudaMemcpyDefault both ways, host to host
void twice(const double *x, double *out, int n) {
  double *d, h1[N], h2[N], h3[N];
  cudaMalloc(&d, n * sizeof(double));
  cudaMemcpy(d, x, n * sizeof(double), cudaMemcpyDefault);
  cudaMemcpy(h1, d, n * sizeof(double), cudaMemcpyDeviceToHost);
  cudaMemcpy(h2, d, n * sizeof(double), cudaMemcpyDefault);
  cudaMemcpy(h3, h2, n * sizeof(double), cudaMemcpyHostToHost);
  for (int i = 0; i < n; i++) out[i] = h1[i] * h2[i] + exp(0.1 * h3[i]);
  cudaFree(d);
}

// 5: constant bytes copied over part of x on the device, and over outputs on the host (cudaMemcpyHostToHost) and
// through unified addressing (cudaMemcpyDefault): those carry no derivative
static const double table[N] = {0.5, -1.0, 2.0, 0.25, 3.0, -0.75, 1.5};
void constant(const double *x, double *out, int n) {
  double *d;
  cudaMalloc(&d, n * sizeof(double));
  cudaMemcpy(d, x, n * sizeof(double), cudaMemcpyHostToDevice);
  cudaMemcpy(d + 3, table + 3, (n - 3) * sizeof(double), cudaMemcpyHostToDevice);
  cudaMemcpy(out, d, n * sizeof(double), cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; i++) out[i] = out[i] * out[i] + x[i];
  cudaMemcpy(out + 4, table, sizeof(double), cudaMemcpyHostToHost);
  cudaMemcpy(out + 5, table + 1, sizeof(double), cudaMemcpyDefault);
  cudaFree(d);
}

// 6: async copies and memset on a stream, events, synchronization, error queries
void streamed(const double *x, double *out, int n) {
  cudaStream_t s;
  cudaEvent_t start, stop;
  cudaStreamCreate(&s);
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, s);
  double *d;
  cudaMalloc(&d, n * sizeof(double));
  cudaMemcpyAsync(d, x, n * sizeof(double), cudaMemcpyHostToDevice, s);
  cudaMemsetAsync(d, 0, sizeof(double), s);
  cudaMemcpyAsync(out, d, n * sizeof(double), cudaMemcpyDeviceToHost, s);
  cudaEventRecord(stop, s);
  cudaStreamSynchronize(s);
  float ms;
  cudaEventElapsedTime(&ms, start, stop);
  if (cudaGetLastError() != cudaSuccess || cudaPeekAtLastError() != cudaSuccess) printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  cudaDeviceSynchronize();
  for (int i = 0; i < n; i++) out[i] = cos(out[i]) * x[i];
  cudaFree(d);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(s);
}

// 7: managed memory written and read on the host, copied to the output with cudaMemcpyDefault
void managed(const double *x, double *out, int n) {
  double *m;
  cudaMallocManaged(&m, n * sizeof(double));
  for (int i = 0; i < n; i++) m[i] = x[i] * x[(i + 1) % n];
  cudaMemcpy(out, m, n * sizeof(double), cudaMemcpyDefault);
  for (int i = 0; i < n; i++) out[i] = out[i] + m[(i + 2) % n] * x[i];
  cudaFree(m);
}

// 8: single precision through pinned host memory and the device
void pinned(const double *x, double *out, int n) {
  float *p, *d;
  cudaMallocHost(&p, n * sizeof(float));
  cudaMalloc(&d, n * sizeof(float));
  for (int i = 0; i < n; i++) p[i] = (float)x[i] * 3.0f;
  cudaMemcpy(d, p, n * sizeof(float), cudaMemcpyHostToDevice);
  memset(p, 0, n * sizeof(float));
  cudaMemcpy(p, d, n * sizeof(float), cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; i++) out[i] = (double)(p[i] * p[i]);
  cudaFree(d);
  cudaFreeHost(p);
}

// 9: a global host array as the staging buffer (a global written by cudaMemcpy has a shadow)
double staging[N];
void global_staging(const double *x, double *out, int n) {
  double *d;
  cudaMalloc(&d, n * sizeof(double));
  cudaMemcpy(d, x, n * sizeof(double), cudaMemcpyHostToDevice);
  cudaMemcpy(staging, d, n * sizeof(double), cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; i++) out[i] = staging[i] * staging[(i + 3) % n];
  cudaFree(d);
}

template <case_fn F> void gradient(const double *x, double *dx, double *out, double *dout) {
  __enzyme_autodiff((void *)F, enzyme_dup, x, dx, enzyme_dup, out, dout, enzyme_const, N);
}
template <case_fn F> void tangent(const double *x, const double *vx, double *out, double *tout) {
  __enzyme_fwddiff((void *)F, enzyme_dup, x, vx, enzyme_dup, out, tout, enzyme_const, N);
}

struct Case {
  const char *name;
  case_fn f, exact;  // exact: the analytic gradient of sum(w * out) (w = 1), or null
  void (*grad)(const double *, double *, double *, double *);
  void (*tan)(const double *, const double *, double *, double *);
  double h, tol;
};

static void exact_roundtrip(const double *x, double *g, int n) {
  for (int i = 0; i < n; i++) g[i] = 2 * x[i];
}
static void exact_overwrite(const double *x, double *g, int n) {
  for (int i = 0; i < n; i++) g[i] = (i < n / 2 ? 3 * x[i] * x[i] : 0) + 1;
}
static void exact_constant(const double *x, double *g, int n) {
  for (int i = 0; i < n; i++) g[i] = i < 3 ? 2 * x[i] + 1 : i == 4 || i == 5 ? 0 : 1;
}

#define CASE(f, exact, h, tol) {#f, f, (case_fn)(exact), gradient<f>, tangent<f>, h, tol}
static const Case cases[] = {
    CASE(roundtrip, exact_roundtrip, 1e-6, 1e-7), CASE(rotate, nullptr, 1e-6, 1e-7),
    CASE(overwrite, exact_overwrite, 1e-6, 1e-7), CASE(twice, nullptr, 1e-6, 1e-7),
    CASE(constant, exact_constant, 1e-6, 1e-7),   CASE(streamed, nullptr, 1e-6, 1e-7),
    CASE(managed, nullptr, 1e-6, 1e-7),           CASE(pinned, nullptr, 1e-2, 2e-3),
    CASE(global_staging, nullptr, 1e-6, 1e-7),
};

static double weighted(case_fn f, const double *x, const double *w) {
  double out[N], s = 0;
  f(x, out, N);
  for (int i = 0; i < N; i++) s += w[i] * out[i];
  return s;
}

static bool close(double a, double b, double tol) { return fabs(a - b) <= tol * (1 + fabs(b)); }

static bool run(const Case &c) {
  double x[N], w[N], v[N], ones[N];
  for (int i = 0; i < N; i++) {
    x[i] = 0.3 + 0.17 * i - 0.05 * i * i;
    w[i] = c.exact ? 1.0 : 0.5 + 0.25 * i;
    v[i] = 1.0 - 0.3 * i;
    ones[i] = 1.0;
  }
  (void)ones;
  bool ok = true;
  // reverse: dx against central differences of sum(w * out); dout consumed (zero afterwards)
  double dx[N] = {0}, out[N], dout[N], fd[N], g[N];
  memcpy(dout, w, sizeof w);
  c.grad(x, dx, out, dout);
  if (c.exact) ((void (*)(const double *, double *, int))c.exact)(x, g, N);
  for (int i = 0; i < N; i++) {
    double xp[N], xm[N];
    memcpy(xp, x, sizeof x);
    memcpy(xm, x, sizeof x);
    xp[i] += c.h;
    xm[i] -= c.h;
    fd[i] = (weighted(c.f, xp, w) - weighted(c.f, xm, w)) / (2 * c.h);
    if (!close(dx[i], fd[i], c.tol) || (c.exact && !close(dx[i], g[i], 1e-12)) || dout[i] != 0) {
      printf("%s reverse: dx[%d] = %.12g, finite differences %.12g, analytic %.12g, dout %.3g\n", c.name, i,
             dx[i], fd[i], c.exact ? g[i] : NAN, dout[i]);
      ok = false;
    }
  }
  // forward: the tangent of each output against central differences along v (tout starts as NaN)
  double tout[N], op[N], om[N], xp[N], xm[N];
  for (int i = 0; i < N; i++) tout[i] = NAN, xp[i] = x[i] + c.h * v[i], xm[i] = x[i] - c.h * v[i];
  c.tan(x, v, out, tout);
  c.f(xp, op, N);
  c.f(xm, om, N);
  for (int i = 0; i < N; i++) {
    double d = (op[i] - om[i]) / (2 * c.h);
    if (!close(tout[i], d, c.tol)) {
      printf("%s forward: tout[%d] = %.12g, finite differences %.12g\n", c.name, i, tout[i], d);
      ok = false;
    }
  }
  if (cudaGetLastError() != cudaSuccess) {
    printf("%s: a CUDA call failed\n", c.name);
    ok = false;
  }
  printf("%s: %s\n", c.name, ok ? "ok" : "WRONG");
  return ok;
}

// 10: device memory as the arguments, with device shadows from the caller: staged through the host
void staged(const double *x, double *y, int n) {  // x, y: device memory
  double h[N], g[N];
  cudaMemcpy(h, x, n * sizeof(double), cudaMemcpyDeviceToHost);
  for (int i = 0; i < N; i++) g[i] = h[i] * h[i] * h[(i + 1) % N];
  cudaMemcpy(y, g, n * sizeof(double), cudaMemcpyHostToDevice);
}

static double *on_device(const double *h) {
  double *d;
  cudaMalloc(&d, BYTES);
  cudaMemcpy(d, h, BYTES, cudaMemcpyHostToDevice);
  return d;
}

static bool run_staged() {
  double x[N], w[N], v[N], zero[N] = {0}, dx[N], dy[N], t[N];
  for (int i = 0; i < N; i++) x[i] = 0.2 + 0.1 * i, w[i] = 1.0 + 0.5 * i, v[i] = 0.7 - 0.2 * i, t[i] = NAN;
  double *xd = on_device(x), *yd = on_device(zero), *dxd = on_device(zero), *dyd = on_device(w);
  __enzyme_autodiff((void *)staged, enzyme_dup, xd, dxd, enzyme_dup, yd, dyd, enzyme_const, N);
  cudaMemcpy(dx, dxd, BYTES, cudaMemcpyDeviceToHost);
  cudaMemcpy(dy, dyd, BYTES, cudaMemcpyDeviceToHost);
  double *vd = on_device(v), *td = on_device(t);
  __enzyme_fwddiff((void *)staged, enzyme_dup, xd, vd, enzyme_dup, yd, td, enzyme_const, N);
  cudaMemcpy(t, td, BYTES, cudaMemcpyDeviceToHost);
  bool ok = cudaGetLastError() == cudaSuccess;
  for (int i = 0; i < N; i++) {
    int next = (i + 1) % N, prev = (i + N - 1) % N;
    double g = 2 * x[i] * x[next] * w[i] + x[prev] * x[prev] * w[prev];
    double tan = 2 * x[i] * x[next] * v[i] + x[i] * x[i] * v[next];
    if (!close(dx[i], g, 1e-12) || dy[i] != 0 || !close(t[i], tan, 1e-12)) {
      printf("staged: dx[%d] = %.12g (analytic %.12g), dy %.3g, tangent %.12g (analytic %.12g)\n", i, dx[i], g,
             dy[i], t[i], tan);
      ok = false;
    }
  }
  cudaFree(xd), cudaFree(yd), cudaFree(dxd), cudaFree(dyd), cudaFree(vd), cudaFree(td);
  printf("staged: %s\n", ok ? "ok" : "WRONG");
  return ok;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  bool ok = true, found = false;
  for (const Case &c : cases)
    if (!strcmp(which, "all") || !strcmp(which, c.name)) {
      found = true;
      ok = run(c) && ok;
    }
  if (!strcmp(which, "all") || !strcmp(which, "staged")) {
    found = true;
    ok = run_staged() && ok;
  }
  if (!found) {
    printf("no case %s\n", which);
    return 2;
  }
  return ok ? 0 : 1;
}
