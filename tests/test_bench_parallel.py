"""``make bench-parallel`` (bench/parallel): both heat equations build and run at 1, 2 and 4 threads or ranks in
quick mode, and their gradients agree with central differences and with each other."""

from __future__ import annotations

import json
import subprocess
import sys

from enzcc_testing import ROOT, need


@need("clang-22")
def test_bench_parallel_quick(tmp_path, env):
    out = tmp_path / "parallel.json"
    proc = subprocess.run([sys.executable, "-m", "bench.parallel", "--quick", "--build-dir", str(tmp_path),
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())["benchmarks"]
    assert "openmp" in results
    for r in results.values():
        assert r["grad_agrees"], r
        assert set(r["runs"]) == {"1", "2", "4"}
    assert "| openmp | 2 threads |" in proc.stdout
