/* liblbfgs driver: L-BFGS on the extended Rosenbrock function with the gradient from __enzyme_autodiff and
 * with the hand-written one. Built with liblbfgs's own unmodified lib/lbfgs.c (tests/libraries/test_liblbfgs.py).
 *
 *   ./prog        check: "name value" lines (gradient vs hand-written and finite differences, iterations)
 *   ./prog bench  timing: the objective alone and its gradient, interleaved rounds (bench/libraries.py)
 */
#include <lbfgs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_timer.h"

extern int enzyme_dup, enzyme_const;
void __enzyme_autodiff(void *, ...);

#ifndef N
#define N 100
#endif

/* the objective: extended Rosenbrock, sum over pairs of (1-x0)^2 + 100 (x1-x0^2)^2 (liblbfgs's sample) */
__attribute__((noinline)) static double rosenbrock(const double *x, int n) {
  double fx = 0.0;
  for (int i = 0; i < n; i += 2) {
    double t1 = 1.0 - x[i];
    double t2 = 10.0 * (x[i + 1] - x[i] * x[i]);
    fx += t1 * t1 + t2 * t2;
  }
  return fx;
}

/* its gradient by hand, as liblbfgs's sample writes it */
static double hand_gradient(const double *x, double *g, int n) {
  double fx = 0.0;
  for (int i = 0; i < n; i += 2) {
    double t1 = 1.0 - x[i];
    double t2 = 10.0 * (x[i + 1] - x[i] * x[i]);
    g[i + 1] = 20.0 * t2;
    g[i] = -2.0 * (x[i] * g[i + 1] + t1);
    fx += t1 * t1 + t2 * t2;
  }
  return fx;
}

static void enzcc_gradient(const double *x, double *g, int n) {
  memset(g, 0, sizeof(double) * n);
  __enzyme_autodiff((void *)rosenbrock, enzyme_dup, x, g, enzyme_const, n);
}

static double worst_vs_hand; /* largest |enzcc - hand| over every evaluation L-BFGS asked for */

static lbfgsfloatval_t eval_enzcc(void *inst, const lbfgsfloatval_t *x, lbfgsfloatval_t *g, const int n,
                                  const lbfgsfloatval_t step) {
  double *h = malloc(sizeof(double) * n);
  hand_gradient(x, h, n);
  enzcc_gradient(x, g, n);
  for (int i = 0; i < n; i++) {
    double d = fabs(g[i] - h[i]);
    if (d > worst_vs_hand) worst_vs_hand = d;
  }
  free(h);
  return rosenbrock(x, n);
}

static lbfgsfloatval_t eval_hand(void *inst, const lbfgsfloatval_t *x, lbfgsfloatval_t *g, const int n,
                                 const lbfgsfloatval_t step) {
  return hand_gradient(x, g, n);
}

static int count_iterations(void *inst, const lbfgsfloatval_t *x, const lbfgsfloatval_t *g,
                            const lbfgsfloatval_t fx, const lbfgsfloatval_t xnorm, const lbfgsfloatval_t gnorm,
                            const lbfgsfloatval_t step, int n, int k, int ls) {
  *(int *)inst = k;
  return 0;
}

static void start(double *x, int n) {
  for (int i = 0; i < n; i += 2) {
    x[i] = -1.2;
    x[i + 1] = 1.0;
  }
}

/* L-BFGS from the standard start with one gradient; prints its status, iterations, final value and x[0] */
static void minimize(const char *name, lbfgs_evaluate_t eval) {
  lbfgsfloatval_t *x = lbfgs_malloc(N), fx = 0;
  lbfgs_parameter_t param;
  int iterations = 0;
  start(x, N);
  lbfgs_parameter_init(&param);
  int status = lbfgs(N, x, &fx, eval, count_iterations, &iterations, &param);
  printf("%s.status %d\n%s.iterations %d\n%s.fx %.17g\n%s.x0 %.17g\n", name, status, name, iterations, name,
         fx, name, x[0]);
  lbfgs_free(x);
}

/* the gradient at a point off the minimum against central differences (step scaled to each coordinate) */
static void check_point(void) {
  double x[N], g[N], h[N];
  for (int i = 0; i < N; i++) x[i] = 0.3 + 0.7 * sin(1.0 + i);
  enzcc_gradient(x, g, N);
  hand_gradient(x, h, N);
  double worst_hand = 0, worst_fd = 0;
  for (int i = 0; i < N; i++) {
    double xi = x[i], step = 1e-6 * fmax(1.0, fabs(xi));
    x[i] = xi + step;
    double up = rosenbrock(x, N);
    x[i] = xi - step;
    double down = rosenbrock(x, N);
    x[i] = xi;
    double fd = (up - down) / (2 * step);
    worst_hand = fmax(worst_hand, fabs(g[i] - h[i]) / fmax(1.0, fabs(h[i])));
    worst_fd = fmax(worst_fd, fabs(g[i] - fd) / fmax(1.0, fabs(fd)));
  }
  printf("point.rel_err_hand %.17g\npoint.rel_err_fd %.17g\n", worst_hand, worst_fd);
}

static void bench(void) {
  static double x[N], g[N];
  for (int i = 0; i < N; i++) x[i] = 0.3 + 0.7 * sin(1.0 + i);
  BENCH_INTERLEAVED(bench_sink += rosenbrock(x, N), enzcc_gradient(x, g, N));
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "bench")) {
    bench();
    return 0;
  }
  check_point();
  minimize("hand", eval_hand);
  minimize("enzcc", eval_enzcc);
  printf("run.max_abs_diff_hand %.17g\n", worst_vs_hand);
  return 0;
}
