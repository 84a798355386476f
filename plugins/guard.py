"""The checked mode: an entry point called on copies of its arrays placed between inaccessible pages, so that an
out-of-bounds access is a Python exception naming the parameter instead of heap corruption.

Why guard pages and not AddressSanitizer: ASan's runtime must be in the process from its start (LD_PRELOAD of
libclang_rt.asan before Python), which a library loaded by ``import`` cannot arrange, and ASan reports by
aborting the process. Guard pages need nothing but mmap/mprotect: each array the call is given is copied into
a buffer whose last byte is the last byte of a page, followed (and preceded) by a ``PROT_NONE`` page; the
inputs' pages are made read-only. The call runs through a small C helper (``guard.c``, compiled once per
machine into the plugin cache) that catches the fault (SIGSEGV/SIGBUS, in the calling thread only) and jumps
back out of the function; the faulting address tells which buffer and whether it was past its end or a write
into an input. Writable buffers are copied back after a call that did not fault.

What it cannot see: an access that stays inside the slack before a buffer (up to a page before the start: the
buffers are end-aligned, since overrunning the end is the common mistake), or one that jumps over the guard
page into some other mapping. It costs a copy of every array and a few system calls per call: a mode for
tests and debugging, chosen by ``checked=True`` or ``ENZCC_CHECKED=1``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CheckedCallError", "Buffer", "checked_default", "guarded_call", "native_call_address", "describe_slot",
           "describe_lines"]

SOURCE = Path(__file__).with_name("guard.c")


class CheckedCallError(RuntimeError):
    """The checked mode caught the function reading or writing outside an array it was given, or writing an
    input. The message names the parameter."""


@dataclass
class Buffer:
    """One entry of an address array for a checked call: the caller's address (0: NULL), its size in bytes,
    whether the function may write it, and what it is (``"output 'y' (shape (3,), float64)"``)."""

    address: int
    nbytes: int | None
    writable: bool
    what: str
    itemsize: int = 1


def checked_default(flag) -> bool:
    """``flag`` when given, else whether ``ENZCC_CHECKED`` is set to something other than 0/no/false."""
    if flag is not None:
        return bool(flag)
    return os.environ.get("ENZCC_CHECKED", "").strip().lower() not in ("", "0", "no", "false", "off")


_lib_lock = threading.Lock()
_lib = None


def _helper():
    """The compiled guard.c (built once per machine into the plugin cache, under a lock)."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        from .build import EnzccBuildError, build_native_once, cache_dir
        cc = os.environ.get("ENZCC_PLUGINS_CC") or next(
            (c for c in ("clang-22", "clang", "cc") if shutil.which(c)), None)
        if cc is None:
            raise EnzccBuildError("no C compiler for the checked mode's helper (clang-22, clang or cc on PATH, or "
                                  "set ENZCC_PLUGINS_CC)")
        key = hashlib.sha256(SOURCE.read_bytes() + b"\0" + cc.encode()).hexdigest()[:16]
        path = cache_dir().absolute() / f"enzcc_guard-{key}.so"
        path.parent.mkdir(parents=True, exist_ok=True)
        build_native_once(path, lambda out: [cc, "-O2", "-shared", "-fPIC", str(SOURCE), "-o", str(out), "-lpthread"],
                          f"the checked mode's helper {SOURCE}")
        lib = ctypes.CDLL(str(path))
        lib.enzcc_guarded_call.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 4 + [
            ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int)]
        lib.enzcc_guarded_call.restype = ctypes.c_int
        lib.enzcc_guard_alloc.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
                                          ctypes.POINTER(ctypes.c_size_t)]
        lib.enzcc_guard_alloc.restype = ctypes.c_void_p
        lib.enzcc_guard_protect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.enzcc_guard_protect.restype = ctypes.c_int
        lib.enzcc_guard_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.enzcc_guard_free.restype = None
        lib.enzcc_guarded_slots.restype = ctypes.c_int
        _lib = lib
        return lib


def native_call_address() -> int:
    """The address of guard.c's ``enzcc_guarded_slots``, for the native handlers (the XLA FFI handler, the
    TensorFlow op), which register it in their entry table under ("enzcc::checked", "call"): they know each
    buffer's size but cannot call back into Python, so the copies, the call and the message are done in C."""
    lib = _helper()
    return ctypes.cast(lib.enzcc_guarded_slots, ctypes.c_void_p).value


_ROLES = {1: "the derivative buffer", 2: "the tangent buffer", 3: "the second tangent buffer"}


def describe_slot(array: int, kind: str, name: str, shape, dtype: str) -> tuple[str, int]:
    """(what a buffer of a checked call is, its element size) in the declaration's terms, as
    ``CompiledKernel``'s checked calls say it: ``array`` is the address array (0: a, 1: d, 2: ta, 3: td), kind
    the parameter's ("in", "scalar", "out", "int")."""
    if kind == "int":
        return f"Int {name!r}", 8
    item = {"float32": 4, "float64": 8}.get(str(dtype), 1)
    desc = f"{name!r} (shape {tuple(shape)}, {dtype})"
    if array == 0:
        role = {"in": "input", "scalar": "scalar", "out": "output"}[kind]
        return f"{role} {desc}", item
    return f"{_ROLES[array]} of {desc}", item


def describe_lines(slots: list[tuple[str, int]]) -> str:
    """The slots' descriptions as the native handlers read them: one line per slot, the element size, a tab,
    the text (newlines and tabs in a name become spaces)."""
    return "\n".join(f"{item}\t{' '.join(what.split())}" for what, item in slots)


@dataclass
class _Copy:
    buf: Buffer
    data: int
    base: int
    length: int


def guarded_call(fn_address: int, arrays: list[list[Buffer]], owner: str) -> None:
    """Call the entry point at ``fn_address`` with address arrays made of guarded copies of ``arrays`` (one list
    per address array: a, d, ta, td as the entry point takes them). Writable buffers are copied back; a fault
    raises :class:`CheckedCallError` naming the buffer (``owner``: the function's name, for the message)."""
    lib = _helper()
    copies: list[_Copy] = []
    try:
        tables = []
        for entries in arrays:
            row = []
            for b in entries:
                if not b.address or b.nbytes is None:
                    row.append(b.address or None)
                    continue
                base, length = ctypes.c_void_p(), ctypes.c_size_t()
                data = lib.enzcc_guard_alloc(b.nbytes, ctypes.byref(base), ctypes.byref(length))
                if not data:
                    raise MemoryError(f"{owner}: the checked mode cannot map {b.nbytes} bytes for {b.what}")
                copies.append(_Copy(b, data, base.value, length.value))
                ctypes.memmove(data, b.address, b.nbytes)
                if not b.writable:
                    lib.enzcc_guard_protect(base.value, length.value, 0)
                row.append(data)
            tables.append((ctypes.c_void_p * max(1, len(row)))(*row))
        while len(tables) < 4:
            tables.append(None)
        where, write = ctypes.c_size_t(), ctypes.c_int()
        sig = lib.enzcc_guarded_call(fn_address, len(arrays), *tables, ctypes.byref(where), ctypes.byref(write))
        if sig:
            raise CheckedCallError(_describe_fault(owner, sig, where.value, write.value, copies))
        for c in copies:
            if c.buf.writable:
                ctypes.memmove(c.buf.address, c.data, c.buf.nbytes)
    finally:
        for c in copies:
            lib.enzcc_guard_free(c.base, c.length)


def _describe_fault(owner: str, sig: int, address: int, write: int, copies: list[_Copy]) -> str:
    """What the fault at ``address`` was, in the terms of the declaration."""
    access = {1: "wrote", 0: "read"}.get(write, "accessed")
    name = {11: "SIGSEGV", 7: "SIGBUS"}.get(sig, f"signal {sig}")
    page = os.sysconf("SC_PAGESIZE")
    for c in copies:
        b, end = c.buf, c.data + c.buf.nbytes
        if c.data <= address < end and not b.writable:
            return (f"{owner}: the function wrote into {b.what}, which is declared read-only (at byte "
                    f"{address - c.data} of {b.nbytes}): it would overwrite the caller's array (checked mode)")
        if end <= address < end + page:
            off = address - c.data
            elem = f", element {off // b.itemsize}" if b.itemsize > 1 else ""
            return (f"{owner}: the function {access} past the end of {b.what}: at byte {off}{elem}, but it has "
                    f"{b.nbytes} bytes ({b.nbytes // max(1, b.itemsize)} elements); the declared shape is smaller "
                    f"than what the code accesses (checked mode)")
        if c.base <= address < c.base + page:
            return (f"{owner}: the function {access} before the start of {b.what} (checked mode)")
    return (f"{owner}: the function faulted ({name}, {access} address {address:#x}) outside the arrays it was "
            f"given (checked mode)")
