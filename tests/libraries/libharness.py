"""Builds real C libraries' unmodified sources with a driver of ours through enzcc, and reads the drivers'
``name value`` lines. Shared by the tests in this folder and by bench/libraries.py (which has no pytest)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
COMPILE_TIMEOUT_S = 600


@dataclass(frozen=True)
class Library:
    """How one library is built: its sources and include folders (relative to the fetched source folder), our
    driver (in this folder), and the preprocessor definitions it needs."""
    name: str
    driver: str
    sources: tuple[str, ...]
    includes: tuple[str, ...] = (".",)
    defines: tuple[str, ...] = ()
    args: tuple[str, ...] = field(default=())  # the driver's arguments in check mode ({src}: the source folder)
    setup: str = ""  # a function of this module that makes generated include folders in the build folder


def _gsl_sources() -> tuple[str, ...]:
    """The GSL sources the GSL driver links (found by resolving its symbols): the ODE driver and two steppers,
    three special functions and what they call, LU with GSL's own CBLAS (blas.c wraps 107 of its routines)."""
    cblas = """caxpy ccopy cdotc_sub cdotu_sub cgemm cgemv cgerc cgeru chemm chemv cher cher2 cher2k cherk cscal
        csscal cswap csymm csyr2k csyrk ctrmm ctrmv ctrsm ctrsv dasum daxpy dcopy ddot dgemm dgemv dger dnrm2 drot
        drotg drotm drotmg dscal dsdot dswap dsymm dsymv dsyr dsyr2 dsyr2k dsyrk dtrmm dtrmv dtrsm dtrsv dzasum
        dznrm2 icamax idamax isamax izamax sasum saxpy scasum scnrm2 scopy sdot sdsdot sgemm sgemv sger snrm2 srot
        srotg srotm srotmg sscal sswap ssymm ssymv ssyr ssyr2 ssyr2k ssyrk strmm strmv strsm strsv xerbla zaxpy
        zcopy zdotc_sub zdotu_sub zdscal zgemm zgemv zgerc zgeru zhemm zhemv zher zher2 zher2k zherk zscal zswap
        zsymm zsyr2k zsyrk ztrmm ztrmv ztrsm ztrsv""".split()
    rest = """blas/blas block/init complex/inline complex/math err/error err/stream linalg/invtri linalg/lu
        linalg/trimult matrix/copy matrix/matrix matrix/rowcol matrix/submatrix matrix/view ode-initval2/control
        ode-initval2/cscal ode-initval2/cstd ode-initval2/driver ode-initval2/evolve ode-initval2/rk8pd
        ode-initval2/rkf45 ode-initval2/step permutation/init permutation/permute specfunc/bessel
        specfunc/bessel_J0 specfunc/bessel_J1 specfunc/bessel_amp_phase specfunc/bessel_temme specfunc/elementary
        specfunc/erfc specfunc/exp specfunc/gamma specfunc/log specfunc/poch specfunc/pow_int specfunc/psi
        specfunc/trig specfunc/zeta sys/coerce sys/fdiv sys/infnan sys/minmax vector/copy vector/init
        vector/subvector vector/vector vector/view""".split()
    return tuple(f"{s}.c" for s in rest) + tuple(f"cblas/{s}.c" for s in cblas)


def gsl_includes(src: Path, out_dir: Path) -> list[str]:
    """GSL's sources include ``<gsl/gsl_*.h>`` (its ``make`` links each folder's public headers into gsl/) and
    ``<config.h>`` (tests/libraries/gsl/config.h: what its configure writes on x86-64 Linux). The headers are
    copied into the build folder (a fresh name renamed into place: parallel builds never see half of it)."""
    import shutil
    import tempfile

    dest = out_dir / f"gsl-include-{hashlib.sha256(str(src).encode()).hexdigest()[:8]}"
    if not dest.is_dir():
        tmp = Path(tempfile.mkdtemp(dir=out_dir, prefix=".part-"))
        (tmp / "gsl").mkdir()
        for h in sorted([*src.glob("gsl_*.h"), *src.glob("*/gsl_*.h")]):
            shutil.copyfile(h, tmp / "gsl" / h.name)
        try:
            os.rename(tmp, dest)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return [f"-I{dest}", f"-I{HERE / 'gsl'}", f"-I{src}"]


LIBRARIES = {
    "liblbfgs": Library("liblbfgs", "lbfgs_driver.c", ("lib/lbfgs.c",), ("include",)),
    "cminpack": Library("cminpack", "cminpack_driver.c",
                        ("examples/ssqfcn.c", "examples/ssqjac.c", "examples/ssqipt.c", "lmder1.c", "lmder.c",
                         "lmpar.c", "qrfac.c", "qrsolv.c", "enorm.c", "dpmpar.c"),
                        (".", "examples"), (), ("check", "{src}/examples/testdata/ssq.data")),
    "kissfft": Library("kissfft", "kissfft_driver.c", ("kiss_fft.c", "kiss_fftr.c"), (".",),
                       ("kiss_fft_scalar=double",)),
    "tinyexpr": Library("tinyexpr", "tinyexpr_driver.c", ("tinyexpr.c",)),
    "gsl": Library("gsl", "gsl_driver.c", _gsl_sources(), (), setup="gsl_includes"),
}


class SkipRow(Exception):
    """A benchmark row that cannot be measured here (a driver missing from this checkout, a build that does not
    finish); the message says why."""


class BuildError(Exception):
    """enzcc refused or failed; ``stderr`` holds its message."""

    def __init__(self, cmd: list[str], proc: subprocess.CompletedProcess, out: Path):
        super().__init__(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        self.returncode = proc.returncode
        self.stderr = proc.stderr
        self.out = out  # the output enzcc was asked for


def enzcc_command() -> list[str]:
    """This checkout's enzcc, run by this Python."""
    return [sys.executable, "-m", "enzcc"]


def compile_command(lib: Library, src: Path, opt: str, out: Path, extra: tuple[str, ...] = ()) -> list[str]:
    cmd = [*enzcc_command(), opt, "-w", f"-I{HERE}"]
    cmd += [f"-I{src / inc}" for inc in lib.includes]
    cmd += [f"-D{d}" for d in lib.defines]
    cmd += [*extra, str(HERE / lib.driver), *(str(src / s) for s in lib.sources), "-lm", "-o", str(out)]
    return cmd


def build(lib: Library, src: Path, opt: str, out_dir: Path, extra: tuple[str, ...] = (),
          env: dict | None = None) -> Path:
    """The driver and the library's sources compiled by enzcc at ``opt`` into ``out_dir``; raises BuildError
    with enzcc's message when it refuses."""
    key = hashlib.sha256(repr((lib, str(src), opt, extra)).encode()).hexdigest()[:12]
    out = out_dir / f"{lib.name}{opt}-{key}"
    if lib.setup:
        extra = (*globals()[lib.setup](src, out_dir), *extra)
    cmd = compile_command(lib, src, opt, out, extra)
    run_env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **(env or {})}
    proc = subprocess.run(cmd, cwd=out_dir, env=run_env, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    if proc.returncode != 0:
        raise BuildError(cmd, proc, out)
    return out


def check_args(lib: Library, src: Path) -> list[str]:
    """The driver's arguments in check mode."""
    return [a.format(src=src) for a in lib.args]


def values(text: str) -> dict[str, float]:
    """The ``name value`` lines of a driver's output."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return out


def run(exe: Path, *args: str, env: dict | None = None, timeout: float = 300) -> dict[str, float]:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise AssertionError(f"{exe.name} {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return values(proc.stdout)
