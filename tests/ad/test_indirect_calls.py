"""Calls through function pointers whose targets nothing in the differentiated code pins down, as an expression
evaluator makes them (tinyexpr's ``te_eval``): more candidates of the call's type than are inlined (the call
then calls the one the pointer holds through its derived functions), libm functions among them (their
derivative rules), and a pointer to a function enzcc never saw, which stops the program with a message.
Gradients against hand-written derivatives and finite differences, reverse and forward mode, -O0 and -O2."""

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22")

OPTS = ["-O0", "-O2"]

# twelve functions of one type, six of them libm's, evaluated in a loop; the table of derivatives is for the
# hand-written chain rule in main (not differentiated)
EVALUATOR = r"""
#include <dlfcn.h>
typedef double (*fun1)(double);
static double sq(double x) { return x * x; }
static double cube(double x) { return x * x * x; }
static double half(double x) { return 0.5 * x; }
static double shift(double x) { return x + 0.25; }
static double inv(double x) { return 1.0 / x; }
static double atan_(double x) { return atan(x); }
static const struct { const char *name; fun1 fn; } builtins[] = {
  {"sin", sin}, {"cos", cos}, {"exp", exp}, {"sqrt", sqrt}, {"log", log}, {"tanh", tanh},
  {"sq", sq}, {"cube", cube}, {"half", half}, {"shift", shift}, {"inv", inv}, {"atan", atan_},
};
static double dsq(double x) { return 2 * x; }
static double dcube(double x) { return 3 * x * x; }
static double dhalf(double x) { return 0.5; }
static double dshift(double x) { return 1.0; }
static double dinv(double x) { return -1.0 / (x * x); }
static double datan(double x) { return 1.0 / (1 + x * x); }
static double dsin(double x) { return cos(x); }
static double dcos(double x) { return -sin(x); }
static double dsqrt(double x) { return 0.5 / sqrt(x); }
static double dlog(double x) { return 1.0 / x; }
static double dtanh(double x) { double t = tanh(x); return 1 - t * t; }
static const fun1 derivs[] = {dsin, dcos, exp, dsqrt, dlog, dtanh, dsq, dcube, dhalf, dshift, dinv, datan};
static int lookup(const char *name) {
  for (unsigned i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
    if (!strcmp(builtins[i].name, name)) return (int)i;
  return -1;
}
struct node { fun1 fn; double scale; };
double eval(double x, const struct node *prog, int n) {
  double acc = x;
  for (int i = 0; i < n; i++) acc = prog[i].scale * prog[i].fn(acc) + 0.1 * x;
  return acc;
}
int main(int argc, char **argv) {
  const char *names[] = {"sq", "sin", "half", "cos", "exp", "sqrt", "log", "cube", "tanh", "shift", "inv",
                         "atan", "sin", "shift"};
  enum { N = sizeof names / sizeof names[0] };
  struct node prog[N];
  int which[N];
  for (int i = 0; i < N; i++) {
    which[i] = lookup(names[i]);
    prog[i].fn = builtins[which[i]].fn;
    prog[i].scale = 1.0 + 0.05 * i;
  }
  if (argc > 1) prog[3].fn = (fun1)dlsym(RTLD_DEFAULT, "cbrt");  /* a function enzcc never saw */
  double x = 0.7, acc = x, dacc = 1.0, h = 1e-6;
  for (int i = 0; i < N; i++) {      /* the chain rule, by hand */
    dacc = prog[i].scale * derivs[which[i]](acc) * dacc + 0.1;
    acc = prog[i].scale * builtins[which[i]].fn(acc) + 0.1 * x;
  }
  report("ad.r", __enzyme_autodiff((void *)eval, x, enzyme_const, prog, enzyme_const, (int)N));
  report("ad.f", __enzyme_fwddiff((void *)eval, x, 1.0, enzyme_const, prog, enzyme_const, (int)N));
  report("an.r", dacc);
  report("an.f", dacc);
  report("fd.r", (eval(x + h, prog, N) - eval(x - h, prog, N)) / (2 * h));
  report("fd.f", (eval(x + h, prog, N) - eval(x - h, prog, N)) / (2 * h));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_evaluator_with_many_functions_of_one_type(enzcc, opt):
    v = build_and_run(enzcc, EVALUATOR, opt, extra=("-ldl",))
    assert_close(v, "ad.", "an.", rel=1e-9)
    assert_close(v, "ad.", "fd.", rel=1e-5)


def test_function_unknown_at_compile_time_stops_the_program(enzcc):
    build_and_run(enzcc, EVALUATOR, "-O2", extra=("-ldl",))
    r = enzcc.run("./t", "unknown", check=False)
    assert r.returncode != 0
    assert "ad.r" not in r.stdout  # (no derivative printed)
    assert "enzcc: a call through a function pointer in 'eval' reached a function that is not known at " \
        "compile time" in r.stderr


# two-argument functions (libm's pow, atan2, hypot among them), both arguments with derivatives
BINARY = r"""
typedef double (*fun2)(double, double);
static double add(double a, double b) { return a + b; }
static double sub(double a, double b) { return a - b; }
static double mul(double a, double b) { return a * b; }
static double dvd(double a, double b) { return a / b; }
static double mix(double a, double b) { return 0.3 * a + 0.7 * b * b; }
static double sqa(double a, double b) { return a * a - b; }
static double lin(double a, double b) { return 2 * a + 3 * b; }
fun2 table[] = {add, sub, mul, dvd, mix, sqa, lin, pow, atan2, hypot};
double f(const double *xy, fun2 *ops, int n) {
  double a = xy[0], b = xy[1];
  for (int i = 0; i < n; i++) { double t = ops[i](a, b); b = a; a = t; }
  return a;
}
int main(void) {
  fun2 ops[] = {table[2], table[7], table[8], table[4], table[9], table[0], table[3], table[5], table[6], table[1]};
  int n = sizeof ops / sizeof ops[0];
  double xy[2] = {1.3, 0.8}, d[2] = {0, 0}, h = 1e-6;
  __enzyme_autodiff((void *)f, enzyme_dup, xy, d, enzyme_const, ops, enzyme_const, n);
  report("ad.x", d[0]);
  report("ad.y", d[1]);
  double e0[2] = {1, 0}, e1[2] = {0, 1};
  report("fw.x", __enzyme_fwddiff((void *)f, enzyme_dup, xy, e0, enzyme_const, ops, enzyme_const, n));
  report("fw.y", __enzyme_fwddiff((void *)f, enzyme_dup, xy, e1, enzyme_const, ops, enzyme_const, n));
  for (int k = 0; k < 2; k++) {
    double p[2] = {xy[0], xy[1]}, m[2] = {xy[0], xy[1]};
    p[k] += h; m[k] -= h;
    report(k ? "fd.y" : "fd.x", (f(p, ops, n) - f(m, ops, n)) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_two_argument_functions(enzcc, opt):
    v = build_and_run(enzcc, BINARY, opt)
    assert_close(v, "ad.", "fd.", rel=1e-5)
    assert_close(v, "fw.", "ad.", rel=1e-9)


# functions of one type updating a state through a pointer: the shadow of the state goes to their derived
# functions
STEPS = r"""
typedef void (*step)(double *s);
static void s0(double *s) { s[0] = s[0] * s[1]; }
static void s1(double *s) { s[1] = sin(s[0]) + s[1]; }
static void s2(double *s) { double t = s[0]; s[0] = s[1]; s[1] = t; }
static void s3(double *s) { s[0] = exp(0.3 * s[0]); }
static void s4(double *s) { s[1] = s[1] * s[1] * 0.5; }
static void s5(double *s) { s[0] += s[1]; }
static void s6(double *s) { s[1] = sqrt(s[1] * s[1] + 1.0); }
static void s7(double *s) { s[0] = 1.0 / (1.0 + s[0] * s[0]); }
static void s8(double *s) { s[0] *= 2; s[1] -= s[0]; }
step steps[] = {s0, s1, s2, s3, s4, s5, s6, s7, s8};
double run(const double *x, step *prog, int n) {
  double s[2] = {x[0], x[1]};
  for (int i = 0; i < n; i++) prog[i](s);
  return s[0] * s[1];
}
int main(void) {
  step prog[] = {steps[1], steps[0], steps[3], steps[8], steps[2], steps[6], steps[4], steps[7], steps[5],
                 steps[1], steps[0]};
  int n = sizeof prog / sizeof prog[0];
  double x[2] = {0.6, 0.9}, d[2] = {0, 0}, h = 1e-6;
  __enzyme_autodiff((void *)run, enzyme_dup, x, d, enzyme_const, prog, enzyme_const, n);
  report("ad.x", d[0]);
  report("ad.y", d[1]);
  double e0[2] = {1, 0}, e1[2] = {0, 1};
  report("fw.x", __enzyme_fwddiff((void *)run, enzyme_dup, x, e0, enzyme_const, prog, enzyme_const, n));
  report("fw.y", __enzyme_fwddiff((void *)run, enzyme_dup, x, e1, enzyme_const, prog, enzyme_const, n));
  for (int k = 0; k < 2; k++) {
    double p[2] = {x[0], x[1]}, m[2] = {x[0], x[1]};
    p[k] += h; m[k] -= h;
    report(k ? "fd.y" : "fd.x", (run(p, prog, n) - run(m, prog, n)) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_functions_updating_memory_with_derivatives(enzcc, opt):
    v = build_and_run(enzcc, STEPS, opt)
    assert_close(v, "ad.", "fd.", rel=1e-5)
    assert_close(v, "fw.", "ad.", rel=1e-9)


# few candidates (inlined, compared with the pointer), one of them libm's
FEW = r"""
typedef double (*fun1)(double);
static double sq(double x) { return x * x; }
fun1 table[] = {sq, sin, exp};
double f(double x, fun1 *ops) { return ops[0](ops[1](x)) + ops[2](x); }
int main(void) {
  fun1 ops[] = {table[0], table[1], table[2]};
  double x = 0.9;
  report("ad.r", __enzyme_autodiff((void *)f, x, enzyme_const, ops));
  report("ad.f", __enzyme_fwddiff((void *)f, x, 1.0, enzyme_const, ops));
  report("an.r", 2 * sin(x) * cos(x) + exp(x));
  report("an.f", 2 * sin(x) * cos(x) + exp(x));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_few_candidates_with_libm(enzcc, opt):
    v = build_and_run(enzcc, FEW, opt)
    assert_close(v, "ad.", "an.", rel=1e-9)


# the evaluator in split mode (the tape of the augmented primal holds the tapes of the functions called) and in
# vector forward mode (two tangents)
SPLIT_AND_VECTOR = EVALUATOR.replace("int main(int argc, char **argv) {", r"""
typedef struct { void *tape; double y; } aug_t;
typedef struct { double t[2]; } v2_t;
extern int enzyme_width;
aug_t __enzyme_augmentfwd(void *, ...);
double __enzyme_reverse(void *, ...);
v2_t __enzyme_fwddiff_v2(void *, ...) __asm__("__enzyme_fwddiff");
int main(int argc, char **argv) {""").replace('report("ad.r",', r"""{
    aug_t t = __enzyme_augmentfwd((void *)eval, x, enzyme_const, prog, enzyme_const, (int)N);
    report("split.y", t.y);
    report("primal.y", eval(x, prog, N));
    report("split.r", __enzyme_reverse((void *)eval, x, enzyme_const, prog, enzyme_const, (int)N, 2.0, t.tape));
    report("twice.r", 2 * dacc);
    v2_t v = __enzyme_fwddiff_v2((void *)eval, enzyme_width, 2, x, 1.0, -3.0, enzyme_const, prog, enzyme_const, (int)N);
    report("vec.0", v.t[0]);
    report("vec.1", v.t[1]);
    report("an.0", dacc);
    report("an.1", -3 * dacc);
  }
  report("ad.r",""")


def test_split_and_vector_mode(enzcc):
    v = build_and_run(enzcc, SPLIT_AND_VECTOR, "-O2", extra=("-ldl",))
    assert v["split.y"] == v["primal.y"]
    assert_close(v, "split.r", "twice.r", rel=1e-9)
    assert_close(v, "vec.", "an.", rel=1e-9)


# a call through a pointer of a type no function of the program has (tinyexpr's calls of arities it has no
# function of): a path that does not take it gets its derivative; one that does stops, in either mode
NO_CANDIDATE = r"""
#include <dlfcn.h>
typedef double (*fun3)(double, double, double);
double g(double x, fun3 f3, int use) { return use ? f3(x, 2 * x, x) : x * x * x; }
int main(int argc, char **argv) {
  fun3 p = (fun3)dlsym(RTLD_DEFAULT, "fma");
  double x = 0.7;
  report("ad.r", __enzyme_autodiff((void *)g, x, enzyme_const, p, enzyme_const, 0));
  report("ad.f", __enzyme_fwddiff((void *)g, x, 1.0, enzyme_const, p, enzyme_const, 0));
  report("an.r", 3 * x * x);
  report("an.f", 3 * x * x);
  fflush(stdout);
  if (argc > 1 && argv[1][0] == 'r') report("bad", __enzyme_autodiff((void *)g, x, enzyme_const, p, enzyme_const, 1));
  if (argc > 1 && argv[1][0] == 'f') report("bad", __enzyme_fwddiff((void *)g, x, 1.0, enzyme_const, p, enzyme_const, 1));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_call_with_no_candidate_stops_where_taken(enzcc, opt):
    v = build_and_run(enzcc, NO_CANDIDATE, opt, extra=("-ldl",))
    assert_close(v, "ad.", "an.", rel=1e-9)
    for mode in ("reverse", "forward"):
        r = enzcc.run("./t", mode, check=False)
        assert r.returncode != 0 and "bad" not in r.stdout and "ad.r" in r.stdout, (mode, r.stdout)
        assert "enzcc: a call through a function pointer in 'g' reached a function that is not known at compile " \
            "time" in r.stderr, (mode, r.stderr)
