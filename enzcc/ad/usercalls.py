"""Calls that are not inlined (recursive calls, ``--ad-inline``): differentiated by calling the callee's
derived functions (:mod:`enzcc.ad.logic`). What those take of each argument, and the signatures they cannot pass.
"""

from __future__ import annotations

from enzcc.ad.api import has_float, has_pointer, is_float
from enzcc.ad.errors import ad_error
from enzcc.ir import types as T


def needs_inlining(ty) -> bool:
    """A parameter or result type that derived functions do not pass: an aggregate holding pointers or floats
    (a Rust slice, a struct by value), a pointer returned. Calls with such types are inlined (``auto``) or
    refused (:func:`check_call_signature`)."""
    scalar = isinstance(ty, (T.FloatType, T.IntType, T.PointerType, T.VoidType)) or \
        (isinstance(ty, T.VectorType) and isinstance(ty.element, T.FloatType))
    return not scalar and (has_float(ty) or has_pointer(ty))


def check_call_signature(call, activity) -> None:
    """Refuse a call that is not inlined and whose arguments or result the derived functions cannot pass with
    their derivatives (see :func:`needs_inlining`). (A pointer returned comes back with its shadow.)"""
    what = None
    if needs_inlining(call.type):
        what = f"returns {call.type}"
    else:
        for i, a in enumerate(call.args):
            if needs_inlining(a.type) and (activity.is_active_ptr(a) or activity.is_active(a)):
                what = f"takes {a.type} (argument {i + 1}) with derivatives"
                break
    if what is not None:
        raise not_inlined_error(call, what)


def call_kinds(call, activity, has_derivative, float_kind: str) -> tuple[str, ...]:
    """Activity of each argument of a call to a user function: ``dup`` for pointers to memory with
    derivatives, ``float_kind`` (``dup`` in forward mode, ``out`` in reverse mode) for floats with a
    derivative (``has_derivative``), ``const`` otherwise."""
    return tuple("dup" if isinstance(a.type, T.PointerType) and activity.is_active_ptr(a) else
                 float_kind if is_float(a.type) and has_derivative(a) else "const" for a in call.args)


def not_inlined_error(call, what: str):
    """The error for a call that is not inlined and passes ``what`` the derived functions cannot carry."""
    return ad_error(f"'{call.callee_name}' {what} and is not inlined (it is recursive, or --ad-inline says so): "
                    "such calls are not supported", call)


__all__ = ["call_kinds", "check_call_signature", "needs_inlining", "not_inlined_error"]
