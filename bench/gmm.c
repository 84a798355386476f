/* GMM: the log-likelihood objective of a Gaussian mixture model (the ADBench problem).
 *
 * Parameters (one array p): alphas[K] (mixture weights, through a logsumexp), means[K][d], and per component
 * icf[K][d + d(d-1)/2]: the first d entries are the logs of the diagonal of the Cholesky-like factor Q of the
 * precision matrix, the rest its strictly lower triangle, column by column. The objective is
 *
 *   sum_i logsumexp_k( alpha_k + sum(log diag Q_k) - 1/2 |Q_k (x_i - mu_k)|^2 )
 *     - n logsumexp(alpha) - n d/2 log(2 pi) + log Wishart prior(Q_1..Q_K; gamma, m)
 *
 * with the Wishart prior sum_k [ gamma^2/2 |Q_k|_F^2 - m sum(log diag Q_k) ] - K C(gamma, m, d).
 * The constant C involves lgamma of constants only; it is computed in main and passed in.
 */
#include "common.h"

static double logsumexp(const double *v, int n) {
  double mx = v[0];
  for (int i = 1; i < n; i++)
    if (v[i] > mx) mx = v[i];
  double s = 0;
  for (int i = 0; i < n; i++) s += exp(v[i] - mx);
  return log(s) + mx;
}

/* out = Q x, Q lower triangular with diagonal qdiag and strictly lower part ltri (column by column) */
static void q_times_x(int d, const double *qdiag, const double *ltri, const double *x, double *out) {
  for (int i = 0; i < d; i++) out[i] = qdiag[i] * x[i];
  int k = 0;
  for (int j = 0; j < d; j++)
    for (int i = j + 1; i < d; i++) out[i] += ltri[k++] * x[j];
}

static double sqnorm(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i] * v[i];
  return s;
}

double gmm_objective(const double *p, int d, int K, int n, const double *x, double gamma, int m,
                     double prior_const) {
  int icf_sz = d * (d + 1) / 2;
  const double *alphas = p, *means = p + K, *icf = p + K + K * d;
  double *qdiags = malloc(sizeof(double) * K * d), *sum_qs = malloc(sizeof(double) * K);
  double *main_term = malloc(sizeof(double) * K), *xc = malloc(sizeof(double) * d);
  double *qxc = malloc(sizeof(double) * d);

  for (int k = 0; k < K; k++) {
    sum_qs[k] = 0;
    for (int i = 0; i < d; i++) {
      sum_qs[k] += icf[k * icf_sz + i];
      qdiags[k * d + i] = exp(icf[k * icf_sz + i]);
    }
  }

  double slse = 0;
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < K; k++) {
      for (int j = 0; j < d; j++) xc[j] = x[i * d + j] - means[k * d + j];
      q_times_x(d, qdiags + k * d, icf + k * icf_sz + d, xc, qxc);
      main_term[k] = alphas[k] + sum_qs[k] - 0.5 * sqnorm(qxc, d);
    }
    slse += logsumexp(main_term, K);
  }
  double lse_alphas = logsumexp(alphas, K);

  double prior = 0;
  for (int k = 0; k < K; k++) {
    double frob = sqnorm(qdiags + k * d, d) + sqnorm(icf + k * icf_sz + d, icf_sz - d);
    prior += 0.5 * gamma * gamma * frob - m * sum_qs[k];
  }
  double constant = -n * d * 0.5 * log(2 * M_PI);

  free(qdiags); free(sum_qs); free(main_term); free(xc); free(qxc);
  return constant + slse - n * lse_alphas + prior - prior_const;
}

/* ---------------------------------------------------------------------------------------------- */

static int D, K, N, M;
static long P;
static double GAMMA, PRIOR_CONST, *X;

static double primal(const double *p) { return gmm_objective(p, D, K, N, X, GAMMA, M, PRIOR_CONST); }

static void gradient(const double *p, double *g) {
  memset(g, 0, sizeof(double) * P);
  __enzyme_autodiff((void *)gmm_objective, enzyme_dup, p, g, enzyme_const, D, enzyme_const, K, enzyme_const, N,
                    enzyme_const, X, enzyme_const, GAMMA, enzyme_const, M, enzyme_const, PRIOR_CONST);
}

/* log of the multivariate gamma function Gamma_p(a) */
static double log_mvgamma(double a, int p) {
  double r = 0.25 * p * (p - 1) * log(M_PI);
  for (int j = 1; j <= p; j++) r += lgamma(a + 0.5 * (1 - j));
  return r;
}

int main(int argc, char **argv) {
  bench_opts o = bench_args(argc, argv);
  bench_reader r = bench_open(o.data);
  D = bench_read_int(&r); K = bench_read_int(&r); N = bench_read_int(&r);
  GAMMA = bench_read_double(&r); M = bench_read_int(&r);
  int icf_sz = D * (D + 1) / 2;
  P = (long)K + (long)K * D + (long)K * icf_sz;
  double *p = bench_read_doubles(&r, P);
  X = bench_read_doubles(&r, (long)N * D);
  bench_close(&r);

  int nw = D + M + 1;
  double c = nw * D * (log(GAMMA) - 0.5 * log(2.0)) - log_mvgamma(0.5 * nw, D);
  PRIOR_CONST = K * c;

  bench_block blocks[] = {{"alphas", 0, K}, {"means", K, (long)K * D}, {"icf", K + (long)K * D, (long)K * icf_sz}};
  return bench_run("gmm", &o, P, p, primal, gradient, blocks, 3);
}
