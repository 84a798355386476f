"""realloc'd buffers and calls through tables of function pointers, in both modes at -O0..-O3, against
analytic derivatives (the cases the fuzzer found refused)."""

import pytest

from adharness import PRELUDE, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

REALLOC = r"""
/* h grows by realloc while it is filled; f = sum_i h[i] h[i+1 mod n] with h[i] = x[i]^2 */
double f(double *x, int n) {
  int cap = 1;
  double *h = malloc(cap * sizeof(double));
  for (int i = 0; i < n; i++) {
    if (i >= cap) { cap *= 2; h = realloc(h, cap * sizeof(double)); }
    h[i] = x[i] * x[i];
  }
  double s = 0;
  for (int i = 0; i < n; i++) s += h[i] * h[(i + 1) % n];
  h = realloc(h, 2 * sizeof(double));  /* shrinking keeps the first two */
  s += 3 * h[1];
  free(h);
  return s;
}
int main(void) {
  enum { N = 7 };
  double x[N], dx[N] = {0};
  for (int i = 0; i < N; i++) x[i] = 0.3 + 0.1 * i;
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, N);
  char name[32];
  for (int j = 0; j < N; j++) {
    double tx[N] = {0};
    tx[j] = 1;
    double t = __enzyme_fwddiff((void *)f, enzyme_dup, x, tx, enzyme_const, N);
    double exact = 2 * x[j] * (x[(j + 1) % N] * x[(j + 1) % N] + x[(j + N - 1) % N] * x[(j + N - 1) % N])
                   + (j == 1 ? 6 * x[1] : 0);
    snprintf(name, sizeof name, "rev.%d", j); report(name, dx[j]);
    snprintf(name, sizeof name, "fwd.%d", j); report(name, t);
    snprintf(name, sizeof name, "exact.%d", j); report(name, exact);
  }
  return 0;
}
"""

TABLE = r"""
static double mul(double a, double b) { return a * b; }
static double hyp(double a, double b) { return sqrt(a * a + b * b); }
static double (*const ops[2])(double, double) = {mul, hyp};
/* the target depends on a run-time value: both entries of the table are differentiated */
double f(double *x, int n) {
  double s = 0;
  for (int i = 0; i + 1 < n; i++) s += ops[i % 2](x[i], x[i + 1]);
  double (*pick)(double, double) = x[0] > 0 ? hyp : mul;
  return s + pick(x[0], 2.0);
}
int main(void) {
  double x[3] = {0.5, 1.5, -2.0}, dx[3] = {0};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, 3);
  double tx[3] = {0, 0, 1};
  double t2 = __enzyme_fwddiff((void *)f, enzyme_dup, x, tx, enzyme_const, 3);
  /* f = x0 x1 + sqrt(x1^2 + x2^2) + sqrt(x0^2 + 4) */
  double r = sqrt(x[1] * x[1] + x[2] * x[2]);
  report("rev.0", dx[0]); report("exact.0", x[1] + x[0] / sqrt(x[0] * x[0] + 4));
  report("rev.1", dx[1]); report("exact.1", x[0] + x[1] / r);
  report("rev.2", dx[2]); report("exact.2", x[2] / r);
  report("fwd.2", t2);
  return 0;
}
"""


def _check(values, keys):
    for k in keys:
        exact = values[f"exact.{k}"]
        for mode in ("rev", "fwd"):
            if f"{mode}.{k}" in values:
                got = values[f"{mode}.{k}"]
                assert abs(got - exact) <= 1e-10 * max(1.0, abs(exact)), f"{mode}.{k}={got}, exact {exact}"


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_realloc_moves_derivatives(enzcc, opt):
    _check(build_and_run(enzcc, REALLOC, opt), range(7))


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_function_pointer_table_and_select(enzcc, opt):
    _check(build_and_run(enzcc, TABLE, opt), range(3))


# memmove within one array, both ways, and a shift loop (which LLVM turns into one from -O1 on); the same moves
# applied to the indices of x give the exact derivative
MEMMOVE = r"""
enum { N = 6 };
static void moves(double *b, int *k, int n) {
  memmove(b, b + 1, (n - 1) * sizeof *b);           /* destination below the source */
  memmove(k, k + 1, (n - 1) * sizeof *k);
  memmove(b + 2, b, (n - 2) * sizeof *b);           /* destination above the source */
  memmove(k + 2, k, (n - 2) * sizeof *k);
  for (int i = 0; i + 1 < n; i++) { b[i] = b[i + 1]; k[i] = k[i + 1]; }
}
double f(const double *x, int n) {
  double b[N];
  int k[N];
  for (int i = 0; i < n; i++) { b[i] = x[i]; k[i] = i; }
  moves(b, k, n);
  double s = 0;
  for (int i = 0; i < n; i++) s += (i + 1) * b[i] * b[i];
  return s;
}
int main(void) {
  double x[N], dx[N] = {0};
  for (int i = 0; i < N; i++) x[i] = 0.5 + 0.25 * i;
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, N);
  double b[N], exact[N] = {0};
  int k[N];
  for (int i = 0; i < N; i++) { b[i] = x[i]; k[i] = i; }
  moves(b, k, N);
  for (int i = 0; i < N; i++) exact[k[i]] += 2 * (i + 1) * x[k[i]];
  char name[32];
  for (int j = 0; j < N; j++) {
    double tx[N] = {0};
    tx[j] = 1;
    snprintf(name, sizeof name, "rev.%d", j); report(name, dx[j]);
    snprintf(name, sizeof name, "fwd.%d", j);
    report(name, __enzyme_fwddiff((void *)f, enzyme_dup, x, tx, enzyme_const, N));
    snprintf(name, sizeof name, "exact.%d", j); report(name, exact[j]);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_overlapping_memmove(enzcc, opt):
    """The reverse of a memmove within one array takes each adjoint before anything is added to it (it was
    added twice when the destination lay below the source)."""
    values = build_and_run(enzcc, MEMMOVE, opt)
    _check(values, range(6))
    assert sorted(values[f"exact.{j}"] == 0 for j in range(6)) == [False] * 4 + [True] * 2


# a function pointer passed in by the caller: compared at run time against every function of its type whose
# address the program takes
PASSED = r"""
double sq(double x) { return x * x; }
double cube(double x) { return x * x * x; }
double twice(double x) { return 2 * x; }
__attribute__((noinline)) double apply(double (*fp)(double), double x) { return fp(x) * fp(x + 1); }
int main(int argc, char **argv) {
  double (*a)(double) = argc > 5 ? twice : sq, (*b)(double) = argc > 5 ? sq : cube;
  double x = 0.8;
  /* apply(sq) = x^2 (x+1)^2, apply(cube) = x^3 (x+1)^3 */
  report("rev.0", __enzyme_autodiff((void *)apply, enzyme_const, a, x));
  report("exact.0", 2 * x * (x + 1) * (x + 1) + 2 * x * x * (x + 1));
  report("fwd.1", __enzyme_fwddiff((void *)apply, enzyme_const, b, x, 1.0));
  report("exact.1", 3 * x * x * pow(x + 1, 3) + 3 * pow(x, 3) * (x + 1) * (x + 1));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_function_pointer_passed_in(enzcc, opt):
    _check(build_and_run(enzcc, PASSED, opt), range(2))


def test_function_pointer_to_a_function_enzcc_did_not_see_traps(enzcc):
    """A pointer to a function outside the module (here libm's cos, found by ``dlsym``: the program never
    takes its address) matches none of the candidates: the program stops instead of differentiating the wrong
    function."""
    enzcc.write("t.c", PRELUDE + "#include <dlfcn.h>\n" + PASSED.replace(
        "argc > 5 ? twice : sq", 'argc > 5 ? twice : (double (*)(double))dlsym(RTLD_DEFAULT, "cos")'))
    enzcc("-O2", "t.c", "-lm", "-ldl", "-o", "t")
    r = enzcc.run("./t", check=False)
    assert r.returncode != 0 and "rev.0" not in r.stdout, (r.returncode, r.stdout)


# allocation through a function pointer kept in a mutable global struct: malloc, or the program's own
# allocator stored there at run time; each gets its shadow allocation; the memory goes back through another
# global function pointer (free, as cJSON-style hooks do)
ALLOC_TABLE = r"""
static void *counted(size_t n) { static int calls; calls++; return malloc(n); }
struct { int count; void *(*alloc)(size_t); } table = {0, malloc};
void (*release)(void *) = free;
__attribute__((noinline)) void *get(size_t n) { return table.alloc(n); }
__attribute__((noinline)) void square(double *p) { *p *= *p; }
double f(double x) { double *m = get(sizeof *m); *m = x; square(m); double r = *m * x; release(m); return r; }
int main(int argc, char **argv) {
  report("rev.malloc", __enzyme_autodiff((void *)f, 1.5));
  report("fwd.malloc", __enzyme_fwddiff((void *)f, 1.5, 1.0));
  table.alloc = counted;
  report("rev.counted", __enzyme_autodiff((void *)f, 1.5));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_allocation_through_a_function_pointer_in_a_global(enzcc, opt):
    v = build_and_run(enzcc, ALLOC_TABLE, opt)
    assert v == {"rev.malloc": 3 * 1.5 ** 2, "fwd.malloc": 3 * 1.5 ** 2, "rev.counted": 3 * 1.5 ** 2}


COPIES = r"""
/* at -O1 and above the 4-byte memcpy becomes an i32 load and store, the 16-byte one stays a memcpy: nothing
   in f says the bytes are floats; the caller's arrays do */
void f(float *x, float *out) { memcpy(out, x, sizeof(float)); out[1] = 2 * x[1]; }
void g(double *x, int n, double *out) { memcpy(out, x, sizeof(double) * 2); }
int main(void) {
  float x[2] = {1, 2}, dx[2] = {0}, out[2], dout[2] = {5, 7};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_dup, out, dout);
  report("f.rev.0", dx[0]); report("f.rev.1", dx[1]);
  float tx[2] = {1, 1}, tout[2] = {0, 0};
  __enzyme_fwddiff((void *)f, enzyme_dup, x, tx, enzyme_dup, out, tout);
  report("f.fwd.0", tout[0]); report("f.fwd.1", tout[1]);
  double y[2] = {1, 2}, dy[2] = {0}, o[2], dO[2] = {3, 4};
  __enzyme_autodiff((void *)g, enzyme_dup, y, dy, enzyme_const, 2, enzyme_dup, o, dO);
  report("g.rev.0", dy[0]); report("g.rev.1", dy[1]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_copies_typed_by_the_caller(enzcc, opt):
    v = build_and_run(enzcc, COPIES, opt)
    assert (v["f.rev.0"], v["f.rev.1"], v["f.fwd.0"], v["f.fwd.1"]) == (5, 14, 1, 2)
    assert (v["g.rev.0"], v["g.rev.1"]) == (3, 4)


FIELD_COPIES = r"""
/* the copied arrays are reached through struct fields; nothing in copy or its caller reads them with a type,
   but clang's pointer TBAA says the fields are float * and double * (at -O1 and above) */
typedef struct { float *data; double *wide; long n; } vec;
__attribute__((noinline)) void copy(vec *out, const vec *in) {
  memcpy(out->data, in->data, in->n * sizeof(float));
  memcpy(out->wide, in->wide, in->n * sizeof(double));
}
int main(void) {
  vec in = {malloc(12), malloc(24), 3}, din = {calloc(3, 4), calloc(3, 8), 3};
  vec out = {malloc(12), malloc(24), 3}, dout = {malloc(12), malloc(24), 3};
  for (int i = 0; i < 3; i++) { dout.data[i] = i + 1; dout.wide[i] = 10 * (i + 1); }
  __enzyme_autodiff((void *)copy, enzyme_dup, &out, &dout, enzyme_dup, &in, &din);
  for (int i = 0; i < 3; i++) {
    char k[16];
    snprintf(k, 16, "f%d", i); report(k, din.data[i]);
    snprintf(k, 16, "d%d", i); report(k, din.wide[i]);
    snprintf(k, 16, "out%d", i); report(k, dout.data[i] + dout.wide[i]);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O1", "-O2", "-O3"])
def test_copies_typed_by_pointer_tbaa(enzcc, opt):
    # the adjoints move back into the source's shadow, and the destination's shadow is zeroed
    v = build_and_run(enzcc, FIELD_COPIES, opt)
    for i in range(3):
        assert (v[f"f{i}"], v[f"d{i}"], v[f"out{i}"]) == (i + 1, 10 * (i + 1), 0)


def test_copy_of_untyped_memory_is_refused(enzcc):
    """Nothing says what the copied bytes are (the caller only memsets them): an error, not a zero."""
    from adharness import PRELUDE

    enzcc.write("u.c", PRELUDE + r"""
void g(double *x, int n, double *out) { memcpy(out, x, 16); }
int main(void) {
  void *x = malloc(16), *dx = calloc(1, 16), *o = malloc(16), *dO = calloc(1, 16);
  memset(x, 0, 16);
  __enzyme_autodiff((void *)g, enzyme_dup, x, dx, enzyme_const, 2, enzyme_dup, o, dO);
  return 0;
}
""")
    r = enzcc("-O2", "u.c", "-o", "u", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0
    assert "cannot tell whether the memory this memcpy copies holds floating-point values" in r.stderr


BYTE_LOOP = r"""
double sq_of_bytes(const double *x) {
  unsigned char buf[8];
  const unsigned char *src = (const unsigned char *)x;
  for (int k = 0; k < 8; k++) buf[k] = src[k];  /* a double copied byte by byte */
  double v;
  memcpy(&v, buf, 8);
  return v * v;
}
int main(void) {
  double x[1] = {1.5}, dx[1] = {0}, t[1] = {1};
  __enzyme_autodiff((void *)sq_of_bytes, enzyme_dup, x, dx);
  report("rev", dx[0]);
  report("fwd", __enzyme_fwddiff((void *)sq_of_bytes, enzyme_dup, x, t));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_a_float_copied_byte_by_byte(enzcc, opt):
    """At -O0 the loop copies a double's bytes one by one: refused with one line (both modes gave 0 without a
    message); from -O1 on it becomes one copy, and the derivative is right."""
    if opt != "-O0":
        v = build_and_run(enzcc, BYTE_LOOP, opt)
        assert (v["rev"], v["fwd"]) == (3.0, 3.0)
        return
    enzcc.write("b.c", PRELUDE + BYTE_LOOP)
    r = enzcc(opt, "b.c", "-o", "b", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert "a floating-point value is copied here piece by piece (as i8" in r.stderr


RECORD_FIELDS = r"""
typedef struct { double v; char tag[4]; double w; } rec;
/* a record copied field by field, its characters one by one: the characters are not pieces of a float */
double copy_fields(const rec *a, int n) {
  rec b;
  b.v = a->v;
  for (int k = 0; k < 4; k++) b.tag[k] = a->tag[k];
  b.w = a->w;
  return b.tag[1] == 'y' ? b.v * b.w : b.v;
}
int main(void) {
  rec a = {1.5, "xyz", 4.0}, da = {0, "", 0};
  __enzyme_autodiff((void *)copy_fields, enzyme_dup, &a, &da, enzyme_const, 4);
  report("dv", da.v); report("dw", da.w);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_characters_copied_beside_floats_are_not_refused(enzcc, opt):
    v = build_and_run(enzcc, RECORD_FIELDS, opt)
    assert (v["dv"], v["dw"]) == (4.0, 1.5)


def test_copy_of_untyped_constant_memory_zeroes_the_adjoint(enzcc):
    """The same copy from memory without derivatives (enzyme_const): whatever the bytes are, they overwrite the
    destination, whose adjoint is then zero."""
    from adharness import PRELUDE

    enzcc.write("u.c", PRELUDE + r"""
void g(double *x, int n, double *out) { memcpy(out, x, 16); }
int main(void) {
  void *x = malloc(16), *o = malloc(16);
  double *dO = malloc(16);
  memset(x, 0, 16);
  dO[0] = 3; dO[1] = 4;
  __enzyme_autodiff((void *)g, enzyme_const, x, enzyme_const, 2, enzyme_dup, o, dO);
  report("d0", dO[0]); report("d1", dO[1]);
  return 0;
}
""")
    enzcc("-O2", "u.c", "-o", "u")
    assert enzcc.run("./u").stdout.split() == ["d0", "0", "d1", "0"]


POSIX_MEMALIGN = r"""
double pm(double x) {
  double *p;
  if (posix_memalign((void **)&p, 64, 4 * sizeof(double))) return 0;
  for (int i = 0; i < 4; i++) p[i] = x * (i + 1);
  double s = 0;
  for (int i = 0; i < 4; i++) s += p[i] * p[i];
  free(p);
  return s;  /* 30 x^2 */
}
int main(void) {
  report("rev", __enzyme_autodiff((void *)pm, 0.7));
  report("fwd", __enzyme_fwddiff((void *)pm, 0.7, 1.0));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_posix_memalign_gets_a_shadow(enzcc, opt):
    v = build_and_run(enzcc, POSIX_MEMALIGN, opt)
    assert v["rev"] == pytest.approx(42.0, rel=1e-12) and v["fwd"] == pytest.approx(42.0, rel=1e-12)


REALLOC_AFTER_DIRTY_HEAP = r"""
#include <malloc.h>
/* t grows by realloc (1, 2, 4, 8 slots) while it is filled with x[i]^2; f = sum t[i]: df/dx_i = 2 x_i */
double grow(const double *x, int n) {
  int cap = 1, len = 0;
  double *t = malloc(cap * sizeof(double));
  for (int i = 0; i < n; i++) {
    if (len == cap) { cap *= 2; t = realloc(t, cap * sizeof(double)); }
    t[len++] = x[i] * x[i];
  }
  double s = 0;
  for (int i = 0; i < n; i++) s += t[i];
  free(t);
  return s;
}
int main(void) {
  /* freed blocks full of 1000s, where the shadows will come from: a shadow's bytes past the size asked for
     (malloc's slack) are copied by the next realloc and must be zeros, not these */
  double *q[8][4];
  for (int k = 1; k <= 8; k++)
    for (int j = 0; j < 4; j++) {
      q[k - 1][j] = malloc(k * sizeof(double));
      for (size_t i = 0; i < malloc_usable_size(q[k - 1][j]) / sizeof(double); i++) q[k - 1][j][i] = 1000;
    }
  for (int k = 0; k < 8; k++)
    for (int j = 0; j < 4; j++) free(q[k][j]);
  double x[5] = {0.5, 0.6, 0.7, 0.8, 0.9};
  for (int call = 0; call < 2; call++) {  /* the second call may reuse the first one's shadows */
    double dx[5] = {0};
    __enzyme_autodiff((void *)grow, enzyme_dup, x, dx, enzyme_const, call ? 5 : 3);
    for (int i = 0; i < 5; i++) {
      char name[16];
      snprintf(name, sizeof name, "d%d.%d", call, i);
      report(name, dx[i]);
    }
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_realloc_of_a_shadow_copies_no_heap_leftovers(enzcc, opt):
    """A realloc'd shadow gets malloc_usable_size bytes of the old one: every shadow is zeroed that far (the
    slack held 1000s from freed blocks: the new elements' adjoints were 1000 too large at -O0 and -O1)."""
    v = build_and_run(enzcc, REALLOC_AFTER_DIRTY_HEAP, opt)
    x = [0.5, 0.6, 0.7, 0.8, 0.9]
    for call, n in ((0, 3), (1, 5)):
        for i in range(5):
            assert v[f"d{call}.{i}"] == pytest.approx(2 * x[i] if i < n else 0.0, rel=1e-12, abs=1e-15), (call, i)


LOST = {
    # memory from a function pointer set in another file to a function that may be anything: no shadow can be
    # made for it (one set here to malloc is supported: test_allocation_through_a_function_pointer_in_a_global)
    "allocator behind a function pointer set elsewhere": (r"""
extern void *(*alloc_fn)(size_t);
double f(double x) { double *p = alloc_fn(2 * sizeof(double)); p[0] = x; p[1] = x * x;
  double r = p[0] * p[1]; free(p); return r; }
""", "stored into memory from the pointer from a call through a function pointer"),
    "memory a global points to": (r"""
double *buf;
double f(double x) { buf[0] = x * x; return buf[0] * x; }
""", "stored into memory that global @buf points to, which has no shadow in enzcc"),
}


@pytest.mark.parametrize("case", sorted(LOST))
def test_derivatives_stored_where_they_would_be_lost_are_refused(enzcc, case):
    """Before, these gave a zero or partial derivative without a word."""
    from adharness import PRELUDE

    src, message = LOST[case]
    enzcc.write("l.c", PRELUDE + src + 'int main(void) { report("d", __enzyme_autodiff((void *)f, 0.7)); '
                "return 0; }\n")
    r = enzcc("-O0", "l.c", "-o", "l", check=False)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert message in r.stderr
    assert not (enzcc.cwd / "l").exists()


MERGED = r"""
/* a pointer that is the differentiated buffer or a constant table; or a buffer that never held floats
   before: the table's derivative is zero, the buffer gets a shadow */
static const double table[4] = {1, 2, 3, 4};
double f(double *x, int n) {
  const double *src = n > 2 ? x : table;
  double s = 0;
  for (int i = 0; i < 4; i++) s += src[i] * x[i];
  return s;
}
double g(double *x, int n) {
  double *buf = malloc(4 * sizeof(double));
  int *ib = malloc(4 * sizeof(int));
  for (int i = 0; i < 4; i++) ib[i] = 3 - i;
  double *src = n > 2 ? x : buf;
  if (n <= 2) for (int i = 0; i < 4; i++) buf[i] = 1.0;
  double s = 0;
  for (int i = 0; i < 4; i++) s += src[ib[i]] * x[i];
  free(buf); free(ib);
  return s;
}
int main(void) {
  double x[4] = {1, 2, 3, 4};
  for (int n = 1; n <= 3; n += 2) {
    double df[4] = {0}, dg[4] = {0};
    __enzyme_autodiff((void *)f, enzyme_dup, x, df, enzyme_const, n);
    __enzyme_autodiff((void *)g, enzyme_dup, x, dg, enzyme_const, n);
    char k[16];
    for (int i = 0; i < 4; i++) {
      double t[4] = {0};
      t[i] = 1;
      snprintf(k, 16, "f.%d.%d", n, i); report(k, df[i]);
      snprintf(k, 16, "ff.%d.%d", n, i); report(k, __enzyme_fwddiff((void *)f, enzyme_dup, x, t, enzyme_const, n));
      snprintf(k, 16, "g.%d.%d", n, i); report(k, dg[i]);
    }
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_pointer_merging_a_constant_table_or_a_new_buffer(enzcc, opt):
    v = build_and_run(enzcc, MERGED, opt)
    x = [1, 2, 3, 4]
    for i in range(4):
        assert v[f"f.1.{i}"] == x[i] + 0 and v[f"ff.1.{i}"] == x[i]      # s = sum table[i] x[i]
        assert v[f"f.3.{i}"] == 2 * x[i] and v[f"ff.3.{i}"] == 2 * x[i]  # s = sum x[i]^2
        assert v[f"g.1.{i}"] == 1.0                                      # s = sum x[i]
        assert v[f"g.3.{i}"] == x[3 - i] + x[3 - i]                      # s = sum x[3-i] x[i]


SCRATCH = r"""
/* a scratch array per call, as an FFT's work arrays: f = sum_i w_i log1p(t_i^2), t = a prefix sum of x^2 */
double f(const double *x, int n) {
  double *t = malloc(n * sizeof(double));
  double acc = 0, s = 0;
  for (int i = 0; i < n; i++) { acc += x[i] * x[i]; t[i] = acc; }
  for (int i = 0; i < n; i++) s += (1.0 + 0.1 * i) * log1p(t[i] * t[i]);
  free(t);
  return s;
}
int main(void) {
  enum { N = 40 };
  double x[N];
  for (int i = 0; i < N; i++) x[i] = 0.05 * (i % 7) - 0.1;
  char name[32];
  /* the shadow memory one call frees is the next call's (n grows, shrinks, grows past it again) */
  int sizes[] = {5, 30, 3, 40, 40};
  for (int c = 0; c < 5; c++) {
    int n = sizes[c];
    double dx[N] = {0};
    __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, n);
    for (int j = 0; j < n; j += 3) {
      double exact = 0, acc = 0;
      for (int i = 0; i < n; i++) {
        acc += x[i] * x[i];
        if (i >= j) exact += (1.0 + 0.1 * i) * 2 * acc / (1 + acc * acc) * 2 * x[j];
      }
      snprintf(name, sizeof name, "rev.%d.%d", c, j); report(name, dx[j]);
      snprintf(name, sizeof name, "exact.%d.%d", c, j); report(name, exact);
    }
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_shadows_of_scratch_arrays_kept_for_the_next_call(enzcc, opt):
    """Each call's shadow of a malloc'd array is kept for the next call at that allocation site
    (enzcc.ad.shadow_reuse): reused when large enough, else freed and allocated anew, zero-filled either way."""
    v = build_and_run(enzcc, SCRATCH, opt)
    assert sum(k.startswith("rev.") for k in v) == 2 + 10 + 1 + 14 + 14
    for k in [k for k in v if k.startswith("rev.")]:
        e = v["exact." + k[4:]]
        assert abs(v[k] - e) <= 1e-9 + 1e-9 * abs(e), (k, v[k], e)
    enzcc(opt, "-S", "t.c", "-o", "t.s")
    assert "__enzcc_shadow_spare.0" in (enzcc.cwd / "t.s").read_text()


READ_THEN_OVERWRITTEN = r"""
/* t is read (sin loop), then overwritten in place, then read again: the first reads must come from the tape,
   the last can be read again from t in the reverse sweep, whose free then waits for it */
double f(const double *x, int n) {
  double *t = malloc(n * sizeof(double));
  if (!t) abort();
  for (int i = 0; i < n; i++) t[i] = x[i] * x[i];
  double s = 0;
  for (int i = 0; i < n; i++) s += sin(t[i]);
  for (int i = 0; i < n; i++) t[i] = 2 * t[i];
  for (int i = 0; i < n; i++) s += t[i] * t[i];
  free(t);
  return s;
}
int main(void) {
  enum { N = 6 };
  double x[N] = {0.3, -0.8, 1.1, 0.05, -1.4, 0.7}, dx[N] = {0};
  char name[32];
  for (int c = 0; c < 2; c++) {
    for (int j = 0; j < N; j++) dx[j] = 0;
    __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, N);
    for (int j = 0; j < N; j++) {
      snprintf(name, sizeof name, "rev.%d.%d", c, j); report(name, dx[j]);
      snprintf(name, sizeof name, "exact.%d.%d", c, j);
      report(name, cos(x[j] * x[j]) * 2 * x[j] + 16 * x[j] * x[j] * x[j]);
    }
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_heap_memory_read_again_only_when_nothing_overwrites_it(enzcc, opt):
    v = build_and_run(enzcc, READ_THEN_OVERWRITTEN, opt)
    keys = [k for k in v if k.startswith("rev.")]
    assert len(keys) == 12
    for k in keys:
        e = v["exact." + k[4:]]
        assert abs(v[k] - e) <= 1e-12 + 1e-12 * abs(e), (k, v[k], e)


FORWARD_RELEASES = r"""
#include <malloc.h>
typedef struct L { double v; struct L *next; } L;
/* nodes released through a link read from memory */
double linked(const double *x) {
  L *a = malloc(sizeof(L)), *b = malloc(sizeof(L));
  a->v = x[0] * x[0]; a->next = b; b->v = x[0]; b->next = 0;
  double r = a->v + b->v;
  L *q = a->next;
  free(a);
  free(q);
  return r;  /* x^2 + x */
}
/* a registered allocator and deallocator, a list released by a recursive function */
static int live = 0;
void *my_alloc(int *ctx, size_t bytes) { live++; return malloc(bytes); }
void my_free(int *ctx, void *p) { live--; free(p); }
void *__enzyme_allocation_like[4] = {(void *)my_alloc, (void *)1, (void *)"0,-1", (void *)my_free};
void rel(L *p) { if (!p) return; rel(p->next); my_free(0, p); }
double arena(const double *x, int n) {
  L *h = 0;
  for (int i = 0; i < n; i++) { L *p = my_alloc(0, sizeof(L)); p->v = x[i] * x[i]; p->next = h; h = p; }
  double r = 0;
  for (L *p = h; p; p = p->next) r += p->v;
  rel(h);
  return r;  /* sum x_i^2 */
}
int main(void) {
  double x[3] = {3, 2, 1}, t[3] = {1, 0, 0}, u[3] = {0, 1, 0};
  double d = __enzyme_fwddiff((void *)linked, enzyme_dup, x, t);
  size_t before = mallinfo2().uordblks;
  for (int k = 0; k < 1000; k++) d = __enzyme_fwddiff((void *)linked, enzyme_dup, x, t);
  double growth = (double)(mallinfo2().uordblks - before);  /* (before the first printf allocates its buffer) */
  report("linked", d);
  report("linked.growth", growth);
  report("arena", __enzyme_fwddiff((void *)arena, enzyme_dup, x, u, enzyme_const, 3));
  report("arena.live", live);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_forward_mode_releases_every_shadow_the_primal_releases(enzcc, opt):
    """As in Enzyme's forward mode, a shadow goes where its primal goes, wherever it was made: a node released
    through a link read from memory (it leaked 32 bytes a call at -O0), and nodes a recursive function
    releases with a registered deallocator (never called for the shadows: three left live)."""
    v = build_and_run(enzcc, FORWARD_RELEASES, opt)
    assert v == {"linked": 7.0, "linked.growth": 0.0, "arena": 4.0, "arena.live": 0.0}


RECORD_SWAPS = r"""
typedef struct { int id; double v; double w; } item;
/* a record swapped through a local copy, guarded by the copy's int field: clang copies the part after the
   int (bytes 4..24) separately, so the doubles lie at 4 and 12 in that copy, not at 0 and 8 */
double swap_guarded(item *a) {
  item key = a[1];
  if (key.id > 0) { a[1] = a[0]; a[0] = key; }
  return a[0].v * a[0].w + 2 * a[1].v * a[1].w;
}
typedef struct { double m; int id; } rec;
/* libstdc++'s insertion step (std::sort on short ranges), written out: records shifted through a pointer
   that a loop moves, the loop reading their int field through it */
static void lin_insert(rec *last) {
  rec val = *last;
  rec *next = last - 1;
  while (val.id < next->id) { *last = *next; last = next; --next; }
  *last = val;
}
double sorted_weights(const double *p) {
  rec r[3] = {{p[0], 2}, {p[1], 0}, {p[2], 1}};
  for (rec *i = r + 1; i != r + 3; ++i) {
    if (i->id < r[0].id) { rec val = *i; memmove(r + 1, r, (i - r) * sizeof(rec)); r[0] = val; }
    else lin_insert(i);
  }
  return r[0].m + 2 * r[1].m + 3 * r[2].m;  /* sorted by id: p1 + 2 p2 + 3 p0 */
}
int main(void) {
  item a[2] = {{0, 1.0, 10.0}, {1, 2.0, 20.0}}, da[2];
  memset(da, 0, sizeof da);
  __enzyme_autodiff((void *)swap_guarded, enzyme_dup, a, da);
  report("dv0", da[0].v); report("dw0", da[0].w); report("dv1", da[1].v); report("dw1", da[1].w);
  item b[2] = {{0, 1.0, 10.0}, {1, 2.0, 20.0}}, db[2] = {{0, 0, 0}, {0, 0, 1}};
  report("fwd.w1", __enzyme_fwddiff((void *)swap_guarded, enzyme_dup, b, db));
  double p[3] = {0.5, 0.25, 0.125}, dp[3] = {0}, t[3] = {1, 0, 0};
  __enzyme_autodiff((void *)sorted_weights, enzyme_dup, p, dp);
  report("dp0", dp[0]); report("dp1", dp[1]); report("dp2", dp[2]);
  report("fwd.p0", __enzyme_fwddiff((void *)sorted_weights, enzyme_dup, p, t));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_records_of_ints_and_doubles_swapped_and_shifted(enzcc, opt):
    """Two silently wrong reverse-mode gradients (forward mode was right): a copy of a record's bytes after its
    int field was taken as an array of doubles from the copy's start (w's adjoint landed on the other record),
    and a loop shifting records through a moving pointer dropped their doubles' adjoints (the pointer's own
    accesses, the int field, made the copies look like ints). Right now, or at -O1 the insertion sort's
    partial copy is refused with one line: never a wrong value."""
    enzcc.write("r.c", PRELUDE + RECORD_SWAPS)
    r = enzcc(opt, "r.c", "-lm", "-o", "r", check=False)
    if r.returncode:
        assert opt == "-O1" and r.stderr.strip().count("\n") == 0, r.stderr
        assert "cannot tell whether the memory this memcpy copies holds floating-point values" in r.stderr
        return
    v = {k: float(x) for k, x in (line.split() for line in enzcc.run("./r").stdout.splitlines())}
    assert [v[k] for k in ("dv0", "dw0", "dv1", "dw1", "fwd.w1")] == [20.0, 2.0, 20.0, 2.0, 2.0]
    assert [v[k] for k in ("dp0", "dp1", "dp2", "fwd.p0")] == [3.0, 1.0, 2.0, 3.0]


POINTERS_AS_INTEGERS = r"""
/* a heap table of pointers to heap cells reversed in place by swapping the pointers with memcpy (8-byte
   copies become load i64 / store i64 from -O1 on) */
double reversed(const double *x, int n) {
  double **tab = malloc(n * sizeof(double *));
  for (int i = 0; i < n; i++) { tab[i] = malloc(sizeof(double)); *tab[i] = x[i]; }
  for (int j = 0; j < n - 1 - j; j++) {
    double *t;
    memcpy(&t, &tab[j], sizeof t); memcpy(&tab[j], &tab[n - 1 - j], sizeof t); memcpy(&tab[n - 1 - j], &t, sizeof t);
  }
  double L = 0;
  for (int i = 0; i < n; i++) L += (i + 1) * *tab[i];  /* 3 x0 + 2 x1 + x2 */
  for (int i = 0; i < n; i++) free(tab[i]);
  free(tab);
  return L;
}
int main(void) {
  double x[3] = {0.5, 0.25, 0.125}, dx[3] = {0}, t[3] = {1, 0, 0};
  __enzyme_autodiff((void *)reversed, enzyme_dup, x, dx, enzyme_const, 3);
  report("d0", dx[0]); report("d1", dx[1]); report("d2", dx[2]);
  report("fwd", __enzyme_fwddiff((void *)reversed, enzyme_dup, x, t, enzyme_const, 3));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_pointers_moved_as_integers_keep_their_shadows(enzcc, opt):
    """Pointers swapped as i64 lost their shadows' moves: reverse mode gave 4 2 0 and forward mode freed one
    shadow twice (from -O1 on). Now i64 copies of memory that holds only pointers are pointer copies."""
    v = build_and_run(enzcc, POINTERS_AS_INTEGERS, opt)
    assert v == {"d0": 3.0, "d1": 2.0, "d2": 1.0, "fwd": 3.0}
