"""Calls that are not inlined (recursive calls, ``--ad-inline``): differentiated by calling the callee's
derived functions (:mod:`enzcc.ad.logic`). What those take of each argument, and the signatures they cannot pass.
"""

from __future__ import annotations

from enzcc.ad.api import has_float, has_pointer, is_float
from enzcc.ad.errors import ad_error
from enzcc.ir import types as T


#: the attribute of a direct call made from a call through a function pointer with too many candidates to inline
#: (:class:`enzcc.ad.inline.Dispatched`): its errors name that reason alone
DISPATCHED_CALL = '"enzcc-dispatched-call"'
#: the attribute of a call left as a call because its callee is too large to inline (:func:`enzcc.ad.prepare.
#: should_inline`): where its derived functions are refused, the call stops the program when reached instead
#: (:func:`enzcc.ad.split.stop_instead`)
SIZE_CUT_CALL = '"enzcc-size-cut-call"'
#: the most candidates such a call is compared against and inlined when derived functions cannot pass its
#: arguments or result (a struct of floats returned by value, ``{ double, double }``): dispatching it could only
#: be refused
MAX_INLINED_AGGREGATE_TARGETS = 32


def has_call_attribute(call, attribute: str) -> bool:
    """The call carries ``attribute``, written directly or, after LLVM printed the module, in an attribute
    group."""
    for a in call.fn_attrs:
        if a == attribute:
            return True
        if a.startswith("#") and a[1:].isdigit():
            module = call.module
            if module is not None and attribute in module.attribute_groups.get(int(a[1:]), ""):
                return True
    return False


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


def variadic_call_stays(call, activity, ret_active: bool) -> bool:
    """A call to a variadic function that was not inlined (it never is: its ``va_start`` needs a variadic
    function around it) stays the primal's call when no derivative can come out of it: its result has none,
    it gets no memory with derivatives and uses no global with derivatives. Floats passed by value (a value
    logged) then contribute nothing. Any other call to it is refused: its derived functions would have to
    read their arguments through ``va_arg``. False for a function that is not variadic."""
    callee = call.module.functions.get(call.callee_name) if call.callee_name else None
    if callee is None or not callee.is_varargs:
        return False
    if ret_active or activity.is_active_ptr(call) or any(activity.is_active_ptr(a) for a in call.args) or \
            activity.reaches_active_globals(call):
        raise ad_error(f"variadic function '{call.callee_name}' is called with memory with derivatives, or its "
                       "result or the globals it uses carry derivatives: derivatives through a variadic function "
                       "are not supported", call)
    return True


def call_kinds(call, activity, has_derivative, float_kind: str) -> tuple[str, ...]:
    """Activity of each argument of a call to a user function: ``dup`` for pointers to memory with
    derivatives, ``float_kind`` (``dup`` in forward mode, ``out`` in reverse mode) for floats with a
    derivative (``has_derivative``), ``const`` otherwise."""
    return tuple("dup" if isinstance(a.type, T.PointerType) and activity.is_active_ptr(a) else
                 float_kind if is_float(a.type) and has_derivative(a) else "const" for a in call.args)


def not_inlined_error(call, what: str):
    """The error for a call that is not inlined and passes ``what`` the derived functions cannot carry; for a
    call through a function pointer with too many candidates to inline, that reason alone."""
    if has_call_attribute(call, DISPATCHED_CALL):
        return ad_error(f"'{call.callee_name}' {what} and is called through a function pointer that may hold any "
                        f"of more than {MAX_INLINED_AGGREGATE_TARGETS} functions of its type, too many to inline: "
                        "such calls are not supported (return or pass the struct through a pointer)", call)
    return ad_error(f"'{call.callee_name}' {what} and is not inlined (it is recursive, or --ad-inline says so): "
                    "such calls are not supported", call)


__all__ = ["DISPATCHED_CALL", "SIZE_CUT_CALL", "MAX_INLINED_AGGREGATE_TARGETS", "call_kinds", "check_call_signature",
           "has_call_attribute", "needs_inlining", "not_inlined_error", "variadic_call_stays"]
