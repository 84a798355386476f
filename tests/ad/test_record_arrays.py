"""Records mixing doubles with a pointer and an int, moved the ways REBOUND moves its particles, in functions
differentiated on their own (``--ad-inline=none``) and inlined (``auto``), at -O2:

- a record passed by value and stored into an array (``reb_simulation_add(r, p)``: a memcpy from the ``byval``
  parameter, whose type gives the fields);
- a whole array of them copied into a buffer grown by realloc (``memcpy(backup, r->particles, N * sizeof)``:
  per-field strided adjoints, by the record type the array is indexed as or its pointer's TBAA);
- a buffer of integer records grown by realloc and never touched in the function (JANUS's integer particles:
  typed by its pointer's TBAA, no derivative);
- ``rand_r`` (no derivative).

Before, each was refused ('cannot tell whether the memory this memcpy copies / realloc moves holds
floating-point values', 'no derivative rule for call to rand_r'). Gradients against central differences; the
shadows stay valgrind-clean where valgrind is installed. (At -O0, without TBAA, the untouched integer buffer
stays refused in one line.)"""

import shutil

import pytest

from adharness import PRELUDE, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22")

SOURCE = r"""
#include <stdlib.h>
struct p { double x, v; struct p *c; int id; };
struct pi { long x, v; };
struct sim { struct p *ps; struct p *backup; struct pi *ints; int n; unsigned seed; };
__attribute__((noinline)) long total(const struct pi *q, int n) {
  long t = 0;
  for (int i = 0; i < n; i++) t += q[i].x * q[i].v;
  return t;
}
__attribute__((noinline)) void add(struct sim *s, struct p q) { s->ps[s->n++] = q; }
__attribute__((noinline)) void keep(struct sim *s) {
  s->backup = realloc(s->backup, s->n * sizeof(struct p));
  memcpy(s->backup, s->ps, s->n * sizeof(struct p));
  s->ints = realloc(s->ints, s->n * sizeof(struct pi));
}
double f(struct sim *s, double a) {
  struct p q = {a, 2.0 * a, s->ps, 7};
  add(s, q);
  keep(s);
  double out = 0;
  if (rand_r(&s->seed) % 2 == 0) out = 1.0;
  for (int i = 0; i < s->n; i++) out += s->backup[i].x * s->backup[i].v + s->ps[i].x * s->ps[i].c->x;
  return out;
}
static double run(double a, double *da) {
  struct p ps[4] = {{0.5, 1.5, 0, 0}, {-0.25, 2.0, 0, 1}};
  struct p dps[4] = {{0}};
  ps[0].c = &ps[1]; ps[1].c = &ps[0]; dps[0].c = &dps[1]; dps[1].c = &dps[0];
  struct sim s = {ps, 0, 0, 2, 1}, ds = {dps, 0, 0, 2, 1};
  double y;
  if (da) { *da = __enzyme_autodiff((void *)f, enzyme_dup, &s, &ds, enzyme_out, a);
            report("ad.x0", dps[0].x); report("ad.v1", dps[1].v); y = 0; }
  else y = f(&s, a);
  free(s.backup); free(s.ints);  /* (the shadows: released by the derivative) */
  return y;
}
static double run_x(int which, double h) {
  struct p ps[4] = {{0.5, 1.5, 0, 0}, {-0.25, 2.0, 0, 1}};
  if (which == 0) ps[0].x += h; else ps[1].v += h;
  ps[0].c = &ps[1]; ps[1].c = &ps[0];
  struct sim s = {ps, 0, 0, 2, 1};
  double y = f(&s, 0.75);
  free(s.backup); free(s.ints);
  return y;
}
int main(int argc, char **argv) {
  double da = 0, h = 1e-6;
  struct pi q[3] = {{1, 2}, {3, 4}, {argc, 5}};
  if (total(q, 3) != 14 + 5 * argc) return 1;
  run(0.75, &da);
  report("ad.a", da);
  report("fd.a", (run(0.75 + h, 0) - run(0.75 - h, 0)) / (2 * h));
  report("fd.x0", (run_x(0, h) - run_x(0, -h)) / (2 * h));
  report("fd.v1", (run_x(1, h) - run_x(1, -h)) / (2 * h));
  return 0;
}
"""


@pytest.mark.parametrize("inline", ["auto", "none"])
def test_records_by_value_copied_and_grown(enzcc, inline):
    v = build_and_run(enzcc, SOURCE, "-O2", extra=(f"--ad-inline={inline}",))
    for k in ("a", "x0", "v1"):
        assert abs(v[f"ad.{k}"] - v[f"fd.{k}"]) <= 1e-6 * max(1.0, abs(v[f"fd.{k}"])), (k, v)
    assert abs(v["ad.a"]) > 1.0 and abs(v["ad.x0"]) > 1.0
    if shutil.which("valgrind"):
        r = enzcc.run("valgrind", "-q", "--error-exitcode=9", "./t", check=False)
        assert r.returncode == 0, r.stderr[-2000:]


def test_untouched_integer_buffer_without_tbaa_is_refused(enzcc):
    enzcc.write("t.c", PRELUDE + SOURCE)
    r = enzcc("-O0", "t.c", "-lm", "-o", "t", check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and "realloc moves" in lines[0], r.stderr
