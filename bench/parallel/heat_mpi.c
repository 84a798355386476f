/* HEAT over MPI: bench/heat.c's reaction-diffusion equation (explicit Euler, 5-point stencil, the boundary cells
 * keeping their initial values) on an n x n grid whose rows are split between the ranks, each holding its rows
 * and a halo row above and below, exchanged with MPI_Sendrecv before each step (MPI_PROC_NULL past the grid's
 * edges). The loss, sum (u_T - target)^2, is summed with MPI_Allreduce and returned on rank 0; the gradient is
 * taken with respect to the initial field, each rank holding its rows of it.
 *
 * usage: heat_mpi N STEPS REPS   (N divisible by the number of ranks); prints one JSON line on rank 0:
 * the median primal and gradient times (seconds, slowest rank), the gradient's norm, and its largest relative
 * difference from central differences at a few coordinates.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int enzyme_dup, enzyme_const;
void __enzyme_autodiff(void *, ...);

static void exchange(double *u, int rows, int n, int up, int down) {
  MPI_Sendrecv(&u[n], n, MPI_DOUBLE, up, 0, &u[(long)(rows + 1) * n], n, MPI_DOUBLE, down, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  MPI_Sendrecv(&u[(long)rows * n], n, MPI_DOUBLE, down, 1, &u[0], n, MPI_DOUBLE, up, 1, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
}

/* one step from src to dst over this rank's rows (global row first + r - 1 for local row r) */
static void step(int rows, int n, int first, double c, double dt, const double *src, double *dst) {
  for (int r = 1; r <= rows; r++) {
    int g = first + r - 1;
    if (g == 0 || g == n - 1) continue;
    for (int j = 1; j < n - 1; j++) {
      long k = (long)r * n + j;
      double x = src[k];
      double lap = src[k - n] + src[k + n] + src[k - 1] + src[k + 1] - 4 * x;
      dst[k] = x + c * lap + dt * (x - x * x * x);
    }
  }
}

double objective(const double *p, int rows, int n, int steps, const double *target) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int up = rank > 0 ? rank - 1 : MPI_PROC_NULL, down = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
  long m = (long)(rows + 2) * n;
  double *u = malloc(sizeof(double) * m), *v = malloc(sizeof(double) * m);
  for (long k = 0; k < m; k++) u[k] = v[k] = 0;
  for (long k = 0; k < (long)rows * n; k++) u[n + k] = v[n + k] = p[k];
  const double dt = 0.1, c = 0.02;
  for (int s = 0; s < steps; s += 2) {
    exchange(u, rows, n, up, down);
    step(rows, n, rank * rows, c, dt, u, v);
    exchange(v, rows, n, up, down);
    step(rows, n, rank * rows, c, dt, v, u);
  }
  double loss = 0, total;
  for (long k = 0; k < (long)rows * n; k++) {
    double d = u[n + k] - target[k];
    loss += d * d;
  }
  MPI_Allreduce(&loss, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  free(u);
  free(v);
  return rank == 0 ? total : 0.0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* the slowest rank's median time of REPS calls of primal (0) or gradient (1) */
static double timed(int which, int reps, const double *p, double *g, int rows, int n, int steps, const double *t) {
  double *each = malloc(sizeof(double) * reps);
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (which == 0) {
      volatile double y = objective(p, rows, n, steps, t);
      (void)y;
    } else {
      memset(g, 0, sizeof(double) * rows * n);
      __enzyme_autodiff((void *)objective, enzyme_dup, p, g, enzyme_const, rows, enzyme_const, n, enzyme_const,
                        steps, enzyme_const, t);
    }
    double dt = MPI_Wtime() - t0, slowest;
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    each[r] = slowest;
  }
  qsort(each, reps, sizeof(double), cmp);
  double med = each[reps / 2];
  free(each);
  return med;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int n = argc > 1 ? atoi(argv[1]) : 256, steps = argc > 2 ? atoi(argv[2]) : 20, reps = argc > 3 ? atoi(argv[3]) : 5;
  int rows = n / size;
  long local = (long)rows * n;
  double *p = malloc(sizeof(double) * local), *t = malloc(sizeof(double) * local), *g = malloc(sizeof(double) * local);
  for (long k = 0; k < local; k++) {
    long gk = (long)rank * local + k;
    long i = gk / n, j = gk % n;
    p[k] = 0.5 * sin(0.05 * i) * cos(0.07 * j) + 0.1;
    t[k] = 0.3 * cos(0.03 * (i + j));
  }
  double primal_s = timed(0, reps, p, g, rows, n, steps, t);
  double grad_s = timed(1, reps, p, g, rows, n, steps, t);
  double sq = 0, norm;
  for (long k = 0; k < local; k++) sq += g[k] * g[k];
  MPI_Allreduce(&sq, &norm, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  /* central differences at a few interior coordinates, against the gradient held by their owner */
  long coords[3] = {(long)(n / 3) * n + n / 2, (long)(n / 2) * n + n / 3, (long)(2 * n / 3) * n + 2 * n / 3};
  double worst = 0;
  for (int c = 0; c < 3; c++) {
    int owner = (int)(coords[c] / local);
    long k = coords[c] - (long)owner * local;
    const double h = 1e-3;
    double keep = rank == owner ? p[k] : 0, ad = rank == owner ? g[k] : 0, adall;
    if (rank == owner) p[k] = keep + h;
    double up = objective(p, rows, n, steps, t);
    if (rank == owner) p[k] = keep - h;
    double down = objective(p, rows, n, steps, t);
    if (rank == owner) p[k] = keep;
    MPI_Allreduce(&ad, &adall, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double fd = (up - down) / (2 * h), err = fabs(fd - adall) / (fabs(fd) + 1e-12);
    if (rank == 0 && err > worst) worst = err;
  }
  if (rank == 0)
    printf("{\"ranks\": %d, \"n\": %d, \"steps\": %d, \"primal_s\": %.6g, \"grad_s\": %.6g, \"grad_norm\": %.17g, "
           "\"fd_err\": %.3g}\n", size, n, steps, primal_s, grad_s, sqrt(norm), worst);
  free(p); free(t); free(g);
  MPI_Finalize();
  return 0;
}
