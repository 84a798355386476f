"""``python3 -m tests.fuzz`` (``make fuzz N=500 SEED=1 O=0,1,2,3``): generate, compile, check, classify,
shrink. Prints counts per class and -O level, writes ``<out>/results.jsonl``, ``<out>/summary.json`` and the
reduced failures under ``<out>/failures/``; exits 1 when any outcome is an enzcc bug."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from tests.fuzz.gen import generate, regression_text
from tests.fuzz.run import BUG_CLASSES, OK_CLASSES, SUFFIX, run_batch, run_one, same_failure
from tests.fuzz.shrink import shrink


def _batch(seed: int, indices: list[int], opt: int, lang: str):
    return run_batch([generate(seed, i) for i in indices], opt, lang)


def fuzz(n: int, seed: int, opts: list[int], jobs: int = 2, batch: int = 8, first: int = 0, lang: str = "c"):
    """Outcomes of programs ``first .. first+n-1`` of ``seed`` at each -O level, in a process pool."""
    tasks = [(seed, list(range(i, min(i + batch, first + n))), opt, lang)
             for opt in opts for i in range(first, first + n, batch)]
    outcomes = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_batch, *t) for t in tasks]
        for done, fut in enumerate(as_completed(futures), 1):
            outcomes += fut.result()
            if sys.stderr.isatty():
                print(f"\r{done}/{len(tasks)} batches", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return outcomes


def table(outcomes, opts) -> str:
    counts = Counter((o.cls, o.opt) for o in outcomes)
    classes = [c for c in OK_CLASSES + BUG_CLASSES if any(counts[(c, o)] for o in opts)]
    head = f"{'class':<22}" + "".join(f"{'-O' + str(o):>8}" for o in opts) + f"{'total':>8}"
    lines = [head, "-" * len(head)]
    for c in classes:
        row = [counts[(c, o)] for o in opts]
        lines.append(f"{c + (' *' if c in BUG_CLASSES else ''):<22}" + "".join(f"{v:>8}" for v in row)
                     + f"{sum(row):>8}")
    total = [sum(counts[(c, o)] for c in classes) for o in opts]
    lines.append(f"{'programs':<22}" + "".join(f"{v:>8}" for v in total) + f"{sum(total):>8}")
    lines.append("(* an enzcc bug)")
    return "\n".join(lines)


def reduce_failures(outcomes, seed: int, out: Path, per_class: int, max_tries: int, lang: str = "c") -> list[Path]:
    """Shrink up to ``per_class`` failures of each bug class; write each as a stand-alone C (or C++) file and
    in the regression format of ``tests/fuzz/regressions`` (``.reg``)."""
    written, taken = [], Counter()
    (out / "failures").mkdir(parents=True, exist_ok=True)
    for o in sorted((o for o in outcomes if o.cls in BUG_CLASSES), key=lambda o: (o.cls, o.opt, o.name)):
        if taken[o.cls] >= per_class:
            continue
        taken[o.cls] += 1
        index = int(o.name[1:])
        prog = generate(seed, index)
        small, tries = shrink(prog, lambda p: same_failure(o, run_one(p, o.opt, lang)), max_tries)
        stem = out / "failures" / f"{o.cls}-seed{seed}-{o.name}-O{o.opt}"
        note = (f"enzcc fuzz: seed {seed} program {index} at -O{o.opt} ({lang}), reduced in {tries} tries: "
                f"{o.cls}: {o.detail}").replace("*/", "* /")
        path = stem.with_suffix(SUFFIX[lang])
        path.write_text(f"/* {note}\n   build: enzcc -O{o.opt} -w {path.name} -lm */\n" + small.source())
        stem.with_suffix(".reg").write_text(regression_text(small, note))
        print(f"reduced {o.cls} ({o.name} -O{o.opt}, {tries} tries): {path} (regression test: copy "
              f"{stem.name}.reg into tests/fuzz/regressions/)")
        written.append(path)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tests.fuzz", description=__doc__)
    ap.add_argument("--n", type=int, default=200, help="programs per -O level")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0, help="index of the first program")
    ap.add_argument("--opt", default="0,1,2,3", help="comma-separated -O levels")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--batch", type=int, default=8, help="programs compiled into one executable")
    ap.add_argument("--shrink", type=int, default=2, help="failures reduced per class (0: none)")
    ap.add_argument("--shrink-tries", type=int, default=300)
    ap.add_argument("--lang", choices=sorted(SUFFIX), default="c", help="compile the programs as C or C++")
    ap.add_argument("--out", default="build/fuzz")
    ap.add_argument("--enzcc-flags", default=None,
                    help="extra enzcc flags, e.g. '--ad-inline=none' (sets ENZCC_FUZZ_FLAGS)")
    args = ap.parse_args(argv)
    opts = [int(o) for o in args.opt.split(",") if o.strip()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if args.enzcc_flags is not None:
        os.environ["ENZCC_FUZZ_FLAGS"] = args.enzcc_flags
    outcomes = fuzz(args.n, args.seed, opts, args.jobs, args.batch, args.first, args.lang)
    elapsed = time.monotonic() - start
    with open(out / "results.jsonl", "w") as fh:
        for o in sorted(outcomes, key=lambda o: (o.opt, int(o.name[1:]))):
            fh.write(json.dumps({"seed": args.seed, "lang": args.lang, **o.as_dict()}) + "\n")
    print(table(outcomes, opts))
    print(f"{len(outcomes)} outcomes in {elapsed:.0f} s (seed {args.seed}, programs {args.first}.."
          f"{args.first + args.n - 1}, {args.lang})")
    bugs = [o for o in outcomes if o.cls in BUG_CLASSES]
    for o in sorted(bugs, key=lambda o: (o.cls, o.opt, int(o.name[1:])))[:40]:
        print(f"  {o.cls:<15} {o.name:>6} -O{o.opt}: {o.detail[:160]}")
    summary = {"seed": args.seed, "lang": args.lang, "first": args.first, "n": args.n, "opts": opts, "seconds": round(elapsed, 1),
               "counts": {f"{c}@O{o}": k for (c, o), k in Counter((o.cls, o.opt) for o in outcomes).items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if bugs and args.shrink:
        reduce_failures(bugs, args.seed, out, args.shrink, args.shrink_tries, args.lang)
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
