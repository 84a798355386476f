#ifndef VEC_H
#define VEC_H
#include <stddef.h>
typedef struct { double *data; size_t n; } vec;
vec vec_new(size_t n);
void vec_free(vec v);
double vec_dot(vec a, vec b);
void vec_axpy(double a, vec x, vec y);
#endif
