"""realloc, at -O0, of a buffer that the differentiated function only grows and never reads or writes (REBOUND's
``rim->particles_backup``, grown by reb_simulation_add for another integrator): without TBAA nothing in the
function says what it holds, but C code that uses the buffer elsewhere indexes the pointer kept in that struct
field as its element type (``getelementptr %struct.rec`` on a load of ``getelementptr %struct.integ, ptr, 0, 1``).
enzcc types the buffer from those uses in any function of the module. Before: 'cannot tell whether the memory
realloc moves holds floating-point values'. Gradients against central differences and the analytic adjoint of
a record that was there before the call; a buffer only copied to and from the records (``memcpy``, REBOUND's
TRACE backup) is typed by the other side, arrays of doubles or ints by their element type (doubles also read as
records of doubles: IAS15's csa0); where no function uses the field, or uses it as two types (a ``void *``
field), the one-line refusal stays."""

import pytest

from adharness import build_and_run
from enzcc_testing import need
from test_realloc_records import SIM_DRIVER

pytestmark = need("clang-22")

SRC = r"""struct rec { double x, v; struct rec *next; unsigned id; double m; };
struct integ { int mode; SCRATCH_T *backup; double *dcrit; int *map; double *cs; };
struct v3 { double x, y, z; };
struct sim { int n, cap; struct rec *recs; struct integ ig; };
__attribute__((noinline)) void add(struct sim *s, struct rec r) {
  while (s->cap <= s->n) {
    s->cap = s->cap ? 2 * s->cap : 1;
    s->recs = realloc(s->recs, sizeof(struct rec) * s->cap);
    struct integ *ig = &s->ig;
    ig->backup = realloc(ig->backup, sizeof(struct rec) * s->cap);  /* (never read or written here) */
#ifdef SCALARS  /* arrays of doubles and ints, also only grown here */
    ig->dcrit = realloc(ig->dcrit, sizeof(double) * s->cap);
    ig->map = realloc(ig->map, sizeof(int) * s->cap);
    ig->cs = realloc(ig->cs, 3 * sizeof(double) * s->cap);
#endif
  }
  s->recs[s->n] = r;
  s->recs[s->n].next = s->n ? &s->recs[0] : 0;
  s->n++;
}
#ifdef USE_AS_RECORDS  /* another integrator's step: the only code that says what the buffer holds */
double save(struct sim *s) {
  struct rec *b = s->ig.backup; double t = 0;
  for (int i = 0; i < s->n; i++) { b[i] = s->recs[i]; t += b[i].x; }
  return t;
}
#endif
#ifdef COPY_RECORDS  /* only copied to and from the records (REBOUND's TRACE backup) */
void save(struct sim *s) { memcpy(s->ig.backup, s->recs, s->n * sizeof(struct rec)); }
void restore(struct sim *s) { memcpy(s->recs, s->ig.backup, s->n * sizeof(struct rec)); }
#endif
#ifdef SCALARS
void crit(struct sim *s) { for (int i = 0; i < s->n; i++) { s->ig.dcrit[i] = 2.0 * s->recs[i].x; s->ig.map[i] = i; } }
double cs(struct sim *s) {  /* (REBOUND's IAS15 csa0: doubles, read as vectors of three as well) */
  double *const c = s->ig.cs; struct v3 *g = (struct v3 *)c; double t = 0;
  for (int i = 0; i < s->n; i++) { c[3 * i] = 1.0; t += g[i].x + g[i].y; }
  return t;
}
#endif
#ifdef USE_AS_DOUBLES
double sum(struct sim *s) { double t = 0; for (int i = 0; i < s->n; i++) t += ((double *)s->ig.backup)[i]; return t; }
#endif
#define FREE_SIM(s) (free((s).recs), free((s).ig.backup), free((s).ig.dcrit), free((s).ig.map), free((s).ig.cs))
""" + SIM_DRIVER


@pytest.mark.parametrize("opt,use", [("-O0", "-DUSE_AS_RECORDS"), ("-O2", "-DUSE_AS_RECORDS"),
                                     ("-O0", "-DCOPY_RECORDS"), ("-O0", "-DUSE_AS_RECORDS -DSCALARS")])
def test_buffer_typed_by_its_uses_elsewhere(enzcc, opt, use):
    v = build_and_run(enzcc, SRC, opt, extra=("-DSCRATCH_T=struct rec", *use.split()))
    for k in ("rx", "rv"):
        assert abs(v[f"ad.{k}"] - v[f"an.{k}"]) <= 1e-12 * abs(v[f"an.{k}"]), v
    for i in range(5):
        assert abs(v[f"ad.{i}"] - v[f"fd.{i}"]) <= 1e-6 * max(1.0, abs(v[f"fd.{i}"])), v
        assert abs(v[f"ad.{i}"]) > 1e-3, v  # (not a zero gradient)


@pytest.mark.parametrize("flags", [("-DSCRATCH_T=struct rec",),  # no code says what it holds
                                   ("-DSCRATCH_T=void", "-DUSE_AS_RECORDS", "-DUSE_AS_DOUBLES")])  # two types
def test_buffer_without_one_type_stays_refused(enzcc, flags):
    enzcc.write("t.c", __import__("adharness").PRELUDE + SRC)
    r = enzcc("-O0", "-w", "t.c", *flags, "-lm", "-o", "t", check=False)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, r.stderr
    assert "cannot tell whether the memory realloc moves holds floating-point values" in lines[0], r.stderr
    assert "Traceback" not in r.stderr and not (enzcc.cwd / "t").exists()


SHUFFLE = r"""struct tr { int n; int *ks; double *w; };
double f(struct tr *t, const double *x) {
  for (int i = t->n - 1; i > 0; i--) t->ks[i] = t->ks[i - 1];  /* ints moved within the array: bits only */
  double e = 0;
  for (int i = 0; i < t->n; i++) e += t->w[i] * x[i] * x[i];
  return e;
}
int total(struct tr *t) { int s = 0; for (int i = 0; i < t->n; i++) s += t->ks[i]; return s; }  /* (not called) */
int main(void) {
  int ks[4] = {1, 2, 3, 4}; double w[4] = {1, 2, 3, 4}, x[4] = {0.5, 1.5, -1, 2}, dx[4] = {0};
  int dks[4] = {1, 2, 3, 4}; double dw[4] = {0};
  struct tr t = {4, ks, w}, dt = {4, dks, dw};
  __enzyme_autodiff((void *)f, enzyme_dup, &t, &dt, enzyme_dup, x, dx);
  for (int i = 0; i < 4; i++) {
    char k[8]; sprintf(k, "ad.%d", i); report(k, dx[i]); sprintf(k, "an.%d", i); report(k, 2 * w[i] * x[i]);
    sprintf(k, "dw.%d", i); report(k, dw[i]); sprintf(k, "aw.%d", i); report(k, x[i] * x[i]);
  }
  report("k3", ks[3]);
  return 0;
}
"""


def test_integers_moved_within_a_field_array_at_O0(enzcc):
    """REBOUND's TRACE ``current_Ks[i*n+j+i] = current_Ks[i*n+j]`` at -O0: an i32 copied within an array that
    nothing in the function types, whose struct field other code indexes as ``int``. Before: 'cannot tell whether
    the i32 copied here is a floating-point value'."""
    v = build_and_run(enzcc, SHUFFLE, "-O0")
    for i in range(4):
        assert v[f"ad.{i}"] == v[f"an.{i}"] and v[f"ad.{i}"] != 0, v
        assert v[f"dw.{i}"] == v[f"aw.{i}"], v
    assert v["k3"] == 3, v


MAPPED = r"""struct col { int p1; double gb; };
struct sim2 { int n; int *map; struct col *cols; };
double g(struct sim2 *s, const double *x) {
  double e = 0;
  for (int i = 0; i < s->n; i++) {
    int ip = i;
    if (s->map) ip = s->map[i];  /* (REBOUND's collision search: the encounter map, when there is one) */
    s->cols[i].p1 = ip;
    s->cols[i].gb = x[ip] * x[ip];
    e += s->cols[i].gb * (1 + s->cols[i].p1);
  }
  return e;
}
static double run(const double *x) {
  int map[3] = {2, 0, 1}; struct col c[3]; struct sim2 s = {3, map, c}; return g(&s, x);
}
int main(void) {
  int map[3] = {2, 0, 1}, dmap[3] = {2, 0, 1}; struct col c[3], dc[3] = {{0, 0}};
  double x[3] = {0.5, 1.5, -1}, dx[3] = {0};
  struct sim2 s = {3, map, c}, ds = {3, dmap, dc};
  __enzyme_autodiff((void *)g, enzyme_dup, &s, &ds, enzyme_dup, x, dx);
  for (int i = 0; i < 3; i++) {
    double h = 1e-6, t = x[i]; x[i] = t + h; double up = run(x); x[i] = t - h; double dn = run(x); x[i] = t;
    char n[8]; sprintf(n, "ad.%d", i); report(n, dx[i]); sprintf(n, "an.%d", i); report(n, 2 * x[i] * (1 + i));
    sprintf(n, "fd.%d", i); report(n, (up - dn) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_index_from_a_map_stored_into_an_int_field(enzcc, opt):
    """``ip = map ? map[i] : i`` stored into a struct's int field in memory with derivatives (REBOUND's
    ``r->collisions[k].p1 = ip``): a declared integer field holds an integer. Before, at -O0: 'integer bits loaded
    from memory that has derivatives are stored here after a phi, select or bit operation'."""
    v = build_and_run(enzcc, MAPPED, opt)
    for i in range(3):
        assert abs(v[f"ad.{i}"] - v[f"an.{i}"]) <= 1e-12 * abs(v[f"an.{i}"]) and v[f"ad.{i}"] != 0, v
        assert abs(v[f"ad.{i}"] - v[f"fd.{i}"]) <= 1e-6 * max(1.0, abs(v[f"fd.{i}"])), v
