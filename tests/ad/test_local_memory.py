"""Local memory that nothing with derivatives is written into gets no shadow (Enzyme's activity analysis):
C++ strings, string and file streams and a local double written to a file and read back, inside a
differentiated function, build at -O0..-O3 with the right gradient (before, they got shadows and the library
calls that saw them were "no derivative rule" errors); a small-buffer vector that keeps its own address and a
local buffer passed to libc, checked against central differences; a local array handed to a function enzcc
cannot see, which may keep its address, still gets a shadow (a one-line error, never a lost derivative)."""

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

STREAMS = r"""
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
extern double __enzyme_autodiff(void *, double);
double fn(double v) {
  std::string name("local_memory.bin");
  std::ostringstream text;
  text << "v=" << v << std::endl;       // a stream that prints the active value
  std::cerr << text.str();
  std::runtime_error err(name);         // an exception object keeps a copy of its message
  if (err.what()[0] != 'l') return 0;
  double d = 12.5, back = 0;            // a local double through a file
  int i = 7, iback = 0;
  {
    std::ofstream out(name.c_str(), std::ios::binary);
    out.write((const char *)&i, sizeof i);
    out.write((const char *)&d, sizeof d);
  }
  std::ifstream in(name.c_str(), std::ios::binary);
  in.read((char *)&iback, sizeof iback);
  in.read((char *)&back, sizeof back);
  v *= 2;
  return v * v + back * iback;          // back and iback carry no derivative
}
int main() {
  double x = 2.1;
  printf("grad %.17g\n", __enzyme_autodiff((void *)fn, x));
  printf("value %.17g\n", fn(x));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_strings_and_streams_need_no_shadow(enzcc, opt):
    enzcc.write("s.cpp", STREAMS)
    enzcc(opt, "-std=c++17", "s.cpp", "-o", "s", cmd="enzcc++")
    out = dict(line.split() for line in enzcc.run("./s").stdout.splitlines())
    assert float(out["grad"]) == pytest.approx(8 * 2.1, rel=1e-14)
    assert float(out["value"]) == pytest.approx(4.2 * 4.2 + 12.5 * 7, rel=1e-14)


SMALL_BUFFER = r"""
/* a small-buffer vector: it keeps its own address, and the values go in through the pointer kept */
typedef struct { double *data; int n; double buf[4]; } SmallVec;
static void sv_init(SmallVec *v, int n) { v->n = n; v->data = n <= 4 ? v->buf : malloc(sizeof(double) * n); }
double f(const double *x, int n) {
  SmallVec v;
  sv_init(&v, n);
  char label[32];
  snprintf(label, sizeof label, "n=%d", n);   /* a local buffer libc writes, no derivative */
  for (int i = 0; i < n; i++) v.data[i] = x[i] * sin(x[i]) + (double)strlen(label);
  double s = 0;
  for (int i = 0; i < n && i < 4; i++) s += v.buf[i] * x[(i + 1) % n];
  if (v.data != v.buf) free(v.data);
  return s;
}
int main(void) {
  double x[4] = {0.3, 0.7, 1.1, 1.5}, dx[4] = {0};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, 4);
  for (int k = 0; k < 4; k++) {
    double h = 1e-6, p[4], m[4];
    char key[16];
    memcpy(p, x, sizeof p); memcpy(m, x, sizeof m); p[k] += h; m[k] -= h;
    snprintf(key, sizeof key, "ad.%d", k); report(key, dx[k]);
    snprintf(key, sizeof key, "fd.%d", k); report(key, (f(p, 4) - f(m, 4)) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_small_buffer_and_libc_buffers(enzcc, opt):
    v = build_and_run(enzcc, SMALL_BUFFER, opt)
    assert_close(v, "ad.", "fd.", rel=1e-6, abs_=1e-7)


def test_local_array_kept_by_unseen_code_keeps_its_shadow(enzcc):
    """keep() and kept() are compiled without enzcc, so their bodies are out of sight: keep may keep the
    address, and the write through what kept() returns would lose its derivative. The array keeps its shadow,
    and the call, which then sees memory with derivatives, is a one-line error."""
    enzcc.write("k.c", PRELUDE + r"""
void keep(double *p);
double *kept(void);
double f(const double *x) {
  double v[2] = {0, 0};
  keep(v);
  double *p = kept();   /* v itself, as far as the program knows */
  p[1] = x[0] * x[0];
  return v[0] + v[1];
}
int main(void) { double x[1] = {3}, dx[1] = {0}; __enzyme_autodiff((void *)f, enzyme_dup, x, dx); report("d", dx[0]); return 0; }
""")
    enzcc.write("keep.c", "static double *saved;\nvoid keep(double *p) { saved = p; }\n"
                          "double *kept(void) { return saved; }\n")
    __import__("subprocess").run(["clang-22", "-O1", "-c", "keep.c", "-o", "keep.o"], cwd=enzcc.cwd, check=True)
    r = enzcc("-O1", "k.c", "keep.o", "-lm", "-o", "k", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "no derivative rule for call to 'keep'" in r.stderr, r.stderr


def test_local_array_reached_through_a_pointer_global(enzcc):
    """The address of a local array with derivatives goes through a global holding pointers (no shadow):
    where the optimizer forwards it (-O2) the gradient is right; where it does not (-O0), the store through the
    pointer loaded back is a one-line error, never a lost derivative."""
    enzcc.write("g.c", PRELUDE + r"""
static double *saved;
static void keep(double *p) { saved = p; }
static double *kept(void) { return saved; }
double f(const double *x) {
  double v[2] = {0, 0};
  keep(v);
  double *p = kept();
  p[1] = x[0] * x[0];
  return v[0] + v[1] * x[1];
}
int main(void) {
  double x[2] = {3, 2}, dx[2] = {0};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx);
  report("d0", dx[0]);
  report("d1", dx[1]);
  return 0;
}
""")
    r = enzcc("-O0", "g.c", "-lm", "-o", "g0", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "stored through a pointer taken from pointer @saved" in r.stderr
    enzcc("-O2", "g.c", "-lm", "-o", "g2")
    out = dict(line.split() for line in enzcc.run("./g2").stdout.splitlines())
    assert float(out["d0"]) == 12.0 and float(out["d1"]) == 9.0
