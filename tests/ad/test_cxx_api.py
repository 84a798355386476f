"""C++: the API declared as C++ functions (mangled names, Enzyme's templated declaration) and the
``enzyme/enzyme`` header (enzyme::autodiff with Active / Duplicated / DuplicatedNoNeed / Const, in Forward,
Reverse and ReverseWithPrimal mode) on lambdas, templates, a virtual call, std::vector and std::array, at
-O0..-O3, against analytic derivatives and central differences computed by the same program."""

import math
import os
import re

import pytest

from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

PRELUDE = r"""
#include <array>
#include <cmath>
#include <cstdio>
#include <vector>
#include <enzyme/enzyme>
static void report(const char *name, double v) { printf("%s %.17g\n", name, v); }
/* ad.K, an.K (analytic) and fd.K (central difference of g at x) */
template <typename G> static void check(const char *k, double ad, double an, G g, double x) {
  char buf[64];
  const double h = 1e-6;
  snprintf(buf, sizeof buf, "ad.%s", k); report(buf, ad);
  snprintf(buf, sizeof buf, "an.%s", k); report(buf, an);
  snprintf(buf, sizeof buf, "fd.%s", k); report(buf, (g(x + h) - g(x - h)) / (2 * h));
}
"""


def run_cxx(enzcc, source: str, opt: str, name: str = "t") -> dict[str, float]:
    enzcc.write(f"{name}.cpp", PRELUDE + source)
    enzcc(opt, "-std=c++17", f"{name}.cpp", "-o", name, cmd="enzcc++")
    values = {}
    for line in enzcc.run(f"./{name}").stdout.splitlines():
        m = re.fullmatch(r"(\S+) (\S+)", line.strip())
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def assert_checked(values: dict[str, float], expected_keys: set[str]):
    keys = {k[3:] for k in values if k.startswith("ad.")}
    assert keys == expected_keys, f"reported {sorted(keys)}, expected {sorted(expected_keys)}"
    for k in keys:
        ad, an, fd = values["ad." + k], values["an." + k], values["fd." + k]
        assert abs(ad - an) <= 1e-9 + 1e-9 * abs(an), f"{k}: enzcc {ad}, analytic {an}"
        assert abs(ad - fd) <= 1e-5 + 1e-5 * abs(an), f"{k}: enzcc {ad}, finite difference {fd}"


HEADER = r"""
double foo(double x, double y) { return x * x * y + std::sin(y); }
void cube(const double *x, double *out, int n) { for (int i = 0; i < n; i++) out[i] = x[i] * x[i] * x[i]; }
double scaled(const double *x, double s) { return s * (x[0] * x[1]); }
double vsum(const std::vector<double> &v) { double s = 0; for (double a : v) s += a * a * a; return s; }
template <std::size_t N> double norm(const std::array<double, N> &a) {
  double s = 0; for (double v : a) s += v * v; return std::sqrt(s);
}
template <typename T> T poly(T x) { return x * x * x - T(2) * x; }
struct Energy { virtual double at(double x) const = 0; virtual ~Energy() {} };
struct Spring : Energy {
  double k; explicit Spring(double k) : k(k) {}
  double at(double x) const override { return 0.5 * k * x * x + std::sin(x); }
};
double through_virtual(double x) { Spring s(3.0); const Energy &e = s; return e.at(x); }

int main() {
  const double x = 0.7, y = 1.3;
  using namespace enzyme;
  /* Reverse: the derivatives of the Active arguments, in order */
  auto r = autodiff<Reverse>(foo, Active<double>(x), Active<double>(y));
  check("rev.dx", get<0>(get<0>(r)), 2 * x * y, [&](double t) { return foo(t, y); }, x);
  check("rev.dy", get<1>(get<0>(r)), x * x + std::cos(y), [&](double t) { return foo(x, t); }, y);
  /* ReverseWithPrimal: the result comes second */
  tuple<tuple<double, double>, double> rp = autodiff<ReverseWithPrimal>(foo, Active<double>(x), Active<double>(y));
  report("primal", get<1>(rp));
  report("primal.expected", foo(x, y));
  check("revp.dx", get<0>(get<0>(rp)), 2 * x * y, [&](double t) { return foo(t, y); }, x);
  /* a Const argument and a Const return: no derivative flows */
  auto rc = autodiff<Reverse>(foo, Active<double>(x), Const<double>(y));
  check("revc.dx", get<0>(get<0>(rc)), 2 * x * y, [&](double t) { return foo(t, y); }, x);
  auto rz = autodiff<Reverse, Const<double>>(foo, Active<double>(x), Const<double>(y));
  report("constret.dx", get<0>(get<0>(rz)));
  /* Duplicated and DuplicatedNoNeed pointers */
  double v[3] = {0.5, 1.5, 2.5}, dv[3] = {0, 0, 0}, out[3], dout[3] = {1, 1, 1};
  autodiff<Reverse>(cube, Duplicated<const double *>(v, dv), DuplicatedNoNeed<double *>(out, dout), Const<int>(3));
  for (int i = 0; i < 3; i++) {
    char k[16]; snprintf(k, sizeof k, "dup.%d", i);
    check(k, dv[i], 3 * v[i] * v[i], [](double t) { return t * t * t; }, v[i]);
  }
  double p[2] = {2.0, 3.0}, dp[2] = {0, 0};
  auto rs = autodiff<Reverse>(scaled, Duplicated<const double *>(p, dp), Active<double>(4.0));
  check("mixed.ds", get<0>(get<0>(rs)), 6.0, [&](double s) { return scaled(p, s); }, 4.0);
  check("mixed.dp0", dp[0], 12.0, [&](double t) { double q[2] = {t, 3.0}; return scaled(q, 4.0); }, 2.0);
  /* references */
  auto by_ref = [](double &a, double &o) { o = a * a * std::exp(a); };
  double a = 0.4, da = 0, o = 0, dO = 1;
  autodiff<Reverse>(by_ref, Duplicated<double &>(a, da), Duplicated<double &>(o, dO));
  check("ref", da, (2 * a + a * a) * std::exp(a), [](double t) { return t * t * std::exp(t); }, a);
  /* Forward: the tangent (default), result and tangent (Duplicated return), the result (Const return) */
  auto f1 = autodiff<Forward>(foo, Duplicated<double>(x, 1.0), Const<double>(y));
  check("fwd.dx", get<0>(f1), 2 * x * y, [&](double t) { return foo(t, y); }, x);
  auto f2 = autodiff<Forward, Duplicated<double>>(foo, Const<double>(x), Duplicated<double>(y, 1.0));
  report("fwd.primal", get<0>(f2));
  check("fwd.dy", get<1>(f2), x * x + std::cos(y), [&](double t) { return foo(x, t); }, y);
  auto f3 = autodiff<Forward, Const<double>>(foo, Duplicated<double>(x, 1.0), Const<double>(y));
  report("fwdconst.primal", get<0>(f3));
  double w[3] = {0.5, 1.5, 2.5}, dw[3] = {1, 0, 0}, wo[3], dwo[3];
  autodiff<Forward>(cube, Duplicated<const double *>(w, dw), Duplicated<double *>(wo, dwo), Const<int>(3));
  check("fwd.ptr", dwo[0], 3 * w[0] * w[0], [](double t) { return t * t * t; }, w[0]);
  /* a lambda with captures (the object is a constant argument), a template, a virtual call */
  const double k = 2.5;
  auto lam = [k](double t) { return k * std::log(t) * t; };
  auto rl = autodiff<Reverse>(lam, Active<double>(1.7));
  check("lambda", get<0>(get<0>(rl)), k * (std::log(1.7) + 1), lam, 1.7);
  auto rt = autodiff<Reverse>(poly<double>, Active<double>(x));
  check("template", get<0>(get<0>(rt)), 3 * x * x - 2, poly<double>, x);
  auto rtf = autodiff<Reverse>(poly<float>, Active<float>(0.5f));
  report("template.float", get<0>(get<0>(rtf)));
  auto rv = autodiff<Reverse>(through_virtual, Active<double>(x));
  check("virtual", get<0>(get<0>(rv)), 3 * x + std::cos(x), through_virtual, x);
  /* std::vector and std::array */
  std::vector<double> sv{1.0, 2.0, 3.0}, dsv(3, 0.0);
  autodiff<Reverse>(vsum, Duplicated<const std::vector<double> &>(sv, dsv));
  check("vector", dsv[1], 3 * 2.0 * 2.0, [](double t) { return t * t * t; }, 2.0);
  /* forward mode, a std::vector result: its tangent is a shadow vector */
  std::vector<double> in{0.5, 1.5}, din{1.0, 0.0};
  auto make = [](const std::vector<double> &d) { std::vector<double> r(2); r[0] = d[0] * d[1]; r[1] = std::sin(d[0]); return r; };
  auto fv = autodiff<Forward, DuplicatedNoNeed<std::vector<double>>>(make, Duplicated<const std::vector<double> &>(in, din));
  check("fwd.vec0", get<0>(fv)[0], 1.5, [&](double t) { return make(std::vector<double>{t, 1.5})[0]; }, 0.5);
  check("fwd.vec1", get<0>(fv)[1], std::cos(0.5), [&](double t) { return make(std::vector<double>{t, 1.5})[1]; }, 0.5);
  auto fv2 = autodiff<Forward, Duplicated<std::vector<double>>>(make, Duplicated<const std::vector<double> &>(in, din));
  report("fwd.vec.primal", get<0>(fv2)[0]);
  std::array<double, 3> ar{3.0, 4.0, 12.0}, dar{};
  autodiff<Reverse>(norm<3>, Duplicated<const std::array<double, 3> &>(ar, dar));
  check("array", dar[2], 12.0 / 13.0, [](double t) { return std::sqrt(25.0 + t * t); }, 12.0);
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_enzyme_header(enzcc, opt):
    v = run_cxx(enzcc, HEADER, opt)
    assert_checked(v, {"rev.dx", "rev.dy", "revp.dx", "revc.dx", "dup.0", "dup.1", "dup.2", "mixed.ds", "mixed.dp0",
                       "ref", "fwd.dx", "fwd.dy", "fwd.ptr", "lambda", "template", "virtual", "vector", "array",
                       "fwd.vec0", "fwd.vec1"})
    assert v["fwd.vec.primal"] == 0.75
    assert v["primal"] == pytest.approx(v["primal.expected"], rel=1e-15)
    assert v["constret.dx"] == 0.0  # a Const result seeds nothing
    assert v["fwd.primal"] == pytest.approx(v["primal.expected"], rel=1e-15)
    assert v["fwdconst.primal"] == pytest.approx(v["primal.expected"], rel=1e-15)
    assert v["template.float"] == pytest.approx(3 * 0.25 - 2, rel=1e-6)


MANGLED = r"""
/* the API as C++ declares it: Enzyme's templated form, and plain declarations (mangled, C++ varargs) */
template <typename Ret, typename... Args> Ret __enzyme_autodiff(Args...);
double __enzyme_fwddiff(void *, ...);
struct Pair { double a, b; };
struct Taped { void *tape; double y; };
Taped __enzyme_augmentfwd(void *, ...);
double __enzyme_reverse(void *, ...);
extern int enzyme_out, enzyme_const, enzyme_dup;
double f(double x, double y) { return std::exp(x) * y; }
double g(double *x, int n) { double s = 0; for (int i = 0; i < n; i++) s += x[i] * x[i]; return s; }
int main() {
  double x = 0.3, y = 2.0;
  double d = __enzyme_autodiff<double>((void *)f, enzyme_out, x, enzyme_const, y);
  check("tmpl", d, std::exp(x) * y, [&](double t) { return f(t, y); }, x);
  Pair pr = __enzyme_autodiff<Pair>((void *)f, enzyme_out, x, enzyme_out, y);
  check("pair.b", pr.b, std::exp(x), [&](double t) { return f(x, t); }, y);
  double t = __enzyme_fwddiff((void *)f, x, 1.0, enzyme_const, y);
  check("fwd", t, std::exp(x) * y, [&](double s) { return f(s, y); }, x);
  double v[2] = {1.5, -0.5}, dv[2] = {0, 0};
  Taped aug = __enzyme_augmentfwd((void *)g, enzyme_dup, v, dv, enzyme_const, 2);
  __enzyme_reverse((void *)g, enzyme_dup, v, dv, enzyme_const, 2, 1.0, aug.tape);
  report("split.y", aug.y);
  check("split", dv[0], 3.0, [](double s) { double q[2] = {s, -0.5}; return g(q, 2); }, 1.5);
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_mangled_declarations(enzcc, opt):
    v = run_cxx(enzcc, MANGLED, opt)
    assert_checked(v, {"tmpl", "pair.b", "fwd", "split"})
    assert v["split.y"] == pytest.approx(2.5)


def test_cxx_errors_are_one_line(enzcc):
    """A C++ program misusing the API gets enzcc's one-line error (no link error about mangled symbols)."""
    enzcc.write("bad.cpp", PRELUDE + r"""
double f(double x) { return x * x; }
int main() {
  double x = 1.0;
  /* reverse mode cannot return a derivative through a Duplicated value that is not a pointer */
  enzyme::autodiff<enzyme::Reverse>(f, enzyme::Duplicated<double>(x, 1.0));
}
""")
    proc = enzcc("-O2", "bad.cpp", "-o", "bad", check=False, cmd="enzcc++")
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "enzyme_dup parameter 1" in err[0] and "must be a pointer" in err[0], proc.stderr
    enzcc.write("split.cpp", r"""
double __enzyme_fwdsplit(...);
double sq(double x) { return x * x; }
int main() { return __enzyme_fwdsplit((void *)sq, 3.0, 1.0, (void *)0) == 6.0 ? 0 : 1; }
""")
    # forward split mode through a C++ declaration: sq's tangent needs only its argument, so no tape is needed
    enzcc("-O2", "split.cpp", "-o", "split", cmd="enzcc++")
    assert enzcc.run("./split").returncode == 0
    # Enzyme's profiling hook, defined (a mangled C++ name): derivatives would never call it
    enzcc.write("log.cpp", PRELUDE + r"""
int calls;
void enzymeLogGrad(double grad, const char *op, const char *callee, const char *mod, const char *fn, unsigned b,
                   unsigned i) { ++calls; }
double f(double x) { return x * x; }
int main() {
  auto r = enzyme::autodiff<enzyme::Reverse>(f, enzyme::Active<double>{1.0});
  return enzyme::get<0>(enzyme::get<0>(r)) > 0;
}
""")
    proc = enzcc("-O2", "log.cpp", "-o", "log", check=False, cmd="enzcc++")
    err = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(err) == 1 and "enzymeLogGrad is defined" in err[0], proc.stderr


def test_header_is_for_cxx_only(enzcc):
    # (enzcc's include directory is searched for C too, for <enzyme/fixed_point.h>)
    enzcc.write("c.c", "#include <enzyme/enzyme>\nint main(void) { return 0; }\n")
    proc = enzcc("-c", "c.c", check=False)
    assert proc.returncode != 0 and "enzyme/enzyme is a C++ header" in proc.stderr
    enzcc.write("h.cpp", "#include <enzyme/enzyme>\nint main() { return 0; }\n")
    for mode in (["-c", "-o", "h.o"], ["-E", "-o", "h.ii"], ["-fsyntax-only"], ["-M"], ["-S", "-o", "h.s"]):
        enzcc(*mode, "h.cpp", cmd="enzcc++")  # (the commands clang answers alone see the header too)


EIGEN = r"""
#include <Eigen/Dense>
/* a 3x3 solve: r = |A^-1 b|^2 with A and b active */
double solve(const Eigen::Matrix3d *A, const Eigen::Vector3d *b) {
  Eigen::Vector3d x = A->lu().solve(*b);
  return x.squaredNorm();
}
/* dynamic size, heap temporaries built from a raw array (the data of each is reached through its object) */
double temporaries(const double *x, int n) {
  Eigen::VectorXd v = Eigen::Map<const Eigen::VectorXd>(x, n);
  Eigen::VectorXd w = v.array().sin().matrix() + 2.0 * v;
  return w.squaredNorm();
}
/* fixed-size products and an active scalar broadcast into SIMD lanes */
double matvec(const Eigen::Matrix3d *M, const Eigen::Vector3d *v, double s) {
  return (s * (*M) * (*v)).cwiseAbs().sum();
}
int main() {
  Eigen::Matrix3d A, dA = Eigen::Matrix3d::Zero();
  A << 4, 1, 0.5, 1, 3, 0.25, 0.5, 0.25, 2;
  Eigen::Vector3d b(1, -2, 0.5), db = Eigen::Vector3d::Zero();
  __enzyme_autodiff((void *)solve, &A, &dA, &b, &db);
  auto solve_at = [&](int which, int i, double t) {
    Eigen::Matrix3d A2 = A; Eigen::Vector3d b2 = b;
    if (which == 0) A2(i / 3, i % 3) = t; else b2(i) = t;
    return solve(&A2, &b2);
  };
  for (int i = 0; i < 9; i++) {
    char k[16]; snprintf(k, sizeof k, "solve.A%d", i);
    double a = A(i / 3, i % 3);
    check(k, dA(i / 3, i % 3), dA(i / 3, i % 3), [&](double t) { return solve_at(0, i, t); }, a);
  }
  for (int i = 0; i < 3; i++) {
    char k[16]; snprintf(k, sizeof k, "solve.b%d", i);
    check(k, db(i), db(i), [&](double t) { return solve_at(1, i, t); }, b(i));
  }
  const int n = 6;
  double x[n], dx[n] = {0};
  for (int i = 0; i < n; i++) x[i] = 0.3 * i - 0.8;
  __enzyme_autodiff((void *)temporaries, enzyme_dup, x, dx, enzyme_const, n);
  for (int i = 0; i < n; i++) {
    char k[16]; snprintf(k, sizeof k, "tmp.%d", i);
    double w = std::sin(x[i]) + 2 * x[i];
    check(k, dx[i], 2 * w * (std::cos(x[i]) + 2), [&](double t) { double y = std::sin(t) + 2 * t; return y * y; }, x[i]);
  }
  Eigen::Matrix3d M = A, dM = Eigen::Matrix3d::Zero();
  Eigen::Vector3d v(0.5, -1, 2), dv = Eigen::Vector3d::Zero();
  double ds = __enzyme_autodiff((void *)matvec, &M, &dM, &v, &dv, 1.5);
  check("matvec.s", ds, matvec(&M, &v, 1.0), [&](double t) { return matvec(&M, &v, t); }, 1.5);
  check("matvec.v1", dv(1), dv(1), [&](double t) { Eigen::Vector3d v2 = v; v2(1) = t; return matvec(&M, &v2, 1.5); }, v(1));
}
"""


@pytest.mark.skipif(not os.path.exists("/usr/include/eigen3/Eigen/Dense"), reason="needs libeigen3-dev")
@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_eigen(enzcc, opt):
    """Eigen's vectorized code (SSE: splats of active scalars, abs through a sign mask, addresses kept as
    integers, heap temporaries): a 3x3 LU solve, dynamic-size temporaries, fixed-size products."""
    enzcc.write("e.cpp", PRELUDE + EIGEN.replace("#include <Eigen/Dense>", "#include <Eigen/Dense>\n"
                                                 "double __enzyme_autodiff(void *, ...);\n"
                                                 "extern int enzyme_dup, enzyme_const;"))
    enzcc(opt, "-std=c++17", "-I/usr/include/eigen3", "e.cpp", "-o", "e", cmd="enzcc++")
    values = {}
    for line in enzcc.run("./e").stdout.splitlines():
        m = re.fullmatch(r"(\S+) (\S+)", line.strip())
        if m:
            values[m.group(1)] = float(m.group(2))
    keys = {k[3:] for k in values if k.startswith("ad.")}
    assert len(keys) == 9 + 3 + 6 + 2
    for k in keys:
        ad, an, fd = values["ad." + k], values["an." + k], values["fd." + k]
        assert abs(ad - an) <= 1e-9 + 1e-9 * abs(an), f"{k}: enzcc {ad}, analytic {an}"
        assert abs(ad - fd) <= 1e-5 + 1e-5 * abs(ad), f"{k}: enzcc {ad}, finite difference {fd}"
        assert ad != 0.0 or k.startswith("solve"), k


SIMD = r"""
#include <emmintrin.h>
typedef double v2d __attribute__((vector_size(16)));
/* |x| through SSE's sign mask (Eigen's pabs), a negation through xor, and an active scalar splat */
double f(const double *x, double s) {
  const __m128d mask = _mm_castsi128_pd(_mm_setr_epi32(-1, 0x7FFFFFFF, -1, 0x7FFFFFFF));
  const __m128d sign = _mm_castsi128_pd(_mm_setr_epi32(0, (int)0x80000000, 0, (int)0x80000000));
  __m128d a = _mm_and_pd(_mm_loadu_pd(x), mask);
  __m128d n = _mm_xor_pd(_mm_loadu_pd(x), sign);
  v2d p = (v2d)a * s;
  return p[0] + p[1] + _mm_cvtsd_f64(n) * s;
}
int main() {
  double x[2] = {-1.5, 2}, dx[2] = {0, 0};
  double ds = __enzyme_autodiff((void *)f, x, dx, 3.0);
  check("simd.dx0", dx[0], -3.0 - 3.0, [&](double t) { double y[2] = {t, 2}; return f(y, 3.0); }, x[0]);
  check("simd.dx1", dx[1], 3.0, [&](double t) { double y[2] = {-1.5, t}; return f(y, 3.0); }, x[1]);
  check("simd.ds", ds, 3.5 + 1.5, [&](double t) { return f(x, t); }, 3.0);
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_sse_sign_masks_and_splats(enzcc, opt):
    v = run_cxx(enzcc, SIMD.replace("#include <emmintrin.h>", "#include <emmintrin.h>\n"
                                    "double __enzyme_autodiff(void *, ...);"), opt)
    assert_checked(v, {"simd.dx0", "simd.dx1", "simd.ds"})


STL = r"""
#include <iostream>
/* std::vector built from the input, a new[] buffer, resizes (an empty vector's end is null plus an offset),
   printing with std::cout */
double vec(const double *x, int n) {
  std::vector<double> v(x, x + n);
  double *t = new double[n];
  for (int i = 0; i < n; i++) t[i] = v[i] * v[i];
  double s = 0;
  for (int i = 0; i < n; i++) s += t[i];
  delete[] t;
  return s;
}
double resized(const double *x, int n) {
  std::vector<double> v;
  v.resize(n);
  v.resize(2 * n, 0.0);
  for (int i = 0; i < n; i++) v[i] = x[i];
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i] * v[i] * v[i];
  std::cout << "s = " << s << std::endl;
  return s;
}
int main() {
  double x[3] = {1, 2, 3}, dx[3] = {0}, dy[3] = {0};
  __enzyme_autodiff((void *)vec, enzyme_dup, x, dx, enzyme_const, 3);
  __enzyme_autodiff((void *)resized, enzyme_dup, x, dy, enzyme_const, 3);
  for (int i = 0; i < 3; i++) {
    char k[16];
    snprintf(k, sizeof k, "vec.%d", i);
    check(k, dx[i], 2 * x[i], [](double t) { return t * t; }, x[i]);
    snprintf(k, sizeof k, "resized.%d", i);
    check(k, dy[i], 3 * x[i] * x[i], [](double t) { return t * t * t; }, x[i]);
  }
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_std_vector_and_cout(enzcc, opt):
    v = run_cxx(enzcc, STL.replace("#include <iostream>", "#include <iostream>\ndouble __enzyme_autodiff(void *, ...);\n"
                                                           "extern int enzyme_dup, enzyme_const;"), opt)
    assert_checked(v, {f"{k}.{i}" for k in ("vec", "resized") for i in range(3)})


FUNCTIONS = r"""
#include <functional>
double __enzyme_autodiff(void *, ...);
/* lambdas capturing doubles, kept as std::function in a vector: clang moves a captured double as an i64 into the
   function object's storage, which push_back copies as 16 bytes next to the object's pointers */
double one(double x) {
  double k = x * x;
  std::vector<std::function<double(double)>> fs;
  fs.push_back([k](double v) { return k * v; });
  double s = 0;
  for (int i = 0; i < 3; i++) s += fs[0](i + x);
  return s;  /* 3 x^2 (1 + x) */
}
int main() {
  const double x = 0.7;
  check("one", __enzyme_autodiff((void *)one, x), 6 * x + 9 * x * x, one, x);
}
"""

#: the second push_back moves the first std::function to new storage: a copy of bytes whose type (the union in
#: std::function) nothing in the function shows
FUNCTIONS_MOVED = FUNCTIONS.replace("  double s = 0;", "  fs.push_back([k](double v) { return k + v; });\n  double s = 0;")


def _function_objects(enzcc, source: str, opt: str):
    """The values, or the one-line error when enzcc refuses (never a wrong value)."""
    enzcc.write("t.cpp", PRELUDE + source)
    r = enzcc(opt, "-std=c++17", "t.cpp", "-o", "t", cmd="enzcc++", check=False)
    if r.returncode:
        assert r.stderr.strip().count("\n") == 0, r.stderr
        assert "cannot tell whether the memory this memcpy copies holds floating-point values" in r.stderr
        return None
    values = {}
    for line in enzcc.run("./t").stdout.splitlines():
        m = re.fullmatch(r"(\S+) (\S+)", line.strip())
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_captured_doubles_in_std_function(enzcc, opt):
    """A record of a double moved as integer bits (tagged double by TBAA) and pointers, copied as bytes: each
    field copied follows its type (the double's derivative was lost without a message). Where enzcc cannot
    type the bytes (-O0: the storage is also read as a pointer at the same offset; a vector's reallocation moving
    a std::function's storage, a union), a one-line error, never a wrong derivative."""
    values = _function_objects(enzcc, FUNCTIONS, opt)
    assert values is not None or opt == "-O0"
    if values is not None:
        assert_checked(values, {"one"})
    moved = _function_objects(enzcc, FUNCTIONS_MOVED, opt)
    if moved is not None:
        assert moved["ad.one"] == pytest.approx(moved["fd.one"], rel=1e-6)


CONTAINERS = r"""
#include <list>
#include <map>
#include <unordered_map>
double __enzyme_autodiff(void *, ...);
/* node-based containers built inside the differentiated function: their shadow nodes are linked alike */
double lst(double x) {
  std::list<double> l;
  for (int i = 1; i <= 3; i++) l.push_back(x * i);
  l.push_front(x * x);
  double s = 0;
  for (double v : l) s += v * v;
  return s;
}
double mp(double x) {
  std::map<int, double> m;
  for (int i = 3; i > 0; i--) m[i] = x * i;
  m[2] *= x;
  double s = 0;
  for (auto &kv : m) s += kv.second * kv.first;
  return s;
}
double hash(double x) {
  std::unordered_map<int, double> m;
  for (int i = 0; i < 20; i++) m[i] = x + i;
  return m[3] * m[7] * x;
}
int main() {
  const double x = 1.3;
  check("list", __enzyme_autodiff((void *)lst, x), 4 * x * x * x + 2 * x * 14, lst, x);
  check("map", __enzyme_autodiff((void *)mp, x), 1 + 2 * 2 * 2 * x + 9, mp, x);
  check("unordered_map", __enzyme_autodiff((void *)hash, x), (x + 7) * x + (x + 3) * x + (x + 3) * (x + 7), hash, x);
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_std_list_map_unordered_map(enzcc, opt):
    assert_checked(run_cxx(enzcc, CONTAINERS, opt), {"list", "map", "unordered_map"})


STRING_KEYS = r"""
#include <string>
#include <unordered_map>
double __enzyme_autodiff(void *, ...);
/* a map keyed by strings, built here: a new key is moved into its node, next to the value with a derivative */
double keyed(double x) {
  std::unordered_map<std::string, double> m;
  m["a"] = x * x;
  m["b"] = 3 * x;
  m["a"] *= m["b"];
  return m["a"] + m["b"];
}
int main() {
  const double x = 1.3;
  check("keyed", __enzyme_autodiff((void *)keyed, x), 9 * x * x + 3, keyed, x);
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_map_with_string_keys(enzcc, opt):
    # (at -O1 and above the key's move is a byte copy out of the temporary string's own buffer into the node)
    assert_checked(run_cxx(enzcc, STRING_KEYS, opt), {"keyed"})


STRUCTS_BY_VALUE = r"""
#include <memory>
struct pair { double x, y; };
struct trip { double a, b, c; };  /* (passed in memory by the C++ ABI, pair in two registers) */
double square(pair p) { return p.x * p.y; }
double mix(double s, trip t, const pair &q) { return s * t.a * sin(t.b) + t.c * q.x * q.y; }
double scaled(pair p, double k) { return p.x * p.y * k * k; }
int main() {
  /* forward mode: the struct's tangent is a struct too */
  report("square", enzyme::get<0>(enzyme::autodiff<enzyme::Forward>(square,
                                  enzyme::Duplicated{pair{2, 3}, pair{70, 110}})));
  pair q{0.5, 4.0};
  report("mix", enzyme::get<0>(enzyme::autodiff<enzyme::Forward>(mix, enzyme::Duplicated<double>{1.5, 0.25},
                               enzyme::Duplicated{trip{0.3, 0.7, 2.0}, trip{1, -1, 0.5}}, enzyme::Const<const pair &>{q})));
  auto lam = [](pair p, double k) { return k * p.x * p.x * p.y; };
  report("lambda", enzyme::get<0>(enzyme::autodiff<enzyme::Forward>(lam, enzyme::Duplicated{pair{3, 1}, pair{1, 2}},
                                  enzyme::Const<double>{2.0})));
  auto owned = std::make_unique<double>(3.0);  /* a move-only callable: used in place, not copied */
  auto only = [k = std::move(owned)](pair p) { return *k * p.x * p.y; };
  report("moveonly", enzyme::get<0>(enzyme::autodiff<enzyme::Forward>(only, enzyme::Duplicated{pair{2, 3}, pair{1, 0}})));
  /* a constant struct by value in reverse mode */
  report("const", enzyme::get<0>(enzyme::get<0>(enzyme::autodiff<enzyme::Reverse>(scaled, enzyme::Const{pair{2, 3}},
                                                                                  enzyme::Active<double>{2.0}))));
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_structs_by_value(enzcc, opt):
    """A struct by value (which the C++ ABI may split into several arguments) goes to the function through one
    that takes it by pointer: Duplicated in forward mode, Const in both modes, with a lambda too."""
    v = run_cxx(enzcc, STRUCTS_BY_VALUE, opt)
    assert v["square"] == pytest.approx(2 * 110 + 3 * 70, rel=1e-14)
    assert v["mix"] == pytest.approx(0.25 * 0.3 * math.sin(0.7) + 1.5 * (1 * math.sin(0.7) - 0.3 * math.cos(0.7))
                                     + 0.5 * 0.5 * 4.0, rel=1e-13)
    assert v["lambda"] == pytest.approx(2 * (2 * 3 * 1 * 1 + 9 * 2), rel=1e-14)
    assert v["const"] == pytest.approx(2 * 3 * 2 * 2, rel=1e-14)
    assert v["moveonly"] == pytest.approx(9, rel=1e-14)


def test_struct_by_value_gradient_is_a_compile_error(enzcc):
    """Reverse mode has no place to put the gradient of a struct passed by value: the header refuses
    Duplicated of one at compile time, pointing at the reference form."""
    enzcc.write("s.cpp", r"""
#include <enzyme/enzyme>
struct pair { double x, y; };
double f(pair p) { return p.x * p.y; }
int main() { return enzyme::get<0>(enzyme::get<0>(enzyme::autodiff<enzyme::Reverse>(f, enzyme::Duplicated{pair{2, 3}, pair{0, 0}}))) > 0; }
""")
    proc = enzcc("-O2", "-std=c++17", "s.cpp", "-o", "s", check=False, cmd="enzcc++")
    assert proc.returncode != 0 and "a struct by value has no place for its gradient" in proc.stderr


STREAMS = r"""
#include <iostream>
#include <cstdio>
double __enzyme_autodiff(void *, ...);
/* printing to narrow and wide streams, and reading x[1] from std::cin (the value read has no derivative; the
   call may not be taken for one that leaves x[1] alone) */
double f(double *x) {
  std::wcerr << L"x0 = " << x[0] << std::endl;
  std::cerr << "x1 = " << x[1] << "\n";
  std::cin >> x[1];
  return x[0] * x[0] + x[1] * x[0];
}
int main() {
  double x[2] = {3, 4}, dx[2] = {0, 7};
  __enzyme_autodiff((void *)f, x, dx);
  printf("x1 %.17g\ndx0 %.17g\ndx1 %.17g\n", x[1], dx[0], dx[1]);
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_streams(enzcc, opt):
    import subprocess

    enzcc.write("io.cpp", STREAMS)
    enzcc(opt, "io.cpp", "-o", "io", cmd="enzcc++")
    out = subprocess.run(["./io"], cwd=enzcc.cwd, input="5\n", capture_output=True, text=True, check=True).stdout
    v = {m.group(1): float(m.group(2)) for m in re.finditer(r"(\S+) (\S+)", out)}
    assert v["x1"] == 5.0  # read by the derivative's primal
    assert v["dx0"] == 2 * 3 + 5 and v["dx1"] == 0.0  # the old x[1] is overwritten: its seed is consumed


VIRTUAL = r"""
double __enzyme_autodiff(void *, ...);
extern int enzyme_out, enzyme_const;
struct Fn { virtual double eval(double x) const = 0; virtual ~Fn() {} };
struct Sq : Fn { double c; explicit Sq(double c) : c(c) {} double eval(double x) const override { return c * x * x; } };
struct Ex : Fn { double eval(double x) const override { return std::exp(x); } };
/* the object's class is chosen at run time; its vtable pointer is read again after the first virtual call */
double f(double x, int which) {
  Fn *g;
  if (which) g = new Sq(3.0); else g = new Ex();
  double r = g->eval(x) + g->eval(2 * x);
  delete g;
  return r;
}
int main() {
  const double x = 0.6;
  check("sq", __enzyme_autodiff((void *)f, enzyme_out, x, enzyme_const, 1), 3 * 2 * x + 3 * 8 * x,
        [](double t) { return f(t, 1); }, x);
  check("ex", __enzyme_autodiff((void *)f, enzyme_out, x, enzyme_const, 0), std::exp(x) + 2 * std::exp(2 * x),
        [](double t) { return f(t, 0); }, x);
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_virtual_call_on_an_object_chosen_at_run_time(enzcc, opt):
    """Every vtable stored into the objects gives the candidates; the call compares against each (and traps if
    none matches). At -O0 the object's address is kept in a local variable: the candidates are then every
    address-taken function of the call's type."""
    assert_checked(run_cxx(enzcc, VIRTUAL, opt), {"sq", "ex"})


PASSED_IN = r"""
double __enzyme_autodiff(void *, ...);
extern int enzyme_out, enzyme_const;
#include <functional>
struct Fn { virtual double eval(double x) const = 0; };
struct Sq : Fn { double eval(double x) const override { return x * x; } };
struct Cu : Fn { double eval(double x) const override { return x * x * x; } };
/* the object and the std::function come from the caller: nothing in f says what they call */
__attribute__((noinline)) double f(double x, const Fn *g) { return g->eval(x) * 2.0; }
__attribute__((noinline)) double h(double x, const std::function<double(double)> *g) { return (*g)(x) + x; }
int main(int argc, char **) {
  Sq sq; Cu cu;
  const Fn *g1 = argc > 5 ? (const Fn *)&sq : (const Fn *)&cu, *g2 = argc > 5 ? (const Fn *)&cu : (const Fn *)&sq;
  std::function<double(double)> s = [](double v) { return std::sin(v) * v; };
  std::function<double(double)> e = [](double v) { return std::exp(2 * v); };
  const double x = 0.7;
  check("cu", __enzyme_autodiff((void *)f, enzyme_out, x, enzyme_const, g1), 6 * x * x,
        [&](double t) { return f(t, g1); }, x);
  check("sq", __enzyme_autodiff((void *)f, enzyme_out, x, enzyme_const, g2), 4 * x,
        [&](double t) { return f(t, g2); }, x);
  check("sin", __enzyme_autodiff((void *)h, enzyme_out, x, enzyme_const, &s), std::sin(x) + x * std::cos(x) + 1,
        [&](double t) { return h(t, &s); }, x);
  check("exp", __enzyme_autodiff((void *)h, enzyme_out, x, enzyme_const, &e), 2 * std::exp(2 * x) + 1,
        [&](double t) { return h(t, &e); }, x);
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_virtual_object_and_std_function_passed_in_by_the_caller(enzcc, opt):
    """The targets are not known inside the differentiated function: the call is compared against every
    function of its type whose address the program takes (the vtables' entries, the std::function handlers)."""
    assert_checked(run_cxx(enzcc, PASSED_IN, opt), {"cu", "sq", "sin", "exp"})


# enzyme::context: shadows of globals (a static member too) through the header; a second context keeps its own
CONTEXT = r"""
double scale = 2.0;
struct Params { static double offset; };
double Params::offset = 1.0;
double f(double x) { return scale * x * x + Params::offset * std::sin(x); }
int main() {
  double x = 0.8;
  auto ctx = enzyme::context();
  double *dscale = enzyme::shadow(ctx, scale), *doffset = enzyme::shadow(ctx, Params::offset);
  auto r = enzyme::autodiff<enzyme::Reverse>(ctx, f, enzyme::Active<double>{x});
  report("dx", enzyme::get<0>(enzyme::get<0>(r)));
  report("dscale", *dscale);
  report("doffset", *doffset);
  enzyme::zero_shadows(ctx);
  report("zeroed", *dscale + *doffset);
  *doffset = 1.0;  /* forward mode reads the tangents seeded in the context */
  auto t = enzyme::autodiff<enzyme::Forward>(ctx, f, enzyme::Duplicated<double>{x, 0.0});
  report("t", enzyme::get<0>(t));
  auto other = enzyme::context();
  auto lam = [](double y) { return scale * y; };  /* a callable object, with a context */
  auto r2 = enzyme::autodiff<enzyme::Reverse>(other, lam, enzyme::Active<double>{x});
  report("dy_other", enzyme::get<0>(enzyme::get<0>(r2)));
  report("dscale_other", *enzyme::shadow(other, scale));
  report("doffset_first", *doffset);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_context_through_the_header(enzcc, opt):
    import math

    v = run_cxx(enzcc, CONTEXT, opt)
    x = 0.8
    assert v["dx"] == pytest.approx(2 * 2.0 * x + math.cos(x), rel=1e-12)
    assert v["dscale"] == pytest.approx(x * x, rel=1e-12)
    assert v["doffset"] == pytest.approx(math.sin(x), rel=1e-12)
    assert v["zeroed"] == 0
    assert v["t"] == pytest.approx(math.sin(x), rel=1e-12)
    assert v["dy_other"] == pytest.approx(2.0, rel=1e-12)
    assert v["dscale_other"] == pytest.approx(x, rel=1e-12)
    assert v["doffset_first"] == 1.0


VIRTUAL_REVERSE = r"""
template <typename T> T __enzyme_virtualreverse(T);
struct Object {
  virtual double eval(double v) = 0;
  double val;
};
struct Scale : Object { double eval(double v) { return val * v * v; } };
struct Shift : Object { double eval(double v) { return val + sin(v); } };
double eval(Object &o, double v) { return o.eval(v) * o.val; }
struct S { double (*fn)(double); double val; };
double square(double x) { return x * x; }
double through_pointer(S *s) { return s->fn(s->val) + s->val; }
int main() {
  /* Enzyme's idiom: the shadow object's vtable (or function pointer) is __enzyme_virtualreverse of its own */
  Object *o = new Scale(), *d = new Scale();
  o->val = 2;
  *(void **)d = __enzyme_virtualreverse(*(void **)d);
  d->val = 0;
  report("scale.v", __enzyme_autodiff<double>((void *)eval, enzyme_dup, o, d, 1.5));
  report("scale.val", d->val);
  Object *o2 = new Shift(), *d2 = new Shift();
  o2->val = 2;
  *(void **)d2 = __enzyme_virtualreverse(*(void **)d2);
  d2->val = 0;
  report("shift.v", __enzyme_autodiff<double>((void *)eval, enzyme_dup, o2, d2, 1.5));
  report("shift.val", d2->val);
  S s = {square, 3.0}, ds = {__enzyme_virtualreverse(square), 0.0};
  __enzyme_autodiff<void>((void *)through_pointer, enzyme_dup, &s, &ds);
  report("ptr.val", ds.val);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_virtualreverse(enzcc, opt):
    """``__enzyme_virtualreverse`` on a shadow object's vtable or function pointer: enzcc dispatches by the
    primal pointer, so the derivatives are the analytic ones."""
    v = run_cxx(enzcc, VIRTUAL_REVERSE, opt)
    assert v["scale.v"] == pytest.approx(2 * 2 * 2 * 1.5, rel=1e-14)       # d/dv val^2 v^2
    assert v["scale.val"] == pytest.approx(2 * 2 * 1.5 * 1.5, rel=1e-14)    # d/dval val^2 v^2
    assert v["shift.v"] == pytest.approx(2 * math.cos(1.5), rel=1e-14)      # d/dv (val + sin v) val
    assert v["shift.val"] == pytest.approx(2 * 2 + math.sin(1.5), rel=1e-14)
    assert v["ptr.val"] == pytest.approx(2 * 3 + 1, rel=1e-14)


EXPRESSION_TREE = r"""
/* a polymorphic expression tree built recursively with new and released with virtual destructors: six classes,
   twelve destructors of one type, but the deleting destructor's vtable slot holds six */
struct Expr { virtual ~Expr() {} virtual double eval(const double *x) const = 0; };
struct Var : Expr { int i; explicit Var(int i) : i(i) {} double eval(const double *x) const override { return x[i]; } };
struct Const : Expr { double c; explicit Const(double c) : c(c) {} double eval(const double *) const override { return c; } };
struct Mul : Expr { Expr *a, *b; Mul(Expr *a, Expr *b) : a(a), b(b) {} ~Mul() { delete a; delete b; }
  double eval(const double *x) const override { return a->eval(x) * b->eval(x); } };
struct Add : Expr { Expr *a, *b; Add(Expr *a, Expr *b) : a(a), b(b) {} ~Add() { delete a; delete b; }
  double eval(const double *x) const override { return a->eval(x) + b->eval(x); } };
struct Sin : Expr { Expr *a; explicit Sin(Expr *a) : a(a) {} ~Sin() { delete a; }
  double eval(const double *x) const override { return std::sin(a->eval(x)); } };
Expr *build(int k, int n) {  /* sum_{k < n-1} sin(x_k x_{k+1}) + 0.25 */
  if (k == n - 1) return new Const(0.25);
  return new Add(new Sin(new Mul(new Var(k), new Var(k + 1))), build(k + 1, n));
}
double f(const double *x, int n) { Expr *e = build(0, n); double r = e->eval(x); delete e; return r; }
int main() {
  const int n = 4;
  double x[n] = {0.3, -0.7, 1.1, 0.5}, dx[n] = {0}, an[n] = {0};
  for (int k = 0; k < n - 1; k++) {
    double c = std::cos(x[k] * x[k + 1]);
    an[k] += c * x[k + 1];
    an[k + 1] += c * x[k];
  }
  __enzyme_autodiff<void>((void *)f, enzyme_dup, x, dx, enzyme_const, n);
  for (int i = 0; i < n; i++) {
    double t[n] = {0};
    t[i] = 1;
    char k[16];
    auto at = [&](double v) { double y[n]; for (int j = 0; j < n; j++) y[j] = x[j]; y[i] = v; return f(y, n); };
    snprintf(k, sizeof k, "rev%d", i); check(k, dx[i], an[i], at, x[i]);
    snprintf(k, sizeof k, "fwd%d", i);
    check(k, __enzyme_fwddiff<double>((void *)f, enzyme_dup, x, t, enzyme_const, n), an[i], at, x[i]);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_virtual_destructors_of_a_class_hierarchy(enzcc, opt):
    """`delete e` on an object built elsewhere calls its deleting destructor through the vtable: the candidates
    are the functions at that vtable slot (six), not every function of its type (twelve destructors, more than
    the eight compared: it was refused as 'no derivative rule for call to a function pointer')."""
    assert_checked(run_cxx(enzcc, EXPRESSION_TREE, opt), {f"{m}{i}" for m in ("rev", "fwd") for i in range(4)})


HOOKS_BESIDE_VTABLES = r"""
/* a C-style table of hooks reached through a pointer loaded from memory, in a program whose classes have a
   virtual function of the same type at the same offset of their vtables (scale, 16 bytes past the address
   point): the hook is a candidate too */
struct Shape { virtual ~Shape() {} virtual void scale(double *v) const = 0; };
struct Twice : Shape { void scale(double *v) const override { *v *= 2; } };
struct Thrice : Shape { void scale(double *v) const override { *v *= 3; } };
static void square(const void *, double *v) { *v *= *v; }
struct Hooks { void *a, *b; void (*third)(const void *, double *); };
Hooks hooks;
Hooks *current = &hooks;
double f(double x) { double v = x; current->third(nullptr, &v); return v + x; }   /* x^2 + x */
double g(const Shape *s, double x) { double v = x; s->scale(&v); return v * x; }
int main() {
  hooks.third = square;
  check("hook", __enzyme_autodiff<double>((void *)f, 1.25), 2 * 1.25 + 1, f, 1.25);
  Twice t;
  Thrice u;
  check("twice", __enzyme_autodiff<double>((void *)g, enzyme_const, &t, 1.25), 4 * 1.25,
        [&](double x) { return g(&t, x); }, 1.25);
  check("thrice", __enzyme_autodiff<double>((void *)g, enzyme_const, &u, 1.25), 6 * 1.25,
        [&](double x) { return g(&u, x); }, 1.25);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_a_table_of_hooks_beside_virtual_classes(enzcc, opt):
    assert_checked(run_cxx(enzcc, HOOKS_BESIDE_VTABLES, opt), {"hook", "twice", "thrice"})


UNIQUE_PTRS = r"""
#include <memory>
struct Circle { double r; };
/* std::unique_ptrs pushed into a vector: clang stores them into its storage as integers (ptrtoint) and moves
   them as i64 when the storage grows */
double total(const double *p) {
  std::vector<std::unique_ptr<Circle>> v;
  v.push_back(std::make_unique<Circle>(Circle{p[0]}));
  v.push_back(std::make_unique<Circle>(Circle{p[1]}));
  v.push_back(std::make_unique<Circle>(Circle{p[2]}));
  double s = 0;
  for (auto &c : v) s += 3 * c->r * c->r;
  return s;  /* 3 (p0^2 + p1^2 + p2^2) */
}
int main() {
  double p[3] = {2, 5, 0.5};
  for (int i = 0; i < 3; i++) {
    double dp[3] = {0}, t[3] = {0};
    t[i] = 1;
    __enzyme_autodiff<void>((void *)total, enzyme_dup, p, dp);
    auto at = [&](double x) { double q[3] = {p[0], p[1], p[2]}; q[i] = x; return total(q); };
    char k[16];
    snprintf(k, sizeof k, "rev%d", i); check(k, dp[i], 6 * p[i], at, p[i]);
    snprintf(k, sizeof k, "fwd%d", i); check(k, __enzyme_fwddiff<double>((void *)total, enzyme_dup, p, t), 6 * p[i], at, p[i]);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_unique_ptrs_in_a_vector(enzcc, opt):
    """Pointers stored as integers (store i64 (ptrtoint p)) and moved as i64 tagged as pointers by TBAA are
    pointers again before AD: their shadows travel with them. Both modes gave zero from -O1 on."""
    assert_checked(run_cxx(enzcc, UNIQUE_PTRS, opt), {f"{m}{i}" for m in ("rev", "fwd") for i in range(3)})
