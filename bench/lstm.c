/* LSTM: the ADBench LSTM objective — a stack of `l` LSTM layers with diagonal (elementwise) weights run over a
 * character sequence; the loss is the negative mean log-softmax probability of each next character.
 *
 * Parameters (one array p): main[l][2][4b] (per layer: the weights then the biases of the forget, input,
 * output gates and the cell candidate) and extra[3][b] (input weight, output weight, output bias).
 * For t = 0..c-2, with input x = seq[t] * in_weight:
 *   per layer:  f = sig(x w_f + b_f), i = sig(h w_i + b_i), o = sig(x w_o + b_o), g = tanh(h w_g + b_g)
 *               cell = cell f + i g;  h = o tanh(cell);  x = h
 *   ypred = x out_weight + out_bias;  ynorm = ypred - log(sum exp(ypred) + 2)
 *   total += sum(seq[t+1] * ynorm)
 * loss = -total / ((c-1) b). The sequence is one-hot rows (c x b); the initial state is data.
 */
#include "common.h"

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static void lstm_cell(int b, const double *weight, const double *bias, double *hidden, double *cell,
                      const double *input) {
  for (int i = 0; i < b; i++) {
    double forget = sigmoid(input[i] * weight[i] + bias[i]);
    double ingate = sigmoid(hidden[i] * weight[b + i] + bias[b + i]);
    double outgate = sigmoid(input[i] * weight[2 * b + i] + bias[2 * b + i]);
    double change = tanh(hidden[i] * weight[3 * b + i] + bias[3 * b + i]);
    cell[i] = cell[i] * forget + ingate * change;
    hidden[i] = outgate * tanh(cell[i]);
  }
}

/* one step: state (l x [hidden, cell]) is updated; ypred gets the output scores */
static void lstm_predict(int l, int b, const double *main_params, const double *extra, double *state,
                         const double *input, double *x, double *ypred) {
  for (int i = 0; i < b; i++) x[i] = input[i] * extra[i];
  for (int layer = 0; layer < l; layer++) {
    double *hidden = state + 2 * layer * b, *cell = hidden + b;
    const double *w = main_params + 2 * layer * 4 * b;
    lstm_cell(b, w, w + 4 * b, hidden, cell, x);
    for (int i = 0; i < b; i++) x[i] = hidden[i];
  }
  for (int i = 0; i < b; i++) ypred[i] = x[i] * extra[b + i] + extra[2 * b + i];
}

double lstm_objective(const double *p, int l, int c, int b, const double *state0, const double *seq) {
  const double *main_params = p, *extra = p + 2 * l * 4 * b;
  double *state = malloc(sizeof(double) * 2 * l * b), *x = malloc(sizeof(double) * b);
  double *ypred = malloc(sizeof(double) * b);
  for (int i = 0; i < 2 * l * b; i++) state[i] = state0[i];
  double total = 0;
  for (int t = 0; t < c - 1; t++) {
    lstm_predict(l, b, main_params, extra, state, seq + t * b, x, ypred);
    double s = 0;
    for (int i = 0; i < b; i++) s += exp(ypred[i]);
    double lse = log(s + 2);
    const double *gold = seq + (t + 1) * b;
    for (int i = 0; i < b; i++) total += gold[i] * (ypred[i] - lse);
  }
  free(state); free(x); free(ypred);
  return -total / ((double)(c - 1) * b);
}

/* ---------------------------------------------------------------------------------------------- */

static int L, C, B;
static long P;
static double *STATE, *SEQ;

static double primal(const double *p) { return lstm_objective(p, L, C, B, STATE, SEQ); }

static void gradient(const double *p, double *g) {
  memset(g, 0, sizeof(double) * P);
  __enzyme_autodiff((void *)lstm_objective, enzyme_dup, p, g, enzyme_const, L, enzyme_const, C, enzyme_const, B,
                    enzyme_const, STATE, enzyme_const, SEQ);
}

int main(int argc, char **argv) {
  bench_opts o = bench_args(argc, argv);
  bench_reader r = bench_open(o.data);
  L = bench_read_int(&r); C = bench_read_int(&r); B = bench_read_int(&r);
  long nmain = 2L * L * 4 * B;
  P = nmain + 3L * B;
  double *p = bench_read_doubles(&r, P);
  STATE = bench_read_doubles(&r, 2L * L * B);
  SEQ = calloc((size_t)C * B, sizeof(double));
  for (int t = 0; t < C; t++) SEQ[(long)t * B + bench_read_int(&r)] = 1.0;
  bench_close(&r);
  bench_block blocks[] = {{"main_params", 0, nmain}, {"extra_params", nmain, 3L * B}};
  return bench_run("lstm", &o, P, p, primal, gradient, blocks, 2);
}
