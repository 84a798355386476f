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
    temporary). (A class: ``contextlib`` costs every enzcc run.)"""

    def __init__(self, path: str):
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise EnzccError(f"cannot write {path}: directory {directory} does not exist")
        self.path = path
        self.tmp = os.path.join(directory, f".{os.path.basename(path)}.enzcc-{os.getpid()}-{os.urandom(4).hex()}")

    def __enter__(self) -> str:
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                if not os.path.exists(self.tmp):
                    raise EnzccError(f"no output was produced for {self.path}")
                os.replace(self.tmp, self.path)
        finally:
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)
        return False


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
