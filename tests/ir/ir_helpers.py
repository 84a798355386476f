"""Shared helpers for the enzcc.ir tests (imported as ``ir_helpers``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import llvmlite.binding as llvm  # noqa: E402

PROGRAMS = Path(__file__).resolve().parent / "programs"


def llvm_check(text: str) -> dict:
    """Parse and verify ``text`` with llvmlite in a forked child process.

    LLVM aborts the whole process (instead of raising) when a module with
    debug info fails verification, so the work is done in a child.  Returns
    ``{"text": canonical printing, "functions": {name: instruction count}}``
    and raises AssertionError if llvmlite rejects the IR.
    """
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(rfd)
        try:
            mod = llvm.parse_assembly(text, llvm.create_context())
            mod.verify()
            counts = {}
            for fn in mod.functions:
                counts[fn.name] = sum(len(list(b.instructions)) for b in fn.blocks)
            payload = b"OK" + json.dumps({"text": str(mod), "functions": counts}).encode()
        except Exception as exc:  # noqa: BLE001
            payload = b"ER" + str(exc).encode(errors="replace")
        with os.fdopen(wfd, "wb") as f:
            f.write(payload)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise AssertionError(f"llvmlite crashed while parsing the IR (wait status {status})")
    if data[:2] == b"ER":
        raise AssertionError("llvmlite rejected the IR: " + data[2:].decode()[:3000])
    return json.loads(data[2:].decode())


def require_tool(name: str) -> str:
    """Path of a compiler, or skip the test."""
    path = shutil.which(name)
    if path is None and name in ("rustc", "cargo"):
        candidate = Path.home() / ".cargo" / "bin" / name
        path = str(candidate) if os.access(candidate, os.X_OK) else None
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


def run_tool(cmd: list[str], cwd: Path) -> None:
    """Run a compiler command, failing the test with its stderr on error."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")


def bitcode_to_text(path: Path) -> str:
    """LLVM text of a bitcode file as llvmlite prints it."""
    return str(llvm.parse_bitcode(path.read_bytes()))


def compile_to_ir(lang: str, flags: list[str], tmp: Path, source: str | None = None) -> str:
    """Compile one of the test programs (or ``source``) and return its LLVM text."""
    out = tmp / "out.bc"
    if lang == "c":
        cc = require_tool("clang-22")
        src = PROGRAMS / (source or "kitchen.c")
        run_tool([cc, *flags, "-Wno-psabi", "-c", "-emit-llvm", str(src), "-o", str(out)], tmp)
    elif lang == "cpp":
        cxx = shutil.which("clang++-22") or require_tool("clang-22")
        src = PROGRAMS / (source or "classes.cpp")
        extra = [] if cxx.endswith("++-22") else ["-x", "c++"]
        run_tool([cxx, *extra, *flags, "-c", "-emit-llvm", str(src), "-o", str(out)], tmp)
    elif lang == "fortran":
        fc = require_tool("flang-22")
        src = PROGRAMS / (source or "arrays.f90")
        run_tool([fc, *flags, "-c", "-emit-llvm", str(src), "-o", str(out)], tmp)
    elif lang == "rust":
        rustc = require_tool("rustc")
        src = PROGRAMS / (source or "slices.rs")
        run_tool([rustc, "--edition=2021", "--crate-type=lib", "--emit=llvm-bc", *flags,
                  str(src), "-o", str(out)], tmp)
    else:  # pragma: no cover
        raise ValueError(lang)
    return bitcode_to_text(out)


def assert_roundtrip(text: str, force_parse: bool = True) -> str:
    """Parse ``text`` with enzcc.ir (forcing every body), print it, and check that
    llvmlite verifies the result and prints it exactly like the original."""
    from enzcc.ir import parse_module

    mod = parse_module(text)
    if force_parse:
        mod.parse_all()
        assert all(fn.is_parsed for fn in mod.functions.values())
    printed = str(mod)
    ref = llvm_check(text)
    got = llvm_check(printed)
    assert set(got["functions"]) == set(ref["functions"])
    assert set(mod.functions) == set(ref["functions"])
    for name, count in ref["functions"].items():
        assert got["functions"][name] == count, f"instruction count differs in @{name}"
        if force_parse:
            fn = mod.functions[name]
            ours = sum(len(b.instructions) for b in fn.blocks)
            assert ours == count, f"our model of @{name} has {ours} instructions, LLVM {count}"
    if got["text"] != ref["text"]:
        import difflib
        diff = "\n".join(list(difflib.unified_diff(ref["text"].splitlines(),
                                                   got["text"].splitlines(),
                                                   "original", "printed", lineterm="", n=1))[:60])
        raise AssertionError("re-printed module differs from the original:\n" + diff)
    return printed
