"""realloc of an array of records mixing floats with a pointer and an integer (REBOUND's particles grown by
reb_simulation_add), in memory the caller passed: the adjoints of each record's float fields go back to the old
shadow at the realloc's reverse. Before: 'cannot tell whether the memory realloc moves holds floating-point
values'. A buffer grown beside them that the function never reads or writes is typed by the pointer field it is
kept in (clang's TBAA, at -O1 and above: a pointer to struct rec; at -O0 such a buffer stays refused). Against
finite differences and the analytic adjoint of a record that was there before the call."""

import pytest

from adharness import PRELUDE, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22")

#: ``f`` (five records added to a ``struct sim`` through ``add``, then an energy of them), ``run`` and ``main``
#: (its gradient against central differences, and the analytic adjoint of the record there before the call),
#: after the test's ``struct rec``, ``struct sim`` (``n, cap, recs`` first), ``add`` and ``FREE_SIM(s)``
SIM_DRIVER = r"""
double f(struct sim *s, const double *x) {
  for (int i = 0; i < 5; i++) {
    struct rec r = {x[i], x[i] * x[i], 0, (unsigned)i, 1.0 + i};
    add(s, r);
  }
  double e = 0;
  for (int i = 0; i < s->n; i++) e += s->recs[i].m * sin(s->recs[i].x) * s->recs[i].v + s->recs[i].id;
  return e;
}
static double run(const double *x) {
  struct sim s = {1, 1, malloc(sizeof(struct rec))};
  s.recs[0] = (struct rec){0.7, 0.2, 0, 9, 2.0};
  double e = f(&s, x); FREE_SIM(s); return e;
}
int main(void) {
  double x[5] = {0.1, 0.2, 0.3, 0.4, 0.5}, dx[5] = {0};
  struct sim s = {1, 1, malloc(sizeof(struct rec))}, ds = {1, 1, calloc(1, sizeof(struct rec))};
  s.recs[0] = (struct rec){0.7, 0.2, 0, 9, 2.0};
  struct rec *d0 = ds.recs;
  __enzyme_autodiff((void *)f, enzyme_dup, &s, &ds, enzyme_dup, x, dx);
  report("ad.rx", d0[0].x); report("ad.rv", d0[0].v);
  report("an.rx", 2.0 * cos(0.7) * 0.2); report("an.rv", 2.0 * sin(0.7));
  for (int i = 0; i < 5; i++) {
    double h = 1e-6, t = x[i]; x[i] = t + h; double up = run(x); x[i] = t - h; double dn = run(x); x[i] = t;
    char k[8]; sprintf(k, "ad.%d", i); report(k, dx[i]); sprintf(k, "fd.%d", i); report(k, (up - dn) / (2 * h));
  }
  return 0;
}
"""


SRC = r"""struct rec { double x, v; struct rec *next; unsigned id; double m; };
struct sim { int n, cap; struct rec *recs, *backup; };
__attribute__((noinline)) void add(struct sim *s, struct rec r) {
  while (s->cap <= s->n) {
    s->cap = s->cap ? 2 * s->cap : 1;
    s->recs = realloc(s->recs, sizeof(struct rec) * s->cap);
#ifdef WITH_BACKUP
    s->backup = realloc(s->backup, sizeof(struct rec) * s->cap);  /* (never read or written here) */
#endif
  }
  s->recs[s->n] = r;
  s->recs[s->n].next = s->n ? &s->recs[0] : 0;
  s->n++;
}
#define FREE_SIM(s) (free((s).recs), free((s).backup))
""" + SIM_DRIVER


@pytest.mark.parametrize("opt", ["-O0", "-O2", "-O2 -DWITH_BACKUP"])
def test_realloc_of_records_gives_adjoints_back(enzcc, opt):
    v = build_and_run(enzcc, SRC, opt.split()[0], extra=tuple(opt.split()[1:]))
    for k in ("rx", "rv"):
        assert abs(v[f"ad.{k}"] - v[f"an.{k}"]) <= 1e-12 * abs(v[f"an.{k}"]), v
    for i in range(5):
        assert abs(v[f"ad.{i}"] - v[f"fd.{i}"]) <= 1e-6 * max(1.0, abs(v[f"fd.{i}"])), v
