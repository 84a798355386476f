/* HEAT with OpenMP: bench/heat.c's reaction-diffusion equation (explicit Euler, 5-point stencil, the boundary
 * cells keeping their initial values) on an n x n grid, each step a `parallel for schedule(static)` over the
 * rows (the loss is summed serially). The gradient is taken with respect to the initial field.
 *
 * usage: heat_omp N STEPS REPS (threads: OMP_NUM_THREADS); prints one JSON line: the median primal and gradient
 * times (seconds), the gradient's norm, and its largest relative difference from central differences at a few
 * coordinates.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int enzyme_dup, enzyme_const;
void __enzyme_autodiff(void *, ...);

#define DT 0.1
#define C 0.02

static void step(int n, const double *src, double *dst) {
#pragma omp parallel for schedule(static)
  for (int i = 1; i < n - 1; i++) {
    for (int j = 1; j < n - 1; j++) {
      long k = (long)i * n + j;
      double x = src[k];
      double lap = src[k - n] + src[k + n] + src[k - 1] + src[k + 1] - 4 * x;
      dst[k] = x + C * lap + DT * (x - x * x * x);
    }
  }
}

double objective(const double *p, int n, int steps, const double *target) {
  long m = (long)n * n;
  double *u = malloc(sizeof(double) * m), *v = malloc(sizeof(double) * m);
  for (long k = 0; k < m; k++) u[k] = v[k] = p[k] + 0.0;  /* (a loop, as measured in docs; memcpy works too now) */
  for (int s = 0; s < steps; s += 2) {
    step(n, u, v);
    step(n, v, u);
  }
  double loss = 0;  /* (serial, as measured in docs; a reduction region works too now) */
  for (long k = 0; k < m; k++) {
    double d = u[k] - target[k];
    loss += d * d;
  }
  free(u);
  free(v);
  return loss;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double timed(int which, int reps, const double *p, double *g, int n, int steps, const double *t) {
  double *each = malloc(sizeof(double) * reps);
  for (int r = 0; r < reps; r++) {
    double t0 = omp_get_wtime();
    if (which == 0) {
      volatile double y = objective(p, n, steps, t);
      (void)y;
    } else {
      memset(g, 0, sizeof(double) * n * n);
      __enzyme_autodiff((void *)objective, enzyme_dup, p, g, enzyme_const, n, enzyme_const, steps, enzyme_const, t);
    }
    each[r] = omp_get_wtime() - t0;
  }
  qsort(each, reps, sizeof(double), cmp);
  double med = each[reps / 2];
  free(each);
  return med;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 256, steps = argc > 2 ? atoi(argv[2]) : 20, reps = argc > 3 ? atoi(argv[3]) : 5;
  long m = (long)n * n;
  double *p = malloc(sizeof(double) * m), *t = malloc(sizeof(double) * m), *g = malloc(sizeof(double) * m);
  for (long k = 0; k < m; k++) {
    long i = k / n, j = k % n;
    p[k] = 0.5 * sin(0.05 * i) * cos(0.07 * j) + 0.1;
    t[k] = 0.3 * cos(0.03 * (i + j));
  }
  double primal_s = timed(0, reps, p, g, n, steps, t);
  double grad_s = timed(1, reps, p, g, n, steps, t);
  double sq = 0;
  for (long k = 0; k < m; k++) sq += g[k] * g[k];
  long coords[3] = {(long)(n / 3) * n + n / 2, (long)(n / 2) * n + n / 3, (long)(2 * n / 3) * n + 2 * n / 3};
  double worst = 0;
  for (int c = 0; c < 3; c++) {
    long k = coords[c];
    const double h = 1e-3;
    double keep = p[k];
    p[k] = keep + h;
    double up = objective(p, n, steps, t);
    p[k] = keep - h;
    double down = objective(p, n, steps, t);
    p[k] = keep;
    double fd = (up - down) / (2 * h), err = fabs(fd - g[k]) / (fabs(fd) + 1e-12);
    if (err > worst) worst = err;
  }
  printf("{\"threads\": %d, \"n\": %d, \"steps\": %d, \"primal_s\": %.6g, \"grad_s\": %.6g, \"grad_norm\": %.17g, "
         "\"fd_err\": %.3g}\n", omp_get_max_threads(), n, steps, primal_s, grad_s, sqrt(sq), worst);
  free(p); free(t); free(g);
  return 0;
}
