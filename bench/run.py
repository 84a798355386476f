"""The enzcc benchmark suite: builds every benchmark twice (AD after optimization, the default, and
``--ad-mode=before-opt``), runs both, checks the gradients against finite differences, prints tables and
writes ``bench/results/results.json``.

    python3 -m bench [--quick] [--only gmm,ba] [--jobs N] [--out FILE]     (or: python3 bench/run.py, make bench)

Exit status: 0 when every build, run and gradient check succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __package__ in (None, ""):  # run as a script: python3 bench/run.py
    sys.path.insert(0, str(HERE.parent))
from bench import gen  # noqa: E402

MODES = ("after-opt", "before-opt")
STAGES = ("frontend", "link", "optimize", "ad", "codegen", "native-link")

DESCRIPTIONS = {
    "gmm": "Gaussian mixture log-likelihood + Wishart prior",
    "ba": "bundle adjustment, sum of squared residuals",
    "lstm": "2-layer LSTM, next-character log-loss",
    "hand": "skinned hand model, 22 bones, point distances",
    "ode": "N-body system, RK4, final-state loss",
    "fft": "radix-2 complex FFT, weighted log power spectrum",
    "mlp": "2-layer perceptron training loss, matrix products as loops",
    "mlp_blas": "the same with cblas_dgemm (derivatives: BLAS calls)",
    "heat": "2-D reaction-diffusion, explicit 5-point stencil, 100 steps",
}

#: timing settings: timed repetitions per run, minimum seconds per repetition, FD coordinates timed, coordinates
#: checked, and rounds: each benchmark's two builds are run alternately this many times (the first round also
#: checks the gradient and times finite differences) and the samples of all rounds are pooled, so that load
#: from elsewhere on the machine falls on both builds alike
SETTINGS = {"full": {"reps": 5, "min_time": 0.1, "fd_coords": 64, "check_coords": 32, "rounds": 5},
            "quick": {"reps": 1, "min_time": 0.0, "fd_coords": 8, "check_coords": 16, "rounds": 1}}


# ---------------------------------------------------------------------------------------------
# compile


def parse_time_report(text: str) -> tuple[list[tuple[str, str, float]], float | None]:
    """The (stage, what, seconds) rows of enzcc's ``--time-report`` table (rich box drawing, on stderr), and the
    table's own total (None when absent)."""
    rows, total = [], None
    for line in text.splitlines():
        if "\u2502" not in line:
            continue
        cells = [c.strip() for c in line.strip().strip("\u2502").split("\u2502")]
        if len(cells) != 3 or not cells[0]:
            continue  # not a row, or the continuation of a wrapped one
        try:
            secs = float(cells[2])
        except ValueError:
            continue  # the header
        if cells[0] == "total":
            total = secs
        else:
            rows.append((cells[0], cells[1], secs))
    return rows, total


def stage_totals(rows: list[tuple[str, str, float]]) -> dict[str, float]:
    out = {s: 0.0 for s in STAGES}
    for stage, _, secs in rows:
        out[stage] = out.get(stage, 0.0) + secs
    return {k: round(v, 4) for k, v in out.items()}


def compile_one(enzcc: str, name: str, mode: str, build: Path) -> dict:
    """``enzcc -O2 --ad-mode=MODE --time-report NAME.c -lm -o NAME_MODE``, run in the build directory (so that the
    report's 'what' column stays short)."""
    exe = build / f"{name}_{mode.replace('-', '_')}"
    source, extra = gen.VARIANTS.get(name, (name, []))
    src = HERE / f"{source}.c"
    rel = os.path.relpath(src, build)
    cmd = [enzcc, "-O2", f"--ad-mode={mode}", "--time-report", "--no-cache",
           rel if len(rel) < len(str(src)) else str(src), "-lm", "-o", exe.name, *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=build, capture_output=True, text=True)
    wall = time.perf_counter() - start
    rows, total = parse_time_report(proc.stderr)
    parsed = round(sum(r[2] for r in rows), 4)
    result = {"command": " ".join(["enzcc", *cmd[1:5], f"bench/{source}.c", *cmd[6:]]),
              "ok": proc.returncode == 0 and exe.is_file(), "wall_s": round(wall, 3),
              "stages_s": stage_totals(rows), "report_total_s": total if total is not None else parsed,
              "report_parsed_ok": total is not None and abs(total - parsed) < 1e-3 * max(1, len(rows)),
              "entries": [{"stage": s, "what": w, "seconds": t} for s, w, t in rows], "exe": str(exe)}
    if not result["ok"]:
        text = "\n".join(line for line in proc.stderr.splitlines() if "\u2502" not in line).strip()
        result["error"] = (text or f"enzcc exited with status {proc.returncode}")[-4000:]
    return result


# ---------------------------------------------------------------------------------------------
# run


def run_one(exe: str | list[str], data: Path, settings: dict, fd_time: bool, check: bool, timeout: float) -> dict:
    """One run of a benchmark program (``exe``: its path, or the command that runs it, e.g. under Enzyme)."""
    cmd = [*([exe] if isinstance(exe, str) else exe), str(data), "--reps", str(settings["reps"]), "--min-time", str(settings["min_time"]),
           "--fd-coords", str(settings["fd_coords"]), "--check-coords", str(settings["check_coords"])]
    if not fd_time:
        cmd.append("--no-fd-time")
    if not check:
        cmd.append("--no-check")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.strip().startswith("{")]
    if not lines:
        return {"ok": False, "error": f"exit {proc.returncode}, no JSON line\n{proc.stderr[-2000:]}"}
    out = json.loads(lines[-1])
    out["ok"] = proc.returncode == 0 and (not check or bool(out["check"] and out["check"]["passed"]))
    if proc.returncode != 0:
        out["error"] = proc.stderr[-2000:]
    return out


def median(values: list[float]) -> float | None:
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def pool_rounds(rounds: list[dict]) -> dict:
    """One run record from several: the first round's (checks, FD), timings from all rounds' samples."""
    first = dict(rounds[0])
    if not all(r.get("ok") for r in rounds):
        first["ok"] = False
        first["error"] = "; ".join(r["error"] for r in rounds if r.get("error"))
    if "primal_samples_s" not in first:
        return first
    for key in ("primal", "grad"):
        samples = [x for r in rounds for x in r.get(f"{key}_samples_s", [])]
        first[f"{key}_samples_s"] = samples
        first[f"{key}_s"] = median(samples)
        first[f"{key}_min_s"] = min(samples) if samples else None
    first["rounds"] = len(rounds)
    return first


# ---------------------------------------------------------------------------------------------
# the suite


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _ratio(a, b):
    return a / b if a and b else None


def summarize(name: str, size: dict, builds: dict, runs: dict) -> dict:
    after, before = runs.get("after-opt") or {}, runs.get("before-opt") or {}
    primal = after.get("primal_s")
    grad_a, grad_b = after.get("grad_s"), before.get("grad_s")
    checks = {m: runs[m]["check"] for m in MODES if isinstance((runs.get(m) or {}).get("check"), dict)}
    ok = all(builds[m]["ok"] for m in MODES) and all((runs.get(m) or {}).get("ok") for m in MODES)
    return {
        "name": name,
        "description": DESCRIPTIONS[name],
        "size": size,
        "n_params": after.get("n_params", before.get("n_params")),
        "objective": after.get("f"),
        "primal_s": primal,
        "primal_min_s": after.get("primal_min_s"),
        "primal_before_opt_build_s": before.get("primal_s"),
        "grad_after_opt_s": grad_a,
        "grad_before_opt_s": grad_b,
        "grad_after_opt_min_s": after.get("grad_min_s"),
        "grad_before_opt_min_s": before.get("grad_min_s"),
        "fd_s": after.get("fd_s"),
        "fd_extrapolated": after.get("fd_extrapolated"),
        "fd_coords_timed": after.get("fd_coords_timed"),
        "ratio_grad_primal": grad_a / primal if grad_a and primal else None,
        "speedup_after_vs_before": grad_b / grad_a if grad_a and grad_b else None,
        "speedup_after_vs_before_from_min": _ratio(before.get("grad_min_s"), after.get("grad_min_s")),
        "check": {**checks, "passed": ok and len(checks) == 2 and all(c["passed"] for c in checks.values())},
        "compile": {m: {k: builds[m][k] for k in ("command", "ok", "wall_s", "stages_s", "report_total_s",
                                                    "report_parsed_ok", "entries", "error") if k in builds[m]}
                    for m in MODES},
        "runs": {m: {k: v for k, v in (runs.get(m) or {}).items() if k != "check"} for m in MODES},
        "ok": ok,
    }


#: benchmarks not run under Enzyme, and why
ENZYME_SKIPS = {"mlp_blas": "calls OpenBLAS, which Enzyme-JAX's cpp_call does not link"}


def enzyme_summary(run: dict, ours: dict) -> dict:
    """Enzyme's times for one benchmark, its gradient check, and enzcc's times over Enzyme's."""
    out = {k: run.get(k) for k in ("primal_s", "grad_s", "primal_min_s", "grad_min_s", "primal_samples_s",
                                   "grad_samples_s", "rounds", "ok", "error") if k in run}
    out["check"] = run.get("check")
    out["grad_enzcc_over_enzyme"] = _ratio(ours["grad_after_opt_s"], run.get("grad_s")) if run.get("ok") else None
    out["primal_enzcc_over_enzyme"] = _ratio(ours["primal_s"], run.get("primal_s")) if run.get("ok") else None
    out["grad_primal_enzyme"] = _ratio(run.get("grad_s"), run.get("primal_s"))
    return out


def fmt_time(s) -> str:
    if s is None or not isinstance(s, (int, float)) or not math.isfinite(s):
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def fmt_x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def print_tables(results: dict, console) -> None:
    from rich.table import Table

    st = results["settings"]
    t = Table(title=f"enzcc benchmarks ({results['mode']}, -O2; median of {st['reps'] * st['rounds']} timed samples)")
    for col, just in (("benchmark", "left"), ("params", "right"), ("primal", "right"),
                      ("grad, AD after opt", "right"), ("grad, AD before opt", "right"),
                      ("after-opt speedup", "right"), ("grad / primal", "right"), ("FD gradient", "right"),
                      ("gradient check", "left")):
        t.add_column(col, justify=just)
    for b in results["benchmarks"]:
        fd = fmt_time(b["fd_s"]) + (" (extrap.)" if b["fd_extrapolated"] else "")
        chk = b["check"]
        coords = "+".join(str(chk[m]["coords"]) for m in MODES if m in chk)
        worst = max((chk[m]["max_rel_err"] or 0 for m in MODES if m in chk), default=0)
        status = "[green]pass[/]" if chk["passed"] else "[red]FAIL[/]"
        t.add_row(b["name"], str(b["n_params"]), fmt_time(b["primal_s"]), fmt_time(b["grad_after_opt_s"]),
                  fmt_time(b["grad_before_opt_s"]), fmt_x(b["speedup_after_vs_before"]),
                  fmt_x(b["ratio_grad_primal"]), fd, f"{status} {coords} coords, max rel {worst:.0e}")
    console.print(t)
    g = results["geomean_speedup_after_vs_before"]
    console.print(f"geomean speedup of AD after optimization over AD before optimization "
                  f"(gradient time before / after): [bold]{fmt_x(g)}[/]")

    if any("enzyme" in b for b in results["benchmarks"]):
        e = Table(title="against real Enzyme (Enzyme-JAX cpp_call, same source, runs interleaved)")
        for col in ("benchmark", "primal Enzyme", "primal enzcc", "grad Enzyme", "grad enzcc", "grad/primal Enzyme",
                    "grad/primal enzcc", "enzcc/Enzyme (grad)", "Enzyme's gradient check"):
            e.add_column(col, justify="left" if col in ("benchmark", "Enzyme's gradient check") else "right")
        for b in results["benchmarks"]:
            z = b.get("enzyme", {})
            if "skipped" in z:
                e.add_row(b["name"], *["-"] * 7, f"skipped: {z['skipped']}")
                continue
            chk = z.get("check") or {}
            status = "[green]pass[/]" if z.get("ok") and chk.get("passed") else f"[red]FAIL[/] {z.get('error', '')[:60]}"
            e.add_row(b["name"], fmt_time(z.get("primal_s")), fmt_time(b["primal_s"]), fmt_time(z.get("grad_s")),
                      fmt_time(b["grad_after_opt_s"]), fmt_x(z.get("grad_primal_enzyme")), fmt_x(b["ratio_grad_primal"]),
                      fmt_x(z.get("grad_enzcc_over_enzyme")), status)
        console.print(e)
        console.print("geomean of enzcc's gradient time over Enzyme's: "
                      f"[bold]{fmt_x(results.get('geomean_grad_enzcc_over_enzyme'))}[/]")

    c = Table(title="compile time per stage (enzcc --time-report, seconds)")
    c.add_column("benchmark")
    c.add_column("AD mode")
    for s in STAGES:
        c.add_column(s, justify="right")
    c.add_column("total", justify="right")
    c.add_column("wall", justify="right")
    for b in results["benchmarks"]:
        for m in MODES:
            comp = b["compile"][m]
            c.add_row(b["name"], m, *(f"{comp['stages_s'].get(s, 0):.2f}" for s in STAGES),
                      f"{comp['report_total_s']:.2f}", f"{comp['wall_s']:.2f}")
    console.print(c)
    for b in results["benchmarks"]:
        for m in MODES:
            err = b["compile"][m].get("error") or b["runs"][m].get("error")
            if err:
                console.print(f"[red]{b['name']} ({m}):[/] {err.strip()}", markup=True, highlight=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench",
                                 description="Build each benchmark with AD after and before optimization, run, check "
                                             "gradients, print tables, write the results JSON.")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repetition (for the tests)")
    ap.add_argument("--only", default="", help="comma-separated benchmarks (default: all)")
    ap.add_argument("--jobs", type=int, default=None, help="parallel compiles (default 1; 2 with --quick)")
    ap.add_argument("--data-dir", type=Path, default=None, help="inputs (default bench/data[/quick])")
    ap.add_argument("--build-dir", type=Path, default=HERE / "build", help="executables (default bench/build)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results JSON (default bench/results/results.json, or results-quick.json)")
    ap.add_argument("--enzcc", default=os.environ.get("ENZCC", "enzcc"), help="the compiler (default $ENZCC or enzcc)")
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions per measurement")
    ap.add_argument("--min-time", type=float, default=None, help="minimum seconds per timed repetition")
    ap.add_argument("--rounds", type=int, default=None, help="alternating runs of the two builds (samples pooled)")
    ap.add_argument("--against-enzyme", action="store_true",
                    help="also run each objective under real Enzyme (Enzyme-JAX, in a virtual environment of its "
                         "own: bench/enzyme.py), interleaved with enzcc's runs, and report the ratios")
    args = ap.parse_args(argv)

    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 170)
    mode = "quick" if args.quick else "full"
    names = [n for n in args.only.split(",") if n] or list(gen.BENCHMARKS)
    unknown = [n for n in names if n not in gen.BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark(s): {', '.join(unknown)} (known: {', '.join(gen.BENCHMARKS)})")
    settings = dict(SETTINGS[mode])
    if args.reps:
        settings["reps"] = args.reps
    if args.min_time is not None:
        settings["min_time"] = args.min_time
    if args.rounds:
        settings["rounds"] = args.rounds
    data_dir = args.data_dir or (gen.DEFAULT_OUT / "quick" if args.quick else gen.DEFAULT_OUT)
    out = args.out or HERE / "results" / ("results-quick.json" if args.quick else "results.json")
    enzcc = shutil.which(args.enzcc) or args.enzcc
    started = time.perf_counter()
    load_start = list(os.getloadavg())
    git_state = _git_describe()  # before building: the compiler may change while the suite runs

    if not gen.up_to_date(data_dir, mode):
        console.print(f"generating inputs in {data_dir} ...")
        gen.generate(data_dir, mode, quiet=True)

    args.build_dir = args.build_dir.resolve()
    args.build_dir.mkdir(parents=True, exist_ok=True)
    jobs = args.jobs or (2 if args.quick else 1)
    work = [(n, m) for n in names for m in MODES]
    console.print(f"compiling {len(work)} programs with {enzcc} ({jobs} at a time) ...")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        builds_list = list(pool.map(lambda nm: compile_one(enzcc, nm[0], nm[1], args.build_dir), work))
    builds = {(n, m): b for (n, m), b in zip(work, builds_list)}

    enzyme_python, enzyme_skip = None, ""
    if args.against_enzyme:
        from bench import enzyme

        console.print("preparing Enzyme-JAX ...")
        enzyme_python, enzyme_skip = enzyme.ensure_venv()
        if enzyme_python is None:
            console.print(f"[yellow]not comparing with Enzyme: {enzyme_skip}[/]")

    benchmarks = []
    for n in names:
        rounds: dict[str, list[dict]] = {m: [] for m in MODES if builds[(n, m)]["ok"]}
        under_enzyme = enzyme_python is not None and n not in ENZYME_SKIPS
        if under_enzyme:
            rounds["enzyme"] = []
        console.print(f"running {n} ({settings['rounds']} round(s) of {', '.join(rounds) or 'nothing'}) ...")
        for r in range(settings["rounds"]):
            for m in rounds:
                # the FD gradient is timed in the after-opt build only: it uses nothing but the primal
                exe = enzyme.command(enzyme_python, HERE / f"{n}.c") if m == "enzyme" else builds[(n, m)]["exe"]
                rounds[m].append(run_one(exe, data_dir / f"{n}.txt", settings,
                                         fd_time=(r == 0 and m == "after-opt"), check=(r == 0),
                                         timeout=120 if args.quick and m != "enzyme" else 900))
        runs = {m: pool_rounds(rs) for m, rs in rounds.items()}
        summary = summarize(n, gen.SIZES[mode][n], {m: builds[(n, m)] for m in MODES}, runs)
        if under_enzyme:
            summary["enzyme"] = enzyme_summary(runs["enzyme"], summary)
        elif args.against_enzyme:
            summary["enzyme"] = {"skipped": enzyme_skip or ENZYME_SKIPS[n]}
        benchmarks.append(summary)

    speedups = [b["speedup_after_vs_before"] for b in benchmarks]
    results = {
        "suite": "enzcc benchmarks",
        "mode": mode,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": _cpu_model(), "cpus": os.cpu_count(),
                    "python": platform.python_version(), "loadavg_at_start": load_start,
                    "loadavg_at_end": list(os.getloadavg())},
        "compiler": {"enzcc": enzcc, "version": _version(enzcc), "git": git_state, "flags": "-O2 ... -lm"},
        "settings": {**settings, "statistic": "median of all samples (reps x rounds); each sample is the mean "
                                             "call time of a batch lasting at least min_time",
                     "clock": "CLOCK_MONOTONIC", "fd": "central differences, h = 1e-6 max(1, |x|)"},
        "benchmarks": benchmarks,
        "geomean_speedup_after_vs_before": geomean(speedups),
        "geomean_speedup_after_vs_before_from_min": geomean([b["speedup_after_vs_before_from_min"]
                                                              for b in benchmarks]),
        "geomean_grad_enzcc_over_enzyme": geomean([b["enzyme"]["grad_enzcc_over_enzyme"] for b in benchmarks
                                                    if b.get("enzyme", {}).get("grad_enzcc_over_enzyme")]),
        "all_checks_passed": all(b["check"]["passed"] for b in benchmarks),
        "all_ok": all(b["ok"] for b in benchmarks),
        "suite_wall_s": None,
    }
    results["suite_wall_s"] = round(time.perf_counter() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print_tables(results, console)
    console.print(f"results written to {out} ({results['suite_wall_s']} s)")
    if not results["all_ok"]:
        console.print("[red]some builds, runs or gradient checks failed[/]")
        return 1
    return 0


def _git_describe() -> str | None:
    """The commit of the enzcc checkout the suite lives in (with '-dirty' when enzcc/ has local changes)."""
    try:
        root = HERE.parent
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "enzcc"], cwd=root, capture_output=True,
                               text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (head + ("-dirty" if dirty else "")) or None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(enzcc: str) -> str | None:
    try:
        proc = subprocess.run([enzcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in proc.stdout.splitlines() if "enzcc" in line]
    return lines[-1].strip() if lines else None


if __name__ == "__main__":
    raise SystemExit(main())
