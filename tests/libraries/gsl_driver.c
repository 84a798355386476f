/* GSL driver: gradients through the GNU Scientific Library's unmodified sources (tests/libraries/test_gsl.py),
 * reverse and forward mode, against analytic derivatives and central differences.
 *
 *   ode    (built with -DWITH_ODE; -DODE_MARKERS=enzyme_runtime_activity, for the marker: test_gsl.py says
 *          what enzcc does with each) the final state of an undamped oscillator y'' = -k y solved by
 *          gsl_odeiv2_driver_apply (rk8pd and rkf45: the system's function pointer and its params in a
 *          struct, adaptive steps with the step control's fabs/pow/branches), F = y(T) + y'(T)/2, with respect
 *          to k (through params) and to the initial state; analytic: y = a cos(wT) + v/w sin(wT), w = sqrt(k)
 *   sf     gsl_sf_bessel_J0 (J0' = -J1), gsl_sf_gamma (Gamma' = Gamma psi), gsl_sf_erf (erf' = 2/sqrt(pi)
 *          exp(-x^2)) at points in each of their regimes (Chebyshev tables, amplitude-phase, Lanczos, series,
 *          Stirling, erfc's rational fits); not at integers, where gsl_sf_gamma reads a factorial table (a
 *          constant on that branch: there the derivative of the program is zero, in Enzyme too)
 *   lu     F = c . A^-1 b by gsl_linalg_LU_decomp (partial pivoting, recursive blocked LU through GSL's own
 *          CBLAS), gsl_linalg_LU_solve and gsl_blas_ddot, with respect to A, b and c; analytic: with
 *          x = A^-1 b and y = A^-T c, dF/db = y, dF/dc = x, dF/dA = -y x^T
 *
 *   ./prog        "name value" lines: for each case the largest error relative to the gradient's largest entry
 *   ./prog bench  timing: c . A^-1 b by LU and its reverse gradient
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_odeiv2.h>
#include <gsl/gsl_sf_bessel.h>
#include <gsl/gsl_sf_erf.h>
#include <gsl/gsl_sf_gamma.h>
#include <gsl/gsl_sf_psi.h>
#include "bench_timer.h"

extern int enzyme_dup, enzyme_const, enzyme_out, enzyme_runtime_activity;
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

static void report(const char *name, const char *what, double err) { printf("%s.%s %.17g\n", name, what, err); }

/* ---- ODE ---- */

#define T_END 3.0

static int oscillator(double t, const double y[], double f[], void *params) {
  (void)t;
  const double k = *(const double *)params;
  f[0] = y[1];
  f[1] = -k * y[0];
  return GSL_SUCCESS;
}

/* F = y(T) + y'(T)/2 of the oscillator from y0 with stiffness *k, by GSL's adaptive driver */
__attribute__((noinline)) static double ode_final(const gsl_odeiv2_step_type *type, const double *k,
                                                  const double *y0) {
  gsl_odeiv2_system sys = {oscillator, NULL, 2, (void *)k};
  gsl_odeiv2_driver *d = gsl_odeiv2_driver_alloc_y_new(&sys, type, 1e-3, 1e-11, 1e-11);
  double y[2] = {y0[0], y0[1]}, t = 0;
  int status = gsl_odeiv2_driver_apply(d, &t, T_END, y);
  gsl_odeiv2_driver_free(d);
  if (status != GSL_SUCCESS) abort();
  return y[0] + 0.5 * y[1];
}

/* the stepper named inside the differentiated function */
__attribute__((noinline)) static double ode_rk8pd(const double *k, const double *y0) {
  return ode_final(gsl_odeiv2_step_rk8pd, k, y0);
}
__attribute__((noinline)) static double ode_rkf45(const double *k, const double *y0) {
  return ode_final(gsl_odeiv2_step_rkf45, k, y0);
}

/* the analytic gradient of F with respect to (k, a, v) */
static void ode_analytic(double k, double a, double v, double g[3]) {
  double w = sqrt(k), s = sin(w * T_END), c = cos(w * T_END);
  double y_w = -a * T_END * s - v / (w * w) * s + v * T_END / w * c;
  double yp_w = -a * s - a * w * T_END * c - v * T_END * s;
  g[0] = (y_w + 0.5 * yp_w) / (2 * w);
  g[1] = c + 0.5 * (-w * s);
  g[2] = s / w + 0.5 * c;
}

typedef double (*ode_fn)(const double *k, const double *y0);

static double ode_at(ode_fn f, const double p[3]) {
  double k = p[0], y0[2] = {p[1], p[2]};
  return f(&k, y0);
}

static void ode_judge(const char *name, ode_fn f, const double p[3], const double g[3]) {
  double a[3], scale = 0, err_a = 0, err_fd = 0;
  ode_analytic(p[0], p[1], p[2], a);
  for (int j = 0; j < 3; j++) scale = fmax(scale, fabs(a[j]));
  for (int j = 0; j < 3; j++) {
    double q[3] = {p[0], p[1], p[2]}, h = 1e-5;
    q[j] = p[j] + h;
    double up = ode_at(f, q);
    q[j] = p[j] - h;
    double down = ode_at(f, q);
    err_a = fmax(err_a, fabs(g[j] - a[j]) / scale);
    err_fd = fmax(err_fd, fabs(g[j] - (up - down) / (2 * h)) / scale);
  }
  report(name, "err_analytic", err_a);
  report(name, "err_fd", err_fd);
}

static const double ode_point[3] = {2.3, 0.7, -0.4}; /* k, y(0), y'(0) */

/* the gradient of F (ode_rk8pd or ode_rkf45) with respect to (k, y(0), y'(0)), reverse and forward mode
 * (-DODE_MARKERS=enzyme_runtime_activity, to try runtime activity) */
#ifndef ODE_MARKERS
#define ODE_MARKERS
#endif

#define CHECK_ODE(NAME, F)                                                                                       \
  do {                                                                                                           \
    double k_ = ode_point[0], dk_ = 0, y0_[2] = {ode_point[1], ode_point[2]}, dy0_[2] = {0, 0}, g_[3];           \
    __enzyme_autodiff((void *)F, ODE_MARKERS enzyme_dup, &k_, &dk_, enzyme_dup, y0_, dy0_);                      \
    g_[0] = dk_, g_[1] = dy0_[0], g_[2] = dy0_[1];                                                               \
    ode_judge("ode_" NAME ".reverse", F, ode_point, g_);                                                         \
    for (int j_ = 0; j_ < 3; j_++) {                                                                             \
      double tk_ = j_ == 0, ty_[2] = {j_ == 1, j_ == 2};                                                         \
      g_[j_] = __enzyme_fwddiff((void *)F, ODE_MARKERS enzyme_dup, &k_, &tk_, enzyme_dup, y0_, ty_);             \
    }                                                                                                            \
    ode_judge("ode_" NAME ".forward", F, ode_point, g_);                                                         \
  } while (0)

#ifdef CONST_STEPPER
/* the stepper type passed in as enzyme_const: GSL stores it in the stepper it allocates, and calls through
 * the function pointers read back from there (refused in one line: mismatched activity) */
static void check_const_stepper(void) {
  double k = ode_point[0], dk = 0, y0[2] = {ode_point[1], ode_point[2]}, dy0[2] = {0, 0};
  __enzyme_autodiff((void *)ode_final, enzyme_const, gsl_odeiv2_step_rk8pd, enzyme_dup, &k, &dk, enzyme_dup, y0,
                    dy0);
  printf("const_stepper.dk %.17g\n", dk);
}
#endif

/* ---- special functions ---- */

__attribute__((noinline)) static double sf_j0(double x) { return gsl_sf_bessel_J0(x); }
__attribute__((noinline)) static double sf_gamma(double x) { return gsl_sf_gamma(x); }
__attribute__((noinline)) static double sf_erf(double x) { return gsl_sf_erf(x); }

static double d_j0(double x) { return -gsl_sf_bessel_J1(x); }
static double d_gamma(double x) { return gsl_sf_gamma(x) * gsl_sf_psi(x); }
static double d_erf(double x) { return 2 / sqrt(M_PI) * exp(-x * x); }

/* the errors of one derivative at x (relative to max(|exact|, 1e-3)), the largest kept */
struct sf_errs { double rev, fwd, fd; };

static void sf_point(struct sf_errs *e, double (*f)(double), double x, double exact, double rev, double fwd) {
  double scale = fmax(fabs(exact), 1e-3), h = 1e-6 * fmax(1, fabs(x));
  double fd = (f(x + h) - f(x - h)) / (2 * h);
  e->rev = fmax(e->rev, fabs(rev - exact) / scale);
  e->fwd = fmax(e->fwd, fabs(fwd - exact) / scale);
  e->fd = fmax(e->fd, fabs(fd - rev) / scale);
}

static void sf_report(const char *name, const struct sf_errs *e) {
  char full[64];
  snprintf(full, sizeof full, "sf_%s.reverse", name);
  report(full, "err_analytic", e->rev);
  report(full, "err_fd", e->fd);
  snprintf(full, sizeof full, "sf_%s.forward", name);
  report(full, "err_analytic", e->fwd);
}

/* reverse and forward derivatives of F (a function known at compile time: __enzyme_autodiff's first argument
 * cannot be a function pointer passed in) at each point of XS against D and central differences */
#define CHECK_SF(NAME, F, D, XS)                                                                                 \
  do {                                                                                                           \
    struct sf_errs e_ = {0, 0, 0};                                                                               \
    for (unsigned i_ = 0; i_ < sizeof XS / sizeof *XS; i_++)                                                     \
      sf_point(&e_, F, XS[i_], D(XS[i_]), __enzyme_autodiff((void *)F, XS[i_]),                                  \
               __enzyme_fwddiff((void *)F, XS[i_], 1.0));                                                        \
    sf_report(NAME, &e_);                                                                                        \
  } while (0)

static void check_special_functions(void) {
  /* J0: Chebyshev series below 4, amplitude and phase above */
  static const double j0_at[] = {0.05, 0.9, 2.5, 3.9, 4.5, 8.3, 17.0, 60.2};
  /* Gamma: reflection below 0.5, series near 1 and 2, Lanczos below 5, the 5-10 region, Stirling above */
  static const double gamma_at[] = {-1.7, 0.3, 1.004, 1.9975, 2.5, 4.3, 7.3, 14.5, 25.7};
  /* erf: its series below 1e-3 ... and erfc's Chebyshev fits (x < 2, < 5), erfc8 above */
  static const double erf_at[] = {-2.2, 0.0005, 0.3, 0.95, 1.5, 2.7, 4.6, 5.3};
  CHECK_SF("bessel_J0", sf_j0, d_j0, j0_at);
  CHECK_SF("gamma", sf_gamma, d_gamma, gamma_at);
  CHECK_SF("erf", sf_erf, d_erf, erf_at);
}

/* ---- LU solve ---- */

#define LUN 5

/* x = LU^-1 b by GSL's LU with partial pivoting (lu: A, factored in place) */
static void lu_solve(double *lu, const double *b, double *x) {
  gsl_matrix_view m = gsl_matrix_view_array(lu, LUN, LUN);
  gsl_vector_const_view bv = gsl_vector_const_view_array(b, LUN);
  gsl_vector_view xv = gsl_vector_view_array(x, LUN);
  gsl_permutation *p = gsl_permutation_alloc(LUN);
  int sign;
  gsl_linalg_LU_decomp(&m.matrix, p, &sign);
  gsl_linalg_LU_solve(&m.matrix, p, &bv.vector, &xv.vector);
  gsl_permutation_free(p);
}

/* c . A^-1 b: the LU solve, then gsl_blas_ddot */
__attribute__((noinline)) static double lu_solve_dot(const double *a, const double *b, const double *c) {
  double lu[LUN * LUN], x[LUN], r;
  memcpy(lu, a, sizeof lu);
  lu_solve(lu, b, x);
  gsl_vector_const_view cv = gsl_vector_const_view_array(c, LUN);
  gsl_vector_const_view xv = gsl_vector_const_view_array(x, LUN);
  gsl_blas_ddot(&cv.vector, &xv.vector, &r);
  return r;
}

/* x = A^-1 b (transposed: A^-T b) by the primal library */
static void lu_primal_solve(const double *a, const double *b, double *x, int transposed) {
  double lu[LUN * LUN];
  for (int i = 0; i < LUN; i++)
    for (int j = 0; j < LUN; j++) lu[i * LUN + j] = transposed ? a[j * LUN + i] : a[i * LUN + j];
  lu_solve(lu, b, x);
}

#define LUP (LUN * LUN + 2 * LUN) /* A, b, c packed */

static double lu_at(const double *q) { return lu_solve_dot(q, q + LUN * LUN, q + LUN * LUN + LUN); }

static void lu_judge(const char *name, const double *q, const double *g) {
  double x[LUN], y[LUN], exact[LUP], scale = 0, err_a = 0, err_fd = 0;
  const double *a = q, *b = q + LUN * LUN, *c = b + LUN;
  lu_primal_solve(a, b, x, 0);
  lu_primal_solve(a, c, y, 1);
  for (int i = 0; i < LUN; i++)
    for (int j = 0; j < LUN; j++) exact[i * LUN + j] = -y[i] * x[j];
  for (int i = 0; i < LUN; i++) exact[LUN * LUN + i] = y[i], exact[LUN * LUN + LUN + i] = x[i];
  for (int j = 0; j < LUP; j++) scale = fmax(scale, fabs(exact[j]));
  for (int j = 0; j < LUP; j++) {
    double r[LUP], h = 1e-6;
    memcpy(r, q, sizeof r);
    r[j] = q[j] + h;
    double up = lu_at(r);
    r[j] = q[j] - h;
    double down = lu_at(r);
    err_a = fmax(err_a, fabs(g[j] - exact[j]) / scale);
    err_fd = fmax(err_fd, fabs(g[j] - (up - down) / (2 * h)) / scale);
  }
  report(name, "err_analytic", err_a);
  report(name, "err_fd", err_fd);
}

static void lu_input(double *q) {
  for (int i = 0; i < LUN; i++)
    for (int j = 0; j < LUN; j++)  /* small diagonal: the pivots come from below it */
      q[i * LUN + j] = i == j ? 0.05 * (i + 1) : sin(1.3 * i + 0.7 * j + 0.2) + 0.1 * (i > j);
  for (int i = 0; i < LUN; i++) q[LUN * LUN + i] = cos(0.9 * i), q[LUN * LUN + LUN + i] = 1.0 + 0.3 * i;
}

static void check_lu(void) {
  double q[LUP], g[LUP] = {0}, t[LUP];
  lu_input(q);
  __enzyme_autodiff((void *)lu_solve_dot, enzyme_dup, q, g, enzyme_dup, q + LUN * LUN, g + LUN * LUN, enzyme_dup,
                    q + LUN * LUN + LUN, g + LUN * LUN + LUN);
  lu_judge("lu.reverse", q, g);
  for (int j = 0; j < LUP; j++) {
    memset(t, 0, sizeof t);
    t[j] = 1;
    g[j] = __enzyme_fwddiff((void *)lu_solve_dot, enzyme_dup, q, t, enzyme_dup, q + LUN * LUN, t + LUN * LUN,
                            enzyme_dup, q + LUN * LUN + LUN, t + LUN * LUN + LUN);
  }
  lu_judge("lu.forward", q, g);
}

/* timing: c . A^-1 b by LU and its reverse gradient with respect to A, b and c */
static void bench(void) {
  static double q[LUP], g[LUP];
  lu_input(q);
  BENCH_INTERLEAVED(bench_sink += lu_at(q),
                    (memset(g, 0, sizeof g),
                     __enzyme_autodiff((void *)lu_solve_dot, enzyme_dup, q, g, enzyme_dup, q + LUN * LUN,
                                       g + LUN * LUN, enzyme_dup, q + LUN * LUN + LUN, g + LUN * LUN + LUN)));
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "bench")) {
    bench();
    return 0;
  }
#ifdef CONST_STEPPER
  check_const_stepper();
#endif
#ifdef WITH_ODE
  CHECK_ODE("rk8pd", ode_rk8pd);
  CHECK_ODE("rkf45", ode_rkf45);
#endif
  check_special_functions();
#ifndef NO_LU
  check_lu();
#endif
  return 0;
}
