/* A 1-D heat equation with a halo exchange in three forms (FORM 1: MPI_Send/MPI_Recv, 2: MPI_Isend/MPI_Irecv/
   MPI_Waitall, 3: MPI_Sendrecv), the ends of the rod held at zero (MPI_PROC_NULL past them), and a loss
   summed with MPI_Allreduce. */
#include "harness.h"
#include <string.h>

#ifndef FORM
#define FORM 1
#endif
#define STEPS 5

static void exchange(double *u, int m, int left, int right) {
#if FORM == 1
  MPI_Send(&u[1], 1, MPI_DOUBLE, left, 0, MPI_COMM_WORLD);
  MPI_Recv(&u[m + 1], 1, MPI_DOUBLE, right, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Send(&u[m], 1, MPI_DOUBLE, right, 1, MPI_COMM_WORLD);
  MPI_Recv(&u[0], 1, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
#elif FORM == 2
  MPI_Request req[4];
  MPI_Irecv(&u[0], 1, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &req[0]);
  MPI_Irecv(&u[m + 1], 1, MPI_DOUBLE, right, 0, MPI_COMM_WORLD, &req[1]);
  MPI_Isend(&u[1], 1, MPI_DOUBLE, left, 0, MPI_COMM_WORLD, &req[2]);
  MPI_Isend(&u[m], 1, MPI_DOUBLE, right, 1, MPI_COMM_WORLD, &req[3]);
  MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
#else
  MPI_Sendrecv(&u[1], 1, MPI_DOUBLE, left, 0, &u[m + 1], 1, MPI_DOUBLE, right, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  MPI_Sendrecv(&u[m], 1, MPI_DOUBLE, right, 1, &u[0], 1, MPI_DOUBLE, left, 1, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
#endif
}

double f(double *x, int m) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int left = rank > 0 ? rank - 1 : MPI_PROC_NULL, right = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
  double *u = (double *)malloc((m + 2) * sizeof(double)), *w = (double *)malloc((m + 2) * sizeof(double));
  u[0] = u[m + 1] = 0;
  for (int i = 0; i < m; i++) u[i + 1] = x[i] * x[i];
  for (int t = 0; t < STEPS; t++) {
    exchange(u, m, left, right);
    for (int i = 1; i <= m; i++) w[i] = u[i] + 0.2 * (u[i - 1] - 2 * u[i] + u[i + 1]) + 0.01 * sin(u[i]);
    for (int i = 1; i <= m; i++) u[i] = w[i];
  }
  double s = 0, total;
  for (int i = 1; i <= m; i++) s += u[i] * u[i] * (1 + 0.1 * (rank * m + i));
  MPI_Allreduce(&s, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  free(u);
  free(w);
  return rank == 0 ? sqrt(total) : 0.0;
}
