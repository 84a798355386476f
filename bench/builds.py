"""Compile-time benchmarks: enzcc against clang-22 on the same work, interleaved round by round.

* ``calls``: single calls on small files (``-c``, ``-E``, ``--version``, ``-Wl,--version``, a configure probe, a
  link of objects), CPU time, clang and enzcc alternating call by call: enzcc's cost per call.
* ``files``: a generated project of 100 C files (no AD), each compiled with ``-O2 -c`` two at a time, then
  linked: the drop-in build (``CC=enzcc``) against clang's.
* ``lua``: Lua 5.4 built with its own makefile (``make -j2 CC=...``); the source comes from the ``lupa``
  source distribution on PyPI (skipped, with the reason, when it cannot be downloaded).
* ``zlib``: zlib-ng in zlib-compatible mode (``CC=... ./configure --zlib-compat``, untimed, then a timed
  ``make -j2``: static and shared library and its test programs), from the ``zlib-ng`` source distribution on
  PyPI (skipped likewise).
* ``kissfft``, ``cminpack`` (CMake: configure and build), ``liblbfgs`` (autotools: ``./configure`` and ``make
  -j2``; ``autogen.sh`` untimed), ``tinyexpr`` (its one file and a program using it): the real-library suite's
  pinned sources (``tests/libraries/sources.py``: Debian orig tarballs, a PyPI source distribution), skipped with
  the reason when they cannot be had. The projects' archives (``*.a``) are weighed too: enzcc's carry the
  bitcode.
  Projects are timed by wall clock and by CPU time (user + system of every process of the build, which a loaded
  machine disturbs less).
* ``nstmt``: one differentiated function of N generated straight-line statements (math calls, three
  variables), ``enzcc -O2 -c`` (AD included) against ``clang-22 -O2 -c`` of the same file, with peak memory.
* ``suite``: each ``bench/`` objective, ``enzcc -O2 -c`` (AD included) against ``clang-22 -O2 -c``.

    python3 -m bench.builds [--quick] [--only files,lua,zlib,kissfft,cminpack,liblbfgs,tinyexpr,nstmt,suite]
                            [--rounds N] [--out FILE]

Writes ``bench/results/builds.json`` (``builds-quick.json`` with ``--quick``) and prints a table. The enzcc
used is the script installed next to this Python (not a shim in front of it): ``make setup``'s launcher
(enzcc/launcher.py), which starts Python without ``site``. The time of a bare start of this Python, with and
without ``site``, is recorded, since every enzcc invocation pays one of them. Every build runs with enzcc's
modules byte-compiled (``PYTHONPYCACHEPREFIX`` under the build directory, ``PYTHONDONTWRITEBYTECODE`` unset), as
after ``make setup``: without, each call compiles them from source again.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __package__ in (None, ""):
    sys.path.insert(0, str(HERE.parent))
from bench import gen  # noqa: E402

CLANG = "clang-22"
LUA_SDIST = "lupa==2.8"
LUA_FLAGS = ["MYCFLAGS=-std=c99 -DLUA_USE_LINUX", "MYLIBS=-ldl"]
#: the zlib-ng 1.1.0 source distribution on PyPI (pip refuses to download it: its metadata says version 0.0.0)
ZLIB_SDIST = ("https://files.pythonhosted.org/packages/25/c8/"
              "2914b13c7972dccf8774947ffe781b761b483aa190e55a4aa89886982daa/zlib_ng-1.1.0.tar.gz")
SIZES = {"full": {"files": 100, "nstmt": [1000, 4000, 16000], "rounds": 3},
         "quick": {"files": 12, "nstmt": [100, 300], "rounds": 1}}

# statements of the generated differentiated function: each updates one of three variables from the others
OPS = ["{d} += 0.1 * sin({a} * {b});", "{d} = 0.95 * {d} + 0.1 * cos({a});", "{d} += 0.05 * tanh({a} - {b});",
       "{d} += 0.02 * {a} * {b};", "{d} += 0.1 * exp(-{a} * {a});", "{d} += 0.05 * sqrt(1.0 + {b} * {b});"]


def nstmt_source(n: int, seed: int = 1) -> str:
    r = random.Random(seed)
    body = "\n".join("  " + r.choice(OPS).format(d=r.choice("abc"), a=r.choice("abc"), b=r.choice("abc"))
                     for _ in range(n))
    return ("#include <math.h>\n#include <stdio.h>\ntypedef struct { double x, y, z; } g3;\n"
            "g3 __enzyme_autodiff(void *, ...);\n"
            f"double f(double x, double y, double z) {{\n  double a = x, b = y, c = z;\n{body}\n"
            "  return a + 2 * b + 3 * c;\n}\n"
            "int main(void) { g3 g = __enzyme_autodiff((void *)f, 0.3, -0.2, 0.5);\n"
            "  printf(\"%g %g %g\\n\", g.x, g.y, g.z); return 0; }\n")


def project_file(i: int, n: int) -> str:
    """One file of the generated project: a few functions with loops, structs and calls into the next file."""
    nxt = (i + 1) % n
    return f"""#include <math.h>
#include <stdlib.h>
#include <string.h>
typedef struct {{ double *v; int n; double scale; }} vec{i};
double f{nxt}(const double *x, int n);
static double norm{i}(const vec{i} *a) {{
  double s = 0;
  for (int k = 0; k < a->n; k++) s += a->v[k] * a->v[k];
  return sqrt(s) * a->scale;
}}
static void smooth{i}(double *y, const double *x, int n) {{
  for (int k = 1; k + 1 < n; k++) y[k] = 0.25 * x[k - 1] + 0.5 * x[k] + 0.25 * x[k + 1];
  if (n > 1) {{ y[0] = x[0]; y[n - 1] = x[n - 1]; }}
}}
int cmp{i}(const void *a, const void *b) {{
  double d = *(const double *)a - *(const double *)b;
  return (d > 0) - (d < 0);
}}
double f{i}(const double *x, int n) {{
  if (n <= 0) return 0;
  double *y = malloc(sizeof(double) * n);
  smooth{i}(y, x, n);
  qsort(y, n, sizeof(double), cmp{i});
  vec{i} v = {{y, n, 1.0 + {i} * 0.001}};
  double r = norm{i}(&v);
  for (int k = 0; k < n; k++) r += sin(y[k]) * cos(y[k] * {i % 7 + 1}) / (1.0 + fabs(y[k]));
  free(y);
  return {"0" if nxt == 0 else f"r + 1e-3 * f{nxt}(x, n - 1)"};
}}
"""


PROJECT_MAIN = ("#include <stdio.h>\ndouble f0(const double *x, int n);\n"
                "int main(void) { double x[8] = {1, 2, 3, 4, 5, 6, 7, 8}; printf(\"%.6f\\n\", f0(x, 8)); return 0; }\n")


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, capture_output=True)
    return time.perf_counter() - start


def run_with_peak(cmd: list[str], cwd: Path) -> tuple[float, int, subprocess.CompletedProcess]:
    """(wall seconds, peak resident KB, result); the peak is the child's own (``wait4``). Its output goes to
    temporary files, so that neither pipe can fill up while the child runs."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return wall, usage.ru_maxrss, subprocess.CompletedProcess(cmd, proc.returncode,
                                                                 out.read().decode(errors="replace"),
                                                                 err.read().decode(errors="replace"))


# ---------------------------------------------------------------------------------------------
# the projects


def build_files(cc: str, src: Path, out: Path, jobs: int) -> tuple[float, str]:
    """Compile every file of the generated project with ``cc -O2 -c`` (``jobs`` at a time) and link."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    files = sorted(src.glob("*.c"))
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda f: subprocess.run([cc, "-O2", "-c", str(f), "-o", str(out / (f.stem + ".o"))],
                                                         capture_output=True, text=True), files))
    bad = [r for r in results if r.returncode]
    if bad:
        return time.perf_counter() - start, bad[0].stderr.strip()[-500:]
    link = subprocess.run([cc, *sorted(str(p) for p in out.glob("*.o")), "-lm", "-o", str(out / "prog")],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if link.returncode:
        return wall, link.stderr.strip()[-500:]
    run = subprocess.run([str(out / "prog")], capture_output=True, text=True)
    return wall, "" if run.returncode == 0 else f"the program failed: {run.stderr.strip()[-300:]}"


def _is_launcher(path: str) -> bool:
    """Whether ``path`` is enzcc's launcher (which starts Python without ``site``), not pip's entry script."""
    try:
        with open(path, errors="replace") as fh:
            return fh.readline().rstrip().endswith(" -S")
    except OSError:
        return False


def fetch_lua(data: Path) -> tuple[Path | None, str]:
    """Lua 5.4's sources (with its makefile) from the lupa source distribution, cached under ``data``."""
    target = data / "lua54"
    if (target / "makefile").is_file():
        return target, ""
    data.mkdir(parents=True, exist_ok=True)
    dl = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-build-isolation",
                         "--no-binary", ":all:", "-d", str(data), LUA_SDIST], capture_output=True, text=True)
    tars = sorted(data.glob("lupa-*.tar.gz"))
    if dl.returncode or not tars:
        return None, f"cannot download {LUA_SDIST} from PyPI: {(dl.stderr.strip().splitlines() or ['?'])[-1]}"
    prefix = None
    with tarfile.open(tars[-1]) as tf:
        members = [m for m in tf.getmembers() if "/third-party/lua54/" in m.name and m.isfile()]
        for m in members:
            prefix = m.name.split("/third-party/lua54/")[0] + "/third-party/lua54/"
            m.name = m.name[len(prefix):]
            tf.extract(m, target)
    if not (target / "makefile").is_file():
        return None, f"{tars[-1].name} has no third-party/lua54/makefile"
    return target, ""


def fetch_zlib(data: Path) -> tuple[Path | None, str]:
    """zlib-ng's sources (configure + Makefile) from its source distribution on PyPI, cached under ``data``."""
    import urllib.request

    target = data / "zlib-ng"
    if (target / "configure").is_file():
        return target, ""
    data.mkdir(parents=True, exist_ok=True)
    tar = data / ZLIB_SDIST.rsplit("/", 1)[1]
    try:
        with urllib.request.urlopen(ZLIB_SDIST, timeout=120) as r:
            tar.write_bytes(r.read())
    except Exception as exc:  # (no network)
        return None, f"cannot download the zlib-ng source distribution: {exc}"
    with tarfile.open(tar) as tf:
        for m in tf.getmembers():
            if "/zlib-ng/" in m.name and m.isfile():
                m.name = m.name.split("/zlib-ng/", 1)[1]
                tf.extract(m, target)
    if not (target / "configure").is_file():
        return None, f"{tar.name} has no zlib-ng/configure"
    return target, ""


def build_zlib(cc: str, src: Path, out: Path, jobs: int) -> tuple[float, str]:
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    conf = subprocess.run(["sh", "./configure", "--zlib-compat"], cwd=out, env={**os.environ, "CC": cc},
                          capture_output=True, text=True)
    if conf.returncode:
        return 0.0, f"configure failed: {(conf.stdout + conf.stderr).strip()[-400:]}"
    start = time.perf_counter()
    r = subprocess.run(["make", "-s", f"-j{jobs}"], cwd=out, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if r.returncode:
        return wall, (r.stderr.strip() or r.stdout.strip())[-500:]
    run = subprocess.run(f"echo enzcc | {out / 'minigzip'} | {out / 'minigzip'} -d", shell=True,
                         capture_output=True, text=True)
    return wall, "" if run.stdout.strip() == "enzcc" else f"minigzip round trip gave {run.stdout!r}"


def build_lua(cc: str, src: Path, out: Path, jobs: int) -> tuple[float, str]:
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    start = time.perf_counter()
    r = subprocess.run(["make", "-s", f"-j{jobs}", f"CC={cc}", *LUA_FLAGS, "all"], cwd=out, capture_output=True,
                       text=True)
    wall = time.perf_counter() - start
    if r.returncode:
        return wall, (r.stderr.strip() or r.stdout.strip())[-500:]
    run = subprocess.run([str(out / "lua"), "-e", "print(string.format('%.3f', math.sin(1)))"],
                         capture_output=True, text=True)
    return wall, "" if run.stdout.strip() == "0.841" else f"lua printed {run.stdout!r}"


def archive_bytes(out: Path) -> tuple[int, int]:
    """The sizes of the project's static libraries and of its objects (with enzcc, objects carry bitcode)."""
    return tuple(sum(p.stat().st_size for p in out.rglob(pattern) if p.is_file()) for pattern in ("*.a", "*.o"))


def _steps(steps: list[tuple[list[str], Path, dict | None]]) -> tuple[float, str]:
    """Run the commands one after the other, timed together; the first failure's message."""
    start = time.perf_counter()
    for cmd, cwd, env in steps:
        r = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
        if r.returncode:
            return time.perf_counter() - start, f"{' '.join(cmd[:3])}: {(r.stderr.strip() or r.stdout.strip())[-400:]}"
    return time.perf_counter() - start, ""


def fetch_library(name: str) -> tuple[Path | None, str]:
    """A pinned source of the real-library suite (tests/libraries/sources.py), downloaded once."""
    sys.path.insert(0, str(HERE.parent / "tests" / "libraries"))
    try:
        import sources
    finally:
        sys.path.pop(0)
    try:
        return sources.fetch(name), ""
    except sources.SourceUnavailable as exc:
        return None, str(exc)


def build_cmake(cc: str, src: Path, out: Path, jobs: int, options: list[str]) -> tuple[float, str]:
    """``cmake`` (configure, with its compiler probes) and ``cmake --build -j``, timed together."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return _steps([(["cmake", "-S", str(src), "-B", str(out), "-G", "Unix Makefiles", f"-DCMAKE_C_COMPILER={cc}",
                     "-DCMAKE_BUILD_TYPE=Release", *options], out, None),
                   (["cmake", "--build", str(out), "-j", str(jobs)], out, None)])


def prepare_liblbfgs(src: Path, data: Path) -> tuple[Path | None, str]:
    """liblbfgs's orig tarball has no ``configure``: ``autogen.sh`` once (untimed), cached under ``data``."""
    target = data / "liblbfgs-autogen"
    if (target / "configure").is_file():
        return target, ""
    if not shutil.which("libtoolize") or not shutil.which("automake"):
        return None, "autotools (libtoolize, automake) are not installed"
    tmp = data / "liblbfgs-autogen.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    r = subprocess.run(["sh", "./autogen.sh"], cwd=tmp, capture_output=True, text=True)
    if r.returncode or not (tmp / "configure").is_file():
        return None, f"liblbfgs's autogen.sh failed: {(r.stderr.strip() or r.stdout.strip())[-300:]}"
    tmp.rename(target)
    return target, ""


def build_liblbfgs(cc: str, src: Path, out: Path, jobs: int) -> tuple[float, str]:
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    wall, err = _steps([(["sh", "./configure", f"CC={cc}", "--disable-shared"], out, None),
                        (["make", "-s", f"-j{jobs}"], out, None)])
    if err:
        return wall, err
    run = subprocess.run([str(out / "sample" / "sample")], capture_output=True, text=True)
    return wall, "" if "L-BFGS optimization terminated with status code = 0" in run.stdout else \
        f"sample printed {run.stdout[-200:]!r}"


TINYEXPR_MAIN = ('#include <stdio.h>\n#include "tinyexpr.h"\n'
                 'int main(void) { printf("%g\\n", te_interp("sqrt(5^2+7^2+11^2+(8-2)^2)", 0)); return 0; }\n')


def build_tinyexpr(cc: str, src: Path, out: Path, jobs: int) -> tuple[float, str]:
    """tinyexpr.c compiled and a program using it linked (the project's own build is these two commands)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "main.c").write_text(TINYEXPR_MAIN)
    wall, err = _steps([([cc, "-O2", "-c", str(src / "tinyexpr.c"), "-o", "tinyexpr.o"], out, None),
                        ([cc, "-O2", "-c", f"-I{src}", "main.c", "-o", "main.o"], out, None),
                        ([cc, "main.o", "tinyexpr.o", "-lm", "-o", "prog"], out, None)])
    if err:
        return wall, err
    run = subprocess.run([str(out / "prog")], capture_output=True, text=True)
    return wall, "" if run.stdout.strip() == "15.1987" else f"tinyexpr printed {run.stdout!r}"


CALL_FILES = {"small.c": "#include <math.h>\nstatic double sq(double x) { return x * x; }\n"
                          "double g(double x) { return sin(sq(x)); }\n",
              "main.c": "#include <stdio.h>\ndouble g(double);\nint main(void) { printf(\"%g\\n\", g(1)); return 0; }\n",
              "conftest.c": "int main(void) { return 0; }\n"}
CALLS = [("-O2 -c f5.c (a file of the 101-file project)", ["-O2", "-c", "f5.c", "-o", "f5.o"]),
         ("-O2 -c small.c", ["-O2", "-c", "small.c", "-o", "small.o"]),
         ("-E small.c", ["-E", "small.c", "-o", "small.i"]),
         ("--version", ["--version"]),
         ("-Wl,--version (meson's linker probe)", ["-Wl,--version"]),
         ("conftest.c -o conftest (a configure probe)", ["conftest.c", "-o", "conftest"]),
         ("main.o small.o -lm -o prog", ["main.o", "small.o", "-lm", "-o", "prog"])]


def measure_calls(compilers: dict[str, str], work: Path, rounds: int) -> list[dict]:
    """CPU time (user + system of the call and its children) of single calls on small files, the compilers
    alternating call by call; medians in ms."""
    dirs = {}
    for tag, cc in compilers.items():
        d = dirs[tag] = work / f"calls-{tag}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        for name, text in {**CALL_FILES, "f5.c": project_file(5, 101)}.items():
            (d / name).write_text(text)
        for src in ("main.c", "small.c"):
            subprocess.run([cc, "-O2", "-c", src], cwd=d, capture_output=True)
    cpu = {(what, tag): [] for what, _ in CALLS for tag in compilers}
    for _ in range(rounds):
        for what, args in CALLS:
            for tag, cc in compilers.items():
                proc = subprocess.Popen([cc, *args], cwd=dirs[tag], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                _, _, usage = os.wait4(proc.pid, 0)
                cpu[(what, tag)].append((usage.ru_utime + usage.ru_stime) * 1000)
    return [{"call": what, **{f"{tag}_cpu_ms": round(statistics.median(cpu[(what, tag)]), 1) for tag in compilers}}
            for what, _ in CALLS]


LIBRARY_BUILDS = {
    "kissfft": ("kissfft 131.1 (cmake)", lambda cc, src, out, jobs: build_cmake(
        cc, src, out, jobs, ["-DKISSFFT_TEST=OFF", "-DKISSFFT_TOOLS=OFF", "-DKISSFFT_PKGCONFIG=OFF",
                             "-DKISSFFT_STATIC=ON"])),
    "cminpack": ("cminpack 1.3.6 (cmake)", lambda cc, src, out, jobs: build_cmake(
        cc, src, out, jobs, ["-DUSE_BLAS=OFF", "-DBUILD_SHARED_LIBS=OFF"])),
    "liblbfgs": ("liblbfgs 1.10 (configure + make)", build_liblbfgs),
    "tinyexpr": ("tinyexpr (tinex 0.3.1)", build_tinyexpr),
}


# ---------------------------------------------------------------------------------------------


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.builds", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one round (for the tests)")
    ap.add_argument("--only", default="", help="comma-separated: calls, files, lua, zlib, kissfft, cminpack, "
                                               "liblbfgs, tinyexpr, nstmt, suite (default: all)")
    ap.add_argument("--rounds", type=int, default=None, help="alternating rounds of clang and enzcc")
    ap.add_argument("--jobs", type=int, default=2, help="parallel compiles in project builds (default 2)")
    ap.add_argument("--enzcc", default=None, help="the enzcc to measure (default: the one installed with this "
                                                   "Python)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--build-dir", type=Path, default=HERE / "build" / "builds", help="sources and objects")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    mode = "quick" if args.quick else "full"
    sizes = SIZES[mode]
    rounds = args.rounds or sizes["rounds"]
    only = [x for x in args.only.split(",") if x] or ["calls", "files", "lua", "zlib", *LIBRARY_BUILDS, "nstmt",
                                                      "suite"]
    beside = Path(sys.executable).parent / "enzcc"
    enzcc = args.enzcc or (str(beside) if beside.is_file() else shutil.which("enzcc") or "enzcc")
    if shutil.which(CLANG) is None:
        console.print(f"[red]{CLANG} not found[/]")
        return 1
    work = args.build_dir.resolve()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # (byte-compiled modules, as after make setup)
    os.environ["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    data = HERE / "data" / "sources"
    out = args.out or HERE / "results" / ("builds-quick.json" if args.quick else "builds.json")
    starts = [timed([sys.executable, "-c", "pass"], HERE) for _ in range(5)]
    starts_s = [timed([sys.executable, "-S", "-c", "pass"], HERE) for _ in range(5)]
    results: dict = {"suite": "enzcc compile-time benchmarks", "mode": mode, "rounds": rounds, "jobs": args.jobs,
                     "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                 "loadavg_at_start": list(os.getloadavg())},
                     "enzcc": enzcc, "clang": CLANG, "python_start_s": round(statistics.median(starts), 4),
                     "python_start_without_site_s": round(statistics.median(starts_s), 4),
                     "enzcc_launcher": _is_launcher(enzcc),
                     "projects": [], "nstmt": [], "objectives": [], "skipped": {}}

    if "calls" in only:  # (first: single calls, interleaved among themselves, 5 times the rounds)
        results["calls"] = measure_calls({"clang": CLANG, "enzcc": enzcc}, work, 5 * rounds)
    tasks = []
    dirs: dict[str, str] = {}  # project -> its build directory's prefix (work / f"{prefix}-{tag}")
    if "files" in only:
        src = work / "files-src"
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        n = sizes["files"]
        for i in range(n):
            (src / f"f{i}.c").write_text(project_file(i, n))
        (src / "main.c").write_text(PROJECT_MAIN)
        dirs[f"files ({n + 1} C files)"] = "files"
        tasks.append(("project", f"files ({n + 1} C files)",
                      lambda cc, tag: build_files(cc, src, work / f"files-{tag}", args.jobs)))
    if "lua" in only:
        lua, why = fetch_lua(data)
        if lua is None:
            results["skipped"]["lua"] = why
        else:
            dirs["lua 5.4 (make)"] = "lua"
            tasks.append(("project", "lua 5.4 (make)", lambda cc, tag: build_lua(cc, lua, work / f"lua-{tag}",
                                                                                args.jobs)))
    if "zlib" in only:
        zsrc, why = fetch_zlib(data)
        if zsrc is None:
            results["skipped"]["zlib"] = why
        else:
            dirs["zlib-ng 1.1 (configure; timed: make)"] = "zlib"
            tasks.append(("project", "zlib-ng 1.1 (configure; timed: make)",
                          lambda cc, tag: build_zlib(cc, zsrc, work / f"zlib-{tag}", args.jobs)))
    for lib, (title, builder) in LIBRARY_BUILDS.items():
        if lib not in only:
            continue
        lsrc, why = fetch_library(lib)
        if lsrc is not None and lib == "liblbfgs":
            lsrc, why = prepare_liblbfgs(lsrc, data)
        if lsrc is None:
            results["skipped"][lib] = why
            continue
        dirs[title] = lib
        tasks.append(("project", title, lambda cc, tag, lib=lib, lsrc=lsrc, builder=builder:
                      builder(cc, lsrc, work / f"{lib}-{tag}", args.jobs)))
    nst_dir = work / "nstmt"
    if "nstmt" in only:
        nst_dir.mkdir(parents=True, exist_ok=True)
        for n in sizes["nstmt"]:
            (nst_dir / f"n{n}.c").write_text(nstmt_source(n))
            tasks.append(("nstmt", n, None))
    if "suite" in only:
        for name in gen.BENCHMARKS:
            if name not in gen.VARIANTS:
                tasks.append(("suite", name, None))

    samples: dict = {}
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("compiling", total=len(tasks) * rounds * 2)
        for r in range(rounds):
            for kind, name, builder in tasks:
                for tag, cc in (("clang", CLANG), ("enzcc", enzcc)):
                    progress.update(bar, description=f"round {r + 1}/{rounds}: {name} with {tag}")
                    if kind == "project":
                        before = resource.getrusage(resource.RUSAGE_CHILDREN)
                        wall, err = builder(cc, tag)
                        after = resource.getrusage(resource.RUSAGE_CHILDREN)
                        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                        peak = archive_bytes(work / f"{dirs[name]}-{tag}")  # (for projects: the bytes)
                    else:
                        src = nst_dir / f"n{name}.c" if kind == "nstmt" else HERE / f"{name}.c"
                        cmd = [cc, "-O2", "-c", str(src), "-o", str(work / f"{kind}-{name}-{tag}.o"),
                               *(["--no-cache"] if tag == "enzcc" else [])]  # (measure the work, every round)
                        wall, peak, proc = run_with_peak(cmd, work)
                        cpu = None
                        err = "" if proc.returncode == 0 else proc.stderr.strip()[-500:]
                    s = samples.setdefault((kind, name, tag), {"wall": [], "cpu": [], "peak": [], "error": ""})
                    s["wall"].append(wall)
                    s["cpu"].append(cpu)
                    s["peak"].append(peak)
                    s["error"] = s["error"] or err
                    progress.advance(bar)

    ok = True
    for kind, name, _ in tasks:
        c, e = samples[(kind, name, "clang")], samples[(kind, name, "enzcc")]
        row = {"name": name, "clang_s": round(statistics.median(c["wall"]), 3),
               "enzcc_s": round(statistics.median(e["wall"]), 3), "samples": {"clang": c["wall"], "enzcc": e["wall"]}}
        row["ratio"] = ratio(row["enzcc_s"], row["clang_s"])
        if kind == "project":
            (ca, co), (ea, eo) = c["peak"][-1], e["peak"][-1]
            row.update(clang_cpu_s=round(statistics.median(c["cpu"]), 3),
                       enzcc_cpu_s=round(statistics.median(e["cpu"]), 3),
                       cpu_samples={"clang": c["cpu"], "enzcc": e["cpu"]})
            row["cpu_ratio"] = ratio(row["enzcc_cpu_s"], row["clang_cpu_s"])
            row.update(clang_archive_bytes=ca, enzcc_archive_bytes=ea, clang_object_bytes=co, enzcc_object_bytes=eo,
                       archive_ratio=ratio(ea, ca), object_ratio=ratio(eo, co))
        else:
            row["clang_peak_mb"] = round(max(c["peak"]) / 1024, 1)
            row["enzcc_peak_mb"] = round(max(e["peak"]) / 1024, 1)
            row["memory_ratio"] = ratio(row["enzcc_peak_mb"], row["clang_peak_mb"])
        if c["error"] or e["error"]:
            row["error"] = e["error"] or c["error"]
            ok = False
        results[{"project": "projects", "suite": "objectives"}.get(kind, kind)].append(row)
    results["machine"]["loadavg_at_end"] = list(os.getloadavg())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")

    table = Table(title=f"compile time, median of {rounds} interleaved round(s) (seconds)")
    for col in ("what", "clang-22", "enzcc", "enzcc/clang", "CPU enzcc/clang", "peak MB clang", "peak MB enzcc",
                "memory ratio", "archives (objects) enzcc/clang"):
        table.add_column(col, justify="left" if col == "what" else "right")
    for group, label in (("projects", "drop-in build, no AD: "), ("nstmt", "N statements, AD: N="),
                         ("objectives", "bench objective, AD: ")):
        for row in results[group]:
            table.add_row(f"{label}{row['name']}" + (" [red](failed)[/]" if row.get("error") else ""),
                          f"{row['clang_s']:.2f}", f"{row['enzcc_s']:.2f}", f"{row['ratio']}x",
                          f"{row['cpu_ratio']}x" if row.get("cpu_ratio") else "",
                          str(row.get("clang_peak_mb", "")), str(row.get("enzcc_peak_mb", "")),
                          f"{row['memory_ratio']}x" if row.get("memory_ratio") else "",
                          f"{row.get('archive_ratio') or '-'}x ({row.get('object_ratio') or '-'}x)"
                          if group == "projects" else "")
    console.print(table)
    if results.get("calls"):
        calls = Table(title="single calls, CPU ms (user + system, children included), median")
        for col in ("call", "clang-22", "enzcc", "enzcc - clang"):
            calls.add_column(col, justify="left" if col == "call" else "right")
        for row in results["calls"]:
            calls.add_row(row["call"], f"{row['clang_cpu_ms']:.1f}", f"{row['enzcc_cpu_ms']:.1f}",
                          f"{row['enzcc_cpu_ms'] - row['clang_cpu_ms']:+.1f}")
        console.print(calls)
    for what, why in results["skipped"].items():
        console.print(f"skipped {what}: {why}")
    for group in ("projects", "nstmt", "objectives"):
        for row in results[group]:
            if row.get("error"):
                console.print(f"[red]{row['name']}: {row['error']}[/]")
    console.print(f"a bare start of {sys.executable} takes {results['python_start_s']} s, "
                  f"{results['python_start_without_site_s']} s without site (the enzcc measured "
                  f"{'starts so' if results['enzcc_launcher'] else 'is not the launcher that starts so'}); "
                  f"results written to {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
