"""Shared fixtures: an ``enzcc`` on PATH that runs this checkout, and skips for missing tools."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = Path(__file__).resolve().parent / "projects"


def have(tool: str) -> bool:
    if tool == "rustc":
        return bool(shutil.which("rustc") or os.access(os.path.expanduser("~/.cargo/bin/rustc"), os.X_OK))
    return shutil.which(tool) is not None


def need(*tools: str):
    missing = [t for t in tools if not have(t)]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (not installed)")


@pytest.fixture(scope="session")
def enzcc_bin(tmp_path_factory) -> Path:
    """A directory holding ``enzcc`` and ``enzcc++`` scripts that run this checkout with this Python."""
    d = tmp_path_factory.mktemp("bin")
    for name, fn in (("enzcc", "main"), ("enzcc++", "main_cxx")):
        script = d / name
        script.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "
                          f"-c 'import sys; from enzcc.cli import {fn}; sys.exit({fn}())' \"$@\"\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return d


@pytest.fixture
def env(enzcc_bin) -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{enzcc_bin}{os.pathsep}{e.get('PATH', '')}"
    if have("rustc") and not shutil.which("rustc"):
        e["PATH"] += os.pathsep + os.path.expanduser("~/.cargo/bin")
    e.pop("ENZCC_VERBOSE", None)
    return e


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


@pytest.fixture
def enzcc(tmp_path, env) -> Runner:
    return Runner(tmp_path, env)
