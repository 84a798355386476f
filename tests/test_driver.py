"""enzcc as a drop-in clang: real compiles, links and errors, end to end."""

import ctypes
import subprocess


from enzcc_testing import need
from enzcc.backend import embed as E

pytestmark = need("clang-22", "llvm-objcopy-22")

HELLO = '#include <stdio.h>\n#include <math.h>\nint main(void) { printf("%.6f\\n", sqrt(2.0) * K); return 0; }\n'


def test_compile_and_run(enzcc):
    enzcc.write("hello.c", HELLO)
    enzcc("-O2", "-DK=3", "hello.c", "-lm", "-o", "hello")
    assert enzcc.run("./hello").stdout == "4.242641\n"


def test_no_output_name_gives_a_out(enzcc):
    enzcc.write("hello.c", HELLO)
    enzcc("-DK=1", "hello.c", "-lm")
    assert enzcc.run("./a.out").stdout == "1.414214\n"


def test_dash_c_writes_native_object_with_bitcode(enzcc):
    enzcc.write("f.c", "double f(double x) { return x * x; }\n")
    enzcc("-c", "-O1", "f.c")
    data = (enzcc.cwd / "f.o").read_bytes()
    assert data[:4] == b"\x7fELF"
    recs = E.records_in_object(data, "f.o")
    assert len(recs) == 1 and recs[0].lang == "c" and recs[0].opt == 1 and recs[0].bitcode[:2] == b"BC"
    enzcc("-c", "f.c", "-o", "sub_f.o")
    assert (enzcc.cwd / "sub_f.o").exists()
    # no temporaries left beside the outputs
    assert sorted(p.name for p in enzcc.cwd.iterdir()) == ["f.c", "f.o", "sub_f.o"]


def test_several_sources_with_c(enzcc):
    enzcc.write("a.c", "int a(void) { return 1; }\n")
    enzcc.write("b.c", "int b(void) { return 2; }\n")
    enzcc("-c", "a.c", "b.c")
    assert (enzcc.cwd / "a.o").exists() and (enzcc.cwd / "b.o").exists()
    r = enzcc("-c", "a.c", "b.c", "-o", "x.o", check=False)
    assert r.returncode != 0 and "cannot specify -o" in r.stderr


def test_objects_linked_by_plain_clang_still_work(enzcc):
    """The section travels with the object but the object is an ordinary one."""
    enzcc.write("f.c", "int twice(int x) { return 2 * x; }\n")
    enzcc.write("m.c", "int twice(int); int main(void) { return twice(21) != 42; }\n")
    enzcc("-c", "f.c", "m.c")
    enzcc.run("clang-22", "f.o", "m.o", "-o", "plain")
    assert enzcc.run("./plain").returncode == 0


def test_one_clang_run_gives_clangs_machine_code_and_the_bitcode(enzcc):
    """``-c`` runs clang once: the object's code is what clang alone makes, the bitcode rides in enzcc's
    section only (clang's own .llvmbc/.llvmcmd would make binutils' LTO plugin warn on ar and ld)."""
    enzcc.write("f.c", "#include <math.h>\ndouble f(double *x, int n) { double s = 0;\n"
                "  for (int i = 0; i < n; i++) s += sin(x[i]) * x[i]; return s; }\n")
    for opt in ("-O0", "-O2", "-O3"):
        enzcc(opt, "-g", "-c", "f.c", "-o", "e.o")
        enzcc.run("clang-22", opt, "-g", "-c", "f.c", "-o", "c.o")
        code = [enzcc.run("llvm-objdump-22", "-dr", o).stdout.split("\n", 2)[2] for o in ("e.o", "c.o")]
        assert code[0] == code[1], opt
        sections = enzcc.run("llvm-readelf-22", "-S", "e.o").stdout
        assert ".enzcc.bc " in sections and ".llvmbc" not in sections and ".llvmcmd" not in sections
        recs = E.records_in_object((enzcc.cwd / "e.o").read_bytes(), "e.o")
        assert len(recs) == 1 and recs[0].bitcode[:2] == b"BC" and recs[0].opt == int(opt[2])
    r = enzcc.run("ar", "rcs", "libf.a", "e.o")
    assert r.returncode == 0 and r.stderr == ""


def test_a_source_that_differentiates_is_compiled_from_its_bitcode_alone(enzcc):
    """A source naming Enzyme most likely differentiates: clang makes its bitcode only (its own optimization and
    code generation would be thrown away for the derivative's). Its warnings show once, its dependency file
    names the object, and the object holds the derivative (a plain clang link runs it). One that names Enzyme
    but differentiates nothing gets clang's own machine code, made from that bitcode."""
    enzcc.write("inc/h.h", "#define K 3.0\n")
    enzcc.write("src/f.c", '#include "h.h"\n#include <stdio.h>\ndouble __enzyme_autodiff(void *, ...);\n'
                'static double sq(double x) { int unused; return K * x * x; }\n'
                'int main(void) { printf("%.3f\\n", __enzyme_autodiff((void *)sq, 2.0)); return 0; }\n')
    enzcc.cwd.joinpath("obj").mkdir()
    r = enzcc("-Wall", "-Iinc", "-MMD", "-O2", "--time-report", "-c", "src/f.c", "-o", "obj/f.o")
    assert r.stderr.count("unused variable 'unused'") == 1
    assert "codegen" in r.stderr + r.stdout
    assert (enzcc.cwd / "obj/f.d").read_text().startswith("obj/f.o: src/f.c inc/h.h")
    enzcc.run("clang-22", "obj/f.o", "-o", "plain")
    assert enzcc.run("./plain").stdout == "12.000\n"
    assert len(E.records_in_object((enzcc.cwd / "obj/f.o").read_bytes(), "f.o")) == 1

    enzcc.write("g.c", "/* no enzyme here */\n#include <math.h>\n"
                "double g(double *x, int n) { double s = 0;\n"
                "  for (int i = 0; i < n; i++) s += sin(x[i]) * x[i]; return s; }\n")
    for opt in ("-O0", "-O2"):
        enzcc(opt, "-g", "-c", "g.c", "-o", "e.o")
        enzcc.run("clang-22", opt, "-g", "-c", "g.c", "-o", "c.o")
        code = [enzcc.run("llvm-objdump-22", "-dr", o).stdout.split("\n", 2)[2] for o in ("e.o", "c.o")]
        assert code[0] == code[1], opt
        assert len(E.records_in_object((enzcc.cwd / "e.o").read_bytes(), "e.o")) == 1


def test_a_link_without_ad_is_a_native_link(enzcc):
    """No __enzyme_* call anywhere: the objects' own machine code is linked, nothing is rebuilt (also for
    sources compiled by the link itself, from the bitcode already made)."""
    enzcc.write("f.c", "int twice(int x) { return 2 * x; }\n")
    enzcc.write("m.c", "int twice(int); int main(void) { return twice(21) != 42; }\n")
    enzcc("-c", "-O2", "f.c", "m.c")
    r = enzcc("--time-report", "f.o", "m.o", "-o", "p")
    assert enzcc.run("./p").returncode == 0
    assert "native-link" in r.stderr + r.stdout and "optimize" not in r.stderr + r.stdout
    r = enzcc("--time-report", "-O2", "f.c", "m.c", "-o", "q")
    assert enzcc.run("./q").returncode == 0
    report = r.stderr + r.stdout
    assert "codegen" in report and "optimize" not in report and "link " not in report.replace("native-link", "")


def test_mixed_native_and_bitcode_objects(enzcc):
    enzcc.write("f.c", "int twice(int x) { return 2 * x; }\n")
    enzcc.write("m.c", "int twice(int); int main(void) { return twice(21) != 42; }\n")
    enzcc.run("clang-22", "-c", "f.c")  # no bitcode: goes to the native linker as is
    enzcc("m.c", "f.o", "-o", "mixed")
    assert enzcc.run("./mixed").returncode == 0


def test_dash_S_and_dash_E(enzcc):
    enzcc.write("f.c", "#define SQ(x) ((x)*(x))\ndouble f(double x) { return SQ(x); }\n")
    enzcc("-S", "-O2", "f.c")
    assert "f:" in (enzcc.cwd / "f.s").read_text()
    out = enzcc("-E", "f.c").stdout
    assert "((x)*(x))" in out and "#define" not in out


def test_dependency_files_name_the_real_object(enzcc):
    enzcc.write("inc/h.h", "#define V 7\n")
    enzcc.write("src/f.c", '#include "h.h"\nint f(void) { return V; }\n')
    enzcc.cwd.joinpath("obj").mkdir()
    enzcc("-Iinc", "-MMD", "-MP", "-c", "src/f.c", "-o", "obj/f.o")
    dep = (enzcc.cwd / "obj/f.d").read_text()
    assert dep.startswith("obj/f.o: src/f.c inc/h.h") and "inc/h.h:" in dep  # -MP phony target
    enzcc("-MD", "-MF", "custom.d", "-MT", "tgt", "-c", "src/f.c", "-Iinc")
    assert (enzcc.cwd / "custom.d").read_text().startswith("tgt: src/f.c")
    (enzcc.cwd / "f.o").unlink()
    out = enzcc("-Iinc", "-M", "src/f.c").stdout  # plain -M prints rules and compiles nothing
    assert out.startswith("f.o: src/f.c") and not (enzcc.cwd / "f.o").exists()


def test_version_and_queries(enzcc):
    out = enzcc("--version").stdout
    assert "clang version 22" in out and "enzcc" in out
    assert enzcc("-dumpversion").stdout.strip().startswith("22")
    assert "x86_64" in enzcc("-dumpmachine").stdout
    assert enzcc("-print-prog-name=ld").stdout.strip()
    assert enzcc("-print-search-dirs").returncode == 0
    help_text = enzcc("--help").stdout
    assert "OVERVIEW: clang" in help_text and "--ad-mode=<after-opt|before-opt>" in help_text


def test_response_file(enzcc):
    enzcc.write("hello.c", HELLO)
    enzcc.write("args.rsp", "-DK=2 hello.c -lm\n-o 'out file'\n")
    enzcc("@args.rsp")
    assert enzcc.run("./out file").stdout == "2.828427\n"


def test_shared_library(enzcc):
    enzcc.write("lib.c", "#include <math.h>\ndouble hyp(double a, double b) { return sqrt(a*a + b*b); }\n")
    enzcc("-O2", "-shared", "-fPIC", "lib.c", "-lm", "-o", "libhyp.so")
    lib = ctypes.CDLL(str(enzcc.cwd / "libhyp.so"))
    lib.hyp.restype = ctypes.c_double
    lib.hyp.argtypes = [ctypes.c_double, ctypes.c_double]
    assert lib.hyp(3.0, 4.0) == 5.0


def test_static_archive_and_dash_l(enzcc):
    enzcc.write("p.c", "int p1(int x) { return x + 1; }\n")
    enzcc.write("q.c", "int q_unused(void) { return 99; }\n")
    enzcc.write("m.c", "int p1(int); int main(void) { return p1(41) != 42; }\n")
    enzcc("-O2", "-c", "p.c", "q.c")
    enzcc.run("ar", "rcs", "libpq.a", "p.o", "q.o")
    enzcc.run("ranlib", "libpq.a")
    enzcc("-O2", "m.c", "-L.", "-lpq", "-o", "m1")
    enzcc("-O2", "m.c", "libpq.a", "-o", "m2")
    assert enzcc.run("./m1").returncode == 0 and enzcc.run("./m2").returncode == 0
    # only the member that was needed got linked, as an archive would do
    syms = enzcc.run("nm", "m1").stdout
    assert "p1" in syms and "q_unused" not in syms


def test_archive_member_behind_a_c99_inline_body(enzcc):
    """GSL's pattern (``gsl_minmax.h``): a header's C99 ``inline`` function, whose one out-of-line definition is
    its own archive member. Objects built at -O2 carry the inline body as ``available_externally``: that is no
    definition, so an -O0 link with AD, which inlines nothing, still pulls the member (before: ``undefined
    reference to `max2'`). The gradient against the analytic one."""
    header = "inline double max2(double a, double b) { return a > b ? a : b; }\n"
    enzcc.write("m.h", header)
    enzcc.write("max2.c", '#include "m.h"\nextern inline double max2(double a, double b);\n')
    enzcc.write("use.c", '#include "m.h"\ndouble f(double x) { return max2(x * x, 3.0 * x); }\n')
    enzcc.write("main.c", "#include <stdio.h>\ndouble f(double);\ndouble __enzyme_autodiff(void *, ...);\n"
                          "int main(void) { printf(\"%.17g %.17g\\n\", __enzyme_autodiff((void *)f, 4.0),"
                          " __enzyme_autodiff((void *)f, 2.0)); return 0; }\n")
    enzcc("-O2", "-c", "max2.c", "use.c")
    enzcc.run("ar", "rcs", "libuse.a", "use.o")
    enzcc.run("ar", "rcs", "libmax.a", "max2.o")
    for opt in ("-O0", "-O2"):
        enzcc(opt, "main.c", "libuse.a", "libmax.a", "-o", f"m{opt}")
        assert enzcc.run(f"./m{opt}").stdout.split() == ["8", "3"]  # d/dx x^2 at 4, d/dx 3x at 2


@need("clang++-22")
def test_cxx(enzcc):
    enzcc.write("v.cpp", '#include <vector>\n#include <cstdio>\n#include <numeric>\n'
                         'int main() { std::vector<double> v{1, 2, 3.5}; '
                         'std::printf("%g\\n", std::accumulate(v.begin(), v.end(), 0.0)); }\n')
    enzcc("-O2", "v.cpp", "-o", "v")
    assert enzcc.run("./v").stdout == "6.5\n"
    enzcc("-O1", "v.cpp", "-o", "v2", cmd="enzcc++")
    assert enzcc.run("./v2").stdout == "6.5\n"


@need("flang-22")
def test_fortran_program_with_io_and_lang_option(enzcc):
    enzcc.write("p.f90", "program p\n  real(8) :: x\n  x = 2.0d0\n  print '(F8.4)', sqrt(x)\nend program\n")
    enzcc("-O2", "p.f90", "-o", "p")
    assert enzcc.run("./p").stdout.strip() == "1.4142"
    enzcc.write("q.src", "program q\n  print '(A)', 'via --lang'\nend program\n")
    enzcc("--lang", "fortran", "q.src", "-o", "q")
    assert enzcc.run("./q").stdout.strip() == "via --lang"


@need("flang-22", "rustc")
def test_c_fortran_rust_on_one_command_line(enzcc):
    enzcc.write("m.c", '#include <stdio.h>\ndouble fcube(double); double rhalf(double);\n'
                       'int main(void) { printf("%g %g\\n", fcube(2), rhalf(3)); return 0; }\n')
    enzcc.write("f.f90", 'function fcube(x) bind(c, name="fcube")\n  use iso_c_binding\n'
                         '  real(c_double), value :: x\n  real(c_double) :: fcube\n  fcube = x**3\nend function\n')
    enzcc.write("r.rs", '#[no_mangle]\npub extern "C" fn rhalf(x: f64) -> f64 { x / 2.0 }\n')
    enzcc("-O2", "m.c", "f.f90", "r.rs", "-o", "all")
    assert enzcc.run("./all").stdout == "8 1.5\n"


def test_llvm_ir_inputs_from_other_producers(enzcc):
    enzcc.write("f.c", "double f(double x) { return 3 * x; }\n")
    enzcc.run("clang-22", "-O1", "-S", "-emit-llvm", "f.c", "-o", "f.ll")
    enzcc.run("clang-22", "-O1", "-c", "-emit-llvm", "f.c", "-o", "fb.bc")
    (enzcc.cwd / "fb.bc").write_bytes((enzcc.cwd / "fb.bc").read_bytes())
    enzcc.write("m.c", '#include <stdio.h>\ndouble f(double);\nint main(void) { printf("%g\\n", f(2)); }\n')
    enzcc("m.c", "f.ll", "-o", "from_ll")
    assert enzcc.run("./from_ll").stdout == "6\n"
    enzcc("-c", "f.ll", "-o", "f_ll.o")
    assert E.records_in_object((enzcc.cwd / "f_ll.o").read_bytes(), "f_ll.o")[0].lang == "llvm"
    enzcc.write("m2.c", '#include <stdio.h>\ndouble f(double);\nint main(void) { printf("%g\\n", f(5)); }\n')
    (enzcc.cwd / "f.c").unlink()
    (enzcc.cwd / "f.ll").rename(enzcc.cwd / "g.ll")
    enzcc("m2.c", "g.ll", "-o", "from_ll2")
    assert enzcc.run("./from_ll2").stdout == "15\n"


@need("mlir-translate-22")
def test_mlir_llvm_dialect(enzcc):
    enzcc.write("f.mlir", """
module {
  llvm.func @triple_plus_one(%arg0: f64) -> f64 {
    %0 = llvm.mlir.constant(3.0 : f64) : f64
    %1 = llvm.mlir.constant(1.0 : f64) : f64
    %2 = llvm.fmul %arg0, %0 : f64
    %3 = llvm.fadd %2, %1 : f64
    llvm.return %3 : f64
  }
}
""")
    enzcc.write("m.c", '#include <stdio.h>\ndouble triple_plus_one(double);\n'
                       'int main(void) { printf("%g\\n", triple_plus_one(2)); }\n')
    enzcc("-O2", "m.c", "f.mlir", "-o", "m")
    assert enzcc.run("./m").stdout == "7\n"


# -- errors ----------------------------------------------------------------------------------------


def _one_line_error(proc):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_compile_error_passes_exit_code_and_leaves_no_output(enzcc):
    enzcc.write("bad.c", "int main(void) { return undeclared; }\n")
    r = enzcc("-c", "bad.c", "-o", "bad.o", check=False)
    assert r.returncode == 1 and "undeclared" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in enzcc.cwd.iterdir()) == ["bad.c"]
    r = enzcc("bad.c", "-o", "bad", check=False)
    assert r.returncode == 1 and not (enzcc.cwd / "bad").exists()


def test_link_error_passes_exit_code(enzcc):
    enzcc.write("m.c", "int missing(void); int main(void) { return missing(); }\n")
    r = enzcc("m.c", "-o", "m", check=False)
    assert r.returncode != 0 and "missing" in r.stderr and not (enzcc.cwd / "m").exists()


def test_missing_input(enzcc):
    line = _one_line_error(enzcc("-c", "nope.c", check=False))
    assert "nope.c" in line


def test_missing_tool_names_the_package(enzcc):
    enzcc.write("p.f90", "program p\nend program\n")
    line = _one_line_error(enzcc("-c", "p.f90", check=False, env={"ENZCC_FLANG": "flang-does-not-exist"}))
    assert "flang" in line and "not found" in line


def test_broken_ir_is_one_line(enzcc):
    enzcc.write("bad.ll", "define i32 @f() {\n  ret i64 0\n}\n")
    line = _one_line_error(enzcc("-c", "bad.ll", check=False))
    assert line.startswith("bad.ll:2:7: error:") and "invalid LLVM IR" in line
    assert "value doesn't match function result type 'i32'" in line
    enzcc.write("garbage.bc", "BC\xc0\xdenot really")
    line = _one_line_error(enzcc("-c", "garbage.bc", check=False))
    assert "garbage.bc" in line


def test_ir_with_a_nul_character_is_rejected_not_truncated(enzcc):
    # LLVM reads a C string: without the check, everything after the NUL was silently dropped
    (enzcc.cwd / "nul.ll").write_bytes(b"define void @f() {\n  ret void\n}\n\0garbage\n")
    line = _one_line_error(enzcc("-c", "nul.ll", "-o", "nul.o", check=False))
    assert line.startswith("nul.ll:4: error:") and "NUL" in line
    assert not (enzcc.cwd / "nul.o").exists()


def test_bad_flags_are_one_line(enzcc):
    assert "missing" in _one_line_error(enzcc("x.c", "-o", check=False))
    assert "unknown language" in _one_line_error(enzcc("--lang", "cobol", "x.cob", check=False))
    assert "no input files" in _one_line_error(enzcc("-O2", check=False))


def test_parallel_builds_do_not_collide(enzcc):
    """Unique temporaries: many enzcc processes writing into one directory at once."""
    for i in range(6):
        enzcc.write(f"f{i}.c", f"int f{i}(void) {{ return {i}; }}\n")
    procs = [subprocess.Popen(["enzcc", "-c", f"f{i}.c"], cwd=enzcc.cwd, env=enzcc.env) for i in range(6)]
    assert all(p.wait() == 0 for p in procs)
    for i in range(6):
        assert E.records_in_object((enzcc.cwd / f"f{i}.o").read_bytes(), "x")[0].source == f"f{i}.c"


@need("flang-22")
def test_fortran_dependency_files(enzcc):
    """flang-22 has no -MD: enzcc writes the rule (source and included files) itself."""
    enzcc.write("inc/params.inc", "integer, parameter :: nn = 3\n")
    enzcc.write("s.f90", "subroutine s(x) bind(c)\n  use iso_c_binding\n  include 'params.inc'\n"
                         "  real(c_double) :: x(nn)\n  x = 2 * x\nend subroutine\n")
    enzcc.cwd.joinpath("obj").mkdir()
    enzcc("-Iinc", "-MMD", "-MP", "-c", "s.f90", "-o", "obj/s.o")
    assert (enzcc.cwd / "obj/s.d").read_text() == "obj/s.o: s.f90 inc/params.inc\ninc/params.inc:\n"


def test_names_that_are_not_utf8_link(enzcc):
    # asm labels may hold any byte; llvmlite's .name failed on them (internal error at the link)
    enzcc.write("label.c", 'void f(void) __asm__("\\xea");\nvoid f(void) {}\nint main(void) { f(); return 0; }\n')
    enzcc("label.c", "-o", "label")
    enzcc.run("./label")


def test_ir_strings_that_are_not_utf8_are_one_line_for_ad(enzcc):
    enzcc.write("raw.ll", "declare double @__enzyme_autodiff(ptr, ...)\n"
                "define double @sq(double %x) #0 {\n  %y = fmul double %x, %x\n  ret double %y\n}\n"
                "define double @g() {\n  %d = call double (ptr, ...) @__enzyme_autodiff(ptr @sq, double 2.0)\n"
                "  ret double %d\n}\n"
                'attributes #0 = { "k\\EA"="v" }\n')
    line = _one_line_error(enzcc("-c", "raw.ll", "-o", "raw.o", check=False))
    assert line.startswith("raw.ll: error:") and "not UTF-8" in line and "0xea" in line
    assert not (enzcc.cwd / "raw.o").exists()


@need("llc-22")
def test_target_cpus_llvm_cannot_use_are_errors_not_aborts(enzcc):
    # LLVM ends the process ('LLVM ERROR: 64-bit code requested...') on these without the check
    for cpu, fragment in (("x86-99", "unknown target CPU 'x86-99'"), ("i386", "cannot be used")):
        enzcc.write("cpu.ll", 'target triple = "x86_64-pc-linux-gnu"\n'
                    f'define i32 @main() #0 {{\n  ret i32 0\n}}\nattributes #0 = {{ "target-cpu"="{cpu}" }}\n')
        line = _one_line_error(enzcc("cpu.ll", "-o", "cpu", check=False))
        assert line.startswith("cpu.ll: error:") and fragment in line and "LLVM ERROR" not in line
        assert not (enzcc.cwd / "cpu").exists()
    enzcc.write("plain.ll", 'target triple = "x86_64-pc-linux-gnu"\ndefine i32 @main() {\n  ret i32 0\n}\n')
    line = _one_line_error(enzcc("-c", "-march=bogus", "plain.ll", "-o", "plain.o", check=False))
    assert "unknown target CPU 'bogus'" in line and not (enzcc.cwd / "plain.o").exists()
    enzcc("-c", "-march=skylake", "plain.ll", "-o", "plain.o")


def test_lto_objects(enzcc):
    """-flto / -flto=thin: the objects hold bitcode (as clang's do), -MD files are written, archives of them
    work, and the link differentiates a function whose body is in another object (Enzyme's LTO pre-link case)."""
    enzcc.write("a.c", "double __enzyme_fwddiff(void *, ...);\ndouble square(double x);\n"
                       "double dsquare(double x) { return __enzyme_fwddiff((void *)square, x, 1.0); }\n")
    enzcc.write("b.c", "#include <stdio.h>\ndouble square(double x) { return x * x; }\ndouble dsquare(double);\n"
                       "int main(void) { printf(\"%g\\n\", dsquare(3.0)); return 0; }\n")
    enzcc("-flto", "-O2", "-c", "a.c", "-o", "a.o")
    enzcc("-flto=thin", "-O2", "-c", "b.c", "-o", "b.o", "-MD")
    assert (enzcc.cwd / "b.d").read_text().count("b.c") >= 1
    assert (enzcc.cwd / "a.o").read_bytes()[:4] != b"\x7fELF"  # bitcode, no machine code
    enzcc("-flto", "-O2", "a.o", "b.o", "-o", "ab")
    assert enzcc.run("./ab").stdout.strip() == "6"
    run_tool = __import__("subprocess").run
    run_tool(["ar", "rcs", "libb.a", "b.o"], cwd=enzcc.cwd, check=True)
    enzcc("-O0", "a.o", "-L.", "-lb", "-o", "ab2")
    assert enzcc.run("./ab2").stdout.strip() == "6"
    enzcc("-flto", "-fno-lto", "-O1", "-c", "b.c", "-o", "n.o")  # the last of -flto / -fno-lto wins
    assert (enzcc.cwd / "n.o").read_bytes()[:4] == b"\x7fELF"


GRAD_PAIRS = r"""
extern int enzyme_dup;
void __enzyme_autodiff(void *, ...);
/* y0 = x0 x2, y1 = x1 x3: the reverse sweep's two pairs of updates (dx0, dx1) and (dx2, dx3) are SLP pairs */
static void f(const double *restrict x, double *restrict y) { y[0] = x[0] * x[2]; y[1] = x[1] * x[3]; }
void grad(const double *restrict x, double *restrict dx, double *restrict y, double *restrict dy) {
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_dup, y, dy);
}
"""


def _packed(asm: str) -> list[str]:
    return [line.split()[0] for line in asm.splitlines() if line.split()[:1] in (["mulpd"], ["addpd"])]


def test_vectorizers_run_after_ad_as_clang_runs_them(enzcc):
    """The optimization after AD runs LLVM's SLP vectorizer from -O2 on, as clang does (llvmlite's default
    pipeline never does): the gradient's paired updates become packed SSE2 instructions. -O1 and
    ``-fno-slp-vectorize`` leave them scalar; the gradient is the same."""
    enzcc.write("g.c", GRAD_PAIRS)
    target = ["-target", "x86_64-linux-gnu", "-march=x86-64"]
    enzcc("-S", "-O2", *target, "g.c", "-o", "o2.s")
    enzcc("-S", "-O1", *target, "g.c", "-o", "o1.s")
    enzcc("-S", "-O2", *target, "-fno-slp-vectorize", "g.c", "-o", "noslp.s")
    assert _packed((enzcc.cwd / "o2.s").read_text())
    assert not _packed((enzcc.cwd / "o1.s").read_text())
    assert not _packed((enzcc.cwd / "noslp.s").read_text())
    enzcc.write("main.c", r"""#include <stdio.h>
void grad(const double *x, double *dx, double *y, double *dy);
int main(void) {
  double x[4] = {1, 2, 3, 4}, dx[4] = {0}, y[2], dy[2] = {10, 100};
  grad(x, dx, y, dy);
  printf("%g %g %g %g %g %g\n", dx[0], dx[1], dx[2], dx[3], y[0], y[1]);
  return 0;
}
""")
    for flags in (["-O2"], ["-O2", "-fno-slp-vectorize"]):
        enzcc(*flags, "g.c", "main.c", "-o", "g")
        assert enzcc.run("./g").stdout == "30 400 10 200 3 8\n"


def test_emit_llvm_shows_the_module_after_ad(enzcc):
    """``-S -emit-llvm`` / ``-c -emit-llvm`` of a source that differentiates something: the module after AD and
    the second optimization (an Enzyme user's way to look at the derivative), not clang's module."""
    enzcc.write("e.c", "double __enzyme_autodiff(void*, double);\n"
                       "static double sq(double x) { return x * x; }\n"
                       "double d(double x) { return __enzyme_autodiff((void*)sq, x); }\n")
    enzcc("-O2", "-S", "-emit-llvm", "e.c", "-o", "e.ll")
    text = (enzcc.cwd / "e.ll").read_text()
    assert "__enzyme_autodiff" not in text and "fadd" in text
    enzcc("-O2", "-c", "-emit-llvm", "e.c", "-o", "e.bc")
    assert (enzcc.cwd / "e.bc").read_bytes()[:4] == b"BC\xc0\xde"
