"""Recursive and mutually recursive functions, in both modes at -O0..-O3, against analytic derivatives and
central finite differences. A recursive call cannot be inlined: forward mode calls the callee's forward
derivative, reverse mode its augmented primal (which returns a tape) and later its reverse function."""

import pytest

from adharness import build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

OPTS = ["-O0", "-O1", "-O2", "-O3"]

PROGRAMS = r"""
/* p(x, n) = sin(x) p(x, n-1) + x, p(x, 0) = 1 */
double p(double x, int n) { return n == 0 ? 1.0 : sin(x) * p(x, n - 1) + x; }
double dp(double x, int n) { return n == 0 ? 0.0 : cos(x) * p(x, n - 1) + sin(x) * dp(x, n - 1) + 1.0; }

/* mutual recursion */
double od(double x, int n);
double ev(double x, int n) { return n == 0 ? x : cos(od(x, n - 1)); }
double od(double x, int n) { return n == 0 ? x : ev(x, n - 1) * x; }

/* through memory: out[0] is read and overwritten after the recursive call returns, so the reverse code of
   the callee must not read memory again */
void sq(double *a, int n, double *out) {
  if (n == 0) return;
  out[0] += sin(a[n - 1]) * a[n - 1];
  sq(a, n - 1, out);
  out[0] *= 1.1 + 0.1 * out[0];
}

/* tree recursion, called in a loop with a buffer the callee allocates */
double tsum(const double *a, int lo, int hi) {
  if (hi - lo == 1) return a[lo] * a[lo];
  int mid = (lo + hi) / 2;
  double *t = malloc(2 * sizeof(double));
  t[0] = tsum(a, lo, mid);
  t[1] = sin(tsum(a, mid, hi));
  double r = t[0] * 0.5 + t[1] * t[0];
  free(t);
  return r;
}
double loop_tsum(const double *a, int n) {
  double s = 0;
  for (int k = 1; k <= n; k++) s += tsum(a, 0, k) / k;
  return s;
}

static double fd_ev(double x, int n) { double h = 1e-6; return (ev(x + h, n) - ev(x - h, n)) / (2 * h); }

int main(void) {
  double x = 0.7;
  report("p.exact", dp(x, 5));
  report("p.rev", __enzyme_autodiff((void *)p, x, enzyme_const, 5));
  report("p.fwd", __enzyme_fwddiff((void *)p, x, 1.0, enzyme_const, 5));
  report("ev.fd", fd_ev(x, 6));
  report("ev.rev", __enzyme_autodiff((void *)ev, x, enzyme_const, 6));
  report("ev.fwd", __enzyme_fwddiff((void *)ev, x, 1.0, enzyme_const, 6));
  enum { N = 5 };
  double a[N] = {0.3, -0.2, 0.5, 0.9, 0.1}, h = 1e-6;
  char name[32];
  for (int i = 0; i < N; i++) {
    double da[N] = {0}, out[1] = {0.2}, dout[1] = {1}, ta[N] = {0}, o2[1] = {0.2}, to[1] = {0};
    __enzyme_autodiff((void *)sq, enzyme_dup, a, da, enzyme_const, N, enzyme_dup, out, dout);
    ta[i] = 1;
    __enzyme_fwddiff((void *)sq, enzyme_dup, a, ta, enzyme_const, N, enzyme_dup, o2, to);
    double ap[N], am[N], op[1] = {0.2}, om[1] = {0.2};
    for (int j = 0; j < N; j++) ap[j] = am[j] = a[j];
    ap[i] += h; am[i] -= h;
    sq(ap, N, op); sq(am, N, om);
    snprintf(name, sizeof name, "sq.fd.%d", i); report(name, (op[0] - om[0]) / (2 * h));
    snprintf(name, sizeof name, "sq.rev.%d", i); report(name, da[i]);
    snprintf(name, sizeof name, "sq.fwd.%d", i); report(name, to[0]);
    double dl[N] = {0}, tl[N] = {0};
    __enzyme_autodiff((void *)loop_tsum, enzyme_dup, a, dl, enzyme_const, N);
    tl[i] = 1;
    double fl = __enzyme_fwddiff((void *)loop_tsum, enzyme_dup, a, tl, enzyme_const, N);
    snprintf(name, sizeof name, "tsum.fd.%d", i); report(name, (loop_tsum(ap, N) - loop_tsum(am, N)) / (2 * h));
    snprintf(name, sizeof name, "tsum.rev.%d", i); report(name, dl[i]);
    snprintf(name, sizeof name, "tsum.fwd.%d", i); report(name, fl);
  }
  return 0;
}
"""


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


@pytest.mark.parametrize("opt", OPTS)
def test_recursive_functions(enzcc, opt):
    v = build_and_run(enzcc, PROGRAMS, opt)
    assert _close(v["p.rev"], v["p.exact"], 1e-12) and _close(v["p.fwd"], v["p.exact"], 1e-12), v
    assert _close(v["ev.rev"], v["ev.fd"], 1e-7) and _close(v["ev.fwd"], v["ev.rev"], 1e-12), v
    for i in range(5):
        for what in ("sq", "tsum"):
            fd, rev, fwd = (v[f"{what}.{k}.{i}"] for k in ("fd", "rev", "fwd"))
            assert _close(rev, fd, 1e-6) and _close(fwd, rev, 1e-10), (what, i, fd, rev, fwd)


# Recursive functions returning pointers to memory with derivatives: a list they allocate and fill (from an
# array, from a float argument), a pointer into the argument. Their augmented primals return the shadow too.
RETURNED_POINTERS = r"""
typedef struct node { double v; struct node *next; } node;
node *build(const double *x, int i, int n) {
  if (i == n) return NULL;
  node *p = malloc(sizeof *p);
  p->v = x[i] * x[i] + (i ? x[i - 1] : 0);
  p->next = build(x, i + 1, n);
  return p;
}
node *chain(double v, int depth) {
  node *p = malloc(sizeof *p);
  p->v = v * depth;
  p->next = depth > 1 ? chain(v * v, depth - 1) : NULL;
  return p;
}
double *last(double *a, int n) { return n == 1 ? a : last(a + 1, n - 1); }
double f(const double *x, int n) {  /* sum_i (x_i^2 + x_{i-1})^2, through the list */
  double s = 0;
  for (node *p = build(x, 0, n); p;) { node *q = p->next; s += p->v * p->v; free(p); p = q; }
  return s;
}
double h(double v) {  /* 4 v + 3 v^2 + 2 v^4 + v^8 */
  double s = 0;
  for (node *p = chain(v, 4); p;) { node *q = p->next; s += p->v; free(p); p = q; }
  return s;
}
double g(double *a, int n) { return *last(a, n) * a[0]; }
enum { N = 4 };
extern int enzyme_width;
typedef struct { double a, b; } two;
two __enzyme_fwddiff_2(void *, ...);
int main(void) {
  double x[N] = {0.3, -0.7, 1.1, 0.5}, dx[N] = {0};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, N);
  char name[32];
  for (int k = 0; k < N; k++) {
    double b = x[k] * x[k] + (k ? x[k - 1] : 0), exact = 4 * b * x[k];
    if (k + 1 < N) exact += 2 * (x[k + 1] * x[k + 1] + x[k]);
    double xp[N], xm[N], eps = 1e-6;
    for (int i = 0; i < N; i++) xp[i] = xm[i] = x[i];
    xp[k] += eps; xm[k] -= eps;
    double tx[N] = {0};
    tx[k] = 1;
    snprintf(name, sizeof name, "f.fwd.%d", k);
    report(name, __enzyme_fwddiff((void *)f, enzyme_dup, x, tx, enzyme_const, N));
    snprintf(name, sizeof name, "f.rev.%d", k); report(name, dx[k]);
    snprintf(name, sizeof name, "f.exact.%d", k); report(name, exact);
    snprintf(name, sizeof name, "f.fd.%d", k); report(name, (f(xp, N) - f(xm, N)) / (2 * eps));
  }
  double v = 0.9;
  report("h.rev", __enzyme_autodiff((void *)h, v));
  report("h.fwd", __enzyme_fwddiff((void *)h, v, 1.0));
  report("h.exact", 4 + 6 * v + 8 * v * v * v + 8 * pow(v, 7));
  double t2[2][N] = {{1, 0, 0, 0}, {0, 0, 1, 0}};
  two w = __enzyme_fwddiff_2((void *)f, enzyme_width, 2, enzyme_dup, x, t2[0], t2[1], enzyme_const, N);
  report("f.vec.0", w.a); report("f.vec.2", w.b);
  double a[3] = {2, 3, 5}, da[3] = {0};
  __enzyme_autodiff((void *)g, enzyme_dup, a, da, enzyme_const, 3);
  report("g.0", da[0]); report("g.1", da[1]); report("g.2", da[2]);
  double ta[3] = {1, 10, 100};
  report("g.fwd", __enzyme_fwddiff((void *)g, enzyme_dup, a, ta, enzyme_const, 3));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_recursive_functions_returning_pointers(enzcc, opt):
    """The shadow of the pointer a recursive call returns comes back from its augmented primal and from its
    forward derivative (one per lane in vector mode): they were refused."""
    v = build_and_run(enzcc, RETURNED_POINTERS, opt)
    for k in range(4):
        assert _close(v[f"f.rev.{k}"], v[f"f.exact.{k}"], 1e-12), (k, v)
        assert _close(v[f"f.fwd.{k}"], v[f"f.exact.{k}"], 1e-12), (k, v)
        assert _close(v[f"f.rev.{k}"], v[f"f.fd.{k}"], 1e-6), (k, v)
    assert _close(v["f.vec.0"], v["f.exact.0"], 1e-12) and _close(v["f.vec.2"], v["f.exact.2"], 1e-12), v
    assert _close(v["h.rev"], v["h.exact"], 1e-12) and _close(v["h.fwd"], v["h.exact"], 1e-12), v
    assert (v["g.0"], v["g.1"], v["g.2"], v["g.fwd"]) == (5.0, 0.0, 2.0, 5.0 + 200.0)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_recursive_function_returning_a_shadowed_pointer_in_reverse_vector_mode(enzcc, opt):
    """Reverse vector mode: the augmented primal returns one shadow per lane (it was refused)."""
    src = RETURNED_POINTERS.split("enum { N")[0] + r"""
extern int enzyme_width;
void __enzyme_autodiff_v(void *, ...);
void fo(const double *x, int n, double *out) { *out = f(x, n); }
int main(void) {
  double x[3] = {0.3, -0.7, 1.1}, d0[3] = {0}, d1[3] = {0}, out, s0 = 1, s1 = 2;
  __enzyme_autodiff_v((void *)fo, enzyme_width, 2, enzyme_dup, x, d0, d1, enzyme_const, 3, enzyme_dupnoneed, &out,
                      &s0, &s1);
  char name[16];
  for (int k = 0; k < 3; k++) {
    double b = x[k] * x[k] + (k ? x[k - 1] : 0), exact = 4 * b * x[k];
    if (k + 1 < 3) exact += 2 * (x[k + 1] * x[k + 1] + x[k]);
    snprintf(name, sizeof name, "l0.%d", k); report(name, d0[k]);
    snprintf(name, sizeof name, "l1.%d", k); report(name, d1[k]);
    snprintf(name, sizeof name, "exact.%d", k); report(name, exact);
  }
  return 0;
}
"""
    v = build_and_run(enzcc, src, opt)
    for k in range(3):
        assert _close(v[f"l0.{k}"], v[f"exact.{k}"], 1e-12) and _close(v[f"l1.{k}"], 2 * v[f"exact.{k}"], 1e-12), v


# A divide-and-conquer sum over a window struct (two bounds and a pointer to the data) that each level copies
# with `*half = *w` (a memcpy of pointers and integers) into a heap block it frees after the recursive calls:
# the copy's shadow must carry the data's shadow pointer.
WINDOWS = r"""
typedef struct { long lo, hi; double *data; } window;
double wsum(window *w) {
  if (w->hi - w->lo > 2) {
    long mid = (w->lo + w->hi) / 2;
    window *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    *a = *w; a->hi = mid;
    *b = *w; b->lo = mid;
    double s = wsum(a) * 2.0 + wsum(b);
    free(a); free(b);
    return s;
  }
  double s = 0;
  for (long i = w->lo; i < w->hi; i++) s += w->data[i] * w->data[i];
  return s;
}
int main(void) {
  double d[16], dd[16] = {0};
  for (int i = 0; i < 16; i++) d[i] = 0.25 * i - 1.0;
  window w = {0, 16, d}, dw = {0, 0, dd};
  __enzyme_autodiff((void *)wsum, &w, &dw);
  /* element i is weighted by 2^(number of times it lies in a left half) */
  for (int i = 0; i < 16; i++) {
    double weight = 1; long lo = 0, hi = 16;
    while (hi - lo > 2) { long mid = (lo + hi) / 2; if (i < mid) { weight *= 2; hi = mid; } else lo = mid; }
    char k[16]; snprintf(k, 16, "ad.%d", i); report(k, dd[i]); snprintf(k, 16, "an.%d", i); report(k, weight * 2 * d[i]);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_struct_copies_of_pointers_through_recursion(enzcc, opt):
    from adharness import assert_close

    assert_close(build_and_run(enzcc, WINDOWS, opt), "ad.", "an.", rel=1e-14, abs_=0)


NESTED_CALLS = r"""
static double g(double a, double b) { return a * sin(b) + b; }
/* the result of one call that is not inlined is an argument of the next */
double f(const double *x) { return g(x[0], g(x[1], g(x[0], x[1]))); }
int main(void) {
  double x[2] = {0.4, 1.3}, dx[2] = {0}, t0[2] = {1, 0}, t1[2] = {0, 1};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx);
  report("rev.0", dx[0]);
  report("rev.1", dx[1]);
  report("fwd.0", __enzyme_fwddiff((void *)f, enzyme_dup, x, t0));
  report("fwd.1", __enzyme_fwddiff((void *)f, enzyme_dup, x, t1));
  for (int k = 0; k < 2; k++) {
    double h = 1e-6, p[2] = {x[0], x[1]}, m[2] = {x[0], x[1]};
    char key[16];
    p[k] += h; m[k] -= h;
    snprintf(key, sizeof key, "fd.%d", k); report(key, (f(p) - f(m)) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_nested_calls_not_inlined(enzcc, opt):
    """With --ad-inline=none, a call's tangent (forward mode) or adjoint feeding another call of the same kind
    (found by the fuzzer: forward mode built invalid IR)."""
    v = build_and_run(enzcc, NESTED_CALLS, opt, extra=("--ad-inline=none",))
    for k in range(2):
        assert v[f"rev.{k}"] == pytest.approx(v[f"fd.{k}"], rel=1e-6, abs=1e-8)
        assert v[f"fwd.{k}"] == pytest.approx(v[f"rev.{k}"], rel=1e-12)


CONSTANT_NODES = r"""
/* recursive builders whose nodes hold only constants (an index, a constant coefficient), linked into a node
   that has a shadow (the first level is inlined into f, and dotl is given x with derivatives) */
typedef struct IL { int idx; double coef; struct IL *next; } IL;
IL *ilist(int k, int n) {
  if (k >= n) return NULL;
  IL *p = malloc(sizeof *p);
  p->idx = (3 * k) % n; p->coef = k + 1.0; p->next = ilist(k + 1, n);
  return p;
}
double dotl(const IL *p, const double *x) { return p ? p->coef * x[p->idx] * x[p->idx] + dotl(p->next, x) : 0; }
void killl(IL *p) { while (p) { IL *q = p->next; free(p); p = q; } }
double f1(const double *x, int n) { IL *l = ilist(0, n); double r = dotl(l, x); killl(l); return r; }

/* a product tree of leaves that hold indices only */
typedef struct E { int leaf, i; struct E *a, *b; } E;
double ev(const E *e, const double *x) { return e->leaf ? x[e->i] : ev(e->a, x) * ev(e->b, x); }
E *build(int k, int n) {
  E *e = malloc(sizeof *e);
  if (k == n - 1) { e->leaf = 1; e->i = k; return e; }
  E *l = malloc(sizeof *l); l->leaf = 1; l->i = k;
  e->leaf = 0; e->a = l; e->b = build(k + 1, n);
  return e;
}
double f2(const double *x, int n) { return ev(build(0, n), x); }   /* x0 x1 x2 x3 (the tree leaks) */

typedef struct { double d1, d2; } two;
two __enzyme_fwddiff2(void *, ...) __asm__("__enzyme_fwddiff");
extern int enzyme_width;
static void check(int which, const double *x, const double *dx, double (*fwd)(const double *, const double *),
                  two (*vec)(const double *, const double *, const double *)) {
  for (int i = 0; i < 4; i++) {
    double t[4] = {0}, t2[4] = {0}; char name[32];
    t[i] = 1; t2[(i + 1) % 4] = 1;
    snprintf(name, sizeof name, "rev%d.%d", which, i); report(name, dx[i]);
    snprintf(name, sizeof name, "fwd%d.%d", which, i); report(name, fwd(x, t));
    two w = vec(x, t, t2);
    snprintf(name, sizeof name, "vec%d.%d", which, i); report(name, w.d1);
    snprintf(name, sizeof name, "vec%d.%d", which, (i + 1) % 4 + 10); report(name, w.d2);
  }
}
#define DRIVERS(F) \
  static double fwd_##F(const double *x, const double *t) { \
    return __enzyme_fwddiff((void *)F, enzyme_dup, x, t, enzyme_const, 4); } \
  static two vec_##F(const double *x, const double *t, const double *t2) { \
    return __enzyme_fwddiff2((void *)F, enzyme_width, 2, enzyme_dup, x, t, t2, enzyme_const, 4); }
DRIVERS(f1)
DRIVERS(f2)
int main(void) {
  double x[4] = {0.5, -1.5, 2.0, 0.75}, d1[4] = {0}, d2[4] = {0};
  __enzyme_autodiff((void *)f1, enzyme_dup, x, d1, enzyme_const, 4);
  __enzyme_autodiff((void *)f2, enzyme_dup, x, d2, enzyme_const, 4);
  check(1, x, d1, fwd_f1, vec_f1);
  check(2, x, d2, fwd_f2, vec_f2);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_recursive_builders_of_nodes_without_derivatives(enzcc, opt):
    """A recursive function returning nodes that hold only constants, linked into a node with a shadow: its
    derived functions return the nodes' shadows (zero-filled). The shadow stored was null, and the program
    crashed reading it (every level, reverse, forward and vector mode)."""
    v = build_and_run(enzcc, CONSTANT_NODES, opt)
    x = [0.5, -1.5, 2.0, 0.75]
    coef = {(3 * k) % 4: k + 1.0 for k in range(4)}
    g1 = [2 * coef[i] * x[i] for i in range(4)]
    g2 = [x[1] * x[2] * x[3], x[0] * x[2] * x[3], x[0] * x[1] * x[3], x[0] * x[1] * x[2]]
    for which, g in ((1, g1), (2, g2)):
        for i in range(4):
            for key in (f"rev{which}.{i}", f"fwd{which}.{i}", f"vec{which}.{i}", f"vec{which}.{i + 10}"):
                assert v[key] == pytest.approx(g[i], rel=1e-13), key


NTH_OF_A_BUILT_LIST = r"""
typedef struct Node { double v; struct Node *next; } Node;
double *nth(Node *p, int k) { return k == 0 ? &p->v : nth(p->next, k - 1); }
double f(double *x, int n) {
  Node *l = NULL;
  for (int i = 0; i < n; i++) { Node *p = malloc(sizeof *p); p->v = x[i] * x[i]; p->next = l; l = p; }
  double *b = nth(l, 3);
  return l->v * *b;  /* x3^2 x0^2 (the list leaks) */
}
int main(void) {
  double x[4] = {0.4, 1.7, -0.2, 0.9}, dx[4] = {0};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, 4);
  for (int i = 0; i < 4; i++) { char name[8]; snprintf(name, sizeof name, "d%d", i); report(name, dx[i]); }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_a_pointer_read_from_null_on_a_path_never_taken(enzcc, opt):
    """From -O2 on, clang turns l->v on the path where the list is empty into a load from inttoptr(8), merged
    with the list: that load reads no memory (the path faults first), so it needs no shadow. It was refused
    ('a phi mixes memory with derivatives and pointer %.pre (from 'load')')."""
    v = build_and_run(enzcc, NTH_OF_A_BUILT_LIST, opt)
    x = [0.4, 1.7, -0.2, 0.9]
    want = [2 * x[0] * x[3] ** 2, 0, 0, 2 * x[3] * x[0] ** 2]
    assert [v[f"d{i}"] for i in range(4)] == pytest.approx(want, rel=1e-14, abs=0)
