"""The benchmark suite (bench/) in its quick mode: tiny inputs, one repetition. Every benchmark is built in both
AD modes, run, and its gradient checked against finite differences; timings are not asserted."""

from __future__ import annotations

import json
import subprocess
import sys

from enzcc_testing import ROOT, need

sys.path.insert(0, str(ROOT))
from bench import gen, run  # noqa: E402

BENCHMARKS = ("gmm", "ba", "lstm", "hand", "ode", "fft", "mlp", "mlp_blas", "heat")
MODES = ("after-opt", "before-opt")


def test_generator_is_seeded(tmp_path):
    gen.generate(tmp_path / "a", "quick", quiet=True)
    gen.generate(tmp_path / "b", "quick", quiet=True)
    assert gen.up_to_date(tmp_path / "a", "quick") and not gen.up_to_date(tmp_path / "a", "full")
    for name in BENCHMARKS:
        assert (tmp_path / "a" / f"{name}.txt").read_text() == (tmp_path / "b" / f"{name}.txt").read_text()


def test_time_report_parsing():
    table = "\n".join([
        "             enzcc time report              ",
        "┏━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┓",
        "┃ stage       ┃ what             ┃ seconds ┃",
        "┡━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━╇━━━━━━━━━┩",
        "│ frontend    │ demo.c           │  0.0871 │",
        "│ optimize    │ -O2              │  0.0155 │",
        "│ ad          │ demo.c           │  0.1532 │",
        "│ optimize    │ -O2 after AD     │  0.0233 │",
        "│ native-link │ demo             │  0.1371 │",
        "│ total       │                  │  0.4162 │",
        "└─────────────┴──────────────────┴─────────┘",
    ])
    rows, total = run.parse_time_report(table)
    assert [r[0] for r in rows] == ["frontend", "optimize", "ad", "optimize", "native-link"] and total == 0.4162
    totals = run.stage_totals(rows)
    assert totals["optimize"] == 0.0388 and totals["codegen"] == 0.0 and set(run.STAGES) <= set(totals)


@need("clang-22", "llvm-objcopy-22")
def test_quick_suite(tmp_path, env):
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--data-dir", str(tmp_path / "data"),
                           "--build-dir", str(tmp_path / "build"), "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["mode"] == "quick" and res["all_checks_passed"] and res["all_ok"]
    assert res["geomean_speedup_after_vs_before"] > 0
    assert [b["name"] for b in res["benchmarks"]] == list(BENCHMARKS)
    for b in res["benchmarks"]:
        for key in ("n_params", "primal_s", "grad_after_opt_s", "grad_before_opt_s", "fd_s", "ratio_grad_primal",
                    "speedup_after_vs_before"):
            assert isinstance(b[key], (int, float)) and b[key] > 0, (b["name"], key, b[key])
        assert isinstance(b["fd_extrapolated"], bool)
        assert b["check"]["passed"], b["name"]
        for m in MODES:
            chk = b["check"][m]
            assert chk["passed"] and chk["failed"] == 0 and chk["coords"] > 0, (b["name"], m, chk)
            comp = b["compile"][m]
            assert comp["ok"] and comp["report_parsed_ok"] and set(run.STAGES) <= set(comp["stages_s"]), (b["name"], m)
            assert comp["stages_s"]["ad"] > 0 and comp["stages_s"]["frontend"] > 0
    assert "geomean" in proc.stdout and "gradient check" in proc.stdout


def test_quick_compile_time_benchmarks(tmp_path, env):
    """bench.builds in quick mode (single calls, the generated project and the N-statement family; Lua needs a
    download): every build succeeds and both compilers' times, CPU times, object sizes and peak memory are
    recorded."""
    out = tmp_path / "builds.json"
    proc = subprocess.run([sys.executable, "-m", "bench.builds", "--quick", "--only", "calls,files,nstmt",
                           "--build-dir", str(tmp_path / "b"), "--out", str(out), "--enzcc", "enzcc"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["python_start_s"] > 0 and res["python_start_without_site_s"] > 0
    (files,) = res["projects"]
    assert files["clang_s"] > 0 and files["enzcc_s"] > 0 and "error" not in files
    assert files["clang_cpu_s"] > 0 and files["enzcc_cpu_s"] > 0 and files["object_ratio"] > 1  # (bitcode)
    assert len(res["calls"]) == 7 and all(r["clang_cpu_ms"] > 0 and r["enzcc_cpu_ms"] > 0 for r in res["calls"])
    assert [r["name"] for r in res["nstmt"]] == [100, 300]
    for r in res["nstmt"]:
        assert r["ratio"] > 0 and r["clang_peak_mb"] > 0 and r["enzcc_peak_mb"] > 0 and "error" not in r
    assert "compile time" in proc.stdout
