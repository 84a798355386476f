"""Rust through rustc (whose LLVM is 22, like ours). Crates are built as ``lib``; their ``extern "C"``
functions are what other languages call. The Rust standard library comes in at the native link."""

from __future__ import annotations

import os

from enzcc.errors import EnzccError
from enzcc.frontends.base import CompileRequest, Frontend
from enzcc.tools import find_tool, run


def crate_name(src: str) -> str:
    import re

    stem = os.path.splitext(os.path.basename(src))[0]
    name = re.sub(r"[^A-Za-z0-9_]", "_", stem) or "crate"
    return "_" + name if name[0].isdigit() else name


class RustFrontend(Frontend):
    langs = ("rust",)

    def _common(self, req: CompileRequest) -> list[str]:
        args = [find_tool("rustc"), "--crate-type=lib", "--crate-name", crate_name(req.src), "--edition=2021",
                "-C", "codegen-units=1", "-C", f"opt-level={min(req.level, 3)}"]
        if any(a.startswith("-g") and a != "-g0" for a in req.compile_args):
            args.append("-g")
        if req.target and not req.target.startswith("nvptx"):
            args.append(f"--target={req.target}")
        import shlex

        args += shlex.split(os.environ.get("ENZCC_RUSTFLAGS", "")) + req.lang_args
        return args

    def compile(self, req: CompileRequest) -> None:
        cmd = self._common(req) + [f"--emit=obj={req.out_obj}"]
        if req.dep_args:
            cmd[-1] += f",dep-info={os.path.splitext(req.final_name)[0]}.d"
        run(cmd + [req.src], tool="rustc")

    def bitcode(self, req: CompileRequest) -> bytes:
        out = req.tmp(".bc")
        cmd = self._common(req) + ["-C", "no-prepopulate-passes", f"--emit=llvm-bc={out}", req.src]
        run(cmd, capture=not req.show_diagnostics, tool="rustc")
        with open(out, "rb") as fh:
            return fh.read()


def rust_std_archive(target: str | None = None) -> tuple[str, list[str]]:
    """A static library holding the Rust standard library (built once per rustc version and cached),
    and the native libraries it needs. Linked after the whole-program object when Rust code is in it."""
    import re
    import subprocess

    rustc = find_tool("rustc")
    version = subprocess.run([rustc, "--version"], capture_output=True, text=True).stdout.strip()
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{version}-{target or 'host'}")
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "enzcc")
    os.makedirs(cache, exist_ok=True)
    lib = os.path.join(cache, f"librust-std-{key}.a")
    libs_file = lib + ".libs"
    if not (os.path.exists(lib) and os.path.exists(libs_file)):
        import tempfile

        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            src = os.path.join(tmp, "enzcc_rust_std.rs")
            with open(src, "w") as fh:
                fh.write("// links the Rust standard library into a static archive\n")
            out = os.path.join(tmp, "lib.a")
            cmd = [rustc, "--crate-type=staticlib", "--crate-name", "enzcc_rust_std", "-C", "opt-level=2",
                   "--print", "native-static-libs", "-o", out, src]
            if target:
                cmd.append(f"--target={target}")
            proc = run(cmd, capture=True, tool="rustc")
            text = (proc.stderr or b"").decode() + (proc.stdout or b"").decode()
            m = re.search(r"native-static-libs:\s*(.*)", text)
            libs = m.group(1).split() if m else ["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"]
            with open(out + ".libs", "w") as fh:
                fh.write(" ".join(libs))
            os.replace(out + ".libs", libs_file)
            os.replace(out, lib)
    with open(libs_file) as fh:
        libs = fh.read().split()
    if not os.path.exists(lib):
        raise EnzccError("could not build the Rust standard library archive")
    return lib, libs
