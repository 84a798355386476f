"""Analysis helper (not part of ``make bench``): how much each derivative writes to enzcc's tape per call.

Builds every benchmark in both AD modes with enzcc's own pipeline, run in-process with one hook added after
the AD stage: the tape's reserve and bump helpers count the bytes they hand out and each synthesized ``diffe_*``
function counts its calls (the hooked builds are slower; only the counts are meaningful). Runs each build once
and prints, per gradient call, the number of tape pushes and the bytes pushed.

    python3 -m bench.tape_stats [--only gmm,ba] [--data-dir bench/data] [--build-dir bench/build/tape]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __package__ in (None, ""):
    sys.path.insert(0, str(HERE.parent))
from bench import gen  # noqa: E402

COUNTER_C = r"""
#include <stdio.h>
static long long pushes, bytes, calls;
void __bench_tape_count(long n) { pushes++; bytes += n; }
void __bench_grad_call(void) { calls++; }
__attribute__((destructor)) static void bench_tape_report(void) {
  fprintf(stderr, "TAPE calls=%lld pushes=%lld bytes=%lld\n", calls, pushes, bytes);
}
"""

#: the helpers that hand out tape bytes: reserve (with a capacity test) and bump (room made ahead of a loop)
RESERVE = re.compile(r"(define internal ptr @__enzcc_tape_(?:reserve|bump)\(ptr %(\S+), i64 %(\S+)\) \{\n(?:\S+:\n)?)")
DIFFE = re.compile(r"(define [^\n]*@diffe_[^\n]*\{\n(?:\S+:\n)?)")


def instrument(text: str) -> str:
    text, n = RESERVE.subn(lambda m: m.group(1) + f"  call void @__bench_tape_count(i64 %{m.group(3)})\n", text)
    if not n:
        return text
    text = DIFFE.sub(lambda m: m.group(1) + "  call void @__bench_grad_call()\n", text)
    for decl in ("void @__bench_tape_count(i64", "void @__bench_grad_call("):
        if not re.search(r"^(define|declare) [^\n]*" + re.escape(decl), text, re.M):
            text += f"\ndeclare {decl})\n"
    return text


def install_hook() -> None:
    import llvmlite.binding as llvm

    from enzcc.backend import pipeline

    original = pipeline.ad_stage

    def hooked(mod, opts, where, tm=None):
        mod, changed = original(mod, opts, where, tm)
        if changed:
            mod = llvm.parse_assembly(instrument(str(mod)))
            mod.verify()
        return mod, changed

    pipeline.ad_stage = hooked


def build(name: str, mode: str, build_dir: Path) -> Path:
    from enzcc.cli import main as enzcc_main

    counter = build_dir / "tape_counter.c"
    counter.write_text(COUNTER_C)
    exe = build_dir / f"{name}_{mode.replace('-', '_')}_tape"
    source, extra = gen.VARIANTS.get(name, (name, []))  # a variant: another program's source with flags
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = enzcc_main(["-O2", f"--ad-mode={mode}", str(HERE / f"{source}.c"), str(counter), *extra, "-lm",
                         "-o", str(exe)])
    if rc != 0:
        raise SystemExit(f"{name} ({mode}): enzcc failed:\n{err.getvalue()}")
    return exe


def measure(exe: Path, data: Path) -> dict:
    proc = subprocess.run([str(exe), str(data), "--reps", "1", "--min-time", "0", "--no-fd-time", "--no-check"],
                          capture_output=True, text=True, check=True)
    m = re.search(r"TAPE calls=(\d+) pushes=(\d+) bytes=(\d+)", proc.stderr)
    calls, pushes, nbytes = (int(g) for g in m.groups())
    return {"grad_calls": calls, "pushes_per_call": pushes / calls, "bytes_per_call": nbytes / calls}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.tape_stats", description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--data-dir", type=Path, default=gen.DEFAULT_OUT)
    ap.add_argument("--build-dir", type=Path, default=HERE / "build" / "tape")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(gen.BENCHMARKS)
    if not gen.up_to_date(args.data_dir, "full"):
        gen.generate(args.data_dir, "full", quiet=True)
    args.build_dir.mkdir(parents=True, exist_ok=True)
    install_hook()
    print(f"{'benchmark':10} {'AD mode':11} {'pushes/call':>12} {'MB/call':>9}")
    for name in names:
        for mode in ("after-opt", "before-opt"):
            r = measure(build(name, mode, args.build_dir), args.data_dir / f"{name}.txt")
            print(f"{name:10} {mode:11} {r['pushes_per_call']:12.0f} {r['bytes_per_call'] / 1e6:9.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
