"""C++: enzyme::autodiff on callable objects whose operator() is not const (a functor that counts its calls, a
mutable lambda, a functor taking a struct by value). The header calls the object as its own type, so these
compile as a plain call f(x) does; before, they were called through a const pointer and did not compile.
Derivatives against analytic values and central differences; the functor's state changes as in a plain call."""

import pytest

from enzcc_testing import need
from test_cxx_api import assert_checked, run_cxx

pytestmark = need("clang-22", "llvm-objcopy-22")

FUNCTORS = r"""
struct Counted {                       // operator() is not const: it counts its calls
  double scale = 3.0;
  int calls = 0;
  double operator()(double x) { calls++; return scale * x * x * std::sin(x); }
};
struct Pt { double x, y; };
struct ByValue {                       // a struct by value, through a functor that is not const
  int calls = 0;
  double operator()(Pt p, double z) { calls++; return p.x * p.x * p.y * z; }
};
int main() {
  const double x = 0.7;
  Counted c;
  auto g = [](double v) { Counted k; return k(v); };
  double an = 3.0 * (2 * x * std::sin(x) + x * x * std::cos(x));
  auto r = enzyme::autodiff<enzyme::Reverse>(c, enzyme::Active<double>(x));
  check("rev", enzyme::get<0>(enzyme::get<0>(r)), an, g, x);
  auto t = enzyme::autodiff<enzyme::Forward>(c, enzyme::Duplicated<double>(x, 1.0));
  check("fwd", enzyme::get<0>(t), an, g, x);
  report("calls", c.calls);
  int n = 0;
  auto lam = [n](double v) mutable { n++; return v * v * v + n; };
  auto rl = enzyme::autodiff<enzyme::Reverse>(lam, enzyme::Active<double>(x));
  check("mutable", enzyme::get<0>(enzyme::get<0>(rl)), 3 * x * x, [](double v) { return v * v * v; }, x);
  ByValue b;
  auto tb = enzyme::autodiff<enzyme::Forward>(b, enzyme::Duplicated<Pt>(Pt{x, 2.0}, Pt{1, 0}),
                                              enzyme::Const<double>(5.0));
  check("byvalue", enzyme::get<0>(tb), 2 * x * 2.0 * 5.0, [](double v) { return v * v * 2.0 * 5.0; }, x);
  report("bcalls", b.calls);
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_functor_with_non_const_call_operator(enzcc, opt):
    values = run_cxx(enzcc, FUNCTORS, opt)
    assert_checked(values, {"rev", "fwd", "mutable", "byvalue"})
    # the object itself is called (not a copy): its counter saw both derivatives' primal calls
    assert values["calls"] == 2 and values["bcalls"] == 1
