/* FFT: an iterative radix-2 decimation-in-time complex FFT (bit-reversal permutation, then log2(n) passes of
 * in-place butterflies with a precomputed twiddle table) of a real signal x[n], and the loss
 *   sum_k w_k log(1 + |X_k|^2)          (a weighted log power spectrum)
 * differentiated with respect to x.
 */
#include "common.h"

static unsigned bit_reverse(unsigned i, int bits) {
  unsigned r = 0;
  for (int b = 0; b < bits; b++) {
    r = (r << 1) | (i & 1);
    i >>= 1;
  }
  return r;
}

/* in place: re/im hold the input in bit-reversed order; cos_t/sin_t[j] = cos/sin(2 pi j / n), j < n/2 */
static void fft_passes(int n, double *re, double *im, const double *cos_t, const double *sin_t) {
  for (int len = 2; len <= n; len <<= 1) {
    int half = len / 2, stride = n / len;
    for (int i = 0; i < n; i += len) {
      for (int j = 0; j < half; j++) {
        double wr = cos_t[j * stride], wi = -sin_t[j * stride];
        int a = i + j, b = a + half;
        double tr = wr * re[b] - wi * im[b], ti = wr * im[b] + wi * re[b];
        re[b] = re[a] - tr;
        im[b] = im[a] - ti;
        re[a] += tr;
        im[a] += ti;
      }
    }
  }
}

double fft_objective(const double *x, int log2n, const double *weights, const double *cos_t, const double *sin_t) {
  int n = 1 << log2n;
  double *re = malloc(sizeof(double) * n), *im = malloc(sizeof(double) * n);
  for (int i = 0; i < n; i++) {
    unsigned r = bit_reverse((unsigned)i, log2n);
    re[r] = x[i];
    im[r] = 0;
  }
  fft_passes(n, re, im, cos_t, sin_t);
  double loss = 0;
  for (int k = 0; k < n; k++) loss += weights[k] * log1p(re[k] * re[k] + im[k] * im[k]);
  free(re); free(im);
  return loss;
}

/* ---------------------------------------------------------------------------------------------- */

static int LOG2N;
static long P;
static double *WEIGHTS, *COS_T, *SIN_T;

static double primal(const double *p) { return fft_objective(p, LOG2N, WEIGHTS, COS_T, SIN_T); }

static void gradient(const double *p, double *g) {
  memset(g, 0, sizeof(double) * P);
  __enzyme_autodiff((void *)fft_objective, enzyme_dup, p, g, enzyme_const, LOG2N, enzyme_const, WEIGHTS,
                    enzyme_const, COS_T, enzyme_const, SIN_T);
}

int main(int argc, char **argv) {
  bench_opts o = bench_args(argc, argv);
  bench_reader r = bench_open(o.data);
  LOG2N = bench_read_int(&r);
  P = 1L << LOG2N;
  double *x = bench_read_doubles(&r, P);
  WEIGHTS = bench_read_doubles(&r, P);
  bench_close(&r);
  COS_T = malloc(sizeof(double) * (P / 2 + 1));
  SIN_T = malloc(sizeof(double) * (P / 2 + 1));
  for (long j = 0; j <= P / 2; j++) {
    COS_T[j] = cos(2 * M_PI * (double)j / (double)P);
    SIN_T[j] = sin(2 * M_PI * (double)j / (double)P);
  }
  bench_block blocks[] = {{"x", 0, P}};
  return bench_run("fft", &o, P, x, primal, gradient, blocks, 1);
}
