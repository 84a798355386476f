"""Framework benchmark: the same elementwise C function called from JAX, PyTorch and TensorFlow through
enzcc_plugins, against Enzyme-JAX's ``cpp_call`` on the same source and against each framework's own version.

    python3 -m bench.frameworks [--quick] [--rounds N] [--only jax,torch,tensorflow] [--no-enzyme] [--cflags FLAGS]
                                [--out FILE]

The function is ``y[i] = sin(x[i]) * x[i]`` in double (``sinx`` below). Measured per framework: the call
overhead (16 elements), and the time of a call and of a gradient (``d sum(f(x)) / dx``) at 16 and at 1M
elements (64K with --quick); for JAX also ``jax.jacfwd`` and ``jax.jacrev`` at 128 elements (a vmap of the JVP
or VJP over 128 tangents or cotangents, which the plugin runs in vector mode; not measured for Enzyme-JAX); for
JAX, PyTorch and TensorFlow (``tf.vectorized_map``) ``vmap`` of the function and of its gradient over 256
examples of 16 and of 1024 elements (one native call for the batch; its "kernel alone" is the entry point once
over all the batch's elements). Every contestant runs compiled: ``jax.jit`` for JAX and Enzyme-JAX,
``tf.function`` for TensorFlow, eager PyTorch (the plugin's op is a custom op; eager is how PyTorch code
calls it). Contestants:

- **enzcc**: the plugin (``enzcc_plugins.jax`` / ``.torch`` / ``.tensorflow``), the function compiled by enzcc;
- **Enzyme-JAX**: ``cpp_call`` (PyPI ``enzyme-ad``, in a virtual environment of its own, see bench/enzyme.py)
  on a C++ file that includes the same C source, for the same CPU target as enzcc's builds; it runs in a
  worker process that answers one timing request at a time, so its samples interleave with the others';
- **native**: the framework's own ``sin(x) * x`` and its autodiff;
- **kernel alone**: the library's entry points (``sinx_enzcc_primal`` / ``sinx_enzcc_vjp``, plugins/ABI.md)
  called through ctypes on buffers allocated once: what the compiled code itself costs, without a framework.

Samples are interleaved: every round takes one sample of each contestant for each measurement, in an order
that rotates from round to round, so load from elsewhere on the machine falls on all alike. A sample is the
mean time of as many back-to-back calls as fill ``min_time``; the table reports medians over the rounds and
the ratios enzcc / Enzyme-JAX and enzcc / native. Before timing, each contestant's result and gradient are
checked against the analytic values. Writes bench/results/frameworks.json (frameworks-quick.json with --quick).

Only the standard library is imported at the top: the Enzyme-JAX worker (``--enzyme-worker``) runs this file
with the virtual environment's Python, which has neither rich nor this project.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

KERNEL_C = r"""#include <math.h>
#include <stddef.h>
/* the benchmark function: y[i] = sin(x[i]) * x[i] */
void sinx(const double *x, size_t n, double *y) {
  for (size_t i = 0; i < n; i++) y[i] = sin(x[i]) * x[i];
}
"""

# Enzyme-JAX's cpp_call calls f(out, in) with its tensor types; N is the static size of this build
ENZYME_WRAPPER = r"""
#define N {n}
#include "{source}"
template <typename O, typename I> void f(O &out, const I &in) {{ sinx(&in[0], N, &out[0]); }}
"""

SETTINGS = {"full": {"rounds": 11, "min_time": 0.05, "large": 1 << 20},
            "quick": {"rounds": 2, "min_time": 0.002, "large": 1 << 16}}


def measurements(large: int) -> list[tuple[str, int]]:
    """(operation, size) pairs, in table order. "floor" is a trivial jitted JAX function (x * 2) in the same
    process: JAX's own dispatch cost, which the two processes (this one and Enzyme-JAX's worker, with its own
    jax) need not share; a call's overhead is its time less its process's floor."""
    return [("floor", 16), ("call", 16), ("grad", 16), ("call", large), ("grad", large), ("jacfwd", JACOBIAN_N),
            ("jacrev", JACOBIAN_N)] + [(f"{op} x{m}", VMAP_B) for m in VMAP_SIZES for op in ("vmap", "vmap grad")]


JACOBIAN_N = 128
VMAP_B = 256
"""Examples of the vmap measurements: ``vmap xM`` is the function over 256 examples of M elements (a batch of
shape (256, M)), ``vmap grad xM`` the per-example gradients (vmap of grad); JAX, PyTorch and TensorFlow."""
VMAP_SIZES = (16, 1024)
"""Size of the ``jax.jacfwd`` and ``jax.jacrev`` measurements (JAX only)."""
CFLAGS: list[str] = []
"""Extra enzcc flags of the plugin's and the kernel's builds (``--cflags``: e.g. ``-fveclib=libmvec
-fno-math-errno``, glibc's vector math, an opt-in accurate to 4 ulp)."""
ENZYME_JAX_OPS = ("floor", "call", "grad")
"""The measurements the Enzyme-JAX worker answers."""


class Sampler:
    """One timing sample of a callable: (wall, CPU) seconds per call, the means over as many back-to-back calls
    as take ``min_time`` of wall time, after one untimed call. CPU time is the whole process's (every thread):
    on a shared machine it counts the work done, not the waiting for a core. The number of calls per key is
    calibrated once (after a warm-up call), then kept."""

    def __init__(self, min_time: float):
        self.min_time = min_time
        self.calls: dict = {}

    def _run(self, fn, n: int) -> tuple[float, float]:
        fn()  # untimed: the first call after another contestant's meets caches and an allocator state it left
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            fn()
        return time.perf_counter() - wall, time.process_time() - cpu

    def sample(self, key, fn) -> tuple[float, float]:
        n = self.calls.get(key)
        if n is None:
            fn()  # warm-up: compilation, first-touch of buffers
            n = 1
            while True:
                wall, cpu = self._run(fn, n)
                if wall >= self.min_time or n >= 1 << 20:
                    break
                n = max(n * 2, int(n * self.min_time / max(wall, 1e-9) * 1.1) + 1)
            self.calls[key] = n
        else:
            wall, cpu = self._run(fn, n)
        return wall / n, cpu / n


def inputs(n: int):
    """The benchmark input: n points spread over [-3, 3] (NumPy float64)."""
    import numpy as np
    return np.linspace(-3.0, 3.0, n)


def check(name: str, got_y, got_g, n: int) -> None:
    """The contestant's f(x) and d sum(f(x))/dx against sin(x)*x and cos(x)*x + sin(x)."""
    import numpy as np
    x = inputs(n)
    for what, got, want in (("f(x)", got_y, np.sin(x) * x), ("gradient", got_g, np.cos(x) * x + np.sin(x))):
        got = np.asarray(got, dtype=np.float64).reshape(-1)
        err = float(np.max(np.abs(got - want))) if n else 0.0
        if got.shape != want.shape or not err <= 1e-12 * max(1.0, float(np.max(np.abs(want)))):
            raise AssertionError(f"{name}: {what} at n={n} differs from the analytic value (max error {err:g})")


def check_jacobian(name: str, got, want) -> None:
    import numpy as np
    err = float(np.max(np.abs(np.asarray(got) - want)))
    if np.shape(got) != want.shape or not err <= 1e-12 * max(1.0, float(np.max(np.abs(want)))):
        raise AssertionError(f"{name}: the Jacobian differs from the analytic one (max error {err:g})")


# --- the Enzyme-JAX worker (inside its virtual environment) ----------------------------------------------------


def enzyme_worker(source: str, sizes: list[int], min_time: float) -> int:
    """Serve timing requests for cpp_call on ``source``: one JSON line per request on stdin
    ({"op": "call"|"grad", "n": N}), one JSON line per answer ({"t": wall seconds, "cpu": CPU seconds})."""
    os.environ.setdefault("JAX_ENABLE_X64", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import subprocess

    import jax
    import jax.numpy as jnp
    from enzyme_ad.jax import cpp_call

    resource = subprocess.run(["clang-22", "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
    # the same CPU target as enzcc's builds (see bench/enzyme.py): cc1 flags
    flags = ("-isystem", f"{resource}/include", "-O2",
             *os.environ.get("ENZCC_ENZYME_FLAGS", "-target-cpu x86-64 -tune-cpu generic").split())
    fns = {}
    for n in sizes:
        text = ENZYME_WRAPPER.format(n=n, source=source)

        def call(x, n=n, text=text):
            return cpp_call(x, out_shapes=[jax.core.ShapedArray((n,), jnp.float64)], source=text, fn="f",
                            argv=flags)[0]

        x = jnp.asarray(inputs(n))
        f = jax.jit(call)
        g = jax.jit(jax.grad(lambda x, call=call: jnp.sum(call(x))))
        check("Enzyme-JAX", f(x), g(x), n)
        fns["call", n] = (lambda f=f, x=x: f(x).block_until_ready())
        fns["grad", n] = (lambda g=g, x=x: g(x).block_until_ready())
    floor = jax.jit(lambda x: x * 2.0)
    x16 = jnp.asarray(inputs(16))
    fns["floor", 16] = lambda: floor(x16).block_until_ready()
    print(json.dumps({"ready": True, "jax": jax.__version__}), flush=True)
    sampler = Sampler(min_time)
    for line in sys.stdin:
        req = json.loads(line)
        key = (req["op"], int(req["n"]))
        wall, cpu = sampler.sample(key, fns[key])
        print(json.dumps({"t": wall, "cpu": cpu}), flush=True)
    return 0


class EnzymeJax:
    """The worker process, started in the Enzyme-JAX virtual environment."""

    def __init__(self, python: str, source: Path, sizes: list[int], min_time: float):
        import subprocess
        self.proc = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--enzyme-worker", str(source), ",".join(map(str, sizes)),
             str(min_time)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        hello = self.proc.stdout.readline()
        if not hello:
            err = self.proc.stderr.read().strip().splitlines()
            self.proc.wait()
            raise RuntimeError(f"the Enzyme-JAX worker failed: {(err or ['no output'])[-1]}")
        self.jax_version = json.loads(hello).get("jax")

    def sample(self, op: str, n: int) -> tuple[float, float]:
        self.proc.stdin.write(json.dumps({"op": op, "n": n}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Enzyme-JAX worker died: {self.proc.stderr.read().strip()[-300:]}")
        answer = json.loads(line)
        return answer["t"], answer["cpu"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


# --- the frameworks (in this process) ------------------------------------------------------------------------


def setup_jax(source: Path, sizes: list[int]) -> dict:
    """{(op, n): {"enzcc": fn, "native": fn}} for JAX; fn() runs once and waits for the result."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    from enzcc_plugins.jax import enzyme

    f = enzyme(source, "sinx", cflags=CFLAGS)
    out = {}
    for impl, fn in (("enzcc", f), ("native", lambda x: jnp.sin(x) * x)):
        call = jax.jit(fn)
        grad = jax.jit(jax.grad(lambda x, fn=fn: jnp.sum(fn(x))))
        for n in sizes:
            x = jnp.asarray(inputs(n))
            check(f"jax {impl}", call(x), grad(x), n)
            out.setdefault(("call", n), {})[impl] = lambda call=call, x=x: call(x).block_until_ready()
            out.setdefault(("grad", n), {})[impl] = lambda grad=grad, x=x: grad(x).block_until_ready()
    floor, x16 = jax.jit(lambda x: x * 2.0), jnp.asarray(inputs(16))
    out["floor", 16] = {"enzcc": lambda: floor(x16).block_until_ready()}
    xj = jnp.asarray(inputs(JACOBIAN_N))
    for impl, fn in (("enzcc", f), ("native", lambda x: jnp.sin(x) * x)):
        for op, transform in (("jacfwd", jax.jacfwd), ("jacrev", jax.jacrev)):
            jac = jax.jit(transform(fn))
            x = np.asarray(xj)
            check_jacobian(f"jax {impl} {op}", jac(xj), np.diag(np.cos(x) * x + np.sin(x)))
            out.setdefault((op, JACOBIAN_N), {})[impl] = lambda jac=jac: jac(xj).block_until_ready()
        for m in VMAP_SIZES:
            X = jnp.asarray(inputs(VMAP_B * m).reshape(VMAP_B, m))
            v = jax.jit(jax.vmap(fn))
            g = jax.jit(jax.vmap(jax.grad(lambda x, fn=fn: jnp.sum(fn(x)))))
            check(f"jax {impl} vmap", v(X), g(X), VMAP_B * m)
            out.setdefault((f"vmap x{m}", VMAP_B), {})[impl] = lambda v=v, X=X: v(X).block_until_ready()
            out.setdefault((f"vmap grad x{m}", VMAP_B), {})[impl] = lambda g=g, X=X: g(X).block_until_ready()
    return out


def setup_torch(source: Path, sizes: list[int]) -> dict:
    import torch
    from enzcc_plugins.torch import enzyme

    F = enzyme(source, "sinx", cflags=CFLAGS)
    out = {}
    for impl, fn in (("enzcc", F.apply), ("native", lambda x: torch.sin(x) * x)):
        for n in sizes:
            x = torch.from_numpy(inputs(n))
            xg = x.clone().requires_grad_(True)

            def call(fn=fn, x=x):
                with torch.no_grad():
                    return fn(x)

            def grad(fn=fn, xg=xg):
                return torch.autograd.grad(fn(xg).sum(), xg)[0]

            check(f"torch {impl}", call(), grad(), n)
            out.setdefault(("call", n), {})[impl] = call
            out.setdefault(("grad", n), {})[impl] = grad
        for m in VMAP_SIZES:  # torch.func.vmap of the op, and of its gradient: one native call for the batch
            X = torch.from_numpy(inputs(VMAP_B * m).reshape(VMAP_B, m))
            v = torch.func.vmap(fn)
            g = torch.func.vmap(torch.func.grad(lambda x, fn=fn: fn(x).sum()))

            def vcall(v=v, X=X):
                with torch.no_grad():
                    return v(X)
            check(f"torch {impl} vmap", vcall(), g(X), VMAP_B * m)
            out.setdefault((f"vmap x{m}", VMAP_B), {})[impl] = vcall
            out.setdefault((f"vmap grad x{m}", VMAP_B), {})[impl] = lambda g=g, X=X: g(X)
    return out


def setup_tensorflow(source: Path, sizes: list[int]) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    from enzcc_plugins.tensorflow import enzyme

    def plugin(x):
        return enzyme(x, filename=str(source), function="sinx", cflags=CFLAGS)

    out = {}
    for impl, fn in (("enzcc", plugin), ("native", lambda x: tf.sin(x) * x)):
        call = tf.function(fn, autograph=False)

        @tf.function(autograph=False)
        def grad(x, fn=fn):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.reduce_sum(fn(x))
            return tape.gradient(y, x)

        for n in sizes:
            x = tf.constant(inputs(n))
            check(f"tensorflow {impl}", call(x).numpy(), grad(x).numpy(), n)
            out.setdefault(("call", n), {})[impl] = lambda call=call, x=x: call(x).numpy()
            out.setdefault(("grad", n), {})[impl] = lambda grad=grad, x=x: grad(x).numpy()
        # tf.vectorized_map of the op and of its gradient: one batched op (the op's pfor rule)
        vcall = tf.function(lambda X, fn=fn: tf.vectorized_map(fn, X), autograph=False)
        vgrad = tf.function(lambda X, grad=grad: tf.vectorized_map(grad.python_function, X), autograph=False)
        for m in VMAP_SIZES:
            X = tf.constant(inputs(VMAP_B * m).reshape(VMAP_B, m))
            check(f"tensorflow {impl} vmap", vcall(X).numpy(), vgrad(X).numpy(), VMAP_B * m)
            out.setdefault((f"vmap x{m}", VMAP_B), {})[impl] = lambda vcall=vcall, X=X: vcall(X).numpy()
            out.setdefault((f"vmap grad x{m}", VMAP_B), {})[impl] = lambda vgrad=vgrad, X=X: vgrad(X).numpy()
    return out


FRAMEWORKS = {"jax": setup_jax, "torch": setup_torch, "tensorflow": setup_tensorflow}


def setup_kernel(source: Path, sizes: list[int]) -> dict:
    """{(op, n): fn}: the entry points through ctypes on preallocated buffers (the gradient resets the seed,
    which the vjp entry consumes, and zeroes the gradient it accumulates into, as every caller must)."""
    import ctypes

    import numpy as np
    from enzcc_plugins import In, Int, Out, load_kernel

    k = load_kernel(source, "sinx", [In("x"), Int("n", value=lambda x: x.size), Out("y", shape=lambda x: x.shape)],
                    cflags=CFLAGS)
    lib = ctypes.CDLL(str(k.library))
    primal, vjp = lib.sinx_enzcc_primal, lib.sinx_enzcc_vjp
    P = ctypes.c_void_p * 3
    out = {}
    for n in sizes:
        x, y, dx, dy = inputs(n), np.empty(n), np.zeros(n), np.ones(n)
        count = np.array([n], np.int64)
        keep = (x, y, dx, dy, count)  # the address arrays below do not keep the buffers alive: the closures do
        a = P(x.ctypes.data, count.ctypes.data, y.ctypes.data)
        d = P(dx.ctypes.data, None, dy.ctypes.data)

        def call(a=a, keep=keep):
            primal(a)

        def grad(a=a, d=d, keep=keep):
            keep[3].fill(1.0)
            keep[2].fill(0.0)
            vjp(a, d)
            return keep[2]

        call()
        check("kernel alone", y, grad(), n)
        out["call", n] = call
        out["grad", n] = grad
    return out


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]


def median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def fmt_time(t: float | None) -> str:
    if t is None:
        return "-"
    if t < 1e-3:
        return f"{t * 1e6:.1f} µs"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


def fmt_ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or not b else f"{a / b:.2f}x"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import datetime
    import platform

    ap = argparse.ArgumentParser(prog="python3 -m bench.frameworks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 rounds, short samples, 64K elements as the large size")
    ap.add_argument("--rounds", type=int, help="rounds of interleaved samples (default 11; quick 2)")
    ap.add_argument("--only", help="comma-separated frameworks (jax, torch, tensorflow)")
    ap.add_argument("--no-enzyme", action="store_true", help="skip Enzyme-JAX")
    ap.add_argument("--torch-threads", type=int, help="torch.set_num_threads for PyTorch's own ops (default: "
                    "PyTorch's; the C function runs on one thread)")
    ap.add_argument("--cflags", default="", help="extra enzcc flags for the plugin's builds and the kernel alone "
                    "(e.g. '-fveclib=libmvec -fno-math-errno')")
    ap.add_argument("--out", help="the JSON file (default bench/results/frameworks[-quick].json)")
    args = ap.parse_args(argv)
    CFLAGS[:] = args.cflags.split()

    from rich.console import Console
    from rich.table import Table

    sys.path.insert(0, str(HERE.parent))  # run from anywhere: the checkout's enzcc_plugins when not installed
    _plugins_importable()

    console = Console(width=None if sys.stdout.isatty() else 150)
    mode = "quick" if args.quick else "full"
    settings = dict(SETTINGS[mode])
    if args.rounds:
        settings["rounds"] = args.rounds
    if CFLAGS:
        settings["cflags"] = CFLAGS  # (recorded in the JSON with the settings)
    if args.torch_threads:
        settings["torch_threads"] = args.torch_threads
        import torch
        torch.set_num_threads(args.torch_threads)
    large = settings["large"]
    sizes = [16, large]
    work = HERE / "build" / "frameworks"
    work.mkdir(parents=True, exist_ok=True)
    source = work / "sinx.c"
    if not source.exists() or source.read_text() != KERNEL_C:
        source.write_text(KERNEL_C)

    chosen = args.only.split(",") if args.only else list(FRAMEWORKS)
    unknown = set(chosen) - set(FRAMEWORKS)
    if unknown:
        ap.error(f"unknown framework(s): {', '.join(sorted(unknown))}")
    frameworks, skipped = {}, {}
    for name in chosen:
        with console.status(f"{name}: building and checking"):
            try:
                frameworks[name] = FRAMEWORKS[name](source, sizes)
            except Exception as e:  # a plugin that does not import or fails its check: a skipped row
                skipped[name] = _reason(e)
                console.print(f"[yellow]{name} skipped: {skipped[name]}")

    enzyme, enzyme_info = None, {}
    if args.no_enzyme:
        skipped["enzyme_jax"] = "--no-enzyme"
    else:
        from bench import enzyme as enzyme_venv
        py = enzyme_venv.venv_dir() / "bin" / "python"
        with console.status("Enzyme-JAX: virtual environment, compiling the kernels"):
            if args.quick and not py.is_file():
                why = f"quick mode does not create the Enzyme-JAX virtual environment ({py} missing)"
            else:
                python, why = enzyme_venv.ensure_venv()
                if python:
                    try:
                        enzyme = EnzymeJax(python, source, sizes, settings["min_time"])
                        enzyme_info = {"package": enzyme_venv.PACKAGE, "jax": enzyme.jax_version}
                    except Exception as e:
                        why = _reason(e)
        if enzyme is None:
            skipped["enzyme_jax"] = why
            console.print(f"[yellow]Enzyme-JAX skipped: {why}")

    kernel = None
    if frameworks:
        try:
            kernel = setup_kernel(source, sizes + [VMAP_B * m for m in VMAP_SIZES])
            for m in VMAP_SIZES:  # a vmap's floor: the C function once over the whole batch's elements
                kernel[f"vmap x{m}", VMAP_B] = kernel["call", VMAP_B * m]
                kernel[f"vmap grad x{m}", VMAP_B] = kernel["grad", VMAP_B * m]
        except Exception as e:
            skipped["kernel"] = _reason(e)

    samples: dict = {}  # wall seconds per call, one per round
    cpu_samples: dict = {}  # CPU seconds per call
    sampler = Sampler(settings["min_time"])
    tasks = [(fw, op, n, impl) for op, n in measurements(large) for fw in frameworks
             for impl in frameworks[fw].get((op, n), {})]
    try:
        for r in range(settings["rounds"]):
            with console.status(f"round {r + 1}/{settings['rounds']}"):
                for op, n in measurements(large):
                    here = [t for t in tasks if t[1:3] == (op, n)]
                    if enzyme is not None and op in ENZYME_JAX_OPS:
                        here.append(("enzyme_jax", op, n, "enzyme_jax"))
                    if kernel is not None and (op, n) in kernel:
                        here.append(("kernel", op, n, "kernel"))
                    if not here:  # the jit floor without JAX
                        continue
                    k = r % len(here)
                    for fw, _, _, impl in here[k:] + here[:k]:
                        if fw == "enzyme_jax":
                            t = enzyme.sample(op, n)
                        elif fw == "kernel":
                            t = sampler.sample(("kernel", op, n), kernel[op, n])
                        else:
                            t = sampler.sample((fw, op, n, impl), frameworks[fw][op, n][impl])
                        samples.setdefault((fw, op, n, impl), []).append(t[0])
                        cpu_samples.setdefault((fw, op, n, impl), []).append(t[1])
    finally:
        if enzyme is not None:
            enzyme.close()

    rows = []
    for fw in frameworks:
        for op, n in measurements(large):
            if (op, n) not in frameworks[fw]:
                continue
            row = {"framework": fw, "op": op, "n": n}
            for impl, key in [("enzcc", (fw, op, n, "enzcc")), ("native", (fw, op, n, "native")),
                              ("enzyme_jax", ("enzyme_jax", op, n, "enzyme_jax")),
                              ("kernel", ("kernel", op, n, "kernel"))]:
                row[impl] = median(samples.get(key, []))
                row[impl + "_min"] = min(samples.get(key, []), default=None)
                row[impl + "_cpu"] = median(cpu_samples.get(key, []))
            row["enzcc_over_enzyme_jax"] = (row["enzcc"] / row["enzyme_jax"]) if row["enzyme_jax"] and row["enzcc"] \
                else None
            row["enzcc_over_native"] = row["enzcc"] / row["native"] if row["native"] and row["enzcc"] else None
            row["cpu_enzcc_over_enzyme_jax"] = (row["enzcc_cpu"] / row["enzyme_jax_cpu"]) if row["enzyme_jax_cpu"] \
                else None
            rows.append(row)

    table = Table(title=f"y = sin(x) * x (double): medians of {settings['rounds']} interleaved rounds "
                        f"(EJ: Enzyme-JAX cpp_call; CPU: process CPU time)")
    for col in ("framework", "measure", "enzcc", "kernel alone", "Enzyme-JAX", "own ops", "enzcc/EJ", "enzcc/own",
                "CPU enzcc/EJ"):
        table.add_column(col, justify="left" if col in ("framework", "measure") else "right")
    for row in rows:
        what = ("jit floor (x*2)" if row["op"] == "floor" else row["op"]) + f" {row['n']:,}"
        table.add_row(row["framework"], what, fmt_time(row["enzcc"]), fmt_time(row["kernel"]),
                      fmt_time(row["enzyme_jax"]), fmt_time(row["native"]),
                      fmt_ratio(row["enzcc"], row["enzyme_jax"]), fmt_ratio(row["enzcc"], row["native"]),
                      fmt_ratio(row["enzcc_cpu"], row["enzyme_jax_cpu"]))
    for name, why in skipped.items():
        table.add_row(name, f"[yellow]skipped: {why}", "", "", "", "", "", "", "")
    console.print(table)

    goal = {}
    by = {(r["framework"], r["op"], r["n"]): r for r in rows}
    floor, call16 = by.get(("jax", "floor", 16)), by.get(("jax", "call", 16))
    big = by.get(("jax", "grad", large))
    if floor and call16 and floor["enzyme_jax"] and call16["enzyme_jax"]:
        # the custom call's own cost: a call of 16 elements less the same process's trivial jitted function
        for unit, suffix in (("wall", ""), ("cpu", "_cpu")):
            mine = call16["enzcc" + suffix] - floor["enzcc" + suffix]
            theirs = call16["enzyme_jax" + suffix] - floor["enzyme_jax" + suffix]
            goal[f"jax_call_overhead_{unit}_us"] = {"enzcc": mine * 1e6, "enzyme_jax": theirs * 1e6}
            goal[f"jax_overhead_at_most_enzyme_jax_{unit}"] = mine <= theirs
    if big and big["enzyme_jax"]:
        goal["jax_large_gradient_ratio"] = big["enzcc_over_enzyme_jax"]
        goal["jax_large_gradient_within_1.2x"] = big["enzcc_over_enzyme_jax"] <= 1.2
        goal["jax_large_gradient_ratio_cpu"] = big["cpu_enzcc_over_enzyme_jax"]
    if goal:
        def show(v):
            if isinstance(v, dict):
                return "/".join(f"{k} {x:.2f} µs" for k, x in v.items())
            return ("yes" if v else "no") if isinstance(v, bool) else f"{v:.2f}"
        console.print("goals (JAX: overhead at most Enzyme-JAX's, 1M gradient within 1.2x): " + "; ".join(f"{k}: {show(v)}" for k, v in goal.items()))

    out = Path(args.out) if args.out else HERE / "results" / f"frameworks{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    versions = {}
    for mod in ("jax", "jaxlib", "torch", "tensorflow"):
        if mod in sys.modules:
            versions[mod] = getattr(sys.modules[mod], "__version__", "?")
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode, "settings": settings, "function": "y[i] = sin(x[i]) * x[i], double",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "loadavg_at_end": list(os.getloadavg())},
        "versions": versions, "enzyme_jax": enzyme_info, "skipped": skipped, "goals": goal, "rows": rows,
        "samples": {"/".join(map(str, k)): v for k, v in samples.items()},
        "cpu_samples": {"/".join(map(str, k)): v for k, v in cpu_samples.items()},
    }
    tmp = out.with_name(out.name + ".tmp")  # whole or not at all
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, out)
    console.print(f"wrote {out}")
    return 0


def _plugins_importable() -> None:
    """Make ``enzcc_plugins`` importable from a checkout where the package is not installed (plugins/ is its
    source), as the tests do."""
    try:
        import enzcc_plugins  # noqa: F401
    except ImportError:
        import atexit
        import shutil
        import tempfile
        shim = tempfile.mkdtemp(prefix="enzcc-plugins-path-")
        atexit.register(shutil.rmtree, shim, ignore_errors=True)
        os.symlink(HERE.parent / "plugins", os.path.join(shim, "enzcc_plugins"))
        sys.path.insert(0, shim)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--enzyme-worker":
        raise SystemExit(enzyme_worker(sys.argv[2], [int(s) for s in sys.argv[3].split(",")], float(sys.argv[4])))
    raise SystemExit(main())
