/* The derivative of model.c's energy, made at the link (model.c is in a library that names no Enzyme),
   checked against the analytic derivative and a central difference: meson test fails when it is wrong. */
#include <math.h>
#include <stdio.h>
#include "model.h"

double __enzyme_autodiff(void *, ...);

int main(void) {
  double x = 0.7, h = 1e-5;
  double ad = __enzyme_autodiff((void *)energy, x);
  double exact = 3 * x * x * sin(x) + x * x * x * cos(x) + 0.5 * exp(0.5 * x);
  double fd = (energy(x + h) - energy(x - h)) / (2 * h);
  printf("d energy/dx at %g: enzcc %.17g, analytic %.17g, central difference %.17g\n", x, ad, exact, fd);
  return fabs(ad - exact) <= 1e-12 * fabs(exact) && fabs(ad - fd) <= 1e-7 * fabs(exact) ? 0 : 1;
}
