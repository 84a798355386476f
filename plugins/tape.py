"""Split-mode gradients for the frameworks that hold Python objects between a forward and its backward
(PyTorch): ``NAME_enzcc_augfwd`` keeps enzcc's tape, ``NAME_enzcc_rev`` consumes it (plugins/ABI.md), so the
function runs once per forward + backward instead of again inside the reverse pass.

A :class:`Tape` is freed exactly once: by its reverse, or, when the backward never comes (a graph dropped
unused, a forward under ``enable_grad`` whose result is never differentiated), by a reverse on zero seeds when
the object dies; enzcc's tape may hold heap memory of its own (a loop's values), which only its reverse frees.
A second reverse of one tape is refused by :meth:`Tape.reverse` (returns False): the caller then computes the
gradient with the combined ``NAME_enzcc_vjp`` from the inputs it kept, so it is never wrong.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Callable, Sequence

_lock = threading.Lock()
_live = 0


def live_tapes() -> int:
    """How many tapes are held now (made and neither reversed nor released): the tests' leak check."""
    return _live


def _count(delta: int) -> None:
    global _live
    with _lock:
        _live += delta


def _addresses(values: Sequence[int]):
    return (ctypes.c_void_p * len(values))(*values)


class Tape:
    """One ``NAME_enzcc_augfwd`` call's tape, with the shadow buffers it was made with (the reverse gets the
    same ones, as Enzyme's split mode asks).

    ``augfwd``, ``rev``: the kernel's split entry points (:meth:`CompiledKernel.split`); ``a``: the primal
    addresses of the forward; ``d``: the shadows (gradient buffers, zeroed; seed buffers, filled by the
    backward); ``keep``: the objects that own the memory ``d`` (and the integers in ``a``) point to;
    ``release_a``: a function returning ``(addresses, owners)`` of buffers of the primal arrays' sizes for a
    reverse run only to free the tape (the reverse reads no primal array memory: what it needs is on the tape);
    ``zero_seeds``: zeroes the seed buffers for that run; ``on_release``: called after such a run (the caller
    counts forwards whose backward never came)."""

    __slots__ = ("_rev", "_d", "_keep", "_tape", "_done", "_lock", "_finalizer", "__weakref__")

    def __init__(self, augfwd, rev, a: Sequence[int], d: Sequence[int], keep, release_a: Callable,
                 zero_seeds: Callable[[], None], on_release: Callable[[], None] = lambda: None):
        self._rev = rev
        self._d = _addresses(d)
        self._keep = keep
        self._lock = threading.Lock()
        self._done = False
        self._tape = augfwd(_addresses(a), self._d)
        _count(1)
        self._finalizer = weakref.finalize(self, _release, rev, self._d, self._tape, keep, release_a, zero_seeds,
                                           on_release)
        self._finalizer.atexit = False  # (at exit the process's memory goes anyway: no reverse runs then)

    def reverse(self, a: Sequence[int], fill_seeds: Callable[[], None]) -> bool:
        """Run the reverse on the primal addresses ``a`` after ``fill_seeds()`` has put the cotangents in the
        seed buffers; the gradients are then in the gradient buffers. False when the tape was already
        consumed (nothing is run)."""
        with self._lock:
            if self._done:
                return False
            self._done = True
            self._finalizer.detach()
            fill_seeds()
            try:
                self._rev(_addresses(a), self._d, self._tape)
            finally:
                _count(-1)
                self._keep = None  # (the caller holds the gradients it returns)
        return True

    @property
    def consumed(self) -> bool:
        return self._done


def _release(rev, d, tape, keep, release_a, zero_seeds, on_release) -> None:
    """A tape whose backward never came: a reverse on zero seeds frees it (its gradients are dropped)."""
    try:
        zero_seeds()
        a, owners = release_a()
        rev(_addresses(a), d, tape)
        del owners, keep
    finally:
        _count(-1)
    on_release()
