#include <stdlib.h>
#include "vec.h"
vec vec_new(size_t n) { vec v = { calloc(n, sizeof(double)), n }; return v; }
void vec_free(vec v) { free(v.data); }
double vec_dot(vec a, vec b) {
  double s = 0;
  for (size_t i = 0; i < a.n; i++) s += a.data[i] * b.data[i];
  return s;
}
void vec_axpy(double a, vec x, vec y) {
  for (size_t i = 0; i < x.n; i++) y.data[i] += a * x.data[i];
}
