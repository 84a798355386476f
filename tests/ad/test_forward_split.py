"""Forward split mode: ``__enzyme_augmentfwd`` runs the primal and writes the tape, ``__enzyme_fwdsplit`` computes
the tangent from it alone (primal memory and arguments are not read again), at -O0..-O3 against analytic
tangents and central differences; ``enzyme_allocated`` with ``__enzyme_augmentsize``, ``enzyme_nofree`` (one tape,
several directions) and the errors."""

import math

import pytest

from adharness import PRELUDE, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

DECLS = r"""
extern int enzyme_tape, enzyme_allocated, enzyme_nofree;
long __enzyme_augmentsize(void *, ...);
void __enzyme_augmentfwd(void *, ...);
typedef struct { void *tape; double y; } aug_t;
aug_t __enzyme_augmentfwd_r(void *, ...);
double __enzyme_fwdsplit(void *, ...);
"""

# g overwrites x in place, with a branch per element inside a loop: its tangent needs the old x[i] and which
# branch ran, from the tape (the growing part); h has no loop (the fixed part only)
FUNCS = r"""
double g(double *x, int n, double scale) {
  double s = 0;
  for (int i = 0; i < n; i++) {
    if (x[i] > 0) x[i] = x[i] * x[i]; else x[i] = exp(x[i]);
    s += scale * x[i];
  }
  return s;
}
double h(double a, double b) { return a * sin(b) + b / a; }
"""

MAIN = r"""
int main(void) {
  double x[4] = {0.5, -1.0, 2.0, -0.25};
  long size = __enzyme_augmentsize((void *)g, enzyme_dup, enzyme_const, enzyme_dup);
  void *buf = malloc(size);
  __enzyme_augmentfwd((void *)g, enzyme_allocated, size, enzyme_tape, buf, x, (double *)0, enzyme_const, 4, 3.0);
  for (int i = 0; i < 4; i++) { char k[16]; snprintf(k, 16, "x.%d", i); report(k, x[i]); x[i] = NAN; }
  for (int d = 0; d < 5; d++) {  /* directions e_0..e_3, then the scale's: one tape for all (enzyme_nofree) */
    double dx[4] = {0}, ds = d == 4;
    if (d < 4) dx[d] = 1;
    char k[16];
    snprintf(k, 16, "t.%d", d);
    report(k, __enzyme_fwdsplit((void *)g, enzyme_allocated, size, enzyme_tape, buf, enzyme_nofree,
                                (double *)0, dx, enzyme_const, 4, 3.0, ds));
    snprintf(k, 16, "dx.%d", d);
    report(k, d < 4 ? dx[d] : dx[0]);
  }
  double dx[4] = {1, 1, 1, 1};  /* without enzyme_nofree the growing part is freed */
  report("last", __enzyme_fwdsplit((void *)g, enzyme_allocated, size, enzyme_tape, buf, (double *)0, dx,
                                   enzyme_const, 4, 3.0, 0.0));
  free(buf);
  aug_t a = __enzyme_augmentfwd_r((void *)h, 1.5, 0.7);  /* the tape on the heap; fwdsplit frees it */
  report("h", a.y);
  report("dh", __enzyme_fwdsplit((void *)h, 1.5, 1.0, 0.7, 0.5, a.tape));
  report("null", __enzyme_fwdsplit((void *)h, 1.5, 1.0, 0.7, 0.5, (void *)0));  /* h needs only its arguments */
  return 0;
}
"""


def _g(x, scale=3.0):
    return sum(scale * (v * v if v > 0 else math.exp(v)) for v in x)


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_forward_split(enzcc, opt):
    v = build_and_run(enzcc, DECLS + FUNCS + MAIN, opt)
    x0 = [0.5, -1.0, 2.0, -0.25]
    for i, xi in enumerate(x0):
        assert v[f"x.{i}"] == pytest.approx(xi * xi if xi > 0 else math.exp(xi), rel=1e-15)
        # tangent along e_i: analytic, and a central difference of the primal
        want = 3.0 * (2 * xi if xi > 0 else math.exp(xi))
        assert v[f"t.{i}"] == pytest.approx(want, rel=1e-12)
        h = 1e-6
        fd = (_g([xj + h * (j == i) for j, xj in enumerate(x0)]) - _g([xj - h * (j == i) for j, xj in enumerate(x0)])) / (2 * h)
        assert v[f"t.{i}"] == pytest.approx(fd, rel=1e-6)
        assert v[f"dx.{i}"] == pytest.approx(2 * xi if xi > 0 else math.exp(xi), rel=1e-12)  # x's tangent, in place
    assert v["t.4"] == pytest.approx(_g(x0, 1.0), rel=1e-12)  # d/d scale
    assert v["last"] == pytest.approx(sum(3.0 * (2 * x if x > 0 else math.exp(x)) for x in x0), rel=1e-12)
    assert v["h"] == pytest.approx(1.5 * math.sin(0.7) + 0.7 / 1.5, rel=1e-15)
    # direction (1, 0.5) at (1.5, 0.7)
    want = (math.sin(0.7) - 0.7 / 1.5 ** 2) + 0.5 * (1.5 * math.cos(0.7) + 1 / 1.5)
    assert v["dh"] == pytest.approx(want, rel=1e-12)
    assert v["null"] == pytest.approx(want, rel=1e-12)


# the pattern of Enzyme's forward split examples (libCEED's hyperelasticity quadrature functions): the tape in a
# buffer of __enzyme_augmentsize bytes, the augmented primal given null shadows, the tangent null primals
STRESS = r"""
int enzyme_dup, enzyme_const, enzyme_tape, enzyme_allocated, enzyme_nofree;
int __enzyme_augmentsize(void *, ...);
void __enzyme_augmentfwd(void *, ...);
void __enzyme_fwdsplit(void *, ...);

/* S = lambda log(J) C^-1 + mu (I - C^-1) for C = I + 2E (symmetric 3x3 in Voigt order) */
static void stress(double S[6], const double E[6], double lambda, double mu) {
  double C[3][3] = {{1 + 2 * E[0], 2 * E[5], 2 * E[4]}, {2 * E[5], 1 + 2 * E[1], 2 * E[3]},
                    {2 * E[4], 2 * E[3], 1 + 2 * E[2]}};
  double det = C[0][0] * (C[1][1] * C[2][2] - C[1][2] * C[2][1]) - C[0][1] * (C[1][0] * C[2][2] - C[1][2] * C[2][0])
             + C[0][2] * (C[1][0] * C[2][1] - C[1][1] * C[2][0]);
  double inv[6] = {(C[1][1] * C[2][2] - C[1][2] * C[2][1]) / det, (C[0][0] * C[2][2] - C[0][2] * C[2][0]) / det,
                   (C[0][0] * C[1][1] - C[0][1] * C[1][0]) / det, (C[0][2] * C[1][0] - C[0][0] * C[1][2]) / det,
                   (C[0][1] * C[1][2] - C[0][2] * C[1][1]) / det, (C[0][2] * C[2][1] - C[0][1] * C[2][2]) / det};
  double logJ = 0.5 * log(det);
  for (int m = 0; m < 6; m++) S[m] = lambda * logJ * inv[m] + mu * ((m < 3) - inv[m]);
}

int main(void) {
  double E[6] = {0.05, 0.02, 0.08, 0.01, 0.003, 0.04}, dE[6] = {0.3, -0.1, 0.2, 0.05, 0.4, -0.2};
  double S[6], dS[6], lambda = 0.6, mu = 0.4;
  int size = __enzyme_augmentsize((void *)stress, enzyme_dup, enzyme_dup, enzyme_const, enzyme_const);
  void *tape = malloc(size);
  __enzyme_augmentfwd((void *)stress, enzyme_allocated, size, enzyme_tape, tape, enzyme_nofree,
                      S, (double *)0, E, (double *)0, enzyme_const, lambda, enzyme_const, mu);
  __enzyme_fwdsplit((void *)stress, enzyme_allocated, size, enzyme_tape, tape,
                    (double *)0, dS, (double *)0, dE, enzyme_const, lambda, enzyme_const, mu);
  free(tape);
  for (int m = 0; m < 6; m++) {  /* central differences along dE */
    double Ep[6], Em[6], Sp[6], Sm[6], h = 1e-6;
    for (int k = 0; k < 6; k++) { Ep[k] = E[k] + h * dE[k]; Em[k] = E[k] - h * dE[k]; }
    stress(Sp, Ep, lambda, mu);
    stress(Sm, Em, lambda, mu);
    char k[16];
    snprintf(k, 16, "dS.%d", m); report(k, dS[m]);
    snprintf(k, 16, "fd.%d", m); report(k, (Sp[m] - Sm[m]) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_forward_split_with_a_caller_buffer_and_null_pointers(enzcc, opt):
    """``int enzyme_nofree;`` is a marker the program declares (no macro of enzcc's may take its name)."""
    v = build_and_run(enzcc, STRESS.replace("#include", "//"), opt)
    for m in range(6):
        assert v[f"dS.{m}"] == pytest.approx(v[f"fd.{m}"], rel=1e-6, abs=1e-9)
    assert any(abs(v[f"dS.{m}"]) > 0.01 for m in range(6))


def _refused(enzcc, src, message, *flags):
    enzcc.write("e.c", PRELUDE + DECLS + src)
    r = enzcc("-O2", "e.c", "-lm", "-o", "e", *flags, check=False)
    err = [line for line in r.stderr.splitlines() if "error" in line]
    assert r.returncode != 0 and len(err) == 1 and message in err[0], r.stderr
    assert not (enzcc.cwd / "e").exists()


def test_forward_split_errors(enzcc):
    call = "__enzyme_fwdsplit((void *)h, 1.0, 1.0, 2.0, 0.0, t.tape)"
    _refused(enzcc, FUNCS + "int main(void) { aug_t t = __enzyme_augmentfwd_r((void *)h, 1.0, 2.0); char b[8];"
             "__enzyme_augmentfwd((void *)h, enzyme_allocated, 8, enzyme_tape, b, 1.0, 2.0);"
             f"return {call} > 0; }}", "the tape of 'h' needs")
    _refused(enzcc, FUNCS + "double __enzyme_reverse(void *, ...);"
             "int main(void) { aug_t t = __enzyme_augmentfwd_r((void *)h, 1.0, 2.0);"
             f"return {call} + __enzyme_reverse((void *)h, 1.0, 2.0, 1.0, t.tape) > 0; }}",
             "goes to __enzyme_fwdsplit and to __enzyme_reverse")
    enzcc.write("n.c", PRELUDE + DECLS + FUNCS + "int main(void) { double x[2] = {1, 2}, dx[2] = {1, 0};"
                "return __enzyme_fwdsplit((void *)g, x, dx, enzyme_const, 2, 3.0, 0.0, (void *)0) > 0; }")
    enzcc("-O2", "n.c", "-lm", "-o", "n")
    r = enzcc.run("./n", check=False)
    assert r.returncode != 0 and "needs the tape its __enzyme_augmentfwd wrote, and was given a null pointer" in r.stderr
    _refused(enzcc, "double r(double x, int n) { return n ? x * r(x, n - 1) : 1; }"
             "int main(void) { aug_t t = __enzyme_augmentfwd_r((void *)r, 2.0, enzyme_const, 3);"
             "return __enzyme_fwdsplit((void *)r, 2.0, 1.0, enzyme_const, 3, t.tape) > 0; }",
             "which is not inlined", "--ad-inline=none")


def test_a_tape_from_elsewhere_is_a_run_time_error(enzcc):
    """An augmented primal built where no __enzyme_fwdsplit call is seen (here: a shared library) writes the tape
    of __enzyme_reverse: the tangent half says so and aborts, it does not read it."""
    enzcc.write("a.c", PRELUDE + DECLS + FUNCS + "void *make(void) { return __enzyme_augmentfwd_r((void *)h, 1.0, 2.0).tape; }\n")
    enzcc.write("b.c", PRELUDE + DECLS + FUNCS.replace("double h(", "static double h(") + "void *make(void);\n"
                "int main(void) { report(\"t\", __enzyme_fwdsplit((void *)h, 1.0, 1.0, 2.0, 0.0, make())); return 0; }\n")
    enzcc("-O2", "-shared", "-fPIC", "a.c", "-lm", "-o", "liba.so")
    enzcc("-O2", "b.c", "-L.", "-la", "-lm", "-o", "ab")
    r = enzcc.run("./ab", check=False, env={"LD_LIBRARY_PATH": str(enzcc.cwd)})
    assert r.returncode != 0 and "was not written by its __enzyme_augmentfwd in forward split mode" in r.stderr, r


REVERSE_NOFREE = r"""
extern int enzyme_nofree;
typedef struct { void *tape; double y; } aug_t;
aug_t __enzyme_augmentfwd(void *, ...);
double __enzyme_reverse(void *, ...);
double f(double x, double *a) { double y = sin(x * a[0]); a[0] = 0; return y; }
int main(void) {
  double a[1] = {2}, da[1] = {0};
  aug_t t = __enzyme_augmentfwd((void *)f, 0.5, enzyme_dup, a, da);
  report("dx", __enzyme_reverse((void *)f, enzyme_nofree, 0.5, enzyme_dup, a, da, 1.0, t.tape));
  free(t.tape);  /* enzyme_nofree: the caller frees the tape */
  report("da", da[0]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_reverse_with_enzyme_nofree_leaves_the_tape(enzcc, opt):
    v = build_and_run(enzcc, REVERSE_NOFREE, opt)
    assert v["dx"] == pytest.approx(2 * math.cos(1.0), rel=1e-12)
    assert v["da"] == pytest.approx(0.5 * math.cos(1.0), rel=1e-12)


REVERSE_TWICE = r"""
extern int enzyme_nofree, enzyme_const, enzyme_out, enzyme_dup, enzyme_allocated, enzyme_tape;
typedef struct { void *tape; double y; } aug_t;
aug_t __enzyme_augmentfwd(void *, ...);
double __enzyme_reverse(void *, ...);
void __enzyme_reverse_v(void *, ...);
int __enzyme_augmentsize(void *, ...);
double f(double a, double b) {  /* b (a^2 + a + 1): d/da = b (2a + 1) */
  double s = 0;
  for (int i = 0; i < 3; i++) s = s * a + b;
  return s;
}
double p(const double *x, int n) { return n == 0 ? 1.0 : x[n - 1] * p(x, n - 1); }  /* stays recursive */
double g(const double *x, int n) {  /* sum_i (i + 1) x_i^2 + prod_i x_i, through calloc'd memory read first */
  double *acc = calloc(n, sizeof(double));
  for (int i = 0; i < n; i++) acc[i] += x[i] * x[i];
  double s = 0;
  for (int i = 0; i < n; i++) s += acc[i] * (i + 1);
  free(acc);
  return s + p(x, n);
}
int main(int argc, char **argv) {
  int size = __enzyme_augmentsize((void *)f, enzyme_out, enzyme_const);
  void *buf = malloc(size);
  for (int k = 0; k < 2; k++) {  /* one buffer, two augmented calls, each with its reverse call */
    double a = 2.0 + k;
    __enzyme_augmentfwd((void *)f, enzyme_allocated, size, enzyme_tape, buf, a, enzyme_const, 1.0);
    report(k ? "f.1" : "f.0", __enzyme_reverse((void *)f, enzyme_allocated, size, enzyme_tape, buf, a,
                                               enzyme_const, 1.0, 1.0));
  }
  /* enzyme_nofree: the reverse call runs again on the same tape, as often as asked, then once without it */
  aug_t t = __enzyme_augmentfwd((void *)f, 2.0, enzyme_const, 1.0);
  report("f.2", __enzyme_reverse((void *)f, enzyme_nofree, 2.0, enzyme_const, 1.0, 1.0, t.tape));
  report("f.3", __enzyme_reverse((void *)f, enzyme_nofree, 2.0, enzyme_const, 1.0, 2.0, t.tape));
  report("f.4", __enzyme_reverse((void *)f, 2.0, enzyme_const, 1.0, 1.0, t.tape));
  /* heap memory, a recursive call with a tape of its own, seeds of several sizes */
  double x[3] = {0.5, -1.5, 2.0};
  aug_t u = __enzyme_augmentfwd((void *)g, enzyme_dup, x, (double[3]){0}, enzyme_const, 3);
  char name[16];
  for (int r = 0; r < 3; r++) {
    double dx[3] = {0};
    __enzyme_reverse_v((void *)g, enzyme_nofree, enzyme_dup, x, dx, enzyme_const, 3, 1.0 + r, u.tape);
    for (int i = 0; i < 3; i++) {
      snprintf(name, sizeof name, "g.%d.%d", r, i);
      report(name, dx[i] / (1.0 + r));
    }
  }
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "g.exact.%d", i);
    report(name, 2 * x[i] * (i + 1) + x[0] * x[1] * x[2] / x[i]);
  }
  free(u.tape);
  fflush(stdout);
  if (argc > 1) {  /* a caller's buffer used by two reverse calls without enzyme_nofree */
    __enzyme_augmentfwd((void *)f, enzyme_allocated, size, enzyme_tape, buf, 2.0, enzyme_const, 1.0);
    __enzyme_reverse((void *)f, enzyme_allocated, size, enzyme_tape, buf, 2.0, enzyme_const, 1.0, 1.0);
    report("f.5", __enzyme_reverse((void *)f, enzyme_allocated, size, enzyme_tape, buf, 2.0, enzyme_const, 1.0,
                                   1.0));
  }
  free(buf);  /* (t.tape: freed by the last reverse call, without enzyme_nofree) */
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_reverse_calls_on_one_tape(enzcc, opt):
    """With enzyme_nofree, __enzyme_reverse runs on a copy of the tape and releases nothing, so it runs again
    on the same tape (it gave wrong values, or crashed): a loop tape, heap memory whose shadow is zeroed for
    the next run, a recursive callee's own tape. Without it, a reverse call consumes the tape: a second one on
    a caller's buffer stops with a message. A buffer written again by an augmented call serves again."""
    v = build_and_run(enzcc, REVERSE_TWICE, opt)
    assert (v["f.0"], v["f.1"], v["f.2"], v["f.3"], v["f.4"]) == (5.0, 7.0, 5.0, 10.0, 5.0)
    for r in range(3):
        for i in range(3):
            assert v[f"g.{r}.{i}"] == pytest.approx(v[f"g.exact.{i}"], rel=1e-14), (r, i)
    r = enzcc.run("./t", "again", check=False)
    assert r.returncode != 0 and "f.5" not in r.stdout, r
    assert r.stderr.strip() == "enzcc: the tape of 'f' was already used by a reverse call: enzcc's reverse " \
        "function consumes its tape (enzyme_nofree keeps its memory, not what it held), so a tape serves one " \
        "__enzyme_reverse", r.stderr


LOGGED = r"""
extern int enzyme_const;
typedef struct { void *tape; double y; } aug_t;
aug_t __enzyme_augmentfwd(void *, ...);
double __enzyme_fwdsplit(void *, ...);
int logged;
__attribute__((noinline)) void log_value(double v) { logged++; }
void *__enzyme_inactivefn[] = {(void *)log_value};
double f(double x) { double y = x * x * x; log_value(y); return y; }
int main(void) {
  aug_t t = __enzyme_augmentfwd((void *)f, 2.0);
  report("y", t.y);
  report("t", __enzyme_fwdsplit((void *)f, 2.0, 1.0, t.tape));
  report("logged", logged);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_the_tangent_half_does_not_run_primal_calls(enzcc, opt):
    """A call without derivative (an inactive function) runs in the augmented primal only."""
    v = build_and_run(enzcc, LOGGED, opt)
    assert (v["y"], v["t"], v["logged"]) == (8, 12, 1)


# add's registered split derivative differs from the automatic one on purpose (its tangent is
# dx * (1 + x*y) + dy, x*y from its own tape): a test fails if the registration is ignored
REGISTERED = r"""
extern int enzyme_const, enzyme_dup;
static int n_add, n_aug, n_err, top;
static double pool[64];
__attribute__((noinline)) double add(double x, double y) { n_add++; return x + y; }
typedef struct { void *tape; double r; } add_aug_t;
typedef struct { double r, t; } add_err_t;
add_aug_t add_aug(double x, double y) { n_aug++; pool[top] = x * y; add_aug_t a = {&pool[top++], x + y}; return a; }
add_err_t add_err(double x, double dx, double y, double dy, void *tape) {
  n_err++; add_err_t r = {x + y, dx * (1 + *(double *)tape) + dy}; return r;
}
void *__enzyme_register_splitderivative_add[3] = {(void *)add, (void *)add_aug, (void *)add_err};
double g(double x, double c) { double a = add(x, c); return a * a; }
double h(double *x, int n, double c) { double s = 0; for (int i = 0; i < n; i++) s += add(x[i], c) * x[i]; return s; }
"""

REGISTERED_MAIN = r"""
int main(void) {
  aug_t a = __enzyme_augmentfwd_r((void *)g, 1.5, enzyme_const, 0.5);
  report("g", a.y);
  report("dg1", __enzyme_fwdsplit((void *)g, enzyme_nofree, 1.5, 1.0, enzyme_const, 0.5, a.tape));
  report("dg2", __enzyme_fwdsplit((void *)g, 1.5, 2.0, enzyme_const, 0.5, a.tape));
  double x[3] = {1, 2, -1}, dx[3] = {1, 0.5, 2};
  long size = __enzyme_augmentsize((void *)h, enzyme_dup, enzyme_const, enzyme_const);
  void *buf = malloc(size);
  __enzyme_augmentfwd((void *)h, enzyme_allocated, size, enzyme_tape, buf, x, (double *)0, enzyme_const, 3,
                      enzyme_const, 0.25);
  for (int i = 0; i < 3; i++) x[i] = NAN;
  report("dh", __enzyme_fwdsplit((void *)h, enzyme_allocated, size, enzyme_tape, buf, (double *)0, dx,
                                 enzyme_const, 3, enzyme_const, 0.25));
  free(buf);
  aug_t b = __enzyme_augmentfwd_r((void *)add, 2.0, 3.0);
  report("add", b.y);
  report("dadd", __enzyme_fwdsplit((void *)add, 2.0, 1.0, 3.0, 0.5, b.tape));
  report("n_add", n_add); report("n_aug", n_aug); report("n_err", n_err);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_registered_split_derivative(enzcc, opt):
    """__enzyme_register_splitderivative_add = {add, add_aug, add_err}: the augmented primal calls add_aug (add
    itself never runs), the tangent calls add_err with add_aug's tape, also in a loop (the growing part), and
    for add itself."""
    v = build_and_run(enzcc, DECLS + REGISTERED + REGISTERED_MAIN, opt)
    assert v["g"] == 4.0
    # g = add(x, c)^2: 2 (x + c) * dx (1 + x c), at x = 1.5, c = 0.5 (the automatic tangent: 2 (x + c) dx)
    assert (v["dg1"], v["dg2"]) == (pytest.approx(4 * 1.75), pytest.approx(8 * 1.75))
    want = sum(d * (1 + x * 0.25) * x + (x + 0.25) * d for x, d in zip([1, 2, -1], [1, 0.5, 2]))
    assert v["dh"] == pytest.approx(want, rel=1e-14)
    assert (v["add"], v["dadd"]) == (5.0, pytest.approx(1 * (1 + 6.0) + 0.5))
    assert (v["n_add"], v["n_aug"], v["n_err"]) == (0, 5, 6)


def test_registered_split_derivative_errors(enzcc):
    for call, mode in (("__enzyme_autodiff((void *)g, 1.0, enzyme_const, 2.0)", "register a gradient"),
                       ("__enzyme_fwddiff((void *)g, 1.0, 1.0, enzyme_const, 2.0)", "register a forward derivative")):
        _refused(enzcc, REGISTERED + "double __enzyme_autodiff(void *, ...); double __enzyme_fwddiff(void *, ...);"
                 f"int main(void) {{ return {call} > 0; }}", f"'add' has only a forward split mode derivative "
                 f"registered (__enzyme_register_splitderivative_*); {mode}")
    _refused(enzcc, REGISTERED.replace("void *tape) {", "void *tape, int k) {") +
             "int main(void) { aug_t a = __enzyme_augmentfwd_r((void *)g, 1.5, enzyme_const, 0.5);"
             "return __enzyme_fwdsplit((void *)g, 1.5, 1.0, enzyme_const, 0.5, a.tape) > 0; }",
             "the tangent function 'add_err' registered for 'add' has parameters (double, double, double, double, "
             "ptr, i32); Enzyme's convention needs (double, double, double, double, ptr)")
    fwd = REGISTERED.replace("void *__enzyme_register_splitderivative_add[3] = {(void *)add, (void *)add_aug, "
                             "(void *)add_err};", "void *__enzyme_register_derivative_add[2] = {(void *)add, "
                             "(void *)add_err};")
    _refused(enzcc, fwd.replace(", void *tape) {", ") { void *tape = pool;") +
             "int main(void) { aug_t a = __enzyme_augmentfwd_r((void *)g, 1.5, enzyme_const, 0.5);"
             "return __enzyme_fwdsplit((void *)g, 1.5, 1.0, enzyme_const, 0.5, a.tape) > 0; }",
             "forward split mode with a call to 'add', whose registered forward derivative computes the result")
