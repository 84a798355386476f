"""Real C libraries: the primal and the gradient of each library's driver (tests/libraries/*_driver.c), built by
enzcc at -O2 from the library's unmodified sources, fetched from the package registries at run time
(tests/libraries/sources.py: pinned versions and hashes, cached outside the repository).

    python3 -m bench.libraries [--quick] [--only liblbfgs,cminpack,kissfft,tinyexpr,gsl,rebound] [--rounds N]
                               [--min-time S] [--rebound-steps N] [--out FILE]        (make bench-libraries)

Each driver's "bench" mode samples the primal and the gradient in alternating rounds (tests/libraries/
bench_timer.h: a sample is the mean time per call of as many back-to-back calls as fill --min-time; the
medians over --rounds), so load from elsewhere on the machine falls on both alike. Before timing, the driver's
check mode is run and its gradient errors recorded. REBOUND's row uses tests/libraries/rebound_driver.c (the
leapfrog steps of a star and two planets; its own interleaved timing, the fastest round). A library whose
source cannot be had, or that enzcc refuses, gets a row with the reason. Writes bench/results/libraries.json
(libraries-quick.json with --quick); exits 1 when a build or run fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.run import _cpu_model, _git_describe, fmt_x  # noqa: E402
from bench.run import fmt_time as _fmt_time  # noqa: E402
from tests.libraries import libharness, sources  # noqa: E402

LIBS = ("liblbfgs", "cminpack", "kissfft", "tinyexpr", "gsl", "rebound")

#: the table's short name of each row's primal
SHORT = {"liblbfgs": "Rosenbrock, n = 100", "cminpack": "ssqfcn #18, 65 x 11 (VJP)",
         "kissfft": "kiss_fftr n = 256, plan inside", "tinyexpr": "te_eval, 12 functions",
         "gsl": "LU solve + ddot, n = 5",
         "rebound": "leapfrog, 3 bodies, {steps} steps"}

#: what each driver's bench mode times (primal; gradient)
TIMED = {
    "liblbfgs": ("extended Rosenbrock, n = 100 (the L-BFGS objective)", "reverse gradient"),
    "cminpack": ("ssqfcn, problem 18 (Osborne 2, m = 65, n = 11)", "reverse sweep (a vector-Jacobian product)"),
    "kissfft": ("weighted power spectrum of kiss_fftr, n = 256, plan made inside", "reverse gradient"),
    "tinyexpr": ("te_eval of a 12-function expression, 3 variables", "reverse gradient (shadow tree)"),
    "gsl": ("c . A^-1 b by gsl_linalg_LU_decomp, LU_solve, gsl_blas_ddot, n = 5", "reverse gradient wrt A, b, c"),
    "rebound": ("reb_simulation_step x steps, leapfrog, 3 bodies", "reverse gradient wrt the 18 initial values"),
}

#: the gradient errors each check mode prints (the worst is reported)
ERROR_KEYS = {"liblbfgs": ("point.rel_err_fd",), "cminpack": ("all.err_fd", "all.err_fwd", "all.err_rev"),
              "kissfft": ("err_fd", "err_analytic"), "tinyexpr": ("err_fd", "err_analytic"),
              "gsl": ("err_fd", "err_analytic")}

SETTINGS = {"full": {"rounds": 9, "min_time": 0.1, "rebound_steps": 100, "rebound_reps": 9},
            "quick": {"rounds": 1, "min_time": 0.005, "rebound_steps": 10, "rebound_reps": 1}}

REBOUND_COMPILE_TIMEOUT_S = 900


def fmt_time(s) -> str:
    """bench.run's format, with nanoseconds below a microsecond (a Rosenbrock call takes tens of them)."""
    if isinstance(s, float) and 0 < s < 1e-6:
        return f"{s * 1e9:.0f} ns"
    return _fmt_time(s)


def worst_error(name: str, values: dict[str, float]) -> float | None:
    """The largest gradient error (against finite differences or the analytic/hand-written gradient) that the
    library's check mode printed."""
    keys = ERROR_KEYS.get(name, ())
    errs = [v for k, v in values.items() if any(k == key or k.endswith("." + key) for key in keys)]
    return max(errs) if errs else None


def build_library(name: str, opt: str, build_dir: Path) -> tuple[Path, float]:
    """The driver of a library of libharness.LIBRARIES built at ``opt``, and the compile's wall time."""
    src = sources.fetch(name)
    t0 = time.perf_counter()
    exe = libharness.build(libharness.LIBRARIES[name], src, opt, build_dir, ("--no-cache",))
    return exe, time.perf_counter() - t0


def bench_library(name: str, settings: dict, build_dir: Path) -> dict:
    """One row: compile, check (gradient errors), then the interleaved timing."""
    row: dict = {"name": name, "short": SHORT[name], "primal": TIMED[name][0], "gradient": TIMED[name][1]}
    exe, row["compile_s"] = build_library(name, "-O2", build_dir)
    checked = libharness.run(exe, *libharness.check_args(libharness.LIBRARIES[name], sources.fetch(name)))
    row["max_gradient_err"] = worst_error(name, checked)
    env = {"BENCH_ROUNDS": str(settings["rounds"]), "BENCH_MIN_TIME": str(settings["min_time"])}
    timed = libharness.run(exe, "bench", env=env, timeout=1800)
    row["primal_s"], row["gradient_s"] = timed["bench.primal_s"], timed["bench.gradient_s"]
    row["ratio"] = row["gradient_s"] / row["primal_s"]
    return row


def rebound_command(src: Path, exe: Path) -> list[str]:
    """REBOUND's driver with every REBOUND source file in one enzcc link, as the driver's comment says."""
    files = sorted(str(p) for p in (src / "src").glob("*.c"))
    return [*libharness.enzcc_command(), "-O2", "-w", "-D_GNU_SOURCE", "-DLIBREBOUND", f"-I{src / 'src'}",
            str(libharness.HERE / "rebound_driver.c"), *files, "-lm", "-o", str(exe)]


def bench_rebound(settings: dict, build_dir: Path) -> dict:
    """REBOUND's row: its driver's own check and interleaved timing ("primal_us grad_us ratio")."""
    steps = settings["rebound_steps"]
    row: dict = {"name": "rebound", "short": SHORT["rebound"].format(steps=steps),
                 "primal": TIMED["rebound"][0].replace("x steps", f"x {steps}"),
                 "gradient": TIMED["rebound"][1]}
    driver = libharness.HERE / "rebound_driver.c"
    if not driver.exists():
        raise libharness.SkipRow("tests/libraries/rebound_driver.c is not in this checkout")
    src = sources.fetch("rebound")
    exe = build_dir / "rebound-O2"
    cmd = rebound_command(src, exe)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=build_dir, capture_output=True, text=True, timeout=REBOUND_COMPILE_TIMEOUT_S,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        raise libharness.SkipRow(f"enzcc did not finish compiling in {REBOUND_COMPILE_TIMEOUT_S} s") from None
    row["compile_s"] = time.perf_counter() - t0
    if proc.returncode != 0:
        raise libharness.SkipRow(f"enzcc refused: {proc.stderr.strip().splitlines()[-1][:300]}")
    check = subprocess.run([str(exe), "check", str(min(steps, 20))], capture_output=True, text=True, timeout=600)
    row["check_output"] = check.stdout.strip()
    row["check_ok"] = check.returncode == 0
    row["max_gradient_err"] = None  # the driver prints its errors in its own words (check_output)
    timed = subprocess.run([str(exe), "bench", str(steps), str(settings["rebound_reps"])], capture_output=True,
                           text=True, timeout=1800)
    nums = [float(w) for w in timed.stdout.split() if _is_float(w)]
    if timed.returncode != 0 or len(nums) < 3:
        raise RuntimeError(f"rebound bench failed ({timed.returncode}): {timed.stdout} {timed.stderr}")
    row["primal_s"], row["gradient_s"], row["ratio"] = nums[-3] * 1e-6, nums[-2] * 1e-6, nums[-1]
    return row


def _is_float(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def print_table(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    st = results["settings"]
    t = Table(title=f"real libraries through enzcc (-O2; medians of {st['rounds']} interleaved rounds)")
    for col, just in (("library", "left"), ("timed", "left"), ("primal", "right"), ("gradient", "right"),
                      ("grad / primal", "right"), ("max grad err", "right"), ("compile", "right")):
        t.add_column(col, justify=just)
    for r in results["libraries"]:
        if "skipped" in r or "error" in r:
            t.add_row(r["name"], r.get("skipped") or f"[red]{r['error'][:120]}[/]", *["-"] * 5)
            continue
        err = r.get("max_gradient_err")
        t.add_row(r["name"], r["short"], fmt_time(r["primal_s"]), fmt_time(r["gradient_s"]), fmt_x(r["ratio"]),
                  "-" if err is None else f"{err:.1e}", fmt_time(r.get("compile_s")))
    Console(width=max(Console().width, 110)).print(t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.libraries", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one short round (what the test runs)")
    ap.add_argument("--only", help=f"comma-separated subset of {','.join(LIBS)}")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--min-time", type=float)
    ap.add_argument("--rebound-steps", type=int)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--build-dir", type=Path, default=HERE / "build" / "libraries")
    args = ap.parse_args(argv)
    settings = dict(SETTINGS["quick" if args.quick else "full"])
    for key in ("rounds", "min_time", "rebound_steps"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    names = args.only.split(",") if args.only else list(LIBS)
    unknown = [n for n in names if n not in LIBS]
    if unknown:
        ap.error(f"unknown library {', '.join(unknown)} (known: {', '.join(LIBS)})")
    args.build_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows, ok = [], True
    for name in names:
        try:
            row = bench_rebound(settings, args.build_dir) if name == "rebound" else \
                bench_library(name, settings, args.build_dir)
        except (sources.SourceUnavailable, libharness.SkipRow) as e:
            row = {"name": name, "skipped": str(e)}
        except (libharness.BuildError, AssertionError, RuntimeError, KeyError, subprocess.TimeoutExpired) as e:
            row, ok = {"name": name, "error": str(e).strip().splitlines()[-1]}, False
        rows.append(row)
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "enzcc_commit": _git_describe(), "cpu": _cpu_model(), "load_avg": os.getloadavg(),
        "settings": settings, "libraries": rows, "wall_s": round(time.perf_counter() - started, 1),
    }
    out = args.out or HERE / "results" / ("libraries-quick.json" if args.quick else "libraries.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print_table(results)
    print(f"results written to {out} ({results['wall_s']} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
