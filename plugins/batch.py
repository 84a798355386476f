"""One native call for a whole batch: an ABI 3 entry point run over the examples of a ``torch.func.vmap`` by a
small C loop (``native/batch_loop.c``, compiled once per machine into the plugin cache), instead of one
Python-level call per example.

Why a separate helper and not a loop in each kernel's wrapper: the loop only moves pointers by a stride per
example and calls the entry point through its address, so one helper serves every kernel, the second-order
and vector libraries, and libraries loaded with ``load_library`` that were built before it existed (no wrapper
ABI change, no rebuild of the cached kernels). The JAX handler (``native/xla_ffi.cc``) has the same loop.
Where no C compiler is found, :func:`available` is False and the framework falls back to a call per example.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import threading
from pathlib import Path

__all__ = ["available", "batched_call"]

SOURCE = Path(__file__).with_name("native") / "batch_loop.c"

_lock = threading.Lock()
_lib = None
_failed = False


def _helper():
    """The compiled batch_loop.c, or None when it cannot be built (no C compiler: the caller goes example by
    example)."""
    global _lib, _failed
    with _lock:
        if _lib is not None or _failed:
            return _lib
        from .build import EnzccBuildError, build_native_once, cache_dir
        cc = os.environ.get("ENZCC_PLUGINS_CC") or next(
            (c for c in ("clang-22", "clang", "cc") if shutil.which(c)), None)
        try:
            if cc is None:
                raise EnzccBuildError("no C compiler")
            key = hashlib.sha256(SOURCE.read_bytes() + b"\0" + cc.encode()).hexdigest()[:16]
            path = cache_dir().absolute() / f"enzcc_batch-{key}.so"
            path.parent.mkdir(parents=True, exist_ok=True)
            build_native_once(path, lambda out: [cc, "-O2", "-shared", "-fPIC", str(SOURCE), "-o", str(out)],
                              f"the batch loop {SOURCE}")
            lib = ctypes.CDLL(str(path))
        except (EnzccBuildError, OSError):
            _failed = True
            return None
        lib.enzcc_batched_call.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                           ctypes.c_void_p, ctypes.c_int64]
        lib.enzcc_batched_call.restype = ctypes.c_int
        _lib = lib
        return lib


def available() -> bool:
    """Whether the batch loop can be used in this process (built, or buildable, here). ``ENZCC_PLUGINS_BATCH_LOOP=0``
    turns it off (a call per example, as before it existed: for comparisons and debugging)."""
    if os.environ.get("ENZCC_PLUGINS_BATCH_LOOP", "").strip() == "0":
        return False
    return _helper() is not None


def batched_call(fn_address: int, arrays: list[list[tuple[int, int]]], batch: int) -> None:
    """Call the entry point at ``fn_address`` ``batch`` times in one native call. ``arrays``: its address arrays
    (a, d, ta, td as it takes them: 1, 2 or 4 lists of one entry per C parameter), each entry ``(address,
    stride in bytes between examples)``; address 0 is NULL, stride 0 a buffer every example shares."""
    lib = _helper()
    if lib is None:
        raise RuntimeError("enzcc_plugins: the batch loop is not available (no C compiler)")
    P = len(arrays[0])
    if len(arrays) not in (1, 2, 4) or any(len(x) != P for x in arrays):
        raise ValueError("enzcc_plugins: batched_call needs 1, 2 or 4 address arrays of equal length")
    flat = [e for x in arrays for e in x]
    base = (ctypes.c_uint64 * max(1, len(flat)))(*[a for a, _ in flat])
    stride = (ctypes.c_int64 * max(1, len(flat)))(*[s for _, s in flat])
    rc = lib.enzcc_batched_call(fn_address, len(arrays), P, base, stride, batch)
    if rc != 0:
        raise ValueError(f"enzcc_plugins: batched_call refused its arguments (code {rc})")
