"""AD across languages (Fortran and Rust, as callee and as caller) and through every driver path
(one command, CC=enzcc make over several files, enzcc build)."""

import subprocess

import pytest

from enzcc_testing import need

FORTRAN_ENERGY = """function energy(x, n) bind(c, name="energy") result(e)
  use iso_c_binding
  implicit none
  integer(c_int), value :: n
  real(c_double), intent(in) :: x(n)
  real(c_double) :: e
  integer :: i
  e = 0.0d0
  do i = 1, n
    e = e + sin(x(i)) * x(i)**2 + exp(-x(i))
  end do
end function
"""

C_MAIN_ENERGY = r"""#include <stdio.h>
#include <math.h>
extern int enzyme_dup, enzyme_const;
double __enzyme_autodiff(void *, ...);
double energy(const double *x, int n);
int main(void) {
  double x[3] = {0.5, 1.0, -1.5}, g[3] = {0};
  __enzyme_autodiff((void *)energy, enzyme_dup, x, g, enzyme_const, 3);
  for (int i = 0; i < 3; i++) printf("%.15g %.15g\n", g[i], cos(x[i])*x[i]*x[i] + 2*x[i]*sin(x[i]) - exp(-x[i]));
  return 0;
}
"""


def _pairs_close(stdout: str, rel=1e-12):
    rows = [l.split() for l in stdout.strip().splitlines()]
    assert rows
    for a, b in rows:
        assert float(a) == pytest.approx(float(b), rel=rel, abs=1e-14), (a, b)


@need("clang-22", "flang-22")
@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_c_differentiates_fortran(enzcc, opt):
    enzcc.write("energy.f90", FORTRAN_ENERGY)
    enzcc.write("main.c", C_MAIN_ENERGY)
    enzcc(opt, "main.c", "energy.f90", "-o", "prog")
    _pairs_close(enzcc.run("./prog").stdout)


@need("clang-22", "flang-22")
@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_fortran_calls_enzyme_itself(enzcc, opt):
    enzcc.write("self.f90", """module model
  use iso_c_binding
  implicit none
contains
  function cube(x) bind(c) result(y)
    real(c_double), value :: x
    real(c_double) :: y
    y = x**3 + 2.0d0 * sin(x)
  end function
end module

program main
  use iso_c_binding
  use model
  implicit none
  interface
    function enzyme_autodiff(f, x) bind(c, name="__enzyme_autodiff") result(d)
      import :: c_funptr, c_double
      type(c_funptr), value :: f
      real(c_double), value :: x
      real(c_double) :: d
    end function
  end interface
  print '(2ES24.15)', enzyme_autodiff(c_funloc(cube), 2.0d0), 3 * 2.0d0**2 + 2 * cos(2.0d0)
end program
""")
    enzcc(opt, "self.f90", "-o", "prog")
    _pairs_close(enzcc.run("./prog").stdout)


RUST_SRC = """extern "C" {
    fn __enzyme_autodiff(f: extern "C" fn(f64) -> f64, x: f64) -> f64;
}
#[no_mangle]
pub extern "C" fn rcube(x: f64) -> f64 { x * x * x + x.sin() }
#[no_mangle]
pub extern "C" fn rust_grad(x: f64) -> f64 { unsafe { __enzyme_autodiff(rcube, x) } }
#[no_mangle]
pub extern "C" fn rsumsq(p: *const f64, n: usize) -> f64 {
    let xs = unsafe { std::slice::from_raw_parts(p, n) };
    xs.iter().map(|v| v * v * v.exp()).sum()
}
"""

RUST_MAIN = r"""#include <stdio.h>
#include <math.h>
extern int enzyme_dup, enzyme_const;
double __enzyme_autodiff(void *, ...);
double rust_grad(double); double rsumsq(const double *, unsigned long);
int main(void) {
  printf("%.15g %.15g\n", rust_grad(1.5), 3*1.5*1.5 + cos(1.5));
  double x[3] = {0.5, -1, 2}, g[3] = {0};
  __enzyme_autodiff((void *)rsumsq, enzyme_dup, x, g, enzyme_const, 3UL);
  for (int i = 0; i < 3; i++) printf("%.15g %.15g\n", g[i], (2*x[i] + x[i]*x[i]) * exp(x[i]));
  return 0;
}
"""


@need("clang-22", "rustc")
@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_rust_both_ways(enzcc, opt):
    enzcc.write("r.rs", RUST_SRC)
    enzcc.write("main.c", RUST_MAIN)
    enzcc(opt, "main.c", "r.rs", "-o", "prog")
    _pairs_close(enzcc.run("./prog").stdout)


RUST_VEC = """#[no_mangle]
pub extern "C" fn rvec(p: *const f64, n: usize) -> f64 {
    let xs = unsafe { std::slice::from_raw_parts(p, n) };
    let v: Vec<f64> = xs.iter().map(|x| x * x.sin()).collect();
    v.iter().zip(xs).map(|(a, b)| a * b).sum()
}
"""

RUST_VEC_MAIN = r"""#include <stdio.h>
#include <math.h>
extern int enzyme_dup, enzyme_const;
double __enzyme_autodiff(void *, ...);
double rvec(const double *, unsigned long);
int main(void) {
  double x[3] = {0.5, -1, 2}, g[3] = {0};
  __enzyme_autodiff((void *)rvec, enzyme_dup, x, g, enzyme_const, 3UL);
  for (int i = 0; i < 3; i++) printf("%.15g %.15g\n", g[i], 2 * x[i] * sin(x[i]) + x[i] * x[i] * cos(x[i]));
  return 0;
}
"""


@need("clang-22", "rustc")
@pytest.mark.parametrize("opt", ["-O2", "-O3"])
def test_rust_vec_built_from_values_with_derivatives(enzcc, opt):
    """A Vec collected from values with derivatives: Rust's allocator shims (__rust_alloc and __rust_dealloc,
    mangled) give the shadow, as memory registered with __enzyme_allocation_like (it was refused)."""
    enzcc.write("v.rs", RUST_VEC)
    enzcc.write("main.c", RUST_VEC_MAIN)
    enzcc(opt, "main.c", "v.rs", "-o", "prog")
    _pairs_close(enzcc.run("./prog").stdout)

@need("clang-22", "make", "ar")
def test_cc_enzcc_make_with_gradients(tmp_path, env):
    """A Makefile project: the model in an archive, the gradient call in another file."""
    (tmp_path / "model.c").write_text("#include <math.h>\n#include \"model.h\"\n"
                                      "double loss(const double *w, int n) { double s = 0;\n"
                                      "  for (int i = 0; i < n; i++) s += log(1 + exp(w[i] * (i + 1)));\n"
                                      "  return s; }\n")
    (tmp_path / "model.h").write_text("double loss(const double *w, int n);\n")
    (tmp_path / "main.c").write_text("#include <stdio.h>\n#include <math.h>\n#include \"model.h\"\n"
                                     "extern int enzyme_dup, enzyme_const; double __enzyme_autodiff(void *, ...);\n"
                                     "int main(void) { double w[3] = {0.1, -0.2, 0.3}, g[3] = {0};\n"
                                     "  __enzyme_autodiff((void *)loss, enzyme_dup, w, g, enzyme_const, 3);\n"
                                     "  for (int i = 0; i < 3; i++) { double e = exp(w[i] * (i + 1));\n"
                                     "    printf(\"%.15g %.15g\\n\", g[i], (i + 1) * e / (1 + e)); }\n"
                                     "  return 0; }\n")
    (tmp_path / "Makefile").write_text("CFLAGS = -O2 -MMD\n"
                                       "train: main.o libmodel.a\n\t$(CC) -o $@ main.o -L. -lmodel -lm\n"
                                       "libmodel.a: model.o\n\t$(AR) rcs $@ $^\n"
                                       "-include main.d model.d\n")
    r = subprocess.run(["make", "-j2", "CC=enzcc"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run(["./train"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    _pairs_close(out)


@need("clang-22", "flang-22")
def test_enzcc_build_with_gradients(tmp_path, env):
    (tmp_path / "energy.f90").write_text(FORTRAN_ENERGY)
    (tmp_path / "main.c").write_text(C_MAIN_ENERGY)
    (tmp_path / "enzcc.toml").write_text('[build]\nopt-level = 3\n[[output]]\nname = "grad"\n'
                                         'sources = ["main.c", "energy.f90"]\n')
    r = subprocess.run(["enzcc", "build"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _pairs_close(subprocess.run(["./grad"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout)
    r = subprocess.run(["enzcc", "build", "--ad-mode", "before-opt"], cwd=tmp_path, env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    _pairs_close(subprocess.run(["./grad"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout)


@need("clang-22")
def test_dash_c_object_with_gradients_links_with_plain_clang(enzcc):
    """A translation unit that differentiates its own functions gets the derivatives in its -c object."""
    enzcc.write("g.c", "#include <math.h>\n#include <stdio.h>\n"
                       "double __enzyme_autodiff(void *, ...);\n"
                       "double f(double x) { return x * exp(x); }\n"
                       "int main(void) { printf(\"%.15g %.15g\\n\", __enzyme_autodiff((void *)f, 0.5),"
                       " 1.5 * exp(0.5)); return 0; }\n")
    enzcc("-O2", "-c", "g.c")
    nm = enzcc.run("nm", "g.o").stdout
    assert "__enzyme_autodiff" not in nm
    enzcc.run("clang-22", "g.o", "-lm", "-o", "plain")
    _pairs_close(enzcc.run("./plain").stdout)


@need("clang++-22")
@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_cxx_classes_templates_and_std_vector(enzcc, opt):
    enzcc.write("a.cpp", r"""#include <cmath>
#include <cstdio>
#include <vector>
extern "C" { extern int enzyme_dup, enzyme_const; double __enzyme_autodiff(void *, ...); }
struct Model {
  std::vector<double> w;
  double eval(const double *x, int n) const {
    double s = 0; for (int i = 0; i < n; i++) s += w[i % w.size()] * std::sin(x[i]) * x[i]; return s; }
};
template <typename T> T sq(T a) { return a * a; }
static double loss(const double *x, int n) { Model m{{0.5, 1.5, -2.0}}; return sq(m.eval(x, n)) + std::exp(x[0]); }
int main() {
  double x[4] = {0.1, 0.2, 0.3, 0.4}, g[4] = {0};
  __enzyme_autodiff((void *)loss, enzyme_dup, x, g, enzyme_const, 4);
  const double w[3] = {0.5, 1.5, -2.0};
  double r = 0; for (int i = 0; i < 4; i++) r += w[i % 3] * std::sin(x[i]) * x[i];
  for (int i = 0; i < 4; i++) {
    double d = 2 * r * w[i % 3] * (std::cos(x[i]) * x[i] + std::sin(x[i])) + (i == 0 ? std::exp(x[0]) : 0);
    std::printf("%.15g %.15g\n", g[i], d);
  }
}
""")
    enzcc(opt, "a.cpp", "-o", "prog", cmd="enzcc++")
    _pairs_close(enzcc.run("./prog").stdout)


@need("clang-22")
def test_dash_S_with_gradients(enzcc):
    enzcc.write("g.c", "#include <math.h>\ndouble __enzyme_autodiff(void *, ...);\n"
                       "double f(double x) { return x * exp(x); }\n"
                       "double df(double x) { return __enzyme_autodiff((void *)f, x); }\n")
    enzcc.write("plain.c", "double twice(double x) { return 2 * x; }\n")
    enzcc("-O2", "-S", "g.c", "plain.c")
    asm = (enzcc.cwd / "g.s").read_text()
    assert "df:" in asm and "__enzyme_autodiff" not in asm
    assert "twice:" in (enzcc.cwd / "plain.s").read_text()
