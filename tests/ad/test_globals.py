"""Mutable globals written by differentiated code get shadow globals (as in Enzyme), at -O0..-O3 in both
modes, also when the writer and the reader are separate derived functions (recursion, ``--ad-inline=none``) and
in split mode; the derivative of a global's incoming value is zero on every call. A global enzcc cannot
shadow (defined in another file) stays a one-line error."""

import pytest

from adharness import PRELUDE, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

OPTS = ["-O0", "-O1", "-O2", "-O3"]

# g = x^2 written by a helper, acc[] = g*(i+1) + x written and read back, counter changed on every call:
#   f = sum_i (g (i+1) + x)^2 + sin(g) * counter'   (counter' = counter + 1)
#   f' = sum_i 2 (g (i+1) + x) (2x (i+1) + 1) + cos(g) 2x counter'
GLOBALS = r"""
double g;
double acc[4];
static double counter = 1.0;
__attribute__((noinline)) void setg(double x) { g = x * x; }
double f(double x) {
  setg(x);
  for (int i = 0; i < 4; i++) acc[i] = g * (i + 1) + x;
  double s = 0;
  for (int i = 0; i < 4; i++) s += acc[i] * acc[i];
  counter += 1;
  return s + sin(g) * counter;
}
int main(void) {
  report("rev", __enzyme_autodiff((void *)f, 0.7));   /* counter 1 -> 2 */
  report("fwd", __enzyme_fwddiff((void *)f, 0.7, 1.0));  /* counter 2 -> 3 */
  report("rev2", __enzyme_autodiff((void *)f, 0.7));  /* 3 -> 4: the shadows start from zero again */
  return 0;
}
"""


def _expected(x: float, counter: float) -> float:
    import math

    g = x * x
    return sum(2 * (g * (i + 1) + x) * (2 * x * (i + 1) + 1) for i in range(4)) + math.cos(g) * 2 * x * counter


@pytest.mark.parametrize("opt", OPTS)
@pytest.mark.parametrize("inline", ["auto", "none"])
def test_globals_written_and_read_back(enzcc, opt, inline):
    v = build_and_run(enzcc, GLOBALS, opt, extra=[f"--ad-inline={inline}"])
    assert v["rev"] == pytest.approx(_expected(0.7, 2), rel=1e-12)
    assert v["fwd"] == pytest.approx(_expected(0.7, 3), rel=1e-12)
    assert v["rev2"] == pytest.approx(_expected(0.7, 4), rel=1e-12)


# a recursive function accumulates into a global; the caller reads it after the calls:
#   acc = x^2 (1 + 1.5^2 + 1.5^4) = 8.3125 x^2, f = acc^2, f' = 4 * 8.3125^2 x^3
RECURSIVE = r"""
double total;
void rec(double x, int n) { if (n == 0) return; total += x * x; rec(1.5 * x, n - 1); }
double f(double x) { total = 0; rec(x, 3); return total * total; }
int main(void) {
  report("rev", __enzyme_autodiff((void *)f, 0.9));
  report("fwd", __enzyme_fwddiff((void *)f, 0.9, 1.0));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_recursion_accumulating_into_a_global(enzcc, opt):
    v = build_and_run(enzcc, RECURSIVE, opt)
    want = 4 * 8.3125 ** 2 * 0.9 ** 3
    assert v["rev"] == pytest.approx(want, rel=1e-12) and v["fwd"] == pytest.approx(want, rel=1e-12)


# split mode: the augmented primal writes the global state (a memcpy of the input), the reverse reads it
SPLIT = r"""
extern int enzyme_tape;
void *__enzyme_augmentfwd(void *, ...);
void __enzyme_reverse(void *, ...);
double state[3];
void step(double *x, double *out) {
  memcpy(state, x, sizeof state);
  for (int i = 0; i < 3; i++) state[i] = sin(state[i]) * x[(i + 1) % 3];
  *out = state[0] + state[1] * state[2];
}
int main(void) {
  double x[3] = {0.3, 0.5, 0.7}, dx[3] = {0}, out, dout = 1.0;
  void *tape = __enzyme_augmentfwd((void *)step, enzyme_dup, x, dx, enzyme_dup, &out, &dout);
  __enzyme_reverse((void *)step, enzyme_dup, x, dx, enzyme_dup, &out, &dout, tape);
  for (int i = 0; i < 3; i++) {
    double h = 1e-6, xp[3], xm[3], op, om;
    memcpy(xp, x, sizeof xp); memcpy(xm, x, sizeof xm); xp[i] += h; xm[i] -= h;
    step(xp, &op); step(xm, &om);
    printf("ad%d %.17g\nfd%d %.17g\n", i, dx[i], i, (op - om) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_split_mode_with_a_global(enzcc, opt):
    from adharness import assert_close

    v = build_and_run(enzcc, SPLIT, opt)
    assert_close(v, "ad", "fd", rel=1e-7)
    assert v["ad0"] != 0


def test_a_global_defined_in_another_file_is_refused(enzcc):
    enzcc.write("e.c", PRELUDE + r"""
extern double G;
double f(double x) { G = x * x; return G * x; }
int main(void) { report("d", __enzyme_autodiff((void *)f, 0.7)); return 0; }
""")
    r = enzcc("-O0", "-c", "e.c", "-o", "e.o", check=False)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "global @G, which is defined in another file" in r.stderr
    assert not (enzcc.cwd / "e.o").exists()


# a pointer that is either the differentiated buffer or a global the differentiated code only reads: the
# global's derivative is zero (ds/dx = params when src is params)
READ_ONLY = r"""
double params[4] = {1, 2, 3, 4};
double f(double *x, int n) {
  double *src = n > 2 ? x : params;
  double s = 0;
  for (int i = 0; i < 4; i++) s += src[i] * x[i];
  return s;
}
int main(void) {
  double x[4] = {1, 1, 1, 1}, dx[4] = {0}, t[4] = {0, 0, 0, 1};
  __enzyme_autodiff((void *)f, x, dx, 1);
  for (int i = 0; i < 4; i++) printf("d%d %.17g\n", i, dx[i]);
  report("fwd", __enzyme_fwddiff((void *)f, x, t, 1));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_a_global_only_read_merged_with_differentiated_memory(enzcc, opt):
    v = build_and_run(enzcc, READ_ONLY, opt)
    assert [v[f"d{i}"] for i in range(4)] == [1, 2, 3, 4] and v["fwd"] == 4
