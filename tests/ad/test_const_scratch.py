"""Active values stored into memory that has no shadow because it is reached only through an ``enzyme_const``
argument (a plan's scratch buffer, as kissfft's ``kiss_fftr`` plan has) and read back: the derivative would be
lost, a silently zero gradient. enzcc refuses it with one line naming the parameter (Enzyme: "mismatched
activity"), in reverse and forward mode, at -O0 and -O2, also when a memcpy puts the values there. Passing the
plan with ``enzyme_dup`` and a shadow plan whose scratch points to a zeroed shadow buffer gives the right
gradient (analytic and central differences). A const plan whose buffer only receives values without
derivatives (indices, constants) still works, and so does a store into const memory never read back (an output
the user chose not to differentiate: its derivative is simply not computed). With ``enzyme_runtime_activity``
the refusal stays (that memory still has no shadow), and says the marker does not help."""

import math

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

PLAN = r"""
struct plan { int n; double *scratch; };
void f(const struct plan *p, const double *x, double *y) {
  for (int i = 0; i < p->n; i++) p->scratch[i] = x[i] * x[i];
  double s = 0; for (int i = 0; i < p->n; i++) s += p->scratch[i];
  *y = s;
}
"""

CONST_CALL = r"""
int main(void) {
  double buf[3], x[3] = {1, 2, 3}, dx[3] = {0}, y = 0, dy = 1;
  struct plan pl = {3, buf};
  __enzyme_autodiff((void *)f, enzyme_const, &pl, enzyme_dup, x, dx, enzyme_dup, &y, &dy);
  report("dx0", dx[0]); report("dx1", dx[1]); report("dx2", dx[2]);
  return 0;
}
"""

FORWARD_CONST_CALL = r"""
int main(void) {
  double buf[3], x[3] = {1, 2, 3}, dx[3] = {1, 0, 0}, y = 0, dy = 0;
  struct plan pl = {3, buf};
  __enzyme_fwddiff((void *)f, enzyme_const, &pl, enzyme_dup, x, dx, enzyme_dup, &y, &dy);
  report("dy", dy);
  return 0;
}
"""

MEMCPY = r"""
struct plan { int n; double *scratch; };
void f(const struct plan *p, const double *x, double *y) {
  memcpy(p->scratch, x, p->n * sizeof(double));
  double s = 0; for (int i = 0; i < p->n; i++) s += p->scratch[i] * p->scratch[i];
  *y = s;
}
"""

PLAIN_POINTER = r"""
void f(double *work, const double *x, double *y) {
  for (int i = 0; i < 3; i++) work[i] = sin(x[i]);
  *y = work[0] * work[1] + work[2];
}
int main(void) {
  double w[3], x[3] = {1, 2, 3}, dx[3] = {0}, y = 0, dy = 1;
  __enzyme_autodiff((void *)f, enzyme_const, w, enzyme_dup, x, dx, enzyme_dup, &y, &dy);
  report("dx0", dx[0]);
  return 0;
}
"""


def _refused(enzcc, source: str, opt: str, extra=()):
    """Builds ``source`` expecting the refusal; returns its one line."""
    enzcc.write("t.c", PRELUDE + source)
    proc = enzcc(opt, "t.c", "-lm", "-o", "t", *extra, check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "LLVM ERROR" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert not (enzcc.cwd / "t").exists()
    assert "mismatched activity" in lines[0] and "enzyme_dup" in lines[0]
    return lines[0]


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_const_plan_scratch_is_refused(enzcc, opt):
    line = _refused(enzcc, PLAN + CONST_CALL, opt)
    assert "parameter 1 (enzyme_const)" in line and "read back" in line
    line = _refused(enzcc, PLAN + CONST_CALL, opt, extra=("-g",))  # with debug info: the parameter's name
    assert "'p' (enzyme_const, parameter 1)" in line and "pass 'p' with enzyme_dup" in line
    assert line.startswith("t.c:")


def test_forward_mode_const_plan_is_refused(enzcc):
    line = _refused(enzcc, PLAN + FORWARD_CONST_CALL, "-O2", extra=("-g",))
    assert "'p' (enzyme_const, parameter 1)" in line


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_memcpy_into_const_scratch_is_refused(enzcc, opt):
    _refused(enzcc, MEMCPY + CONST_CALL, opt)


def test_const_plain_work_buffer(enzcc):
    # at -O0 the values go through the const buffer: refused; at -O2 the optimizer forwards the stored values
    # to the reads (three elements, unrolled), so nothing is read back and the gradient is right
    line = _refused(enzcc, PLAIN_POINTER, "-O0", extra=("-g",))
    assert "'work' (enzyme_const, parameter 1)" in line
    v = build_and_run(enzcc, PLAIN_POINTER, "-O2")
    assert v["dx0"] == pytest.approx(math.cos(1) * math.sin(2), rel=1e-14)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_dup_plan_gives_the_gradient(enzcc, opt):
    main = r"""
static double value(double *x) { double buf[3], y = 0; struct plan pl = {3, buf}; f(&pl, x, &y); return y; }
int main(void) {
  double buf[3], dbuf[3] = {0}, x[3] = {1, 2, 3}, dx[3] = {0}, y = 0, dy = 1;
  struct plan pl = {3, buf}, dpl = {3, dbuf};
  __enzyme_autodiff((void *)f, enzyme_dup, &pl, &dpl, enzyme_dup, x, dx, enzyme_dup, &y, &dy);
  for (int i = 0; i < 3; i++) {
    double h = 1e-6, xp[3] = {1, 2, 3}, xm[3] = {1, 2, 3};
    xp[i] += h; xm[i] -= h;
    char k[8]; sprintf(k, "g.%d", i); report(k, dx[i]);
    sprintf(k, "fd.%d", i); report(k, (value(xp) - value(xm)) / (2 * h));
  }
  double t[3] = {1, 0, 0}, tb[3] = {0}, ty = 0;   /* forward mode with the dup plan: d y / d x0 */
  struct plan tpl = {3, tb};
  __enzyme_fwddiff((void *)f, enzyme_dup, &pl, &tpl, enzyme_dup, x, t, enzyme_dup, &y, &ty);
  report("tangent", ty);
  return 0;
}
"""
    v = build_and_run(enzcc, PLAN + main, opt)
    assert [v["g.0"], v["g.1"], v["g.2"]] == [2.0, 4.0, 6.0]
    assert_close(v, "g.", "fd.")
    assert v["tangent"] == 2.0


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_const_plan_with_inactive_scratch_works(enzcc, opt):
    src = r"""
struct plan { int n; double *scratch; };
void f(const struct plan *p, const double *x, double *y) {
  for (int i = 0; i < p->n; i++) p->scratch[i] = i + 0.5;          /* no derivative: a constant table */
  double s = 0; for (int i = 0; i < p->n; i++) s += p->scratch[i] * x[i] * x[i];
  *y = s;
}
""" + CONST_CALL
    v = build_and_run(enzcc, src, opt)
    assert [v["dx0"], v["dx1"], v["dx2"]] == [2 * 0.5 * 1, 2 * 1.5 * 2, 2 * 2.5 * 3]


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_const_store_never_read_back_is_not_differentiated(enzcc, opt):
    # the plan's buffer is an output passed enzyme_const: it gets the values, not their derivatives, and the
    # gradient of y is unaffected (what enzyme_const means for an output)
    src = r"""
struct plan { int n; double *scratch; };
void f(const struct plan *p, const double *x, double *y) {
  double s = 0;
  for (int i = 0; i < p->n; i++) { p->scratch[i] = x[i] * x[i]; s += x[i] * x[i] * x[i]; }
  *y = s;
}
int main(void) {
  double buf[3], x[3] = {1, 2, 3}, dx[3] = {0}, y = 0, dy = 1;
  struct plan pl = {3, buf};
  __enzyme_autodiff((void *)f, enzyme_const, &pl, enzyme_dup, x, dx, enzyme_dup, &y, &dy);
  report("dx0", dx[0]); report("dx1", dx[1]); report("dx2", dx[2]); report("buf2", buf[2]);
  return 0;
}
"""
    v = build_and_run(enzcc, src, opt)
    assert [v["dx0"], v["dx1"], v["dx2"], v["buf2"]] == [3.0, 12.0, 27.0, 9.0]


def test_runtime_activity_does_not_help(enzcc):
    """With enzyme_runtime_activity the const plan still has no shadow for its scratch buffer: the same refusal,
    which says the marker does not help (tests/ad/test_runtime_activity.py tests the marker itself)."""
    src = PLAN + r"""
extern int enzyme_runtime_activity;
int main(void) {
  double buf[3], x[3] = {1, 2, 3}, dx[3] = {0}, y = 0, dy = 1;
  struct plan pl = {3, buf};
  __enzyme_autodiff((void *)f, enzyme_runtime_activity, enzyme_const, &pl, enzyme_dup, x, dx, enzyme_dup, &y, &dy);
  return 0;
}
"""
    enzcc.write("t.c", PRELUDE + src)
    proc = enzcc("-O2", "t.c", "-o", "t", check=False)
    assert proc.returncode != 0 and not (enzcc.cwd / "t").exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "mismatched activity" in lines[0] and \
        "enzyme_runtime_activity does not help" in lines[0], proc.stderr


CALLS = r"""
struct plan { int n; double *scratch; };
__attribute__((noinline)) void fill(const struct plan *p, const double *x, int i) {   /* recursive, as kf_work */
  if (i < 0) return;
  p->scratch[i] = x[i] * x[i];
  fill(p, x, i - 1);
}
__attribute__((noinline)) double use(const struct plan *p) {
  double s = 0; for (int i = 0; i < p->n; i++) s += p->scratch[i]; return s;
}
void f(const struct plan *p, const double *x, double *y) { fill(p, x, p->n - 1); *y = use(p); }
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_scratch_written_by_a_call_not_inlined(enzcc, opt):
    # the values reach the const plan's buffer inside a recursive call (kissfft's kf_work writing into the
    # plan's scratch) and are read back by another call: refused; with the plan enzyme_dup: the gradient
    line = _refused(enzcc, CALLS + CONST_CALL, opt, extra=("-g", "--ad-inline=none"))
    assert "by this call to 'fill'" in line and "'p' (enzyme_const, parameter 1)" in line
    main = r"""
int main(void) {
  double buf[3], dbuf[3] = {0}, x[3] = {1, 2, 3}, dx[3] = {0}, y = 0, dy = 1;
  struct plan pl = {3, buf}, dpl = {3, dbuf};
  __enzyme_autodiff((void *)f, enzyme_dup, &pl, &dpl, enzyme_dup, x, dx, enzyme_dup, &y, &dy);
  report("dx0", dx[0]); report("dx1", dx[1]); report("dx2", dx[2]);
  return 0;
}
"""
    v = build_and_run(enzcc, CALLS + main, opt, extra=("--ad-inline=none",))
    assert [v["dx0"], v["dx1"], v["dx2"]] == [2.0, 4.0, 6.0]
