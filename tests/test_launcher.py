"""The launchers ``make setup`` writes for enzcc and enzcc++ (enzcc/launcher.py): Python starts without
``site``; a plain compile imports neither ``site`` nor ``subprocess`` nor the driver; a build that differentiates gets
``site`` (and llvmlite) on demand and the right gradient."""

import os
import subprocess
import sys

import pytest

from enzcc.launcher import ENTRIES, main, script
from enzcc_testing import need

pytestmark = need("clang-22")

AD = r"""
#include <stdio.h>
double __enzyme_autodiff(void *, ...);
double cube(double x) { return x * x * x; }
int main(void) { printf("%.17g\n", __enzyme_autodiff((void *)cube, 2.0)); return 0; }
"""


@pytest.fixture
def launchers(tmp_path):
    assert main([str(tmp_path)]) == 0
    return tmp_path


def _imports(launcher, *args, cwd):
    """Run ``launcher`` as its shebang line does, with -X importtime: (process, names of imported modules)."""
    proc = subprocess.run([sys.executable, "-S", "-X", "importtime", str(launcher), *args], cwd=cwd,
                          capture_output=True, text=True)
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc, names


def test_launchers_are_written(launchers):
    for name, entry in ENTRIES.items():
        path = launchers / name
        assert os.access(path, os.X_OK)
        text = path.read_text()
        assert text == script(name) and text.startswith(f"#!{sys.executable} -S\n")
        assert f"from enzcc.cli import {entry}" in text
    assert main(["--bogus"]) == 2


def test_a_plain_compile_starts_without_site(launchers, tmp_path):
    (tmp_path / "p.c").write_text("int add1(int x) { return x + 1; }\n")
    proc, names = _imports(launchers / "enzcc", "-O2", "-c", "p.c", "-o", "p.o", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "p.o").is_file()
    assert "enzcc.fastpath" in names  # (the no-AD path: not even the driver and its frontends)
    assert not names & {"site", "subprocess", "tempfile", "shutil", "llvmlite", "re", "json", "enzcc.driver",
                        "enzcc.frontends"}, names
    # clang's diagnostics and exit code pass through
    (tmp_path / "bad.c").write_text("int f(void) { return nope; }\n")
    bad = subprocess.run([launchers / "enzcc", "-c", "bad.c", "-o", "bad.o"], cwd=tmp_path, capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "use of undeclared identifier 'nope'" in bad.stderr
    assert not (tmp_path / "bad.o").exists()


def test_a_build_that_differentiates_gets_site_on_demand(launchers, tmp_path):
    (tmp_path / "ad.c").write_text(AD)
    proc, names = _imports(launchers / "enzcc", "-O2", "--no-cache", "ad.c", "-o", "ad", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert {"site", "llvmlite"} <= names
    run = subprocess.run([tmp_path / "ad"], capture_output=True, text=True, check=True)
    assert float(run.stdout) == 12.0


def test_the_cxx_launcher_links_cxx(launchers, tmp_path):
    (tmp_path / "v.cpp").write_text("#include <vector>\n#include <cstdio>\n"
                                    "int main() { std::vector<int> v(3, 2); std::printf(\"%zu\\n\", v.size()); }\n")
    subprocess.run([launchers / "enzcc++", "-O1", "v.cpp", "-o", "v"], cwd=tmp_path, check=True)
    assert subprocess.run([tmp_path / "v"], capture_output=True, text=True).stdout == "3\n"


def test_an_unusable_tmpdir_falls_back(launchers, tmp_path):
    """As tempfile does: $TMPDIR that cannot be written is skipped for /tmp."""
    (tmp_path / "p.c").write_text("int add1(int x) { return x + 1; }\n")
    env = {**os.environ, "TMPDIR": str(tmp_path / "missing")}
    subprocess.run([launchers / "enzcc", "-O2", "-c", "p.c", "-o", "p.o"], cwd=tmp_path, env=env, check=True)
    assert (tmp_path / "p.o").is_file() and not (tmp_path / "missing").exists()
