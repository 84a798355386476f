/* Messages of derived datatypes: a contiguous type of two MPI_DOUBLE (the element size found when the program
   runs) in MPI_Sendrecv and MPI_Bcast, and MPI_FLOAT data through MPI_Bcast and MPI_Allreduce. */
#include "harness.h"

#ifndef FW
#define FW 1e-3 /* the weight of the single-precision part (its central differences are noisier) */
#endif

double f(double *x, int m) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Datatype pair;  /* (freed below: in reverse mode, at the reverse of its commit) */
  MPI_Type_contiguous(2, MPI_DOUBLE, &pair);
  MPI_Type_commit(&pair);
  double out[2] = {x[0] * x[0], x[m - 1] * x[0]}, in[2] = {0, 0};
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  MPI_Sendrecv(out, 1, pair, next, 7, in, 1, pair, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  double s[2] = {0, 0}, t[2];
  for (int i = 0; i < m; i++) {
    s[0] += in[0] * x[i];
    s[1] += in[1] * x[i] * x[i];
  }
  MPI_Bcast(s, 1, pair, size - 1, MPI_COMM_WORLD);
  MPI_Allreduce(s, t, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Type_free(&pair);
  float p = rank == 0 ? (float)x[0] : 0.0f;
  MPI_Bcast(&p, 1, MPI_FLOAT, 0, MPI_COMM_WORLD);
  float q = p * (float)x[m - 1], r;
  MPI_Allreduce(&q, &r, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return rank == 0 ? t[0] + sin(t[1]) + FW * r : 0.0;
}
