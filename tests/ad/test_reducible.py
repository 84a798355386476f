"""Irreducible control flow (a loop entered in its middle) is given a dispatch block before it is differentiated
(:mod:`enzcc.ad.reducible`): the pass on the IR model, and gradients of C code with ``goto`` into loops at
-O0..-O3 against central differences, in reverse and forward mode."""

import pytest

from adharness import build_and_run
from enzcc_testing import need

from enzcc.ad.prepare import check_reducible
from enzcc.ad.reducible import make_reducible
from enzcc.ir.parser import parse_module

# two entries into the cycle a <-> b, and a second cycle c <-> d inside b's successors entered at both blocks
IR = """
define double @f(double %x, i1 %p, i1 %q, i32 %n) {
entry:
  br i1 %p, label %a, label %b
a:
  %va = phi double [ %x, %entry ], [ %vb2, %b ]
  %va2 = fadd double %va, 1.0
  br label %b
b:
  %vb = phi double [ %x, %entry ], [ %va2, %a ]
  %vb2 = fmul double %vb, %x
  %i = fptosi double %vb2 to i32
  %more = icmp slt i32 %i, %n
  br i1 %more, label %a, label %split
split:
  br i1 %q, label %c, label %d
c:
  %vc = phi double [ %vb2, %split ], [ %vd2, %d ]
  %vc2 = fadd double %vc, %x
  %m = fptosi double %vc2 to i32
  %again = icmp slt i32 %m, %n
  br i1 %again, label %d, label %exit
d:
  %vd = phi double [ %vb2, %split ], [ %vc2, %c ]
  %vd2 = fmul double %vd, 2.0
  br label %c
exit:
  ret double %vc2
}
"""


def test_dispatch_blocks_make_the_cycles_reducible():
    module = parse_module(IR)
    fn = module.functions["f"]
    with pytest.raises(Exception, match="irreducible"):
        check_reducible(fn)
    assert make_reducible(fn) == 2
    check_reducible(fn)
    text = str(module)
    assert text.count("irr.dispatch") >= 2 and "switch i32" in text
    import llvmlite.binding as llvm

    llvm.parse_assembly(text).verify()  # (still valid SSA: the entries' phis moved into the dispatch blocks)


GOTO = r"""
/* loops entered in their middle */
__attribute__((noinline)) double f(double x, int n, int k) {
  double s = x;
  int i = 0;
  if (k) goto mid;
  for (; i < n; i++) {
    s = s * x + 1;
  mid:
    s = sin(s) + x;
  }
  return s;
}
__attribute__((noinline)) void g(double *v, int n, int k) {
  int i = k;
  if (k > 1) goto second;
first:
  v[i % 3] = v[i % 3] * v[(i + 1) % 3] + 0.1;
  i++;
second:
  v[(i + 2) % 3] += cos(v[i % 3]);
  if (i < n) goto first;
}
int main(void) {
  double h = 1e-6;
  for (int k = 0; k < 3; k++) {
    double x = 0.7;
    char key[32];
    snprintf(key, 32, "f%d.rev", k); report(key, __enzyme_autodiff((void *)f, x, 3, k));
    snprintf(key, 32, "f%d.fwd", k); report(key, __enzyme_fwddiff((void *)f, x, 1.0, 3, k));
    snprintf(key, 32, "f%d.fd", k); report(key, (f(x + h, 3, k) - f(x - h, 3, k)) / (2 * h));
    double v[3] = {0.3, 0.5, 0.2}, dv[3] = {0, 1, 0};
    __enzyme_autodiff((void *)g, v, dv, 4, k);
    for (int j = 0; j < 3; j++) {
      double p[3] = {0.3, 0.5, 0.2}, m[3] = {0.3, 0.5, 0.2};
      p[j] += h; m[j] -= h;
      g(p, 4, k); g(m, 4, k);
      snprintf(key, 32, "g%d.%d.rev", k, j); report(key, dv[j]);
      snprintf(key, 32, "g%d.%d.fd", k, j); report(key, (p[1] - m[1]) / (2 * h));
    }
  }
  return 0;
}
"""


@need("clang-22", "llvm-objcopy-22")
@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_goto_into_loops(enzcc, opt):
    v = build_and_run(enzcc, GOTO, opt)
    for k in range(3):
        assert v[f"f{k}.rev"] == pytest.approx(v[f"f{k}.fd"], rel=1e-6), k
        assert v[f"f{k}.fwd"] == pytest.approx(v[f"f{k}.rev"], rel=1e-12), k
        for j in range(3):
            assert v[f"g{k}.{j}.rev"] == pytest.approx(v[f"g{k}.{j}.fd"], rel=1e-6, abs=1e-8), (k, j)
