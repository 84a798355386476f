"""Reverse mode (__enzyme_autodiff) on small C programs at -O0..-O3, against analytic values and finite
differences computed by the same program."""

import math

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

# A finite-difference gradient of f(x, n) for arrays: defines fd_grad(f, x, n, g)
FD_ARRAY = r"""
static void fd_grad(double (*f)(double *, int), double *x, int n, double *g) {
  for (int i = 0; i < n; i++) {
    double h = 1e-6 * (fabs(x[i]) > 1 ? fabs(x[i]) : 1), keep = x[i];
    x[i] = keep + h; double up = f(x, n);
    x[i] = keep - h; double down = f(x, n);
    x[i] = keep; g[i] = (up - down) / (2 * h);
  }
}
/* a macro, so that the function given to __enzyme_autodiff is known at compile time even at -O0 */
#define CHECK_ARRAY(tag, f, x, n) do { \
  double *g = calloc(n, sizeof(double)), *fd = calloc(n, sizeof(double)); \
  __enzyme_autodiff((void *)f, enzyme_dup, x, g, enzyme_const, n); \
  fd_grad(f, x, n, fd); \
  char name[64]; \
  for (int i = 0; i < n; i++) { \
    snprintf(name, sizeof name, "ad.%s.%d", tag, i); report(name, g[i]); \
    snprintf(name, sizeof name, "fd.%s.%d", tag, i); report(name, fd[i]); \
  } \
  free(g); free(fd); } while (0)
"""

ARRAY_FUNCTIONS = {
    "sumsq": "double F(double *x, int n) { double s = 0; for (int i = 0; i < n; i++) s += x[i] * x[i]; return s; }",
    "libm": """double F(double *x, int n) {
        double s = 0;
        for (int i = 0; i < n; i++) {
          double a = x[i];
          s += sin(a) + cos(a) * tan(a / 4) + exp(a / 3) + log(a * a + 1) + log10(a * a + 2) + pow(fabs(a) + 1, 1.5)
             + sqrt(a * a + 1) + cbrt(a + 10) + fabs(a) + fmax(a, 0.3) + fmin(a, -0.2) + tanh(a) + sinh(a / 2)
             + cosh(a / 3) + atan(a) + atan2(a, 2.0) + asin(a / 5) + acos(a / 6) + erf(a) + hypot(a, 1.5)
             + expm1(a / 7) + log1p(a * a) + exp2(a / 5) + log2(a * a + 3) + copysign(a * a, a);
        }
        return s; }""",
    "while_unknown_trips": """double F(double *x, int n) {
        /* data-dependent trip count: halve until small; every iteration overwrites y */
        double y = x[0] * x[0] + 1.0, s = 0; int it = 0;
        while (y > 1e-3 && it < 1000) { s += sin(y) * y; y = y * 0.5 + x[1] * 1e-4; it++; }
        return s + y * x[2]; }""",
    "nested_loops": """double F(double *x, int n) {
        double s = 0;
        for (int i = 0; i < n; i++) { double r = 0;
          for (int j = 0; j <= i; j++) r += x[j] * sin(x[i] - x[j] + j);
          s += r * r; }
        return s; }""",
    "branches": """double F(double *x, int n) {
        double s = 0;
        for (int i = 0; i < n; i++) {
          if (x[i] > 0.5) s += x[i] * x[i]; else if (x[i] < -0.5) s -= exp(x[i]); else s += 3 * x[i];
          switch (i % 3) { case 0: s *= 1.1; break; case 1: s += x[i] / 3; break; default: s = s - x[i] * s * 0.01; }
        }
        return s; }""",
    "in_place_overwrite": """double F(double *x0, int n) {
        double *x = malloc(n * sizeof(double));
        memcpy(x, x0, n * sizeof(double));
        for (int k = 0; k < 3; k++) for (int i = 1; i < n; i++) x[i] = x[i] * x[i - 1] * 0.5 + sin(x[i]);
        double s = 0; for (int i = 0; i < n; i++) s += x[i];
        free(x); return s; }""",
    "struct_array": """typedef struct { double pos, vel; } particle;
        double F(double *x, int n) {
          particle p[8]; int m = n < 8 ? n : 8;
          for (int i = 0; i < m; i++) { p[i].pos = x[i]; p[i].vel = x[(i + 1) % m] * 2; }
          double e = 0;
          for (int step = 0; step < 4; step++) for (int i = 0; i < m; i++) { p[i].pos += 0.1 * p[i].vel; p[i].vel -= 0.1 * p[i].pos * p[i].pos; }
          for (int i = 0; i < m; i++) e += 0.5 * p[i].vel * p[i].vel + p[i].pos;
          return e; }""",
    "helper_calls": """__attribute__((noinline)) static double sq(double a) { return a * a; }
        __attribute__((noinline)) double dist(const double *a, const double *b) { return sqrt(sq(a[0] - b[0]) + sq(a[1] - b[1])); }
        double F(double *x, int n) { double s = 0; for (int i = 0; i + 3 < n; i += 2) s += dist(x + i, x + i + 2) * sq(x[i]); return s; }""",
    "memset_calloc": """double F(double *x, int n) {
        double *acc = calloc(n, sizeof(double)); double tmp[4];
        memset(tmp, 0, sizeof tmp);
        for (int i = 0; i < n; i++) { acc[i] = x[i] * x[(i + 1) % n]; tmp[i % 4] += acc[i]; }
        double s = tmp[0] * tmp[1] + tmp[2] - tmp[3] * x[0];
        free(acc); return s; }""",
    "linked_list_malloc_free": """typedef struct node { double w; struct node *next; } node;
        double F(double *x, int n) {
          node *head = NULL;
          for (int i = 0; i < n; i++) { node *nd = malloc(sizeof(node)); nd->w = x[i] * x[i]; nd->next = head; head = nd; }
          double s = 0; int k = 1;
          while (head) { node *nx = head->next; s += head->w * k++; free(head); head = nx; }
          return s; }""",
    "lstm_like": """static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }
        double F(double *x, int n) {
          double h = 0, c = 0;
          for (int t = 0; t < n; t++) {
            double f = sigmoid(0.5 * x[t] + 0.3 * h), i = sigmoid(0.2 * x[t] - 0.1 * h), o = sigmoid(x[t] + h);
            double g = tanh(0.7 * x[t] + 0.2 * h);
            c = f * c + i * g; h = o * tanh(c);
          }
          return h + c; }""",
    "struct_copy_with_int_field": """typedef struct { double a[3]; int tag; } rec;
        double F(double *x, int n) {
          rec r[4], tmp;
          for (int i = 0; i < 4; i++) { for (int j = 0; j < 3; j++) r[i].a[j] = x[(i + j) % n]; r[i].tag = i; }
          for (int i = 0; i < 3; i++) { tmp = r[i]; r[i] = r[i + 1]; r[i + 1] = tmp; }
          double s = 0; for (int i = 0; i < 4; i++) s += r[i].a[0] * r[i].a[1] * (r[i].tag + 1) - r[i].a[2];
          return s; }""",
    "rk4_ode": """static void rhs(const double *y, double *dy, double k) { dy[0] = y[1]; dy[1] = -k * sin(y[0]); }
        double F(double *x, int n) {
          double y[2] = {x[0], x[1]}, k1[2], k2[2], k3[2], k4[2], t[2], h = 0.05;
          for (int s = 0; s < 40; s++) {
            rhs(y, k1, x[2]); for (int i = 0; i < 2; i++) t[i] = y[i] + 0.5 * h * k1[i];
            rhs(t, k2, x[2]); for (int i = 0; i < 2; i++) t[i] = y[i] + 0.5 * h * k2[i];
            rhs(t, k3, x[2]); for (int i = 0; i < 2; i++) t[i] = y[i] + h * k3[i];
            rhs(t, k4, x[2]); for (int i = 0; i < 2; i++) y[i] += h / 6 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
          }
          return y[0] * y[0] + y[1] + x[3] * x[4] * x[5]; }""",
    "intrinsics": """double F(double *x, int n) {
          double s = 0;
          for (int i = 0; i < n; i++)
            s += __builtin_powi(x[i], 3) + copysign(x[i] * x[i], x[(i + 1) % n]) + fmax(x[i], 0.05) * fmin(x[i], 2.5)
               + fma(x[i], x[i], 1.0);
          return s; }""",
    "select_fabs_fmax": """double F(double *x, int n) {
        double m = -1e300, s = 0;
        for (int i = 0; i < n; i++) { m = x[i] > m ? x[i] : m; s += fabs(x[i] - 0.1) * fmax(x[i], 0.2); }
        return m * 2 + s; }""",
}

XS = "double x[6] = {0.9, -0.35, 1.3, 0.45, -1.1, 0.7};"


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
@pytest.mark.parametrize("name", sorted(ARRAY_FUNCTIONS))
def test_array_function_matches_finite_differences(enzcc, name, opt):
    src = ARRAY_FUNCTIONS[name] + FD_ARRAY + f"int main(void) {{ {XS} CHECK_ARRAY(\"g\", F, x, 6); return 0; }}\n"
    values = build_and_run(enzcc, src, opt)
    assert_close(values, "ad.g.", "fd.g.", rel=2e-5, abs_=2e-6)


@pytest.mark.parametrize("opt", ["-O1", "-O3"])
@pytest.mark.parametrize("name", ["nested_loops", "while_unknown_trips", "struct_array", "in_place_overwrite"])
def test_other_levels(enzcc, name, opt):
    src = ARRAY_FUNCTIONS[name] + FD_ARRAY + f"int main(void) {{ {XS} CHECK_ARRAY(\"g\", F, x, 6); return 0; }}\n"
    assert_close(build_and_run(enzcc, src, opt), "ad.g.", "fd.g.", rel=2e-5, abs_=2e-6)


def test_before_opt_mode_gives_the_same_gradient(enzcc):
    src = ARRAY_FUNCTIONS["nested_loops"] + FD_ARRAY + f"int main(void) {{ {XS} CHECK_ARRAY(\"g\", F, x, 6); return 0; }}\n"
    after = build_and_run(enzcc, src, "-O2", name="after")
    before = build_and_run(enzcc, src, "-O2", extra=("--ad-mode=before-opt",), name="before")
    assert_close(after, "ad.g.", "fd.g.", rel=2e-5, abs_=2e-6)
    for k, v in after.items():
        assert before[k] == pytest.approx(v, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_scalar_out_arguments_analytic(enzcc, opt):
    src = r"""
typedef struct { double dx, dy; } grad2;
grad2 __enzyme_autodiff_2(void *, ...);
double f(double x, double y) { return x * y + sin(x) / y; }
double g(double x) { return x * x * x; }
int main(void) {
  double x = 1.3, y = 0.7;
  grad2 d = __enzyme_autodiff_2((void *)f, enzyme_out, x, enzyme_out, y);
  report("ad.dx", d.dx); report("an.dx", y + cos(x) / y);
  report("ad.dy", d.dy); report("an.dy", x - sin(x) / (y * y));
  double dg = __enzyme_autodiff((void *)g, x);   /* no marker: a double defaults to enzyme_out */
  report("ad.dg", dg); report("an.dg", 3 * x * x);
  return 0;
}
"""
    assert_close(build_and_run(enzcc, src, opt), "ad.", "an.", rel=1e-12, abs_=1e-14)


def test_mixed_out_const_dup(enzcc):
    src = r"""
double f(double a, const double *v, double *w, int n, double c) {
  double s = 0; for (int i = 0; i < n; i++) s += a * v[i] * w[i] + c * w[i]; return s;
}
int main(void) {
  double v[3] = {1, 2, 3}, w[3] = {0.5, -1, 2}, dw[3] = {0}, a = 1.5, c = 0.25;
  double da = __enzyme_autodiff((void *)f, enzyme_out, a, enzyme_const, v, enzyme_dup, w, dw, enzyme_const, 3,
                                enzyme_const, c);
  report("ad.da", da); report("an.da", 0.5 * 1 - 1 * 2 + 2 * 3);
  for (int i = 0; i < 3; i++) { char k[16]; snprintf(k, 16, "ad.w%d", i); report(k, dw[i]);
                                snprintf(k, 16, "an.w%d", i); report(k, a * v[i] + c); }
  return 0;
}
"""
    assert_close(build_and_run(enzcc, src, "-O2"), "ad.", "an.", rel=1e-12)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_unmarked_pointer_to_integers_is_constant(enzcc, opt):
    """As in Enzyme: an int * without a marker, followed by a value that cannot be its shadow, is constant; a
    pointer to floats in the same place still needs its shadow (one-line error)."""
    src = r"""
__attribute__((noinline)) void f(double *x, int *n, int m) { for (int i = 0; i < *n + m; i++) x[i] *= x[i]; }
int main(void) {
  double x[3] = {1, 2, 3}, dx[3] = {1, 1, 1};
  int n = 2;
  __enzyme_autodiff((void *)f, x, dx, &n, 1);
  report("d0", dx[0]); report("d1", dx[1]); report("d2", dx[2]);
  return 0;
}
"""
    assert build_and_run(enzcc, src, opt) == {"d0": 2, "d1": 4, "d2": 6}
    enzcc.write("e.c", PRELUDE + src.replace("int *n, int m", "double *n, int m").replace("int n = 2", "double n = 2"))
    r = enzcc(opt, "e.c", "-o", "e", check=False)
    assert r.returncode == 1 and "shadow of argument for parameter 2 of 'f' has type i32, expected ptr" in r.stderr


def test_output_buffer_seed_and_accumulation(enzcc):
    """dup on an output buffer: its shadow holds the seed and is consumed; input shadows accumulate (+=)."""
    src = r"""
void f(const double *x, double *out, int n) {
  for (int i = 0; i < n; i++) out[i] = 0;
  for (int i = 0; i < n; i++) out[i] += x[i] * x[(i + 1) % n];
}
int main(void) {
  double x[3] = {1, 2, 3}, out[3], dx[3] = {10, 10, 10}, dout[3] = {1, 0, 0};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_dupnoneed, out, dout, enzyme_const, 3);
  /* d out0 / dx = (x1, x0, 0), added to the initial 10s */
  report("ad.dx0", dx[0]); report("an.dx0", 10 + 2);
  report("ad.dx1", dx[1]); report("an.dx1", 10 + 1);
  report("ad.dx2", dx[2]); report("an.dx2", 10);
  report("ad.dout0", dout[0]); report("an.dout0", 0);
  report("ad.out0", out[0]); report("an.out0", 2);
  return 0;
}
"""
    assert_close(build_and_run(enzcc, src, "-O2"), "ad.", "an.", rel=1e-12)


def test_float_function(enzcc):
    src = r"""
float __enzyme_autodiff_f(void *, ...);
float f(float x) { return sinf(x) * x * x; }
int main(void) {
  float x = 0.8f;
  report("ad.d", __enzyme_autodiff_f((void *)f, enzyme_out, x));
  report("an.d", cosf(x) * x * x + 2 * x * sinf(x));
  return 0;
}
"""
    assert_close(build_and_run(enzcc, src, "-O2"), "ad.", "an.", rel=1e-5)


def test_single_precision_inside_double_function(enzcc):
    src = r"""
double F(double *x, int n) {
  float s = 0; for (int i = 0; i < n; i++) { float a = (float)x[i]; s += sinf(a) * a + expf(a / 4); }
  return (double)s; }
int main(void) {
  double x[3] = {0.5, -1.0, 2.0}, g[3] = {0};
  __enzyme_autodiff((void *)F, enzyme_dup, x, g, enzyme_const, 3);
  for (int i = 0; i < 3; i++) { char k[16]; snprintf(k, 16, "ad.%d", i); report(k, g[i]);
    float a = (float)x[i]; snprintf(k, 16, "an.%d", i); report(k, cosf(a) * a + sinf(a) + expf(a / 4) / 4); }
  return 0; }
"""
    assert_close(build_and_run(enzcc, src, "-O2"), "ad.", "an.", rel=1e-5)
    assert_close(build_and_run(enzcc, src, "-O0", name="t0"), "ad.", "an.", rel=1e-5)


def test_several_calls_and_separate_files(enzcc):
    """CC=enzcc style: the differentiated function lives in another translation unit."""
    enzcc.write("model.c", "#include <math.h>\ndouble model(double *p, int n) { double s = 0; "
                           "for (int i = 0; i < n; i++) s += exp(p[i]) * (i + 1); return s; }\n")
    src = r"""
double model(double *, int);
int main(void) {
  double p[3] = {0.1, 0.2, 0.3}, dp[3] = {0}, dq[3] = {0};
  __enzyme_autodiff((void *)model, enzyme_dup, p, dp, enzyme_const, 3);
  __enzyme_autodiff((void *)model, p, dq, 3);   /* markers are optional */
  for (int i = 0; i < 3; i++) { char k[16]; snprintf(k, 16, "ad.p%d", i); report(k, dp[i]);
    snprintf(k, 16, "an.p%d", i); report(k, exp(p[i]) * (i + 1));
    snprintf(k, 16, "ad.q%d", i); report(k, dq[i]); snprintf(k, 16, "an.q%d", i); report(k, exp(p[i]) * (i + 1)); }
  return 0;
}
"""
    enzcc.write("main.c", __import__("adharness").PRELUDE + src)
    enzcc("-O2", "-c", "model.c")
    enzcc("-O2", "-c", "main.c")
    enzcc("main.o", "model.o", "-lm", "-o", "prog")
    out = enzcc.run("./prog").stdout
    values = {l.split()[0]: float(l.split()[1]) for l in out.splitlines()}
    assert_close(values, "ad.", "an.", rel=1e-12)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_differentiated_function_calls_one_from_another_file(enzcc, opt):
    """`enzcc -c` of a file whose differentiated function calls a function of another file: AD waits for the
    link, where the callee's body is there; a link without it is the usual one-line error."""
    enzcc.write("g.c", "double g(double x) { return x * x; }\n")
    enzcc.write("main.c", __import__("adharness").PRELUDE + r"""
double g(double);
double f(double x) { return g(x) * x; }
int main(void) { report("d", __enzyme_autodiff((void *)f, 3.0)); report("t", __enzyme_fwddiff((void *)f, 3.0, 1.0));
  return 0; }
""")
    enzcc(opt, "-c", "main.c")
    enzcc(opt, "-c", "g.c")
    enzcc(opt, "main.o", "g.o", "-o", "prog")
    assert enzcc.run("./prog").stdout.split() == ["d", "27", "t", "27"]
    r = enzcc(opt, "main.o", "-o", "alone", check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "no derivative rule for call to 'g'" in r.stderr and not (enzcc.cwd / "alone").exists()


SWITCH = r"""
double f(double *x, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) {
    double t = sin(x[i]) * x[i];
    switch (i % 5) {            /* two cases straight to the block after: two edges from the switch to it */
      case 0: case 3: break;
      case 1: t = x[i] * x[i] * x[i]; break;
      case 2: t = exp(x[i]); break;
      default: t = 2 * x[i];
    }
    s += t * s + t;
  }
  return s;
}
int main(void) {
  double x[12], dx[12] = {0};
  for (int i = 0; i < 12; i++) x[i] = 0.1 * i - 0.5;
  __enzyme_autodiff((void *)f, x, dx, 12);
  for (int i = 0; i < 12; i++) {
    double h = 1e-6, old = x[i];
    x[i] = old + h; double up = f(x, 12); x[i] = old - h; double down = f(x, 12); x[i] = old;
    char k[16]; snprintf(k, 16, "ad.%d", i); report(k, dx[i]); snprintf(k, 16, "fd.%d", i); report(k, (up - down) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_switch_with_cases_sharing_a_block(enzcc, opt):
    assert_close(build_and_run(enzcc, SWITCH, opt), "ad.", "fd.", rel=1e-6, abs_=1e-8)


def test_inline_assembly(enzcc):
    """Inline assembly elsewhere in the program is compiled (the host's assembly parser is there); inside the
    differentiated code it is a one-line error naming it."""
    src = r"""
double g(double x) { double y = x * x; __asm__ volatile("nop # %0" : "+x"(y)); return y; }
double f(double x) { return x * x * x; }
int main(void) { report("g", g(2.0)); report("d", __enzyme_autodiff((void *)f, 2.0)); return 0; }
"""
    assert build_and_run(enzcc, src, "-O2") == {"g": 4.0, "d": 12.0}
    enzcc.write("asm.c", __import__("adharness").PRELUDE + src.replace("return x * x * x;", "return g(x) * x;"))
    r = enzcc("-O2", "asm.c", "-o", "asm", check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "no derivative rule for call to inline assembly" in r.stderr


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_string_functions_carry_no_derivative(enzcc, opt):
    """strlen, strcmp, memcmp on a name stored next to a value with a derivative (the same memory object):
    their results are integers that choose what is computed."""
    src = r"""
typedef struct { char name[8]; double v; } item;
__attribute__((noinline)) static double f(item *it, const char *other) {
  double r = it->v;
  if (strcmp(it->name, "square") == 0) r = r * r;
  if (memcmp(it->name, other, strlen(it->name)) != 0) r += strlen(other) * it->v;
  return r;
}
int main(void) {
  item it = {"square", 1.3}, dit = {"", 0};
  volatile const char *o = "cube";
  __enzyme_autodiff((void *)f, enzyme_dup, &it, &dit, enzyme_const, (const char *)o);
  report("ad.d", dit.v);
  report("an.d", 2 * 1.3 + 4);
  return 0;
}
"""
    assert_close(build_and_run(enzcc, src, opt), "ad.", "an.", rel=1e-14)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_math_call_whose_result_reaches_no_output(enzcc, opt):
    """sin(x) only feeds an integer conversion: it is inactive, so no rule is needed and nothing flows back."""
    src = r"""
double f(double x) { double unused = sin(x); return x * x + (int)unused; }
int main(void) { report("ad.d", __enzyme_autodiff((void *)f, 1.3)); report("an.d", 2 * 1.3); return 0; }
"""
    assert_close(build_and_run(enzcc, src, opt), "ad.", "an.", rel=1e-14)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_struct_returns_in_every_abi_shape(enzcc, opt):
    """Several enzyme_out derivatives come back as a C struct, whatever the ABI makes of it: <2 x float>,
    {<2 x float>, float}, {double, double} in registers, or three doubles through a hidden sret pointer."""
    src = r"""
typedef struct { float a, b; } f2;
typedef struct { float a, b, c; } f3;
typedef struct { double a, b, c; } d3;
f2 __enzyme_autodiff_f2(void *, ...);
f3 __enzyme_autodiff_f3(void *, ...);
d3 __enzyme_autodiff_d3(void *, ...);
float g2(float x, float y) { return x * y * y + sinf(x); }
float g3(float x, float y, float z) { return x * y * z + z; }
double h3(double x, double y, double z) { return x * exp(y) - z * z; }
int main(void) {
  f2 a = __enzyme_autodiff_f2((void *)g2, enzyme_out, 1.5f, enzyme_out, 0.5f);
  report("ad.a0", a.a); report("an.a0", 0.25f + cosf(1.5f)); report("ad.a1", a.b); report("an.a1", 1.5f);
  f3 b = __enzyme_autodiff_f3((void *)g3, enzyme_out, 1.0f, enzyme_out, 2.0f, enzyme_out, 3.0f);
  report("ad.b0", b.a); report("an.b0", 6); report("ad.b1", b.b); report("an.b1", 3); report("ad.b2", b.c); report("an.b2", 3);
  d3 c = __enzyme_autodiff_d3((void *)h3, enzyme_out, 1.5, enzyme_out, 0.5, enzyme_out, 2.0);
  report("ad.c0", c.a); report("an.c0", exp(0.5)); report("ad.c1", c.b); report("an.c1", 1.5 * exp(0.5));
  report("ad.c2", c.c); report("an.c2", -4);
  return 0;
}
"""
    assert_close(build_and_run(enzcc, src, opt), "ad.", "an.", rel=1e-6)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_enzyme_inactivefn(enzcc, opt):
    """Functions named by a __enzyme_inactivefn global are kept but carry no derivative (no rule needed)."""
    enzcc.write("log.c", "double log_value(double v) { static int calls; calls++; return v; }\n")
    src = r"""
double log_value(double v);   /* defined in another file: no derivative rule, and none needed */
__attribute__((noinline)) double clamp_for_display(double v) { return v > 1 ? 1 : v; }
void *__enzyme_inactivefn[] = {(void *)log_value, (void *)clamp_for_display};
double f(double x) { double y = x * x * sin(x); log_value(y); return y + clamp_for_display(y); }
int main(void) {
  report("ad.d", __enzyme_autodiff((void *)f, 0.7)); report("an.d", 2 * 0.7 * sin(0.7) + 0.49 * cos(0.7));
  report("ad.fwd", __enzyme_fwddiff((void *)f, 0.7, 1.0)); report("an.fwd", 2 * 0.7 * sin(0.7) + 0.49 * cos(0.7));
  return 0;
}
"""
    assert_close(build_and_run(enzcc, src, opt, extra=("log.c",)), "ad.", "an.", rel=1e-14)


BRANCHES = r"""
static double p1(double x) { return x * x; }
static double p2(double x) { return x * x * x; }
static double p3(double x) { return sin(x); }
double pick(int k, double x) {  /* one __enzyme_autodiff call per case: the optimizer must not merge them */
  switch (k) {
    case 0: return __enzyme_autodiff((void *)p1, x);
    case 1: return __enzyme_autodiff((void *)p2, x);
    default: return __enzyme_autodiff((void *)p3, x);
  }
}
int main(int argc, char **argv) {
  double x = 1.5;
  report("d0", pick(argc - 1, x)); report("d1", pick(argc, x)); report("d2", pick(argc + 1, x));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_calls_in_different_branches_stay_apart(enzcc, opt):
    """__enzyme_* calls in the cases of a switch (the optimization before AD merged them into one call of a
    function chosen at run time, refused from -O1 on)."""
    v = build_and_run(enzcc, BRANCHES, opt)
    assert (v["d0"], v["d1"]) == (3.0, 6.75) and v["d2"] == pytest.approx(math.cos(1.5), rel=1e-15)
