/* kissfft driver: gradients of a weighted power spectrum sum_k w_k |X_k|^2 of a real FFT (kiss_fftr, in
 * double: -Dkiss_fft_scalar=double), built with kissfft's own unmodified kiss_fft.c and kiss_fftr.c
 * (tests/libraries/test_kissfft.py). The analytic gradient is d/dx_j = 2 sum_k w_k (Re X_k cos t - Im X_k sin t),
 * t = 2 pi j k / n.
 *
 *   ./prog        "name value" lines: the plan made inside the differentiated function (reverse and forward,
 *                 n = 64, 60 and 28: radix 4/2, 3/5 and the generic butterfly with its own scratch), and the
 *                 plan passed enzyme_dup with a shadow plan whose buffers are zeroed (reverse and forward)
 *   ./prog bench  timing: the plan-inside function at n = 256 and its gradient
 *
 * Built with -DCONST_PLAN it passes the plan as enzyme_const instead: kiss_fftr writes active values into the
 * plan's scratch buffer and reads them back, which enzcc refuses in one line (Enzyme: mismatched activity).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "_kiss_fft_guts.h"
#include "kiss_fftr.h"
#include "bench_timer.h"

extern int enzyme_dup, enzyme_dupnoneed, enzyme_const;
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

#define NMAX 256

/* kiss_fftr.c's private plan layout (three pointers into the plan's own allocation): the driver needs it to
 * zero a shadow plan's buffers */
struct fftr_plan {
  kiss_fft_cfg substate;
  kiss_fft_cpx *tmpbuf;
  kiss_fft_cpx *super_twiddles;
};

static double weight(int k) { return 1.0 + 0.25 * k; }

static double weighted_power(const kiss_fft_cpx *X, int n) {
  double s = 0;
  for (int k = 0; k <= n / 2; k++) s += weight(k) * (X[k].r * X[k].r + X[k].i * X[k].i);
  return s;
}

/* the plan made, used and freed inside the differentiated function */
__attribute__((noinline)) static double power_inside(const double *x, int n) {
  kiss_fftr_cfg cfg = kiss_fftr_alloc(n, 0, NULL, NULL);
  kiss_fft_cpx *X = malloc(sizeof(kiss_fft_cpx) * (n / 2 + 1));
  kiss_fftr(cfg, x, X);
  double s = weighted_power(X, n);
  free(X);
  kiss_fftr_free(cfg);
  return s;
}

/* the plan made outside: passed enzyme_dup (or enzyme_const with -DCONST_PLAN) */
__attribute__((noinline)) static double power_plan(kiss_fftr_cfg cfg, const double *x, int n) {
  kiss_fft_cpx X[NMAX / 2 + 1];
  kiss_fftr(cfg, x, X);
  return weighted_power(X, n);
}

static void analytic(const double *x, double *g, int n) {
  for (int j = 0; j < n; j++) g[j] = 0;
  for (int k = 0; k <= n / 2; k++) {
    double re = 0, im = 0;
    for (int j = 0; j < n; j++) {
      re += x[j] * cos(2 * M_PI * j * k / n);
      im -= x[j] * sin(2 * M_PI * j * k / n);
    }
    for (int j = 0; j < n; j++)
      g[j] += 2 * weight(k) * (re * cos(2 * M_PI * j * k / n) - im * sin(2 * M_PI * j * k / n));
  }
}

static void input(double *x, int n) {
  for (int j = 0; j < n; j++) x[j] = sin(0.7 * j + 0.3) + 0.1 * j / n;
}

/* the largest error of g against the analytic gradient and against central differences of f, relative to
 * the gradient's largest entry */
static void judge(const char *name, double (*f)(const double *, int), const double *g, int n) {
  double x[NMAX], a[NMAX], scale = 0, err_a = 0, err_fd = 0;
  input(x, n);
  analytic(x, a, n);
  for (int j = 0; j < n; j++) scale = fmax(scale, fabs(a[j]));
  for (int j = 0; j < n; j++) {
    double xj = x[j], h = 1e-6;
    x[j] = xj + h;
    double up = f(x, n);
    x[j] = xj - h;
    double down = f(x, n);
    x[j] = xj;
    err_a = fmax(err_a, fabs(g[j] - a[j]) / scale);
    err_fd = fmax(err_fd, fabs(g[j] - (up - down) / (2 * h)) / scale);
  }
  printf("%s.err_analytic %.17g\n%s.err_fd %.17g\n", name, err_a, name, err_fd);
}

static double power_inside_f(const double *x, int n) { return power_inside(x, n); }

/* the directional derivative along e_j for each j, by forward mode */
static void forward_inside(const double *x, double *g, int n) {
  double dx[NMAX];
  for (int j = 0; j < n; j++) {
    memset(dx, 0, sizeof dx);
    dx[j] = 1;
    g[j] = __enzyme_fwddiff((void *)power_inside, enzyme_dup, x, dx, enzyme_const, n);
  }
}

static void check_inside(int n) {
  double x[NMAX], g[NMAX] = {0};
  char name[64];
  input(x, n);
  __enzyme_autodiff((void *)power_inside, enzyme_dup, x, g, enzyme_const, n);
  snprintf(name, sizeof name, "inside%d.reverse", n);
  judge(name, power_inside_f, g, n);
  forward_inside(x, g, n);
  snprintf(name, sizeof name, "inside%d.forward", n);
  judge(name, power_inside_f, g, n);
}

static kiss_fftr_cfg the_plan;
static double power_plan_f(const double *x, int n) { return power_plan(the_plan, x, n); }

/* a shadow plan: the same layout as a plan (its pointers lead into its own allocation) with every buffer of
 * numbers zeroed (the scratch, both twiddle tables); zeroed again before each derivative, since the reverse
 * sweep accumulates adjoints into the twiddles' shadows */
static void zero_shadow(kiss_fftr_cfg shadow, int n) {
  struct fftr_plan *p = (struct fftr_plan *)shadow;
  memset(p->tmpbuf, 0, sizeof(kiss_fft_cpx) * (n / 2));
  memset(p->super_twiddles, 0, sizeof(kiss_fft_cpx) * (n / 4));
  memset(p->substate->twiddles, 0, sizeof(kiss_fft_cpx) * (n / 2));
}

#ifdef CONST_PLAN
static void check_plan(int n) {
  double x[NMAX], g[NMAX] = {0};
  input(x, n);
  the_plan = kiss_fftr_alloc(n, 0, NULL, NULL);
  __enzyme_autodiff((void *)power_plan, enzyme_const, the_plan, enzyme_dup, x, g, enzyme_const, n);
  judge("plan_const.reverse", power_plan_f, g, n);
  kiss_fftr_free(the_plan);
}
#else
static void check_plan(int n) {
  double x[NMAX], g[NMAX] = {0}, dx[NMAX];
  char name[64];
  input(x, n);
  the_plan = kiss_fftr_alloc(n, 0, NULL, NULL);
  kiss_fftr_cfg shadow = kiss_fftr_alloc(n, 0, NULL, NULL);
  zero_shadow(shadow, n);
  __enzyme_autodiff((void *)power_plan, enzyme_dup, the_plan, shadow, enzyme_dup, x, g, enzyme_const, n);
  snprintf(name, sizeof name, "plan_dup%d.reverse", n);
  judge(name, power_plan_f, g, n);
  for (int j = 0; j < n; j++) {
    memset(dx, 0, sizeof dx);
    dx[j] = 1;
    zero_shadow(shadow, n);
    g[j] = __enzyme_fwddiff((void *)power_plan, enzyme_dup, the_plan, shadow, enzyme_dup, x, dx, enzyme_const, n);
  }
  snprintf(name, sizeof name, "plan_dup%d.forward", n);
  judge(name, power_plan_f, g, n);
  kiss_fftr_free(shadow);
  kiss_fftr_free(the_plan);
}
#endif

static void bench(void) {
  static double x[NMAX], g[NMAX];
  input(x, NMAX);
  BENCH_INTERLEAVED(bench_sink += power_inside(x, NMAX),
                    __enzyme_autodiff((void *)power_inside, enzyme_dup, x, g, enzyme_const, NMAX));
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "bench")) {
    bench();
    return 0;
  }
#ifndef CONST_PLAN
  check_inside(64);
  check_inside(60);
  check_inside(28);
  check_plan(60);
#endif
  check_plan(64);
  return 0;
}
