"""bench/libraries.py in its quick mode on one library: builds, checks and times it, and writes its row."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from libharness import ROOT
from sources import SourceUnavailable, fetch


def test_quick_row(tmp_path):
    try:
        fetch("liblbfgs")
    except SourceUnavailable as e:
        pytest.skip(f"source not available: {e}")
    out = tmp_path / "libraries.json"
    proc = subprocess.run([sys.executable, "-m", "bench.libraries", "--quick", "--only", "liblbfgs", "--out", str(out),
                           "--build-dir", str(tmp_path / "build")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row, = json.loads(out.read_text())["libraries"]
    assert row["name"] == "liblbfgs" and row["primal_s"] > 0 and row["gradient_s"] > 0
    assert row["ratio"] == pytest.approx(row["gradient_s"] / row["primal_s"])
    assert row["max_gradient_err"] < 1e-6
    assert "liblbfgs" in proc.stdout
