/* A distributed dot product and norm (MPI_Allreduce with MPI_SUM, one of them in place), and the largest and
   smallest element (MPI_MAX, MPI_MIN: the derivative reaches the rank that holds it). */
#include "harness.h"

double f(double *x, int m) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  double local[2] = {0, 0}, global[2];
  for (int i = 0; i < m; i++) {
    local[0] += x[i] * sin(x[i] + rank * m + i);
    local[1] += x[i] * x[i];
  }
  MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double nrm = sqrt(global[1]);
  MPI_Allreduce(MPI_IN_PLACE, local, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double hi = x[0], lo = x[0];
  for (int i = 1; i < m; i++) {
    hi = x[i] > hi ? x[i] : hi;
    lo = x[i] < lo ? x[i] : lo;
  }
  double ext[2];
  MPI_Allreduce(&hi, &ext[0], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&lo, &ext[1], 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  int count = m, total;  /* (integers carry nothing) */
  MPI_Allreduce(&count, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  double r = (total / N) * global[0] / nrm + 0.5 * local[0] * local[0] + ext[0] * ext[0] - 2 * ext[1];
  return rank == 0 ? r : 0.0;
}
