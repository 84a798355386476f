"""The build cache: what the pipeline made from the same inputs before (like ccache, for AD builds).

A pipeline run (link -> optimize -> AD -> optimize -> codegen) is a pure function of its inputs: the bitcode
records, the options and enzcc itself. Its output bytes are stored under a hash of all three, so a rebuild of
unchanged code skips AD and everything around it.

* Where: ``$ENZCC_CACHE_DIR``, else ``$XDG_CACHE_HOME/enzcc``, else ``~/.cache/enzcc``. ``--no-cache`` (or
  ``ENZCC_NO_CACHE=1``) bypasses it; ``enzcc --cache-stats`` reports hits, misses and size.
* enzcc itself is part of the key as a hash of its own source files, so a changed enzcc never reuses an
  older one's output.
* Safe under ``make -j``: an entry is written to a unique temporary file and renamed into place; readers see
  a whole entry or none.
* Never used when damaged: an entry holds the hash of its payload, checked on every read; a mismatch is a miss
  (the entry is rebuilt and replaced).
* Bounded: past ``$ENZCC_CACHE_MAX_SIZE`` bytes (default 2 GiB) the least recently used entries go.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

MAGIC = b"ENZCCCACHE1\n"
DEFAULT_MAX_SIZE = 2 << 30
_LOG = "stats.log"


def cache_dir() -> Path:
    where = os.environ.get("ENZCC_CACHE_DIR")
    if where:
        return Path(where)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "enzcc"


def disabled_by_environment() -> bool:
    return os.environ.get("ENZCC_NO_CACHE", "") not in ("", "0")


_SELF: str | None = None


def enzcc_fingerprint() -> str:
    """A hash of enzcc's own files (code, derivative rules, headers): any change makes a different key."""
    global _SELF
    if _SELF is None:
        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256()
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".yaml", "")
                           and "__pycache__" not in p.parts):
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(path.read_bytes())
        _SELF = h.hexdigest()
    return _SELF


def make_key(parts: list[bytes | str]) -> str:
    """The key of a pipeline run: enzcc's fingerprint and each part, length-prefixed."""
    h = hashlib.sha256(enzcc_fingerprint().encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    return h.hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / key[:2] / key


def _note(event: str) -> None:
    """One byte per event appended to the statistics log (appends of one byte do not interleave)."""
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / _LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, event.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def lookup(key: str) -> bytes | None:
    """The stored output for ``key``, or None (also for an entry that fails its check)."""
    path = _path(key)
    try:
        data = path.read_bytes()
    except OSError:
        _note("m")
        return None
    head = len(MAGIC) + 32
    if len(data) < head or not data.startswith(MAGIC) or \
            hashlib.sha256(data[head:]).digest() != data[len(MAGIC):head]:
        _note("c")  # damaged: ignored, rebuilt and replaced
        return None
    try:
        os.utime(path)  # (recently used)
    except OSError:
        pass
    _note("h")
    return data[head:]


def store(key: str, payload: bytes) -> None:
    """Store ``payload`` under ``key`` atomically, then keep the cache within its size. A cache that cannot be
    written is not an error: the build has its output already."""
    path = _path(key)
    tmp = path.parent / f".{key}.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return
    _trim()


def _entries() -> list[tuple[float, int, Path]]:
    out = []
    root = cache_dir()
    if not root.is_dir():
        return out
    for sub in root.iterdir():
        if sub.is_dir() and len(sub.name) == 2:
            for p in sub.iterdir():
                if not p.name.startswith("."):
                    try:
                        st = p.stat()
                    except OSError:
                        continue
                    out.append((st.st_mtime, st.st_size, p))
    return out


def max_size() -> int:
    try:
        return int(os.environ.get("ENZCC_CACHE_MAX_SIZE", DEFAULT_MAX_SIZE))
    except ValueError:
        return DEFAULT_MAX_SIZE


def _trim() -> None:
    entries = _entries()
    total, limit = sum(e[1] for e in entries), max_size()
    if total <= limit:
        return
    for _, size, p in sorted(entries):  # oldest use first
        if total <= limit * 0.9:
            break
        try:
            p.unlink()
            total -= size
        except OSError:
            pass


def stats() -> dict:
    try:
        log = (cache_dir() / _LOG).read_bytes()
    except OSError:
        log = b""
    entries = _entries()
    return {"directory": str(cache_dir()), "hits": log.count(b"h"), "misses": log.count(b"m"),
            "damaged": log.count(b"c"), "entries": len(entries), "bytes": sum(e[1] for e in entries),
            "max_bytes": max_size()}


def format_stats() -> str:
    s = stats()
    looked = s["hits"] + s["misses"] + s["damaged"]
    rate = f" ({100 * s['hits'] / looked:.0f}% hits)" if looked else ""
    return (f"cache directory    {s['directory']}\n"
            f"hits               {s['hits']}{rate}\n"
            f"misses             {s['misses']}\n"
            f"damaged entries    {s['damaged']} (ignored and rebuilt)\n"
            f"entries            {s['entries']}\n"
            f"size               {s['bytes'] / 2**20:.1f} MiB of {s['max_bytes'] / 2**20:.0f} MiB")
