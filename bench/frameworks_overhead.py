"""Where the time of a large call goes (issue 36 item 5): PyTorch's enzcc op at 1M elements against the same C
entry point called directly, taken apart step by step.

    python3 -m bench.frameworks_overhead [--rounds N] [--n N] [--threads T] [--steps K]

Function ``y = sin(x) * x`` in double (bench/frameworks.py's ``sinx``). Contestants, each a step closer to
what the op does:

- call: the entry point through ctypes on buffers allocated once ("C alone"); the same with a fresh output
  each call (``torch.empty``: allocation and first touch of 8 MB); the op (``F.apply`` under ``no_grad``);
  PyTorch's own ``sin(x) * x``;
- gradient: the vjp entry point on buffers allocated once (the seed refilled, the gradient zeroed, as each
  call needs); the primal entry then the vjp entry with fresh gradient and seed buffers (what the autograd
  path did: forward, then ``torch.zeros`` for the gradient and a private copy of the seed); the op's
  ``autograd.grad(F.apply(x).sum(), x)`` (split mode: the forward keeps enzcc's tape, the backward runs the
  reverse on it); the same with ``ENZCC_PLUGINS_SPLIT=0`` (forward, then the combined VJP, which runs the
  function again); PyTorch's own.

``--steps K`` times instead ``y[i] = z_K``, K steps of ``z <- sin(z) x[i] + z / 2`` from ``z = x[i]``: a
function whose reverse pass needs every step's value, so the combined VJP runs the steps again and the split
reverse reads them from the tape (``sinx``'s reverse needs only ``x``, which it reads again).

Samples interleave (every round one of each, in rotating order); a sample is the mean over back-to-back calls
filling 50 ms; medians over the rounds, and each contestant's ratio to "C alone".
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench.frameworks import KERNEL_C, Sampler, _plugins_importable, inputs


STEPS_C = r"""#include <stddef.h>
#include <math.h>
void sinx(const double *x, size_t n, double *y) {
  for (size_t i = 0; i < n; i++) {
    double z = x[i];
    for (int k = 0; k < STEPS; k++) z = sin(z) * x[i] + 0.5 * z;
    y[i] = z;
  }
}
"""


def reference(x, steps: int):
    """y and dy/dx (elementwise) in torch: the analytic values the contestants are checked against."""
    import torch
    if not steps:
        return torch.sin(x) * x, torch.cos(x) * x + torch.sin(x)
    xg = x.clone().requires_grad_(True)
    z = xg
    for _ in range(steps):
        z = torch.sin(z) * xg + 0.5 * z
    (g,) = torch.autograd.grad(z.sum(), xg)
    return z.detach(), g


def contestants(n: int, steps: int = 0) -> dict:
    """{(measure, contestant): fn}."""
    import torch
    from enzcc_plugins.torch import enzyme

    src = Path(tempfile.mkdtemp(prefix="enzcc-overhead-")) / "sinx.c"
    src.write_text(STEPS_C.replace("STEPS", str(steps)) if steps else KERNEL_C)
    F = enzyme(src, "sinx")
    lib = ctypes.CDLL(str(F.kernel.library))
    primal, vjp = lib.sinx_enzcc_primal, lib.sinx_enzcc_vjp
    P = ctypes.c_void_p * 3
    x = torch.from_numpy(inputs(n))
    y, gx, seed = torch.empty(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64)
    count = torch.tensor([n], dtype=torch.int64)
    a = P(x.data_ptr(), count.data_ptr(), y.data_ptr())
    d = P(gx.data_ptr(), None, seed.data_ptr())
    xg = x.clone().requires_grad_(True)
    ones = torch.ones(n, dtype=torch.float64)

    def c_fresh_out():
        out = torch.empty(n, dtype=torch.float64)
        primal(P(x.data_ptr(), count.data_ptr(), out.data_ptr()))
        return out

    def c_grad():
        seed.fill_(1.0)
        gx.zero_()
        vjp(a, d)
        return gx

    def c_grad_fresh():
        out = torch.empty(n, dtype=torch.float64)
        primal(P(x.data_ptr(), count.data_ptr(), out.data_ptr()))
        g, s = torch.zeros(n, dtype=torch.float64), ones.clone()
        vjp(P(x.data_ptr(), count.data_ptr(), y.data_ptr()), P(g.data_ptr(), None, s.data_ptr()))
        return g

    augfwd, rev = F.kernel.split()

    def c_grad_split():  # the split entry points: the forward keeps the tape, the reverse consumes it
        out, g, s = torch.empty(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64), torch.empty(n, dtype=torch.float64)
        d2 = P(g.data_ptr(), None, s.data_ptr())
        t = augfwd(P(x.data_ptr(), count.data_ptr(), out.data_ptr()), d2)
        s.copy_(ones)
        rev(P(x.data_ptr(), count.data_ptr(), out.data_ptr()), d2, t)
        return g

    def op_grad_combined():  # the op before the split-mode gradient: forward, then the combined VJP
        os.environ["ENZCC_PLUGINS_SPLIT"] = "0"
        try:
            return torch.autograd.grad(F.apply(xg).sum(), xg)[0]
        finally:
            del os.environ["ENZCC_PLUGINS_SPLIT"]

    def op_call():
        with torch.no_grad():
            return F.apply(x)

    want_y, want_g = reference(x, steps)

    def own(v):  # the same function in PyTorch's own ops
        z = v if steps else torch.sin(v) * v
        for _ in range(steps):
            z = torch.sin(z) * v + 0.5 * z
        return z
    fns = {("call", "C alone"): lambda: primal(a), ("call", "C, fresh output"): c_fresh_out,
           ("call", "enzcc op"): op_call, ("call", "own ops"): lambda: own(x),
           ("grad", "C alone"): c_grad, ("grad", "C, forward + fresh buffers"): c_grad_fresh,
           ("grad", "C, augfwd + rev, fresh buffers"): c_grad_split,
           ("grad", "enzcc op"): lambda: torch.autograd.grad(F.apply(xg).sum(), xg)[0],
           ("grad", "enzcc op, combined VJP"): op_grad_combined,
           ("grad", "own ops"): lambda: torch.autograd.grad(own(xg).sum(), xg)[0]}
    for (m, who), fn in fns.items():  # every contestant computes the right thing
        got = fn()
        if who == "C alone" and m == "call":
            got = y
        tol = 1e-10 if steps else 1e-13  # (libm's and torch's sin differ by an ulp: the steps amplify it)
        if not torch.allclose(got, want_y if m == "call" else want_g, rtol=tol, atol=tol):
            raise AssertionError(f"{m} {who}: wrong result")
    return fns


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.frameworks_overhead", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's)")
    ap.add_argument("--steps", type=int, default=0, help="time the K-step recurrence instead of sin(x) * x")
    args = ap.parse_args(argv)
    _plugins_importable()
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    fns = contestants(args.n, args.steps)
    keys = list(fns)
    sampler, samples = Sampler(0.05), {k: [] for k in keys}
    for r in range(args.rounds):
        k = r % len(keys)
        for key in keys[k:] + keys[:k]:
            samples[key].append(sampler.sample(key, fns[key])[0])
    what = f"y = {args.steps} steps of z <- sin(z) x + z / 2" if args.steps else "y = sin(x) * x"
    print(f"{what}, n = {args.n:,}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"medians of {args.rounds} interleaved rounds")
    for measure in ("call", "grad"):
        base = statistics.median(samples[measure, "C alone"])
        for (m, who), ts in samples.items():
            if m == measure:
                t = statistics.median(ts)
                print(f"| {measure} | {who} | {t * 1e3:.2f} ms | {t / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
