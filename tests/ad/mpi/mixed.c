/* Messages whose buffer has no derivatives on one side: a constant table sent around a ring (MPI_Sendrecv, and
   MPI_Isend/MPI_Irecv), received into memory that is used with values that have some. The derivative
   messages are still sent (zeros), so no rank waits for one that never comes. */
#include "harness.h"

static const double table[2] = {1.5, -0.5};

double f(double *x, int m) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  double in[2], more[2];
  MPI_Sendrecv(table, 2, MPI_DOUBLE, next, 3, in, 2, MPI_DOUBLE, prev, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Request req[2];
  MPI_Irecv(more, 2, MPI_DOUBLE, next, 4, MPI_COMM_WORLD, &req[0]);
  MPI_Isend(table, 2, MPI_DOUBLE, prev, 4, MPI_COMM_WORLD, &req[1]);
  MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
  double s = 0, total;
  for (int i = 0; i < m; i++) s += in[0] * x[i] + in[1] * x[i] * x[i] + more[0] * sin(x[i]) * more[1];
  MPI_Allreduce(&s, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return rank == 0 ? total * total : 0.0;
}
