"""A pointer without derivatives (an ``enzyme_const`` argument) stored into memory that has derivatives (a field
of an ``enzyme_dup`` record) puts null into the shadow record; a pointer read back from that field, when the
optimizer did not forward the store, has that null as its shadow. Reading floats through it in the derivative
crashed (-O0), or, when a call not inlined read it, the optimizer saw the null dereference and dropped the
program (-O1/-O2). enzcc now refuses it at compile time with one line naming the store and the argument, as
Enzyme does without runtime activity ("mismatched activity"): in reverse and forward mode, through a call that
is not inlined, a memcpy of the record and a store of a whole record. Where the store is forwarded (-O1/-O2) the
gradient is right, and it stays right where the pointer read back is only compared or used to read integers;
passing the pointer with ``enzyme_dup``, or ``enzyme_runtime_activity``, gives the gradient (analytic and
central differences)."""

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

RECORD = r"""
struct S { double *p; double v; };
"""

PLAIN = RECORD + r"""
double f(struct S *s, double *x, double *c) {
  s->p = c; s->v = x[0] * x[0];
  return s->p[0] * s->v;
}
"""

CALLED = RECORD + r"""
__attribute__((noinline)) static double use(struct S *s) { return s->p[0] * s->v; }
double f(struct S *s, double *x, double *c) { s->p = c; s->v = x[0] * x[0]; return use(s); }
"""

COPIED = RECORD + r"""
double f(struct S *s, double *x, double *c) {
  struct S t; t.p = c; t.v = x[0] * x[0];
  memcpy(s, &t, sizeof t);
  return s->p[0] * s->v;
}
"""

# reverse mode with c enzyme_const; y = c0 * x0^2: dy/dx0 = 2 c0 x0 = 12, checked against central differences
REVERSE = r"""
extern int enzyme_runtime_activity;
static double value(double x0) { struct S s; double x[1] = {x0}, c[1] = {3.0}; return f(&s, x, c); }
int main(void) {
  struct S s = {0, 0}, ds = {0, 0};
  double x[1] = {2.0}, dx[1] = {0}, c[1] = {3.0};
  __enzyme_autodiff((void *)f, MARKER enzyme_dup, &s, &ds, enzyme_dup, x, dx, enzyme_const, c);
  report("g.0", dx[0]);
  report("fd.0", (value(2.0 + 1e-6) - value(2.0 - 1e-6)) / 2e-6);
  return 0;
}
"""

FORWARD = r"""
int main(void) {
  struct S s = {0, 0}, ds = {0, 0};
  double x[1] = {2.0}, tx[1] = {1.0}, c[1] = {3.0};
  report("t", __enzyme_fwddiff((void *)f, enzyme_dup, &s, &ds, enzyme_dup, x, tx, enzyme_const, c));
  return 0;
}
"""

# the advice of the refusal: c with enzyme_dup and a shadow (which gets dy/dc0 = x0^2 = 4)
DUP = r"""
int main(void) {
  struct S s = {0, 0}, ds = {0, 0};
  double x[1] = {2.0}, dx[1] = {0}, c[1] = {3.0}, dc[1] = {0};
  __enzyme_autodiff((void *)f, enzyme_dup, &s, &ds, enzyme_dup, x, dx, enzyme_dup, c, dc);
  report("dx", dx[0]); report("dc", dc[0]);
  return 0;
}
"""

# a whole record stored at once (what clang makes of a record returned in registers), then read back
AGGREGATE_LL = r"""
define double @f(ptr %s, ptr %x, ptr %c) noinline {
  %x0 = load double, ptr %x
  %sq = fmul double %x0, %x0
  %a = insertvalue { ptr, double } undef, ptr %c, 0
  %b = insertvalue { ptr, double } %a, double %sq, 1
  store { ptr, double } %b, ptr %s
  %pp = load volatile ptr, ptr %s
  %c0 = load double, ptr %pp
  %vp = getelementptr inbounds i8, ptr %s, i64 8
  %v = load double, ptr %vp
  %r = fmul double %c0, %v
  ret double %r
}
"""


def _source(program: str, main: str, marker: str = "") -> str:
    return PRELUDE + program + main.replace("MARKER", marker)


def _refused(enzcc, source: str, opt: str, extra=(), name="t.c", files=()) -> str:
    """Builds expecting the refusal; returns its one line."""
    enzcc.write(name, source)
    proc = enzcc(opt, *files, name, "-lm", "-o", "t", *extra, check=False)
    assert proc.returncode != 0, "built: the derivative would read through a null shadow"
    assert "Traceback" not in proc.stderr and "LLVM ERROR" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert not (enzcc.cwd / "t").exists()
    line = lines[0]
    assert "mismatched activity" in line and "enzyme_dup" in line and "enzyme_runtime_activity" in line, line
    assert "stored here" in line and ("parameter 3 (enzyme_const)" in line or
                                      "(enzyme_const, parameter 3)" in line), line
    return line


def _run(enzcc, source: str, opt: str, extra=()) -> dict[str, float]:
    enzcc.write("t.c", source)
    enzcc(opt, "t.c", "-lm", "-o", "t", *extra)
    out = enzcc.run("./t").stdout
    return {k: float(v) for k, v in (ln.split() for ln in out.splitlines() if ln.strip())}


def test_read_back_unoptimized_is_refused_with_the_store(enzcc):
    line = _refused(enzcc, _source(PLAIN, REVERSE), "-O0", extra=("-g",))
    assert line.startswith("t.c:") and "'c' (enzyme_const, parameter 3)" in line and "pass 'c' with" in line
    assert line.split(":")[1] == str(_source(PLAIN, REVERSE).splitlines().index(
        "  s->p = c; s->v = x[0] * x[0];") + 1)  # (the line of the store)


@pytest.mark.parametrize("opt", ["-O1", "-O2"])
def test_forwarded_store_gives_the_gradient(enzcc, opt):
    v = _run(enzcc, _source(PLAIN, REVERSE), opt)
    assert v["g.0"] == 12.0
    assert_close(v, "g.", "fd.")


def test_forward_mode(enzcc):
    _refused(enzcc, _source(PLAIN, FORWARD), "-O0")
    assert _run(enzcc, _source(PLAIN, FORWARD), "-O2")["t"] == 12.0


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
@pytest.mark.parametrize("inline", [(), ("--ad-inline=none",)])
def test_read_back_in_a_call_not_inlined_is_refused(enzcc, opt, inline):
    # before: a segfault at -O0, and at -O1/-O2 a program the optimizer reduced to nothing (the null
    # dereference it saw in the derivative)
    _refused(enzcc, _source(CALLED, REVERSE), opt, extra=inline)
    _refused(enzcc, _source(CALLED, FORWARD), opt, extra=inline)


def test_memcpy_of_the_record(enzcc):
    _refused(enzcc, _source(COPIED, REVERSE), "-O0")
    v = _run(enzcc, _source(COPIED, REVERSE), "-O2")
    assert v["g.0"] == 12.0


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_whole_record_store(enzcc, opt):
    enzcc.write("f.ll", AGGREGATE_LL)
    _refused(enzcc, _source(RECORD + "double f(struct S *, double *, double *);\n", REVERSE), opt,
             files=("f.ll",))
    # runtime activity keeps a pointer stored alone as its own shadow, not one stored as a field of a whole
    # record (its shadow slot is not written): refused there too, rather than read through the stale slot
    enzcc.write("t.c", _source(RECORD + "double f(struct S *, double *, double *);\n", REVERSE,
                               "enzyme_runtime_activity,"))
    proc = enzcc(opt, "f.ll", "t.c", "-lm", "-o", "t", check=False)
    if opt == "-O0":
        assert proc.returncode != 0 and "does not cover a pointer stored as a field of a whole record" in \
            proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    else:  # (the optimizer stored the fields one by one: the pointer is its own shadow, the gradient is right)
        assert proc.returncode == 0, proc.stderr
        v = {k: float(x) for k, x in (ln.split() for ln in enzcc.run("./t").stdout.splitlines())}
        assert v["g.0"] == 12.0 and v["fd.0"] == pytest.approx(12.0, rel=1e-6)


@pytest.mark.parametrize("program", [PLAIN, CALLED, COPIED], ids=["plain", "called", "copied"])
def test_the_advice_gives_the_gradient(enzcc, program):
    v = build_and_run(enzcc, program + DUP, "-O0")
    assert v == {"dx": 12.0, "dc": 4.0}
    v = _run(enzcc, _source(program, REVERSE, "enzyme_runtime_activity,"), "-O0")
    assert v["g.0"] == 12.0
    assert_close(v, "g.", "fd.")


SAFE = r"""
struct T { int *q; double v; };
__attribute__((noinline)) static double weight(struct T *t) { return t->q[1] + (t->q == 0); }
double f(struct S *s, double *x, double *c, struct T *t, int *q) {
  s->p = c; s->v = x[0]; t->q = q; t->v = x[0];
  return (s->p == c ? 2.0 : 1.0) * s->v * s->v + weight(t) * t->v;
}
static double value(double x0) {
  struct S s; struct T t; double x[1] = {x0}, c[1] = {3.0}; int q[2] = {5, 7};
  return f(&s, x, c, &t, q);
}
int main(void) {
  struct S s = {0, 0}, ds = {0, 0}; struct T t = {0, 0}, dt = {0, 0};
  double x[1] = {2.0}, dx[1] = {0}, c[1] = {3.0}; int q[2] = {5, 7};
  __enzyme_autodiff((void *)f, enzyme_dup, &s, &ds, enzyme_dup, x, dx, enzyme_const, c, enzyme_dup, &t, &dt,
                    enzyme_const, q);
  report("g.0", dx[0]);
  report("fd.0", (value(2.0 + 1e-6) - value(2.0 - 1e-6)) / 2e-6);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
@pytest.mark.parametrize("inline", [(), ("--ad-inline=none",)])
def test_pointer_read_back_only_to_compare_or_read_integers(enzcc, opt, inline):
    # the null shadow kept for c and q is never dereferenced: no refusal, and the gradient 2*2*x0 + 7 = 15
    v = build_and_run(enzcc, RECORD + SAFE, opt, extra=inline)
    assert v["g.0"] == 15.0
    assert_close(v, "g.", "fd.")
