"""The framework-independent part: compile a function and its enzcc derivatives into a cached shared library.

A kernel is declared by its C parameters, in order (see plugins/ABI.md, "Python side")::

    from enzcc_plugins import In, Out, Scalar, Int, load_kernel
    k = load_kernel("f.c", "f", [In("x", shape=("n",)), Int("n"), Scalar("alpha"), Out("y", shape=("n",))])
    y = k(x, 0.5)

enzcc compiles the source (C, C++ ``extern "C"``, Fortran ``bind(c)`` or Rust ``#[no_mangle] extern "C"``)
with a generated C wrapper exporting ``NAME_enzcc_primal``, ``NAME_enzcc_vjp`` (``__enzyme_autodiff``) and
``NAME_enzcc_jvp`` (``__enzyme_fwddiff``), each taking arrays of argument addresses (plugins/ABI.md); the
second-order ``NAME_enzcc_vjp_jvp`` (forward over reverse) is built into a second library on first use.
Before the wrapper is built, the source alone is compiled to bitcode and the function's LLVM type (and,
for array element types, its debug info) is checked against the declaration, so a mismatch is a
:class:`PrototypeError` naming the parameter, never a call through the wrong prototype.

Libraries are cached in a content-addressed directory (``$XDG_CACHE_HOME/enzcc/plugins``, by default
``~/.cache/enzcc/plugins``; ``ENZCC_PLUGINS_CACHE`` overrides it), keyed by the source text, the function
name, the declaration's kinds and types, the flags and the enzcc version. A library is built in a private
temporary directory and renamed into place under a lock, so concurrent processes are safe and never see a
partial file.

The seed API stays: ``load(source, name)`` returns a :class:`Kernel` for ``void f(const T *in, size_t n,
T *out)`` with ``forward`` / ``backward`` on NumPy arrays, buffers or sequences, and ``*_ptr`` variants on raw
addresses.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import hashlib
import inspect
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .guard import CheckedCallError  # (the checked mode's error, exported with the others)

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: concurrent builds are still safe (atomic rename)
    fcntl = None

__all__ = ["EnzccBuildError", "PrototypeError", "SecondOrderError", "ShapeError", "In", "Out", "Scalar", "Int",
           "ArraySpec", "Plan", "CompiledKernel", "load_kernel", "Kernel", "load", "cache_dir", "normalize_dtype",
           "detect_dtype", "WRAPPER_ABI", "memoised", "memoise_ops", "CheckedCallError"]

#: bumped whenever the generated wrapper or the build command changes meaning (part of the cache key)
WRAPPER_ABI = 3
#: bumped whenever the generated code changes without changing the ABI (part of the cache key)
WRAPPER_REVISION = 5

_log = logging.getLogger("enzcc")

_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double}
_C_NAMES = {"float32": "float", "float64": "double"}
_TYPECODES = {"float32": "f", "float64": "d"}
_LLVM_FLOATS = {"float": "float32", "double": "float64"}
_DTYPE_ALIASES = {
    "float32": "float32", "float": "float32", "f": "float32", "f4": "float32", "single": "float32",
    "float64": "float64", "double": "float64", "d": "float64", "f8": "float64",
}
_NATIVE = "@=<" if sys.byteorder == "little" else "@=>"  # buffer format prefixes meaning native order
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_LANGS = {".c": "c", ".cc": "c++", ".cpp": "c++", ".cxx": "c++", ".c++": "c++", ".C": "c++",
          ".f": "fortran", ".for": "fortran", ".f77": "fortran", ".f90": "fortran", ".f95": "fortran",
          ".f03": "fortran", ".f08": "fortran", ".F": "fortran", ".F90": "fortran", ".F95": "fortran",
          ".rs": "rust"}
_LANG_NAMES = {"c": "c", "c++": "c++", "cxx": "c++", "cpp": "c++", "fortran": "fortran", "rust": "rust"}
_LANG_SUFFIX = {"c": ".c", "c++": ".cpp", "fortran": ".f90", "rust": ".rs"}


class EnzccBuildError(RuntimeError):
    """enzcc could not build the function or its derivatives. ``str()`` starts with enzcc's one-line error;
    ``.output`` holds everything the compiler printed and ``.command`` the command line."""

    def __init__(self, message: str, output: str = "", command: Sequence[str] = ()):
        super().__init__(message)
        self.output = output
        self.command = list(command)


class PrototypeError(EnzccBuildError):
    """The declaration does not match the function's prototype (count, kind or type of a parameter)."""


class SecondOrderError(EnzccBuildError):
    """enzcc cannot build the second-order entry point (forward over reverse) of this function."""


class ShapeError(ValueError):
    """An argument's shape does not fit the declaration (the message names the argument)."""


# --- dtypes ------------------------------------------------------------------------------------------------


def normalize_dtype(dtype) -> str:
    """'float32' or 'float64' from a name ('float', 'double', 'float64', ...) or a NumPy/PyTorch/JAX dtype."""
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type) and issubclass(dtype, float):
        name = "float64"
    else:
        inner = getattr(dtype, "dtype", None)  # jnp.float32 and NumPy scalar types carry a dtype
        name = (getattr(dtype, "name", None) or getattr(inner, "name", None) or getattr(dtype, "__name__", None)
                or str(dtype))
        if not isinstance(name, str):  # pragma: no cover - defensive
            name = str(dtype)
    key = name.strip().lower()
    for prefix in ("torch.", "numpy.", "np.", "jnp.", "jax.numpy.", "tf.", "tensorflow."):
        if key.startswith(prefix):
            key = key[len(prefix):]
    if key not in _DTYPE_ALIASES:
        raise ValueError(f"unsupported dtype {dtype!r}: enzcc_plugins handles float32 (C float) and "
                         f"float64 (C double)")
    return _DTYPE_ALIASES[key]


def detect_dtype(source_text: str, name: str) -> str | None:
    """The element type of ``name``'s first parameter as declared in C source text ('float32'/'float64'),
    or None when the text does not tell (e.g. a macro type). load() reads the compiled prototype instead."""
    pat = re.compile(r"\b" + re.escape(name) + r"\s*\(\s*(?:const\s+)?(float|double)\b(?:\s+const\b)?\s*\*")
    found = {m.group(1) for m in pat.finditer(_strip_comments(source_text))}
    if len(found) == 1:
        return "float32" if found.pop() == "float" else "float64"
    return None


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


# --- declarations ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArraySpec:
    """What a shape callable sees of an input array: its shape and dtype."""

    shape: tuple
    dtype: str | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Param:
    """One C parameter of a kernel. Build it with :func:`In`, :func:`Out`, :func:`Scalar` or :func:`Int`."""

    name: str
    kind: str                      # "in", "out", "scalar", "int"
    dtype: str | None = None       # float32/float64 (filled in by load_kernel); None for ints
    const: bool = False
    shape: Any = None              # In: None / tuple / callable; Out: tuple / callable
    value: Any = None              # Int: None / int / callable
    index: int = -1                # C position (filled in by load_kernel)
    ctype: str | None = None       # Int: the C integer type the function takes (filled in by load_kernel)

    @property
    def differentiable(self) -> bool:
        """An input array or float scalar that takes a gradient."""
        return self.kind in ("in", "scalar") and not self.const

    @property
    def is_array(self) -> bool:
        return self.kind in ("in", "out")

    def describe(self) -> str:
        """How the declaration reads, e.g. ``In(float64, const)``."""
        kind = {"in": "In", "out": "Out", "scalar": "Scalar", "int": "Int"}[self.kind]
        extra = [self.dtype] if self.dtype else []
        if self.const:
            extra.append("const")
        return f"{kind}({', '.join(extra)})"


def _check_name(name) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"parameter names must be Python identifiers, got {name!r}")
    return name


def _opt_dtype(dtype) -> str | None:
    return None if dtype is None else normalize_dtype(dtype)


def _check_shape_decl(name: str, shape, output: bool):
    if shape is None or callable(shape):
        return shape
    if isinstance(shape, (int, str)) or not isinstance(shape, (tuple, list)):
        raise TypeError(f"{name}: shape must be a tuple (entries int, str or None) or a callable, got {shape!r}")
    for s in shape:
        if s is None and output:
            raise TypeError(f"{name}: an output's shape cannot have None extents: {tuple(shape)!r}")
        if not (s is None or isinstance(s, str) or (isinstance(s, int) and not isinstance(s, bool) and s >= 0)):
            raise TypeError(f"{name}: shape entries must be non-negative ints, names or None, got {s!r}")
    return tuple(shape)


def In(name: str, *, dtype=None, shape=None, const: bool = False) -> Param:
    """An input array (``const T *``), C-contiguous. shape: None (any), a tuple of ints / names of Int
    parameters or symbols / None, or a callable of other parameters returning the expected shape.
    const=True: no gradient (``enzyme_const``)."""
    name = _check_name(name)
    return Param(name, "in", _opt_dtype(dtype), bool(const), _check_shape_decl(name, shape, False))


def Out(name: str, shape, *, dtype=None) -> Param:
    """An output array (``T *``) the function writes entirely. shape: a tuple of ints / names of Int
    parameters, or a callable of the inputs (as :class:`ArraySpec`) and Int values returning a tuple."""
    name = _check_name(name)
    if shape is None:
        raise TypeError(f"{name}: an output needs shape= (a tuple, or a callable of the inputs and ints)")
    return Param(name, "out", _opt_dtype(dtype), False, _check_shape_decl(name, shape, True))


def Scalar(name: str, *, dtype=None, const: bool = False) -> Param:
    """A float scalar (``float``/``double`` by value), a 0-d input; differentiable unless const=True."""
    return Param(_check_name(name), "scalar", _opt_dtype(dtype), bool(const))


def Int(name: str, value=None) -> Param:
    """An integer parameter (any C integer type), never differentiated. value: None (bound from an input
    extent of that name, else a call argument), an int (a constant) or a callable of the inputs and other
    ints."""
    name = _check_name(name)
    if not (value is None or callable(value) or (isinstance(value, int) and not isinstance(value, bool))):
        raise TypeError(f"Int {name!r}: value must be None, an int or a callable, got {value!r}")
    return Param(name, "int", None, False, None, value)


def _callable_args(fn, owner: str, names: Mapping[str, Param]) -> tuple[str, ...]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{owner}: cannot read the parameters of {fn!r}: {e}") from None
    args = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{owner}: the callable must name its parameters (no *args/**kwargs)")
        if p.name not in names:
            if p.default is not p.empty:
                continue
            raise ValueError(f"{owner}: the callable's parameter {p.name!r} is not a parameter of the kernel "
                             f"(known: {', '.join(names)})")
        if names[p.name].kind not in ("in", "int"):
            raise ValueError(f"{owner}: the callable's parameter {p.name!r} is a {names[p.name].describe()}; "
                             f"only inputs (their shapes) and Int values can be used")
        args.append(p.name)
    return tuple(args)


def _normalize_params(params: Sequence[Param], dtype: str | None) -> list[Param]:
    if isinstance(params, Param) or not isinstance(params, (list, tuple)):
        raise TypeError("params must be a list of In(...), Out(...), Scalar(...), Int(...) in the C order")
    out, names = [], {}
    for i, p in enumerate(params):
        if not isinstance(p, Param):
            raise TypeError(f"parameter {i} must be In(...), Out(...), Scalar(...) or Int(...), got {p!r}")
        if p.name in names:
            raise ValueError(f"parameter name {p.name!r} is used twice")
        q = Param(p.name, p.kind, p.dtype or (dtype if p.kind != "int" else None), p.const, p.shape, p.value, i)
        names[p.name] = q
        out.append(q)
    for p in out:
        for what in (p.shape, p.value):
            if callable(what):
                _callable_args(what, p.name, names)
        if isinstance(p.shape, tuple):
            for s in p.shape:
                if isinstance(s, str) and s in names and names[s].kind != "int":
                    raise ValueError(f"{p.name}: shape entry {s!r} names a {names[s].describe()}, not an Int")
                if p.kind == "out" and isinstance(s, str) and s not in names and not _symbol_in_inputs(s, out):
                    raise ValueError(f"{p.name}: shape entry {s!r} is neither an Int parameter nor an extent "
                                     f"name used by an input")
    return out


def _symbol_in_inputs(sym: str, params: Sequence[Param]) -> bool:
    return any(p.kind == "in" and isinstance(p.shape, tuple) and sym in p.shape for p in params)


@dataclass
class Plan:
    """The resolved sizes of one call: every Int's value and every parameter's shape (``()`` for scalars)."""

    ints: dict
    shapes: dict
    int_values: tuple = ()


# --- cache and compiler ---------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where compiled libraries live: ENZCC_PLUGINS_CACHE, else $XDG_CACHE_HOME/enzcc/plugins, else
    ~/.cache/enzcc/plugins."""
    env = os.environ.get("ENZCC_PLUGINS_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and os.path.isabs(os.path.expanduser(xdg)) else Path.home() / ".cache"
    return base / "enzcc" / "plugins"


def _default_compiler() -> str:
    return os.environ.get("ENZCC_PLUGINS_COMPILER") or "enzcc"


_version_lock = threading.Lock()
_versions: dict[str, str] = {}


def _enzcc_version(compiler: str) -> str:
    """A fingerprint of the compiler: its ``--version`` text plus, when the enzcc package is importable,
    a digest of its sources (a development checkout keeps the same version number while changing)."""
    with _version_lock:
        if compiler in _versions:
            return _versions[compiler]
        exe = shutil.which(compiler)
        if exe is None:
            raise EnzccBuildError(f"enzcc not found: {compiler!r} is not an executable on PATH "
                                  f"(install enzcc, or set ENZCC_PLUGINS_COMPILER)")
        try:
            proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            raise EnzccBuildError(f"cannot run {exe} --version: {e}") from e
        if proc.returncode != 0:
            raise EnzccBuildError(f"{exe} --version failed: {_first_error(proc.stdout + proc.stderr)}",
                                  proc.stdout + proc.stderr, [exe, "--version"])
        h = hashlib.sha256(proc.stdout.encode())
        h.update(_package_digest().encode())
        _versions[compiler] = h.hexdigest()
        return _versions[compiler]


def _package_digest() -> str:
    try:
        import importlib.util
        spec = importlib.util.find_spec("enzcc")
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.submodule_search_locations:
        return ""
    h = hashlib.sha256()
    for root in spec.submodule_search_locations:
        for p in sorted(Path(root).rglob("*")):
            if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(root)).encode() + b"\0")
                h.update(p.read_bytes())
    return h.hexdigest()


def build_native_once(path: Path, command: Callable[[Path], list[str]], what: str) -> Path:
    """The shared library ``path`` in the plugin cache (a framework's native handler), compiled by
    ``command(output_path)`` the first time on this machine: under a lock (a concurrent process waits and
    then finds it), in a private temporary directory, renamed into place whole. EnzccBuildError naming
    ``what`` with the compiler's first error when it fails."""
    if path.exists():
        return path
    with _build_lock(path.with_suffix(".lock")):
        if not path.exists():
            tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=path.parent))
            try:
                out = tmp / path.name
                cmd = command(out)
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    output = proc.stdout + proc.stderr
                    raise EnzccBuildError(f"{_first_error(output)}\ncannot build {what} with {cmd[0]}:\n"
                                          f"{output.rstrip()}", output, cmd)
                os.replace(out, path)  # atomic: readers see no file or a whole one
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return path


@contextlib.contextmanager
def _build_lock(lock_path: Path):
    """Holds the lock of one cache entry's build (an flock on ``lock_path``); the file goes afterwards, unless
    the build failed. (Safe: a process waiting on the old file finds the entry built when it gets the lock.)"""
    with open(lock_path, "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    try:
        lock_path.unlink()
    except OSError:
        pass


def _first_error(output: str) -> str:
    """enzcc's one-line error: the first line that says 'error:' (else the last non-empty line)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln:
            return ln
    return lines[-1] if lines else "(no output)"


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# --- the prototype check ----------------------------------------------------------------------------------------


@dataclass
class _Prototype:
    ret: str              # LLVM return type ("void", "i32", "double", ...)
    llvm: list            # LLVM type names of the parameters ("ptr", "double", "i32", ...)
    elem: list            # element / value dtype from debug info ("float32"/"float64"/None) per parameter
    text: str             # e.g. "void (ptr, i64, ptr)"
    bitcode: bytes = b""  # the module defining the function, as the frontend made it (for checks.py)
    consts: frozenset = frozenset()  # the parameters the debug info types ``const T *``


def _read_prototype(obj: Path, name: str, source: str, lang: str) -> _Prototype:
    """``name``'s LLVM parameter types in the bitcode enzcc embedded in ``obj`` (and debug element types)."""
    from enzcc.backend import embed
    import llvmlite.binding as llvm

    data = obj.read_bytes()
    section = embed.elf_section(data, embed.SECTION)
    if section is None:
        raise EnzccBuildError(f"{obj}: enzcc -c put no bitcode into the object")
    for rec in embed.unpack_records(section, str(obj)):
        mod = llvm.parse_bitcode(rec.bitcode)
        try:
            fn = mod.get_function(name)
        except NameError:
            continue
        if fn.is_declaration:
            continue
        ftype = fn.global_value_type
        llvm_types = [str(a.type) for a in fn.arguments]
        from . import checks
        mod_text, fn_text = str(mod), str(fn)
        return _Prototype(str(ftype).split(" (")[0], llvm_types, _debug_elements(mod_text, fn_text, len(llvm_types)),
                          str(ftype), rec.bitcode, frozenset(checks.const_pointers(mod_text, fn_text, len(llvm_types))))
    hint = {"c++": ' (a C++ function must be declared extern "C")',
            "rust": " (declare it #[no_mangle] pub extern \"C\" fn)",
            "fortran": " (give the subroutine bind(c, name=\"...\") with that name)"}.get(lang, "")
    raise PrototypeError(f"{source} defines no function {name}{hint}")


class _NotFloat(str):
    """A parameter's element type read from debug information that is neither float nor double (its name)."""


_META = re.compile(r"^!(\d+) = (?:distinct )?(.*)$", re.M)


def _debug_elements(module_text: str, fn_text: str, nargs: int) -> list:
    """Per parameter: the float type its debug type ends in after pointers, arrays, const and typedefs
    ('float32'/'float64'), or None when unknown; all None without debug info."""
    unknown = [None] * nargs
    define = next((ln for ln in fn_text.splitlines() if ln.startswith("define")), "")
    m = re.search(r"!dbg !(\d+)", define)
    if not m:
        return unknown
    meta = {int(k): v for k, v in _META.findall(module_text)}

    def field_ref(text: str, key: str) -> int | None:
        f = re.search(key + r": !(\d+)", text)
        return int(f.group(1)) if f else None

    sp = meta.get(int(m.group(1)), "")
    st = meta.get(field_ref(sp, "type") or -1, "")
    lst = meta.get(field_ref(st, "types") or -1, "")
    entries = [e.strip() for e in lst.strip()[2:-1].split(",")] if lst.startswith("!{") else []
    if len(entries) != nargs + 1:
        return unknown

    def resolve(ref: str, depth: int = 0):
        if not ref.startswith("!") or depth > 20:
            return None
        text = meta.get(int(ref[1:]), "")
        if text.startswith("!DIBasicType"):
            size = re.search(r"size: (\d+)", text)
            bits = size.group(1) if size else "?"
            if "DW_ATE_float" not in text:  # known, and not a float: an integer, a bool, a char
                name = re.search(r'name: "([^"]*)"', text)
                return _NotFloat(name.group(1) if name else f"a {bits}-bit non-float")
            return {"32": "float32", "64": "float64"}.get(bits) or _NotFloat(f"a {bits}-bit float")
        if text.startswith(("!DIDerivedType", "!DICompositeType")):
            if text.startswith("!DICompositeType") and "DW_TAG_array_type" not in text:
                name = re.search(r'name: "([^"]*)"', text)
                return _NotFloat(name.group(1) if name else "a structure")
            if text.startswith("!DIDerivedType") and not re.search(
                    r"tag: DW_TAG_(pointer_type|const_type|volatile_type|restrict_type|typedef|reference_type)",
                    text):
                return None
            base = field_ref(text, "baseType")
            return resolve(f"!{base}", depth + 1) if base is not None else None
        return None

    return [resolve(e) for e in entries[1:]]


_INT_CTYPES = {"i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t"}
_INT_BITS = {"int8_t": 8, "int16_t": 16, "int32_t": 32, "int64_t": 64}


def _check_prototype(params: list[Param], proto: _Prototype, name: str, lang: str) -> list[Param]:
    """The declaration with dtypes and integer C types filled in from the prototype; PrototypeError naming
    the first parameter that does not fit."""
    if proto.ret in _LLVM_FLOATS:  # a result the declaration cannot receive (an integer status is ignored)
        raise PrototypeError(f"{name} returns {proto.ret}: a kernel gives its results through Out(...) pointers; "
                             f"wrap it in a void function that stores the result")
    if len(params) != len(proto.llvm):
        raise PrototypeError(f"{name}: the declaration has {len(params)} parameters "
                             f"({', '.join(p.name for p in params)}) but the function takes {len(proto.llvm)} "
                             f"(LLVM type {proto.text})")
    out = []
    for p, ty, elem in zip(params, proto.llvm, proto.elem):
        where = f"{name}: parameter {p.index + 1} {p.name!r} is declared {p.describe()}"
        if p.is_array:
            if ty != "ptr":
                raise PrototypeError(f"{where} (a pointer) but the function takes {ty}")
            dtype = p.dtype
            if isinstance(elem, _NotFloat):
                raise PrototypeError(f"{where} but the function takes {elem} elements, not float or double")
            if dtype is not None and elem is not None and dtype != elem:
                raise PrototypeError(f"{where} but the function takes {_C_NAMES[elem]} elements "
                                     f"({_C_NAMES[elem]} *)")
            dtype = dtype or elem
            if dtype is None:
                raise PrototypeError(f"{where} but its element type cannot be read from {lang} debug "
                                     f"information: give dtype='float32' or 'float64'")
            out.append(Param(p.name, p.kind, dtype, p.const, p.shape, p.value, p.index))
        elif p.kind == "scalar":
            if ty not in _LLVM_FLOATS:
                raise PrototypeError(f"{where} (float or double by value) but the function takes {ty}")
            if p.dtype is not None and p.dtype != _LLVM_FLOATS[ty]:
                raise PrototypeError(f"{where} but the function takes {ty}")
            out.append(Param(p.name, p.kind, _LLVM_FLOATS[ty], p.const, p.shape, p.value, p.index))
        else:
            if ty not in _INT_CTYPES:
                raise PrototypeError(f"{where} (an integer by value) but the function takes {ty}")
            out.append(Param(p.name, p.kind, None, False, p.shape, p.value, p.index, _INT_CTYPES[ty]))
    return out


# --- the wrapper ------------------------------------------------------------------------------------------------


def wrapper_source(name: str, params: Sequence[Param], *, prototype: bool, second_order: bool = False,
                   vector: bool = False, split: bool = False) -> str:
    """The C wrapper (valid C and C++) exporting ``name``'s ABI 3 entry points. prototype: declare ``name``
    from the declaration (a separate translation unit: Fortran, Rust) instead of seeing its definition.
    second_order: the second-order entry points too; vector: only the vector-mode entry points
    ``NAME_enzcc_jvp_v<W>`` and ``NAME_enzcc_vjp_v<W>`` (:data:`VECTOR_WIDTHS`); split: only the split-mode
    entry points ``NAME_enzcc_augfwd`` and ``NAME_enzcc_rev`` (:func:`_split_entries`)."""
    lines = ["#ifdef __cplusplus", 'extern "C" {', "#endif",
             "extern int enzyme_dup, enzyme_dupnoneed, enzyme_const, enzyme_width;"]
    T = {p.name: _C_NAMES[p.dtype] for p in params if p.dtype}
    if prototype:
        decl = []
        for p in params:
            decl.append(f"const {T[p.name]} *" if p.kind == "in" else f"{T[p.name]} *" if p.kind == "out"
                        else T[p.name] if p.kind == "scalar" else p.ctype)
        lines.append(f"void {name}({', '.join(decl)});")

    # the function as Enzyme sees it: arrays and scalars by address, integers as int64_t. The frameworks give
    # every output its own buffer, never one of the inputs, so the addresses are restrict (noalias): enzcc's
    # reverse sweep then reads inputs again instead of saving them on its tape
    shim_params, shim_args = [], []
    for p in params:
        v = f"p{p.index}"
        if p.kind == "in":
            shim_params.append(f"const {T[p.name]} *__restrict {v}")
            shim_args.append(f"({T[p.name]} *){v}")
        elif p.kind == "out":
            shim_params.append(f"{T[p.name]} *__restrict {v}")
            shim_args.append(v)
        elif p.kind == "scalar":
            shim_params.append(f"const {T[p.name]} *__restrict {v}")
            shim_args.append(f"*{v}")
        else:
            shim_params.append(f"int64_t {v}")
            shim_args.append(f"({p.ctype}){v}" if p.ctype else v)
    shim = f"{name}_enzcc_call"
    lines.append(f"static void {shim}({', '.join(shim_params)}) {{ {name}({', '.join(shim_args)}); }}")

    def a(p):  # the primal argument from the address array
        T_ = T.get(p.name)
        return {"in": f"(const {T_} *)enzcc_a[{p.index}]", "out": f"({T_} *)enzcc_a[{p.index}]",
                "scalar": f"(const {T_} *)enzcc_a[{p.index}]",
                "int": f"*(const int64_t *)enzcc_a[{p.index}]"}[p.kind]

    def ptr(arr: str, p) -> str:
        return f"({T[p.name]} *){arr}[{p.index}]"

    def enzyme_call(fn: str, target: str, args: list[tuple[str, str]]) -> list[str]:
        """A declaration with the full prototype (no variadic promotion of float) and the call."""
        decl = f"void {fn}(void *, {', '.join(t for t, _ in args)});"
        call = f"  {fn}((void *){target}, {', '.join(e for _, e in args)});"
        return [decl, call]

    entries = []
    if vector and second_order:
        # NAME_enzcc_vjp_jvp_v<W>(a, d, ta, td): W tangent directions of NAME_enzcc_vjp_jvp in one run of the
        # function, with the inputs (a) and seeds (d) shared; ta and td hold W arrays of P entries each, lane k's
        # from k * P on. The gradients the VJP computes (d) are written once: the caller copies them per lane
        P = len(params)
        _vjp_as_function(lines, name, params, T, shim, enzyme_call)
        for w in VECTOR_WIDTHS:
            args, pre = [("int", "enzyme_width"), ("int", str(w))], []

            def lanes(arr: str, p, const: str = "") -> list[tuple[str, str]]:
                ty = f"{const}{T[p.name]} *"
                return [(ty, f"({ty}){arr}[{k * P + p.index}]") for k in range(w)]

            for p in params:
                if p.differentiable:
                    args += [("int", "enzyme_dup"), (f"const {T[p.name]} *", a(p))] + lanes("enzcc_ta", p, "const ") \
                        + [("int", "enzyme_dup"), (f"{T[p.name]} *", ptr("enzcc_d", p))] + lanes("enzcc_td", p)
                    if p.kind == "scalar":  # (the gradient and its tangents are stored: they start at 0)
                        pre += [f"  *{ptr('enzcc_d', p)} = 0;"] + [f"  *{x} = 0;" for _, x in lanes("enzcc_td", p)]
                elif p.kind == "out":
                    args += [("int", "enzyme_dup"), (f"{T[p.name]} *", a(p))] + lanes("enzcc_ta", p) \
                        + [("int", "enzyme_dup"), (f"{T[p.name]} *", ptr("enzcc_d", p))] + lanes("enzcc_td", p)
                else:
                    args += [("int", "enzyme_const"), ("int64_t" if p.kind == "int" else f"const {T[p.name]} *", a(p))]
            decl, call = enzyme_call(f"__enzyme_fwddiff_enzcc_{name}_vjp_jvp_v{w}", f"{name}_enzcc_vjp_call", args)
            lines.append(decl)
            entries.append(f"ENZCC_EXPORT void {name}_enzcc_vjp_jvp_v{w}(void *const *enzcc_a, void *const *enzcc_d, "
                           f"void *const *enzcc_ta, void *const *enzcc_td) {{\n"
                           + "".join(x + "\n" for x in pre) + call + "\n}")
        return _wrapper_text(lines, entries)
    if vector:
        # NAME_enzcc_jvp_v<W>(a, d) / NAME_enzcc_vjp_v<W>(a, d): W tangents (cotangents) in one run of the
        # function; d holds W arrays of P entries, lane k's from d[k * P] on, each as NAME_enzcc_jvp's
        # (NAME_enzcc_vjp's) d
        P = len(params)
        for w in VECTOR_WIDTHS:
            for entry, marker, in_const, out_marker in (("jvp", "fwddiff", "const ", "enzyme_dup"),
                                                        ("vjp", "autodiff", "", "enzyme_dupnoneed")):
                args, pre = [("int", "enzyme_width"), ("int", str(w))], []

                def lanes(p, const: str) -> list[tuple[str, str]]:  # (type, expression) of each lane's pointer
                    ty = f"{const}{T[p.name]} *"
                    return [(ty, f"({ty})enzcc_d[{k * P + p.index}]") for k in range(w)]

                for p in params:
                    if p.differentiable:
                        args += [("int", "enzyme_dup"), (f"const {T[p.name]} *", a(p))] + lanes(p, in_const)
                        if entry == "vjp" and p.kind == "scalar":  # (its gradient is stored: it starts at 0)
                            pre += [f"  *{x} = 0;" for _, x in lanes(p, "")]
                    elif p.kind == "out":
                        args += [("int", out_marker), (f"{T[p.name]} *", a(p))] + lanes(p, "")
                    else:
                        args += [("int", "enzyme_const"),
                                 ("int64_t" if p.kind == "int" else f"const {T[p.name]} *", a(p))]
                decl, call = enzyme_call(f"__enzyme_{marker}_enzcc_{name}_{entry}_v{w}", shim, args)
                lines.append(decl)
                entries.append(f"ENZCC_EXPORT void {name}_enzcc_{entry}_v{w}(void *const *enzcc_a, "
                               f"void *const *enzcc_d) {{\n" + "".join(s + "\n" for s in pre) + call + "\n}")
        return _wrapper_text(lines, entries)
    if split:
        _split_entries(lines, entries, name, params, T, shim, a, ptr)
        return _wrapper_text(lines, entries)
    entries.append(f"ENZCC_EXPORT void {name}_enzcc_primal(void *const *enzcc_a) {{\n"
                   f"  {shim}({', '.join(a(p) for p in params)});\n}}")

    # reverse
    args: list[tuple[str, str]] = []
    pre = []
    for p in params:
        if p.differentiable:
            args += [("int", "enzyme_dup"), (f"const {T[p.name]} *", a(p)), (f"{T[p.name]} *", ptr("enzcc_d", p))]
            if p.kind == "scalar":
                pre.append(f"  *{ptr('enzcc_d', p)} = 0;")
        elif p.kind == "out":
            args += [("int", "enzyme_dupnoneed"), (f"{T[p.name]} *", a(p)), (f"{T[p.name]} *", ptr("enzcc_d", p))]
        else:
            args += [("int", "enzyme_const"), ("int64_t" if p.kind == "int" else f"const {T[p.name]} *", a(p))]
    decl, call = enzyme_call(f"__enzyme_autodiff_enzcc_{name}_vjp", shim, args)
    lines.append(decl)
    entries.append(f"ENZCC_EXPORT void {name}_enzcc_vjp(void *const *enzcc_a, void *const *enzcc_d) {{\n"
                   + "".join(s + "\n" for s in pre) + call + "\n}")

    # forward
    args = []
    for p in params:
        if p.differentiable:
            args += [("int", "enzyme_dup"), (f"const {T[p.name]} *", a(p)),
                     (f"const {T[p.name]} *", f"(const {T[p.name]} *)enzcc_d[{p.index}]")]
        elif p.kind == "out":
            args += [("int", "enzyme_dup"), (f"{T[p.name]} *", a(p)), (f"{T[p.name]} *", ptr("enzcc_d", p))]
        else:
            args += [("int", "enzyme_const"), ("int64_t" if p.kind == "int" else f"const {T[p.name]} *", a(p))]
    decl, call = enzyme_call(f"__enzyme_fwddiff_enzcc_{name}_jvp", shim, args)
    lines.append(decl)
    entries.append(f"ENZCC_EXPORT void {name}_enzcc_jvp(void *const *enzcc_a, void *const *enzcc_d) {{\n"
                   + call + "\n}")

    if second_order:
        def as_function(fn: str, marker: str, shadow_const: str, out_marker: str) -> None:
            _as_function(lines, name, params, T, shim, enzyme_call, fn, marker, shadow_const, out_marker)

        def forward_of(fn: str, shadow_const: str, pre: list) -> None:
            """``NAME_enzcc_<fn>_jvp``: the forward derivative of ``NAME_enzcc_<fn>_call`` with respect to the
            differentiable inputs (tangents in ``ta``) and their shadows (``d``, tangents in ``td``), the
            outputs and theirs."""
            args = []
            for p in params:
                if p.differentiable:
                    args += [("int", "enzyme_dup"), (f"const {T[p.name]} *", a(p)),
                             (f"const {T[p.name]} *", f"(const {T[p.name]} *)enzcc_ta[{p.index}]"),
                             ("int", "enzyme_dup"),
                             (f"{shadow_const}{T[p.name]} *", f"({shadow_const}{T[p.name]} *)enzcc_d[{p.index}]"),
                             (f"{shadow_const}{T[p.name]} *", f"({shadow_const}{T[p.name]} *)enzcc_td[{p.index}]")]
                elif p.kind == "out":
                    args += [("int", "enzyme_dup"), (f"{T[p.name]} *", a(p)), (f"{T[p.name]} *", ptr("enzcc_ta", p)),
                             ("int", "enzyme_dup"), (f"{T[p.name]} *", ptr("enzcc_d", p)),
                             (f"{T[p.name]} *", ptr("enzcc_td", p))]
                else:
                    args += [("int", "enzyme_const"),
                             ("int64_t" if p.kind == "int" else f"const {T[p.name]} *", a(p))]
            decl, call = enzyme_call(f"__enzyme_fwddiff_enzcc_{name}_{fn}_jvp", f"{name}_enzcc_{fn}_call", args)
            lines.append(decl)
            entries.append(f"ENZCC_EXPORT void {name}_enzcc_{fn}_jvp(void *const *enzcc_a, void *const *enzcc_d, "
                           f"void *const *enzcc_ta, void *const *enzcc_td) {{\n"
                           + "".join(s + "\n" for s in pre) + call + "\n}")

        # forward over reverse: the VJP's forward derivative (gradients and seeds are its shadows; the scalar
        # gradients and their tangents are stored, so they start at zero)
        _vjp_as_function(lines, name, params, T, shim, enzyme_call)
        forward_of("vjp", "", [line for p in params if p.differentiable and p.kind == "scalar"
                               for line in (f"  *{ptr('enzcc_d', p)} = 0;", f"  *{ptr('enzcc_td', p)} = 0;")])
        # forward over forward: the JVP's forward derivative with respect to the inputs and their tangents
        as_function("jvp", "fwddiff", "const ", "enzyme_dup")
        forward_of("jvp", "const ", [])

    return _wrapper_text(lines, entries)


def _split_entries(lines, entries, name, params, T, shim, a, ptr) -> None:
    """``NAME_enzcc_augfwd(a, d)``: ``__enzyme_augmentfwd`` of the shim, which writes the outputs and returns
    the tape (what the reverse needs: the forward is not run again); ``NAME_enzcc_rev(a, d, tape)``:
    ``__enzyme_reverse`` with the same activity, which adds the gradients, consumes the seeds and frees the
    tape. Outputs are ``enzyme_dup`` in both (the forward's outputs are wanted; the activity must match)."""
    args: list[tuple[str, str]] = []
    pre = []
    for p in params:
        if p.differentiable:
            args += [("int", "enzyme_dup"), (f"const {T[p.name]} *", a(p)), (f"{T[p.name]} *", ptr("enzcc_d", p))]
            if p.kind == "scalar":  # (its gradient is stored: it starts at 0)
                pre.append(f"  *{ptr('enzcc_d', p)} = 0;")
        elif p.kind == "out":
            args += [("int", "enzyme_dup"), (f"{T[p.name]} *", a(p)), (f"{T[p.name]} *", ptr("enzcc_d", p))]
        else:
            args += [("int", "enzyme_const"), ("int64_t" if p.kind == "int" else f"const {T[p.name]} *", a(p))]
    types = ", ".join(t for t, _ in args)
    values = ", ".join(e for _, e in args)
    lines.append(f"void *__enzyme_augmentfwd_enzcc_{name}(void *, {types});")
    lines.append(f"void __enzyme_reverse_enzcc_{name}(void *, {types}, void *);")
    entries.append(f"ENZCC_EXPORT void *{name}_enzcc_augfwd(void *const *enzcc_a, void *const *enzcc_d) {{\n"
                   f"  return __enzyme_augmentfwd_enzcc_{name}((void *){shim}, {values});\n}}")
    entries.append(f"ENZCC_EXPORT void {name}_enzcc_rev(void *const *enzcc_a, void *const *enzcc_d, "
                   f"void *enzcc_tape) {{\n" + "".join(x + "\n" for x in pre)
                   + f"  __enzyme_reverse_enzcc_{name}((void *){shim}, {values}, enzcc_tape);\n}}")


def _as_function(lines, name, params, T, shim, enzyme_call, fn: str, marker: str, shadow_const: str,
                 out_marker: str) -> None:
    """The first-order call ``fn`` as a function of its arguments (each differentiable input and output followed
    by its shadow), emitted as ``NAME_enzcc_<fn>_call`` (for the second-order entry points)."""
    fparams, fargs = [], []
    for p in params:
        v = f"p{p.index}"
        if p.differentiable:
            fparams += [f"const {T[p.name]} *{v}", f"{shadow_const}{T[p.name]} *d{v}"]
            fargs += [("int", "enzyme_dup"), (f"const {T[p.name]} *", v), (f"{shadow_const}{T[p.name]} *", f"d{v}")]
        elif p.kind == "out":
            fparams += [f"{T[p.name]} *{v}", f"{T[p.name]} *d{v}"]
            fargs += [("int", out_marker), (f"{T[p.name]} *", v), (f"{T[p.name]} *", f"d{v}")]
        else:
            ty = "int64_t" if p.kind == "int" else f"const {T[p.name]} *"
            fparams.append(f"{ty} {v}")
            fargs += [("int", "enzyme_const"), (ty, v)]
    decl, call = enzyme_call(f"__enzyme_{marker}_enzcc_{name}_{fn}2", shim, fargs)
    lines.append(decl)
    lines.append(f"static void {name}_enzcc_{fn}_call({', '.join(fparams)}) {{\n{call}\n}}")


def _vjp_as_function(lines, name, params, T, shim, enzyme_call) -> None:
    """``NAME_enzcc_vjp_call``: the VJP as a function, whose forward derivative is forward over reverse."""
    _as_function(lines, name, params, T, shim, enzyme_call, "vjp", "autodiff", "", "enzyme_dupnoneed")


def _wrapper_text(lines: list[str], entries: list[str]) -> str:
    head = ["#include <stddef.h>", "#include <stdint.h>",
            '#define ENZCC_EXPORT __attribute__((visibility("default")))']
    return "\n".join(head + lines + entries + ["#ifdef __cplusplus", "}", "#endif", ""])


def _one_tu(source_text: str, source_path: str, name: str, wrapper: str) -> str:
    """C and C++: the user's source and the wrapper in one translation unit (static functions work; the
    compiler checks the pointer types of the call)."""
    text = source_text if source_text.endswith("\n") else source_text + "\n"
    return (f"#include <stddef.h>\n#include <stdint.h>\n#line 1 {_c_string(source_path)}\n{text}"
            f"#line 1 {_c_string(f'<enzcc_plugins wrapper for {name}>')}\n"
            f"#pragma clang diagnostic push\n"   # a call with the wrong element type: an error, not a warning
            f"#pragma clang diagnostic error \"-Wincompatible-pointer-types\"\n"
            f"{wrapper}#pragma clang diagnostic pop\n")


# --- building -----------------------------------------------------------------------------------------------------


_memo_lock = threading.Lock()
_libraries: dict[str, ctypes.CDLL] = {}


def _run(cmd: list[str], what: str, source: str, name: str, exc=EnzccBuildError, retry_debug: bool = True) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)  # in the caller's cwd: relative -I work
    if proc.returncode == 0:
        return
    output, command = proc.stdout + proc.stderr, cmd
    if retry_debug and "error: in function" in output and "-g" not in cmd:
        dbg = cmd[:1] + ["-g"] + cmd[1:]  # an AD error: with -g enzcc names the source line
        p2 = subprocess.run(dbg, capture_output=True, text=True)
        if p2.returncode != 0:
            output, command = p2.stdout + p2.stderr, dbg
    first = _first_error(output)
    raise exc(f"{first}\nenzcc could not {what} {name} from {source}:\n{output.rstrip()}", output, command)


@dataclass
class _Build:
    source: Path
    text: str
    name: str
    lang: str
    params: list
    cflags: list
    compiler: str
    root: Path
    key: str

    def lang_flags(self) -> list[str]:
        return [] if self.source.suffix in _LANGS else ["--lang", self.lang]


def _build(b: _Build, second_order: bool, vector: bool = False, split: bool = False) -> tuple[Path, list[Param]]:
    """The library for ``b`` (first order, the second-order one or the vector-mode one), from the cache or built
    now, and the declaration as checked against the prototype (dtypes and integer types filled in). A cached
    library whose recorded headers changed since is built again; a build says what it does and how long it
    took (:func:`_announce`), a cache hit says nothing."""
    stem = f"{b.name}-{b.key}" + ("-vjp_jvp" if second_order else "") + ("-vec" if vector else "") + \
        ("-split" if split else "")
    path = b.root / f"{stem}.so"
    meta_path = path.with_suffix(".json")
    cached = _cached_params(path, meta_path, b.params)
    if cached is not None:
        return cached
    with _build_lock(b.root / f"{stem}.lock"):  # another process building the same key: wait for it
        cached = _cached_params(path, meta_path, b.params)
        if cached is None:
            what = ("the vector-mode second derivatives" if second_order and vector else
                    "the second derivatives" if second_order else "the vector-mode derivatives" if vector else
                    "the split-mode gradient" if split else "its derivatives")
            with _announce(f"enzcc: compiling {b.name} from {b.source.name} with {what}"):
                cached = _compile_into(b, path, second_order, vector, split)
    return cached


@contextlib.contextmanager
def _announce(what: str):
    """Tell the user about a build that takes time: a rich status line (a spinner, then the time it took) when
    stderr is a terminal, else ``logging`` (logger ``enzcc``: INFO when it starts and when it is done)."""
    start = time.perf_counter()
    console = None
    if _stderr_is_terminal():
        try:
            from rich.console import Console
            console = Console(stderr=True)
        except ImportError:  # pragma: no cover - rich comes with enzcc
            console = None
    if console is None:
        _log.info("%s ...", what)
        try:
            yield
        except BaseException:
            _log.info("%s: failed after %.1f s", what, time.perf_counter() - start)
            raise
        _log.info("%s: done in %.1f s", what, time.perf_counter() - start)
        return
    ok = False
    try:
        with console.status(f"{what} ..."):
            yield
        ok = True
    finally:
        took = time.perf_counter() - start
        console.print(f"{what}: {'done' if ok else 'failed'} in {took:.1f} s", highlight=False)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _cached_params(path: Path, meta_path: Path, params: list[Param]) -> tuple[Path, list[Param]] | None:
    """(the library, the resolved declaration) of a cache entry, or None when it must be built: absent,
    damaged, of another ABI, or one of the headers it included has changed."""
    try:
        meta = json.loads(meta_path.read_text())
        resolved = meta["params"]
        if meta.get("wrapper_abi") != WRAPPER_ABI or len(resolved) != len(params):
            return None
        if not _dependencies_unchanged(meta.get("dependencies", [])):
            return None  # an included header changed: build again
        library = path.with_name(meta.get("library", path.name))
        if not library.exists():
            return None
        return library, [Param(p.name, p.kind, r["dtype"], p.const, p.shape, p.value, p.index, r["ctype"])
                         for p, r in zip(params, resolved)]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no or damaged metadata: rebuild


def _file_digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _dependencies_unchanged(deps) -> bool:
    """Whether every header a build recorded (``[path, sha256]``) still has that content."""
    return all(_file_digest(p) == h for p, h in deps)


def _read_dependencies(dep_file: Path, skip: Sequence[Path]) -> list[list[str]]:
    """``[path, sha256]`` of each file a ``-MMD`` dependency file names (the headers the source includes,
    system headers left out), except ``skip`` (the source itself and the build's own files)."""
    try:
        text = dep_file.read_text()
    except OSError:
        return []
    body = text.replace("\\\n", " ").partition(": ")[2]
    names = re.findall(r"(?:\\ |[^\s])+", body)
    skipped = {str(Path(s).resolve()) for s in skip}
    out = []
    for n in names:
        full = str(Path(n.replace("\\ ", " ")).resolve())
        if full in skipped or any(full.startswith(str(Path(s).resolve()) + os.sep) for s in skip if Path(s).is_dir()):
            continue
        digest = _file_digest(full)
        if digest is not None and [full, digest] not in out:
            out.append([full, digest])
    return out


def _compile_into(b: _Build, path: Path, second_order: bool, vector: bool = False,
                  split: bool = False) -> tuple[Path, list[Param]]:
    """Build the library into the cache: ``path``, or, when the source includes headers, a name that also holds
    their digest (a library already loaded in this process is never replaced under its name: dlopen would
    return the old one)."""
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=b.root))
    try:
        src_dir = str(b.source.parent)
        # 1. the source alone, to bitcode: does it compile, and what is the function's prototype?
        obj = tmp / f"{b.source.stem}.o"
        one_tu = b.lang in ("c", "c++")
        src = b.source
        if one_tu:  # C and C++: keep a static function that nothing else in its file calls
            src = tmp / f"{b.source.stem}.check{_LANG_SUFFIX[b.lang]}"
            text = b.text if b.text.endswith("\n") else b.text + "\n"
            src.write_text(f"#include <stddef.h>\n#include <stdint.h>\n#line 1 {_c_string(str(b.source))}\n{text}"
                           f"#line 1 {_c_string(f'<enzcc_plugins check of {b.name}>')}\n"
                           f"__attribute__((used)) static void *const enzcc_plugins_keep = (void *)&{b.name};\n")
        deps_flags = ["-MMD", "-MF", str(tmp / "deps.d")] if one_tu else []  # (clang's: the included headers)
        try:
            _run([b.compiler, "-O2", "-g", "-fPIC", *b.lang_flags(), *b.cflags, "-iquote", src_dir, "-c",
                  str(src), "-o", str(obj), *deps_flags], "compile", str(b.source), b.name, retry_debug=False)
        except EnzccBuildError as e:
            first = str(e).partition("\n")[0]
            if "enzcc_plugins check" in first and "undeclared" in first:
                raise PrototypeError(f"{b.source} defines no function {b.name}", e.output, e.command) from None
            raise
        proto = _read_prototype(obj, b.name, str(b.source), b.lang)
        params = _check_prototype(b.params, proto, b.name, b.lang)
        extents = {}
        if not second_order and not vector and not split:  # (the others come after this one, checked then)
            extents = _check_accesses(params, proto, b)
        # 2. the library: C and C++ in one translation unit with the wrapper, others linked with it
        out = tmp / "lib.so"
        wrapper = wrapper_source(b.name, params, prototype=not one_tu, second_order=second_order, vector=vector,
                                 split=split)
        if one_tu:
            unit = tmp / f"{b.source.stem}.enzcc{_LANG_SUFFIX[b.lang]}"
            unit.write_text(_one_tu(b.text, str(b.source), b.name, wrapper))
            inputs = [str(unit)]
        else:
            unit = tmp / f"{b.name}.enzcc_wrapper.c"
            unit.write_text(wrapper)
            inputs = [str(obj), str(unit)]
        what = ("build the vector-mode second derivative (forward over reverse) of" if second_order and vector
                else "build the second derivative (forward over reverse) of" if second_order else
                "build the vector-mode forward derivative of" if vector else
                "build the split-mode gradient (augmented forward and reverse) of" if split else "build")
        _run([b.compiler, "-O2", "-shared", "-fPIC", *b.cflags, "-iquote", src_dir, *inputs, "-o", str(out),
              "-lm"], what, str(b.source), b.name, SecondOrderError if second_order else EnzccBuildError)
        meta = {"source": str(b.source), "name": b.name, "lang": b.lang, "cflags": b.cflags,
                "compiler": b.compiler, "wrapper_abi": WRAPPER_ABI, "second_order": second_order, "vector": vector,
                "dependencies": _read_dependencies(tmp / "deps.d", [tmp, b.source]), "extents": extents,
                "params": [{"name": p.name, "kind": p.kind, "dtype": p.dtype, "const": p.const, "ctype": p.ctype}
                           for p in params]}
        if meta["dependencies"]:
            digest = hashlib.sha256(json.dumps(meta["dependencies"]).encode()).hexdigest()[:12]
            path = path.with_name(f"{path.stem}.h{digest}.so")
        meta["library"] = path.name
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        os.replace(out, path)  # atomic: readers see no file or a whole one
        os.replace(tmp / "meta.json", path.with_name(path.name.split(".")[0] + ".json"))
        return path, params
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_accesses(params: list[Param], proto: _Prototype, b: _Build) -> dict:
    """PrototypeError when the code contradicts the declaration of an array (plugins/checks.py): an In it
    writes, an Out it reads before writing or never writes, a ``const T *`` declared Out. An analysis that
    cannot be done (IR enzcc's model does not read) is no error: the declaration is then trusted. Returns the
    extents the code surely writes into each Out (C position as a string -> facts), checked at call time."""
    from . import checks
    try:
        uses = checks.analyse_pointers(proto.bitcode, b.name, str(b.source))
    except Exception as e:  # noqa: BLE001 - the check is an extra: never a reason to refuse a build
        _log.debug("enzcc_plugins: no access check of %s: %s", b.name, e)
        uses = {}
    problems = checks.declaration_problems([p for p in params if p.is_array], uses, set(proto.consts), b.name)
    if problems:
        raise PrototypeError("\n".join(problems))
    try:
        extents = checks.write_extents(proto.bitcode, b.name, str(b.source))
    except Exception as e:  # noqa: BLE001 - as above
        _log.debug("enzcc_plugins: no extents of %s: %s", b.name, e)
        extents = {}
    return {str(p.index): extents[p.index] for p in params if p.kind == "out" and p.index in extents}


def _load_library(path: Path) -> ctypes.CDLL:
    with _memo_lock:
        lib = _libraries.get(str(path))
        if lib is None:
            lib = _libraries[str(path)] = ctypes.CDLL(str(path))
        return lib


# --- the compiled kernel --------------------------------------------------------------------------------------


VECTOR_WIDTHS = (2, 4, 8)
"""The widths of the vector-mode entry points ``NAME_enzcc_jvp_v<W>`` and ``NAME_enzcc_vjp_v<W>`` (a third
library, built on first use: :meth:`CompiledKernel.vector`)."""
_SECOND_ORDER = ("vjp_jvp", "jvp_jvp")
_VECTOR = tuple(f"{e}_v{w}" for e in ("jvp", "vjp") for w in VECTOR_WIDTHS)
_VECTOR2 = tuple(f"vjp_jvp_v{w}" for w in VECTOR_WIDTHS)
"""The vector-mode second-order entry points (a fourth library, built on first use)."""
_ENTRIES = {"primal": 1, "vjp": 2, "jvp": 2, "vjp_jvp": 4, "jvp_jvp": 4, **{e: 2 for e in _VECTOR},
            **{e: 4 for e in _VECTOR2}}


class CompiledKernel:
    """A function compiled with its derivatives: the ABI 3 entry points (``address``, ``call``), the shape
    logic of the declaration (``bind``, ``resolve``) and a NumPy-level API (``k(...)``, ``vjp``, ``jvp``,
    ``vjp_jvp``). Built by :func:`load_kernel`."""

    def __init__(self, build: _Build, library: Path, params: list[Param], checked: bool = False):
        self._build = build
        self.checked = bool(checked)
        """Calls given a plan run on guarded copies of their arrays (plugins/guard.py)."""
        self.name = build.name
        self.source = build.source
        self.library = Path(library)
        self.params = tuple(params)
        self.by_name = {p.name: p for p in self.params}
        self.inputs = tuple(p for p in self.params if p.kind in ("in", "scalar"))
        self.outputs = tuple(p for p in self.params if p.kind == "out")
        bound = {s for p in self.params if p.kind == "in" and isinstance(p.shape, tuple)
                 for s in p.shape if isinstance(s, str)}
        self.free_ints = tuple(p for p in self.params if p.kind == "int" and p.value is None and p.name not in bound)
        self.arg_names = tuple(p.name for p in self.params
                               if p.kind in ("in", "scalar") or p in self.free_ints)
        self._bound_symbols = bound
        self._fns: dict[str, Any] = {}
        self._addresses: dict[str, int] = {}
        self._so_lock = threading.Lock()
        self._vector_libraries: dict[bool, Path] = {}
        """Whether second order -> the library of the vector-mode entry points (see :meth:`vector`)."""
        self._vector_error: dict[bool, EnzccBuildError] = {}
        self._split: tuple | None = None
        """(augfwd, rev) ctypes functions of the split-mode library, once built (see :meth:`split`)."""
        self._split_error: EnzccBuildError | None = None
        meta = _recorded_meta(self.library)
        self.dependencies = [list(d) for d in meta.get("dependencies", [])]
        """The headers the source includes (``[path, sha256]``), as the build recorded them."""
        self._extents = {int(k): v for k, v in meta.get("extents", {}).items()}
        """Output C position -> what the code surely writes into it (plugins/checks.py), checked by resolve."""
        lib = _load_library(self.library)
        for entry in ("primal", "vjp", "jvp"):
            self._bind_entry(lib, entry)

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {p.describe()}" for p in self.params)
        return f"<enzcc kernel {self.name}({sig}) from {self.source}>"

    def _bind_entry(self, lib, entry: str) -> None:
        fn = getattr(lib, f"{self.name}_enzcc_{entry}")
        fn.argtypes = [ctypes.c_void_p] * _ENTRIES[entry]
        fn.restype = None
        self._fns[entry] = fn
        self._addresses[entry] = ctypes.cast(fn, ctypes.c_void_p).value

    @property
    def second_order_library(self) -> Path:
        """The library holding ``NAME_enzcc_vjp_jvp`` (built on first use)."""
        self._ensure_second_order()
        return self._second_library

    def _ensure_second_order(self) -> None:
        with self._so_lock:
            if "vjp_jvp" in self._fns:
                return
            path, _ = _build(self._build, second_order=True)
            self._second_library = path
            lib = _load_library(path)
            for entry in _SECOND_ORDER:
                self._bind_entry(lib, entry)

    def vector(self, entry: str) -> tuple[tuple[int, ...], Path]:
        """The addresses of ``NAME_enzcc_<entry>_v<W>`` (entry: jvp, vjp, vjp_jvp) for :data:`VECTOR_WIDTHS`,
        and their library (built on first use; :class:`EnzccBuildError` when enzcc cannot build it)."""
        second = entry == "vjp_jvp"
        names = _VECTOR2 if second else _VECTOR
        with self._so_lock:
            if second in self._vector_error:
                raise self._vector_error[second]  # (once: not rebuilt on every jax.jit of a vmap)
            if names[0] not in self._fns:
                try:
                    path, _ = _build(self._build, second_order=second, vector=True)
                except EnzccBuildError as e:
                    self._vector_error[second] = e
                    raise
                self._vector_libraries[second] = path
                lib = _load_library(path)
                for name in names:
                    self._bind_entry(lib, name)
        return tuple(self._addresses[f"{entry}_v{w}"] for w in VECTOR_WIDTHS), self._vector_libraries[second]

    def split(self):
        """``(augfwd, rev)``: ctypes functions of ``NAME_enzcc_augfwd(a, d) -> tape`` and ``NAME_enzcc_rev(a, d,
        tape)`` (plugins/ABI.md, split mode), from a fifth library built on first use; None when enzcc cannot
        build it (the frameworks then keep the combined ``NAME_enzcc_vjp``, which runs the function again)."""
        with self._so_lock:
            if self._split is None and self._split_error is None:
                try:
                    path = self._split_library()
                except EnzccBuildError as e:
                    self._split_error = e  # (once: not rebuilt on every forward)
                    _log.info("%s: no split-mode gradient (%s); the combined one is used", self.name,
                              str(e).partition("\n")[0])
                    return None
                lib = _load_library(path)
                augfwd, rev = getattr(lib, f"{self.name}_enzcc_augfwd"), getattr(lib, f"{self.name}_enzcc_rev")
                augfwd.argtypes, augfwd.restype = [ctypes.c_void_p] * 2, ctypes.c_void_p
                rev.argtypes, rev.restype = [ctypes.c_void_p] * 3, None
                self._split = (augfwd, rev)
            return self._split

    def _split_library(self) -> Path:
        """The split-mode library's path, built now when it is not in the cache."""
        return _build(self._build, second_order=False, split=True)[0]

    def address(self, entry: str) -> int:
        """The C address of ``NAME_enzcc_<entry>`` (entry: primal, vjp, jvp, vjp_jvp, jvp_jvp, jvp_v2, jvp_v4,
        jvp_v8)."""
        if entry not in _ENTRIES:
            raise ValueError(f"unknown entry point {entry!r}: one of {', '.join(_ENTRIES)}")
        if entry in _SECOND_ORDER:
            self._ensure_second_order()
        if entry in _VECTOR or entry in _VECTOR2:
            self.vector(entry.rsplit("_v", 1)[0])
        return self._addresses[entry]

    def call(self, entry: str, a, d=None, ta=None, td=None, *, plan: Plan | None = None) -> None:
        """Call an entry point with arrays of addresses (ints, 0 = NULL), one per C parameter (``d`` of
        ``jvp_v<W>``: W per parameter, lane after lane). plan: the call's sizes (:meth:`resolve`); in the
        checked mode (:attr:`checked`) the call then runs on guarded copies of the arrays (plugins/guard.py),
        and an access outside them is a :class:`CheckedCallError` naming the parameter."""
        if entry in _SECOND_ORDER:
            self._ensure_second_order()
        if entry in _VECTOR or entry in _VECTOR2:
            self.vector(entry.rsplit("_v", 1)[0])
        fn = self._fns[entry]
        n = len(self.params)
        w = int(entry.rsplit("_v", 1)[1]) if entry in _VECTOR or entry in _VECTOR2 else 1
        sizes = [n, n * w, n * w, n * w] if entry in _VECTOR else [n, n, n * w, n * w]
        given = (a, d, ta, td)[:_ENTRIES[entry]]
        for x, m in zip(given, sizes):
            if x is None or len(x) != m:
                want = ", ".join(map(str, sizes[:len(given)]))
                raise ValueError(f"{self.name}: {entry} needs address arrays of {want} entries")
        if self.checked and plan is not None:
            from . import guard
            guard.guarded_call(self._addresses[entry], self._guard_layout(entry, given, plan), self.name)
            return
        fn(*[(ctypes.c_void_p * m)(*x) for x, m in zip(given, sizes)])

    def _guard_layout(self, entry: str, given, plan: Plan) -> list:
        """The address arrays of a checked call as :class:`guard.Buffer` lists: each entry's size from the plan,
        whether the function may write it, and what it is in the terms of the declaration."""
        from .guard import Buffer
        base, _, w = entry.partition("_v")
        lanes = int(w) if w.isdigit() else 1
        buffers = []
        for k, addresses in enumerate(given):
            row = []
            per_lane = len(addresses) // len(self.params)
            for j, addr in enumerate(addresses):
                p = self.params[j % len(self.params)]
                lane = f" (lane {j // len(self.params)})" if per_lane > 1 else ""
                row.append(self._guard_buffer(Buffer, base, k, p, addr, plan, lane))
            buffers.append(row)
        return buffers

    def _guard_buffer(self, Buffer, base: str, k: int, p: Param, addr: int, plan: Plan, lane: str):
        """One :class:`guard.Buffer`: ``k`` is the address array (0: a, 1: d, 2: ta, 3: td)."""
        if p.kind == "int":
            return Buffer(addr, 8 if k == 0 else None, False, f"Int {p.name!r}")
        item = ctypes.sizeof(_CTYPES[p.dtype])
        shape = plan.shapes.get(p.name, ())
        nbytes = math.prod(shape) * item
        desc = f"{p.name!r} (shape {tuple(shape)}, {p.dtype})"
        if k == 0:
            kind = {"in": "input", "scalar": "scalar", "out": "output"}[p.kind]
            return Buffer(addr, nbytes, p.kind == "out", f"{kind} {desc}", item)
        role = {1: "the derivative buffer", 2: "the tangent buffer", 3: "the second tangent buffer"}[k]
        read_only = base == "jvp" and k == 1 and p.kind != "out"  # an input's tangent: read
        return Buffer(addr, nbytes, not read_only, f"{role} of {desc}{lane}", item)

    # --- declaration logic shared by the frameworks ---

    def bind(self, *args, **kwargs) -> dict:
        """The call arguments by name (positional in ``arg_names`` order, or by keyword)."""
        if len(args) > len(self.arg_names):
            raise TypeError(f"{self.name}() takes {len(self.arg_names)} arguments ({', '.join(self.arg_names)}), "
                            f"got {len(args)}")
        out = dict(zip(self.arg_names, args))
        for k, v in kwargs.items():
            if k not in self.arg_names:
                raise TypeError(f"{self.name}() got an unexpected argument {k!r} "
                                f"(arguments: {', '.join(self.arg_names)})")
            if k in out:
                raise TypeError(f"{self.name}() got argument {k!r} twice")
            out[k] = v
        missing = [n for n in self.arg_names if n not in out]
        if missing:
            raise TypeError(f"{self.name}() missing argument {missing[0]!r} (arguments: {', '.join(self.arg_names)})")
        return out

    def check_dtype(self, name: str, dtype) -> None:
        """TypeError naming the argument when ``dtype`` is not its declared type."""
        p = self.by_name[name]
        try:
            got = normalize_dtype(dtype)
        except ValueError:
            got = None
        if got != p.dtype:
            raise TypeError(f"{self.name}: argument {name!r} has dtype {dtype}, but the function takes "
                            f"{_C_NAMES[p.dtype]} ({p.dtype})")

    def resolve(self, shapes: Mapping[str, Sequence[int]], ints: Mapping[str, int] | None = None) -> Plan:
        """Every Int's value and every parameter's shape for inputs of the given shapes (ShapeError naming
        the argument when they do not fit the declaration)."""
        ints = dict(ints or {})
        shapes = {k: tuple(s if _symbolic(s) else int(s) for s in v) for k, v in shapes.items()}
        sym: dict[str, tuple[int, str]] = {}  # symbol -> (value, where it was bound)
        specs = {}
        for p in self.params:
            if p.kind == "scalar":
                s = shapes.get(p.name, ())
                if s not in ((), (1,)):
                    raise ShapeError(f"{self.name}: argument {p.name!r} is a scalar, got shape {s}")
                continue
            if p.kind != "in":
                continue
            if p.name not in shapes:
                raise TypeError(f"{self.name}: no shape given for input {p.name!r}")
            s = shapes[p.name]
            specs[p.name] = ArraySpec(s, p.dtype)
            if isinstance(p.shape, tuple):
                if len(s) != len(p.shape):
                    raise ShapeError(f"{self.name}: argument {p.name!r} must have rank {len(p.shape)} "
                                     f"(shape {_fmt_shape(p.shape)}), got shape {s}")
                for axis, (want, got) in enumerate(zip(p.shape, s)):
                    if isinstance(want, int) and want != got:
                        raise ShapeError(f"{self.name}: argument {p.name!r} must have shape {_fmt_shape(p.shape)}, "
                                         f"got {s} (axis {axis} must be {want})")
                    if isinstance(want, str):
                        if want in sym and sym[want][0] != got:
                            raise ShapeError(f"{self.name}: argument {p.name!r} has shape {s}, but its axis {axis} "
                                             f"({want!r}) must equal {sym[want][1]} = {sym[want][0]}")
                        sym.setdefault(want, (got, f"{p.name}.shape[{axis}]"))
        values: dict[str, int] = {}
        for p in self.params:
            if p.kind != "int":
                continue
            if p in self.free_ints:
                if p.name not in ints:
                    raise TypeError(f"{self.name}: missing integer argument {p.name!r}")
                values[p.name] = _as_int(ints.pop(p.name), f"{self.name}: argument {p.name!r}")
            elif isinstance(p.value, int):
                values[p.name] = p.value
            elif p.value is None:
                values[p.name] = sym[p.name][0]
            if p.name in sym and p.name in values and values[p.name] != sym[p.name][0]:
                raise ShapeError(f"{self.name}: {sym[p.name][1]} is {sym[p.name][0]}, but Int {p.name!r} is "
                                 f"{values[p.name]}")
        if ints:
            raise TypeError(f"{self.name}: {next(iter(ints))!r} is not an integer argument")
        pending = [p for p in self.params if p.kind == "int" and callable(p.value)]
        while pending:
            progress = False
            for p in list(pending):
                got = self._call_shape_fn(p.value, p.name, specs, values)
                if got is not None:
                    values[p.name] = _as_int(got, f"{self.name}: Int {p.name!r}")
                    if p.name in sym and values[p.name] != sym[p.name][0]:
                        raise ShapeError(f"{self.name}: {sym[p.name][1]} is {sym[p.name][0]}, but Int {p.name!r} "
                                         f"computes {values[p.name]}")
                    pending.remove(p)
                    progress = True
            if not progress:
                raise ValueError(f"{self.name}: the values of {', '.join(p.name for p in pending)} depend on "
                                 f"each other")
        for p in self.params:  # the C integer must hold the value (else it wraps: a short loop, unwritten output)
            bits = _INT_BITS.get(p.ctype or "")
            v = values.get(p.name)
            if p.kind == "int" and bits and v is not None and not _symbolic(v) and \
                    not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
                raise ShapeError(f"{self.name}: Int {p.name!r} is {v}, which the function's {bits}-bit integer "
                                 f"parameter cannot hold")
        for p in self.params:
            if p.kind == "in" and callable(p.shape):
                want = self._shape_from_fn(p, specs, values)
                if want != specs[p.name].shape:
                    raise ShapeError(f"{self.name}: argument {p.name!r} must have shape {want}, got "
                                     f"{specs[p.name].shape}")
        out_shapes = {}
        for p in self.outputs:
            if callable(p.shape):
                out_shapes[p.name] = self._shape_from_fn(p, specs, values)
            else:
                dims = tuple(e if isinstance(e, int) else values[e] if e in values else sym[e][0] for e in p.shape)
                if any(not _symbolic(d) and d < 0 for d in dims):
                    raise ShapeError(f"{self.name}: the shape of {p.name!r} is {dims}, with a negative extent "
                                     f"(from {_fmt_shape(p.shape)})")
                out_shapes[p.name] = dims
        all_shapes = {p.name: (specs[p.name].shape if p.kind == "in" else out_shapes[p.name] if p.kind == "out"
                               else ()) for p in self.params if p.kind != "int"}
        self._check_extents(values, out_shapes)
        return Plan(values, all_shapes, tuple(values[p.name] for p in self.params if p.kind == "int"))

    def _check_extents(self, values: dict, out_shapes: dict) -> None:
        """ShapeError when the code surely writes more of an output than its shape holds (a loop bound by an
        Int, a constant index: plugins/checks.py), before the call corrupts the heap."""
        if not self._extents or any(_symbolic(v) for v in values.values()):
            return
        from .checks import written_bytes
        ints = {p.index: values[p.name] for p in self.params if p.kind == "int" and p.name in values}
        for p in self.outputs:
            facts = self._extents.get(p.index)
            shape = out_shapes.get(p.name, ())
            if not facts or any(_symbolic(s) for s in shape):
                continue
            got = written_bytes(facts, ints)
            item = ctypes.sizeof(_CTYPES[p.dtype])
            have = math.prod(shape) * item
            if got is not None and got[0] > have:
                args = ", ".join(f"{q.name} = {values[q.name]}" for q in self.params if q.kind == "int")
                n = -(-got[0] // item)
                raise ShapeError(f"{self.name}: the function writes {n} element{'s' if n != 1 else ''} of {p.name!r} "
                                 f"(at {got[1] or '?'}, for {args}), but its declared shape {tuple(shape)} holds "
                                 f"{math.prod(shape)}")

    def _call_shape_fn(self, fn, owner, specs, values):
        kwargs = {}
        for n in _callable_args(fn, owner, self.by_name):
            if self.by_name[n].kind == "in":
                kwargs[n] = specs[n]
            elif n in values:
                kwargs[n] = values[n]
            else:
                return None  # an Int not computed yet
        return fn(**kwargs)

    def _shape_from_fn(self, p: Param, specs, values) -> tuple:
        got = self._call_shape_fn(p.shape, p.name, specs, values)
        if got is None:
            raise ValueError(f"{self.name}: the shape of {p.name!r} depends on an Int that cannot be computed")
        if isinstance(got, int):
            got = (got,)
        try:
            dims = tuple(_as_int(s, f"{self.name}: the shape of {p.name!r}") for s in got)
        except TypeError:
            raise TypeError(f"{self.name}: the shape callable of {p.name!r} returned {got!r}, not a tuple of "
                            f"ints") from None
        if any(s < 0 for s in dims):
            raise ShapeError(f"{self.name}: the shape of {p.name!r} is {dims}, with a negative extent")
        return dims

    # --- NumPy level ---

    def _prepare(self, args, kwargs):
        np = _numpy()
        vals = self.bind(*args, **kwargs)
        arrays, shapes, ints = {}, {}, {}
        for p in self.params:
            if p.name not in vals:
                continue
            v = vals[p.name]
            if p.kind == "int":
                ints[p.name] = v
                continue
            arr = np.ascontiguousarray(v, dtype=p.dtype)
            if p.kind == "scalar":
                if arr.size != 1:
                    raise ShapeError(f"{self.name}: argument {p.name!r} is a scalar, got shape {arr.shape}")
                arr = arr.reshape(())
            arrays[p.name] = arr
            shapes[p.name] = arr.shape
        plan = self.resolve(shapes, ints)
        int_buf = np.array(plan.int_values, dtype=np.int64)
        return arrays, plan, int_buf

    def _addr_list(self, arrays, int_buf) -> list[int]:
        out, j = [], 0
        for p in self.params:
            if p.kind == "int":
                out.append(int_buf.ctypes.data + 8 * j)
                j += 1
            else:
                out.append(arrays[p.name].ctypes.data)
        return out

    def _per_param(self, values: dict) -> list[int]:
        return [values[p.name].ctypes.data if p.name in values else 0 for p in self.params]

    def _result(self, arrays: dict, params) -> Any:
        got = tuple(arrays.get(p.name) for p in params)
        return got[0] if len(params) == 1 and params is self.outputs else got

    def __call__(self, *args, **kwargs):
        """Run the function on NumPy arrays / numbers: its outputs (one array, or a tuple of several)."""
        np = _numpy()
        arrays, plan, ints = self._prepare(args, kwargs)
        for p in self.outputs:
            arrays[p.name] = np.empty(plan.shapes[p.name], dtype=p.dtype)
        self.call("primal", self._addr_list(arrays, ints), plan=plan)
        return self._result(arrays, self.outputs)

    def _seeds(self, given, what: str, plan, params):
        """Private contiguous copies of per-parameter seeds/tangents (a sequence in ``params`` order or a dict
        by name; None entries mean zero)."""
        np = _numpy()
        if isinstance(given, Mapping):
            items = dict(given)
        else:
            if not isinstance(given, (list, tuple)):
                given = (given,)
            if len(given) != len(params):
                raise TypeError(f"{self.name}: {what} needs {len(params)} entries "
                                f"({', '.join(p.name for p in params)}), got {len(given)}")
            items = {p.name: g for p, g in zip(params, given)}
        out = {}
        for p in params:
            shape = plan.shapes[p.name]
            g = items.get(p.name)
            if g is None:
                out[p.name] = np.zeros(shape, dtype=p.dtype)
                continue
            arr = np.array(g, dtype=p.dtype, copy=True, order="C")
            if arr.size == 1 and shape == ():
                arr = arr.reshape(())
            if arr.shape != shape:
                raise ShapeError(f"{self.name}: {what} for {p.name!r} has shape {arr.shape}, expected {shape}")
            out[p.name] = arr
        return out

    def vjp(self, args, cotangents):
        """Gradients of ``sum(outputs * cotangents)`` with respect to the inputs (``inputs`` order; None for
        const inputs). args: a sequence of call arguments or a dict by name; cotangents: one per output."""
        np = _numpy()
        args, kwargs = _split_args(args)
        arrays, plan, ints = self._prepare(args, kwargs)
        seeds = self._seeds(cotangents, "cotangents", plan, self.outputs)
        for p in self.outputs:
            arrays[p.name] = np.empty(plan.shapes[p.name], dtype=p.dtype)
        grads = {p.name: np.zeros(plan.shapes[p.name], dtype=p.dtype) for p in self.inputs if p.differentiable}
        self.call("vjp", self._addr_list(arrays, ints), self._per_param({**grads, **seeds}), plan=plan)
        return self._result(grads, self.inputs)

    def jvp(self, args, tangents):
        """(outputs, output tangents) for tangents of the inputs (``inputs`` order or a dict; None entries:
        zero; a nonzero tangent of a const input is a ValueError: no derivative is computed for it)."""
        np = _numpy()
        args, kwargs = _split_args(args)
        arrays, plan, ints = self._prepare(args, kwargs)
        tans = self._seeds(tangents, "tangents", plan, self.inputs)
        for k, t in tans.items():
            if not self.by_name[k].differentiable and t is not None and np.any(np.asarray(t) != 0):
                raise ValueError(f"{self.name}: argument {k!r} is declared const=True (no derivative), but a "
                                 f"nonzero tangent was given for it")
        outs = {p.name: np.empty(plan.shapes[p.name], dtype=p.dtype) for p in self.outputs}
        touts = {p.name: np.empty(plan.shapes[p.name], dtype=p.dtype) for p in self.outputs}
        arrays.update(outs)
        d = {**{k: v for k, v in tans.items() if self.by_name[k].differentiable}, **touts}
        self.call("jvp", self._addr_list(arrays, ints), self._per_param(d), plan=plan)
        return self._result(outs, self.outputs), self._result(touts, self.outputs)

    def vjp_jvp(self, args, cotangents, tangents, cotangent_tangents=None):
        """Forward derivative of :meth:`vjp`: (gradients, gradient tangents) for tangents of the inputs and of
        the cotangents (None: zero). With zero cotangent tangents the gradient tangents are Hessian-vector
        products of ``sum(outputs * cotangents)``. Builds the second-order library on first use."""
        np = _numpy()
        args, kwargs = _split_args(args)
        arrays, plan, ints = self._prepare(args, kwargs)
        seeds = self._seeds(cotangents, "cotangents", plan, self.outputs)
        tseeds = self._seeds(cotangent_tangents if cotangent_tangents is not None else {}, "cotangent tangents",
                             plan, self.outputs)
        tans = {k: v for k, v in self._seeds(tangents, "tangents", plan, self.inputs).items()
                if self.by_name[k].differentiable}
        for p in self.outputs:
            arrays[p.name] = np.empty(plan.shapes[p.name], dtype=p.dtype)
        scratch = {p.name: np.empty(plan.shapes[p.name], dtype=p.dtype) for p in self.outputs}
        grads = {p.name: np.zeros(plan.shapes[p.name], dtype=p.dtype) for p in self.inputs if p.differentiable}
        tgrads = {p.name: np.zeros(plan.shapes[p.name], dtype=p.dtype) for p in self.inputs if p.differentiable}
        self.call("vjp_jvp", self._addr_list(arrays, ints), self._per_param({**grads, **seeds}),
                  self._per_param({**tans, **scratch}), self._per_param({**tgrads, **tseeds}), plan=plan)
        return self._result(grads, self.inputs), self._result(tgrads, self.inputs)


def _split_args(args):
    if isinstance(args, Mapping):
        return (), dict(args)
    if not isinstance(args, (list, tuple)):
        return (args,), {}
    return tuple(args), {}


def _fmt_shape(shape) -> str:
    return "(" + ", ".join("*" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _symbolic(v) -> bool:
    """A symbolic integer (torch.SymInt while torch.compile traces with dynamic shapes): kept as it is."""
    return type(v).__name__ == "SymInt"


def _as_int(v, what: str) -> int:
    if _symbolic(v):
        return v
    if isinstance(v, bool):
        raise TypeError(f"{what} must be an int, got {v!r}")
    try:
        return int(v.__index__())
    except (AttributeError, TypeError):
        raise TypeError(f"{what} must be an int, got {v!r}") from None


def _numpy():
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy comes with every framework
        raise ImportError("the NumPy-level kernel API needs numpy (pip install numpy)") from None
    return numpy


def _lang_of(path: Path, lang) -> str:
    if lang is not None:
        key = str(lang).lower()
        if key not in _LANG_NAMES:
            raise ValueError(f"lang must be one of c, c++, fortran, rust, got {lang!r}")
        return _LANG_NAMES[key]
    if path.suffix in _LANGS:
        return _LANGS[path.suffix]
    if path.suffix.lower() in _LANGS:
        return _LANGS[path.suffix.lower()]
    return "c"  # as the seed did: any other file is C text (lang= chooses)


def _prepare_build(source, name, params, dtype, cflags, compiler, cache, lang) -> _Build:
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValueError(f"function name must be a C identifier, got {name!r}")
    path = Path(source).expanduser().resolve()
    try:
        text = path.read_text()
    except OSError as e:
        raise FileNotFoundError(f"cannot read source {source}: {e}") from e
    lang = _lang_of(path, lang)
    dtype = None if dtype is None else normalize_dtype(dtype)
    params = _normalize_params(params, dtype)
    if isinstance(cflags, str):
        cflags = cflags.split()
    cflags = [str(f) for f in cflags]
    compiler = compiler or _default_compiler()
    version = _enzcc_version(compiler)
    h = hashlib.sha256()
    decl = ";".join(f"{p.kind}:{p.dtype}:{int(p.const)}" for p in params)
    for part in (f"abi={WRAPPER_ABI}.{WRAPPER_REVISION}", text, name, lang, decl, "\0".join(cflags), version):
        h.update(part.encode() + b"\0\1")
    root = (Path(cache).expanduser() if cache is not None else cache_dir()).absolute()
    root.mkdir(parents=True, exist_ok=True)
    return _Build(path, text, name, lang, params, cflags, compiler, root, h.hexdigest()[:32])


def load_kernel(source, name: str, params: Sequence[Param], dtype=None, *, cflags: Sequence[str] = (),
                compiler: str | None = None, cache: str | os.PathLike | None = None,
                lang: str | None = None, checked: bool | None = None) -> CompiledKernel:
    """Compile (or fetch from the cache) ``name`` from ``source`` with its derivatives, for the declaration
    ``params`` (:func:`In`, :func:`Out`, :func:`Scalar`, :func:`Int`, in the C order).

    dtype: the default element type of parameters declared without one (None: read from the prototype).
    cflags: extra enzcc flags (``-DREAL=float``, ``-I...``). compiler: the enzcc executable (default
    ``$ENZCC_PLUGINS_COMPILER`` or ``enzcc``). cache: the cache directory (default :func:`cache_dir`).
    lang: 'c', 'c++', 'fortran' or 'rust' when the suffix does not tell. checked: run calls on guarded copies
    of the arrays, so that an out-of-bounds access is a :class:`CheckedCallError` (default: ``ENZCC_CHECKED``
    set; plugins/guard.py). Raises :class:`EnzccBuildError` when the source does not compile or enzcc refuses
    a derivative, :class:`PrototypeError` when the declaration does not match the function, or when the code
    contradicts it (an ``In`` it writes, an ``Out`` it reads before writing: plugins/checks.py).
    """
    b = _prepare_build(source, name, params, dtype, cflags, compiler, cache, lang)
    library, resolved = _build(b, second_order=False)
    from .guard import checked_default
    kernel = CompiledKernel(b, library, resolved, checked_default(checked))
    seen = getattr(_made, "kernels", None)
    if seen is not None:  # (memoised(): the headers this op depends on)
        seen.append(kernel)
    return kernel


def _recorded_meta(library: Path) -> dict:
    try:
        meta = json.loads(library.with_name(library.name.split(".")[0] + ".json").read_text())
        return meta if isinstance(meta, dict) else {}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


# --- one op per source, function, declaration and options in a process ----------------------------------------------


_made = threading.local()          # the kernels load_kernel makes while memoised() runs make()
_memo_ops_lock = threading.RLock()
_ops_by_content: dict[str, tuple] = {}       # content digest -> (op, the headers' [path, sha256])
_CALL_MEMO_SIZE = 1024
#: the same call within this many seconds of the last comparison of its files' stamps is not compared again: a
#: ``stat`` costs ~2 us on a VM, a small op's whole call ~10 us (an edit is seen by the calls after this window)
_RESTAT_S = 0.002


def memoised(framework: str, make: Callable[[], Any], source, name: str, params=None, dtype=None, **options) -> Any:
    """The op an earlier ``enzyme(...)`` of ``framework`` made for the same source (its content, and the
    headers it includes), function, declaration and options in this process, else ``make()``'s (remembered).

    So ``enzyme("f.c", "f").apply(x)`` in a training loop builds and registers its ops once (each framework's
    ``enzyme()`` is decorated with :func:`memoise_ops`, which asks this). The key is a digest of the content:
    the source text, the declaration (a shape callable by its code, constants, closure and the globals it
    names), the options; the headers the build recorded are hashed again on a hit. A callable that cannot be
    described by content (its closure holds an object printed with its address) is taken by identity.
    ``make()`` raising is not remembered."""
    return _memoised(framework, make, source, name, params, dtype, **options)[0]


def _memoised(framework, make, source, name, params=None, dtype=None, **options) -> tuple[Any, list, tuple | None]:
    """(the op, its headers' paths, the stat stamps of the source and the headers when it was found or made;
    None: the source is unreadable)."""
    path = Path(source).expanduser()
    with _memo_ops_lock:
        try:
            full = path.resolve()
            text = full.read_bytes()
        except OSError:
            return make(), [], None  # (make() reports the unreadable source as it always did)
        h = hashlib.sha256()
        from .guard import checked_default
        for part in (framework, str(full), name, _describe(params), _describe(dtype),
                     _describe(tuple(sorted(options.items()))), f"checked={checked_default(None)}"):
            h.update(part.encode() + b"\0\1")
        h.update(text)
        digest = h.hexdigest()
        entry = _ops_by_content.get(digest)
        if entry is not None and not _dependencies_unchanged(entry[1]):
            entry = None  # an included header changed: a new op from the rebuilt library
        if entry is None:
            stamp = _stamps(path, ())  # (before reading: a change while building is seen next time)
            _made.kernels = kernels = []
            try:
                op = make()
            finally:
                del _made.kernels
            deps = [d for k in kernels for d in k.dependencies]
            entry = _ops_by_content[digest] = (op, deps)
        else:
            stamp = _stamps(path, ())
        deps = [d[0] for d in entry[1]]
        return entry[0], deps, stamp + _stamps(path, deps)[1:]


def memoise_ops(framework: str):
    """Decorator of a framework's ``enzyme(source, name, ...)`` (its first two parameters: the source and the
    function's name): calls with the same source content, name and other arguments return the first call's
    op (:func:`memoised`). The same call again (equal arguments, the source and its headers not touched since,
    by their ``stat``, compared at most every :data:`_RESTAT_S`) costs a dictionary lookup: the paper's
    ``enzyme("test.c", "f").apply(x)`` in a loop. Arguments that do not bind go to the function as they are
    (its own error)."""
    import functools

    def decorate(fn):
        sig = inspect.signature(fn)
        first, second = list(sig.parameters)[:2]
        calls: dict = {}  # (args, kwargs) -> (op, source, header paths, their stamps, [when last compared])

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            checked = _checked_env()  # (the checked mode is chosen at load time)
            try:
                key = (args, tuple(kwargs.items()) if kwargs else (), checked)
                hit = calls.get(key)
            except TypeError:  # a list (the declaration): as tuples
                key = (_hashable(args), _hashable(tuple(kwargs.items())), checked)
                try:
                    hit = calls.get(key)
                except TypeError:
                    key = hit = None
            if hit is not None:
                now = time.monotonic()
                if now - hit[4][0] < _RESTAT_S:
                    return hit[0]
                if _stamps(hit[1], hit[2]) == hit[3]:
                    hit[4][0] = now
                    return hit[0]
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return fn(*args, **kwargs)
            bound.apply_defaults()
            rest = dict(bound.arguments)
            source, name = rest.pop(first), rest.pop(second)
            if not isinstance(name, str) or not isinstance(source, (str, os.PathLike)):
                return fn(*args, **kwargs)
            op, deps, stamps = _memoised(framework, lambda: fn(*args, **kwargs), source, name, **rest)
            if key is not None and stamps is not None:
                if len(calls) >= _CALL_MEMO_SIZE:
                    calls.clear()
                calls[key] = (op, Path(source).expanduser(), deps, stamps, [time.monotonic()])
            return op
        return wrapper
    return decorate


_ENVIRON_BYTES = getattr(os.environ, "_data", None) if os.name == "posix" else None


def _checked_env():
    """``ENZCC_CHECKED`` as it is now (os.environ's own bytes dictionary where there is one: a lookup there
    costs ~0.05 us, ``os.environ.get`` ~0.7 us, which a small op's call would notice)."""
    if isinstance(_ENVIRON_BYTES, dict):
        return _ENVIRON_BYTES.get(b"ENZCC_CHECKED")
    return os.environ.get("ENZCC_CHECKED")


def _stamps(path, deps) -> tuple:
    """The ``stat`` stamps (modification time, size, inode) of the source and of each header in ``deps``
    (paths): what the fast lookup of :func:`memoise_ops` compares."""
    return (_stat_stamp(path),) + tuple(_stat_stamp(d) for d in deps)


def _stat_stamp(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _hashable(v):
    """``v`` as a hashable key (lists as tuples; Param, callables and the rest as they are)."""
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def _describe(v) -> str:
    """A text that is equal for equal declarations and options: callables by their code and what it refers to."""
    if isinstance(v, Param):
        return "Param(" + ",".join(_describe(getattr(v, f)) for f in ("name", "kind", "dtype", "const", "shape",
                                                                       "value")) + ")"
    if isinstance(v, (list, tuple)):
        return "(" + ",".join(_describe(x) for x in v) + ")"
    if isinstance(v, dict):
        return "{" + ",".join(f"{_describe(k)}:{_describe(x)}" for k, x in sorted(v.items(), key=repr)) + "}"
    if inspect.isfunction(v):
        return _describe_function(v)
    text = repr(v)
    return text if " at 0x" not in text else f"<id {id(v)}>"


def _describe_function(fn) -> str:
    code = fn.__code__
    parts = [fn.__module__ or "", fn.__qualname__, code.co_code.hex(), repr(code.co_consts), repr(fn.__defaults__),
             repr(fn.__kwdefaults__)]
    try:
        parts.append(repr([c.cell_contents for c in fn.__closure__ or ()]))
    except ValueError:  # an empty cell
        parts.append("<empty cell>")
    parts.append(repr([(n, fn.__globals__.get(n)) for n in code.co_names if n in fn.__globals__]))
    text = "\0".join(parts)
    return text if " at 0x" not in text else f"<function id {id(fn)}>"


# --- the seed's one-array API ---------------------------------------------------------------------------------------


class Kernel:
    """A compiled ``void name(const T *in, size_t n, T *out)`` and its gradient (the seed API, on
    :class:`CompiledKernel`).

    ``forward(x)`` returns ``out`` (length ``out_size(n)``); ``backward(x, grad_out)`` returns
    ``d(sum(out * grad_out))/d in``. NumPy inputs give NumPy results (shaped like ``x`` when the output
    length is the default ``n``); other inputs give ``array.array``.
    """

    def __init__(self, compiled: CompiledKernel, out_size: int | Callable[[int], int] | None):
        self.compiled = compiled
        self.library = compiled.library
        self.source = compiled.source
        self.name = compiled.name
        self.dtype = compiled.params[0].dtype
        self.ctype = _CTYPES[self.dtype]
        self.typecode = _TYPECODES[self.dtype]
        self.itemsize = ctypes.sizeof(self.ctype)
        if out_size is not None and not callable(out_size):
            if not isinstance(out_size, int) or isinstance(out_size, bool) or out_size < 0:
                raise ValueError(f"out_size must be a non-negative int or a callable n -> int, got {out_size!r}")
        self._out_size = out_size
        self._primal = compiled._fns["primal"]
        self._vjp = compiled._fns["vjp"]

    def __repr__(self) -> str:
        return f"<enzcc Kernel {self.name}({_C_NAMES[self.dtype]}) from {self.source}>"

    @property
    def same_shape(self) -> bool:
        """True when the output has the input's length (out_size not given): results keep the input shape."""
        return self._out_size is None

    def out_size(self, n: int) -> int:
        """The output length for an input of n elements."""
        if self._out_size is None:
            return n
        m = self._out_size(n) if callable(self._out_size) else self._out_size
        if isinstance(m, bool) or not isinstance(m, int):
            try:
                m = int(m.__index__())
            except (AttributeError, TypeError):
                raise TypeError(f"out_size({n}) returned {m!r}, not an int") from None
        if m < 0:
            raise ValueError(f"out_size({n}) returned {m}, a negative size")
        return m

    # raw entry points: addresses of contiguous buffers of this kernel's element type

    def forward_ptr(self, in_addr: int, n: int, out_addr: int) -> None:
        """out[0:out_size(n)] = f(in[0:n])."""
        nn = ctypes.c_int64(n)
        self._primal((ctypes.c_void_p * 3)(in_addr or None, ctypes.addressof(nn), out_addr or None))

    def backward_ptr(self, in_addr: int, din_addr: int, n: int, out_addr: int, dout_addr: int) -> None:
        """din += J^T dout (dout is consumed: zeroed; out is scratch of length out_size(n))."""
        nn = ctypes.c_int64(n)
        self._vjp((ctypes.c_void_p * 3)(in_addr or None, ctypes.addressof(nn), out_addr or None),
                  (ctypes.c_void_p * 3)(din_addr or None, None, dout_addr or None))

    # convenience: NumPy arrays, buffers, sequences

    def _numpy(self, x):
        np = sys.modules.get("numpy")
        return np if np is not None and isinstance(x, np.ndarray) else None

    def _c_array(self, x, copy: bool):
        """(ctypes array, n) holding x's values as this kernel's type; shares x's memory unless copy."""
        try:
            mv = memoryview(x)
        except TypeError:
            mv = None
        if mv is not None and mv.c_contiguous and mv.format.lstrip(_NATIVE) == self.typecode:
            n = mv.nbytes // self.itemsize
            if not copy and not mv.readonly:
                return (self.ctype * n).from_buffer(mv), n
            return (self.ctype * n).from_buffer_copy(mv), n
        values = mv.tolist() if mv is not None else x
        values = [float(v) for v in _flatten(values)]
        return (self.ctype * len(values))(*values), len(values)

    def forward(self, x):
        """f(x): a NumPy array for a NumPy input, else an ``array.array``."""
        np = self._numpy(x)
        if np is not None:
            a = np.ascontiguousarray(x, dtype=self.typecode)
            m = self.out_size(a.size)
            out = np.empty(m, dtype=self.typecode)
            self.forward_ptr(a.ctypes.data, a.size, out.ctypes.data)
            return out.reshape(a.shape) if self.same_shape else out
        buf, n = self._c_array(x, copy=False)
        m = self.out_size(n)
        out = array.array(self.typecode, bytes(m * self.itemsize))
        self.forward_ptr(ctypes.addressof(buf), n, out.buffer_info()[0])
        return out

    def backward(self, x, grad_out):
        """d(sum(f(x) * grad_out))/dx (grad_out is not modified)."""
        np = self._numpy(x)
        if np is not None:
            a = np.ascontiguousarray(x, dtype=self.typecode)
            n, m = a.size, self.out_size(a.size)
            dout = np.array(grad_out, dtype=self.typecode, copy=True, order="C").reshape(-1)
            if dout.size != m:
                raise ValueError(f"{self.name}: grad_out has {dout.size} elements, the output has {m}")
            din = np.zeros(n, dtype=self.typecode)
            out = np.empty(m, dtype=self.typecode)
            self.backward_ptr(a.ctypes.data, din.ctypes.data, n, out.ctypes.data, dout.ctypes.data)
            return din.reshape(a.shape)
        buf, n = self._c_array(x, copy=False)
        m = self.out_size(n)
        dout, k = self._c_array(grad_out, copy=True)
        if k != m:
            raise ValueError(f"{self.name}: grad_out has {k} elements, the output has {m}")
        din = array.array(self.typecode, bytes(n * self.itemsize))
        out = (self.ctype * m)()
        self.backward_ptr(ctypes.addressof(buf), din.buffer_info()[0], n, ctypes.addressof(out),
                          ctypes.addressof(dout))
        return din


def _flatten(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flatten(v)
        else:
            yield v


def seed_declaration(dtype: str | None) -> list[Param]:
    """The seed's signature ``void f(const T *in, size_t n, T *out)`` as a declaration (the output's
    length is set per call by :class:`Kernel`, so its shape here is a placeholder)."""
    return [In("x", dtype=dtype), Int("n", lambda x: x.size), Out("y", shape=lambda n: (n,), dtype=dtype)]


def load(source, name: str, dtype=None, *, out_size: int | Callable[[int], int] | None = None,
         cflags: Sequence[str] = (), compiler: str | None = None, cache: str | os.PathLike | None = None) -> Kernel:
    """Compile (or fetch from the cache) ``name`` from the C file ``source`` and its gradient.

    dtype: 'float32'/'float' or 'float64'/'double' (or a NumPy/PyTorch/JAX dtype); by default the type in
    the function's prototype. out_size: the output length, an int or a callable ``n -> int`` (default: n).
    cflags: extra enzcc flags (``-DREAL=float``, ``-I...``). compiler: the enzcc executable (default:
    ``$ENZCC_PLUGINS_COMPILER`` or ``enzcc``). cache: the cache directory (default: see :func:`cache_dir`).
    Raises :class:`EnzccBuildError` when enzcc fails (:class:`PrototypeError` when the function is not
    ``void f(const T *in, size_t n, T *out)``).
    """
    dtype = None if dtype is None else normalize_dtype(dtype)
    try:
        compiled = load_kernel(source, name, seed_declaration(dtype), cflags=cflags, compiler=compiler,
                               cache=cache)
    except PrototypeError as e:
        T = _C_NAMES.get(dtype or "", "T")
        hint = f" (the function must be void {name}(const {T} *in, size_t n, {T} *out))"
        first, _, rest = str(e).partition("\n")
        raise PrototypeError(first + hint + (("\n" + rest) if rest else ""), e.output, e.command) from None
    if compiled.params[0].dtype != compiled.params[2].dtype:
        raise PrototypeError(f"{name}: in and out must have the same element type, got "
                             f"{compiled.params[0].dtype} and {compiled.params[2].dtype}")
    return Kernel(compiled, out_size)
