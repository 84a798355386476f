"""Misuse and non-differentiable code: one line, function name, source line, non-zero exit, no output."""

import pytest

from adharness import PRELUDE
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")


def _fails(enzcc, src, *flags):
    enzcc.write("e.c", PRELUDE + src)
    r = enzcc(*flags, "e.c", "-lm", "-o", "e", check=False)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert not (enzcc.cwd / "e").exists()
    return lines[0]


def test_unknown_external_function(enzcc):
    src = """double mystery(double);
double f(double x) { return mystery(x) * x; }
int main(void) { printf("%g\\n", __enzyme_autodiff((void *)f, 2.0)); return 0; }
"""
    line = _fails(enzcc, src, "-O2", "-g")
    assert "no derivative rule for call to 'mystery'" in line
    assert "e.c:" in line and "'f'" in line  # source line from debug info
    line = _fails(enzcc, src, "-O0")
    assert "no derivative rule for call to 'mystery'" in line and "'f'" in line


@pytest.mark.parametrize("call,message", [
    ("__enzyme_autodiff((void *)f, enzyme_dup, 2.0)", "enzyme_dup parameter 1 of 'f' must be a pointer"),
    ("__enzyme_autodiff((void *)f, 2.0, 3.0)", "too many arguments"),
    ("__enzyme_autodiff((void *)f)", "too few arguments"),
    ("__enzyme_fwddiff((void *)f, enzyme_out, 2.0)", "enzyme_out is not allowed"),
    ("__enzyme_autodiff((void *)f, enzyme_out, enzyme_const, 2.0)", "must be followed by a value"),
    ("__enzyme_autodiff((void *)g, enzyme_out, p)", "enzyme_out parameter 1 of 'g' must be a floating-point"),
])
def test_wrong_markers(enzcc, call, message):
    src = f"""double f(double x) {{ return x * x; }}
double g(double *x) {{ return *x; }}
int main(void) {{ double v = 1, *p = &v; printf("%g\\n", {call}); return 0; }}
"""
    line = _fails(enzcc, src, "-O2", "-g")
    assert message in line, line
    assert f"e.c:{PRELUDE.count(chr(10)) + 3}:" in line  # the line of the call


def test_function_pointer_not_known(enzcc):
    src = """double f(double x) { return x * x; }
double apply(double (*fp)(double), double x) { return __enzyme_autodiff((void *)fp, x); }
int main(int argc, char **argv) { double (*volatile fp)(double) = f; printf("%g\\n", apply(fp, 2.0)); return 0; }
"""
    assert "must be a function known at compile time" in _fails(enzcc, src, "-O0")


def test_declaration_only(enzcc):
    src = """double ext(double);
int main(void) { printf("%g\\n", __enzyme_autodiff((void *)ext, 2.0)); return 0; }
"""
    enzcc.write("ext.c", "double ext(double x) { return x; }\n")
    line = _fails(enzcc, src, "-O2")
    assert "cannot differentiate 'ext': its body is not available" in line


def test_wrong_return_declaration(enzcc):
    src = """double f(double x, double y) { return x * y; }
int main(void) { printf("%g\\n", __enzyme_autodiff((void *)f, 1.0, 2.0)); return 0; }
"""
    line = _fails(enzcc, src, "-O2")
    assert "gives 2 derivative(s)" in line


def test_ir_the_model_does_not_support_is_a_clear_error(enzcc):
    enzcc.write("cb.ll", """target triple = "x86_64-pc-linux-gnu"
declare double @__enzyme_autodiff(ptr, ...)
define double @f(double %x) {
entry:
  callbr void asm "", "!i"() to label %a [label %b]
a:
  %y = fmul double %x, %x
  ret double %y
b:
  ret double %x
}
define i32 @main() {
  %d = call double (ptr, ...) @__enzyme_autodiff(ptr @f, double 2.0)
  %i = fptosi double %d to i32
  ret i32 %i
}
""")
    r = enzcc("cb.ll", "-o", "cb", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr and not (enzcc.cwd / "cb").exists()
    assert r.stderr.count("\n") == 1 and "does not support this code yet" in r.stderr and "callbr" in r.stderr


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_pointer_phi_of_differentiated_memory_and_a_global_it_only_reads(enzcc, opt):
    """A pointer that is either the differentiated buffer or a global that the differentiated code only reads
    (refused before, with a message that once printed '%<badref>'): the global's derivative is zero."""
    src = """double table[3] = {1.0, 2.0, 3.0};
double f(double *x, int n) {
  const double *p = n > 2 ? x : table;
  double s = 0;
  for (int i = 0; i < 3; i++) s += p[i] * x[i];
  return s;
}
int main(int argc, char **argv) {
  double x[3] = {1.5, 2, 3}, dx[3] = {0}, dy[3] = {0};
  table[0] = argc;
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, argc + 2);
  __enzyme_autodiff((void *)f, enzyme_dup, x, dy, enzyme_const, argc);
  printf("%g %g %g\\n", dx[0], dy[0], dy[2]);
  return 0;
}
"""
    enzcc.write("e.c", PRELUDE + src)
    enzcc(opt, "e.c", "-lm", "-o", "e")
    assert enzcc.run("./e").stdout.split() == ["3", "1", "3"]
