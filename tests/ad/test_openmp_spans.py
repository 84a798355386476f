"""OpenMP reverse mode: adjoints of arrays a region only reads (a stencil's neighbours, a loss's inputs) are added
plainly where no other thread of the team read the same bytes, atomically at the borders of the threads' shares
(:class:`enzcc.ad.threads.ExclusiveSpans`: each thread records the bytes it read, the reverse fork gives each thread
the bytes no other thread read). Gradients = central differences and = the 1-thread gradient at 1, 2 and 4
threads, for a 1-D stencil, a 2-D stencil over rows, a chunked schedule (several shares per thread) and a loss
reading x[i]; the IR of the reverse regions shows the plain and the atomic paths; a form enzcc cannot bound (a
pointer chosen per iteration) keeps atomic adds only; forward mode has no atomics at all."""

import re

import pytest

from adharness import PRELUDE, assert_close
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

SOURCE = r"""
#define N 9
static void row1d(const double *a, double *b, int n) {
  #pragma omp parallel for schedule(static)
  for (int i = 1; i < n - 1; i++) b[i] = a[i] * a[i + 1] + sin(a[i - 1]);
}
static void grid2d(const double *src, double *dst, int n) {
  #pragma omp parallel for schedule(static)
  for (int i = 1; i < n - 1; i++)
    for (int j = 1; j < n - 1; j++) {
      long k = (long)i * n + j;
      dst[k] = src[k] * (1 + 0.1 * (src[k - n] + src[k + n])) - 0.2 * src[k - 1] * src[k + 1];
    }
}
static void chunked(const double *a, double *b, int n) {
  #pragma omp parallel for schedule(static, 3)
  for (int i = 1; i < n - 1; i++) b[i] += a[i - 1] * a[i + 1] + cos(a[i]);
}
static void chosen(const double *a, const double *c, double *b, int n, int flip) {
  #pragma omp parallel for schedule(static)
  for (int i = 1; i < n - 1; i++) {
    const double *p = ((i * 7) % 3 == flip) ? a : c;
    b[i] += p[i - 1] * p[i + 1] + a[i];
  }
}
static double loss(const double *x, int m) {
  double s = 0;
  #pragma omp parallel for schedule(static) reduction(+: s)
  for (int k = 0; k < m; k++) s += x[k] * x[k] * (1 + 0.1 * k);
  return s;
}
double f(const double *a) {
  double *b = calloc(N * N, sizeof(double)), *c = calloc(N * N, sizeof(double));
  row1d(a, b, N * N);
  grid2d(b, c, N);
  chunked(c, b, N * N);
  chosen(b, a, c, N * N, 1);
  double y = loss(c, N * N);
  free(b);
  free(c);
  return y;
}
int main(void) {
  double a[N * N], da[N * N] = {0}, h = 1e-6;
  for (int k = 0; k < N * N; k++) a[k] = 0.5 + 0.3 * sin(0.7 * k);
  __enzyme_autodiff((void *)f, enzyme_dup, a, da);
  for (int k = 0; k < N * N; k++) {
    char key[16];
    double keep = a[k];
    a[k] = keep + h; double up = f(a);
    a[k] = keep - h; double down = f(a);
    a[k] = keep;
    snprintf(key, 16, "ad.a%d", k); report(key, da[k]);
    snprintf(key, 16, "fd.a%d", k); report(key, (up - down) / (2 * h));
  }
  return 0;
}
"""


def _values(out: str) -> dict[str, float]:
    return {k: float(x) for k, x in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_gradients_at_one_two_and_four_threads(enzcc, opt):
    enzcc.write("t.c", PRELUDE + SOURCE)
    enzcc(opt, "-fopenmp", "t.c", "-lm", "-o", "t")
    runs = {n: _values(enzcc.run("./t", env={"OMP_NUM_THREADS": n}).stdout) for n in ("1", "2", "4")}
    for n, v in runs.items():
        assert_close(v, "ad.", "fd.", rel=1e-6, abs_=1e-7)
        one = {**{k: x for k, x in runs["1"].items() if k.startswith("ad.")},
               **{"one." + k[3:]: x for k, x in v.items() if k.startswith("ad.")}}
        assert_close(one, "ad.", "one.", rel=1e-12, abs_=1e-13)


def _blocks(ir: str, region: str) -> list[tuple[str, str]]:
    """(label, text) of each block of the reverse code of ``region``'s parallel function (its reverse function
    and the wrapper the fork runs, into which the optimizer may have inlined it)."""
    out = []
    for m in re.finditer(r"^define [^\n]*@([\w.$]+)\(.*?^}", ir, re.M | re.S):
        if region in m.group(1) and "reverse" in m.group(1):
            for b in re.split(r"\n(?=[\w.$-]+:)", m.group(0)):
                out.append((b.split(":", 1)[0] if re.match(r"[\w.$-]+:", b) else "", b))
    return out


def _adds(ir: str, region: str) -> tuple[int, int, int]:
    """(plain adds on the exclusive path, atomic adds on the shared path, other atomic adds) in ``region``'s
    reverse code (the blocks of ``__enzcc_add_where_exclusive``, inlined: ``plain.i``, ``shared.i``)."""
    plain = shared = other = 0
    for label, text in _blocks(ir, region):
        atomics = len(re.findall(r"atomicrmw fadd|cmpxchg", text))
        if label.startswith("plain"):
            plain += len(re.findall(r"\bstore double\b", text))
            assert atomics == 0
        elif label.startswith("shared"):
            shared += atomics
        else:
            other += atomics
    return plain, shared, other


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_plain_adds_inside_the_spans_atomic_at_the_borders(enzcc, opt):
    enzcc.write("t.c", PRELUDE + SOURCE)
    enzcc(opt, "-fopenmp", "-S", "-emit-llvm", "t.c", "-o", "t.ll")
    ir = (enzcc.cwd / "t.ll").read_text()
    # a[i - 1], a[i], a[i + 1]: each a plain add inside the thread's span, an atomic add outside it
    assert _adds(ir, "row1d.omp_outlined") == (3, 3, 0)
    # src[k], src[k - n], src[k + n], src[k - 1], src[k + 1]
    assert _adds(ir, "grid2d.omp_outlined") == (5, 5, 0)
    # a[i - 1], a[i + 1], a[i], and b[i] of b[i] += ...: not b's own element (a may be b, read at i - 1 and i + 1:
    # threads.WrittenElements), but in a span too
    assert _adds(ir, "chunked.omp_outlined") == (4, 4, 0)
    # x[k] (the reduction's s: the thread's own copy, its combination under the clause's lock)
    plain, shared, _ = _adds(ir, "loss.omp_outlined")
    assert plain >= 1 and shared == plain
    # p = a or c, chosen per iteration: no span bounds what p reads, so neither a's nor c's adds are plain
    plain, shared, other = _adds(ir, "chosen.omp_outlined")
    assert plain == 0 and shared == 0 and other >= 3


def test_forward_mode_has_no_atomics(enzcc):
    enzcc.write("g.c", PRELUDE + SOURCE.replace("__enzyme_autodiff((void *)f, enzyme_dup, a, da)",
                                                "__enzyme_fwddiff((void *)f, enzyme_dup, a, da)"))
    enzcc("-O2", "-fopenmp", "-S", "-emit-llvm", "g.c", "-o", "g.ll")
    fwd = (enzcc.cwd / "g.ll").read_text()
    tangents = [m.group(0) for m in re.finditer(r"^define [^\n]*@fwddiffe[\w.$]*\(.*?^}", fwd, re.M | re.S)]
    assert tangents and not any(re.search(r"atomicrmw|cmpxchg|thread_spans", t) for t in tangents)


def test_a_dynamic_schedule_is_refused_in_reverse_mode(enzcc):
    src = SOURCE.replace("schedule(static, 3)", "schedule(dynamic, 3)")
    enzcc.write("d.c", PRELUDE + src)
    r = enzcc("-O2", "-fopenmp", "d.c", "-lm", "-o", "d", check=False)
    assert r.returncode != 0 and "use schedule(static)" in r.stderr and "Traceback" not in r.stderr


CALLS = r"""
__attribute__((noinline)) double sq(double x) { return x * sin(x); }
double f(const double *a, int n) {
  double s = 0;
  #pragma omp parallel for schedule(static) reduction(+: s)
  for (int i = 1; i < n - 1; i++) s += sq(a[i - 1] * a[i + 1]);
  return s;
}
int main(void) {
  enum { N = 20 };
  double a[N], da[N] = {0}, h = 1e-6;
  for (int k = 0; k < N; k++) a[k] = 0.5 + 0.3 * sin(0.7 * k);
  __enzyme_autodiff((void *)f, enzyme_dup, a, da, enzyme_const, N);
  for (int k = 0; k < N; k++) {
    char key[16];
    double keep = a[k];
    a[k] = keep + h; double up = f(a, N);
    a[k] = keep - h; double down = f(a, N);
    a[k] = keep;
    snprintf(key, 16, "ad.a%d", k); report(key, da[k]);
    snprintf(key, 16, "fd.a%d", k); report(key, (up - down) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("inline", ["auto", "none"])
def test_a_function_left_as_a_call_keeps_atomics(enzcc, inline):
    """A function of the program called from the region (not inlined: it could reach the array through a global
    pointer, out of the spans' sight) leaves every add atomic; inlined, the reads get their spans."""
    enzcc.write("c.c", PRELUDE + CALLS)
    enzcc("-O2", "-fopenmp", f"--ad-inline={inline}", "-S", "-emit-llvm", "c.c", "-o", "c.ll")
    plain, shared, other = _adds((enzcc.cwd / "c.ll").read_text(), "f.omp_outlined")
    assert (plain > 0) == (inline == "auto") and (other >= 2 if inline == "none" else shared == plain)
    enzcc("-O2", "-fopenmp", f"--ad-inline={inline}", "c.c", "-lm", "-o", "c")
    for n in ("1", "2", "4"):
        assert_close(_values(enzcc.run("./c", env={"OMP_NUM_THREADS": n}).stdout), "ad.", "fd.", rel=1e-6, abs_=1e-7)
