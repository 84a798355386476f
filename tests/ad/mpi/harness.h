/* Checks one differentiated MPI function, double f(double *x, int m): x is this rank's chunk of a global vector
   of N doubles (N / size each), and f returns the loss on rank 0 (0 elsewhere), so that reverse mode's seed,
   1 on every rank, differentiates the loss once. Rank 0 prints the gradient (gathered), its largest
   difference from central differences, and forward mode's tangent against the gradient's dot product. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif
extern int enzyme_dup, enzyme_const;
void __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
typedef struct { void *tape; double y; } aug_t;
aug_t __enzyme_augmentfwd(void *, ...);
void __enzyme_reverse(void *, ...);
#ifdef __cplusplus
}
#endif

#ifndef N
#define N 8
#endif
#ifndef H
#define H 1e-6 /* the step of the central differences */
#endif

double f(double *x, int m);

static double x0(int j) { return 0.5 + 0.3 * sin(1.7 * j + 0.3); }
static double dir(int j) { return cos(0.9 * j); }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int m = N / size, lo = rank * m;
  double *x = (double *)calloc(m, sizeof(double)), *dx = (double *)calloc(m, sizeof(double));
  double *v = (double *)calloc(m, sizeof(double));
  for (int i = 0; i < m; i++) { x[i] = x0(lo + i); v[i] = dir(lo + i); }
  double loss = f(x, m);
#ifdef SPLIT /* split mode: the forward sweep, then the reverse with its tape */
  aug_t aug = __enzyme_augmentfwd((void *)f, enzyme_dup, x, dx, enzyme_const, m);
  __enzyme_reverse((void *)f, enzyme_dup, x, dx, enzyme_const, m, 1.0, aug.tape);
#else
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, m);
#endif
  double g[N];
  MPI_Gather(dx, m, MPI_DOUBLE, g, m, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  double fd_err = 0, scale = 1e-300;
  for (int j = 0; j < N; j++) {
    const double h = H;
    int owner = j / m, i = j - owner * m;
    double keep = rank == owner ? x[i] : 0;
    if (rank == owner) x[i] = keep + h;
    double up = f(x, m);
    if (rank == owner) x[i] = keep - h;
    double down = f(x, m);
    if (rank == owner) x[i] = keep;
    if (rank == 0) {
      double fd = (up - down) / (2 * h);
      if (fabs(fd - g[j]) > fd_err) fd_err = fabs(fd - g[j]);
      if (fabs(g[j]) > scale) scale = fabs(g[j]);
    }
  }
  double t = __enzyme_fwddiff((void *)f, enzyme_dup, x, v, enzyme_const, m);
  double again = f(x, m);
  if (rank == 0) {
    double gv = 0;
    for (int j = 0; j < N; j++) gv += g[j] * dir(j);
    printf("loss %.17g\n", loss);
    for (int j = 0; j < N; j++) printf("grad %d %.17g\n", j, g[j]);
    printf("fd_err %.3g\n", fd_err / scale);
    printf("fwd_err %.3g\n", fabs(t - gv) / (fabs(gv) + 1e-300));
    printf("same_loss %d\n", again == loss);
  }
  free(x); free(dx); free(v);
  MPI_Finalize();
  return 0;
}
