#include <math.h>
#include "stats.h"
double stats_mean(vec v) {
  double s = 0;
  for (size_t i = 0; i < v.n; i++) s += v.data[i];
  return s / (double)v.n;
}
double stats_var(vec v) {
  double m = stats_mean(v), s = 0;
  for (size_t i = 0; i < v.n; i++) s += pow(v.data[i] - m, 2);
  return s / (double)v.n;
}
