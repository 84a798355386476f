/* MPI_Gather of the chunks to rank 0, which couples neighbours; MPI_Scatter of the result back; MPI_Allgather
   of it on every rank; a local sum; MPI_Allreduce of the sums. */
#include "harness.h"

double f(double *x, int m) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int n = m * size;
  double *all = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double)), *mine = malloc(m * sizeof(double));
  double *every = malloc(n * sizeof(double));
  MPI_Gather(x, m, MPI_DOUBLE, all, m, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0)
    for (int j = 0; j < n; j++) y[j] = all[j] * all[(j + 1) % n] + 0.1 * j;
  MPI_Scatter(y, m, MPI_DOUBLE, mine, m, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  for (int i = 0; i < m; i++) mine[i] = sin(mine[i]) + mine[i] * x[i];
  MPI_Allgather(mine, m, MPI_DOUBLE, every, m, MPI_DOUBLE, MPI_COMM_WORLD);
  double s = 0, total;
  for (int i = 0; i < m; i++) s += every[(rank * m + i + 3) % n] * mine[i];
  MPI_Allreduce(&s, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  free(all); free(y); free(mine); free(every);
  return rank == 0 ? total : 0.0;
}
