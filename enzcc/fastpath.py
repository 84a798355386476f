"""The no-AD path: what a drop-in build asks of enzcc most of the time, at nearly clang's cost.

Most calls of ``CC=enzcc make`` differentiate nothing: configure probes, ``-E``/``-M``, queries, and the
compiles and links of translation units that call no ``__enzyme_*`` function. Such a call is decided here with
the standard library and a few small enzcc modules (no frontends, no LLVM, no engine), and runs one clang
process, as clang alone would:

* queries (``--version``, ``-print-*``, ``-###``, ``-Wl,--version`` without inputs) and ``-E``/``-M``/
  ``-fsyntax-only``: clang (flang for Fortran) itself, in place of this process where enzcc adds nothing;
* ``-c`` of C/C++ sources whose text never names Enzyme: clang's compile with ``-fembed-bitcode=all`` (the
  same machine code), its bitcode moved into enzcc's compressed section (:mod:`enzcc.backend.embed`);
* a link whose inputs carry no bitcode calling Enzyme (a plain search of their bytes, sound because such
  bitcode is never compressed) and whose sources never name Enzyme: one clang run, as the user wrote it.

Everything else (a differentiating TU or link, Fortran, Rust, CUDA, NVPTX, ``-S``, ``--time-report``...)
returns None and goes to :class:`enzcc.driver.Driver` unchanged. A source that reaches Enzyme through a header
macro alone is found after the fact (its bitcode, its link's diagnostics or output name ``__enzyme_``) and
handed to the driver as well. ``ENZCC_NO_FAST_PATH=1`` sends every call to the driver (tests compare both).
"""

from __future__ import annotations

import os
import sys

from enzcc import __version__
from enzcc.backend import embed as E
from enzcc.clang_args import ATTRIBUTE_DEFINES, compile_with_bitcode_command, include_args
from enzcc.errors import EnzccError, SubprocessFailed
from enzcc.files import atomic_output, mentions_enzyme
from enzcc.flags import ENZCC, OUTPUT, Invocation, parse_args, without_flags
from enzcc.tools import find_tool, run, verbose

C_LANGS = ("c", "c++")
#: source languages a fast link hands to clang as they are
DIRECT_LANGS = ("c", "c++", "assembler", "assembler-with-cpp")
#: languages of carried bitcode whose programs need nothing from enzcc at a link (Fortran, Rust and CUDA need
#: their runtime libraries: the driver adds them)
PLAIN_RECORD_LANGS = (b"c", b"c++", b"llvm", b"mlir")


class _ToDriver(Exception):
    """Raised inside an output's ``atomic_output`` when, after all, the driver must do the work."""


def try_fast(argv: list[str], cxx: bool) -> int | None:
    """Run the call here when it differentiates nothing; None hands it to the driver."""
    if os.environ.get("ENZCC_NO_FAST_PATH"):
        return None
    inv = parse_args(argv)
    if inv.time_report or inv.keep_temps or inv.cuda_host_emulation or inv.is_nvptx or inv.whole_object:
        return None
    if inv.mode == "query":
        return query(inv, cxx)
    if inv.mode in ("preprocess", "passthrough"):
        return passthrough(inv, cxx)
    if inv.mode == "compile":
        return _compile(inv, cxx)
    if inv.mode == "link":
        return _link(inv, cxx)
    return None


# -- what clang answers alone ---------------------------------------------------------------------


def native_driver(inv: Invocation, cxx: bool) -> str:
    """flang for Fortran inputs (or ``--lang fortran`` alone: ``FC=...`` probes), else clang or clang++."""
    langs = {i.lang for i in inv.inputs}
    if "fortran" in langs or (not inv.inputs and inv.lang_override == "fortran"):
        return find_tool("flang")
    return find_tool("clang++" if (cxx or "c++" in langs) else "clang")


def _exec(cmd: list[str], become: bool) -> int:
    """Run ``cmd``; with ``become``, as this process (nothing of enzcc's is left to do after it: no Python
    shutdown, and its exit code and signals are the tool's own). Where ``exec`` fails, the tool runs as a
    child."""
    if not become:
        return run(cmd, check=False).returncode
    if verbose():
        print("enzcc: + " + " ".join(cmd), file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(cmd[0], cmd)
    except OSError:
        return run(cmd, check=False).returncode
    return 0  # (not reached)


def query(inv: Invocation, cxx: bool, become: bool = True) -> int:
    """``--version``, ``--help``, ``-print-*``, ``-###``, ``-v``, ``-Wl,--version``...: the native driver's
    answer, with enzcc's own lines after ``--version`` and ``--help``."""
    args = without_flags(inv.args)
    cmd = [native_driver(inv, cxx), *args]
    version, help_ = "--version" in args, ("--help" in args or "-help" in args)
    if not (version or help_):
        return _exec(cmd, become)
    proc = run(cmd, check=False)
    if version and proc.returncode == 0:
        print(f"enzcc {__version__}: Enzyme-style automatic differentiation on LLVM 22 (clang-compatible driver)")
    if help_ and proc.returncode == 0:
        from enzcc.driver import ENZCC_HELP

        print(ENZCC_HELP)
    return proc.returncode


def passthrough(inv: Invocation, cxx: bool, become: bool = True) -> int:
    """``-E``, ``-M``, ``-fsyntax-only``...: the native driver, enzcc's headers found as in a compile."""
    extra = next((include_args(i.lang) for i in inv.inputs if include_args(i.lang)), [])
    return _exec([native_driver(inv, cxx), *without_flags(inv.args), *extra], become)


# -- compiles -------------------------------------------------------------------------------------


def _plain_sources(inv: Invocation, langs: tuple[str, ...]) -> bool:
    """Every source is an existing file of these languages whose text never names Enzyme."""
    return all(i.lang in langs and i.path != "-" and os.path.isfile(i.path) and not mentions_enzyme(i.path)
               for i in inv.inputs if i.lang)


def _compile(inv: Invocation, cxx: bool) -> int | None:
    """``-c`` of C/C++ sources that never name Enzyme: one clang run each (see the module's text)."""
    if inv.lto or not inv.inputs or any(not i.lang for i in inv.inputs) or not _plain_sources(inv, C_LANGS):
        return None
    if inv.output and len(inv.inputs) > 1:
        raise EnzccError("cannot specify -o when generating multiple output files")
    for inp in inv.inputs:
        out = inv.output or os.path.splitext(os.path.basename(inp.path))[0] + ".o"
        with atomic_output(out) as tmp:
            _compile_one(inv, cxx, inp, tmp, out)
    return 0


def _compile_one(inv: Invocation, cxx: bool, inp, tmp: str, out: str) -> None:
    level = inv.opt_level if inv.opt_level is not None else 0
    cmd = compile_with_bitcode_command(find_tool("clang++" if inp.lang == "c++" else "clang"), inp.path, tmp, out,
                                       lang=inp.lang, forced=inp.forced or bool(inv.lang_override),
                                       compile_args=list(inv.compile_args), lang_args=[],
                                       dep_args=list(inv.dep_args), opt_flag=inv.opt_flag, level=level)
    run(cmd, tool="clang")
    with open(tmp, "rb") as fh:
        obj = fh.read()
    if obj[:4] in (b"BC\xc0\xde", b"\xde\xc0\x17\x0b"):  # (raw or wrapped bitcode: -flto, -emit-llvm)
        raise EnzccError("this compile makes an LLVM bitcode object (-flto?); enzcc -c makes native objects "
                         "that carry their bitcode for AD at the link: drop -flto", inp.path)
    bitcode = E.elf_section(obj, ".llvmbc")
    if not bitcode:
        raise EnzccError(f"clang put no bitcode into the object for {inp.path}", inp.path)
    rec = E.BitcodeRecord(bitcode=bitcode, source=inp.path, lang=inp.lang, opt=level, target=inv.target or "")
    if E.calls_enzyme(bitcode):  # (through a header's macro: the driver differentiates it as always)
        from enzcc.driver import Driver

        driver = Driver(inv, cxx=cxx)
        try:
            driver._differentiate_translation_unit(rec, tmp)
        finally:
            driver.close()
    E.embed(tmp, [rec], os.path.dirname(tmp))


# -- links ----------------------------------------------------------------------------------------


def _library_dirs(inv: Invocation) -> list[str]:
    dirs = [f[2:] for f in inv.link_flags() if f.startswith("-L")]
    return dirs + [d for d in os.environ.get("LIBRARY_PATH", "").split(":") if d]


def _resolve_lib(inv: Invocation, name: str) -> str | None:
    """The file ``-l<name>`` names in the user's library directories (None: a system library), as the driver
    finds it."""
    static = "-static" in inv.link_flags()
    candidates = [name[1:]] if name.startswith(":") else ([] if static else [f"lib{name}.so"]) + [f"lib{name}.a"]
    for d in _library_dirs(inv):
        for cand in candidates:
            path = os.path.join(d, cand)
            if os.path.exists(path):
                return path
    return None


def _record_langs(payload: bytes) -> set[bytes]:
    """The ``lang`` of each record header in an ``.enzcc.bc`` section (written by enzcc: ``"lang": "c"``)."""
    langs, key, pos = set(), b'"lang": "', 0
    while True:
        pos = payload.find(key, pos)
        if pos < 0:
            return langs
        end = payload.find(b'"', pos + len(key))
        langs.add(payload[pos + len(key):end])
        pos = end


def _input_langs(path: str) -> set[bytes] | None:
    """The languages of the bitcode an object, archive or library carries; None when the driver must link it
    (bitcode calling Enzyme, or bitcode without machine code)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return set()  # (the linker reports it)
    if data[:8] == b"!<thin>\n":  # (members in files of their own)
        langs: set[bytes] = set()
        for m in E.read_archive(path):
            found = _object_langs(m.data)
            if found is None:
                return None
            langs |= found
        return langs
    if b"`\n" + E.MAGIC in data:  # (an archive member of bitcode alone: its bytes follow its header's "`\n")
        return None
    if not E.is_archive(data):
        return _object_langs(data)
    if E.calls_enzyme(data):
        return None
    langs = set()
    if E.MAGIC in data:
        for m in E.read_archive(path):
            langs |= _record_langs(E.elf_section(m.data, E.SECTION) or b"")
    return langs


def _object_langs(data: bytes) -> set[bytes] | None:
    if E.calls_enzyme(data) or data[:8] == E.MAGIC:
        return None
    return _record_langs(E.elf_section(data, E.SECTION) or b"") if E.MAGIC in data else set()


def _link(inv: Invocation, cxx: bool) -> int | None:
    """A link that differentiates nothing: one clang run (see the module's text)."""
    if not inv.inputs or inv.output == "-" or not _plain_sources(inv, DIRECT_LANGS):
        return None
    sources = [i for i in inv.inputs if i.lang]
    if sources and inv.dep_args:
        return None
    langs: set[bytes] = set()
    for x in inv.link_line:
        path = x.path if not isinstance(x, str) else _resolve_lib(inv, x[2:]) if x.startswith("-l") else None
        if path is None or (not isinstance(x, str) and x.lang):
            continue
        found = _input_langs(path)
        if found is None or not found <= set(PLAIN_RECORD_LANGS):
            return None
        langs |= found
    plus = cxx or b"c++" in langs or any(i.lang == "c++" for i in sources)
    if plus and any(i.lang == "c" for i in sources):
        return None  # (clang++ would compile the C sources as C++; the driver compiles them as C)
    cmd = [find_tool("clang++" if plus else "clang")]
    if sources:
        cmd += [*ATTRIBUTE_DEFINES, *include_args("c")]
    cmd += without_flags(inv.args, (ENZCC, OUTPUT))
    try:
        with atomic_output(inv.output or "a.out") as tmp:
            if sources:
                _link_sources([*cmd, "-o", tmp], tmp)
            else:
                run([*cmd, "-o", tmp], tool="linker")
    except _ToDriver:
        return None
    return 0


def _link_sources(cmd: list[str], tmp: str) -> None:
    """Compile and link sources in one clang run. Its diagnostics are held back until it is known that no
    source reached Enzyme through a header (a failed link naming ``__enzyme_``, or an output naming it): then
    the driver does the work and shows its own."""
    err = tmp + ".stderr"
    if os.isatty(2):
        cmd.insert(1, "-fcolor-diagnostics")  # (as clang writing to the terminal; a later -fno-... still wins)
    try:
        code = _spawn(cmd, err)
        with open(err, "rb") as fh:
            diagnostics = fh.read()
    finally:
        if os.path.exists(err):
            os.unlink(err)
    if code != 0:
        if E.calls_enzyme(diagnostics):
            raise _ToDriver
        _replay(diagnostics)
        raise SubprocessFailed("linker", code)
    with open(tmp, "rb") as fh:
        if E.calls_enzyme(fh.read()):
            raise _ToDriver
    _replay(diagnostics)


def _spawn(cmd: list[str], stderr_path: str) -> int:
    """Run ``cmd`` with its standard error in ``stderr_path``; its exit code."""
    if verbose():
        print("enzcc: + " + " ".join(cmd), file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    actions = [(os.POSIX_SPAWN_OPEN, 2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)]
    pid = os.posix_spawn(cmd[0], cmd, os.environ, file_actions=actions)
    try:
        status = os.waitpid(pid, 0)[1]
    except BaseException:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise
    return os.waitstatus_to_exitcode(status)


def _replay(diagnostics: bytes) -> None:
    if diagnostics:
        sys.stderr.flush()
        sys.stderr.buffer.write(diagnostics)
        sys.stderr.flush()
