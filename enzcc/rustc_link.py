"""The compile of a Rust crate that differentiates (see :mod:`enzcc.rustc_wrapper`): rustc with enzcc as its
linker, and that linker.

rustc compiles the crate with ``-C linker-plugin-lto``, so the objects it hands its linker are the crate's
LLVM bitcode, and with ``-C linker=`` a small script that runs :func:`link_main`. That reads the bitcode of
those objects and of the rlibs of the build (their objects carry it in ``.llvmbc`` sections, from
``-C embed-bitcode=yes``), runs enzcc's pipeline (link -> optimize -> AD -> optimize -> codegen) on it, and
calls the real linker with rustc's own command line, the one object in place of the bitcode. The standard
library's rlibs (in rustc's sysroot) stay native: their code is linked as rustc links it.

An error of enzcc's (a call it refuses to differentiate) is written to a file the compile reads back: cargo
shows that one line, not rustc's page about a failed linker.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

from enzcc.backend import embed as E
from enzcc.errors import EnzccError
from enzcc.rustc_wrapper import LINK_ENV, RustcCall, _drop_codegen

BITCODE_MAGIC = (b"BC\xc0\xde", b"\xde\xc0\x17\x0b")
"""Raw LLVM bitcode and the bitcode wrapper header."""

LINKER_VALUE_FLAGS = {"-o", "-L", "-l", "-T", "-z", "-Xlinker", "-e", "-u", "-isysroot", "--sysroot", "-target"}
"""cc options whose value is the next argument (not an input file)."""


def _level(value: str | None) -> int:
    """``-C opt-level``: 0-3, ``s``/``z`` (size) as 2; cargo's dev profile gives none (0)."""
    if value in ("1", "2", "3"):
        return int(value)
    return 2 if value in ("s", "z") else 0


def _sysroot(rustc: str) -> str:
    """rustc's sysroot: the parent of its ``bin`` when that holds ``lib/rustlib``, else rustc says."""
    parent = os.path.dirname(os.path.dirname(os.path.abspath(rustc)))
    if os.path.isdir(os.path.join(parent, "lib", "rustlib")):
        return parent
    proc = subprocess.run([rustc, "--print", "sysroot"], capture_output=True, text=True)
    return proc.stdout.strip()


def _linker_script(directory: str) -> str:
    """An executable rustc can call as its linker: this Python running :func:`link_main` from this enzcc."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (f"import sys; sys.path.insert(0, {root!r}); from enzcc.rustc_link import link_main; "
            "sys.exit(link_main(sys.argv[1:]))")
    path = os.path.join(directory, "enzcc-linker")
    with open(path, "w") as fh:
        fh.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c {shlex.quote(code)} \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def _ad_arguments(call: RustcCall, linker: str) -> list[str]:
    """rustc's arguments for the differentiating compile: bitcode objects, enzcc as the linker (cargo's
    embed-bitcode, linker and LTO settings replaced: enzcc's link is a whole-program link already)."""
    args = list(call.args)
    drop = ("embed-bitcode", "linker", "lto", "linker-plugin-lto")
    for i, kv in reversed(call.codegen):
        if kv.partition("=")[0] in drop:
            _drop_codegen(args, i)
    return args + ["-C", "linker-plugin-lto", "-C", f"linker={linker}"]


def differentiating_compile(call: RustcCall) -> int:
    """Compile ``call``'s crate with enzcc's link (module docstring). Returns rustc's exit code."""
    import shutil
    import tempfile

    work = tempfile.mkdtemp(prefix="enzcc-rustc-")
    try:
        settings = {
            "linker": call.codegen_value("linker") or "cc",
            "opt_level": _level(call.codegen_value("opt-level")),
            "cpu": call.codegen_value("target-cpu"),
            "target": call.target,
            "sysroot": _sysroot(call.rustc),
            "error_file": os.path.join(work, "error"),
            "workdir": work,
        }
        config = os.path.join(work, "link.json")
        with open(config, "w") as fh:
            json.dump(settings, fh)
        cmd = [call.rustc, *_ad_arguments(call, _linker_script(work))]
        proc = subprocess.run(cmd, env={**os.environ, LINK_ENV: config}, stderr=subprocess.PIPE,
                              close_fds=False)  # (cargo's jobserver descriptors, as rustc expects them)
        error = _read(settings["error_file"])
        _replay(proc.stderr, without_errors=bool(error))
        if error:
            print(_diagnostic(error) if _json_errors(call) else error, file=sys.stderr)
            return 1
        return proc.returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _json_errors(call: RustcCall) -> bool:
    """cargo reads rustc's diagnostics as JSON (``--error-format=json``)."""
    return "--error-format=json" in call.args or any(
        a == "--error-format" and b == "json" for a, b in zip(call.args, call.args[1:]))


def _diagnostic(line: str) -> str:
    """enzcc's one-line error as rustc's JSON diagnostic, which cargo prints as it prints rustc's errors."""
    text = line[len("enzcc: "):] if line.startswith("enzcc: ") else line
    message = text[len("error: "):] if text.startswith("error: ") else text
    return json.dumps({"$message_type": "diagnostic", "message": message, "code": None, "level": "error",
                       "spans": [], "children": [], "rendered": f"{line}\n"})


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _replay(stderr: bytes, without_errors: bool) -> None:
    """rustc's diagnostics for cargo, as rustc wrote them; ``without_errors``: its errors left out (they are
    about the failed link, whose cause enzcc prints in one line)."""
    out = sys.stderr.buffer
    for line in stderr.splitlines(keepends=True):
        if without_errors and _is_error(line):
            continue
        out.write(line)
    out.flush()


def _is_error(line: bytes) -> bool:
    text = line.lstrip()
    if text.startswith(b"{"):
        try:
            return json.loads(text).get("level") in ("error", "failure-note")
        except ValueError:
            return False
    return text.startswith(b"error")


# ---------------------------------------------------------------------------------------------
# the linker


def link_main(argv: list[str]) -> int:
    """rustc's linker: differentiate, then link with the real linker (module docstring)."""
    from enzcc.cli import guarded

    config = os.environ.get(LINK_ENV, "")
    try:
        with open(config) as fh:
            settings = json.load(fh)
    except (OSError, ValueError):
        print(f"enzcc: error: {LINK_ENV} does not name enzcc's link settings", file=sys.stderr)
        return 1
    code = guarded(_link, argv, settings)
    return code


def _link(argv: list[str], settings: dict) -> int:
    try:
        line = _differentiated_line(argv, settings)
    except EnzccError as exc:
        message = exc.format() if exc.location else f"enzcc: {exc.format()}"
        with open(settings["error_file"], "w") as fh:
            fh.write(message + "\n")
        raise
    from enzcc.tools import run

    return run([settings["linker"], *line], check=False).returncode


def _inputs(argv: list[str]) -> list[tuple[int, str]]:
    """(index, path) of each input file on a cc command line."""
    out, skip = [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
        elif arg in LINKER_VALUE_FLAGS:
            skip = True
        elif not arg.startswith("-") and os.path.isfile(arg):
            out.append((i, arg))
    return out


def _member_bitcode(data: bytes) -> bytes | None:
    """The bitcode of an rlib member: itself (``-C linker-plugin-lto``) or its ``.llvmbc`` section."""
    if data[:4] in BITCODE_MAGIC:
        return data
    if data[:4] == b"\x7fELF":
        return E.elf_section(data, ".llvmbc") or None
    return None


def _rlib_records(path: str, level: int) -> tuple[list[E.BitcodeRecord], bool]:
    """The bitcode of an rlib's objects, and whether every object of it has bitcode (then enzcc's object
    replaces the rlib on the link line)."""
    records, complete = [], True
    for m in E.read_archive(path):
        if m.name.endswith(".rmeta") or m.data[:4] not in (b"\x7fELF", *BITCODE_MAGIC):
            continue  # (rustc's metadata, not code)
        bitcode = _member_bitcode(m.data)
        if bitcode is None:
            complete = False
        else:
            records.append(E.BitcodeRecord(bitcode=bitcode, source=f"{path}({m.name})", lang="rust", opt=level))
    return records, complete


class LinkInputs:
    """The bitcode on rustc's link line: the crate's own objects, and that of the rlibs of the build."""

    def __init__(self, argv: list[str], level: int, sysroot: str):
        self.records: list[E.BitcodeRecord] = []
        self.archives: list[tuple[str, list[E.BitcodeRecord]]] = []
        self.replaced: set[int] = set()
        """Indices of the arguments enzcc's object stands for (bitcode objects, rlibs wholly in bitcode)."""
        self.without_bitcode: list[str] = []
        """rlibs of the build that carry no bitcode (built without enzcc)."""
        self.first: int | None = None
        """Where enzcc's object goes: the place of the crate's first bitcode object."""
        sysroot = os.path.join(sysroot, "")
        for i, path in _inputs(argv):
            with open(path, "rb") as fh:
                head = fh.read(8)
            if head[:4] in BITCODE_MAGIC:
                with open(path, "rb") as fh:
                    self.records.append(E.BitcodeRecord(bitcode=fh.read(), source=path, lang="rust", opt=level))
                self.replaced.add(i)
                self.first = i if self.first is None else self.first
            elif head == b"!<arch>\n" and not os.path.abspath(path).startswith(sysroot):
                self._rlib(i, path, level)

    def _rlib(self, i: int, path: str, level: int) -> None:
        records, complete = _rlib_records(path, level)
        if not records:
            self.without_bitcode.append(path)
            return
        self.archives.append((path, records))
        if complete:
            self.replaced.add(i)


def _differentiated_line(argv: list[str], settings: dict) -> list[str]:
    """The real linker's arguments: rustc's, with the object enzcc made from all the bitcode in place of the
    crate's bitcode objects, rlibs whose code it holds left out, and the LTO plugin's options dropped."""
    inputs = LinkInputs(argv, settings["opt_level"], settings["sysroot"])
    if not inputs.records:
        raise EnzccError("rustc gave enzcc's linker no bitcode (was the crate compiled with -C linker-plugin-lto?)")
    whole = os.path.join(settings["workdir"], "enzcc-whole-program.o")
    with open(whole, "wb") as fh:
        fh.write(_whole_program(inputs, settings, os.path.basename(_output(argv))))
    markers = os.path.join(settings["workdir"], "enzcc-markers.o")
    with open(markers, "wb") as fh:
        fh.write(_marker_object(settings.get("target")))
    line = []
    for i, arg in enumerate(argv):
        if i == inputs.first:
            line += [whole, markers]
        if i in inputs.replaced:
            continue
        arg = _without_plugin_options(arg)
        if arg:
            line.append(arg)
    return line


def _whole_program(inputs: LinkInputs, settings: dict, where: str) -> bytes:
    """enzcc's pipeline on the bitcode: one native object. A body AD misses may be in an rlib built without
    enzcc: cargo does not rebuild a crate when only ``RUSTC_WRAPPER`` changed, so the error says so."""
    from enzcc.ad.errors import MissingBodyError
    from enzcc.backend.pipeline import PipelineOptions, build

    opts = PipelineOptions(opt_level=settings["opt_level"], cpu=settings.get("cpu") or None)
    try:
        return build(inputs.records, opts, "object", where, inputs.archives)
    except MissingBodyError as exc:
        if inputs.without_bitcode:
            names = ", ".join(os.path.basename(p) for p in inputs.without_bitcode)
            verb = "carry" if len(inputs.without_bitcode) > 1 else "carries"
            exc.message += f"; {names} {verb} no bitcode (built without enzcc): `cargo clean` and build again " \
                           "with RUSTC_WRAPPER=enzcc"
        raise


def _marker_object(triple: str | None) -> bytes:
    """An object defining ``enzyme_dup`` & co. as weak ``int``s. AD consumes the markers' values; what may still
    name them is code rustc adds at -O0 (a check that an ``extern`` static's address is not null), which
    would otherwise leave them undefined at the link. (Weak: a program's own definition wins.)"""
    from enzcc.ad.api import CALL_MARKERS, MARKERS, NOCACHE
    from enzcc.backend import llvm as L

    tm = L.target_machine(triple or L.host_triple(), 0)
    text = "".join(f"@{name} = weak global i32 0, align 4\n" for name in (*MARKERS, *CALL_MARKERS, NOCACHE))
    mod = L.llvm.parse_assembly(text)
    mod.triple = triple or L.host_triple()
    return L.emit_object(mod, tm)


def _output(argv: list[str]) -> str:
    for i, arg in enumerate(argv[:-1]):
        if arg == "-o":
            return argv[i + 1]
    return "a.out"


def _without_plugin_options(arg: str) -> str:
    """``-Wl,-plugin-opt=O0,-plugin-opt=mcpu=x86-64`` (for an LTO plugin enzcc replaces) without those parts."""
    if not arg.startswith("-Wl,") or "plugin-opt" not in arg:
        return arg
    parts = [p for p in arg.split(",")[1:] if not p.lstrip("-").startswith("plugin-opt")]
    return ",".join(["-Wl", *parts]) if parts else ""
