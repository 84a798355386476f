"""cargo with ``RUSTC_WRAPPER=enzcc`` against cargo alone, interleaved round by round (clean builds, ``-j2``).

* ``plain``: a generated workspace of library crates (no AD; each depends on the one before) and a binary:
  the wrapper's cost on crates that differentiate nothing (rustc runs with ``-C embed-bitcode=yes`` for the
  libraries, the binary is rustc's own).
* ``example``: examples/cargo (the binary differentiates the library's functions at its link) with the wrapper,
  against the same workspace built by cargo alone with the derivative calls taken out (what the same code
  costs without AD), dev profile and release.

    python3 -m bench.cargo [--rounds N] [--crates K] [--functions F] [--out FILE]

The enzcc run is a launcher of this checkout written into a temporary directory (enzcc/launcher.py: Python
without ``site``, as ``make setup`` installs it), with its compiled modules kept (in a temporary
``PYTHONPYCACHEPREFIX``) as in an installation; the build cache is off. Writes ``bench/results/cargo.json``
and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def cargo_path() -> str | None:
    home = os.path.expanduser("~/.cargo/bin/cargo")
    return shutil.which("cargo") or (home if os.access(home, os.X_OK) else None)


def plain_workspace(root: Path, crates: int, functions: int) -> Path:
    """``crates`` library crates of ``functions`` small numeric functions each, and a binary using them."""
    members = [f"lib{k}" for k in range(crates)] + ["app"]
    root.mkdir(parents=True)
    (root / "Cargo.toml").write_text(f"[workspace]\nmembers = {json.dumps(members)}\nresolver = \"2\"\n")
    for k in range(crates):
        src = root / f"lib{k}" / "src"
        src.mkdir(parents=True)
        dep = f'lib{k - 1} = {{ path = "../lib{k - 1}" }}\n' if k else ""
        (src.parent / "Cargo.toml").write_text(
            f'[package]\nname = "lib{k}"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n{dep}')
        body = [f"pub fn f{i}(x: &[f64]) -> f64 {{ x.iter().enumerate().map(|(j, v)| (v * {i + 1}.0 + j as f64)"
                f".sin() * v.exp().ln_1p()).sum::<f64>() / {i + 2}.0 }}" for i in range(functions)]
        total = " + ".join(f"f{i}(x)" for i in range(functions))
        prev = f" + lib{k - 1}::total(x)" if k else ""
        (src / "lib.rs").write_text("\n".join(body) + f"\npub fn total(x: &[f64]) -> f64 {{ {total}{prev} }}\n")
    app = root / "app" / "src"
    app.mkdir(parents=True)
    (app.parent / "Cargo.toml").write_text(
        f'[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n'
        f'lib{crates - 1} = {{ path = "../lib{crates - 1}" }}\n')
    (app / "main.rs").write_text(f'fn main() {{ println!("{{}}", lib{crates - 1}::total(&[0.5, 1.5, 2.5])); }}\n')
    return root


def example_without_ad(root: Path) -> Path:
    """examples/cargo with each derivative call replaced by a call of the function itself (same crates, no AD)."""
    shutil.copytree(ROOT / "examples" / "cargo", root, ignore=shutil.ignore_patterns("target", "Cargo.lock"))
    main = root / "app" / "src" / "main.rs"
    text = main.read_text()
    text = text.replace("__enzyme_autodiff(model::cube as *const (), x)", "model::cube(x)")
    text = text.replace("__enzyme_fwddiff(model::cube as *const (), x, 1.0f64)", "model::cube(x)")
    text = re.sub(r"__enzyme_autodiff_void\(model::rosenbrock as \*const \(\), enzyme_dup, x.as_ptr\(\), "
                  r"dx.as_mut_ptr\(\),\s*enzyme_const, x.len\(\)\);", "dx[0] = model::rosenbrock(x.as_ptr(), x.len());",
                  text)
    assert not re.search(r"__enzyme_\w+\(model", text), "examples/cargo changed: update bench/cargo.py"
    main.write_text(text)
    return root


def timed_build(cargo: str, ws: Path, target: Path, env: dict, profile: str) -> tuple[float, float]:
    """A clean build: (wall seconds, CPU seconds of cargo and everything it ran). The CPU time is the steadier
    of the two on a machine others share."""
    shutil.rmtree(target, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([cargo, "build", "--offline", "-j2", "--profile", profile], cwd=ws,
                          env={**env, "CARGO_TARGET_DIR": str(target)}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)  # (cargo's `rustc -` probe must not read ours)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"bench.cargo: cargo build in {ws} failed:\n{proc.stderr[-3000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(cargo: str, pairs: list[tuple[str, Path, dict, Path, dict, str]], rounds: int) -> list[dict]:
    """Each pair (name, workspace with enzcc, its env, workspace alone, its env, profile), interleaved."""
    samples: dict[str, tuple[list, list]] = {p[0]: ([], []) for p in pairs}
    with tempfile.TemporaryDirectory(prefix="enzcc-bench-cargo-") as tmp:
        for _ in range(rounds):
            for name, ws_e, env_e, ws_c, env_c, profile in pairs:
                samples[name][0].append(timed_build(cargo, ws_e, Path(tmp) / "e", env_e, profile))
                samples[name][1].append(timed_build(cargo, ws_c, Path(tmp) / "c", env_c, profile))
    rows = []
    for name, *_ in pairs:
        e, c = samples[name]
        row = {"case": name, "enzcc_all": e, "cargo_all": c}
        for k, what in ((0, "wall"), (1, "cpu")):
            row[f"enzcc_{what}_s"] = statistics.median(s[k] for s in e)
            row[f"cargo_{what}_s"] = statistics.median(s[k] for s in c)
            row[f"{what}_ratio"] = row[f"enzcc_{what}_s"] / row[f"cargo_{what}_s"]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.cargo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--crates", type=int, default=8)
    ap.add_argument("--functions", type=int, default=40)
    ap.add_argument("--out", default=str(HERE / "results" / "cargo.json"))
    args = ap.parse_args(argv)
    cargo = cargo_path()
    if cargo is None:
        print("bench.cargo: skipped: cargo is not installed")
        return 0
    sys.path.insert(0, str(ROOT))
    from enzcc.launcher import install

    with tempfile.TemporaryDirectory(prefix="enzcc-bench-cargo-ws-") as tmp:
        tmp = Path(tmp)
        (tmp / "bin").mkdir()
        install(str(tmp / "bin"))
        base = {k: v for k, v in os.environ.items() if k not in ("RUSTC", "RUSTC_WRAPPER", "RUSTFLAGS")}
        base["PATH"] = f"{os.path.dirname(cargo)}{os.pathsep}{base.get('PATH', '')}"
        # (Python's compiled modules kept, as in an installation, where they are written once)
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        wrapped = {**base, "RUSTC_WRAPPER": str(tmp / "bin" / "enzcc"), "ENZCC_NO_CACHE": "1",
                   "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}
        plain = plain_workspace(tmp / "plain", args.crates, args.functions)
        example = tmp / "example"
        shutil.copytree(ROOT / "examples" / "cargo", example, ignore=shutil.ignore_patterns("target", "Cargo.lock"))
        no_ad = example_without_ad(tmp / "example-no-ad")
        pairs = [(f"plain ({args.crates} crates, dev)", plain, wrapped, plain, base, "dev"),
                 (f"plain ({args.crates} crates, release)", plain, wrapped, plain, base, "release"),
                 ("examples/cargo with AD vs without (dev)", example, wrapped, no_ad, base, "dev"),
                 ("examples/cargo with AD vs without (release)", example, wrapped, no_ad, base, "release")]
        rows = measure(cargo, pairs, args.rounds)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "commit": commit, "rounds": args.rounds, "cores": os.cpu_count(), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"median of {args.rounds} interleaved rounds, {commit}; wall and CPU seconds (cargo and all it ran)")
    print("| case | cargo + enzcc, wall | cargo, wall | ratio | cargo + enzcc, CPU | cargo, CPU | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['case']} | {r['enzcc_wall_s']:.2f} | {r['cargo_wall_s']:.2f} | {r['wall_ratio']:.2f}x | "
              f"{r['enzcc_cpu_s']:.2f} | {r['cargo_cpu_s']:.2f} | {r['cpu_ratio']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
