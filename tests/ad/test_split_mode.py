"""Split mode: ``__enzyme_augmentfwd`` returns the tape, ``__enzyme_reverse`` takes it (also across object
files), ``__enzyme_augmentsize`` and ``enzyme_allocated, N, enzyme_tape, buffer``, at -O0..-O3 against
analytic derivatives."""

import math

import pytest

from adharness import PRELUDE, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

DECLS = r"""
extern int enzyme_tape, enzyme_allocated, enzyme_noret, enzyme_const_return;
typedef struct { void *tape; double y; } aug_t;
aug_t __enzyme_augmentfwd(void *, ...);
void *__enzyme_augmentfwd_v(void *, ...);
double __enzyme_augmentfwd_a(void *, ...);
double __enzyme_reverse(void *, ...);
void __enzyme_reverse_v(void *, ...);
long __enzyme_augmentsize(void *, ...);
"""

F = r"""
/* f reads a[] and overwrites it; the caller overwrites it again between the two halves */
double f(double x, double *a, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) { s += sin(a[i] * x); a[i] *= x; }
  return s;
}
void g(double *x, double *out) { out[0] = x[0] * x[1]; x[0] = 0; }
"""

MAIN = r"""
int main(void) {
  double a[3] = {1, 2, 3}, da[3] = {0};
  aug_t t = __enzyme_augmentfwd((void *)f, 0.5, enzyme_dup, a, da, enzyme_const, 3);
  a[0] = 100;
  report("y", t.y);
  report("dx", __enzyme_reverse((void *)f, 0.5, enzyme_dup, a, da, enzyme_const, 3, 2.0, t.tape));
  for (int i = 0; i < 3; i++) { char k[8]; snprintf(k, 8, "da.%d", i); report(k, da[i]); }
  double x[2] = {2, 3}, dx[2] = {0}, out[1], dout[1] = {1};
  void *tp = __enzyme_augmentfwd_v((void *)g, enzyme_dup, x, dx, enzyme_dup, out, dout);
  __enzyme_reverse_v((void *)g, enzyme_dup, x, dx, enzyme_dup, out, dout, tp);
  report("g.0", dx[0]); report("g.1", dx[1]); report("g.out", out[0]); report("g.dout", dout[0]);
  long size = __enzyme_augmentsize((void *)f, enzyme_out, enzyme_dup, enzyme_const);
  char *buf = malloc(size);
  double b[3] = {1, 2, 3}, db[3] = {0};
  report("buf.y", __enzyme_augmentfwd_a((void *)f, 0.5, enzyme_dup, b, db, enzyme_const, 3,
                                        enzyme_allocated, SIZE, enzyme_tape, buf));
  report("buf.dx", __enzyme_reverse((void *)f, 0.5, enzyme_dup, b, db, enzyme_const, 3, 1.0,
                                    enzyme_allocated, SIZE, enzyme_tape, buf));
  report("buf.da.2", db[2]);
  report("size", size);
  double c[3] = {1, 2, 3}, dc[3] = {0};
  void *t2 = __enzyme_augmentfwd_v((void *)f, enzyme_noret, 0.5, enzyme_dup, c, dc, enzyme_const, 3);
  report("noret.dx", __enzyme_reverse((void *)f, 0.5, enzyme_dup, c, dc, enzyme_const, 3, 1.0, t2));
  double e[3] = {1, 2, 3}, de[3] = {0};
  aug_t t3 = __enzyme_augmentfwd((void *)f, enzyme_const_return, 0.5, enzyme_dup, e, de, enzyme_const, 3);
  __enzyme_reverse_v((void *)f, enzyme_const_return, 0.5, enzyme_dup, e, de, enzyme_const, 3, t3.tape);
  report("constret.da.0", de[0]);
  free(buf);
  return 0;
}
"""


def _expected():
    x, a = 0.5, [1.0, 2.0, 3.0]
    return {"y": sum(math.sin(v * x) for v in a), "dx": 2 * sum(v * math.cos(v * x) for v in a),
            **{f"da.{i}": 2 * x * math.cos(v * x) for i, v in enumerate(a)},
            "g.0": 3.0, "g.1": 2.0, "g.out": 6.0, "g.dout": 0.0,
            "buf.dx": sum(v * math.cos(v * x) for v in a), "buf.da.2": x * math.cos(3 * x),
            "noret.dx": sum(v * math.cos(v * x) for v in a), "constret.da.0": 0.0}


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_result_declared_before_the_tape(enzcc, opt):
    """A result struct declared {result, tape}: the tape is the pointer field, as Enzyme matches it."""
    src = DECLS + F + r"""
typedef struct { double y; void *tape; } aug_r;
aug_r __enzyme_augmentfwd_r(void *, ...);
int main(void) {
  double a[3] = {1, 2, 3}, da[3] = {0};
  aug_r t = __enzyme_augmentfwd_r((void *)f, 0.5, enzyme_dup, a, da, enzyme_const, 3);
  report("y", t.y);
  report("dx", __enzyme_reverse((void *)f, 0.5, enzyme_dup, a, da, enzyme_const, 3, 2.0, t.tape));
  return 0;
}
"""
    v = build_and_run(enzcc, src, opt)
    e = _expected()
    assert v["y"] == pytest.approx(e["y"], rel=1e-14) and v["dx"] == pytest.approx(e["dx"], rel=1e-14)


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_split_mode(enzcc, opt):
    v = build_and_run(enzcc, DECLS + F + MAIN.replace("SIZE", "4096"), opt)
    for k, e in _expected().items():
        assert v[k] == pytest.approx(e, rel=1e-12, abs=1e-15), (k, v[k], e)
    assert v["buf.y"] == v["y"] and 0 < v["size"] <= 4096


def test_tape_between_objects(enzcc):
    """f in one object, the augmented call in a second, the reverse call in a third (each compiled with -c)."""
    enzcc.write("f.c", PRELUDE + F)
    enzcc.write("a.c", PRELUDE + DECLS + "double f(double, double *, int);\n"
                "aug_t run(double *a) { return __enzyme_augmentfwd((void *)f, 0.5, enzyme_dup, a, a + 3, "
                "enzyme_const, 3); }\n")
    enzcc.write("r.c", PRELUDE + DECLS + "double f(double, double *, int);\naug_t run(double *a);\n"
                "int main(void) { double a[6] = {1, 2, 3, 0, 0, 0}; aug_t t = run(a);\n"
                "  report(\"dx\", __enzyme_reverse((void *)f, 0.5, enzyme_dup, a, a + 3, enzyme_const, 3, 2.0, "
                "t.tape));\n  report(\"da.1\", a[4]); return 0; }\n")
    for src in ("f.c", "a.c", "r.c"):
        enzcc("-O2", "-c", src)
    enzcc("f.o", "a.o", "r.o", "-lm", "-o", "t")
    out = dict(line.split() for line in enzcc.run("./t").stdout.splitlines())
    e = _expected()
    assert float(out["dx"]) == pytest.approx(e["dx"], rel=1e-12)
    assert float(out["da.1"]) == pytest.approx(e["da.1"], rel=1e-12)


def test_too_small_tape_buffer_is_an_error(enzcc):
    enzcc.write("s.c", PRELUDE + DECLS + F + MAIN.replace("SIZE", "8"))
    r = enzcc("-O2", "s.c", "-lm", "-o", "s", check=False)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "the tape of 'f' needs" in r.stderr and "enzyme_allocated gives 8" in r.stderr
    assert not (enzcc.cwd / "s").exists()


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_forward_mode_primal_return(enzcc, opt):
    v = build_and_run(enzcc, r"""
extern int enzyme_primal_return;
typedef struct { double v, d; } dual;
dual __enzyme_fwddiff_pr(void *, ...);
double f(double x, int n) { return sin(x) * n; }
int main(void) {
  dual r = __enzyme_fwddiff_pr((void *)f, enzyme_primal_return, 0.5, 1.0, enzyme_const, 3);
  report("v", r.v); report("d", r.d);
  return 0;
}
""", opt)
    assert v["v"] == pytest.approx(3 * math.sin(0.5), rel=1e-15) and v["d"] == pytest.approx(3 * math.cos(0.5),
                                                                                                rel=1e-15)


NOCACHE = r"""
extern int enzyme_nocache;
void *__enzyme_augmentfwd(void *, ...);
void __enzyme_reverse(void *, ...);
void f(double *y, const double *x, int n) {
  for (int i = 0; i < n; i++) y[i] = x[i] * x[i] * sin(x[(i + 1) % n]);
}
int main(void) {
  double x[3] = {0.3, 0.7, 1.1}, dx[3] = {0}, y[3], dy[3] = {1, 2, 3};
  /* enzyme_nocache before an argument (alone, or before its activity marker) */
  void *tape = __enzyme_augmentfwd((void *)f, enzyme_nocache, y, dy, enzyme_nocache, enzyme_dup, x, dx,
                                   enzyme_const, 3);
  __enzyme_reverse((void *)f, enzyme_nocache, y, dy, enzyme_nocache, enzyme_dup, x, dx, enzyme_const, 3, tape);
  double ex[3] = {0}, ey[3], edy[3] = {1, 2, 3};
  __enzyme_autodiff((void *)f, enzyme_nocache, ey, edy, enzyme_dup, x, ex, enzyme_nocache, enzyme_const, 3);
  for (int k = 0; k < 3; k++) {
    char key[16];
    snprintf(key, sizeof key, "split.%d", k); report(key, dx[k]);
    snprintf(key, sizeof key, "comb.%d", k); report(key, ex[k]);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_enzyme_nocache_is_accepted(enzcc, opt):
    """``enzyme_nocache`` (the user's promise that an argument's memory does not change before the reverse
    pass) is accepted; enzcc keeps what it needs anyway, so the gradient is the same."""
    import math

    v = build_and_run(enzcc, NOCACHE, opt)
    x, w = [0.3, 0.7, 1.1], [1, 2, 3]
    want = [0.0] * 3
    for i in range(3):
        j = (i + 1) % 3
        want[i] += w[i] * 2 * x[i] * math.sin(x[j])
        want[j] += w[i] * x[i] * x[i] * math.cos(x[j])
    for k in range(3):
        assert v[f"split.{k}"] == pytest.approx(want[k], rel=1e-12)
        assert v[f"comb.{k}"] == pytest.approx(want[k], rel=1e-12)
