"""AD errors: always naming the function and, when debug info has it, the source line."""

from __future__ import annotations

from enzcc.ad.debuginfo import locate, source_function
from enzcc.errors import EnzccError


class ADError(EnzccError):
    """Something in user code cannot be differentiated (or the AD API is misused)."""


class MissingBodyError(ADError):
    """The function to differentiate is defined in another translation unit: AD waits for the link."""


def no_rule_error(inst, name: str | None, module) -> ADError:
    """No derivative rule for the call ``inst`` to ``name``. A function only declared in this module may be
    defined in another translation unit: a :class:`MissingBodyError`, so AD waits for the link (where the
    same message is an error if the body is still missing)."""
    from enzcc.ir.values import InlineAsm

    what = f"'{name}'" if name else "inline assembly" if isinstance(getattr(inst, "callee", None), InlineAsm) \
        else "a function pointer"
    fn = module.functions.get(name) if name else None
    cls = MissingBodyError if fn is not None and fn.is_declaration else ADError
    return ad_error(f"no derivative rule for call to {what}", inst, cls=cls)


def ad_error(message: str, inst=None, fn=None, cls=ADError) -> ADError:
    """An :class:`ADError` for ``message`` about instruction ``inst`` (in function ``fn``)."""
    where = None
    name = None
    if inst is not None:
        where = locate(inst)
        fn = fn or inst.function
        name = source_function(inst)  # (code inlined from another function names that one)
    if fn is not None:
        name = name or getattr(fn, "primal_name", fn.name)
    if name is not None:
        if f"'{name}'" not in message:
            message = f"in function '{name}': {message}"
    return cls(message, where)
def describe_pointer(v) -> str:
    """Names a pointer for a message: its source-level name when it has one, else what produced it (never
    an unnumbered ``%<badref>``)."""
    from enzcc.ir.instructions import Call, Instruction

    name = getattr(v, "name", None)
    if isinstance(v, Instruction):
        what = (f"call to '{v.callee_name}'" if v.callee_name else "a call through a function pointer") \
            if isinstance(v, Call) else f"'{v.opcode}'"
        return f"pointer %{name} (from {what})" if name and not name.isdigit() else f"the pointer from {what}"
    if name:
        return f"pointer {'@' if hasattr(v, 'symbol') else '%'}{name}"
    return f"pointer {v}"


