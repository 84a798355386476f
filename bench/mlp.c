/* MLP: one training-loss evaluation of a two-layer perceptron on a batch,
 *   loss = 1/B sum_b |tanh(x_b W1 + b1) W2 + b2 - y_b|^2
 * differentiated with respect to the weights and biases (one array p = [W1 (D x H), b1 (H), W2 (H x O), b2 (O)]),
 * the inputs x (B x D) and targets y (B x O) being data. Built twice from this one source: the matrix products
 * as loops (mlp) and as cblas_dgemm calls (mlp_blas, -DUSE_BLAS -lopenblas), whose derivatives enzcc makes
 * with BLAS calls too.
 */
#include "common.h"
#ifdef USE_BLAS
#include <cblas.h>
#endif

/* out (rows x cols) = a (rows x inner) b (inner x cols), row-major */
static void matmul(int rows, int inner, int cols, const double *a, const double *b, double *out) {
#ifdef USE_BLAS
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, inner, 1.0, a, inner, b, cols, 0.0, out, cols);
#else
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) {
      double s = 0;
      for (int k = 0; k < inner; k++) s += a[i * inner + k] * b[k * cols + j];
      out[i * cols + j] = s;
    }
#endif
}

double mlp_loss(const double *p, int B, int D, int H, int O, const double *x, const double *y) {
  const double *W1 = p, *b1 = W1 + D * H, *W2 = b1 + H, *b2 = W2 + H * O;
  double *h = malloc(sizeof(double) * B * H), *out = malloc(sizeof(double) * B * O);
  matmul(B, D, H, x, W1, h);
  for (int i = 0; i < B; i++)
    for (int j = 0; j < H; j++) h[i * H + j] = tanh(h[i * H + j] + b1[j]);
  matmul(B, H, O, h, W2, out);
  double loss = 0;
  for (int i = 0; i < B; i++)
    for (int j = 0; j < O; j++) {
      double d = out[i * O + j] + b2[j] - y[i * O + j];
      loss += d * d;
    }
  free(h);
  free(out);
  return loss / B;
}

/* ---------------------------------------------------------------------------------------------- */

static int B, D, H, O;
static long P;
static double *X, *Y;

static double primal(const double *p) { return mlp_loss(p, B, D, H, O, X, Y); }

static void gradient(const double *p, double *g) {
  memset(g, 0, sizeof(double) * P);
  __enzyme_autodiff((void *)mlp_loss, enzyme_dup, p, g, enzyme_const, B, enzyme_const, D, enzyme_const, H,
                    enzyme_const, O, enzyme_const, X, enzyme_const, Y);
}

int main(int argc, char **argv) {
  bench_opts o = bench_args(argc, argv);
  bench_reader r = bench_open(o.data);
  B = bench_read_int(&r); D = bench_read_int(&r); H = bench_read_int(&r); O = bench_read_int(&r);
  P = (long)D * H + H + (long)H * O + O;
  double *p = bench_read_doubles(&r, P);
  X = bench_read_doubles(&r, (long)B * D);
  Y = bench_read_doubles(&r, (long)B * O);
  bench_close(&r);
  bench_block blocks[] = {{"W1", 0, (long)D * H}, {"b1", (long)D * H, H}, {"W2", (long)D * H + H, (long)H * O},
                          {"b2", (long)D * H + H + (long)H * O, O}};
#ifdef USE_BLAS
  return bench_run("mlp_blas", &o, P, p, primal, gradient, blocks, 4);
#else
  return bench_run("mlp", &o, P, p, primal, gradient, blocks, 4);
#endif
}
