"""cargo with enzcc (``RUSTC_WRAPPER=enzcc``, ``RUSTC=enzcc``): the example workspace examples/cargo (a library
crate and a crate that differentiates its functions) built, run and tested in a temporary directory, offline;
a workspace that differentiates nothing builds exactly as with rustc; a refused ``__enzyme_*`` call is
enzcc's one-line error. Gradients are checked against analytic values and central differences."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from enzcc_testing import ROOT

CARGO = shutil.which("cargo") or (os.path.expanduser("~/.cargo/bin/cargo")
                                  if os.access(os.path.expanduser("~/.cargo/bin/cargo"), os.X_OK) else None)
needs_cargo = pytest.mark.skipif(CARGO is None, reason="needs cargo (not installed)")


def cube(x: float) -> float:
    return x ** 3 + 2 * math.sin(x)


def rosenbrock(x: list[float]) -> float:
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def central(f, x: list[float], i: int, h: float = 1e-6) -> float:
    up, down = list(x), list(x)
    up[i] += h
    down[i] -= h
    return (f(up) - f(down)) / (2 * h)


def manifest(name: str, tail: str = "") -> str:
    """A Cargo.toml for package ``name`` (version 0.1.0, edition 2021), then ``tail`` (its other sections)."""
    head = f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n'
    return head + "\n" + tail if tail else head


@pytest.fixture
def cargo_env(env, tmp_path) -> dict:
    e = dict(env)
    e["PATH"] += os.pathsep + os.path.dirname(CARGO)
    e["CARGO_TARGET_DIR"] = str(tmp_path / "target")
    for var in ("RUSTC", "RUSTC_WRAPPER", "RUSTFLAGS", "CARGO_BUILD_RUSTC_WRAPPER", "CARGO_ENCODED_RUSTFLAGS"):
        e.pop(var, None)
    return e


def cargo(cwd: Path, env: dict, *args: str, check: bool = True, **extra: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([CARGO, *args, "--offline"], cwd=cwd, env={**env, **extra}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"cargo {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def example(tmp_path) -> Path:
    dst = tmp_path / "example"
    shutil.copytree(ROOT / "examples" / "cargo", dst, ignore=shutil.ignore_patterns("target", "Cargo.lock"))
    return dst


def check_example_output(stdout: str) -> None:
    """The example prints d cube/dx at 2 (reverse and forward) and Rosenbrock's gradient at (0.5, 1.5, -1)."""
    m = re.search(r"dcube\(2\) = (\S+), tcube\(2\) = (\S+)", stdout)
    assert m, stdout
    want = 3 * 4 + 2 * math.cos(2)
    for got in map(float, m.groups()):
        assert abs(got - want) < 1e-6
        assert abs(got - central(lambda v: cube(v[0]), [2.0], 0)) < 1e-5
    m = re.search(r"grad rosenbrock\(\[0\.5, 1\.5, -1\]\) = \[(.*)\]", stdout)
    assert m, stdout
    got = [float(v) for v in m.group(1).split(",")]
    x = [0.5, 1.5, -1.0]
    assert got == [-251.0, 2201.0, -650.0]  # (analytic: -400 x0 (x1 - x0^2) - 2 (1 - x0), ...)
    for i in range(3):
        assert abs(got[i] - central(rosenbrock, x, i)) < 1e-4 * max(1.0, abs(got[i]))


@needs_cargo
@pytest.mark.parametrize("profile", ["dev", "release"])
def test_wrapper_run(example, cargo_env, profile):
    proc = cargo(example, cargo_env, "run", "--profile", profile, RUSTC_WRAPPER="enzcc")
    check_example_output(proc.stdout)
    deps = Path(cargo_env["CARGO_TARGET_DIR"]) / ("debug" if profile == "dev" else profile) / "deps"
    rlib = next(deps.glob("libmodel-*.rlib"))
    assert b".llvmbc" in rlib.read_bytes()  # the library's objects carry their bitcode
    assert not list(deps.glob("libmodel-*.rlib.enzcc-ad"))  # model reaches no __enzyme_* call


@needs_cargo
def test_wrapper_test_harness(example, cargo_env):
    """``cargo test``: the harness (test::test_main_static) links, and its #[test]s check the gradients
    against the analytic ones."""
    proc = cargo(example, cargo_env, "test", RUSTC_WRAPPER="enzcc")
    assert "test tests::cube_derivative_is_analytic ... ok" in proc.stdout
    assert "test tests::rosenbrock_gradient_is_analytic ... ok" in proc.stdout
    assert "2 passed" in proc.stdout


@needs_cargo
def test_rustc_is_enzcc(example, cargo_env):
    proc = cargo(example, cargo_env, "run", RUSTC="enzcc")
    check_example_output(proc.stdout)


@needs_cargo
def test_through_a_library_that_differentiates(example, cargo_env):
    """The crate calling __enzyme_autodiff is a library; the binary using it names no __enzyme_* itself
    (its dependency's marker says the link must differentiate)."""
    (example / "Cargo.toml").write_text('[workspace]\nmembers = ["model", "grad", "app"]\nresolver = "2"\n')
    (example / "grad" / "src").mkdir(parents=True)
    (example / "grad" / "Cargo.toml").write_text(manifest("grad", '[dependencies]\nmodel = { path = "../model" }\n'))
    (example / "grad" / "src" / "lib.rs").write_text(
        'extern "C" { fn __enzyme_autodiff(f: *const (), ...) -> f64; }\n'
        'pub fn dcube(x: f64) -> f64 { unsafe { __enzyme_autodiff(model::cube as *const (), x) } }\n')
    (example / "app" / "Cargo.toml").write_text(manifest("app", '[dependencies]\ngrad = { path = "../grad" }\n'))
    (example / "app" / "src" / "main.rs").write_text(
        'fn main() { for x in [-1.5, 0.3, 2.0] { println!("{:.17e}", grad::dcube(x)); } }\n')
    proc = cargo(example, cargo_env, "run", RUSTC_WRAPPER="enzcc")
    got = [float(v) for v in proc.stdout.split()]
    for x, g in zip([-1.5, 0.3, 2.0], got, strict=True):
        assert abs(g - (3 * x * x + 2 * math.cos(x))) < 1e-12
        assert abs(g - central(lambda v: cube(v[0]), [x], 0)) < 1e-5


PLAIN_LIB = "pub fn mean(x: &[f64]) -> f64 { x.iter().sum::<f64>() / x.len() as f64 }\n"
PLAIN_MAIN = 'fn main() { println!("mean = {}", util::mean(&[1.0, 2.0, 4.5])); }\n'


def plain_workspace(root: Path) -> Path:
    (root / "util" / "src").mkdir(parents=True)
    (root / "app" / "src").mkdir(parents=True)
    (root / "Cargo.toml").write_text('[workspace]\nmembers = ["util", "app"]\nresolver = "2"\n')
    (root / "util" / "Cargo.toml").write_text(manifest("util"))
    (root / "util" / "src" / "lib.rs").write_text(PLAIN_LIB)
    (root / "app" / "Cargo.toml").write_text(manifest("app", '[dependencies]\nutil = { path = "../util" }\n'))
    (root / "app" / "src" / "main.rs").write_text(PLAIN_MAIN)
    return root


@needs_cargo
def test_differentiating_nothing_is_rustc(tmp_path, cargo_env):
    """A workspace without __enzyme_* calls: the program enzcc's wrapper builds is byte for byte rustc's."""
    ws = plain_workspace(tmp_path / "plain")
    with_enzcc = cargo(ws, cargo_env, "run", RUSTC_WRAPPER="enzcc")
    assert with_enzcc.stdout.strip() == "mean = 2.5"
    plain = cargo(ws, cargo_env, "build", CARGO_TARGET_DIR=str(tmp_path / "plain-target"))
    assert plain.returncode == 0
    ours = Path(cargo_env["CARGO_TARGET_DIR"]) / "debug" / "app"
    theirs = tmp_path / "plain-target" / "debug" / "app"
    assert ours.read_bytes() == theirs.read_bytes()
    check = cargo(ws, cargo_env, "check", RUSTC_WRAPPER="enzcc")  # (metadata only: rustc itself)
    assert check.returncode == 0


@needs_cargo
def test_refused_call_is_one_line(tmp_path, cargo_env):
    """A function pointer chosen at run time: enzcc's one-line error with the source location, through cargo,
    and a non-zero exit; no traceback, no page about a failed linker."""
    ws = tmp_path / "bad"
    (ws / "src").mkdir(parents=True)
    (ws / "Cargo.toml").write_text(manifest("bad"))
    (ws / "src" / "main.rs").write_text(
        'extern "C" { fn __enzyme_autodiff(f: *const (), ...) -> f64; }\n'
        'extern "C" fn square(x: f64) -> f64 { x * x }\n'
        'extern "C" fn twice(x: f64) -> f64 { 2.0 * x }\n'
        'fn main() {\n'
        '    let fs = [square as *const (), twice as *const ()];\n'
        '    let f = std::hint::black_box(fs[std::env::args().count() % 2]);\n'
        '    println!("{}", unsafe { __enzyme_autodiff(f, 3.0f64) });\n'
        '}\n')
    proc = cargo(ws, cargo_env, "build", check=False, RUSTC_WRAPPER="enzcc")
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors[0].startswith("src/main.rs:7:"), proc.stderr
    assert "must be a function known at compile time" in errors[0]
    assert len(errors) == 2 and errors[1].startswith("error: could not compile `bad`"), proc.stderr
    assert "Traceback" not in proc.stderr and "linking with" not in proc.stderr
    assert not (Path(cargo_env["CARGO_TARGET_DIR"]) / "debug" / "bad").exists()


@needs_cargo
def test_library_built_without_enzcc(example, cargo_env):
    """cargo does not rebuild a dependency when only RUSTC_WRAPPER changes: the error names the rlib without
    bitcode and what to do."""
    cargo(example, cargo_env, "build", "-p", "model")
    proc = cargo(example, cargo_env, "build", check=False, RUSTC_WRAPPER="enzcc")
    assert proc.returncode != 0
    assert re.search(r"its body is not available.*libmodel-\w+\.rlib carries no bitcode \(built without enzcc\): "
                     r"`cargo clean`", proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr


def test_rustc_command_lines():
    """What the wrapper reads from cargo's command lines (both spellings of -C and --emit)."""
    from enzcc.rustc_link import _ad_arguments, _without_plugin_options
    from enzcc.rustc_wrapper import RustcCall, _with_bitcode

    lib = RustcCall("rustc", ["--crate-name", "m", "m/src/lib.rs", "--crate-type", "lib",
                              "--emit=dep-info,metadata,link", "-C", "embed-bitcode=no", "-Copt-level=3",
                              "-C", "extra-filename=-ab", "--out-dir", "/t"])
    assert lib.library and not lib.links and not lib.passes_through
    assert lib.codegen_value("opt-level") == "3" and lib.rlib_path() == "/t/libm-ab.rlib"
    assert _with_bitcode(lib)[-2:] == ["-C", "embed-bitcode=yes"] and "embed-bitcode=no" not in _with_bitcode(lib)
    test = RustcCall("rustc", ["--crate-name", "app", "src/main.rs", "--emit", "dep-info,link", "--test",
                               "-C", "linker=cc", "-C", "lto", "--extern", "m=/t/libm-ab.rlib"])
    assert test.links and test.externs == ["/t/libm-ab.rlib"] and test.sources == ["src/main.rs"]
    assert _ad_arguments(test, "/w/enzcc-linker")[-4:] == ["-C", "linker-plugin-lto", "-C", "linker=/w/enzcc-linker"]
    assert "lto" not in _ad_arguments(test, "x") and "linker=cc" not in _ad_arguments(test, "x")
    for probe in (["-vV"], ["-", "--crate-name", "___", "--print=file-names", "--crate-type", "bin"],
                  ["--crate-name", "build_script_build", "build.rs", "--crate-type", "bin", "--emit=dep-info,link"],
                  ["--crate-name", "m", "m/src/lib.rs", "--crate-type", "proc-macro", "--emit=dep-info,link"],
                  ["--crate-name", "m", "m/src/lib.rs", "--crate-type", "lib", "--emit=dep-info,metadata"]):
        assert RustcCall("rustc", probe).passes_through, probe
    assert _without_plugin_options("-Wl,-plugin-opt=O0,-plugin-opt=mcpu=x86-64") == ""
    assert _without_plugin_options("-Wl,--as-needed,-plugin-opt=O2") == "-Wl,--as-needed"
    assert _without_plugin_options("-Wl,-z,relro") == "-Wl,-z,relro"


@needs_cargo
def test_through_a_proc_macro(example, cargo_env):
    """A proc-macro crate expands to the __enzyme_autodiff call (its marker: the binary names no __enzyme_*
    itself); a build script and include! of its output around it pass through."""
    (example / "Cargo.toml").write_text('[workspace]\nmembers = ["model", "mac", "app"]\nresolver = "2"\n')
    (example / "mac" / "src").mkdir(parents=True)
    (example / "mac" / "Cargo.toml").write_text(manifest("mac", "[lib]\nproc-macro = true\n"))
    (example / "mac" / "src" / "lib.rs").write_text(
        "extern crate proc_macro;\nuse proc_macro::TokenStream;\n"
        "/// grad!(f, x): the derivative of the extern \"C\" fn f(f64) -> f64 at x\n"
        "#[proc_macro]\npub fn grad(input: TokenStream) -> TokenStream {\n"
        "    let text = input.to_string();\n"
        "    let (f, x) = text.split_once(',').unwrap();\n"
        "    format!(\"{{ extern \\\"C\\\" {{ fn __enzyme_autodiff(f: *const (), ...) -> f64; }} \\\n"
        "             unsafe {{ __enzyme_autodiff({f} as *const (), ({x}) as f64) }} }}\").parse().unwrap()\n}\n")
    (example / "app" / "Cargo.toml").write_text(
        manifest("app", '[dependencies]\nmodel = { path = "../model" }\nmac = { path = "../mac" }\n'))
    (example / "app" / "build.rs").write_text(
        'fn main() { let out = std::env::var("OUT_DIR").unwrap();\n'
        '            std::fs::write(format!("{out}/x.rs"), "const X: f64 = 1.25;").unwrap(); }\n')
    (example / "app" / "src" / "main.rs").write_text(
        'include!(concat!(env!("OUT_DIR"), "/x.rs"));\n'
        'fn main() { println!("{:.17e}", mac::grad!(model::cube, X)); }\n')
    proc = cargo(example, cargo_env, "run", RUSTC_WRAPPER="enzcc")
    assert list((Path(cargo_env["CARGO_TARGET_DIR"]) / "debug" / "deps").glob("libmac-*.so.enzcc-ad"))
    got = float(proc.stdout)
    assert abs(got - (3 * 1.25 ** 2 + 2 * math.cos(1.25))) < 1e-12
    assert abs(got - central(lambda v: cube(v[0]), [1.25], 0)) < 1e-5
