"""Finding and running external tools (the LLVM 22 toolchain, rustc, ptxas)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import lru_cache

from enzcc.errors import SubprocessFailed, ToolMissingError

#: tool name -> (candidate executables, where to get it)
TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "clang": (("clang-22",), "Debian package clang-22 (apt-get install clang-22)"),
    "clang++": (("clang++-22",), "Debian package clang-22 (apt-get install clang-22)"),
    "flang": (("flang-22", "flang-new-22"), "Debian package flang-22 (apt-get install flang-22)"),
    "llvm-objcopy": (("llvm-objcopy-22",), "Debian package llvm-22 (apt-get install llvm-22)"),
    "llvm-ar": (("llvm-ar-22",), "Debian package llvm-22 (apt-get install llvm-22)"),
    "llc": (("llc-22",), "Debian package llvm-22 (apt-get install llvm-22)"),
    "mlir-translate": (("mlir-translate-22",), "Debian package mlir-22-tools (apt-get install mlir-22-tools)"),
    "rustc": (("rustc",), "rustc with LLVM 22 (https://rustup.rs, rust 1.95)"),
    "ptxas": (("ptxas",), "the CUDA toolkit (ptxas)"),
}


def _env_override(name: str) -> str | None:
    key = "ENZCC_" + name.upper().replace("+", "X").replace("-", "_")
    return os.environ.get(key)


@lru_cache(maxsize=None)
def find_tool(name: str, required: bool = True) -> str | None:
    """Return the path of tool ``name`` or raise a :class:`ToolMissingError` naming the package.

    ``ENZCC_CLANG``, ``ENZCC_FLANG``, ``ENZCC_RUSTC``... override the lookup.
    """
    override = _env_override(name)
    candidates, package = TOOLS[name]
    if override:
        path = shutil.which(override)
        if path:
            return path
        if required:
            raise ToolMissingError(f"{name} set by ENZCC_{name.upper()}={override} was not found")
        return None
    for cand in candidates:
        path = shutil.which(cand)
        if path:
            return path
    if name == "rustc":
        home = os.path.expanduser("~/.cargo/bin/rustc")
        if os.access(home, os.X_OK):
            return home
    if required:
        raise ToolMissingError(f"'{candidates[0]}' not found; install {package}")
    return None


def verbose() -> bool:
    return bool(os.environ.get("ENZCC_VERBOSE"))


def run(cmd: list[str], *, capture: bool = False, tool: str | None = None, check: bool = True,
        input: bytes | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd``. Diagnostics go straight to the user's terminal unless ``capture``.

    With ``check``, a non-zero exit raises :class:`SubprocessFailed` carrying the tool's exit code
    (when captured, the tool's stderr is replayed first so the user sees why).
    """
    if verbose():
        print("enzcc: + " + " ".join(_quote(c) for c in cmd), file=sys.stderr)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE if capture else None,
                              stderr=subprocess.PIPE if capture else None, input=input, cwd=cwd)
    except FileNotFoundError as exc:
        raise ToolMissingError(f"cannot run '{cmd[0]}': {exc.strerror}") from None
    if check and proc.returncode != 0:
        if capture:
            if proc.stdout:
                sys.stderr.buffer.write(proc.stdout)
            if proc.stderr:
                sys.stderr.buffer.write(proc.stderr)
            sys.stderr.flush()
        raise SubprocessFailed(tool or os.path.basename(cmd[0]), proc.returncode)
    return proc


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)
