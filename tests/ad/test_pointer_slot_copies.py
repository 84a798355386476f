"""An integer copied through pointers kept in locals (REBOUND 4.4.11's reb_simulation_two_largest_particles,
``*p2 = *p1`` with ``int *p1, *p2``, inlined at -O0 into reb_collision_search, which passes ``&l1, &l2``): the
unoptimized code stores each parameter in a pointer local and reads it again for each access, so the copy's
load and store go through pointers no access types. When every pointer local involved only ever holds addresses
of the function's own locals, their declared types say what the copy moves. Before: 'cannot tell whether the
i32 copied here is a floating-point value'. A pointer local that holds a parameter, a float's or a byte
buffer's address, or whose own address is taken, keeps the refusal. End to end, an -O0 program of REBOUND's
shape: gradients against the analytic ones and central differences."""

import pytest

from adharness import PRELUDE
from enzcc.ad.errors import ADError
from enzcc.ad.memory import MemoryTypes
from enzcc.ir.parser import parse_module
from enzcc_testing import need

HEADER = """target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"
declare void @keep(ptr)
"""

# the inlined body of two_largest(r, &l1, &l2) at -O0: *p1 = -1; ...; *p2 = *p1
COPY = """
define void @f(ptr %arg) {
entry:
  %l1 = alloca L1TYPE
  %l2 = alloca L1TYPE
  %p1 = alloca ptr
  %p2 = alloca ptr
  store ptr HELD, ptr %p1
  store ptr HELD2, ptr %p2
  ESCAPE
  %a = load ptr, ptr %p1
  store i32 -1, ptr %a
  %b = load ptr, ptr %p1
  %v = load i32, ptr %b
  %c = load ptr, ptr %p2
  store i32 %v, ptr %c
  ret void
}
"""


def _copy(l1="i32", held="%l1", escape=""):
    """The copy, with both locals of the type ``l1`` and both pointer locals holding ``held`` (its twin)."""
    text = COPY.replace("L1TYPE", l1).replace("HELD2", held.replace("1", "2")).replace("HELD", held)
    text = text.replace("ESCAPE", escape)
    fn = parse_module(HEADER + text).get_function("f").parse()
    load = next(i for i in fn.instructions() if str(i).startswith("%v = load i32"))
    return MemoryTypes(fn), load


def test_int_copied_through_pointer_locals_holding_int_locals():
    """Both pointer locals hold only the addresses of ``int`` locals: the copy moves an integer."""
    mt, load = _copy()
    assert mt.bits_type(load, required=True) is None


@pytest.mark.parametrize("l1,held,escape", [
    ("i32", "%arg", ""),                       # a parameter's memory: what it holds is the caller's
    ("float", "%l1", ""),                      # a float local: its bits, copied as an int
    ("[4 x i8]", "%l1", ""),                   # a byte buffer says nothing
    ("i32", "%l1", "call void @keep(ptr %p1)\n  call void @keep(ptr %p2)"),  # their addresses taken
    ("i32", "%l1", "call void @keep(ptr %l1)\n  call void @keep(ptr %l2)"),  # the locals' addresses elsewhere
    ("i32", "%l1", "%q1 = load ptr, ptr %p1\n  store float 1.0, ptr %q1\n"  # a float put there through
                   "  %q2 = load ptr, ptr %p2\n  store float 1.0, ptr %q2"),   # another read
])
def test_pointer_locals_that_say_nothing_keep_the_refusal(l1, held, escape):
    mt, load = _copy(l1, held, escape)
    with pytest.raises(ADError, match="cannot tell whether the i32 copied here"):
        mt.bits_type(load, required=True)


# REBOUND's shape: the call left out of the first preparation by the large budget (the function's own -O0 body
# past it), then inlined into the derivative after SROA shrank the body, its parameters still kept in locals
TWO_LARGEST = r"""struct rec { double x, r; };
struct sim { int n; struct rec *p; };
void two_largest(struct sim *s, int *p1, int *p2) {
  struct rec *p = s->p; double l1 = -1.0, l2 = -1.0;
  *p1 = -1; *p2 = -1;
  for (int i = 0; i < s->n; i++) {
    if (p[i].r > l1) { l2 = l1; *p2 = *p1; l1 = p[i].r; *p1 = i; }
    else if (p[i].r > l2) { l2 = p[i].r; *p2 = i; }
  }
}
double f(struct sim *s) {
  double e = 0;
  for (int i = 0; i < s->n; i++) e += s->p[i].x * s->p[i].x;
  { double junk = 0;  /* (dead code: the -O0 body past the budget, gone after SROA) */
JUNK
  }
  int a = -1, b = -1;
  two_largest(s, &a, &b);
  if (b != -1) e *= s->p[b].r + s->p[a].x;
  return e;
}
int main(void) {
  struct rec p[3] = {{0.5, 1}, {1.5, 3}, {-1, 2}}, dp[3] = {{0}};
  struct sim s = {3, p}, ds = {3, dp};
  __enzyme_autodiff((void *)f, enzyme_dup, &s, &ds);
  double h = 1e-6;
  for (int i = 0; i < 3; i++) {
    char n[16];
    double t = p[i].x; p[i].x = t + h; double up = f(&s); p[i].x = t - h; double dn = f(&s); p[i].x = t;
    sprintf(n, "ad.x%d", i); report(n, dp[i].x); sprintf(n, "fd.x%d", i); report(n, (up - dn) / (2 * h));
    t = p[i].r; p[i].r = t + h; up = f(&s); p[i].r = t - h; dn = f(&s); p[i].r = t;
    sprintf(n, "ad.r%d", i); report(n, dp[i].r); sprintf(n, "fd.r%d", i); report(n, (up - dn) / (2 * h));
  }
  return 0;
}
"""


@need("clang-22")
def test_two_largest_inlined_into_a_large_derivative_at_O0(enzcc):
    """The whole program at -O0 with the large budgets (``ENZCC_AD_LARGE_EXPANSION=0``): e = sum x^2 * (r[b] +
    x[a]), a and b the indices of the largest and second largest r (1 and 2): de/dx = 2x(r2 + x1) (+ sum x^2 at
    x1), de/dr2 = sum x^2, against central differences. Before: refused at compile time with 'cannot tell
    whether the i32 copied here is a floating-point value'."""
    enzcc.write("t.c", PRELUDE + TWO_LARGEST.replace("JUNK", "\n".join(["    junk = junk + 1.0;"] * 600)))
    enzcc("-O0", "t.c", "-lm", "-o", "t", env={"ENZCC_AD_LARGE_EXPANSION": "0"})
    v = dict((k, float(x)) for k, x in (line.split() for line in enzcc.run("./t").stdout.splitlines()))
    sq, x, r2 = 0.25 + 2.25 + 1.0, [0.5, 1.5, -1.0], 2.0
    for i in range(3):
        assert abs(v[f"ad.x{i}"] - (2 * x[i] * (r2 + x[1]) + (sq if i == 1 else 0))) <= 1e-12, v
        assert abs(v[f"ad.r{i}"] - (sq if i == 2 else 0)) <= 1e-12, v
        for w in ("x", "r"):
            assert abs(v[f"ad.{w}{i}"] - v[f"fd.{w}{i}"]) <= 1e-6, v
