"""The no-AD fast path (enzcc/fastpath.py): what it makes equals the driver's, it never hides a derivative
(Enzyme reached through a header's macro, bitcode in archives), and what clang answers alone passes through."""

import shutil
import subprocess
import sys

import pytest

from enzcc.backend import embed as E
from enzcc_testing import need

pytestmark = need("clang-22")

CUBE = "double cube(double x) { return x * x * x + 2.0 * x; }\n"
#: a header that calls Enzyme behind a macro: the source's own text never names it
GRAD_H = "double __enzyme_autodiff(void *, ...);\n#define GRAD(f, x) __enzyme_autodiff((void *)(f), (x))\n"
MAIN = ('#include <stdio.h>\n#include "grad.h"\ndouble cube(double);\n'
        'int main(void) { printf("%.17g\\n", GRAD(cube, 2.0)); return 0; }\n')
EXPECTED = 3 * 2.0 ** 2 + 2.0  # d/dx (x^3 + 2x) at 2


def _slow(env):
    return {**env, "ENZCC_NO_FAST_PATH": "1"}


def _imports(enzcc, *args):
    """Modules one enzcc call imports (python -X importtime)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "enzcc", *args], cwd=enzcc.cwd,
                          env=enzcc.env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


def test_a_plain_compile_equals_the_drivers_and_carries_compressed_bitcode(enzcc):
    enzcc.write("c.c", CUBE)
    enzcc("-O2", "-c", "c.c", "-o", "fast.o")
    enzcc("-O2", "-c", "c.c", "-o", "slow.o", env=_slow(enzcc.env))
    fast = (enzcc.cwd / "fast.o").read_bytes()
    assert fast == (enzcc.cwd / "slow.o").read_bytes()
    [rec] = E.records_in_object(fast, "fast.o")
    subprocess.run(["clang-22", "-O2", "-c", "-Xclang", "-fembed-bitcode=all", "c.c", "-o", "clang.o"],
                   cwd=enzcc.cwd, check=True)
    assert rec.bitcode == E.elf_section((enzcc.cwd / "clang.o").read_bytes(), ".llvmbc")
    assert (rec.source, rec.lang, rec.opt) == ("c.c", "c", 2) and "compression" not in rec.extra
    payload = E.elf_section(fast, E.SECTION)
    assert b'"compression": "zlib"' in payload and len(payload) < len(rec.bitcode)
    assert not E.calls_enzyme(fast)


def test_the_fast_path_imports_neither_driver_nor_frontends(enzcc):
    enzcc.write("c.c", CUBE)
    enzcc.write("m.c", "#include <stdio.h>\ndouble cube(double);\n"
                       "int main(void) { printf(\"%g\\n\", cube(2)); return 0; }\n")
    enzcc("-O2", "-c", "c.c")
    for args in (("-O2", "-c", "m.c"), ("m.o", "c.o", "-o", "prog"), ("m.c", "c.o", "-o", "prog2"),
                 ("-E", "m.c"), ("-Wl,--version",)):
        names = _imports(enzcc, *args)
        assert "enzcc.fastpath" in names and not names & {"enzcc.driver", "enzcc.frontends", "llvmlite"}, args
    for prog in ("prog", "prog2"):
        assert subprocess.run([enzcc.cwd / prog], capture_output=True, text=True).stdout == "12\n"


@pytest.mark.parametrize("how", ["compile", "link-source", "link-objects"])
def test_enzyme_behind_a_header_macro_is_still_differentiated(enzcc, how):
    """The source never names Enzyme: the fast path sees the call in the bitcode, in the link's diagnostics or
    in its output, and hands the work to the driver: the gradient is right (not a link error, not zero)."""
    enzcc.write("grad.h", GRAD_H)
    enzcc.write("main.c", MAIN)
    enzcc.write("c.c", CUBE)
    enzcc("-O2", "-c", "c.c")
    if how == "compile":
        enzcc("-O2", "-c", "main.c")
        enzcc("main.o", "c.o", "-o", "prog")
    elif how == "link-source":
        enzcc("-O2", "main.c", "c.o", "-o", "prog")
    else:  # (the object whose bitcode calls Enzyme in a thin archive: the fast link looks into its member)
        enzcc.write("dcube.c", '#include "grad.h"\ndouble cube(double);\n'
                               "double dcube(double x) { return GRAD(cube, x); }\n")
        enzcc.write("main.c", "#include <stdio.h>\ndouble dcube(double);\n"
                              'int main(void) { printf("%.17g\\n", dcube(2.0)); return 0; }\n')
        enzcc("-O2", "-c", "main.c", "dcube.c")
        subprocess.run(["llvm-ar-22", "rcsT", "libdcube.a", "dcube.o"], cwd=enzcc.cwd, check=True)
        enzcc("main.o", "-L.", "-ldcube", "c.o", "-o", "prog")
    out = subprocess.run([enzcc.cwd / "prog"], capture_output=True, text=True, check=True).stdout
    assert float(out) == pytest.approx(EXPECTED, rel=1e-12)
    assert not any(p.name.startswith(".prog") for p in enzcc.cwd.iterdir())  # (no temporary left)


@need("llvm-ar-22")
@pytest.mark.parametrize("ar_flags", ["rcs", "rcsT"])
def test_compressed_bitcode_from_an_archive_feeds_a_differentiating_link(enzcc, ar_flags):
    """cube's bitcode travels compressed in an archive, regular or thin (``T``: meson's static libraries keep
    their members in their own files); main (naming Enzyme) differentiates it at the link."""
    enzcc.write("c.c", CUBE)
    enzcc.write("main.c", MAIN.replace('#include "grad.h"\n', GRAD_H))
    enzcc("-O2", "-c", "c.c")
    subprocess.run(["llvm-ar-22", ar_flags, "libcube.a", "c.o"], cwd=enzcc.cwd, check=True)
    enzcc("-O2", "main.c", "-L.", "-lcube", "-o", "prog")
    out = subprocess.run([enzcc.cwd / "prog"], capture_output=True, text=True, check=True).stdout
    assert float(out) == pytest.approx(EXPECTED, rel=1e-12)
    h = 1e-6  # and a central difference of the primal agrees
    assert float(out) == pytest.approx(((2 + h) ** 3 + 2 * (2 + h) - (2 - h) ** 3 - 2 * (2 - h)) / (2 * h), rel=1e-6)


def test_a_failing_fast_link_reports_like_clang_and_leaves_nothing(enzcc):
    enzcc.write("m.c", "double nowhere(double);\nint main(void) { return (int)nowhere(1.0); }\n")
    proc = enzcc("m.c", "-o", "prog", check=False)
    assert proc.returncode != 0 and "nowhere" in proc.stderr
    assert not any(p.name.startswith((".prog", "prog")) for p in enzcc.cwd.iterdir())
    enzcc.write("bad.c", "int f(void) { return nope; }\n")
    proc = enzcc("bad.c", "-o", "prog", check=False)
    assert proc.returncode == 1 and "undeclared identifier 'nope'" in proc.stderr and "Traceback" not in proc.stderr


def test_linker_and_fortran_probes_answer_as_the_underlying_compilers(enzcc):
    """meson's probes: ``-Wl,--version`` prints the linker's version; a Fortran compiler called enzcc is
    recognised as LLVM flang from ``--help`` ('flang LLVM compiler') and ``--version``."""
    ld = enzcc("-Wl,--version")
    assert ld.returncode == 0 and ("GNU ld" in ld.stdout or "LLD" in ld.stdout)
    assert "flang LLVM compiler" in enzcc("--help").stdout
    if shutil.which("flang-22"):
        assert "flang version 22" in enzcc("--lang", "fortran", "--version").stdout
        assert "OVERVIEW: flang LLVM compiler" in enzcc("--lang", "fortran", "--help").stdout
    assert "no input files" in enzcc("-O2", check=False).stderr


def test_preprocessing_passes_through_with_enzccs_headers(enzcc):
    enzcc.write("p.c", "#define TWO 2\nint two(void) { return TWO; }\n")
    assert "return 2;" in enzcc("-E", "p.c").stdout
    assert enzcc("-M", "p.c").stdout.startswith("p.o: p.c")
    assert enzcc("-fsyntax-only", "p.c").returncode == 0


def test_cxx_link_of_c_sources_compiles_them_as_c(enzcc):
    """enzcc++ with a C source on the link line compiles it as C, as the driver always did (clang++ alone would
    compile it as C++): ``new`` is a name in C."""
    enzcc.write("c.c", "int twice(int new) { return 2 * new; }\n")
    enzcc.write("m.cpp", '#include <cstdio>\nextern "C" int twice(int);\nint main() { std::printf("%d\\n", twice(21)); }\n')
    enzcc("c.c", "m.cpp", "-o", "prog", cmd="enzcc++")
    assert subprocess.run([enzcc.cwd / "prog"], capture_output=True, text=True).stdout == "42\n"
