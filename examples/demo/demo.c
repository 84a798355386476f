/* The bundled demo: enzcc synthesizes the gradient of a plain C function. */
#include <math.h>
#include <stdio.h>

extern int enzyme_dup, enzyme_const, enzyme_out;
double __enzyme_autodiff(void *, ...);

/* a small "loss": sum_i sin(x_i) * x_i^2 + exp(-x_i) */
double loss(const double *x, int n) {
  double s = 0.0;
  for (int i = 0; i < n; i++) s += sin(x[i]) * x[i] * x[i] + exp(-x[i]);
  return s;
}

int main(void) {
  double x[4] = {0.5, 1.0, -1.5, 2.0}, dx[4] = {0};
  __enzyme_autodiff((void *)loss, enzyme_dup, x, dx, enzyme_const, 4);
  printf("loss(x) = %.6f\n", loss(x, 4));
  for (int i = 0; i < 4; i++) {
    double exact = cos(x[i]) * x[i] * x[i] + 2 * x[i] * sin(x[i]) - exp(-x[i]);
    printf("d loss / d x[%d] = %+.6f   (analytic %+.6f)\n", i, dx[i], exact);
  }
  return 0;
}
