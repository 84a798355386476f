double fsum_squares(const double *x, int n);
double rust_norm(const double *x, long n);
/* sum of squares minus the square of the norm: zero up to rounding */
double mixed_check(const double *x, int n) {
  double r = rust_norm(x, n);
  return fsum_squares(x, n) - r * r;
}
double mixed_sumsq(const double *x, int n) { return fsum_squares(x, n); }
