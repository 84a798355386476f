"""Real Enzyme on the same benchmark sources, through Enzyme-JAX (PyPI ``enzyme-ad``).

Enzyme-JAX's ``cpp_call`` compiles C++ source with clang and Enzyme inside and runs it as an XLA custom call.
The benchmark program itself (its ``main``: reading the data, timing primal and gradient, checking the gradient
against finite differences, printing its JSON line) is compiled that way, unchanged: it becomes C++ through a
small prelude (``malloc``'s result converts to any pointer type, as in C) and its ``__enzyme_autodiff`` calls
are Enzyme's. The timing happens inside the program, so JAX's dispatch is not part of it.

Enzyme-JAX brings its own jax, so it lives in a virtual environment of its own (``$ENZCC_ENZYME_VENV``, default
``bench/build/enzyme-venv``), made on first use; when it cannot be made (no network, no wheel for this Python)
the comparison is skipped with the reason.

    <venv>/bin/python bench/enzyme.py BENCH.c DATA [program options...]     (one run, as the suite does it)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = "enzyme-ad==0.0.16"

PRELUDE = r"""
/* the clang inside Enzyme-JAX does not present itself as GCC, and glibc's C++ string.h overloads need this */
#ifndef __extern_always_inline
#define __extern_always_inline extern __inline __attribute__((__always_inline__)) __attribute__((__gnu_inline__))
#endif
#ifndef __extern_inline
#define __extern_inline extern __inline __attribute__((__gnu_inline__))
#endif
#include <stdlib.h>
/* C's malloc result converts to any object pointer; in C++ it takes this */
struct enzcc_anyptr { void *p; template <class T> operator T *() const { return (T *)p; } };
#define malloc(n) (enzcc_anyptr{malloc(n)})
#define calloc(n, m) (enzcc_anyptr{calloc(n, m)})
#define realloc(p, n) (enzcc_anyptr{realloc(p, n)})
#define main enzcc_bench_main
"""

WRAPPER = r"""
#undef main
#include <stdio.h>
template <typename O, typename I> void f(O &out, const I &in) {
  static const char *argv[] = {ARGV, nullptr};
  out[0] = enzcc_bench_main(sizeof argv / sizeof argv[0] - 1, (char **)argv);
  fflush(stdout);
}
"""


def venv_dir() -> Path:
    return Path(os.environ.get("ENZCC_ENZYME_VENV", HERE / "build" / "enzyme-venv"))


def ensure_venv() -> tuple[str | None, str]:
    """(the venv's python, "") or (None, why it cannot be had)."""
    venv = venv_dir()
    py = venv / "bin" / "python"
    check = [str(py), "-c", "import enzyme_ad.jax, jax"]
    if py.is_file() and subprocess.run(check, capture_output=True).returncode == 0:
        return str(py), ""
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode:
        return None, f"cannot make a virtual environment: {made.stderr.strip().splitlines()[-1:]}"
    inst = subprocess.run([str(py), "-m", "pip", "install", "--quiet", PACKAGE], capture_output=True, text=True)
    if inst.returncode or subprocess.run(check, capture_output=True).returncode:
        last = (inst.stderr.strip().splitlines() or ["import failed"])[-1]
        return None, f"cannot install {PACKAGE}: {last}"
    return py.as_posix(), ""


def command(python: str, source: Path) -> list[str]:
    """The command that runs the benchmark program ``source`` under Enzyme (its data and options follow)."""
    return [python, str(Path(__file__).resolve()), str(source)]


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv: list[str]) -> int:
    """Inside the venv: compile ``argv[0]`` with Enzyme through cpp_call and run its main on ``argv[1:]``."""
    os.environ.setdefault("JAX_ENABLE_X64", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    from enzyme_ad.jax import cpp_call

    source = Path(argv[0]).resolve()
    program_args = ["bench", *argv[1:]]
    text = PRELUDE + f'#include "{source}"\n' + WRAPPER.replace("ARGV", ", ".join(map(_c_string, program_args)))
    resource = subprocess.run(["clang-22", "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
    # the same target as enzcc's builds (clang's default: x86-64 without AVX, generic tuning). These are cc1
    # flags; without them Enzyme-JAX's JIT compiles for this machine's CPU, and the comparison would measure the
    # instruction set rather than the derivative. ENZCC_ENZYME_FLAGS replaces them.
    flags = ("-isystem", f"{resource}/include", "-I", str(source.parent), "-O2",
             *os.environ.get("ENZCC_ENZYME_FLAGS", "-target-cpu x86-64 -tune-cpu generic").split())
    call = jax.jit(lambda x: cpp_call(x, out_shapes=[jax.core.ShapedArray((1,), jnp.float64)], source=text,
                                      fn="f", argv=flags))
    status = int(call(jnp.zeros((1,), jnp.float64))[0][0])
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
