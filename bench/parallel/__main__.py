"""``python3 -m bench.parallel``: primal and gradient times of the heat equation at 1 and 2 OpenMP threads and
at 1 and 2 MPI ranks, their ratio and the speedups, and a 4-thread and a 4-rank run that check the gradient only
(against central differences and the 1-thread or 1-rank gradient's norm). Results: bench/results/parallel.json
and a Markdown table on stdout (docs/benchmarks.md, "Threads and ranks").

Goals (issue 35): the gradient's speedup from 1 to 2 at least 90% of the primal's, and gradient/primal at 2 no
worse than at 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
          "--mca", "btl_vader_single_copy_mechanism", "none"]


def mpi_flags() -> list[str]:
    out = []
    for what in ("compile", "link"):
        out += subprocess.run(["mpicc", f"-showme:{what}"], capture_output=True, text=True, check=True).stdout.split()
    return out


def build(enzcc: str, build_dir: Path) -> dict[str, Path]:
    """The two programs, built with enzcc -O2 (what is missing, MPI or OpenMP, is skipped with a note)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    exes = {}
    omp = build_dir / "heat_omp"
    subprocess.run([enzcc, "-O2", "-fopenmp", str(HERE / "heat_omp.c"), "-lm", "-o", str(omp)], check=True)
    exes["openmp"] = omp
    if shutil.which("mpicc") and shutil.which("mpirun"):
        mpi = build_dir / "heat_mpi"
        subprocess.run([enzcc, "-O2", str(HERE / "heat_mpi.c"), *mpi_flags(), "-lm", "-o", str(mpi)], check=True)
        exes["mpi"] = mpi
    else:
        print("bench-parallel: note: mpicc or mpirun missing; the MPI runs are skipped", file=sys.stderr)
    return exes


def run(kind: str, exe: Path, workers: int, args: list[str], timeout: float) -> dict:
    if kind == "openmp":
        env = {**os.environ, "OMP_NUM_THREADS": str(workers), "OMP_PROC_BIND": "false"}
        proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=env)
    else:
        proc = subprocess.run([*MPIRUN, "-np", str(workers), str(exe), *args], capture_output=True, text=True,
                              timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"bench-parallel: {kind} at {workers} failed:\n{proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(kind: str, exe: Path, n: int, steps: int, reps: int, timeout: float) -> dict:
    """1 and 2 workers timed, 4 for the gradient only."""
    args = [str(n), str(steps), str(reps)]
    one, two = run(kind, exe, 1, args, timeout), run(kind, exe, 2, args, timeout)
    four = run(kind, exe, 4, [str(n), str(steps), "1"], timeout)
    out = {"n": n, "steps": steps, "runs": {"1": one, "2": two, "4": four}}
    for w, r in out["runs"].items():
        r["ratio"] = r["grad_s"] / r["primal_s"]
    out["primal_speedup"] = one["primal_s"] / two["primal_s"]
    out["grad_speedup"] = one["grad_s"] / two["grad_s"]
    out["goal_speedup"] = out["grad_speedup"] >= 0.9 * out["primal_speedup"]
    out["goal_ratio"] = two["ratio"] <= one["ratio"]
    norms = [r["grad_norm"] for r in out["runs"].values()]
    out["grad_agrees"] = max(abs(x - norms[0]) for x in norms) <= 1e-9 * abs(norms[0]) and \
        max(r["fd_err"] for r in out["runs"].values()) < 1e-4
    return out


def table(results: dict) -> str:
    rows = ["| version | workers | primal | gradient | gradient / primal | speedup primal | speedup gradient | "
            "gradient checked |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind, r in results["benchmarks"].items():
        unit = "threads" if kind == "openmp" else "ranks"
        for w in ("1", "2", "4"):
            x = r["runs"][w]
            timed = w != "4"
            sp = (f"{r['primal_speedup']:.2f}x", f"{r['grad_speedup']:.2f}x") if w == "2" else ("", "")
            rows.append(f"| {kind} | {w} {unit} | {x['primal_s'] * 1e3:.1f} ms{'' if timed else ' (1 run)'} | "
                        f"{x['grad_s'] * 1e3:.1f} ms{'' if timed else ' (1 run)'} | {x['ratio']:.2f} | {sp[0]} | "
                        f"{sp[1]} | fd {x['fd_err']:.1e}{', same norm' if r['grad_agrees'] else ', DIFFERS'} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.parallel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--enzcc", default=os.environ.get("ENZCC", "enzcc"))
    ap.add_argument("--n", type=int, default=512, help="grid size (divisible by 4)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions (the median is reported)")
    ap.add_argument("--quick", action="store_true", help="a tiny grid, one repetition (for the tests)")
    ap.add_argument("--build-dir", type=Path, default=ROOT / "bench" / "build" / "parallel")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "parallel.json")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args(argv)
    if a.quick:
        a.n, a.steps, a.reps = 64, 4, 1
    exes = build(a.enzcc, a.build_dir)
    results = {"cpus": os.cpu_count(), "benchmarks": {}}
    for kind, exe in exes.items():
        results["benchmarks"][kind] = measure(kind, exe, a.n, a.steps, a.reps, a.timeout)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    ok = all(r["grad_agrees"] for r in results["benchmarks"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
