"""Contexts of global shadows (``__enzyme_context``, ``__enzyme_shadow``, ``__enzyme_zero_shadows``,
``enzyme_context``), at -O0..-O3: derivatives with respect to globals the function only reads, to heap memory a
global points to, accumulation across calls and zeroing, a descriptor whose pointer field points to another
global's shadow, vector lanes from the context's width; analytic values."""

import math

import pytest

from adharness import PRELUDE, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

PROGRAM = r"""extern void *__enzyme_context(int);
extern void *__enzyme_shadow(void *, void *, int);
extern void __enzyme_zero_shadows(void *);
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
extern int enzyme_context, enzyme_const;
typedef struct { double d0, d1; } pair;
extern pair __enzyme_fwddiff2(void *, ...) __asm__("__enzyme_fwddiff");

double scale = 1.5;            /* read only */
double coef[3] = {2, -1, 0.5}; /* read only */
double acc;                    /* written */
double *heap;                  /* points to memory allocated outside differentiated code */
struct { double *data; long n; } view = {coef, 3};

static double f(double x) {
  double s = 0;
  for (int i = 0; i < 3; i++) s += coef[i] * heap[i] * x;
  acc = s * scale;
  return acc * x + sin(scale);
}
/* through a descriptor: g = sum view.data[i] * x^2 */
static double g(double x) {
  double s = 0;
  for (long i = 0; i < view.n; i++) s += view.data[i] * x * x;
  return s;
}
int main(void) {
  heap = malloc(3 * sizeof(double));
  for (int i = 0; i < 3; i++) heap[i] = i + 1;
  void *ctx = __enzyme_context(1);
  double *dscale = __enzyme_shadow(ctx, &scale, 0), *dcoef = __enzyme_shadow(ctx, coef, 0);
  double **dheap = __enzyme_shadow(ctx, &heap, 0);
  report("heap_shadow_distinct", *dheap != heap && *dheap != NULL);
  double x = 0.7;
  /* f = scale x^2 S + sin(scale), S = sum coef_i heap_i = 2 - 2 + 1.5 = 1.5 */
  for (int round = 0; round < 2; round++) {  /* the second round accumulates onto the first */
    double dx = __enzyme_autodiff((void *)f, enzyme_context, ctx, x);
    char k[32];
    snprintf(k, 32, "dx%d", round); report(k, dx);
    snprintf(k, 32, "dscale%d", round); report(k, *dscale);
    snprintf(k, 32, "dcoef1_%d", round); report(k, dcoef[1]);
    snprintf(k, 32, "dheap2_%d", round); report(k, (*dheap)[2]);
  }
  __enzyme_zero_shadows(ctx);
  report("zeroed", *dscale + dcoef[0] + dcoef[1] + dcoef[2] + (*dheap)[0] + (*dheap)[1] + (*dheap)[2]);
  report("heap_kept", *(double **)__enzyme_shadow(ctx, &heap, 0) == *dheap);
  /* forward mode through the descriptor, one lane and two */
  long *dn = __enzyme_shadow(ctx, &view.n, 0);
  double **ddata = __enzyme_shadow(ctx, &view.data, 0);
  report("n_copied", *dn);
  report("data_is_shadow_of_coef", *ddata == dcoef);
  dcoef[0] = 1; dcoef[2] = 1;
  report("fwd", __enzyme_fwddiff((void *)g, enzyme_context, ctx, x, 0.0));   /* (1 + 1) x^2 */
  void *ctx2 = __enzyme_context(2);
  double *c0 = __enzyme_shadow(ctx2, coef, 0), *c1 = __enzyme_shadow(ctx2, coef, 1);
  c0[1] = 1; c1[0] = 1; c1[2] = 1;
  pair t = __enzyme_fwddiff2((void *)g, enzyme_context, ctx2, x, 1.0, 0.0);
  report("lane0", t.d0);  /* x^2 + 2 x sum coef */
  report("lane1", t.d1);  /* 2 x^2 */
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_context_shadows(enzcc, opt):
    v = build_and_run(enzcc, PROGRAM, opt)
    x, scale, S = 0.7, 1.5, 1.5  # f = scale x^2 S + sin(scale), S = sum coef_i heap_i
    want = {"dx": 2 * scale * x * S, "dscale": x * x * S + math.cos(scale), "dcoef1_": scale * x * x * 2,
            "dheap2_": scale * x * x * 0.5}
    for k, w in want.items():
        assert v[f"{k}0"] == pytest.approx(w, rel=1e-12), k
        # the dx result is the same each call; the context's shadows accumulate
        assert v[f"{k}1"] == pytest.approx(w if k == "dx" else 2 * w, rel=1e-12), k
    assert v["heap_shadow_distinct"] == 1 and v["zeroed"] == 0 and v["heap_kept"] == 1
    assert v["n_copied"] == 3 and v["data_is_shadow_of_coef"] == 1
    assert v["fwd"] == pytest.approx(2 * x * x, rel=1e-12)
    assert v["lane0"] == pytest.approx(2 * x * 1.5 + x * x, rel=1e-12)
    assert v["lane1"] == pytest.approx(2 * x * x, rel=1e-12)


DECLS = r"""
extern void *__enzyme_context(int);
extern void *__enzyme_shadow(void *, void *, int);
extern int enzyme_context;
double g = 2.0;
double f(double x) { return g * x * x; }
"""


def _refused(enzcc, source: str, message: str) -> None:
    enzcc.write("r.c", PRELUDE + DECLS + source)
    r = enzcc("-O2", "-w", "r.c", "-lm", "-o", "r", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and message in r.stderr, r.stderr
    assert not (enzcc.cwd / "r").exists()


def test_context_with_split_mode_is_refused(enzcc):
    _refused(enzcc, r"""
void *__enzyme_augmentfwd(void *, ...);
int main(void) { void *c = __enzyme_context(1); __enzyme_augmentfwd((void *)f, enzyme_context, c, 1.0); return 0; }
""", "enzyme_context is supported with __enzyme_fwddiff and __enzyme_autodiff, not __enzyme_augmentfwd")


NESTED = r"""
extern void *__enzyme_context(int);
extern void *__enzyme_shadow(void *, void *, int);
extern void __enzyme_zero_shadows(void *);
extern int enzyme_context;
double g = 2.0, h = 0.5;
static double f(double y) { return g * y * y * y + sin(h * y); }
/* f'(x) + f'(2x)/2 + x^3/4 + (2x)^3/8: two gradients in a context of its own, which holds the adjoint of g; its
   shadows are read and zeroed between them */
__attribute__((noinline)) double df(double x) {
  void *inner = __enzyme_context(1);
  double *dg = __enzyme_shadow(inner, &g, 0);
  double a = __enzyme_autodiff((void *)f, enzyme_context, inner, x);
  double first = *dg;
  __enzyme_zero_shadows(inner);
  double b = __enzyme_autodiff((void *)f, enzyme_context, inner, 2 * x);
  return a + 0.5 * b + 0.25 * first + 0.125 * *dg;
}
int main(void) {
  double x = 0.7, e = 1e-6;
  report("ddx", __enzyme_fwddiff((void *)df, x, 1.0));  /* no outer context: g and h have no derivative */
  report("fd_x", (df(x + e) - df(x - e)) / (2 * e));
  void *outer = __enzyme_context(1);
  double *tg = __enzyme_shadow(outer, &g, 0), *th = __enzyme_shadow(outer, &h, 0);
  *tg = 1.0;
  report("ddg", __enzyme_fwddiff((void *)df, enzyme_context, outer, x, 0.0));
  *tg = 0.0; *th = 1.0;
  report("ddh", __enzyme_fwddiff((void *)df, enzyme_context, outer, x, 0.0));
  *th = 0.0;
  report("ddx_outer", __enzyme_fwddiff((void *)df, enzyme_context, outer, x, 1.0));
  g += e; double up = df(x); g -= 2 * e; double down = df(x); g += e;
  report("fd_g", (up - down) / (2 * e));
  h += e; up = df(x); h -= 2 * e; down = df(x); h += e;
  report("fd_h", (up - down) / (2 * e));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_forward_over_reverse_in_contexts(enzcc, opt):
    # each round has shadows of its own: the outer tangent of g is not the inner adjoint of g
    v = build_and_run(enzcc, NESTED, opt, extra=("-w",))
    x, g, h = 0.7, 2.0, 0.5
    f2 = lambda y: 6 * g * y - h * h * math.sin(h * y)  # noqa: E731
    fh = lambda y: math.cos(h * y) - h * y * math.sin(h * y)  # noqa: E731
    want = {"ddx": f2(x) + f2(2 * x) + 3.75 * x * x, "ddg": 3 * x * x + 6 * x * x, "ddh": fh(x) + 0.5 * fh(2 * x)}
    want["ddx_outer"] = want["ddx"]
    for k, w in want.items():
        assert v[k] == pytest.approx(w, rel=1e-12), k
    for k in ("x", "g", "h"):
        assert v[f"fd_{k}"] == pytest.approx(want[f"dd{k}"], rel=1e-6), k


def test_reverse_over_code_using_a_context_is_refused(enzcc):
    _refused(enzcc, r"""
double df(double x) { void *c = __enzyme_context(1); return __enzyme_autodiff((void *)f, enzyme_context, c, x); }
int main(void) { printf("%g\n", __enzyme_autodiff((void *)df, 1.0)); return 0; }
""", "reverse mode over code that calls __enzyme_context (an enzyme_context) is not supported")


def test_nested_context_with_pointer_globals_is_refused(enzcc):
    _refused(enzcc, r"""
double *p;
double df(double x) { void *c = __enzyme_context(1); return __enzyme_autodiff((void *)f, enzyme_context, c, x); }
int main(void) { p = &g; printf("%g\n", __enzyme_fwddiff((void *)df, 1.0, 1.0)); return 0; }
""", "global 'p' holds pointers")


def test_pointer_global_without_a_context_is_refused(enzcc):
    # the pointer global's shadow exists only in the context: a call without one would read a null shadow
    _refused(enzcc, r"""
double *p;
double h(double x) { return p[0] * x; }
int main(void) {
  p = malloc(8); p[0] = 3;
  void *c = __enzyme_context(1);
  printf("%g %g\n", __enzyme_autodiff((void *)h, enzyme_context, c, 1.0), __enzyme_autodiff((void *)h, 1.0));
  return 0;
}
""", "holds pointers and has derivatives only in an enzyme_context")


def test_shadow_of_an_address_outside_the_globals_stops(enzcc):
    enzcc.write("r.c", PRELUDE + DECLS + r"""
int main(void) {
  void *c = __enzyme_context(1);
  double local = 1;
  printf("%g\n", __enzyme_autodiff((void *)f, enzyme_context, c, 1.0));
  printf("%p\n", __enzyme_shadow(c, &local, 0));
  return 0;
}
""")
    enzcc("-O2", "-w", "r.c", "-lm", "-o", "r")
    r = enzcc.run("./r", check=False)
    assert r.returncode != 0 and "__enzyme_shadow: the address is not in a global variable" in r.stderr, r


def test_context_across_separately_compiled_files(enzcc):
    # the context is made in one object, the global lives in another, the derivative in a third: one layout
    # for the whole program (AD waits for the link, as in split mode)
    enzcc.write("g.c", "double g = 2.0;\nint other[4];\ndouble h = 1.0;\n")
    enzcc.write("f.c", r"""
extern double g, h;
double __enzyme_autodiff(void *, ...);
extern int enzyme_context;
static double f(double x) { return g * x * x + h; }
double df(void *ctx, double x) { return __enzyme_autodiff((void *)f, enzyme_context, ctx, x); }
""")
    enzcc.write("m.c", r"""
#include <stdio.h>
extern double g, h;
extern void *__enzyme_context(int);
extern void *__enzyme_shadow(void *, void *, int);
double df(void *ctx, double x);
int main(void) {
  void *ctx = __enzyme_context(1);
  double *dg = __enzyme_shadow(ctx, &g, 0), *dh = __enzyme_shadow(ctx, &h, 0);
  printf("dx %g dg %g dh %g\n", df(ctx, 3.0), *dg, *dh);
  return 0;
}
""")
    for f in ("g", "f", "m"):
        enzcc("-O2", "-c", f"{f}.c", "-o", f"{f}.o")
    enzcc("-O2", "g.o", "f.o", "m.o", "-o", "t")
    assert enzcc.run("./t").stdout.split() == ["dx", "12", "dg", "9", "dh", "1"]
    # the objects hold no derivatives of their own: a plain linker cannot link them (instead of a context
    # layout made from f.c's globals alone, which gave dg = 0)
    r = enzcc.run("clang-22", "g.o", "f.o", "m.o", "-o", "plain", check=False)
    assert r.returncode != 0 and "undefined reference to `__enzyme_autodiff'" in r.stderr, r


QUERY = r"""
/* Enzyme's own shadows of globals, without a context: __enzyme_shadow(address, width, lane) */
extern void *__enzyme_shadow(void *, int, int);
extern int enzyme_width, enzyme_const;
typedef struct { double d[2]; } two;
two __enzyme_fwddiff2(void *, ...);
void __enzyme_augmentfwd(void *, ...);
double g = 2.0;
struct { double a, b; int n; } blk = {1.0, 3.0, 4};  /* a member at an offset */
double h = 0.5;                                      /* written by f: its adjoint flows into g */
double f(double x) { h = g * x; return h * x + blk.b * x * blk.n; }
int main(void) {
  double *dg = __enzyme_shadow(&g, 1, 0), *db = __enzyme_shadow(&blk.b, 1, 0);
  report("zero.g", *dg);
  report("dx", __enzyme_autodiff((void *)f, 3.0));
  report("rev.g", *dg);                             /* d/dg = x*x */
  report("rev.b", *db);                             /* d/db = n x */
  __enzyme_autodiff((void *)f, 3.0);
  report("rev2.g", *dg);                            /* adjoints add up across calls */
  *dg = 1.0; *db = 0.0;
  report("fwd", __enzyme_fwddiff((void *)f, 3.0, 0.0));
  double *g0 = __enzyme_shadow(&g, 2, 0), *g1 = __enzyme_shadow(&g, 2, 1);
  double *b0 = __enzyme_shadow(&blk.b, 2, 0), *b1 = __enzyme_shadow(&blk.b, 2, 1);
  *g0 = 1.0; *g1 = 0.0; *b0 = 0.0; *b1 = 1.0;
  two t = __enzyme_fwddiff2((void *)f, enzyme_width, 2, 3.0, 0.0, 0.0);
  report("lane0", t.d[0]);
  report("lane1", t.d[1]);
  report("width1.g", *dg);                          /* width 2 has shadows of its own */
  report("same", __enzyme_shadow(&g, 2, 1) == (void *)g1);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_query_form_of_global_shadows(enzcc, opt):
    v = build_and_run(enzcc, QUERY, opt, extra=("-w",))
    x = 3.0
    assert v["zero.g"] == 0
    assert v["dx"] == pytest.approx(2 * 2.0 * x + 3.0 * 4)
    assert v["rev.g"] == pytest.approx(x * x) and v["rev.b"] == pytest.approx(4 * x)
    assert v["rev2.g"] == pytest.approx(2 * x * x)
    assert v["fwd"] == pytest.approx(x * x)
    assert v["lane0"] == pytest.approx(x * x) and v["lane1"] == pytest.approx(4 * x)
    assert v["width1.g"] == 1.0 and v["same"] == 1


def test_query_form_with_split_mode_is_refused(enzcc):
    enzcc.write("q.c", PRELUDE + r"""
extern void *__enzyme_shadow(void *, int, int);
void *__enzyme_augmentfwd(void *, ...);
double g = 2.0;
double f(double x) { return g * x * x; }
int main(void) { printf("%p\n", __enzyme_shadow(&g, 1, 0)); __enzyme_augmentfwd((void *)f, 1.0); return 0; }
""")
    r = enzcc("-O2", "-w", "q.c", "-lm", "-o", "q", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "split mode does not keep them" in r.stderr, r.stderr
