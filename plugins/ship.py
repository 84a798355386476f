"""Stable op names and shipped libraries: what a saved model needs to find its enzcc ops again in a fresh process.

Framework-independent (each framework module uses it the same way):

- :func:`op_name` makes the stable name ``namespace::function`` (no hash): a saved program (``torch.export``, a
  TensorFlow SavedModel, ``jax.export``) refers to the op by it, so it is the same in every process.
- :class:`Names` is one framework's process-wide table of those names: the same kernel and declaration under a
  name gives back what was made for it; another kernel or declaration under a taken name is a
  :class:`NameClashError`, never a silent replacement (a saved program would call the wrong function).
- :func:`save` copies a kernel's libraries (first order, and the second-order and vector-mode ones when enzcc
  builds them) into a directory with a manifest (``<namespace>.<function>.enzcc.json``: the name, the checked
  declaration, the library files); :func:`load` reads it back into a :class:`CompiledKernel` that needs neither
  the source nor enzcc, for ``enzcc_plugins.<framework>.load_library(path)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import types
from pathlib import Path
from typing import Any, Callable, Sequence

from .build import (CompiledKernel, EnzccBuildError, Param, SecondOrderError, WRAPPER_ABI, _Build,
                    _normalize_params)

__all__ = ["NameClashError", "ShippedLibraryError", "op_name", "Names", "save", "load", "declaration_token",
           "MANIFEST_SUFFIX"]

MANIFEST_SUFFIX = ".enzcc.json"
_MANIFEST_VERSION = 1
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class NameClashError(ValueError):
    """Two different functions or declarations under one op name in one process."""


class ShippedLibraryError(EnzccBuildError):
    """A shipped library that cannot be loaded: no manifest, a missing file, a declaration that does not fit."""


# --- names ------------------------------------------------------------------------------------------------------


def op_name(function: str, namespace: str | None = None, name: str | None = None) -> str:
    """The stable name ``namespace::name`` (defaults: namespace ``enzcc``, name the C function's). ``name`` may
    itself be ``namespace::name``. Both parts must be identifiers (they become op and symbol names)."""
    if name is not None and "::" in name:
        if namespace is not None:
            raise ValueError(f"op name {name!r} already has a namespace; give namespace= or 'ns::name', not both")
        namespace, _, name = name.partition("::")
    namespace = "enzcc" if namespace is None else namespace
    name = function if name is None else name
    for what, part in (("namespace", namespace), ("op name", name)):
        if not isinstance(part, str) or not _IDENT.match(part):
            raise ValueError(f"the {what} must be an identifier (letters, digits, _), got {part!r}")
    return f"{namespace}::{name}"


def _callable_token(fn, depth: int = 0) -> Any:
    """What identifies a shape or value callable across calls: its code (bytecode, constants, the names it
    uses; not where it is written) and the values it closes over (the seed form makes a fresh closure on every
    call; two closures of one lambda with different values differ)."""
    code = getattr(fn, "__code__", None)
    if code is None or depth > 4:
        return ("object", id(fn))
    cells = []
    for cell in fn.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            v = None
        cells.append(_callable_token(v, depth + 1) if callable(v) else repr(v))
    return ("code", _code_token(code), tuple(cells), repr(getattr(fn, "__defaults__", None)))


def _code_token(code) -> tuple:
    """A code object by its content (nested code objects, e.g. a lambda inside, likewise: not by address)."""
    consts = tuple(_code_token(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts)
    return (hashlib.sha256(code.co_code).hexdigest()[:16], consts, code.co_names, code.co_varnames)


def declaration_token(kernel: CompiledKernel) -> tuple:
    """The kernel's declaration, comparable: equal tokens have the same parameters, types and shape logic."""
    params = []
    for p in kernel.params:
        shape = _callable_token(p.shape) if callable(p.shape) else p.shape
        value = _callable_token(p.value) if callable(p.value) else p.value
        params.append((p.name, p.kind, p.dtype, p.const, p.ctype, shape, value))
    return tuple(params)


def same_code(a: CompiledKernel, b: CompiledKernel) -> bool:
    """Whether two kernels run the same code: the same library (its content-addressed stem, whichever directory
    holds it), or the same source text, function, language, flags and compiler (a declaration spelled
    differently, e.g. a dtype given or read from the prototype, keys another library of the same code)."""
    if Path(a.library).stem == Path(b.library).stem:
        return True
    ba, bb = a._build, b._build
    return bool(ba.text) and (ba.text, ba.name, ba.lang, list(ba.cflags), ba.compiler) == (
        bb.text, bb.name, bb.lang, list(bb.cflags), bb.compiler)


class Names:
    """One framework's stable names in this process: name -> ((declaration token, kernel), what was made)."""

    def __init__(self, framework: str):
        self.framework = framework
        self._lock = threading.RLock()
        self._made: dict[str, tuple[tuple, Any]] = {}

    def get_or_make(self, qualname: str, kernel: CompiledKernel, make: Callable[[], Any]) -> Any:
        """What was made for ``qualname`` when the kernel and declaration are the same; ``make()`` the first
        time; :class:`NameClashError` when the name holds another function or declaration."""
        token = declaration_token(kernel)
        with self._lock:
            got = self._made.get(qualname)
            if got is not None:
                first, made = got
                if got[0][0] != token or not same_code(first[1], kernel):
                    raise NameClashError(_clash_message(self.framework, qualname, made, kernel))
                return made
            made = make()
            self._made[qualname] = ((token, kernel), made)
            return made

    def lookup(self, qualname: str):
        """What was made for ``qualname`` in this process, or None."""
        with self._lock:
            got = self._made.get(qualname)
        return None if got is None else got[1]


def _clash_message(framework: str, qualname: str, existing, kernel: CompiledKernel) -> str:
    old = getattr(existing, "kernel", None)
    where = f" ({old.name} from {old.source})" if old is not None else ""
    return (f"{framework} op {qualname!r} already names another function in this process{where}: the source, "
            f"flags or declaration of {kernel.name} from {kernel.source} differ, and a saved program names the op "
            f"by it; give this one another op_name= (or namespace=)")


# --- the manifest -------------------------------------------------------------------------------------------


def _json_decl(value, what: str):
    """A shape or Int value as JSON; a callable is marked, since a file cannot carry Python code."""
    if callable(value):
        return {"callable": getattr(value, "__qualname__", repr(value))}
    if isinstance(value, tuple):
        return list(value)
    return value


def _base(kernel: CompiledKernel) -> str:
    """The cache entry's name, ``<function>-<key>``: its metadata files are ``<base><suffix>.json`` (suffix
    "", "-vjp_jvp", "-vec", "-vjp_jvp-vec", "-split"), each naming its library (which may carry a digest of the headers)."""
    return f"{kernel._build.name}-{kernel._build.key}"


def manifest(kernel: CompiledKernel, qualname: str, framework: str, seed: dict | None = None) -> dict:
    """The manifest of one kernel under one name: enough to load its library without source or enzcc."""
    return {"enzcc_plugins_manifest": _MANIFEST_VERSION, "wrapper_abi": WRAPPER_ABI, "op": qualname,
            "framework": framework, "function": kernel.name, "source": str(kernel.source), "stem": _base(kernel),
            "key": kernel._build.key, "library": Path(kernel.library).name, "lang": kernel._build.lang, "seed": seed,
            "params": [{"name": p.name, "kind": p.kind, "dtype": p.dtype, "const": p.const, "ctype": p.ctype,
                        "shape": _json_decl(p.shape, "shape"), "value": _json_decl(p.value, "value")}
                       for p in kernel.params]}


def _library_files(kernel: CompiledKernel, second_order: bool) -> list[tuple[Path, dict, Path]]:
    """(metadata file, its content, library) of each of the kernel's built libraries: the first-order one and
    the split-mode one; the second-order one when asked (built now, where enzcc can); the vector-mode ones that
    are built."""
    root, base = Path(kernel.library).parent, _base(kernel)
    kernel.split()  # the split-mode gradient (built now where enzcc can; else the combined VJP is used there)
    if second_order:
        try:
            kernel.second_order_library
        except SecondOrderError:
            pass  # shipped without: second derivatives are then an error in the loading process
    files = []
    for suffix in ("", "-vec", "-split") + (("-vjp_jvp", "-vjp_jvp-vec") if second_order else ()):
        meta_path = root / f"{base}{suffix}.json"
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            continue
        library = root / meta.get("library", f"{base}{suffix}.so")
        if library.exists():
            files.append((meta_path, meta, library))
    return files


def save(kernel: CompiledKernel, qualname: str, directory, framework: str, *, seed: dict | None = None,
         second_order: bool = True) -> Path:
    """Copy the kernel's libraries into ``directory`` with a manifest; returns the manifest's path. Files are
    written under temporary names and renamed into place, so a reader never sees half a file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for meta_path, meta, library in _library_files(kernel, second_order):
        _atomic_copy(library, directory / library.name)
        # the headers the source included were compiled in: the shipped library does not depend on them
        _atomic_write(directory / meta_path.name, json.dumps(dict(meta, dependencies=[]), indent=1) + "\n")
    doc = manifest(kernel, qualname, framework, seed)
    target = directory / (qualname.replace("::", ".") + MANIFEST_SUFFIX)
    _atomic_write(target, json.dumps(doc, indent=1) + "\n")
    return target


def _atomic_copy(src: Path, dst: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".enzcc-", dir=dst.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _atomic_write(dst: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".enzcc-", dir=dst.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# --- loading ------------------------------------------------------------------------------------------------


def manifests(path) -> list[Path]:
    """The manifests ``path`` names: a manifest, a library ``.so`` (the manifests in its directory that name it)
    or a directory (all of them)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ShippedLibraryError(f"{path}: no such file or directory (the directory save_library(...) wrote?)")
    if path.is_dir():
        found = sorted(path.glob("*" + MANIFEST_SUFFIX))
        if not found:
            raise ShippedLibraryError(f"{path}: no enzcc op manifest (*{MANIFEST_SUFFIX}) in this directory; "
                                      f"write one with save_library(...)")
        return found
    if path.name.endswith(MANIFEST_SUFFIX):
        if not path.exists():
            raise ShippedLibraryError(f"{path}: no such manifest")
        return [path]
    if path.suffix == ".so":
        found = [m for m in sorted(path.parent.glob("*" + MANIFEST_SUFFIX)) if _read(m).get("library") == path.name]
        if not found:
            raise ShippedLibraryError(f"{path}: no enzcc op manifest beside this library names it (save it with "
                                      f"save_library(...), which writes the library and its manifest)")
        return found
    raise ShippedLibraryError(f"{path}: not a directory, a {MANIFEST_SUFFIX} manifest or a .so library")


def _read(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ShippedLibraryError(f"{path}: cannot read the manifest: {e}") from None
    if not isinstance(doc, dict) or doc.get("enzcc_plugins_manifest") != _MANIFEST_VERSION:
        raise ShippedLibraryError(f"{path}: not an enzcc op manifest of version {_MANIFEST_VERSION}")
    return doc


class ShippedKernel(CompiledKernel):
    """A kernel loaded from a shipped library: entry points the directory lacks are an error naming the
    directory, never a build (there is no source here)."""

    def _ensure_second_order(self) -> None:
        if "vjp_jvp" not in self._fns and not self._sibling("-vjp_jvp").exists():
            raise SecondOrderError(f"{self.name}: the library shipped in {self.library.parent} has no second "
                                   f"derivatives (enzcc could not build them, or they were not saved)")
        super()._ensure_second_order()

    def vector(self, entry: str):
        if not self._sibling("-vjp_jvp-vec" if entry == "vjp_jvp" else "-vec").exists():
            raise EnzccBuildError(f"{self.name}: no vector-mode library shipped in {self.library.parent}")
        return super().vector(entry)

    def _split_library(self) -> Path:
        """The split-mode library beside the shipped one, when it was saved (else the combined gradient)."""
        meta = self._sibling("-split")
        if not meta.exists():
            raise EnzccBuildError(f"{self.name}: no split-mode library shipped in {self.library.parent}")
        return self.library.parent / json.loads(meta.read_text()).get("library", meta.with_suffix(".so").name)

    def shipped_entries(self) -> dict[str, int]:
        """Every entry point the shipped directory holds, by name -> address (for the native handlers, which a
        saved program reaches by name: a SavedModel or an export may call second-order or vector-mode entry
        points straight away)."""
        from .build import VECTOR_WIDTHS
        got = {e: self.address(e) for e in ("primal", "vjp", "jvp")}
        if self._sibling("-vjp_jvp").exists():
            got.update({e: self.address(e) for e in ("vjp_jvp", "jvp_jvp")})
        for entry, suffix in (("jvp", "-vec"), ("vjp", "-vec"), ("vjp_jvp", "-vjp_jvp-vec")):
            if self._sibling(suffix).exists():
                got.update({f"{entry}_v{w}": a for w, a in zip(VECTOR_WIDTHS, self.vector(entry)[0])})
        return got

    def _sibling(self, suffix: str) -> Path:
        """The metadata file of one of the kernel's libraries in the shipped directory."""
        return self.library.parent / f"{_base(self)}{suffix}.json"


def _params(doc: dict, given: Sequence[Param] | None, where: Path) -> list[Param]:
    """The declaration: the manifest's, with the callables it could not hold taken from ``given`` (the same
    declaration, as passed to enzyme(...)); a given declaration must agree with the manifest's."""
    saved = doc["params"]
    if given is not None:
        given = _normalize_params(list(given), None)
        if [(p.name, p.kind) for p in given] != [(s["name"], s["kind"]) for s in saved]:
            raise ShippedLibraryError(f"{where}: the declaration given does not match the saved one "
                                      f"({', '.join(s['name'] + ':' + s['kind'] for s in saved)})")
    out = []
    for i, s in enumerate(saved):
        shape, value = s["shape"], s["value"]
        if given is not None:
            shape, value = given[i].shape, given[i].value
        for what, v in (("shape", shape), ("value", value)):
            if isinstance(v, dict):
                raise ShippedLibraryError(
                    f"{doc['op']}: the {what} of parameter {s['name']!r} is a Python callable "
                    f"({v.get('callable')}), which {where.name} cannot hold; pass the declaration: "
                    f"load_library(path, params=[...])")
        shape = tuple(shape) if isinstance(shape, list) else shape
        out.append(Param(s["name"], s["kind"], s["dtype"], bool(s["const"]), shape, value, i, s["ctype"]))
    return out


def load(path: Path, params: Sequence[Param] | None = None) -> tuple[str, ShippedKernel, dict]:
    """(op name, kernel, manifest) of one manifest; ``params`` replaces the declaration's shape logic."""
    doc = _read(path)
    if doc.get("wrapper_abi") != WRAPPER_ABI:
        raise ShippedLibraryError(f"{path}: built for the kernel ABI {doc.get('wrapper_abi')}, this enzcc_plugins "
                                  f"speaks ABI {WRAPPER_ABI}; build and save it again")
    library = path.parent / doc["library"]
    if not library.exists():
        raise ShippedLibraryError(f"{path}: the library {library.name} is not beside it")
    resolved = _params(doc, params, path)
    b = _Build(Path(doc["source"]), "", doc["function"], doc.get("lang", "c"), resolved, [], "enzcc", path.parent,
               doc["key"])
    return doc["op"], ShippedKernel(b, library, resolved), doc
