"""What a run writes: outputs that appear whole or not at all, and the run's private temporary directory.

Apart from :mod:`enzcc.driver` so that the no-AD fast path (:mod:`enzcc.fastpath`) has them without the driver's
imports.
"""

from __future__ import annotations

import os

from enzcc.errors import EnzccError


class atomic_output:
    """``with atomic_output(path) as tmp``: a temporary path beside ``path``, moved into place only if the
    block succeeds, so a failed build never leaves a half-written output (and parallel makes never share a
    temporary). (A class: ``contextlib`` costs every enzcc run.)

    An output that exists and is not a regular file (``-o /dev/null`` in a configure probe, a FIFO) is written
    into, as clang does, never replaced: renaming over it would turn ``/dev/null`` into a file for the whole
    machine. The temporary then lives in the run's private directory and its bytes are copied in at the end."""

    def __init__(self, path: str):
        self.path = path
        self.special = os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path)
        if self.special:
            self._dir = private_directory()
            self.tmp = os.path.join(self._dir, os.path.basename(path) or "out")
            return
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise EnzccError(f"cannot write {path}: directory {directory} does not exist")
        self.tmp = os.path.join(directory, f".{os.path.basename(path)}.enzcc-{os.getpid()}-{os.urandom(4).hex()}")

    def __enter__(self) -> str:
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                if not os.path.exists(self.tmp):
                    raise EnzccError(f"no output was produced for {self.path}")
                if self.special:
                    self._copy_into_special()
                else:
                    os.replace(self.tmp, self.path)
        finally:
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)
            if self.special:
                os.rmdir(self._dir)
        return False

    def _copy_into_special(self) -> None:
        try:
            with open(self.tmp, "rb") as src, open(self.path, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        except OSError as exc:
            raise EnzccError(f"cannot write {self.path}: {exc.strerror or exc}") from None


def private_directory() -> str:
    """A new directory only this user can read, for the run's temporaries, in the first usable one of the
    places ``tempfile`` tries ($TMPDIR, $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp, the current directory), as
    ``tempfile.mkdtemp``, whose import costs more than a small compile's start-up."""
    bases = [os.environ.get(v) for v in ("TMPDIR", "TEMP", "TMP")] + ["/tmp", "/var/tmp", "/usr/tmp", os.curdir]
    for base in filter(None, bases):
        for _ in range(100):
            path = os.path.abspath(os.path.join(base, f"enzcc-{os.urandom(6).hex()}"))
            try:
                os.mkdir(path, 0o700)
                return path
            except FileExistsError:
                continue
            except OSError:
                break  # (not usable: the next place)
    raise EnzccError("cannot make a directory for temporaries ($TMPDIR, /tmp, /var/tmp, /usr/tmp and the current "
                     "directory are not writable)")


def mentions_enzyme(path: str) -> bool:
    """Whether the source's own text names Enzyme (``__enzyme_autodiff``, ``enzyme::autodiff``, the
    ``<enzyme/...>`` headers): such a translation unit most likely differentiates something. (One whose calls
    come from a header alone is found in its bitcode, at the cost of a native compile thrown away.)"""
    try:
        with open(path, "rb") as fh:
            return b"enzyme" in fh.read()
    except OSError:  # (stdin, or unreadable: the frontend reports it)
        return False
