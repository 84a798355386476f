"""cargo's ``RUSTC_WRAPPER=enzcc`` (and ``RUSTC=enzcc``): Rust crates with dependencies, differentiated at the link.

cargo calls the wrapper as ``enzcc /path/to/rustc ARGS...`` for every rustc run: the ``-vV`` and ``-``
probes, each crate of the build. enzcc runs the real rustc with the arguments unchanged, except:

* a library crate (``lib``/``rlib``) keeps its bitcode: ``-C embed-bitcode=yes`` in place of cargo's ``=no``
  (rustc then writes each object of the rlib with its LLVM bitcode in an ``.llvmbc`` section), so that a later
  crate can differentiate the functions it defines. The objects' machine code is rustc's own.
* a crate that links (``bin``, a ``--test`` harness, ``cdylib``, ``dylib``) whose code reaches an
  ``__enzyme_*`` call (its sources name one, or a crate it depends on does) is compiled with
  ``-C linker-plugin-lto`` (its objects are bitcode) and with enzcc as its linker (:func:`link_main`): the
  bitcode of the crate and of the rlibs of the build goes through enzcc's link -> optimize -> AD -> optimize
  -> codegen into one object, which the real linker links with the rest, exactly as rustc asked (the standard
  library's rlibs stay native).

Everything else (probes, ``cargo check``, proc-macro crates, build scripts, crates that reach no
``__enzyme_*``) is rustc itself: the process is replaced by rustc, so it costs only enzcc's start.

Which crates reach ``__enzyme_*``: a crate whose source files (the directory of its root file, recursively)
name ``__enzyme``, or whose ``--extern`` dependencies do. A library or proc-macro crate that reaches one leaves a
marker beside its output (``<rlib>.enzcc-ad``), so that the crates using it know without reading it.
"""

from __future__ import annotations

import os
import sys

from enzcc.errors import EnzccError

MARKER = ".enzcc-ad"
"""Suffix of the file beside a crate's rlib (or proc-macro library) that says it reaches an ``__enzyme_*`` call."""

LINK_ENV = "ENZCC_RUSTC_LINK"
"""Environment variable rustc passes on to its linker, enzcc's :func:`link_main`: the link's settings file."""

LINKING_TYPES = ("bin", "cdylib", "dylib")
"""Crate types whose compile ends in a native link (with ``--test``: the test harness, a bin)."""


class RustcCall:
    """One rustc command line as cargo writes it: the parts enzcc looks at."""

    def __init__(self, rustc: str, args: list[str]):
        self.rustc = rustc
        self.args = args
        self.crate_name = ""
        self.crate_types: list[str] = []
        self.emit: list[str] = []
        self.codegen: list[tuple[int, str]] = []
        """(index of the value in args, ``key=value``) of each ``-C``."""
        self.externs: list[str] = []
        self.out_dir = ""
        self.sources: list[str] = []
        self.test = False
        self.target: str | None = None
        self._parse()
        if not self.emit:
            self.emit = ["link"]  # (rustc's defaults)
        if not self.crate_types:
            self.crate_types = ["bin"]

    def _parse(self) -> None:
        args, i = self.args, 0
        with_value = {"--crate-name", "--crate-type", "--emit", "--extern", "--out-dir", "-o", "--target",
                      "--cap-lints", "--edition", "--error-format", "--json", "-L", "-l", "--cfg", "--check-cfg",
                      "--print", "--explain", "-A", "-W", "-D", "-F", "--sysroot", "-Z", "--remap-path-prefix",
                      "--env-set", "--diagnostic-width", "--crate-attr"}
        while i < len(args):
            arg = args[i]
            key, eq, joined = arg.partition("=")
            value = joined if eq and key.startswith("--") else None
            if arg in ("-C", "--codegen") and i + 1 < len(args):
                self.codegen.append((i + 1, args[i + 1]))
                i += 2
                continue
            if arg.startswith("-C") and len(arg) > 2:
                self.codegen.append((i, arg[2:]))
                i += 1
                continue
            if (key if value is not None else arg) in with_value:
                if value is None:
                    value = args[i + 1] if i + 1 < len(args) else ""
                    i += 1
                self._option(key if eq and key.startswith("--") else arg, value)
            elif arg == "--test":
                self.test = True
            elif not arg.startswith("-") and arg.endswith(".rs"):
                self.sources.append(arg)
            i += 1

    def _option(self, name: str, value: str) -> None:
        if name == "--crate-name":
            self.crate_name = value
        elif name == "--crate-type":
            self.crate_types += value.split(",")
        elif name == "--emit":
            self.emit += [e.partition("=")[0] for e in value.split(",")]
        elif name == "--extern":
            path = value.partition("=")[2]
            if path:
                self.externs.append(path)
        elif name == "--out-dir":
            self.out_dir = value
        elif name == "--target":
            self.target = value if not value.endswith(".json") else None

    def codegen_value(self, key: str) -> str | None:
        """The last ``-C key=value``'s value (``""`` for a bare ``-C key``), or None."""
        found = None
        for _, kv in self.codegen:
            k, eq, v = kv.partition("=")
            if k == key:
                found = v if eq else ""
        return found

    # -- what kind of crate --------------------------------------------------------------------

    @property
    def links(self) -> bool:
        """The compile ends in a native link (an executable, a test harness, a shared library)."""
        return "link" in self.emit and (self.test or any(t in LINKING_TYPES for t in self.crate_types))

    @property
    def library(self) -> bool:
        return "link" in self.emit and any(t in ("lib", "rlib") for t in self.crate_types)

    @property
    def passes_through(self) -> bool:
        """Probes, ``cargo check``, proc-macro crates and build scripts: rustc's own business."""
        return (not self.crate_name or self.crate_name == "___" or "proc-macro" in self.crate_types or
                self.crate_name.startswith("build_script_") or "link" not in self.emit)

    def rlib_path(self) -> str | None:
        """Where rustc writes this library crate's rlib (``--out-dir`` and ``-C extra-filename``)."""
        return self._output(".rlib")

    def proc_macro_path(self) -> str | None:
        """Where rustc writes this proc-macro crate (a shared library, as on Linux)."""
        return self._output(".so")

    def _output(self, suffix: str) -> str | None:
        if not self.out_dir:
            return None
        extra = self.codegen_value("extra-filename") or ""
        return os.path.join(self.out_dir, f"lib{self.crate_name}{extra}{suffix}")


# ---------------------------------------------------------------------------------------------
# which crates reach __enzyme_*


def _sources_name_enzyme(roots: list[str], limit: int = 5000) -> bool:
    """Whether a ``.rs`` file in the directory of a crate root (recursively) names ``__enzyme``. The crate's
    modules live there; a file that is not one of them only makes enzcc take the slower link (still right)."""
    seen = 0
    for root in roots:
        top = os.path.dirname(os.path.abspath(root))
        for directory, subdirs, files in os.walk(top):
            subdirs[:] = [d for d in subdirs if not d.startswith(".") and d != "target"]
            for name in files:
                if not name.endswith(".rs"):
                    continue
                seen += 1
                if seen > limit:
                    return True  # (a huge tree: assume it does rather than read it all)
                try:
                    with open(os.path.join(directory, name), "rb") as fh:
                        if b"__enzyme" in fh.read():
                            return True
                except OSError:
                    continue
    return False


def _extern_reaches(path: str) -> bool:
    """A dependency reaches ``__enzyme_*``: the marker beside it (for an ``.rmeta``, cargo's pipelining, the
    marker of its rlib)."""
    if os.path.exists(path + MARKER):
        return True
    if path.endswith(".rmeta"):
        return os.path.exists(path[:-len(".rmeta")] + ".rlib" + MARKER)
    return False


def reaches_enzyme(call: RustcCall) -> bool:
    """Whether the crate may call an ``__enzyme_*`` function, itself or through the crates it uses."""
    return any(_extern_reaches(p) for p in call.externs) or _sources_name_enzyme(call.sources)


# ---------------------------------------------------------------------------------------------
# the wrapper


def _real_rustc(argv: list[str]) -> tuple[str, list[str]]:
    """(rustc, its arguments): ``RUSTC_WRAPPER`` passes rustc first; ``RUSTC=enzcc`` does not."""
    name = os.path.basename(argv[0])
    if name in ("rustc", "clippy-driver") or name.startswith("rustc-"):
        return argv[0], argv[1:]
    from enzcc.tools import find_tool

    return find_tool("rustc"), argv


def _exec(cmd: list[str]) -> int:
    """Become ``cmd`` (nothing of enzcc stays in between: rustc's speed, exit code and output)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(cmd[0], cmd)
    except OSError as exc:
        raise EnzccError(f"cannot run {cmd[0]}: {exc.strerror}") from None
    return 1  # (not reached)


def _with_bitcode(call: RustcCall) -> list[str]:
    """The library crate's arguments with ``-C embed-bitcode=yes`` (cargo's ``=no`` dropped)."""
    args = list(call.args)
    for i, kv in reversed(call.codegen):
        if kv.startswith("embed-bitcode"):
            _drop_codegen(args, i)
    if call.codegen_value("linker-plugin-lto") is None and call.codegen_value("lto") in (None, "off", "no", "n",
                                                                                        "false"):
        args += ["-C", "embed-bitcode=yes"]
    return args


def _drop_codegen(args: list[str], value_index: int) -> None:
    """Remove one ``-C key=value`` (two arguments, or one joined) from ``args``."""
    if value_index > 0 and args[value_index - 1] in ("-C", "--codegen"):
        del args[value_index - 1:value_index + 1]
    else:
        del args[value_index]


def main(argv: list[str]) -> int:
    """``enzcc RUSTC ARGS`` (``RUSTC_WRAPPER``) or ``enzcc ARGS`` (``RUSTC``): see the module's docstring."""
    rustc, args = _real_rustc(argv)
    call = RustcCall(rustc, args)
    if "proc-macro" in call.crate_types and "link" in call.emit:
        _mark(call.proc_macro_path(), call)  # (a macro may expand to __enzyme_* calls in the crates using it)
    if call.passes_through:
        return _exec([rustc, *args])
    if call.links and reaches_enzyme(call):
        from enzcc.rustc_link import differentiating_compile

        if call.library:  # (an rlib besides, e.g. crate-type = ["lib", "cdylib"])
            _mark(call.rlib_path(), call)
        return differentiating_compile(call)
    if call.library:
        return _library(call)
    if "staticlib" in call.crate_types and reaches_enzyme(call):
        raise EnzccError(f"crate '{call.crate_name}' (staticlib) calls __enzyme_* functions: enzcc differentiates "
                         "Rust at the link of a bin, test, cdylib or dylib crate")
    return _exec([rustc, *args])


def _library(call: RustcCall) -> int:
    """A library crate: rustc with its bitcode kept, and the marker beside the rlib kept up to date. The marker
    is written before rustc runs: with cargo's pipelining, the crates using this one start as soon as its
    metadata is written, before this rustc ends."""
    _mark(call.rlib_path(), call)
    return _exec([call.rustc, *_with_bitcode(call)])


def _mark(output: str | None, call: RustcCall) -> None:
    """The marker beside a crate's output: there when the crate reaches ``__enzyme_*``, gone otherwise."""
    if output is None:
        return
    if reaches_enzyme(call):
        os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
        with open(output + MARKER, "w") as fh:
            fh.write("this crate reaches an __enzyme_* call (written by enzcc's RUSTC_WRAPPER)\n")
    elif os.path.exists(output + MARKER):
        os.unlink(output + MARKER)
