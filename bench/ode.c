/* ODE: a softened gravitational N-body system integrated with classic explicit RK4 (fixed step).
 *
 * State y = [positions (N x 3), velocities (N x 3)]; dy/dt = [velocities, accelerations] with
 *   a_i = sum_{j != i} m_j (x_j - x_i) / (|x_j - x_i|^2 + eps^2)^(3/2)
 * After `steps` steps of size dt, the loss is
 *   sum_i |x_i(T) - target_i|^2 + 1/2 sum_i m_i |v_i(T)|^2
 * and its gradient is taken with respect to the initial positions, initial velocities and the masses
 * (one array p = [x0, v0, m]).
 */
#include "common.h"

static void nbody_rhs(int nb, const double *y, const double *mass, double eps2, double *dy) {
  const double *x = y, *v = y + 3 * nb;
  double *dx = dy, *dv = dy + 3 * nb;
  for (int i = 0; i < 3 * nb; i++) dx[i] = v[i];
  for (int i = 0; i < nb; i++) {
    double a0 = 0, a1 = 0, a2 = 0;
    for (int j = 0; j < nb; j++) {
      if (j == i) continue;
      double d0 = x[3 * j] - x[3 * i], d1 = x[3 * j + 1] - x[3 * i + 1], d2 = x[3 * j + 2] - x[3 * i + 2];
      double r2 = d0 * d0 + d1 * d1 + d2 * d2 + eps2;
      double s = mass[j] / (r2 * sqrt(r2));
      a0 += s * d0; a1 += s * d1; a2 += s * d2;
    }
    dv[3 * i] = a0; dv[3 * i + 1] = a1; dv[3 * i + 2] = a2;
  }
}

double ode_objective(const double *p, int nb, int steps, double dt, double eps2, const double *target) {
  int n = 6 * nb;
  const double *mass = p + n;
  double *y = malloc(sizeof(double) * n), *tmp = malloc(sizeof(double) * n);
  double *k1 = malloc(sizeof(double) * n), *k2 = malloc(sizeof(double) * n);
  double *k3 = malloc(sizeof(double) * n), *k4 = malloc(sizeof(double) * n);
  for (int i = 0; i < n; i++) y[i] = p[i];
  for (int s = 0; s < steps; s++) {
    nbody_rhs(nb, y, mass, eps2, k1);
    for (int i = 0; i < n; i++) tmp[i] = y[i] + 0.5 * dt * k1[i];
    nbody_rhs(nb, tmp, mass, eps2, k2);
    for (int i = 0; i < n; i++) tmp[i] = y[i] + 0.5 * dt * k2[i];
    nbody_rhs(nb, tmp, mass, eps2, k3);
    for (int i = 0; i < n; i++) tmp[i] = y[i] + dt * k3[i];
    nbody_rhs(nb, tmp, mass, eps2, k4);
    for (int i = 0; i < n; i++) y[i] += dt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
  }
  double loss = 0;
  for (int i = 0; i < nb; i++) {
    for (int k = 0; k < 3; k++) {
      double d = y[3 * i + k] - target[3 * i + k], v = y[3 * nb + 3 * i + k];
      loss += d * d + 0.5 * mass[i] * v * v;
    }
  }
  free(y); free(tmp); free(k1); free(k2); free(k3); free(k4);
  return loss;
}

/* ---------------------------------------------------------------------------------------------- */

static int NB, STEPS;
static long P;
static double DT, EPS2, *TARGET;

static double primal(const double *p) { return ode_objective(p, NB, STEPS, DT, EPS2, TARGET); }

static void gradient(const double *p, double *g) {
  memset(g, 0, sizeof(double) * P);
  __enzyme_autodiff((void *)ode_objective, enzyme_dup, p, g, enzyme_const, NB, enzyme_const, STEPS,
                    enzyme_const, DT, enzyme_const, EPS2, enzyme_const, TARGET);
}

int main(int argc, char **argv) {
  bench_opts o = bench_args(argc, argv);
  bench_reader r = bench_open(o.data);
  NB = bench_read_int(&r); STEPS = bench_read_int(&r);
  DT = bench_read_double(&r); EPS2 = bench_read_double(&r);
  P = 7L * NB;
  double *p = bench_read_doubles(&r, P);
  TARGET = bench_read_doubles(&r, 3L * NB);
  bench_close(&r);
  bench_block blocks[] = {{"positions", 0, 3L * NB}, {"velocities", 3L * NB, 3L * NB}, {"masses", 6L * NB, NB}};
  return bench_run("ode", &o, P, p, primal, gradient, blocks, 3);
}
