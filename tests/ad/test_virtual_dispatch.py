"""Calls through a function pointer or a C++ virtual call with more than 8 candidates whose signature the
derived functions cannot pass (a struct of two doubles returned by value, ``{ double, double }``): compared
against each candidate and inlined (up to 32), instead of refused with a message about recursion. Ten C++
classes overriding ``V2 f(V2) const`` and ten C functions in a table, reverse and forward mode, against the
hand-written chain rule and central differences; more than 32 candidates are refused with the reason."""

import re

import pytest

from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

# each class: f(p) and its hand-written tangent; the program prints ad (enzcc), an (chain rule), fd
VIRTUAL = r"""
#include <cmath>
#include <cstdio>
extern "C" double __enzyme_autodiff(void *, ...);
extern "C" double __enzyme_fwddiff(void *, ...);
extern "C" int enzyme_const, enzyme_dup;
struct V2 { double a, b; };
struct Stage { virtual V2 f(V2 p) const = 0; virtual V2 tangent(V2 p, V2 d) const = 0; virtual ~Stage() {} };
#define STAGE(N, FA, FB, TA, TB) struct S##N : Stage { double c; explicit S##N(double c) : c(c) {} \
  V2 f(V2 p) const override { double x = p.a, y = p.b; return V2{FA, FB}; } \
  V2 tangent(V2 p, V2 d) const override { double x = p.a, y = p.b, dx = d.a, dy = d.b; return V2{TA, TB}; } };
STAGE(0, c * x * y, y, c * (dx * y + x * dy), dy)
STAGE(1, std::sin(c * x) + y, x, c * std::cos(c * x) * dx + dy, dx)
STAGE(2, std::exp(x) * c * y, y * y, c * std::exp(x) * (dx * y + dy), 2 * y * dy)
STAGE(3, x / (c + y * y), c + x, dx / (c + y * y) - 2 * x * y * dy / ((c + y * y) * (c + y * y)), dx)
STAGE(4, std::cos(x) * y + c, x, -std::sin(x) * y * dx + std::cos(x) * dy, dx)
STAGE(5, c * x * x * y, y, c * (2 * x * y * dx + x * x * dy), dy)
STAGE(6, std::log(1 + x * x) * c + y, x * c, c * 2 * x / (1 + x * x) * dx + dy, c * dx)
STAGE(7, std::sqrt(c + x * x), y, x / std::sqrt(c + x * x) * dx, dy)
STAGE(8, std::tanh(c * x * y), x, c * (1 - std::tanh(c * x * y) * std::tanh(c * x * y)) * (dx * y + x * dy), dx)
STAGE(9, c / (1 + x * x + y * y), y, -c * (2 * x * dx + 2 * y * dy) / ((1 + x * x + y * y) * (1 + x * x + y * y)), dy)
Stage *make(int i, double k) {
  switch (i) {
  case 0: return new S0(1.5 * k); case 1: return new S1(0.5 * k); case 2: return new S2(0.2 * k);
  case 3: return new S3(1.0 * k); case 4: return new S4(0.1 * k); case 5: return new S5(0.3 * k);
  case 6: return new S6(1.2 * k); case 7: return new S7(2.0 * k); case 8: return new S8(0.7 * k);
  default: return new S9(3.0 * k);
  }
}
__attribute__((noinline)) double total(Stage **s, int n, double x) {
  V2 v{x, x * x};
  for (int i = 0; i < n; i++) v = s[i]->f(v);
  return v.a + v.b;
}
int main() {
  Stage *s[10], *ds[10];
  for (int i = 0; i < 10; i++) { s[i] = make((7 * i) % 10, 1); ds[i] = make((7 * i) % 10, 0); }
  double x = 0.8, h = 1e-6;
  V2 v{x, x * x}, d{1, 2 * x};
  for (int i = 0; i < 10; i++) { d = s[i]->tangent(v, d); v = s[i]->f(v); }
  double an = d.a + d.b, fd = (total(s, 10, x + h) - total(s, 10, x - h)) / (2 * h);
  double rev = __enzyme_autodiff((void *)total, enzyme_dup, s, ds, enzyme_const, 10, x);
  double fwd = __enzyme_fwddiff((void *)total, enzyme_const, s, enzyme_const, 10, x, 1.0);
  printf("rev %.15g %.15g %.15g\nfwd %.15g %.15g %.15g\n", rev, an, fd, fwd, an, fd);
}
"""

TABLE = r"""
#include <math.h>
#include <stdio.h>
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
typedef struct { double a, b; } V2;
typedef V2 (*op)(V2, double);
/* each: f(p, c) and its tangent in p */
#define OP(N, FA, FB, TA, TB) static V2 f##N(V2 p, double c) { double x = p.a, y = p.b; V2 r = {FA, FB}; return r; } \
  static V2 t##N(V2 p, V2 d, double c) { double x = p.a, y = p.b, dx = d.a, dy = d.b; V2 r = {TA, TB}; return r; }
OP(0, x * c, y, dx * c, dy) OP(1, sin(x) * c, y * x, cos(x) * c * dx, dy * x + y * dx) OP(2, x + y, c * y, dx + dy, c * dy)
OP(3, exp(x * 0.1), y * c, 0.1 * exp(x * 0.1) * dx, dy * c) OP(4, x * y, c, dx * y + x * dy, 0)
OP(5, cos(y), x * c, -sin(y) * dy, dx * c) OP(6, x / (1 + y * y), y, dx / (1 + y * y) - 2 * x * y * dy / ((1 + y * y) * (1 + y * y)), dy)
OP(7, sqrt(1 + x * x), y * y, x / sqrt(1 + x * x) * dx, 2 * y * dy) OP(8, tanh(x) * c, y, (1 - tanh(x) * tanh(x)) * c * dx, dy)
OP(9, x - c * y, y + x, dx - c * dy, dy + dx)
static op ops[10] = {f0, f1, f2, f3, f4, f5, f6, f7, f8, f9};
typedef V2 (*tan_op)(V2, V2, double);
static tan_op tans[10] = {t0, t1, t2, t3, t4, t5, t6, t7, t8, t9};
__attribute__((noinline)) double run(double x, const int *prog, int n) {
  V2 v = {x, 2 * x};
  for (int i = 0; i < n; i++) v = ops[prog[i]](v, 0.5 + 0.1 * i);
  return v.a + v.b;
}
int main(void) {
  int prog[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 3, 1};
  double x = 0.4, h = 1e-6;
  V2 v = {x, 2 * x}, d = {1, 2};
  for (int i = 0; i < 12; i++) { d = tans[prog[i]](v, d, 0.5 + 0.1 * i); v = ops[prog[i]](v, 0.5 + 0.1 * i); }
  double an = d.a + d.b, fd = (run(x + h, prog, 12) - run(x - h, prog, 12)) / (2 * h);
  printf("rev %.15g %.15g %.15g\n", __enzyme_autodiff((void *)run, x, prog, 12), an, fd);
  printf("fwd %.15g %.15g %.15g\n", __enzyme_fwddiff((void *)run, x, 1.0, prog, 12), an, fd);
  return 0;
}
"""


def _check(out: str):
    rows = {m.group(1): [float(v) for v in m.group(2).split()] for m in re.finditer(r"(rev|fwd) (.+)", out)}
    assert set(rows) == {"rev", "fwd"}, out
    for k, (ad, an, fd) in rows.items():
        assert abs(ad - an) <= 1e-10 * (1 + abs(an)), (k, ad, an)
        assert abs(ad - fd) <= 1e-6 * (1 + abs(an)), (k, ad, fd)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_virtual_calls_with_ten_targets_returning_a_struct(enzcc, opt):
    enzcc.write("v.cpp", VIRTUAL)
    enzcc(opt, "v.cpp", "-o", "v", cmd="enzcc++")
    _check(enzcc.run("./v").stdout)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_function_table_of_ten_returning_a_struct(enzcc, opt):
    enzcc.write("t.c", TABLE)
    enzcc(opt, "t.c", "-o", "t", "-lm")
    _check(enzcc.run("./t").stdout)


def test_more_than_32_candidates_returning_a_struct_is_refused_with_the_reason(enzcc):
    fns = "\n".join(f"V2 g{i}(V2 p, double c) {{ V2 r = {{p.a * c + {i}, p.b * p.a}}; return r; }}" for i in range(40))
    table = ", ".join(f"g{i}" for i in range(40))
    enzcc.write("m.c", f"""
double __enzyme_autodiff(void *, ...);
typedef struct {{ double a, b; }} V2;
{fns}
V2 (*ops[40])(V2, double) = {{{table}}};
double run(double x, const int *prog, int n) {{
  V2 v = {{x, 2 * x}};
  for (int i = 0; i < n; i++) v = ops[prog[i]](v, 0.5);
  return v.a + v.b;
}}
int main(void) {{ int prog[3] = {{1, 2, 3}}; return __enzyme_autodiff((void *)run, 0.3, prog, 3) > 0; }}
""")
    r = enzcc("-O0", "m.c", "-o", "m", check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "returns { double, double } and is called through a function pointer that may hold any of more " \
           "than 32 functions of its type" in r.stderr and "recursive" not in r.stderr, r.stderr
