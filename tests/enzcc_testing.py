"""Helpers shared by the tests: tool checks, paths, and a runner for enzcc and built programs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = Path(__file__).resolve().parent / "projects"


def plugins_importable() -> None:
    """Make ``enzcc_plugins`` importable when enzcc was installed before plugins/ was packaged: a temporary
    directory on ``sys.path`` (subprocesses get it through PYTHONPATH) links the checkout's plugins/."""
    try:
        import enzcc_plugins  # noqa: F401
    except ImportError:
        import atexit
        import sys
        import tempfile
        shim = tempfile.mkdtemp(prefix="enzcc-plugins-path-")
        atexit.register(shutil.rmtree, shim, ignore_errors=True)
        os.symlink(ROOT / "plugins", os.path.join(shim, "enzcc_plugins"))
        sys.path.insert(0, shim)


def have(tool: str) -> bool:
    if tool == "rustc":
        return bool(shutil.which("rustc") or os.access(os.path.expanduser("~/.cargo/bin/rustc"), os.X_OK))
    return shutil.which(tool) is not None


def need(*tools: str):
    missing = [t for t in tools if not have(t)]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (not installed)")


class Runner:
    """Runs enzcc (and programs) in a directory, returning CompletedProcess with text output."""

    def __init__(self, cwd: Path, env: dict):
        self.cwd = cwd
        self.env = env

    def __call__(self, *args: str, check: bool = True, env: dict | None = None, cmd: str = "enzcc"):
        proc = subprocess.run([cmd, *args], cwd=self.cwd, env={**self.env, **(env or {})},
                              capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError(f"{cmd} {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def run(self, *args: str, check: bool = True, env: dict | None = None):
        return self(*args[1:], check=check, env=env, cmd=args[0])

    def write(self, name: str, text: str) -> Path:
        p = self.cwd / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return p


def jit(text: str):
    """LLVM's JIT engine for a module's text (parsed and verified); keep it alive while calling into it."""
    import llvmlite.binding as llvm

    from enzcc.backend.llvm import ensure_initialized

    ensure_initialized()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(text)
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    return engine
