/* HEAT: a 2-D reaction-diffusion (Allen-Cahn) equation, explicit Euler on an n x n grid whose boundary cells
 * keep their initial values, `steps` time steps of a 5-point stencil (grid spacing 1):
 *   u'[i][j] = u + dt * (D * (u[i-1][j] + u[i+1][j] + u[i][j-1] + u[i][j+1] - 4 u) + u - u^3)
 * Each step goes from one buffer to the other (u to v, then v back to u), so each overwrites the field of the step
 * before last. The loss is sum_ij (u_T[i][j] - target[i][j])^2; the gradient is taken with respect to the initial
 * field u_0 and the diffusion coefficient D (one array p = [u_0, D]).
 */
#include "common.h"

/* one explicit step from src to dst (the boundary cells of dst keep theirs) */
static void heat_step(int n, double c, double dt, const double *src, double *dst) {
  for (int i = 1; i < n - 1; i++) {
    for (int j = 1; j < n - 1; j++) {
      long k = (long)i * n + j;
      double x = src[k];
      double lap = src[k - n] + src[k + n] + src[k - 1] + src[k + 1] - 4 * x;
      dst[k] = x + c * lap + dt * (x - x * x * x);
    }
  }
}

/* steps: even (each pass of the loop makes two, from u to v and back) */
double heat_objective(const double *p, int n, int steps, double dt, const double *target) {
  long m = (long)n * n;
  double c = dt * p[m];
  double *u = malloc(sizeof(double) * m), *v = malloc(sizeof(double) * m);
  for (long k = 0; k < m; k++) u[k] = v[k] = p[k];
  for (int s = 0; s < steps; s += 2) {
    heat_step(n, c, dt, u, v);
    heat_step(n, c, dt, v, u);
  }
  double loss = 0;
  for (long k = 0; k < m; k++) {
    double d = u[k] - target[k];
    loss += d * d;
  }
  free(u);
  free(v);
  return loss;
}

/* ---------------------------------------------------------------------------------------------- */

static int N, STEPS;
static long P;
static double DT, *TARGET;

static double primal(const double *p) { return heat_objective(p, N, STEPS, DT, TARGET); }

static void gradient(const double *p, double *g) {
  memset(g, 0, sizeof(double) * P);
  __enzyme_autodiff((void *)heat_objective, enzyme_dup, p, g, enzyme_const, N, enzyme_const, STEPS,
                    enzyme_const, DT, enzyme_const, TARGET);
}

int main(int argc, char **argv) {
  bench_opts o = bench_args(argc, argv);
  bench_reader r = bench_open(o.data);
  N = bench_read_int(&r); STEPS = bench_read_int(&r);
  DT = bench_read_double(&r);
  long m = (long)N * N;
  P = m + 1;
  double *p = bench_read_doubles(&r, P);
  TARGET = bench_read_doubles(&r, m);
  bench_close(&r);
  bench_block blocks[] = {{"field", 0, m}, {"diffusion", m, 1}};
  return bench_run("heat", &o, P, p, primal, gradient, blocks, 2);
}
