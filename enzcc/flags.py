"""The command line of a clang-compatible driver: one table of flags with their arity and role.

Every argument is classified by :data:`FLAGS`. Flags the table does not know go to clang unchanged
(both when compiling and when linking), as ccache and wllvm do.
"""

from __future__ import annotations

import os

from enzcc.errors import EnzccError
from enzcc.records import factory, record

# Roles of a flag.
COMPILE = "compile"  # preprocessing / code generation of a source file
LINK = "link"        # native link step only
BOTH = "both"        # given to compiles and to the link
DEP = "dep"          # dependency-file generation (-MD...): only for the real compile
MODE = "mode"        # -c -S -E ...
OUTPUT = "output"    # -o
LANG = "lang"        # -x
OPT = "opt"          # -O<level>
QUERY = "query"      # --version, -print-*: answered by clang itself
TARGET = "target"    # --target / -target
ENZCC = "enzcc"      # enzcc's own options


@record(frozen=True)
class FlagSpec:
    """One entry of the flag table."""

    name: str
    """The flag's spelling, e.g. ``-I`` or ``-shared``; a prefix when ``joined``."""
    role: str
    """Which steps receive it (one of the role constants above)."""
    arity: int = 0
    """How many separate arguments follow the flag (0 or 1)."""
    joined: bool = False
    """The flag is a prefix and its value may be glued to it (``-Ifoo``, ``-O2``, ``-Wl,-x``)."""


def _f(name, role, arity=0, joined=False):
    return FlagSpec(name, role, arity, joined)


#: The flag table. Order does not matter: the longest matching spelling wins.
FLAGS: tuple[FlagSpec, ...] = (
    # modes
    _f("-c", MODE), _f("-S", MODE), _f("-E", MODE), _f("-M", MODE), _f("-MM", MODE),
    _f("-fsyntax-only", MODE), _f("-emit-llvm", MODE),
    # output and language
    _f("-o", OUTPUT, 1, True), _f("-x", LANG, 1, True),
    _f("-O", OPT, 0, True),
    # dependency files
    _f("-MD", DEP), _f("-MMD", DEP), _f("-MP", DEP), _f("-MG", DEP), _f("-MV", DEP),
    _f("-MF", DEP, 1, True), _f("-MT", DEP, 1, True), _f("-MQ", DEP, 1, True), _f("-MJ", DEP, 1, True),
    # preprocessor and compiler
    _f("-I", COMPILE, 1, True), _f("-D", COMPILE, 1, True), _f("-U", COMPILE, 1, True),
    _f("-include", COMPILE, 1, True), _f("-imacros", COMPILE, 1, True), _f("-isystem", COMPILE, 1, True),
    _f("-iquote", COMPILE, 1, True), _f("-idirafter", COMPILE, 1, True), _f("-isysroot", COMPILE, 1, True),
    _f("-iprefix", COMPILE, 1, True), _f("-iwithprefix", COMPILE, 1, True), _f("-J", COMPILE, 1, True),
    _f("-std=", COMPILE, 0, True), _f("--std=", COMPILE, 0, True), _f("-W", COMPILE, 0, True),
    _f("-Wp,", COMPILE, 0, True), _f("-Wa,", COMPILE, 0, True), _f("-w", COMPILE), _f("-pedantic", COMPILE),
    _f("-pedantic-errors", COMPILE), _f("-ansi", COMPILE), _f("-nostdinc", COMPILE), _f("-nostdinc++", COMPILE),
    _f("-g", COMPILE, 0, True), _f("-f", COMPILE, 0, True), _f("-Xclang", COMPILE, 1),
    _f("-Xpreprocessor", COMPILE, 1), _f("-Xassembler", COMPILE, 1), _f("-Xflang", COMPILE, 1),
    _f("-mllvm", COMPILE, 1), _f("-C", COMPILE), _f("-P", COMPILE), _f("-H", COMPILE), _f("-trigraphs", COMPILE),
    _f("-save-temps", COMPILE, 0, True), _f("-ffree-form", COMPILE), _f("-ffixed-form", COMPILE),
    _f("-cpp", COMPILE), _f("-nocpp", COMPILE), _f("-module-dir", COMPILE, 1),
    # flags for compile and link alike
    _f("-m", BOTH, 0, True), _f("-pthread", BOTH), _f("-fPIC", BOTH), _f("-fpic", BOTH), _f("-fPIE", BOTH),
    _f("-fpie", BOTH), _f("-fno-PIC", BOTH), _f("-fno-pic", BOTH), _f("-fno-PIE", BOTH), _f("-fno-pie", BOTH),
    _f("-fopenmp", BOTH, 0, True), _f("-fsanitize=", BOTH, 0, True), _f("-fno-sanitize=", BOTH, 0, True),
    _f("-fprofile-", BOTH, 0, True), _f("-fcoverage-mapping", BOTH), _f("--coverage", BOTH),
    _f("-stdlib=", BOTH, 0, True), _f("--sysroot", BOTH, 1, True), _f("--sysroot=", BOTH, 0, True),
    _f("-B", BOTH, 1, True), _f("--gcc-toolchain=", BOTH, 0, True), _f("-pipe", BOTH), _f("-v", BOTH),
    _f("-flto", BOTH, 0, True), _f("-fno-lto", BOTH),
    _f("--target=", TARGET, 0, True), _f("-target", TARGET, 1), _f("--cuda-gpu-arch=", TARGET, 0, True),
    _f("--offload-arch=", TARGET, 0, True),
    # link only
    _f("-l", LINK, 1, True), _f("-L", LINK, 1, True), _f("-Wl,", LINK, 0, True), _f("-Xlinker", LINK, 1),
    _f("-shared", LINK), _f("-static", LINK), _f("-static-pie", LINK), _f("-rdynamic", LINK), _f("-pie", LINK),
    _f("-no-pie", LINK), _f("-nostdlib", LINK), _f("-nostdlib++", LINK), _f("-nostartfiles", LINK),
    _f("-nodefaultlibs", LINK), _f("-s", LINK), _f("-T", LINK, 1, True), _f("-u", LINK, 1, True),
    _f("-z", LINK, 1, True), _f("-e", LINK, 1), _f("-fuse-ld=", LINK, 0, True), _f("--ld-path=", LINK, 0, True),
    _f("-static-libgcc", LINK), _f("-static-libstdc++", LINK), _f("-shared-libgcc", LINK),
    _f("-rtlib=", LINK, 0, True), _f("-unwindlib=", LINK, 0, True), _f("-r", LINK),
    # answered by clang without compiling anything
    _f("--version", QUERY), _f("-dumpversion", QUERY), _f("-dumpmachine", QUERY), _f("-print-", QUERY, 0, True),
    _f("--print-", QUERY, 0, True), _f("-###", QUERY), _f("--help", QUERY), _f("-help", QUERY),
    # enzcc's own options
    _f("--lang", ENZCC, 1, True), _f("--ad-mode", ENZCC, 1, True), _f("--ad-inline", ENZCC, 1, True), _f("--time-report", ENZCC),
    _f("--keep-temps", ENZCC), _f("--enzcc-version", ENZCC), _f("--whole-program-object", ENZCC),
    _f("--no-cache", ENZCC), _f("--cache-stats", ENZCC), _f("--cuda-host-emulation", ENZCC),
)

_BY_NAME: dict[str, list[FlagSpec]] = {}
for _spec in FLAGS:
    _BY_NAME.setdefault(_spec.name, []).append(_spec)


def lookup(arg: str) -> tuple[FlagSpec | None, str | None]:
    """Find the spec for ``arg``. Returns ``(spec, joined_value)``; ``joined_value`` is None when the
    value (if any) is the next argument."""
    exact = _BY_NAME.get(arg)
    if exact:
        return exact[0], None
    best: FlagSpec | None = None
    for spec in FLAGS:
        if spec.joined and arg.startswith(spec.name) and (best is None or len(spec.name) > len(best.name)):
            best = spec
    if best is None:
        return None, None
    value = arg[len(best.name):]
    if best.name in ("--lang", "--ad-mode", "--ad-inline") and value.startswith("="):
        value = value[1:]
    return best, value


def without_flags(args: list[str], roles: tuple[str, ...] = (ENZCC,)) -> list[str]:
    """``args`` without the flags of these roles (by default enzcc's own, which clang does not know) and their
    separate values."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        spec, joined = lookup(arg)
        if spec is not None and spec.role in roles:
            skip = spec.arity == 1 and joined is None
            continue
        out.append(arg)
    return out


def asks_the_linker(args: list[str]) -> bool:
    """Flags for the linker without inputs (``-Wl,--version``, ``-Xlinker -v``: meson's and CMake's linker
    probes), which clang answers by running the linker."""
    return any(a.startswith("-Wl,") or a == "-Xlinker" for a in args)


# ---------------------------------------------------------------------------------------------
# languages

#: enzcc language name -> clang ``-x`` spelling (None when clang does not compile it)
LANGUAGES = {
    "c": "c", "c++": "c++", "cuda": "cuda", "fortran": None, "rust": None, "llvm": "ir", "mlir": None,
    "assembler": "assembler", "assembler-with-cpp": "assembler-with-cpp",
}

EXTENSIONS = {
    ".c": "c", ".i": "c",
    ".cc": "c++", ".cpp": "c++", ".cxx": "c++", ".c++": "c++", ".C": "c++", ".cp": "c++", ".ii": "c++",
    ".f": "fortran", ".for": "fortran", ".ftn": "fortran", ".f77": "fortran", ".f90": "fortran",
    ".f95": "fortran", ".f03": "fortran", ".f08": "fortran", ".F": "fortran", ".FOR": "fortran",
    ".F90": "fortran", ".F95": "fortran", ".F03": "fortran", ".F08": "fortran",
    ".cu": "cuda", ".rs": "rust", ".ll": "llvm", ".bc": "llvm", ".mlir": "mlir",
    ".s": "assembler", ".S": "assembler-with-cpp", ".sx": "assembler-with-cpp",
}

#: ``-x``/``--lang`` spellings accepted for each language
LANG_ALIASES = {
    "c": "c", "c++": "c++", "cxx": "c++", "cpp": "c++", "cuda": "cuda", "cu": "cuda",
    "fortran": "fortran", "f95": "fortran", "f77": "fortran", "f90": "fortran", "f95-cpp-input": "fortran",
    "f77-cpp-input": "fortran", "rust": "rust", "ir": "llvm", "llvm": "llvm", "llvm-ir": "llvm",
    "mlir": "mlir", "assembler": "assembler", "assembler-with-cpp": "assembler-with-cpp",
}


def language_of(path: str, forced: str | None = None) -> str | None:
    """Language of a source file, or None for link inputs (objects, archives, shared libraries)."""
    if forced:
        return forced
    ext = os.path.splitext(path)[1]
    return EXTENSIONS.get(ext)


_LINK_INPUT_EXTS = (".o", ".obj", ".a", ".so", ".lo", ".dylib", ".rlib")


def is_link_input_name(path: str) -> bool:
    """Whether ``path`` is named like an object, archive or shared library."""
    base = os.path.basename(path)
    return base.endswith(_LINK_INPUT_EXTS) or ".so." in base


# ---------------------------------------------------------------------------------------------
# response files


def expand_response_files(args: list[str], depth: int = 0) -> list[str]:
    """Expand ``@file`` arguments (recursively), gcc/clang style."""
    if depth > 16:
        raise EnzccError("response files nested too deeply")
    out: list[str] = []
    for arg in args:
        if arg.startswith("@") and len(arg) > 1 and os.path.isfile(arg[1:]):
            try:
                with open(arg[1:], encoding="utf-8") as fh:
                    text = fh.read()
            except OSError as exc:
                raise EnzccError(f"cannot read response file {arg[1:]}: {exc.strerror}") from None
            try:
                import shlex

                words = shlex.split(text, posix=True)
            except ValueError as exc:
                raise EnzccError(f"malformed response file {arg[1:]}: {exc}") from None
            out.extend(expand_response_files(words, depth + 1))
        else:
            out.append(arg)
    return out


# ---------------------------------------------------------------------------------------------
# the parsed command line


@record
class Input:
    """A file on the command line."""

    path: str
    """As written by the user."""
    lang: str | None
    """Source language, or None for a link input (object, archive, shared library)."""
    forced: bool = False
    """The language came from ``-x``."""


@record
class Invocation:
    """A classified command line."""

    args: list[str]
    """The arguments after response-file expansion (for passing through to clang unchanged)."""
    mode: str = "link"
    """``link`` (default), ``compile`` (-c), ``asm`` (-S), ``preprocess`` (-E/-M/-MM),
    ``query`` (--version, -print-*), ``passthrough`` (things clang does better alone)."""
    output: str | None = None
    opt_level: int | None = None
    """Speed level 0..3 from ``-O``; None when not given."""
    opt_flag: str | None = None
    """The -O flag as spelled."""
    inputs: list[Input] = factory(list)
    compile_args: list[str] = factory(list)
    """Flags for every compile, in order (includes BOTH-role flags)."""
    dep_args: list[str] = factory(list)
    """-MD/-MF... for the real compile only."""
    link_line: list[str | Input] = factory(list)
    """Link flags and inputs in command-line order (order matters for -l and archives)."""
    target: str | None = None
    cpu: str | None = None
    """``-march``/``--cuda-gpu-arch`` value (used for nvptx)."""
    lang_override: str | None = None
    """``--lang`` value."""
    cuda_host_emulation: bool = False
    """``--cuda-host-emulation``: CUDA device code runs on the CPU (:mod:`enzcc.backend.cuda_host`)."""
    cuda_arch: str | None = None
    """``--cuda-gpu-arch=``/``--offload-arch=`` value: the GPU of CUDA sources, the SM of NVPTX builds."""
    march: str | None = None
    """``-march`` value: the host CPU of a build that also has CUDA sources."""
    ad_mode: str = "after-opt"
    ad_inline: str = "auto"
    """``--ad-inline``: which calls inside differentiated code are inlined (``auto``, ``all``, ``none``)."""
    time_report: bool = False
    no_cache: bool = False
    """``--no-cache``: neither use nor fill the build cache."""
    keep_temps: bool = False
    whole_object: bool = False
    """Link mode writes the optimized whole-program object instead of calling the native linker."""
    emit_llvm: bool = False

    @property
    def lto(self) -> bool:
        """``-flto`` / ``-flto=thin`` (the last of them and ``-fno-lto`` wins): objects hold bitcode only."""
        on = False
        for a in self.compile_args:
            if a == "-fno-lto":
                on = False
            elif a == "-flto" or a.startswith("-flto="):
                on = True
        return on

    def _last_switch(self, on: tuple[str, ...], off: tuple[str, ...]) -> bool | None:
        """The last of the ``on``/``off`` flags given (True/False), None when neither is."""
        value = None
        for a in self.compile_args:
            if a in on:
                value = True
            elif a in off:
                value = False
        return value

    @property
    def loop_vectorize(self) -> bool | None:
        """``-fvectorize`` / ``-fno-vectorize`` (also ``-f[no-]tree-vectorize``), as clang reads them; None: the
        level's default."""
        return self._last_switch(("-fvectorize", "-ftree-vectorize"), ("-fno-vectorize", "-fno-tree-vectorize"))

    @property
    def slp_vectorize(self) -> bool | None:
        """``-fslp-vectorize`` / ``-fno-slp-vectorize`` (also ``-f[no-]tree-slp-vectorize``); None: the level's
        default."""
        return self._last_switch(("-fslp-vectorize", "-ftree-slp-vectorize"),
                                 ("-fno-slp-vectorize", "-fno-tree-slp-vectorize"))

    @property
    def veclib(self) -> str | None:
        """``-fveclib=<library>``, the last one given (clang's spelling: libmvec, none); None: not given (no
        vector math library: loops calling sin, exp, ... stay scalar)."""
        value = None
        for a in self.compile_args:
            if a.startswith("-fveclib="):
                value = a.split("=", 1)[1]
        return value

    @property
    def unroll_loops(self) -> bool | None:
        """``-funroll-loops`` / ``-fno-unroll-loops``; None: the level's default."""
        return self._last_switch(("-funroll-loops",), ("-fno-unroll-loops",))

    @property
    def is_nvptx(self) -> bool:
        return bool(self.target and self.target.startswith("nvptx"))

    def link_flags(self) -> list[str]:
        return [x for x in self.link_line if isinstance(x, str)]


_OPT_LEVELS = {"": 1, "0": 0, "1": 1, "2": 2, "3": 3, "s": 2, "z": 2, "fast": 3, "g": 1, "4": 3}


def parse_opt_level(value: str) -> int:
    if value in _OPT_LEVELS:
        return _OPT_LEVELS[value]
    if value.isdigit():
        return 3
    raise EnzccError(f"invalid optimization level '-O{value}'")


def parse_args(argv: list[str]) -> Invocation:
    """Classify ``argv`` (without the program name)."""
    args = expand_response_files(argv)
    inv = Invocation(args=args)
    forced_lang: str | None = None
    modes: list[str] = []
    i = 0
    n = len(args)

    def take_value(spec: FlagSpec, joined: str | None, arg: str) -> tuple[str, list[str]]:
        """Return (value, original spelling as list of args)."""
        nonlocal i
        if joined:
            return joined, [arg]
        if spec.arity:
            if i + 1 >= n:
                raise EnzccError(f"argument to '{arg}' is missing (expected 1 value)")
            i += 1
            return args[i], [arg, args[i]]
        return "", [arg]

    while i < n:
        arg = args[i]
        if arg == "-" or not arg.startswith("-") or arg == "--":
            if arg == "--":
                i += 1
                continue
            inp = Input(arg, language_of(arg, forced_lang if arg != "-" else (forced_lang or "c")))
            inp.forced = forced_lang is not None
            inv.inputs.append(inp)
            inv.link_line.append(inp)
            i += 1
            continue
        spec, joined = lookup(arg)
        if spec is None:
            # unknown: clang gets it unchanged, at compile and at link
            inv.compile_args.append(arg)
            inv.link_line.append(arg)
            i += 1
            continue
        value, spelled = take_value(spec, joined, arg)
        role = spec.role
        if role == MODE:
            if spec.name == "-emit-llvm":
                inv.emit_llvm = True
            modes.append(spec.name)
        elif role == OUTPUT:
            inv.output = value
        elif role == LANG:
            forced_lang = None if value == "none" else LANG_ALIASES.get(value)
            if value != "none" and forced_lang is None:
                raise EnzccError(f"language not recognized: '{value}'")
        elif role == OPT:
            inv.opt_level = parse_opt_level(value)
            inv.opt_flag = arg
        elif role == DEP:
            inv.dep_args.extend(spelled)
        elif role == COMPILE:
            inv.compile_args.extend(spelled)
        elif role == BOTH:
            inv.compile_args.extend(spelled)
            inv.link_line.extend(spelled)
            if spec.name == "-m" and value.startswith("arch="):
                inv.cpu = inv.march = value[len("arch="):]
        elif role == LINK:
            if spec.name in ("-l", "-L"):
                spelled = [spec.name + value]  # one token, so link-line order is easy to keep
            inv.link_line.extend(spelled)
        elif role == TARGET:
            if spec.name in ("--cuda-gpu-arch=", "--offload-arch="):
                if inv.cuda_arch and value != inv.cuda_arch:
                    raise EnzccError(f"{arg}: enzcc builds CUDA for one GPU architecture per compile "
                                     f"(--cuda-gpu-arch={inv.cuda_arch} was given already)")
                inv.cpu = inv.cuda_arch = value
            else:
                inv.target = value
                inv.compile_args.extend(spelled)
                inv.link_line.extend(spelled)
        elif role == QUERY:
            modes.append("query")
        elif role == ENZCC:
            if spec.name == "--lang":
                if value not in LANG_ALIASES:
                    raise EnzccError(f"--lang: unknown language '{value}' "
                                     "(expected c, c++, cuda, fortran, rust, llvm or mlir)")
                inv.lang_override = LANG_ALIASES[value]
            elif spec.name == "--ad-mode":
                if value not in ("after-opt", "before-opt"):
                    raise EnzccError(f"--ad-mode: expected 'after-opt' or 'before-opt', not '{value}'")
                inv.ad_mode = value
            elif spec.name == "--ad-inline":
                if value not in ("auto", "all", "none"):
                    raise EnzccError(f"--ad-inline: expected 'auto', 'all' or 'none', not '{value}'")
                inv.ad_inline = value
            elif spec.name == "--time-report":
                inv.time_report = True
            elif spec.name == "--keep-temps":
                inv.keep_temps = True
            elif spec.name == "--whole-program-object":
                inv.whole_object = True
            elif spec.name == "--enzcc-version":
                modes.append("enzcc-version")
            elif spec.name == "--no-cache":
                inv.no_cache = True
            elif spec.name == "--cuda-host-emulation":
                inv.cuda_host_emulation = True
            elif spec.name == "--cache-stats":
                modes.append("cache-stats")
        i += 1

    if inv.lang_override:
        # --lang applies to every input not given an explicit -x, except link inputs
        for inp in inv.inputs:
            if not inp.forced and not is_link_input_name(inp.path):
                inp.lang = inv.lang_override
    if "enzcc-version" in modes:
        inv.mode = "enzcc-version"
    elif "cache-stats" in modes:
        inv.mode = "cache-stats"
    elif "query" in modes or (not inv.inputs and ("-v" in args or asks_the_linker(args))):
        inv.mode = "query"
    elif "-E" in modes or (("-M" in modes or "-MM" in modes) and "-c" not in modes):
        inv.mode = "preprocess"
    elif "-fsyntax-only" in modes:
        inv.mode = "passthrough"
    elif "-S" in modes:
        inv.mode = "asm"
    elif "-c" in modes:
        inv.mode = "compile"
    else:
        inv.mode = "link"
    if inv.emit_llvm and inv.mode == "compile":
        inv.mode = "asm"  # (-c -emit-llvm: bitcode, -S -emit-llvm: text; both from asm_mode)
    return inv
