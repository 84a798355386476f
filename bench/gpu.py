"""GPU benchmarks (``make bench-gpu``): a 2-D stencil time step, N-body accelerations and a shared-memory reduction
(``bench/gpu/*.cu``), each a primal kernel and its gradient kernel made by enzcc, timed on the GPU with CUDA events;
each gradient is checked against central finite differences on the device. Prints a table (primal and gradient
milliseconds, their ratio, GB/s and the share of the device's memory bandwidth) and writes
``bench/results/gpu.json``.

    python3 -m bench.gpu                    build (enzcc++ -O3) and run; without a GPU: build, say so, stop
    python3 -m bench.gpu --build-only DIR   only build the programs into DIR (to carry them to a GPU machine)
    python3 -m bench.gpu --run-only DIR     only run programs built before (needs no enzcc: Python's stdlib only)
    --arch sm_90 (default), --size NAME=N (the problem size of one benchmark, e.g. --size reduce=1048576)

The goals (docs/benchmarks.md): every gradient within 4x of its primal; memory-bound gradient kernels at 80% or
more of the device's memory bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BENCHMARKS = ("stencil", "nbody", "reduce")
MEMORY_BOUND = ("stencil2d", "reduce")
#: peak memory bandwidth (GB/s) by device name, for the share of it a kernel reaches
PEAK_GBS = {"H100 SXM": 3350, "H100 PCIe": 2000, "H100 NVL": 3900, "H200": 4800, "A100-SXM4-80GB": 2039,
            "A100-SXM4-40GB": 1555, "A100-PCIE": 1555}


def have_gpu() -> str | None:
    """The first GPU's name as nvidia-smi says it, or None."""
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    name = proc.stdout.strip().splitlines()
    return name[0] if proc.returncode == 0 and name else None


def compile_cu(src: str, exe: str, arch: str, opt: str = "-O3") -> str | None:
    """``enzcc++ opt --cuda-gpu-arch=arch src -o exe`` with this checkout; None when it succeeds, else its
    diagnostics."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-c", "import sys; from enzcc.cli import main_cxx; sys.exit(main_cxx())", opt,
           f"--cuda-gpu-arch={arch}", src, "-o", exe]
    t = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return proc.stderr.strip() or str(proc.returncode)
    print(f"built {exe} ({time.time() - t:.1f} s)")
    return None


def build(out_dir: str, arch: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name in BENCHMARKS:
        exe = os.path.join(out_dir, name)
        error = compile_cu(os.path.join(HERE, "gpu", f"{name}.cu"), exe, arch)
        if error is not None:
            sys.exit(f"bench.gpu: building {name} failed:\n{error}")
        paths.append(exe)
    return paths


def peak(device: str) -> float | None:
    for key, gbs in PEAK_GBS.items():
        if key in device:
            return gbs
    return None


def run(out_dir: str, sizes: dict[str, str], device: str) -> list[dict]:
    rows = []
    for name in BENCHMARKS:
        exe = os.path.join(out_dir, name)
        proc = subprocess.run([exe, *([sizes[name]] if name in sizes else [])], capture_output=True, text=True,
                              timeout=600)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("{")), None)
        if proc.returncode != 0 or line is None:
            rows.append({"name": name, "error": (proc.stderr or proc.stdout).strip()[-500:] or str(proc.returncode)})
            continue
        row = json.loads(line)
        p = peak(device)
        if p:
            row["primal_bw_share"] = round(row["primal_gbs"] / p, 3)
            row["gradient_bw_share"] = round(row["gradient_gbs"] / p, 3)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    head = f"{'benchmark':<10} {'n':>10} {'primal ms':>10} {'grad ms':>10} {'ratio':>7} {'primal GB/s':>12} " \
           f"{'grad GB/s':>10} {'grad %peak':>10} {'FD rel err':>10}"
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['name']:<10} error: {r['error']}")
            continue
        share = f"{100 * r['gradient_bw_share']:.0f}%" if "gradient_bw_share" in r else "?"
        lines.append(f"{r['name']:<10} {r['n']:>10} {r['primal_ms']:>10.3f} {r['gradient_ms']:>10.3f} "
                     f"{r['ratio']:>7.2f} {r['primal_gbs']:>12.0f} {r['gradient_gbs']:>10.0f} {share:>10} "
                     f"{r['check_rel_err']:>10.2g}{'' if r['ok'] else '  WRONG'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.gpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-only", metavar="DIR")
    ap.add_argument("--run-only", metavar="DIR")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--size", action="append", default=[], metavar="NAME=N")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "gpu.json"))
    args = ap.parse_args(argv)
    sizes = dict(s.split("=", 1) for s in args.size)
    if args.build_only:
        build(args.build_only, args.arch)
        return 0
    out_dir = args.run_only or os.path.join(ROOT, "bench", "build", "gpu")
    if not args.run_only:
        build(out_dir, args.arch)
    device = have_gpu()
    if device is None:
        print("bench.gpu: no NVIDIA GPU here (nvidia-smi finds none): the programs are built, nothing was run")
        return 0
    rows = run(out_dir, sizes, device)
    print(f"device: {device}")
    print(table(rows))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    with open(args.json, "w") as fh:
        json.dump({"command": "python3 -m bench.gpu " + " ".join(argv or sys.argv[1:]), "commit": commit,
                   "device": device, "results": rows}, fh, indent=1)
    bad = [r["name"] for r in rows if "error" in r or not r.get("ok")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
