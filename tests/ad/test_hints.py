"""What the user tells the AD engine about functions (Enzyme's globals and attributes), at -O0..-O3: each
hint changes the gradient (the test fails if it is ignored), and every Enzyme global or marker enzcc does not
implement is a one-line error."""

import pytest

from adharness import PRELUDE, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

OPTS = ["-O0", "-O1", "-O2", "-O3"]

# h is small enough that -O2 would inline it before AD: its hint must survive that
INACTIVE = r"""
double h(double x) { return 5 * x; }
HINT
double g(double x) { return h(x) * x; }   /* with h inactive: dg/dx = h(x) = 5x, not 10x */
int main(void) {
  report("rev", __enzyme_autodiff((void *)g, 3.0));
  report("fwd", __enzyme_fwddiff((void *)g, 3.0, 1.0));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("hint", ["attribute", "noblock", "global"])
def test_inactive_function(enzcc, opt, hint):
    attr = {"attribute": "enzyme_inactive", "noblock": "enzyme_inactive_noblock"}.get(hint)
    src = INACTIVE.replace("double h(", f"__attribute__(({attr})) double h(") if attr \
        else INACTIVE.replace("HINT", "void *__enzyme_inactivefn[] = {(void *)h};")
    v = build_and_run(enzcc, src.replace("HINT", ""), opt)
    assert (v["rev"], v["fwd"]) == (15.0, 15.0)


NOFREE = r"""
__attribute__((enzyme_nofree)) double sq(double x) { return x * x; }
double g(double x) { return sq(x) + x; }
int main(void) { report("rev", __enzyme_autodiff((void *)g, 3.0)); return 0; }
"""


@pytest.mark.parametrize("attr", ["enzyme_nofree", "enzyme_notypeanalysis", "enzyme_no_escaping_allocation"])
def test_promise_attributes_are_accepted(enzcc, attr):
    """No unknown-attribute warning either, except for ``enzyme_nofree``: that is also the marker global
    ``int enzyme_nofree;`` (split mode), which no macro of enzcc's may rename, so clang says it ignores the
    attribute (a promise enzcc does not need)."""
    enzcc.write("n.c", PRELUDE + NOFREE.replace("enzyme_nofree", attr) + "int enzyme_nofree;\n")
    warn = attr == "enzyme_nofree"
    r = enzcc("-O2", *([] if warn else ["-Werror"]), "n.c", "-lm", "-o", "n", check=False)
    assert r.returncode == 0, r.stderr
    assert ("unknown attribute 'enzyme_nofree' ignored" in r.stderr) == warn, r.stderr
    assert enzcc.run("./n").stdout.split() == ["rev", "7"]


def test_unimplemented_attribute_is_an_error(enzcc):
    _refused(enzcc, NOFREE.replace("enzyme_nofree", "enzyme_sparse_accumulate"),
             "attribute enzyme_sparse_accumulate on 'sq' is not supported by enzcc")


# globals whose shadows the program declares: g only read, acc written; the shadows persist across calls
SHADOWS = r"""
double g_shadow, acc_shadow, unused_shadow = 7;
__attribute__((enzyme_shadow(g_shadow))) double g = 2.0;
__attribute__((enzyme_shadow(acc_shadow))) double acc;
__attribute__((enzyme_shadow(unused_shadow))) double unused = 1.0;
__attribute__((noinline)) double f(double x) { acc = g * x; return acc * x + sin(g); }
int main(void) {
  double x = 3.0;
  report("dx", __enzyme_autodiff((void *)f, x));   /* 2 g x */
  report("dg", g_shadow);                          /* x^2 + cos(g) */
  report("dacc", acc_shadow);                      /* the store of acc overwrote it: 0 */
  report("dx2", __enzyme_autodiff((void *)f, x));
  report("dg2", g_shadow);                         /* accumulated: twice */
  g_shadow = 1.0;
  report("fwd", __enzyme_fwddiff((void *)f, x, 0.0));  /* tangent of g: x^2 + cos(g) */
  report("unused", unused_shadow);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_declared_global_shadows(enzcc, opt):
    import math

    v = build_and_run(enzcc, SHADOWS, opt)
    x, g = 3.0, 2.0
    assert v["dx"] == v["dx2"] == pytest.approx(2 * g * x)
    assert v["dg"] == pytest.approx(x * x + math.cos(g)) and v["dg2"] == pytest.approx(2 * (x * x + math.cos(g)))
    assert v["dacc"] == 0 and v["unused"] == 7
    assert v["fwd"] == pytest.approx(x * x + math.cos(g))


SCOPED = r"""
namespace phys {
struct Params {
  static double offset_shadow;
  __attribute__((enzyme_shadow(offset_shadow))) static double offset;
};
double Params::offset_shadow = 0, Params::offset = 1.5;
}
__attribute__((noinline)) double f(double x) { return phys::Params::offset * x * x; }
int main() {
  report("dx", __enzyme_autodiff((void *)f, 2.0));
  report("doffset", phys::Params::offset_shadow);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_declared_shadow_of_a_class_member(enzcc, opt):
    enzcc.write("s.cpp", PRELUDE + SCOPED)
    enzcc(opt, "s.cpp", "-o", "s", cmd="enzcc++")
    assert enzcc.run("./s").stdout.split() == ["dx", "6", "doffset", "4"]


def test_declared_shadow_errors(enzcc):
    _refused(enzcc, "__attribute__((enzyme_shadow(nowhere))) double scale = 2.0;\n" +
             NOFREE.replace("return sq(x) + x;", "return sq(x) * scale;"),
             "enzyme_shadow(nowhere) on 'scale': no global variable 'nowhere' is defined in this program")
    _refused(enzcc, "float s;\n__attribute__((enzyme_shadow(s))) double scale = 2.0;\n" +
             NOFREE.replace("return sq(x) + x;", "return sq(x) * scale;"),
             "enzyme_shadow: 's' must be a mutable global of the type of 'scale' (double)")
    _refused(enzcc, "double s;\n__attribute__((enzyme_shadow(s))) double scale = 2.0;\n" +
             NOFREE.replace("return sq(x) + x;", "return sq(x) * scale;").replace(
                 'report("rev", __enzyme_autodiff((void *)g, 3.0));',
                 "double d = __enzyme_fwddiff((void *)dg, 3.0, 1.0); report(\"rev\", d);").replace(
                 "int main", "double dg(double x) { return __enzyme_autodiff((void *)g, x); }\nint main"),
             "differentiated code writes 's', the shadow enzyme_shadow declares for 'scale'")


# mylog truncates to 6 decimals: its automatic derivative is 0 (fptosi), log's rule gives 1/x
LIKE = r"""
double mylog(double x) { return (double)(long)(log(x) * 1e6) / 1e6; }
void *__enzyme_function_like[2] = {(void *)mylog, (void *)"log"};
double g(double x) { return mylog(x * x); }
int main(void) {
  report("rev", __enzyme_autodiff((void *)g, 3.0));
  report("fwd", __enzyme_fwddiff((void *)g, 3.0, 1.0));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_function_like_uses_the_named_rule(enzcc, opt):
    v = build_and_run(enzcc, LIKE, opt)
    assert v["rev"] == pytest.approx(2 / 3.0, rel=1e-12)
    assert v["fwd"] == pytest.approx(2 / 3.0, rel=1e-12)


def _refused(enzcc, source: str, message: str, opt: str = "-O2") -> None:
    enzcc.write("r.c", PRELUDE + source)
    r = enzcc(opt, "-w", "r.c", "-lm", "-o", "r", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert message in r.stderr
    assert not (enzcc.cwd / "r").exists()


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_registrations_enzcc_cannot_use_are_errors(enzcc, opt):
    _refused(enzcc, INACTIVE.replace("HINT", "void *__enzyme_allocation_like[4] = {(void *)h, (void *)0, "
                                             "(void *)\"0\", (void *)h};"), "@__enzyme_allocation_like must be", opt)
    _refused(enzcc, INACTIVE.replace("HINT", "void *__enzyme_register_splitderivative_h[3] = "
                                             "{(void *)h, (void *)h, (void *)h};"),
             "'h' has only a forward split mode derivative registered", opt)
    _refused(enzcc, "void *__enzyme_made_up[1] = {0};\n" + INACTIVE.replace("HINT", ""),
             "@__enzyme_made_up is not an Enzyme global enzcc knows", opt)


BY_ADDRESS = r"""
double f(double *x, double s, int n) { double r = 0; for (int i = 0; i < n; i++) r += x[i] * x[i] * s; return r; }
int main(void) {
  double x[3] = {1, 2, 3}, dx[3] = {0}, tx[3] = {1, 0, 0};
  report("ds", __enzyme_autodiff((void *)f, &enzyme_dup, x, dx, &enzyme_out, 2.0, &enzyme_const, 3));
  report("dx1", dx[1]);
  report("fwd", __enzyme_fwddiff((void *)f, &enzyme_dup, x, tx, &enzyme_const, 2.0, &enzyme_const, 3));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_markers_passed_by_address(enzcc, opt):
    # Enzyme also accepts &enzyme_dup for enzyme_dup
    v = build_and_run(enzcc, BY_ADDRESS, opt)
    assert (v["ds"], v["dx1"], v["fwd"]) == (14.0, 8.0, 4.0)


def test_unknown_marker_is_an_error(enzcc):
    _refused(enzcc, r"""
extern int enzyme_dup_return;
double *g(double *x) { return x; }
int main(void) {
  double x[2] = {1, 2}, dx[2] = {0};
  __enzyme_autodiff((void *)g, enzyme_dup_return, enzyme_dup, x, dx);
  return 0;
}
""", "enzyme_dup_return is not supported by enzcc")


def test_function_like_needs_a_string(enzcc):
    _refused(enzcc, LIKE.replace('(void *)"log"', "(void *)0"), 'must be {(void *)function, (void *)"name"}')


GLOBALS = r"""
double G;
void *__enzyme_inactive_global[1] = {(void *)&G};
__attribute__((enzyme_inactive)) double H;
__attribute__((enzyme_function_like("log"))) double mylog(double x) { return (double)(long)(log(x) * 1e6) / 1e6; }
double f(double x) { G = x * x; H = x; return G * x + H + mylog(x); }
int main(void) { report("rev", __enzyme_autodiff((void *)f, 0.7)); return 0; }
"""


def test_inactive_globals_and_the_function_like_attribute(enzcc):
    """Unoptimized, what is stored in the inactive globals loses its derivative, as asked (optimized, the
    stored value may reach its use directly, and its derivative with it); mylog uses log's rule."""
    v = build_and_run(enzcc, GLOBALS, "-O0")
    assert v["rev"] == pytest.approx(0.7 * 0.7 + 1 / 0.7, rel=1e-12)
    v = build_and_run(enzcc, GLOBALS, "-O2")
    assert v["rev"] == pytest.approx(3 * 0.7 * 0.7 + 1 + 1 / 0.7, rel=1e-12)


ALLOCATION_LIKE = r"""
static int live = 0;
void *pool_alloc(void *pool, size_t bytes, int *count) { (*count)++; live++; return malloc(bytes); }
void pool_free(int *count, void *p) { (*count)--; live--; free(p); }
void *__enzyme_allocation_like[4] = {(void *)pool_alloc, (void *)1, (void *)"2,-1", (void *)pool_free};
double f(double *x, int n) {
  int count = 0;
  double *t = pool_alloc(0, n * sizeof(double), &count);
  for (int i = 0; i < n; i++) t[i] = sin(x[i]);
  double s = 0;
  for (int i = 0; i < n; i++) s += t[i] * t[(i + 1) % n];
  pool_free(&count, t);
  return s;
}
int main(void) {
  double x[3] = {0.1, 0.2, 0.3}, dx[3] = {0}, t[3] = {1, 0, 0};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, 3);
  report("rev", dx[0]);
  report("fwd", __enzyme_fwddiff((void *)f, enzyme_dup, x, t, enzyme_const, 3));
  report("exact", cos(0.1) * (sin(0.2) + sin(0.3)));
  report("live", live);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_allocation_like(enzcc, opt):
    """A registered allocator gets its shadows from itself and releases them with its deallocator (every
    allocation it made is released: the counter returns to 0)."""
    v = build_and_run(enzcc, ALLOCATION_LIKE, opt)
    assert v["rev"] == pytest.approx(v["exact"], rel=1e-12) and v["fwd"] == pytest.approx(v["exact"], rel=1e-12)
    assert v["live"] == 0


@pytest.mark.parametrize("entry, message", [
    ('(void *)pool_alloc, (void *)1, (void *)"1,-1", (void *)pool_free',
     "deallocation argument 0 of 'pool_free' is ptr, but argument 1 of 'pool_alloc' is i64"),
    ('(void *)pool_alloc, (void *)1, (void *)"2,-1,2", (void *)pool_free',
     "the deallocation arguments \"2,-1,2\" are 3, 'pool_free' takes 2"),
    ('(void *)pool_alloc, (void *)2, (void *)"2,-1", (void *)pool_free',
     "the size index 2 must name an integer parameter of 'pool_alloc' (ptr, i64, ptr)"),
    ('(void *)pool_alloc, (void *)1, (void *)"5,-1", (void *)pool_free',
     "deallocation argument 0 comes from argument 5 of 'pool_alloc', which takes 3"),
])
def test_allocation_like_that_does_not_fit_its_functions(enzcc, entry, message):
    """An __enzyme_allocation_like entry whose indices do not fit the two functions' parameters is a one-line
    error naming them (it was an internal error, or a call with the wrong arguments)."""
    source = ALLOCATION_LIKE.replace('(void *)pool_alloc, (void *)1, (void *)"2,-1", (void *)pool_free', entry)
    _refused(enzcc, source, f"enzcc: error: __enzyme_allocation_like of 'pool_alloc': {message}", "-O2")
