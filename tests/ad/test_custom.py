"""Derivatives the user registers (``__enzyme_register_gradient_*``, ``__enzyme_register_derivative_*``), with
Enzyme's calling conventions, at -O0..-O3. The registered derivatives are deliberately not the true ones
(scaled), so each test fails if the registration were ignored."""

import pytest

from adharness import PRELUDE, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

OPTS = ["-O0", "-O1", "-O2", "-O3"]

CUSTOM = r"""
/* f(x) = x^2 with registered derivatives 100x the true ones; the augmented function returns {tape, result} */
__attribute__((noinline)) double f(double x) { return x * x; }
typedef struct { void *tape; double y; } aug_t;
aug_t f_aug(double x) { double *t = malloc(sizeof(double)); *t = x; aug_t r = {t, x * x}; return r; }
double f_rev(double x, double d, void *tape) { double v = *(double *)tape; free(tape); return 100.0 * 2 * v * d; }
void *__enzyme_register_gradient_f[3] = {(void *)f, (void *)f_aug, (void *)f_rev};
typedef struct { double v, d; } dual;
dual f_fwd(double x, double dx) { dual r = {x * x, 100.0 * 2 * x * dx}; return r; }
void *__enzyme_register_derivative_f[2] = {(void *)f, (void *)f_fwd};

/* g: memory in and out, no tape (both void); the int is passed twice, as Enzyme does; 10x the true one */
void g(double *x, int n, double *out) { double s = 0; for (int i = 0; i < n; i++) s += x[i] * x[i]; out[0] = s; }
void g_aug(double *x, double *dx, int n, int n2, double *out, double *dout) { g(x, n, out); }
void g_rev(double *x, double *dx, int n, int n2, double *out, double *dout) {
  for (int i = 0; i < n; i++) dx[i] += 10 * 2 * x[i] * dout[0];
  dout[0] = 0;
}
void *__enzyme_register_gradient_g[3] = {(void *)g, (void *)g_aug, (void *)g_rev};
void g_fwd(double *x, double *dx, int n, int n2, double *out, double *dout) {
  g(x, n, out);
  dout[0] = 0;
  for (int i = 0; i < n; i++) dout[0] += 10 * 2 * x[i] * dx[i];
}
void *__enzyme_register_derivative_g[2] = {(void *)g, (void *)g_fwd};

double h(double x) { return f(sin(x)) + 3 * x; }
/* k = S x0 with S = x0^2 + x1^2 from g, called in a loop (a tape per call) */
double k(double *x, int n) {
  double acc = 0, o[1];
  for (int r = 0; r < 3; r++) { g(x, n, o); acc += o[0] * x[0] + f(x[1] * r); }
  return acc;
}
int main(void) {
  double x = 0.5;
  report("h.exact", 100 * 2 * sin(x) * cos(x) + 3);
  report("h.rev", __enzyme_autodiff((void *)h, x));
  report("h.fwd", __enzyme_fwddiff((void *)h, x, 1.0));
  report("f.rev", __enzyme_autodiff((void *)f, x));
  report("f.fwd", __enzyme_fwddiff((void *)f, x, 1.0));
  double a[2] = {1, 2}, da[2] = {0};
  __enzyme_autodiff((void *)k, enzyme_dup, a, da, enzyme_const, 2);
  report("k.rev.0", da[0]);
  report("k.rev.1", da[1]);
  double t0[2] = {1, 0}, t1[2] = {0, 1};
  report("k.fwd.0", __enzyme_fwddiff((void *)k, enzyme_dup, a, t0, enzyme_const, 2));
  report("k.fwd.1", __enzyme_fwddiff((void *)k, enzyme_dup, a, t1, enzyme_const, 2));
  /* per round r: d/dx0 = 10*2*x0*x0 + S, d/dx1 = 10*2*x1*x0 + 100*2*(x1 r) r */
  double S = a[0] * a[0] + a[1] * a[1], e0 = 0, e1 = 0;
  for (int r = 0; r < 3; r++) { e0 += 20 * a[0] * a[0] + S; e1 += 20 * a[1] * a[0] + 200 * a[1] * r * r; }
  report("k.exact.0", e0);
  report("k.exact.1", e1);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_registered_derivatives_are_used(enzcc, opt):
    v = build_and_run(enzcc, CUSTOM, opt)
    for key in ("h.rev", "h.fwd"):
        assert v[key] == pytest.approx(v["h.exact"], rel=1e-12)
    assert v["f.rev"] == pytest.approx(100.0, rel=1e-12) and v["f.fwd"] == pytest.approx(100.0, rel=1e-12)
    for i in (0, 1):
        for mode in ("rev", "fwd"):
            assert v[f"k.{mode}.{i}"] == pytest.approx(v[f"k.exact.{i}"], rel=1e-12), (mode, i, v)


def _refused(enzcc, source: str, message: str) -> None:
    enzcc.write("r.c", PRELUDE + source)
    r = enzcc("-O2", "-w", "r.c", "-lm", "-o", "r", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert message in r.stderr, r.stderr
    assert not (enzcc.cwd / "r").exists()


BAD = r"""
__attribute__((noinline)) double f(double x) { return x * x; }
AUG
REV
void *__enzyme_register_gradient_f[3] = {(void *)f, (void *)f_aug, (void *)f_rev};
double h(double x) { return f(x) * 2; }
int main(void) { report("r", __enzyme_autodiff((void *)h, 0.5)); return 0; }
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_augmented_function_without_the_result(enzcc, opt):
    """Enzyme's f_aug returns the result only when it is a pointer: with a void f_aug, the forward code calls
    f for the result. f_rev's derivative (3x, not f's 2x) shows the registration is used."""
    src = BAD.replace("AUG", "int aug_calls; void f_aug(double x) { aug_calls++; }") \
             .replace("REV", "double f_rev(double x, double d) { return 3 * x * d; }") \
             .replace('report("r", __enzyme_autodiff((void *)h, 0.5));',
                      'report("r", __enzyme_autodiff((void *)h, 0.5)); report("calls", aug_calls);')
    assert build_and_run(enzcc, src, opt) == {"r": 3.0, "calls": 1.0}


def test_mismatched_registrations_are_errors(enzcc):
    good_aug = "double f_aug(double x) { return x * x; }"
    good_rev = "double f_rev(double x, double d) { return 2 * x * d; }"
    _refused(enzcc, BAD.replace("AUG", good_aug).replace("REV", "double f_rev(double x) { return 2 * x; }"),
             "the reverse function 'f_rev' registered for 'f' has parameters (double); Enzyme's convention "
             "needs (double, double)")
    _refused(enzcc, BAD.replace("AUG", good_aug).replace("REV", "double f_rev(double x, double d, void *t) "
                                                         "{ return 2 * x * d; }"),
             "takes a tape, but 'f_aug' returns none")
    _refused(enzcc, BAD.replace("AUG", good_aug).replace("REV", "float f_rev(double x, double d) { return 1; }"),
             "it must return the derivatives of the float parameters")
    _refused(enzcc, BAD.replace("AUG", good_aug).replace("REV", good_rev).replace("(void *)f_rev}", "}"),
             "must be {(void *)f, (void *)augment, (void *)reverse}")
