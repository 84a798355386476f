#!/usr/bin/env python3
"""The GPU tests and benchmarks on a real GPU, in two steps, because a GPU machine may lack clang-22 and enzcc's
Python packages:

    python3 scripts/gpu_device_check.py build DIR   # here: enzcc++ builds each self-checking GPU test program of
                                                    # tests/cuda/ for the GPU, and the benchmarks of bench/gpu/
    python3 scripts/gpu_device_check.py run DIR     # on the GPU machine (Python's stdlib only): runs them all,
                                                    # prints each program's result and the benchmark table

Each test program checks its own gradients against finite differences or analytic values and ends with "ok"
(exit 0) or says what is wrong (exit 1); in `make test` the same programs run on the CPU (--cuda-host-emulation).
`run` exits 1 when any program fails. The benchmark table also goes to DIR/gpu.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: self-checking programs of tests/cuda (host_races.cu provokes races on purpose: emulation only)
TESTS = ("gradient", "split", "cudart", "host_grad", "host_grad_cases", "host_math", "host_basics")


def build(out: str, arch: str = "sm_90") -> int:
    sys.path.insert(0, ROOT)
    from bench.gpu import build as build_benchmarks, compile_cu

    os.makedirs(out, exist_ok=True)
    for name in TESTS:
        error = compile_cu(os.path.join(ROOT, "tests", "cuda", f"{name}.cu"), os.path.join(out, f"test_{name}"),
                           arch, "-O2")
        if error is not None:
            print(f"build {name}: FAILED\n{error}")
            return 1
    build_benchmarks(out, arch)
    return 0


def run(out: str) -> int:
    sys.path.insert(0, ROOT)
    from bench.gpu import have_gpu, run as run_benchmarks, table

    device = have_gpu()
    print(f"device: {device or 'none found by nvidia-smi'}")
    failed = 0
    for name in TESTS:
        t = time.time()
        proc = subprocess.run([os.path.join(out, f"test_{name}")], capture_output=True, text=True, timeout=300)
        ok = proc.returncode == 0
        failed += not ok
        print(f"test {name}: {'PASS' if ok else 'FAIL'} ({time.time() - t:.2f} s)")
        if not ok:
            print("  " + "\n  ".join((proc.stdout + proc.stderr).strip().splitlines()[-15:]))
    rows = run_benchmarks(out, {}, device or "")
    print(table(rows))
    with open(os.path.join(out, "gpu.json"), "w") as fh:
        json.dump({"device": device, "results": rows}, fh, indent=1)
    failed += sum(1 for r in rows if "error" in r or not r.get("ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("build", "run"):
        sys.exit(__doc__)
    sys.exit(build(sys.argv[2]) if sys.argv[1] == "build" else run(sys.argv[2]))
