"""Fixtures: an ``enzcc`` on PATH that runs this checkout (see enzcc_testing for the helpers)."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from enzcc_testing import ROOT, Runner, have


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


@pytest.fixture(scope="session")
def compiler(enzcc_bin) -> str:
    """This checkout's enzcc (the script above), as the plugins' tests pass it to their builds."""
    return str(enzcc_bin / "enzcc")


@pytest.fixture
def env(enzcc_bin, tmp_path_factory) -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{enzcc_bin}{os.pathsep}{e.get('PATH', '')}"
    e["ENZCC_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))  # each test its own build cache
    e.pop("ENZCC_NO_CACHE", None)
    if have("rustc") and not shutil.which("rustc"):
        e["PATH"] += os.pathsep + os.path.expanduser("~/.cargo/bin")
    e.pop("ENZCC_VERBOSE", None)
    return e


@pytest.fixture
def enzcc(tmp_path, env) -> Runner:
    return Runner(tmp_path, env)
