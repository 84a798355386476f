"""The paper's line in a training loop, ``enzyme("test.c", "f").apply(inp)``, against the same op hoisted out of
the loop (issue 36, item 3: within 1.2x, and no growth of the process).

    python3 -m bench.frameworks_memo [--rounds N] [--calls N] [--n N]

PyTorch, the seed signature ``void f(const double *in, size_t n, double *out)`` (``y = sin(x) * x``) on
``--n`` elements (default 16: the call overhead is what the memo could add to). Two measurements, each as
the hoisted op and as the paper's line: the forward call alone, and a training step (forward, ``sum``,
backward). Samples are interleaved (every round one sample of each, in an order that alternates); a sample is
the mean of ``--calls`` back-to-back calls; the table gives the medians over the rounds and the median over the
rounds of each round's ratio (paired samples, taken back to back, so that load elsewhere cancels), and the
ratio of the fastest samples (the least disturbed by other processes). The
process's maximum resident size is printed before and after 300 further calls of the paper's line.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = r"""#include <math.h>
#include <stddef.h>
void f(const double *in, size_t n, double *out) {
  for (size_t i = 0; i < n; i++) out[i] = sin(in[i]) * in[i];
}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.frameworks_memo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=101)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--n", type=int, default=16)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    from tests.enzcc_testing import plugins_importable
    plugins_importable()
    import torch
    from enzcc_plugins.torch import enzyme

    src = Path(tempfile.mkdtemp(prefix="enzcc-memo-")) / "test.c"
    src.write_text(SOURCE)
    test_c = str(src)
    F = enzyme(test_c, "f")
    x = torch.linspace(-2, 2, args.n, dtype=torch.float64)
    xg = x.clone().requires_grad_(True)
    assert torch.allclose(F.apply(x), torch.sin(x) * x)

    def forward_hoisted():
        F.apply(x)

    def forward_paper():
        enzyme(test_c, "f").apply(x)

    def step_hoisted():
        F.apply(xg).sum().backward()

    def step_paper():
        enzyme(test_c, "f").apply(xg).sum().backward()

    contestants = {"forward, hoisted": forward_hoisted, "forward, paper's line": forward_paper,
                   "step, hoisted": step_hoisted, "step, paper's line": step_paper}
    samples = {k: [] for k in contestants}
    for fn in contestants.values():  # warm up
        for _ in range(200):
            fn()
    names = list(contestants)
    for r in range(args.rounds):
        for k in (names if r % 2 == 0 else names[::-1]):
            fn = contestants[k]
            t = time.perf_counter()
            for _ in range(args.calls):
                fn()
            samples[k].append((time.perf_counter() - t) / args.calls)
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"torch {torch.__version__}, n = {args.n}, {args.rounds} rounds x {args.calls} calls (medians)")
    for k in names:
        print(f"  {k:24s} {med[k] * 1e6:8.2f} us")
    for what in ("forward", "step"):
        paper, hoisted = samples[what + ", paper's line"], samples[what + ", hoisted"]
        ratios = [p / h for p, h in zip(paper, hoisted)]
        of_medians = statistics.median(paper) / statistics.median(hoisted)
        print(f"  {what}: paper's line / hoisted = {statistics.median(ratios):.3f} (median of the rounds' ratios; "
              f"ratio of the medians {of_medians:.3f}, of the minimums {min(paper) / min(hoisted):.3f})")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(300):
        enzyme(test_c, "f").apply(xg).sum().backward()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"  max RSS before / after 300 more calls of the paper's line: {before / 1024:.1f} / {after / 1024:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
