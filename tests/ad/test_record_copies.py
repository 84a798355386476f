"""A C struct of doubles, a pointer and an int assigned from one element of an array to another (``a[i] = a[j]``,
REBOUND's ``r->particles[i] = r->particles[j]``): clang copies it with a memcpy whose ``!tbaa.struct`` lists each
field (offset, size, type), while no access in the function gives the layout at those variable offsets
(``enzcc.ad.memory._tbaa_struct_fields``); at -O0, without TBAA, the array is indexed as ``%struct.rec``
(``MemoryTypes.copied_records``). The reverse gives each double's adjoint back to the source element and the
forward sweep copies the pointer's shadow; before, 'cannot tell whether the memory this memcpy copies holds
floating-point values'."""

import pytest

from adharness import PRELUDE
from enzcc_testing import need

pytestmark = need("clang-22")

SOURCE = r"""
struct rec { double x, v; struct rec *next; int id; };
__attribute__((noinline)) void move(struct rec *a, int i, int j) { a[i] = a[j]; }
double f(struct rec *a, int n) {
  move(a, 0, 2);
  a[1] = a[n - 1];
  double s = 0;
  for (int i = 0; i < n; i++) s += a[i].x * a[i].v + sin(a[i].x) * a[i].next->v;
  return s;
}
static void fill(struct rec *c, const struct rec *b) {
  for (int j = 0; j < 4; j++) { c[j] = b[j]; c[j].next = &c[(j + 1) % 4]; }
}
int main(void) {
  struct rec a[4], b[4], c[4], da[4] = {{0}};
  for (int i = 0; i < 4; i++) {
    a[i].x = 0.3 + i; a[i].v = 1.0 - 0.2 * i; a[i].next = &a[(i + 1) % 4]; a[i].id = i;
    da[i].next = &da[(i + 1) % 4];
  }
  fill(b, a);
  __enzyme_autodiff((void *)f, enzyme_dup, a, da, enzyme_const, 4);
  char name[16];
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 2; k++) {
      double h = 1e-6, s0 = k ? b[i].v : b[i].x;
      fill(c, b); *(k ? &c[i].v : &c[i].x) = s0 + h; double up = f(c, 4);
      fill(c, b); *(k ? &c[i].v : &c[i].x) = s0 - h; double dn = f(c, 4);
      sprintf(name, "ad.%d.%d", i, k); report(name, k ? da[i].v : da[i].x);
      sprintf(name, "fd.%d.%d", i, k); report(name, (up - dn) / (2 * h));
    }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_struct_assignment_between_array_elements(enzcc, opt):
    enzcc.write("t.c", PRELUDE + SOURCE)
    enzcc(opt, "t.c", "-lm", "-o", "t")
    v = dict((k, float(x)) for k, x in (line.split() for line in enzcc.run("./t").stdout.splitlines()))
    assert len(v) == 16
    for key in (k[3:] for k in v if k.startswith("ad.")):
        assert abs(v["ad." + key] - v["fd." + key]) <= 1e-6 * max(1.0, abs(v["fd." + key])), (key, v)
    # elements 2 and 3 were copied over 0 and 1: their gradients carry the copies' parts
    assert abs(v["ad.2.1"]) > 1.0 and abs(v["ad.3.1"]) > 1.0 and v["ad.0.0"] == 0.0
