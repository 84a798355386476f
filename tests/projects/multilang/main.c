#include <stdio.h>
double fsum_squares(const double *x, int n);   /* Fortran, bind(c) */
double rust_norm(const double *x, long n);       /* Rust, extern "C" */
void fortran_greet(void);                         /* Fortran with I/O: needs flang's runtime */
int main(void) {
  double x[N];
  for (int i = 0; i < N; i++) x[i] = 0.5 * (i + 1);
  fortran_greet();
  printf("fortran sum of squares = %.6f\n", fsum_squares(x, N));
  printf("rust norm = %.6f\n", rust_norm(x, N));
  return 0;
}
