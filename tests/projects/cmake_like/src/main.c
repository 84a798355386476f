#include <math.h>
#include <stdio.h>
#include "stats.h"
int main(int argc, char **argv) {
  size_t n = 16 + (size_t)argc;
  vec a = vec_new(n), b = vec_new(n);
  for (size_t i = 0; i < n; i++) { a.data[i] = sin((double)i) * SCALE; b.data[i] = cos((double)i); }
  vec_axpy(0.5, a, b);
  const double c[4] = {1.0, -2.0, 0.5, 0.25};
  printf("dot=%.12f\n", vec_dot(a, b));
  printf("mean=%.12f var=%.12f\n", stats_mean(a), stats_var(b));
  printf("poly=%.12f\n", poly_eval(c, 3, 1.5));
  vec_free(a); vec_free(b);
  return 0;
}
