"""Whole projects: `CC=enzcc make -j2`, `CC=enzcc FC=enzcc meson` and `enzcc build` with enzcc.toml."""

import ctypes
import shutil
import subprocess


from enzcc_testing import PROJECTS, have, need
from enzcc.backend import embed as E


def _make(tmp_path, env, cc, name):
    work = tmp_path / name
    shutil.copytree(PROJECTS / "cmake_like", work)
    r = subprocess.run(["make", "-j2", f"CC={cc}"], cwd=work, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return work


@need("clang-22", "make", "ar")
def test_make_project_matches_clang(tmp_path, env):
    ours = _make(tmp_path, env, "enzcc", "enzcc")
    ref = _make(tmp_path, env, "clang-22", "clang")
    out = subprocess.run(["./app"], cwd=ours, capture_output=True, text=True, check=True).stdout
    expected = subprocess.run(["./app"], cwd=ref, capture_output=True, text=True, check=True).stdout
    assert out == expected and out.startswith("dot=")
    # objects are native and carry bitcode; the archive holds them
    assert E.records_in_object((ours / "src/main.o").read_bytes(), "main.o")
    members = E.read_archive(str(ours / "lib/libstats.a"))
    assert sorted(m.name for m in members) == ["poly.o", "stats.o"]
    # dependency files name the objects and the headers, as clang's do
    assert (ours / "src/main.d").read_text() == (ref / "src/main.d").read_text()
    assert "include/stats.h" in (ours / "lib/poly.d").read_text()
    # up to date; touching a header rebuilds what includes it
    q = subprocess.run(["make", "-q", "CC=enzcc"], cwd=ours, env=env)
    assert q.returncode == 0
    (ours / "include/vec.h").touch()
    r = subprocess.run(["make", "-j2", "CC=enzcc"], cwd=ours, env=env, capture_output=True, text=True, check=True)
    assert "src/vec.c" in r.stdout and "lib/poly.c" in r.stdout


@need("clang-22", "flang-22", "rustc")
def test_enzcc_toml_multilanguage(tmp_path, env):
    work = tmp_path / "multilang"
    shutil.copytree(PROJECTS / "multilang", work)
    outputs = ["out/mixed", "out/libmixed.so", "out/mixed.o"] + (["out/kernel.ptx"] if have("ptxas") else [])
    r = subprocess.run(["enzcc", "build", *outputs], cwd=work, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    run = subprocess.run(["./out/mixed"], cwd=work, capture_output=True, text=True, check=True)
    assert run.stdout == ("hello from fortran\nfortran sum of squares = 13.750000\nrust norm = 3.708099\n")
    lib = ctypes.CDLL(str(work / "out/libmixed.so"))
    lib.mixed_check.restype = ctypes.c_double
    xs = (ctypes.c_double * 4)(1.0, 2.0, 3.0, 4.0)
    assert abs(lib.mixed_check(xs, 4)) < 1e-12
    # the whole-program object links with a plain clang, given the runtimes
    obj = work / "out/mixed.o"
    nm = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    assert " T mixed_check" in nm and " T fsum_squares" in nm and " T rust_norm" in nm
    if have("ptxas"):
        assert ".entry saxpy" in (work / "out/kernel.ptx").read_text()


def test_enzcc_toml_errors(tmp_path, env):
    cfg = tmp_path / "enzcc.toml"
    cases = {
        "[[output]]\nname='x'\nsources=['missing.c']\n": "missing.c not found",
        "[[output]]\nname='x'\nkind='dll'\nsources=['a.c']\n": "kind must be one of",
        "[build]\nopt-level='high'\n[[output]]\nname='x'\nsources=['a.c']\n": "'opt-level' must be a int",
        "[build]\ncolour='blue'\n": "unknown key 'colour'",
        "[build]\n": "no [[output]] tables",
        "this is not toml": "invalid TOML",
    }
    for text, message in cases.items():
        cfg.write_text(text)
        r = subprocess.run(["enzcc", "build"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr, (text, r.stderr)
    r = subprocess.run(["enzcc", "build", "-f", "nope.toml"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "nope.toml not found" in r.stderr


@need("clang-22", "ptxas")
def test_ptx_is_accepted_by_ptxas(enzcc, tmp_path):
    enzcc.write("k.c", (PROJECTS / "multilang/kernel.c").read_text())
    enzcc("--target=nvptx64-nvidia-cuda", "--cuda-gpu-arch=sm_90", "-O3", "-S", "k.c", "-o", "k.ptx")
    ptx = (enzcc.cwd / "k.ptx").read_text()
    assert ".target sm_90" in ptx and ".entry saxpy" in ptx
    enzcc.run("ptxas", "-arch=sm_90", "k.ptx", "-o", "k.cubin")
    # -c for NVPTX keeps bitcode only; the link step emits PTX for the whole program
    enzcc.write("dev.c", "float sq(float x) { return x * x; }\n")
    enzcc("--target=nvptx64-nvidia-cuda", "-O2", "-c", "k.c", "dev.c")
    enzcc("--target=nvptx64-nvidia-cuda", "-O2", "k.o", "dev.o", "-o", "all.ptx")
    text = (enzcc.cwd / "all.ptx").read_text()
    assert ".entry saxpy" in text and "sq(" in text


def test_example_config_documents_every_key():
    from enzcc.buildconfig import BUILD_KEYS, OUTPUT_KEYS, _toml
    from enzcc_testing import ROOT

    with open(ROOT / "enzcc.toml.example", "rb") as fh:
        data = _toml.load(fh)
    assert set(data["build"]) == BUILD_KEYS
    seen = set().union(*(o.keys() for o in data["output"]))
    assert {"name", "kind", "sources"} <= seen and seen <= OUTPUT_KEYS
    assert {o["kind"] for o in data["output"]} == {"executable", "shared", "object", "ptx"}


@need("clang-22", "flang-22", "meson", "ninja")
def test_meson_project_c_and_fortran(tmp_path, env):
    """meson with CC=enzcc FC=enzcc: its probes see clang and LLVM flang (not classic flang, whose flags flang-22
    rejects) and the linker; the C library (a thin archive) and both programs build; `meson test` runs the
    gradient program, which checks enzcc's derivative against the analytic one and a central difference."""
    work = tmp_path / "meson"
    shutil.copytree(PROJECTS / "meson", work)
    menv = {**env, "CC": "enzcc", "FC": "enzcc"}
    for cmd in (["meson", "setup", "build"], ["meson", "compile", "-C", "build"], ["meson", "test", "-C", "build"]):
        r = subprocess.run(cmd, cwd=work, env=menv, capture_output=True, text=True)
        log = work / "build" / "meson-logs" / "testlog.txt"
        assert r.returncode == 0, r.stdout + r.stderr + (log.read_text() if log.exists() else "")
        if cmd[1] == "setup":
            assert "Fortran compiler for the host machine: enzcc (llvm-flang 22" in r.stdout, r.stdout
            assert "C linker for the host machine: enzcc ld." in r.stdout, r.stdout
    log = (work / "build" / "meson-logs" / "testlog.txt").read_text()
    assert "d energy/dx at 0.7: enzcc 1.91887464477461" in log and "sum of squares =    385.0" in log
