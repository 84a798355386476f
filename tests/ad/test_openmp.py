"""OpenMP parallel regions at -O0..-O3 (``enzcc -fopenmp``). Forward mode forks each region's outlined function
again as its forward derivative; reverse mode forks its augmented primal (a tape per thread) and, in the reverse
sweep, its reverse with atomic adds to shared adjoints and mirrored barriers and critical sections
(:mod:`enzcc.ad.calls.openmp`); reduction clauses and floats captured by value (``firstprivate``) included. What is
not supported is a one-line error: in reverse mode, a dynamic schedule and critical sections (or reductions)
that do more than add to a shared value."""

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

OPTS = ["-O0", "-O1", "-O2", "-O3"]

# two regions: an elementwise loop (a shared scalar read in every thread), then a reduction into a shared
# variable inside a critical section
PROGRAM = r"""
#include <omp.h>
double f(double *a, double s, int n) {
  #pragma omp parallel for
  for (int i = 0; i < n; i++) a[i] = sin(a[i]) * s + a[i] * a[i];
  double total = 0;
  #pragma omp parallel
  {
    double mine = 0;
    #pragma omp for
    for (int i = 0; i < n; i++) mine += a[i] * a[i] * (i + 1);
    #pragma omp critical
    total += mine;
  }
  return total;
}
int main(void) {
  enum { N = 100 };
  double a[N], da[N], b[N], ok = 0;
  for (int i = 0; i < N; i++) { a[i] = 0.01 * i - 0.3; da[i] = 0.5 + 0.001 * i; b[i] = a[i]; }
  double s = 1.7, ds = -0.4;
  double t = __enzyme_fwddiff((void *)f, a, da, s, ds, N);
  /* analytic: a'[i] = cos(b) s db + sin(b) ds + 2 b db; total' = sum 2 a[i] a'[i] (i+1) */
  double expect = 0;
  for (int i = 0; i < N; i++) {
    double db = 0.5 + 0.001 * i, ai = sin(b[i]) * s + b[i] * b[i];
    double dai = cos(b[i]) * s * db + sin(b[i]) * ds + 2 * b[i] * db;
    expect += 2 * ai * dai * (i + 1);
    char k[16]; snprintf(k, 16, "ad.a%d", i); report(k, da[i]); snprintf(k, 16, "an.a%d", i); report(k, dai);
  }
  report("ad.total", t); report("an.total", expect);
  report("threads", omp_get_max_threads());
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_forward_mode_through_parallel_regions(enzcc, opt):
    v = build_and_run(enzcc, PROGRAM, opt, extra=("-fopenmp",))
    assert_close(v, "ad.", "an.", rel=1e-12, abs_=1e-12)


def _run_with_threads(enzcc, counts, prefix_a: str, prefix_b: str, rel: float, abs_: float) -> None:
    """Run the built ./t again with each OMP_NUM_THREADS in ``counts``; its values still match."""
    for n in counts:
        out = enzcc.run("./t", env={"OMP_NUM_THREADS": n}).stdout
        w = {k: float(x) for k, x in (line.split() for line in out.splitlines())}
        assert_close(w, prefix_a, prefix_b, rel=rel, abs_=abs_)


def _refused(enzcc, source: str, message: str, opt: str = "-O2") -> None:
    enzcc.write("r.c", PRELUDE + source)
    r = enzcc(opt, "-fopenmp", "-w", "r.c", "-lm", "-o", "r", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and message in r.stderr, r.stderr
    assert not (enzcc.cwd / "r").exists()


# a float captured by value (firstprivate): each thread starts from its own copy of `in`, halved at each of
# its iterations; clang passes its bits as an integer, which enzcc passes by reference in the derivative
FIRSTPRIVATE = r"""
#include <omp.h>
void f(double *a, double in, int n) {
  #pragma omp parallel for firstprivate(in) schedule(static)
  for (int i = 0; i < n; i++) { a[i] = in * a[i]; in = in * 0.5; }
}
int main(void) {
  enum { N = 8 };
  double a[N], da[N], b[N], db[N];
  for (int i = 0; i < N; i++) { a[i] = b[i] = i + 1; da[i] = 1; db[i] = 0; }
  double din = __enzyme_autodiff((void *)f, a, da, 1.5, N);
  __enzyme_fwddiff((void *)f, b, db, 1.5, 1.0, N);
  /* analytic: each thread's chunk of N / T iterations starts from in; d a[i] / d in = a0[i] 0.5^position */
  int T = omp_get_max_threads(), chunk = (N + T - 1) / T;
  double want = 0, fwd = 0;
  for (int i = 0; i < N; i++) { want += (i + 1) * pow(0.5, i % chunk); fwd += db[i]; }
  report("ad.rev", din); report("an.rev", want);
  report("ad.fwd", fwd); report("an.fwd", want);
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_float_captured_by_value(enzcc, opt):
    v = build_and_run(enzcc, FIRSTPRIVATE, opt, extra=("-fopenmp",))
    assert_close(v, "ad.", "an.", rel=1e-12, abs_=1e-12)
    _run_with_threads(enzcc, ("1", "4"), "ad.", "an.", 1e-12, 1e-12)


# reduction clauses: each thread combines its copy under the clause's lock (as a critical section), both modes;
# sums in a parallel for and in an omp for followed by a single section, a product in forward mode
REDUCTIONS = r"""
double f(double *a, int n) {
  double s = 0, t = 0;
  #pragma omp parallel for reduction(+:s)
  for (int i = 0; i < n; i++) s += a[i] * a[i];
  #pragma omp parallel
  {
    #pragma omp for reduction(+:t)
    for (int i = 0; i < n; i++) t += sin(a[i]) * (i + 1);
    #pragma omp single
    t = t * 2;
  }
  return s * t;
}
double g(double *a, int n) {
  double m = 1;
  #pragma omp parallel for reduction(*:m)
  for (int i = 0; i < n; i++) m *= 1 + 0.1 * a[i];
  return m;
}
int main(void) {
  enum { N = 9 };
  double a[N], da[N] = {0}, h = 1e-6;
  for (int i = 0; i < N; i++) a[i] = 0.3 + 0.1 * i;
  __enzyme_autodiff((void *)f, a, da, N);
  for (int k = 0; k < N; k++) {
    double b[N], t[N] = {0};
    for (int i = 0; i < N; i++) b[i] = a[i];
    b[k] += h; double up = f(b, N), gu = g(b, N);
    b[k] -= 2 * h; double dn = f(b, N), gd = g(b, N);
    b[k] += h; t[k] = 1;
    char key[16];
    snprintf(key, 16, "ad.r%d", k); report(key, da[k]);
    snprintf(key, 16, "fd.r%d", k); report(key, (up - dn) / (2 * h));
    snprintf(key, 16, "ad.f%d", k); report(key, __enzyme_fwddiff((void *)f, b, t, N));
    snprintf(key, 16, "fd.f%d", k); report(key, (up - dn) / (2 * h));
    snprintf(key, 16, "ad.g%d", k); report(key, __enzyme_fwddiff((void *)g, b, t, N));
    snprintf(key, 16, "fd.g%d", k); report(key, (gu - gd) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_reduction_clauses(enzcc, opt):
    v = build_and_run(enzcc, REDUCTIONS, opt, extra=("-fopenmp",))
    assert_close(v, "ad.", "fd.", rel=1e-6, abs_=1e-7)
    _run_with_threads(enzcc, ("1", "3"), "ad.", "fd.", 1e-6, 1e-7)


@pytest.mark.parametrize("body", [
    "#pragma omp parallel for reduction(*:m)\n  for (int i = 0; i < n; i++) m *= 1 + 0.1 * a[i];",
    "#pragma omp parallel for\n  for (int i = 0; i < n; i++) {\n    double v = a[i] * a[i];\n"
    "    #pragma omp critical\n    m = v;\n  }",
], ids=["product", "overwrite"])
def test_reverse_of_an_order_dependent_critical_section_is_refused(enzcc, body):
    # the threads would run its reverse in another order than they ran it: a product's adjoint, or which
    # thread's value was the last one written, depends on it
    _refused(enzcc, r"""
double g(double *a, int n) {
  double m = 1;
  """ + body + r"""
  return m;
}
int main(void) { double a[8] = {1}, da[8] = {0}; __enzyme_autodiff((void *)g, a, da, 8); return 0; }
""", "reverse mode through an OpenMP critical section (or a reduction clause) that does more than add")


def test_dynamic_schedule_is_refused_in_reverse_mode(enzcc):
    # the reverse fork would hand each thread other iterations than the ones whose tape it holds
    _refused(enzcc, r"""
void f(double *a, int n) {
  #pragma omp parallel for schedule(dynamic)
  for (int i = 0; i < n; i++) a[i] = a[i] * a[i];
}
int main(void) { double a[8] = {1}, da[8] = {1}; __enzyme_autodiff((void *)f, a, da, 8); return 0; }
""", "reverse mode through an OpenMP loop with a dynamic, guided or runtime schedule is not supported")


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_forward_over_reverse_of_a_parallel_region_is_refused(enzcc, opt):
    # a Hessian-vector product of a gradient whose function has a parallel region: its tangent came out zero
    # from -O1 on (the reverse regions' tape slots and adjoints carried none), and -O0 stopped with an error
    # naming an internal function
    _refused(enzcc, r"""
double energy(const double *x, int n) {
  double s = 0;
  #pragma omp parallel for reduction(+:s) schedule(static)
  for (int i = 0; i < n; i++) s += x[i] * x[i] * x[i];
  return s;
}
void grad(const double *x, double *g, int n) {
  for (int i = 0; i < n; i++) g[i] = 0;
  __enzyme_autodiff((void *)energy, enzyme_dup, x, g, enzyme_const, n);
}
int main(void) {
  double x[4] = {0.5, -1, 2, 1.5}, v[4] = {1, 1, 1, 1}, g[4], hv[4] = {0};
  __enzyme_fwddiff((void *)grad, enzyme_dup, x, v, enzyme_dup, g, hv, enzyme_const, 4);
  return 0;
}
""", "forward mode over the reverse mode of an OpenMP parallel region", opt)


# reverse mode: a shared scalar read by every thread (its adjoint is added from all of them at once), two
# worksharing loops in one region with the barrier between them (the second reads what other threads wrote:
# without the barrier mirrored, the reverse of the first loop reads adjoints not yet complete), a critical
# section, a num_threads clause, single and master sections; checked against central differences of f itself
REVERSE = r"""
#include <omp.h>
double f(double *a, double s, int n) {
  double *b = malloc(n * sizeof(double));
  #pragma omp parallel for num_threads(3)
  for (int i = 0; i < n; i++) b[i] = sin(a[i]) * s + a[i] * a[i];
  double total = 0, first = 0;
  #pragma omp parallel
  {
    double mine = 0;
    #pragma omp for
    for (int i = 0; i < n; i++) a[i] = b[i] * b[n - 1 - i];
    #pragma omp for
    for (int i = 0; i < n; i++) mine += a[n - 1 - i] * a[i] * (i + 1);
    #pragma omp critical
    total += mine;
    #pragma omp single
    first = a[0] * s;
    #pragma omp master
    total += a[1] * a[1];
  }
  free(b);
  return total + first;
}
int main(void) {
  enum { N = 40 };
  double a0[N], a[N], da[N], t[N], h = 1e-6;
  for (int i = 0; i < N; i++) { a0[i] = 0.02 * i - 0.3; a[i] = a0[i]; da[i] = 0; }
  double s = 1.3;
  double ds = __enzyme_autodiff((void *)f, a, da, s, N);
  for (int i = 0; i < N; i++) {
    memcpy(t, a0, sizeof t); t[i] += h; double up = f(t, s, N);
    memcpy(t, a0, sizeof t); t[i] -= h; double dn = f(t, s, N);
    char k[16]; snprintf(k, 16, "ad.a%d", i); report(k, da[i]); snprintf(k, 16, "fd.a%d", i);
    report(k, (up - dn) / (2 * h));
  }
  memcpy(t, a0, sizeof t); double up = f(t, s + h, N);
  memcpy(t, a0, sizeof t); double dn = f(t, s - h, N);
  report("ad.s", ds); report("fd.s", (up - dn) / (2 * h));
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_reverse_mode_through_parallel_regions(enzcc, opt):
    v = build_and_run(enzcc, REVERSE, opt, extra=("-fopenmp",))
    assert_close(v, "ad.", "fd.", rel=1e-6, abs_=1e-6)
    # other team sizes: one thread, and more threads than cores (the adds to `s` from several at once)
    _run_with_threads(enzcc, ("1", "4", "7"), "ad.", "fd.", 1e-6, 1e-6)


def test_reverse_of_a_region_run_with_another_team_size_stops(enzcc):
    # the threads of the reverse fork take the tapes of the forward fork's threads: a team of another size
    # (here: omp_set_num_threads between the calls of split mode) stops the program with a message
    enzcc.write("r.c", PRELUDE + r"""
#include <omp.h>
void *__enzyme_augmentfwd(void *, ...);
void __enzyme_reverse(void *, ...);
extern int enzyme_dup, enzyme_const;
void f(double *a, int n) {
  #pragma omp parallel for
  for (int i = 0; i < n; i++) a[i] = a[i] * a[i];
}
int main(void) {
  double a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, da[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  omp_set_num_threads(2);
  void *tape = __enzyme_augmentfwd((void *)f, enzyme_dup, a, da, enzyme_const, 8);
  omp_set_num_threads(3);
  __enzyme_reverse((void *)f, enzyme_dup, a, da, enzyme_const, 8, tape);
  printf("da0 %g\n", da[0]);
  return 0;
}
""")
    enzcc("-O2", "-fopenmp", "r.c", "-lm", "-o", "r")
    r = enzcc.run("./r", check=False)
    assert r.returncode != 0 and "with a different number of threads than its forward run" in r.stderr, r


# a parallel region that writes a global: its derivatives live in the global's shadow, reached only through the
# fork (the outlined function is prepared and analysed like a called function)
GLOBAL = r"""
double g[16];
double f(double x) {
  #pragma omp parallel for
  for (int i = 0; i < 16; i++) g[i] = x * x * i;
  double s = 0;
  for (int i = 0; i < 16; i++) s += g[i] * g[i];
  return s;
}
int main(void) {
  double x = 0.7;
  report("ad.rev", __enzyme_autodiff((void *)f, x));
  report("ad.fwd", __enzyme_fwddiff((void *)f, x, 1.0));
  report("an.rev", 4 * x * x * x * 1240);  /* s = x^4 sum i^2 */
  report("an.fwd", 4 * x * x * x * 1240);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_parallel_region_writing_a_global(enzcc, opt):
    v = build_and_run(enzcc, GLOBAL, opt, extra=("-fopenmp",))
    assert_close(v, "ad.", "an.", rel=1e-12, abs_=1e-12)


# a local array the function itself never touches outside its parallel regions: it holds values with
# derivatives, so it has a shadow (it used to be taken for memory without derivatives: a gradient of zero)
SCRATCH = r"""
double f(double *a, int n) {
  double tmp[64];
  #pragma omp parallel for
  for (int i = 0; i < n; i++) tmp[i] = a[i] * a[i];
  #pragma omp parallel for
  for (int i = 0; i < n; i++) a[i] = tmp[n - 1 - i] * 2;
  double s = 0;
  for (int i = 0; i < n; i++) s += a[i] * (i + 1);
  return s;
}
int main(void) {
  double a[8], da[8] = {0}, b[8], db[8] = {0}, t[8];
  for (int i = 0; i < 8; i++) { a[i] = b[i] = 0.5 + i; t[i] = i == 2; }
  __enzyme_autodiff((void *)f, a, da, 8);
  /* s = sum_i 2 a[7-i]^2 (i+1): ds/da[j] = 4 a[j] (8-j) */
  for (int j = 0; j < 8; j++) {
    char k[16];
    snprintf(k, 16, "ad.%d", j); report(k, da[j]);
    snprintf(k, 16, "an.%d", j); report(k, 4 * (0.5 + j) * (8 - j));
  }
  report("ad.fwd", __enzyme_fwddiff((void *)f, b, t, 8));  /* tangent along b[2] */
  report("an.fwd", 4 * 2.5 * 6);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_local_array_used_only_inside_parallel_regions(enzcc, opt):
    v = build_and_run(enzcc, SCRATCH, opt, extra=("-fopenmp",))
    assert_close(v, "ad.", "an.", rel=1e-12, abs_=1e-12)


# reverse mode: a non-inlined recursive function called in a region, a chunked static schedule, collapse(2),
# regions inside a loop (a tape block per fork); the worst relative error against central differences
MORE = r"""__attribute__((noinline)) static double g(double v, int depth) { return depth == 0 ? sin(v) : v * g(v * 0.5, depth - 1); }
double f(double *a, double *w, int n, int steps) {
  double s = 0;
  for (int t = 0; t < steps; t++) {          /* a parallel region inside a loop: one tape block per fork */
    #pragma omp parallel for schedule(static, 2)
    for (int i = 0; i < n; i++) a[i] = g(a[i], 2) + w[0] * a[i];   /* a non-inlined recursive callee */
    #pragma omp parallel for collapse(2)
    for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) w[1 + i * 4 + j] += a[(i + j) % n] * 0.1;
  }
  for (int i = 0; i < n; i++) s += a[i];
  for (int i = 1; i < 17; i++) s += w[i] * w[i];
  return s;
}
int main(void) {
  enum { N = 10 };
  double a0[N], w0[17], a[N], w[17], da[N] = {0}, dw[17] = {0}, h = 1e-6;
  for (int i = 0; i < N; i++) a0[i] = 0.1 * i + 0.05;
  for (int i = 0; i < 17; i++) w0[i] = 0.3 - 0.01 * i;
  for (int i = 0; i < N; i++) a[i] = a0[i];
  for (int i = 0; i < 17; i++) w[i] = w0[i];
  __enzyme_autodiff((void *)f, a, da, w, dw, N, 3);
  double worst = 0;
  for (int k = 0; k < N + 1; k++) {
    double up, dn;
    for (int i = 0; i < N; i++) a[i] = a0[i];
    for (int i = 0; i < 17; i++) w[i] = w0[i];
    if (k < N) a[k] += h; else w[0] += h;
    up = f(a, w, N, 3);
    for (int i = 0; i < N; i++) a[i] = a0[i];
    for (int i = 0; i < 17; i++) w[i] = w0[i];
    if (k < N) a[k] -= h; else w[0] -= h;
    dn = f(a, w, N, 3);
    double fd = (up - dn) / (2 * h), ad = k < N ? da[k] : dw[0];
    double e = fabs(fd - ad) / (1e-6 + fabs(fd));
    if (e > worst) worst = e;
  }
  report("worst", worst);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_reverse_mode_regions_in_a_loop_with_calls_and_schedules(enzcc, opt):
    v = build_and_run(enzcc, MORE, opt, extra=("-fopenmp",))
    assert v["worst"] < 1e-7, v
    for n in ("1", "3"):
        out = enzcc.run("./t", env={"OMP_NUM_THREADS": n}).stdout
        assert float(out.split()[-1]) < 1e-7, out


def test_type_hint_in_a_region(enzcc):
    # Enzyme's type hints (__enzyme_double(p): p points to a double) are taken as accesses of that type and
    # removed; the program declares omp_get_max_threads itself, K&R style (variadic in C)
    v = build_and_run(enzcc, r"""
extern int omp_get_max_threads();
void __enzyme_double(void *);
void f(double *a, double in, int n) {
  #pragma omp parallel for firstprivate(in)
  for (int i = 0; i < n; i++) { a[i] = in * a[i]; in = 0; __enzyme_double(&in); }
}
int main(void) {
  double a[20], da[20];
  for (int i = 0; i < 20; i++) { a[i] = 1; da[i] = 1; }
  report("ad.d", __enzyme_autodiff((void *)f, a, da, 2.0, 20));
  report("an.d", omp_get_max_threads() < 20 ? omp_get_max_threads() : 20);  /* each thread's first a[i] */
  f(a, 3.0, 20);  /* the primal, hints and all */
  report("ad.p", a[0]); report("an.p", 6.0);
  return 0;
}
""", "-O2", extra=("-fopenmp",))
    assert_close(v, "ad.", "an.", rel=1e-12, abs_=1e-12)
