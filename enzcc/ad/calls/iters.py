"""``__enzyme_iter(n, step)``: an iteration count that grows with the order of differentiation.

Code that approximates (a truncated series, a fixed number of Newton steps) can ask for ``step`` more
iterations each time it is differentiated, as Enzyme allows: in a function's primal ``__enzyme_iter(n, step)``
is ``n``; each time a function is prepared for differentiation (:func:`advance`, on the private copy the
derivative is built from) the call's first operand becomes ``n + step``, so a derivative of a derivative sees
``n + 2 step``. When no more derivatives are to be made, every call that remains is replaced by its first
operand (:func:`lower`).
"""

from __future__ import annotations

from enzcc.ad.registry import CallRule, register, register_copy_preparation, register_lowering

from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import Call

ITER = "__enzyme_iter"


def is_iter(name: str | None) -> bool:
    """``name`` is ``__enzyme_iter`` (any suffix, as for the other API names)."""
    return (name or "").startswith(ITER)


def _calls(fn) -> list[Call]:
    return [i for i in fn.instructions() if isinstance(i, Call) and is_iter(i.callee_name) and len(i.args) == 2]


def advance(fn) -> None:
    """In ``fn`` (a copy a derivative is built from): ``__enzyme_iter(n, step)`` -> ``__enzyme_iter(n + step,
    step)``."""
    for call in _calls(fn):
        n, step = call.args
        call.set_arg(0, IRBuilder.before(call).add(n, step))


def lower(module) -> int:
    """Replace each remaining ``__enzyme_iter(n, step)`` by ``n``; returns how many there were."""
    from enzcc.ad.api import calls_named

    calls = [c for c in calls_named(module, ITER) if len(c.args) == 2]
    for call in calls:
        call.replace_all_uses_with(call.args[0])
        call.erase()
    return len(calls)



# -- the call rule ----------------------------------------------------------------------------------------

register(CallRule("__enzyme_iter", inactive=True, writes_no_memory=True), prefixes=(ITER,))
register_lowering(10, is_iter, lower)
register_copy_preparation(10, advance)


__all__ = ["ITER", "advance", "is_iter", "lower"]
