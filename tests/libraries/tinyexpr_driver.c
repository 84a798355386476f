/* tinyexpr driver: an expression compiled once by te_compile with bound variables, evaluated by te_eval
 * inside the differentiated function, built with tinyexpr's own unmodified tinyexpr.c (from the tinex sdist;
 * tests/libraries/test_tinyexpr.py). te_eval calls the expression's functions through function pointers (a
 * dozen of one type, most from libm).
 *
 * The compiled tree holds pointers to the variables, which carry derivatives, so it is passed enzyme_dup with a
 * shadow tree: the same expression compiled with its variables bound to the variables' shadows, its constants
 * zeroed (their tangents are zero; the reverse sweep adds adjoints there, so they are zeroed before each call).
 *
 *   ./prog        "name value" lines: reverse and forward gradients against the analytic ones and central
 *                 differences of te_eval
 *   ./prog bench  timing: te_eval and its reverse-mode gradient
 *
 * Built with -DCONST_TREE it passes the tree enzyme_const instead (no shadow tree): the loads of the variables
 * through the tree's pointers then carry derivatives that a constant tree cannot give them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tinyexpr.h"
#include "bench_timer.h"

extern int enzyme_dup, enzyme_const;
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

/* twelve functions, all through te_eval's function pointers: sin cos exp ln sqrt atan tanh pow(^) atan2
 * fabs cosh log10 */
#define EXPR "sin(x)*exp(y) + cos(x*y) + x^2/y - atan2(x,y) + sqrt(x*x+y*y) + ln(1+x^2) + atan(y) + tanh(x-y)" \
             " + abs(x-2*y) + cosh(0.5*x) + log10(3+y) + 0.25*z^3"

static double analytic_value(double x, double y, double z) {
  return sin(x) * exp(y) + cos(x * y) + x * x / y - atan2(x, y) + sqrt(x * x + y * y) + log(1 + x * x) + atan(y) +
         tanh(x - y) + fabs(x - 2 * y) + cosh(0.5 * x) + log10(3 + y) + 0.25 * z * z * z;
}

static void analytic_gradient(double x, double y, double z, double *g) {
  double r2 = x * x + y * y, r = sqrt(r2), s = 1 - tanh(x - y) * tanh(x - y), sg = x - 2 * y > 0 ? 1 : -1;
  g[0] = cos(x) * exp(y) - y * sin(x * y) + 2 * x / y - y / r2 + x / r + 2 * x / (1 + x * x) + s + sg +
         0.5 * sinh(0.5 * x);
  g[1] = sin(x) * exp(y) - x * sin(x * y) - x * x / (y * y) + x / r2 + y / r + 1 / (1 + y * y) - s - 2 * sg +
         1 / ((3 + y) * log(10));
  g[2] = 0.75 * z * z;
}

enum { CONSTANT_NODE = 1 };                                           /* tinyexpr.c's TE_CONSTANT */
#define ARITY(t) (((t) & (TE_FUNCTION0 | TE_CLOSURE0)) ? ((t) & 7) : 0) /* as tinyexpr.c computes it */

/* a shadow tree's constants are zero: a constant has no tangent, and the reverse sweep adds adjoints there */
static void zero_constants(te_expr *n) {
  if ((n->type & 0x1f) == CONSTANT_NODE) {
    n->value = 0;
    return;
  }
  for (int i = 0; i < ARITY(n->type); i++) zero_constants(n->parameters[i]);
}

/* the differentiated function: the inputs into the bound variables, then the compiled expression */
__attribute__((noinline)) static double eval(const double *in, double *vars, const te_expr *e) {
  memcpy(vars, in, 3 * sizeof(double));
  return te_eval(e);
}

static double vars[3], dvars[3];
static te_expr *tree, *shadow;

static void compile(void) {
  te_variable tv[] = {{"x", &vars[0]}, {"y", &vars[1]}, {"z", &vars[2]}};
  te_variable dtv[] = {{"x", &dvars[0]}, {"y", &dvars[1]}, {"z", &dvars[2]}};
  int err = 0, derr = 0;
  tree = te_compile(EXPR, tv, 3, &err);
  shadow = te_compile(EXPR, dtv, 3, &derr);
  if (!tree || !shadow) {
    fprintf(stderr, "te_compile failed at %d\n", err ? err : derr);
    exit(1);
  }
}

#ifdef CONST_TREE
static void reverse(const double *in, double *g) {
  memset(g, 0, 3 * sizeof(double));
  memset(dvars, 0, sizeof dvars);
  __enzyme_autodiff((void *)eval, enzyme_dup, in, g, enzyme_dup, vars, dvars, enzyme_const, tree);
}
#else
static void reverse(const double *in, double *g) {
  memset(g, 0, 3 * sizeof(double));
  memset(dvars, 0, sizeof dvars);
  zero_constants(shadow);
  __enzyme_autodiff((void *)eval, enzyme_dup, in, g, enzyme_dup, vars, dvars, enzyme_dup, tree, shadow);
}

static void forward(const double *in, double *g) {
  for (int j = 0; j < 3; j++) {
    double din[3] = {0, 0, 0};
    din[j] = 1;
    memset(dvars, 0, sizeof dvars);
    zero_constants(shadow);
    g[j] = __enzyme_fwddiff((void *)eval, enzyme_dup, in, din, enzyme_dup, vars, dvars, enzyme_dup, tree, shadow);
  }
}
#endif

/* largest error against the analytic gradient and central differences of te_eval, relative to max(1, |g|) */
static void judge(const char *name, double *in, const double *g) {
  double a[3], worst_a = 0, worst_fd = 0;
  analytic_gradient(in[0], in[1], in[2], a);
  for (int j = 0; j < 3; j++) {
    double xj = in[j], h = 1e-6 * fmax(1, fabs(xj));
    in[j] = xj + h;
    double up = eval(in, vars, tree);
    in[j] = xj - h;
    double down = eval(in, vars, tree);
    in[j] = xj;
    double fd = (up - down) / (2 * h);
    double ea = fabs(g[j] - a[j]) / fmax(1, fabs(a[j])), efd = fabs(g[j] - fd) / fmax(1, fabs(fd));
    worst_a = isnan(ea) || ea > worst_a ? ea : worst_a; /* a NaN stays (fmax would drop it) */
    worst_fd = isnan(efd) || efd > worst_fd ? efd : worst_fd;
  }
  printf("%s.err_analytic %.17g\n%s.err_fd %.17g\n", name, worst_a, name, worst_fd);
}

static void bench(void) {
  static double in[3] = {0.7, 1.3, 0.4}, g[3];
  BENCH_INTERLEAVED(bench_sink += eval(in, vars, tree), reverse(in, g));
}

int main(int argc, char **argv) {
  compile();
  if (argc > 1 && !strcmp(argv[1], "bench")) {
    bench();
    return 0;
  }
  /* bases of ^ positive at p0 and p1; at p2 negative: forward mode is judged only at p0 and p1, since the
   * exponent of pow is loaded from the tree (it has a zero tangent there) and its partial log(x) is NaN for a
   * negative base, and NaN * 0 is NaN (as in Enzyme without its strong-zero option) */
  double points[3][3] = {{0.7, 1.3, 0.4}, {1.1, 0.6, 2.0}, {-1.1, 0.6, -0.5}}, g[3];
  for (int p = 0; p < 3; p++) {
    char name[32];
    double *in = points[p];
    printf("p%d.value_err %.17g\n", p, fabs(eval(in, vars, tree) - analytic_value(in[0], in[1], in[2])));
    reverse(in, g);
    snprintf(name, sizeof name, "p%d.reverse", p);
    judge(name, in, g);
    printf("p%d.reverse.gx %.17g\n", p, g[0]);
#ifndef CONST_TREE
    if (p == 2) continue;
    forward(in, g);
    snprintf(name, sizeof name, "p%d.forward", p);
    judge(name, in, g);
#endif
  }
  te_free(tree);
  te_free(shadow);
  return 0;
}
