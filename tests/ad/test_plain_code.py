"""Plain C code that real libraries put in differentiated functions: a variadic logger, a function pointer
with a default, integer roundings of floats, a helper that ends the program on an error path, and errors
naming the function the offending call is written in. Gradients against analytic values and finite
differences, at -O0 and -O2."""

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22")

OPTS = ["-O0", "-O2"]


def _fails(enzcc, src, *flags):
    """Compiling ``src`` fails with one line (no traceback, no program); returns the line."""
    enzcc.write("e.c", PRELUDE + src)
    r = enzcc(*flags, "e.c", "-lm", "-o", "e", check=False)
    assert r.returncode not in (0, 134) and "Traceback" not in r.stderr, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert not (enzcc.cwd / "e").exists()
    return lines[0]


# -- 1. a variadic function called from differentiated code -----------------------------------------------

VARIADIC = r"""
#include <stdarg.h>
int verbose;
__attribute__((noinline)) void logmsg(const char *fmt, ...) {
  if (!verbose) return;
  va_list ap; va_start(ap, fmt); vfprintf(stderr, fmt, ap); va_end(ap);
}
double f(double x) {
  logmsg("x=%g step=%d\n", x, 3);   /* a double passed only for printing */
  double y = x * x * sin(x);
  logmsg("y=%g\n", y);
  return y;
}
static double fd(double x) { double h = 1e-6; return (f(x + h) - f(x - h)) / (2 * h); }
int main(int argc, char **argv) {
  verbose = argc > 1;
  double x = 1.3;
  report("ad.r", __enzyme_autodiff((void *)f, x));
  report("ad.f", __enzyme_fwddiff((void *)f, x, 1.0));
  report("an.r", 2 * x * sin(x) + x * x * cos(x));
  report("an.f", 2 * x * sin(x) + x * x * cos(x));
  report("fd.r", fd(x));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS + ["-O0 -g"])
def test_variadic_logger_stays_a_call(enzcc, opt):
    v = build_and_run(enzcc, VARIADIC, *opt.split()[:1], extra=tuple(opt.split()[1:]))
    assert_close(v, "ad.", "an.")
    assert abs(v["fd.r"] - v["an.r"]) < 1e-6
    out = enzcc.run("./t", "verbose")  # the primal call still logs
    assert "x=1.3 step=3" in out.stderr and "y=" in out.stderr


@pytest.mark.parametrize("opt", OPTS)
def test_variadic_with_derivatives_is_refused(enzcc, opt):
    src = r"""
#include <stdarg.h>
__attribute__((noinline)) double sumv(int n, ...) {
  va_list ap; va_start(ap, n); double s = 0;
  for (int i = 0; i < n; i++) s += va_arg(ap, double);
  va_end(ap); return s;
}
double f(double x) { return sumv(2, x, x * x); }
int main(void) { printf("%g\n", __enzyme_autodiff((void *)f, 2.0)); return 0; }
"""
    line = _fails(enzcc, src, opt)
    assert "variadic function 'sumv'" in line and "not supported" in line


# -- 2. a function pointer field defaulted before the call ------------------------------------------------

FNPTR = r"""
double dflt(double x) { return x * x; }
double cube(double x) { return x * x * x; }
struct S { double (*fn)(double); double a; };
double f(struct S *s) { double (*g)(double) = s->fn; if (!g) g = dflt; return g(s->a) * s->a; }
int main(void) {
  double a = 1.5;
  struct S s = {0, a}, ds = {0, 0};
  __enzyme_autodiff((void *)f, enzyme_dup, &s, &ds);
  report("ad.dflt", ds.a); report("an.dflt", 3 * a * a);
  struct S t = {cube, a}, dt = {cube, 0};
  __enzyme_autodiff((void *)f, enzyme_dup, &t, &dt);
  report("ad.cube", dt.a); report("an.cube", 4 * a * a * a);
  struct S u = {0, a}, du = {0, 1};
  report("ad.fwd", __enzyme_fwddiff((void *)f, enzyme_dup, &u, &du)); report("an.fwd", 3 * a * a);
  double h = 1e-6; struct S p = {0, a + h}, m = {0, a - h};
  report("fd.dflt", (f(&p) - f(&m)) / (2 * h)); report("an2.dflt", 3 * a * a);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_function_pointer_with_default(enzcc, opt):
    v = build_and_run(enzcc, FNPTR, opt)
    assert_close(v, "ad.", "an.")
    assert_close(v, "fd.", "an2.", rel=1e-6, abs_=1e-6)


# -- 3. integers of floats: zero derivative ---------------------------------------------------------------

ROUNDING = r"""
double f(double x) {
  long k = lround(x);              /* the libm call, or llvm.lround with -fno-math-errno */
  long long r = llrint(x * 2);
  int n = __builtin_isnan(x) ? 0 : 1;
  return x * x * (double)(k + n) + (double)r * x;
}
int main(void) {
  double x = 2.3, h = 1e-6;
  report("ad.r", __enzyme_autodiff((void *)f, x));
  report("ad.f", __enzyme_fwddiff((void *)f, x, 1.0));
  report("an.r", 2 * x * 3 + 5); report("an.f", 2 * x * 3 + 5);
  report("fd.r", (f(x + h) - f(x - h)) / (2 * h));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS + ["-O2 -fno-math-errno"])
def test_integer_roundings_are_inactive(enzcc, opt):
    v = build_and_run(enzcc, ROUNDING, opt.split()[0], extra=tuple(opt.split()[1:]))
    assert_close(v, "ad.", "an.")
    assert abs(v["fd.r"] - v["an.r"]) < 1e-5


def test_llvm_lround_is_emitted(enzcc):
    """(the -fno-math-errno case above does differentiate the intrinsic)"""
    enzcc.write("r.c", PRELUDE + "long g(double x) { return lround(x); }\n")
    enzcc("-O2", "-fno-math-errno", "-S", "-emit-llvm", "r.c", "-o", "r.ll")
    assert "llvm.lround" in (enzcc.cwd / "r.ll").read_text()


RUST_CAST = """extern "C" {
    fn __enzyme_autodiff(f: extern "C" fn(f64) -> f64, x: f64) -> f64;
    fn __enzyme_fwddiff(f: extern "C" fn(f64) -> f64, x: f64, dx: f64) -> f64;
}
#[no_mangle]
pub extern "C" fn rcast(x: f64) -> f64 { let k = (x * 2.0) as i32; x * x * (k as f64) }
#[no_mangle]
pub extern "C" fn rust_grad(x: f64) -> f64 { unsafe { __enzyme_autodiff(rcast, x) } }
#[no_mangle]
pub extern "C" fn rust_tangent(x: f64) -> f64 { unsafe { __enzyme_fwddiff(rcast, x, 1.0) } }
"""


@need("rustc")
@pytest.mark.parametrize("opt", OPTS)
def test_rust_saturating_cast(enzcc, opt):
    enzcc.write("r.rs", RUST_CAST)
    enzcc.write("main.c", '#include <stdio.h>\ndouble rust_grad(double), rust_tangent(double);\n'
                          'int main(void) { printf("%.17g %.17g %.17g\\n", rust_grad(2.3), rust_tangent(2.3), '
                          '2 * 2.3 * 4); return 0; }\n')
    enzcc(opt, "main.c", "r.rs", "-o", "prog")  # (`as i32`: llvm.fptosi.sat, an integer: no derivative)
    a, t, b = map(float, enzcc.run("./prog").stdout.split())
    assert abs(a - b) < 1e-12 and abs(t - b) < 1e-12


# -- 4. a helper that ends the program on an error path ---------------------------------------------------

EXIT = r"""
__attribute__((noinline)) void die(const char *msg, double v) { fprintf(stderr, "%s %g\n", msg, v); exit(3); }
__attribute__((noinline)) double check(double x) {
  if (x < 0) die("negative", x);
  return sqrt(x);
}
double f(double x) { return check(x) * x; }
int main(int argc, char **argv) {
  double x = argc > 1 ? -1.0 : 2.0, h = 1e-6;
  report("ad.r", __enzyme_autodiff((void *)f, x));
  report("ad.f", __enzyme_fwddiff((void *)f, x, 1.0));
  report("an.r", 1.5 * sqrt(x)); report("an.f", 1.5 * sqrt(x));
  report("fd.r", (f(x + h) - f(x - h)) / (2 * h));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("inline", ["auto", "none"])
def test_helper_calling_exit(enzcc, opt, inline):
    v = build_and_run(enzcc, EXIT, opt, extra=(f"--ad-inline={inline}",))
    assert_close(v, "ad.", "an.")
    assert abs(v["fd.r"] - v["an.r"]) < 1e-6
    r = enzcc.run("./t", "bad", check=False)  # the error path ends the program in the derivative too
    assert r.returncode == 3 and "negative -1" in r.stderr and "ad.r" not in r.stdout


def test_differentiating_a_function_that_never_returns(enzcc):
    src = r"""
void die(double x) { fprintf(stderr, "%g\n", x); exit(1); }
int main(void) { __enzyme_autodiff((void *)die, 2.0); return 0; }
"""
    line = _fails(enzcc, src, "-O0")
    assert "'die' never returns" in line and "__enzcc" not in line


# -- 5. errors name the function the call is written in ---------------------------------------------------

STRCPY = r"""
static void helper(char *buf, const char *s) {
  strcpy(buf, s);
}
double f(double *x, const char *s) { helper((char *)x, s); return x[0] * x[0]; }
int main(int argc, char **argv) {
  double x[2] = {1, 2}, dx[2] = {0, 0};
  __enzyme_autodiff((void *)f, x, dx, enzyme_const, argv[0]);
  return 0;
}
"""


@pytest.mark.parametrize("flags", [("-O0",), ("-O0", "-g"), ("-O2", "-g")])
def test_error_names_the_inlined_helper(enzcc, flags):
    line = _fails(enzcc, STRCPY, *flags)
    assert "no derivative rule for call to 'strcpy'" in line
    assert "in function 'helper'" in line
    if "-g" in flags:
        line_no = PRELUDE.count("\n") + 3  # strcpy's line in e.c
        assert f"e.c:{line_no}:" in line
