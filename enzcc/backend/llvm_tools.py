"""Optimization and code generation of large modules by LLVM 22's own tools (``opt-22``, ``llc-22``).

llvmlite's LLVM is built with assertions (its library checks about 195,000 of them), which makes its passes
slower than Debian's release build of the same LLVM 22.1: on the derivative of 1,000 generated statements the
optimization after AD took 0.27 s in llvmlite and 0.16 s in ``opt-22``, code generation 0.48 s and 0.40 s.
Each tool costs about 20 ms to start and the module goes to it as bitcode, so only modules past
:data:`MIN_BITCODE` bytes of bitcode go through them; smaller ones stay in llvmlite. Both give the same output
(the same passes of the same LLVM release line; checked on the bench programs' assembly).

``ENZCC_LLVM_TOOLS=0`` keeps everything in llvmlite, ``=1`` sends every module that can go (tests). A tool that
is missing or fails leaves the work to llvmlite, which then reports whatever is wrong as before.
"""

from __future__ import annotations

import os
import subprocess

#: modules with less bitcode than this stay in llvmlite (the tools' start-up would cost more than they save)
MIN_BITCODE = 48 * 1024


def wanted(size: int) -> bool:
    """Whether a module of ``size`` bytes of bitcode goes through the tools (``ENZCC_LLVM_TOOLS``)."""
    setting = os.environ.get("ENZCC_LLVM_TOOLS", "")
    if setting == "0":
        return False
    return setting == "1" or size >= MIN_BITCODE


def _tool(name: str) -> str | None:
    from enzcc.tools import find_tool

    return find_tool(name, required=False)


def _run(argv: list[str], data: bytes) -> bytes | None:
    """``argv`` reading ``data`` on its input; its output, or None when it failed (the caller falls back)."""
    try:
        proc = subprocess.run(argv, input=data, capture_output=True)
    except OSError:
        return None
    return proc.stdout if proc.returncode == 0 and proc.stdout else None


def optimize(bitcode: bytes, level: int, flags: list[str]) -> bytes | None:
    """``bitcode`` through ``opt-22 -O<level>`` with ``flags`` (the pipeline's and the process's LLVM options):
    the optimized bitcode, or None (no ``opt-22``, or it failed)."""
    opt = _tool("opt")
    if opt is None:
        return None
    return _run([opt, f"-passes=default<O{level}>", *flags, "-o", "-", "-"], bitcode)


def codegen(bitcode: bytes, level: int, kind: str, pic: bool) -> bytes | None:
    """``bitcode`` through ``llc-22 -O<level>``: an object (``kind="object"``) or assembly as llvmlite prints it
    (not verbose), or None (no ``llc-22``, or it failed)."""
    llc = _tool("llc")
    if llc is None:
        return None
    filetype = ["-filetype=obj"] if kind == "object" else ["-filetype=asm", "-asm-verbose=false"]
    return _run([llc, f"-O{level}", f"-relocation-model={'pic' if pic else 'static'}", "-code-model=small",
                 *filetype, "-o", "-", "-"], bitcode)
