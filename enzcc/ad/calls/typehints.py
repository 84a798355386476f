"""Enzyme's type hints: ``__enzyme_double(p)``, ``__enzyme_float(p)``, ``__enzyme_integer(p, bytes)``,
``__enzyme_pointer(p)`` say what the memory ``p`` points to holds. enzcc's memory types
(:class:`enzcc.ad.memory.MemoryTypes`) take them as an access of that type; the calls carry no derivative and are
removed from the program (:func:`lower`).

``__enzyme_ptr_size_hint(p, bytes, flags)`` says how many bytes ``p`` points to. Enzyme reads it to find what a
loop annotated for checkpointing writes; enzcc does not checkpoint annotated loops (clang drops the annotation,
with its warning, and the loop is differentiated whole, with the same gradient), so the hint has no use: the call
carries no derivative and is removed like the others.
"""

from __future__ import annotations

from enzcc.ad.registry import CallRule, register, register_lowering

from enzcc.ir import types as T

#: hint function -> the type the memory holds
TYPE_HINTS = {"__enzyme_double": T.f64, "__enzyme_float": T.f32, "__enzyme_integer": T.i64,
              "__enzyme_pointer": T.ptr}


def hinted_type(name: str | None):
    """The type a call to hint ``name`` (any suffix, as for the other API names) says its memory holds."""
    name = name or ""
    return next((ty for hint, ty in TYPE_HINTS.items() if name.startswith(hint)), None)


SIZE_HINT = "__enzyme_ptr_size_hint"


def is_hint(name: str | None) -> bool:
    """A type hint or ``__enzyme_ptr_size_hint``."""
    return hinted_type(name) is not None or (name or "").startswith(SIZE_HINT)


def lower(module) -> int:
    """Remove the hint calls left in the program."""
    from enzcc.ad.api import calls_named

    calls = [c for prefix in (*TYPE_HINTS, SIZE_HINT) for c in calls_named(module, prefix)]
    for call in calls:
        call.erase()
    return len(calls)


VIRTUAL_REVERSE = "__enzyme_virtualreverse"


def is_virtual_reverse(name: str | None) -> bool:
    return (name or "").startswith(VIRTUAL_REVERSE)


def lower_virtual_reverse(module) -> int:
    """``__enzyme_virtualreverse(f)`` is ``f``. Enzyme makes it a table of ``f``'s derivatives, for a shadow
    object's function pointer or vtable, through which its derivatives dispatch a call. enzcc dispatches calls
    through function pointers and virtual calls by the primal pointer alone (the shadow's is never read), so
    the shadow only needs to hold a valid pointer, such as the primal one."""
    from enzcc.ad.api import calls_named
    from enzcc.ad.errors import ad_error

    calls = calls_named(module, VIRTUAL_REVERSE)
    for call in calls:
        if len(call.args) != 1 or call.args[0].type != call.type:
            raise ad_error(f"{VIRTUAL_REVERSE} takes one function pointer and returns it", call)
        value = call.args[0]
        call.replace_all_uses_with(value)
        call.erase()
    return len(calls)



# -- the call rule ----------------------------------------------------------------------------------------

for _hint, _ty in TYPE_HINTS.items():
    register(CallRule("type hints", inactive=True, declares_type=_ty), prefixes=(_hint,))
register(CallRule("type hints", inactive=True), prefixes=(SIZE_HINT,))
register_lowering(60, is_hint, lower)
register_lowering(70, is_virtual_reverse, lower_virtual_reverse)


__all__ = ["SIZE_HINT", "TYPE_HINTS", "VIRTUAL_REVERSE", "hinted_type", "is_hint", "is_virtual_reverse", "lower",
           "lower_virtual_reverse"]
