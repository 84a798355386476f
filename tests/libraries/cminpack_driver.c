/* cminpack driver: MINPACK's eighteen least-squares test problems (examples/ssqfcn.c, starting points
 * examples/ssqipt.c, the 53 cases of examples/testdata/ssq.data, all unmodified) with the Jacobian from enzcc
 * against the hand-written one (examples/ssqjac.c), and lmder1 solving each case with either.
 * Built with cminpack's own unmodified sources (tests/libraries/test_cminpack.py).
 *
 *   ./prog check ssq.data   "name value" lines: worst Jacobian errors, lmder1 agreement over all cases
 *   ./prog bench            timing: ssqfcn of problem 18 (Osborne 2, m=65, n=11) and its reverse sweep
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cminpack.h"
#include "ssq.h"
#include "bench_timer.h"

extern int enzyme_dup, enzyme_dupnoneed, enzyme_const;
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

#define MMAX 65
#define NMAX 40

/* column j of the Jacobian in forward mode: the tangent of fvec along e_j */
static void jacobian_forward(int m, int n, const double *x, double *fjac, int ldfjac, int nprob) {
  double dx[NMAX], fvec[MMAX], dfvec[MMAX];
  for (int j = 0; j < n; j++) {
    memset(dx, 0, sizeof dx);
    dx[j] = 1.0;
    __enzyme_fwddiff((void *)ssqfcn, enzyme_const, m, enzyme_const, n, enzyme_dup, x, dx, enzyme_dupnoneed, fvec,
                     dfvec, enzyme_const, nprob);
    for (int i = 0; i < m; i++) fjac[i + j * ldfjac] = dfvec[i];
  }
}

/* row i of the Jacobian in reverse mode: the adjoint of x for the seed e_i on fvec */
static void jacobian_reverse(int m, int n, const double *x, double *fjac, int ldfjac, int nprob) {
  double fvec[MMAX], dfvec[MMAX], dx[NMAX];
  for (int i = 0; i < m; i++) {
    memset(dfvec, 0, sizeof dfvec);
    memset(dx, 0, sizeof dx);
    dfvec[i] = 1.0;
    __enzyme_autodiff((void *)ssqfcn, enzyme_const, m, enzyme_const, n, enzyme_dup, x, dx, enzyme_dup, fvec, dfvec,
                      enzyme_const, nprob);
    for (int j = 0; j < n; j++) fjac[i + j * ldfjac] = dx[j];
  }
}

/* the Jacobian by central differences, each step scaled to its coordinate */
static void jacobian_fd(int m, int n, const double *x0, double *fjac, int ldfjac, int nprob) {
  double x[NMAX], up[MMAX], down[MMAX];
  memcpy(x, x0, sizeof(double) * n);
  for (int j = 0; j < n; j++) {
    double h = 1e-6 * fmax(1.0, fabs(x0[j]));
    x[j] = x0[j] + h;
    ssqfcn(m, n, x, up, nprob);
    x[j] = x0[j] - h;
    ssqfcn(m, n, x, down, nprob);
    x[j] = x0[j];
    for (int i = 0; i < m; i++) fjac[i + j * ldfjac] = (up[i] - down[i]) / (2 * h);
  }
}

/* largest |a - b| relative to the largest |b| of its column (entries of one column share a scale) */
static double column_error(int m, int n, const double *a, const double *b) {
  double worst = 0;
  for (int j = 0; j < n; j++) {
    double scale = 0;
    for (int i = 0; i < m; i++) scale = fmax(scale, fabs(b[i + j * m]));
    if (scale == 0) scale = 1;
    for (int i = 0; i < m; i++) worst = fmax(worst, fabs(a[i + j * m] - b[i + j * m]) / scale);
  }
  return worst;
}

struct problem {
  int nprob, nfev, njev, enzcc;
};

/* lmder1's callback: ssqfcn for the residuals; the Jacobian by hand (ssqjac) or by enzcc's forward mode */
static int fcn(void *p, int m, int n, const double *x, double *fvec, double *fjac, int ldfjac, int iflag) {
  struct problem *pb = p;
  if (iflag == 1) {
    ssqfcn(m, n, x, fvec, pb->nprob);
    pb->nfev++;
  } else if (iflag == 2) {
    if (pb->enzcc)
      jacobian_forward(m, n, x, fjac, ldfjac, pb->nprob);
    else
      ssqjac(m, n, x, fjac, ldfjac, pb->nprob);
    pb->njev++;
  }
  return 0;
}

struct solve {
  int info, nfev, njev;
  double fnorm;
};

static struct solve solve(int nprob, int m, int n, double factor, int enzcc) {
  double x[NMAX], fvec[MMAX], fjac[MMAX * NMAX], wa[5 * NMAX + MMAX];
  int ipvt[NMAX];
  struct problem pb = {nprob, 0, 0, enzcc};
  lmdipt(n, x, nprob, factor);
  int info = lmder1(fcn, &pb, m, n, x, fvec, fjac, m, sqrt(dpmpar(1)), ipvt, wa, 5 * NMAX + MMAX);
  ssqfcn(m, n, x, fvec, nprob);
  struct solve s = {info, pb.nfev, pb.njev, enorm(m, fvec)};
  return s;
}

/* the gradient of cminpack's own enorm (a norm that rescales components above rgiant/n or below rdwarf to
 * avoid overflow and underflow) against the analytic x / |x|, reverse and forward, in each of its regimes */
static double check_enorm(void) {
  const double scales[4][2] = {{1, 1}, {1e160, 1e160}, {1e-160, 1e-160}, {1e160, 1}}; /* mid, giant, dwarf, mixed */
  double worst = 0;
  for (int s = 0; s < 4; s++) {
    double x[6], g[6] = {0}, norm2 = 0;
    for (int i = 0; i < 6; i++) x[i] = (i % 2 ? -1 : 1) * (0.3 + 0.2 * i) * scales[s][i < 2 ? 0 : 1];
    for (int i = 0; i < 6; i++) norm2 += (x[i] / scales[s][0]) * (x[i] / scales[s][0]);
    double norm = sqrt(norm2) * scales[s][0];
    __enzyme_autodiff((void *)enorm, enzyme_const, 6, enzyme_dup, x, g);
    for (int i = 0; i < 6; i++) {
      double dx[6] = {0};
      dx[i] = 1;
      double t = __enzyme_fwddiff((void *)enorm, enzyme_const, 6, enzyme_dup, x, dx);
      double exact = x[i] / norm; /* |exact| <= 1 */
      worst = fmax(worst, fmax(fabs(g[i] - exact), fabs(t - exact)));
      if (isnan(g[i]) || isnan(t)) worst = INFINITY;
    }
  }
  return worst;
}

static int check(const char *data) {
  FILE *f = fopen(data, "r");
  if (!f) {
    perror(data);
    return 1;
  }
  int nprob, n, m, ntries, cases = 0, same_path = 0;
  double err_fwd = 0, err_rev = 0, err_fd = 0;
  while (fscanf(f, "%d%d%d%d", &nprob, &n, &m, &ntries) == 4 && nprob > 0) {
    double factor = 1;
    for (int k = 0; k < ntries; k++, factor *= 10, cases++) {
      double x[NMAX], hand[MMAX * NMAX], fwd[MMAX * NMAX], rev[MMAX * NMAX], fd[MMAX * NMAX];
      lmdipt(n, x, nprob, factor);
      ssqjac(m, n, x, hand, m, nprob);
      jacobian_forward(m, n, x, fwd, m, nprob);
      jacobian_reverse(m, n, x, rev, m, nprob);
      jacobian_fd(m, n, x, fd, m, nprob);
      double ef = column_error(m, n, fwd, hand), er = column_error(m, n, rev, hand),
             ed = column_error(m, n, fwd, fd);
      err_fwd = fmax(err_fwd, ef);
      err_rev = fmax(err_rev, er);
      err_fd = fmax(err_fd, ed);
      struct solve a = solve(nprob, m, n, factor, 0), b = solve(nprob, m, n, factor, 1);
      same_path += a.info == b.info && a.nfev == b.nfev && a.njev == b.njev;
      printf("case%d.problem %d\ncase%d.err_fwd %.3g\ncase%d.err_rev %.3g\ncase%d.err_fd %.3g\n"
             "case%d.hand_nfev %d\ncase%d.enzcc_nfev %d\ncase%d.hand_info %d\ncase%d.enzcc_info %d\n"
             "case%d.hand_fnorm %.17g\ncase%d.enzcc_fnorm %.17g\n",
             cases, nprob, cases, ef, cases, er, cases, ed, cases, a.nfev, cases, b.nfev, cases, a.info, cases,
             b.info, cases, a.fnorm, cases, b.fnorm);
    }
  }
  fclose(f);
  printf("enorm.err %.17g\n", check_enorm());
  printf("all.cases %d\nall.err_fwd %.17g\nall.err_rev %.17g\nall.err_fd %.17g\nall.same_path %d\n", cases,
         err_fwd, err_rev, err_fd, same_path);
  return 0;
}

static void bench(void) {
  static double x[NMAX], dx[NMAX], fvec[MMAX], dfvec[MMAX];
  const int nprob = 18, m = 65, n = 11;
  lmdipt(n, x, nprob, 1.0);
  for (int i = 0; i < m; i++) dfvec[i] = 1.0 / (1 + i);
  BENCH_INTERLEAVED(ssqfcn(m, n, x, fvec, nprob),
                    __enzyme_autodiff((void *)ssqfcn, enzyme_const, m, enzyme_const, n, enzyme_dup, x, dx,
                                      enzyme_dup, fvec, dfvec, enzyme_const, nprob));
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "bench")) {
    bench();
    return 0;
  }
  if (argc > 2 && !strcmp(argv[1], "check")) return check(argv[2]);
  fprintf(stderr, "usage: %s check ssq.data | bench\n", argv[0]);
  return 2;
}
