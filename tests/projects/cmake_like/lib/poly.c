#include "stats.h"
double poly_eval(const double *c, int degree, double x) {
  double r = 0;
  for (int i = degree; i >= 0; i--) r = r * x + c[i];
  return r;
}
