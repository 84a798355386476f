"""The framework-independent part: compile a C function and its enzcc gradient into a cached shared library.

The C function must have the signature ``void f(const T *in, size_t n, T *out)`` with ``T`` ``float`` or
``double`` (``int n`` or a non-const ``in`` work too: the wrapper calls ``f`` through its prototype). enzcc
compiles the source together with a generated wrapper that exports

- ``f_enzcc_fwd(const T *in, size_t n, T *out)``: calls ``f``;
- ``f_enzcc_grad(const T *in, T *din, size_t n, T *out, T *dout)``: ``__enzyme_autodiff`` of ``f_enzcc_fwd``
  with ``enzyme_dup, in, din, enzyme_const, n, enzyme_dupnoneed, out, dout``: ``din`` accumulates (``+=``)
  the vector-Jacobian product with the seed ``dout``, which is consumed (zeroed), and ``out`` is scratch.

Libraries are cached in a content-addressed directory (``$XDG_CACHE_HOME/enzcc/plugins``, by default
``~/.cache/enzcc/plugins``; ``ENZCC_PLUGINS_CACHE`` overrides it), keyed by the source text, the function
name, the type, the flags and the enzcc version. A library is built in a private temporary directory and
renamed into place under a lock, so concurrent processes are safe and never see a partial file.

``load(source, name)`` returns a :class:`Kernel`; its ``forward`` / ``backward`` take NumPy arrays, buffers
(``array.array``) or sequences of numbers, and the ``*_ptr`` variants take raw addresses (used by the
PyTorch and JAX integrations).
"""

from __future__ import annotations

import array
import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable, Sequence

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: concurrent builds are still safe (atomic rename)
    fcntl = None

__all__ = ["EnzccBuildError", "Kernel", "load", "cache_dir", "normalize_dtype", "detect_dtype"]

#: bumped whenever the generated wrapper or the build command changes meaning (part of the cache key)
WRAPPER_ABI = 2

_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double}
_C_NAMES = {"float32": "float", "float64": "double"}
_TYPECODES = {"float32": "f", "float64": "d"}
_DTYPE_ALIASES = {
    "float32": "float32", "float": "float32", "f": "float32", "f4": "float32", "single": "float32",
    "float64": "float64", "double": "float64", "d": "float64", "f8": "float64",
}
_NATIVE = "@=<" if sys.byteorder == "little" else "@=>"  # buffer format prefixes meaning native order
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class EnzccBuildError(RuntimeError):
    """enzcc could not build the function or its gradient. ``str()`` starts with enzcc's one-line error;
    ``.output`` holds everything the compiler printed and ``.command`` the command line."""

    def __init__(self, message: str, output: str = "", command: Sequence[str] = ()):
        super().__init__(message)
        self.output = output
        self.command = list(command)


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
    for prefix in ("torch.", "numpy.", "np.", "jnp.", "jax.numpy."):
        if key.startswith(prefix):
            key = key[len(prefix):]
    if key not in _DTYPE_ALIASES:
        raise ValueError(f"unsupported dtype {dtype!r}: enzcc_plugins handles float32 (C float) and "
                         f"float64 (C double)")
    return _DTYPE_ALIASES[key]


def detect_dtype(source_text: str, name: str) -> str | None:
    """The element type of ``name``'s first parameter as declared in the source ('float32'/'float64'),
    or None when the source does not tell (e.g. a macro type)."""
    pat = re.compile(r"\b" + re.escape(name) + r"\s*\(\s*(?:const\s+)?(float|double)\b(?:\s+const\b)?\s*\*")
    found = {m.group(1) for m in pat.finditer(_strip_comments(source_text))}
    if len(found) == 1:
        return "float32" if found.pop() == "float" else "float64"
    return None


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


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


def _first_error(output: str) -> str:
    """enzcc's one-line error: the first line that says 'error:' (else the last non-empty line)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln:
            return ln
    return lines[-1] if lines else "(no output)"


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def wrapper_source(source_text: str, source_path: str, name: str, dtype: str) -> str:
    """One translation unit: the user's source (``#line`` keeps its file name and line numbers in
    diagnostics) followed by the forward and gradient entry points."""
    T = _C_NAMES[dtype]
    text = source_text if source_text.endswith("\n") else source_text + "\n"
    return (
        f"#include <stddef.h>\n"
        f"#line 1 {_c_string(source_path)}\n"
        f"{text}"
        f"#line 1 {_c_string(f'<enzcc_plugins wrapper for {name}>')}\n"
        f"extern int enzyme_dup, enzyme_dupnoneed, enzyme_const;\n"
        f"void __enzyme_autodiff_enzcc_plugins(void *, ...);\n"
        f"#pragma clang diagnostic push\n"  # f of the wrong element type: an error, not a warning
        f"#pragma clang diagnostic error \"-Wincompatible-pointer-types\"\n"
        f"__attribute__((visibility(\"default\"))) void {name}_enzcc_fwd(const {T} *in, size_t n, {T} *out) {{\n"
        f"  {name}(({T} *)in, n, out);\n"
        f"}}\n"
        f"#pragma clang diagnostic pop\n"
        f"__attribute__((visibility(\"default\"))) void {name}_enzcc_grad(const {T} *in, {T} *din, size_t n, "
        f"{T} *out, {T} *dout) {{\n"
        f"  __enzyme_autodiff_enzcc_plugins((void *){name}_enzcc_fwd, enzyme_dup, in, din, enzyme_const, n,\n"
        f"                                  enzyme_dupnoneed, out, dout);\n"
        f"}}\n"
    )


_memo_lock = threading.Lock()
_libraries: dict[str, ctypes.CDLL] = {}


def _compile_into(path: Path, wrapper: str, stem: str, src_dir: str, compiler: str,
                  cflags: Sequence[str], name: str, source: str, dtype: str) -> None:
    root = path.parent
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        c_file = tmp / f"{stem}.enzcc.c"
        c_file.write_text(wrapper)
        out = tmp / "lib.so"

        def cmd(debug: bool) -> list[str]:
            return [compiler, "-O2", *(["-g"] if debug else []), "-shared", "-fPIC", *cflags,
                    "-iquote", src_dir, str(c_file), "-o", str(out), "-lm"]

        proc = subprocess.run(cmd(False), capture_output=True, text=True)  # in the caller's cwd: relative -I
        if proc.returncode != 0:
            output = proc.stdout + proc.stderr
            command = cmd(False)
            if "error: in function" in output and "-g" not in cflags:
                # an AD error: with -g enzcc names the source line
                dbg = subprocess.run(cmd(True), capture_output=True, text=True)
                if dbg.returncode != 0:
                    output, command = dbg.stdout + dbg.stderr, cmd(True)
            first = _first_error(output)
            hint = ""
            if "enzcc_plugins wrapper" in first:
                if "undeclared function" in first:
                    hint = f" ({source} defines no function {name})"
                else:
                    hint = (f" (the function must be void {name}(const {_C_NAMES[dtype]} *in, size_t n, "
                            f"{_C_NAMES[dtype]} *out); pass dtype= to choose float or double)")
            raise EnzccBuildError(f"{first}{hint}\nenzcc could not build {name} from {source} "
                                  f"({dtype}):\n{output.rstrip()}", output, command)
        meta = {"source": source, "name": name, "dtype": dtype, "cflags": list(cflags),
                "compiler": compiler, "wrapper_abi": WRAPPER_ABI}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        os.replace(tmp / "meta.json", path.with_suffix(".json"))
        os.replace(out, path)  # atomic: readers see no file or a whole one
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build_library(source: Path, text: str, name: str, dtype: str, cflags: Sequence[str],
                   compiler: str, root: Path | None) -> Path:
    version = _enzcc_version(compiler)
    h = hashlib.sha256()
    for part in (f"abi={WRAPPER_ABI}", text, name, dtype, "\0".join(cflags), version):
        h.update(part.encode() + b"\0\1")
    key = h.hexdigest()[:32]
    root = (Path(root).expanduser() if root is not None else cache_dir()).absolute()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}-{dtype}-{key}.so"
    if path.exists():
        return path
    wrapper = wrapper_source(text, str(source), name, dtype)
    lock_path = root / f"{name}-{dtype}-{key}.lock"
    with open(lock_path, "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another process building the same key: wait for it
        try:
            if not path.exists():
                _compile_into(path, wrapper, source.stem, str(source.parent), compiler, cflags, name,
                              str(source), dtype)
        finally:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    try:
        lock_path.unlink()
    except OSError:
        pass
    return path


def _load_library(path: Path) -> ctypes.CDLL:
    with _memo_lock:
        lib = _libraries.get(str(path))
        if lib is None:
            lib = _libraries[str(path)] = ctypes.CDLL(str(path))
        return lib


class Kernel:
    """A compiled ``void name(const T *in, size_t n, T *out)`` and its gradient.

    ``forward(x)`` returns ``out`` (length ``out_size(n)``); ``backward(x, grad_out)`` returns
    ``d(sum(out * grad_out))/d in``. NumPy inputs give NumPy results (shaped like ``x`` when the output
    length is the default ``n``); other inputs give ``array.array``.
    """

    def __init__(self, library: Path, source: Path, name: str, dtype: str,
                 out_size: int | Callable[[int], int] | None):
        self.library = Path(library)
        self.source = Path(source)
        self.name = name
        self.dtype = dtype
        self.ctype = _CTYPES[dtype]
        self.typecode = _TYPECODES[dtype]
        self.itemsize = ctypes.sizeof(self.ctype)
        if out_size is not None and not callable(out_size):
            if not isinstance(out_size, int) or isinstance(out_size, bool) or out_size < 0:
                raise ValueError(f"out_size must be a non-negative int or a callable n -> int, got {out_size!r}")
        self._out_size = out_size
        lib = _load_library(self.library)
        self._fwd = getattr(lib, f"{name}_enzcc_fwd")
        self._fwd.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self._fwd.restype = None
        self._grad = getattr(lib, f"{name}_enzcc_grad")
        self._grad.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
        self._grad.restype = None

    def __repr__(self) -> str:
        return f"<enzcc Kernel {self.name}({_C_NAMES[self.dtype]}) from {self.source}>"

    @property
    def same_shape(self) -> bool:
        """True when the output has the input's length (out_size not given): results keep the input shape."""
        return self._out_size is None

    def out_size(self, n: int) -> int:
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
        self._fwd(in_addr or None, n, out_addr or None)

    def backward_ptr(self, in_addr: int, din_addr: int, n: int, out_addr: int, dout_addr: int) -> None:
        """din += J^T dout (dout is consumed: zeroed; out is scratch of length out_size(n))."""
        self._grad(in_addr or None, din_addr or None, n, out_addr or None, dout_addr or None)

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


def load(source, name: str, dtype=None, *, out_size: int | Callable[[int], int] | None = None,
         cflags: Sequence[str] = (), compiler: str | None = None, cache: str | os.PathLike | None = None) -> Kernel:
    """Compile (or fetch from the cache) ``name`` from the C file ``source`` and its gradient.

    dtype: 'float32'/'float' or 'float64'/'double' (or a NumPy/PyTorch/JAX dtype); by default read from the
    declaration of ``name`` in the source. out_size: the output length, an int or a callable ``n -> int``
    (default: n). cflags: extra enzcc flags (``-DREAL=float``, ``-I...``). compiler: the enzcc executable
    (default: ``$ENZCC_PLUGINS_COMPILER`` or ``enzcc``). cache: the cache directory (default: see
    :func:`cache_dir`). Raises :class:`EnzccBuildError` when enzcc fails.
    """
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValueError(f"function name must be a C identifier, got {name!r}")
    path = Path(source).expanduser().resolve()
    try:
        text = path.read_text()
    except OSError as e:
        raise FileNotFoundError(f"cannot read C source {source}: {e}") from e
    if dtype is None:
        dtype = detect_dtype(text, name)
        if dtype is None:
            raise ValueError(f"cannot tell from {source} whether {name} takes float or double: "
                             f"pass dtype='float32' or dtype='float64'")
    else:
        dtype = normalize_dtype(dtype)
    if isinstance(cflags, str):
        cflags = cflags.split()
    cflags = [str(f) for f in cflags]
    lib = _build_library(path, text, name, dtype, cflags, compiler or _default_compiler(), cache)
    return Kernel(lib, path, name, dtype, out_size)
