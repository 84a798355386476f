#ifndef STATS_H
#define STATS_H
#include "vec.h"
double stats_mean(vec v);
double stats_var(vec v);
double poly_eval(const double *c, int degree, double x);
#endif
