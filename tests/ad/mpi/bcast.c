/* MPI_Bcast of two parameters that rank 0 holds (the first two elements of the global vector), a local sum on
   every rank, then MPI_Reduce of the sums to rank 0, once with a separate receive buffer and once in place. */
#include "harness.h"

double f(double *x, int m) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  double p[2] = {0, 0};
  if (rank == 0) { p[0] = x[0]; p[1] = x[1]; }
  MPI_Bcast(p, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  double s = 0, t = 0;
  for (int i = 0; i < m; i++) {
    s += p[0] * x[i] + p[1] * x[i] * x[i] * cos(rank * m + i);
    t += exp(0.3 * x[i]) * p[1];
  }
  double total = 0;
  MPI_Reduce(&s, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    MPI_Reduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  else
    MPI_Reduce(&t, NULL, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  return rank == 0 ? total * total + sin(t) : 0.0;
}
