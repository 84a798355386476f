"""Calling derivatives the user registered, with Enzyme's calling conventions.

``__enzyme_register_derivative_f = {f, f_fwd}`` (forward mode): ``f_fwd`` takes every parameter of ``f``
followed by its tangent: the tangent of a float (0 when it has none), the shadow of a pointer (null when the
memory has no derivatives), the integer itself again. It returns ``{result, tangent}`` (void for a void
``f``).

``__enzyme_register_gradient_f = {f, f_aug, f_rev}`` (reverse mode): both take every parameter of ``f``, each
non-float one followed by its shadow (a pointer's shadow, or the pointer itself when its memory has no
derivatives; an integer again). ``f_rev`` then takes the adjoint of the result (for a float result) and, when
it has one more parameter, the tape. What ``f_aug`` returns is read from its type: the type of ``f``'s
result: the result; ``{T, T}``: the result and its shadow; another two-element struct: ``{tape, result}``;
three elements: ``{tape, result, shadow}``; any other type: the tape; void: nothing. When it returns no
result and the result is used, the forward code calls ``f`` itself for it. ``f_rev`` returns the
derivatives of ``f``'s float parameters in order (one value, a struct of them, or void). The user's
``f_rev`` frees the tape if it allocated one.

``__enzyme_register_splitderivative_f = {f, f_aug, f_err}`` (forward split mode): ``f_aug`` takes the
parameters of the reverse-mode convention above and returns its tape with the result, read in the same way
(``{tape, result, shadow}`` in Enzyme's tests); ``f_err`` takes the parameters of the forward-mode convention,
then the tape when ``f_aug`` returns one, and returns ``{result, tangent}`` (void for a void ``f``). The
augmented primal calls ``f_aug`` and keeps its tape on its own; the tangent calls ``f_err`` with it (enzcc
never frees that tape: with ``enzyme_nofree`` one tape serves several tangents). Pointers into memory with
derivatives are not supported as arguments (the augmented primal has no shadows to pass).

Signatures are those of the LLVM functions (after the C ABI lowered them); a mismatch is a one-line error.
"""

from __future__ import annotations

from enzcc.ad.registry import CallRule, register

from enzcc.ad.errors import ad_error
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.values import ConstantFloat, ConstantNull


def _is_float(ty) -> bool:
    return isinstance(ty, T.FloatType)


def _check_params(call, what: str, fn, expected: list[T.Type]) -> None:
    got = list(fn.function_type.params)
    if any("sret" in a for arg in fn.args for a in arg.attrs):
        raise ad_error(f"the {what} '{fn.name}' registered for '{call.callee_name}' returns a struct through "
                       "memory (sret), which enzcc does not support", call)
    if got != expected:
        raise ad_error(f"the {what} '{fn.name}' registered for '{call.callee_name}' has parameters "
                       f"({', '.join(map(str, got))}); Enzyme's convention needs "
                       f"({', '.join(map(str, expected))})", call)


def _supported_param(call, ty) -> None:
    if not (_is_float(ty) or isinstance(ty, (T.IntType, T.PointerType))):
        raise ad_error(f"a registered derivative of '{call.callee_name}' with a parameter of type {ty} is not "
                       "supported (floats, integers and pointers are)", call)


# -- forward mode ------------------------------------------------------------------------------------


def forward_call(mode, inst) -> None:
    """Replace the call ``inst`` (in :class:`enzcc.ad.forward.ForwardMode` ``mode``'s function) by a call to
    the registered forward derivative."""
    from enzcc.ad.hints import hints_of

    module = mode.module
    fwd = module.functions[hints_of(module).derivative[inst.callee_name]]
    expected, args = [], []
    for a in inst.args:
        _supported_param(inst, a.type)
        expected += [a.type, a.type]
        if _is_float(a.type):
            tangent = mode._t(a)
        elif isinstance(a.type, T.PointerType):
            tangent = mode.shadows.of(a, inst) if mode.activity.is_active_ptr(a) else ConstantNull(T.ptr)
        else:
            tangent = a
        args += [a, tangent]
    _check_params(inst, "forward derivative", fwd, expected)
    rty = inst.type
    want = T.void if isinstance(rty, T.VoidType) else T.StructType((rty, rty))
    if fwd.return_type != want:
        raise ad_error(f"the forward derivative '{fwd.name}' registered for '{inst.callee_name}' returns "
                       f"{fwd.return_type}; Enzyme's convention needs {want} ({{result, tangent}})", inst)
    b = IRBuilder.before(inst)
    new = b.call(fwd, args)
    if not isinstance(rty, T.VoidType):
        primal = b.extract_value(new, [0])
        if _is_float(rty):
            mode._set(primal, b.extract_value(new, [1]))
        elif isinstance(rty, T.PointerType) and mode.activity.is_active_ptr(inst):
            raise ad_error(f"'{inst.callee_name}' returns a pointer into memory with derivatives; registered "
                           "derivatives of such functions are not supported", inst)
        inst.replace_all_uses_with(primal)
    inst.erase()


def split_forward_call(mode, inst) -> tuple[list, object]:
    """Forward split mode: replace the call ``inst`` (in ``mode``'s function, :mod:`enzcc.ad.fwdsplit` cuts it)
    by a call to the registered augmented primal, whose results are primal values, and a call to the registered
    tangent, which is tangent code. Returns the new primal instructions, in order, and the value that replaces
    the call's result (None for a void function)."""
    from enzcc.ad.hints import hints_of

    module = mode.module
    aug_name, err_name = hints_of(module).splitderivative[inst.callee_name]
    aug, err = module.functions[aug_name], module.functions[err_name]
    prefix_types, prefix, expected, args = [], [], [], []
    for a in inst.args:
        _supported_param(inst, a.type)
        if isinstance(a.type, T.PointerType) and mode.activity.is_active_ptr(a):
            raise ad_error(f"'{inst.callee_name}' with a pointer into memory with derivatives as an argument: "
                           "registered split-mode derivatives of such calls are not supported", inst)
        prefix_types.append(a.type)
        prefix.append(a)
        if not _is_float(a.type):  # (the reverse-mode convention: the value again, as it has no shadow)
            prefix_types.append(a.type)
            prefix.append(a)
        expected += [a.type, a.type]
        args += [a, mode._t(a) if _is_float(a.type) else
                 ConstantNull(T.ptr) if isinstance(a.type, T.PointerType) else a]
    rty = inst.type
    _, new, tape, result = _call_augmented(mode, inst, aug, prefix_types, prefix, "derivatives")
    made = [new] + [v for v in (tape, result) if v is not None and v is not new]
    if result is None and inst.has_uses():
        raise ad_error(f"the augmented forward function '{aug.name}' registered for '{inst.callee_name}' returns "
                       f"no result ({aug.return_type}); forward split mode needs {{tape, result}}", inst)
    if result is not None:
        _take_result(mode, inst, aug, result)
    params = list(err.function_type.params)
    if len(params) == len(expected) + 1 and tape is None:
        raise ad_error(f"the tangent function '{err.name}' registered for '{inst.callee_name}' takes a tape, but "
                       f"'{aug.name}' returns none", inst)
    has_tape = tape is not None and len(params) != len(expected)
    _check_params(inst, "tangent function", err, expected + ([tape.type] if has_tape else []))
    want = T.void if isinstance(rty, T.VoidType) else T.StructType((rty, rty))
    if err.return_type != want:
        raise ad_error(f"the tangent function '{err.name}' registered for '{inst.callee_name}' returns "
                       f"{err.return_type}; Enzyme's convention needs {want} ({{result, tangent}})", inst)
    inst.erase()
    tb = IRBuilder.after(made[-1])
    got = tb.call(err, args + ([tape] if has_tape else []))
    if _is_float(rty) and result is not None:
        mode._set(result, tb.extract_value(got, [1]))
    return made, result


# -- reverse mode ------------------------------------------------------------------------------------


def augment_call(mode, inst) -> tuple:
    """In :class:`enzcc.ad.reverse.ReverseMode` ``mode``'s forward code: replace the call ``inst`` by a call to
    the registered augmented forward function. Returns what :func:`reverse_call` needs."""
    from enzcc.ad.hints import hints_of

    module = mode.module
    aug_name, rev_name = hints_of(module).gradient[inst.callee_name]
    aug, rev = module.functions[aug_name], module.functions[rev_name]
    prefix_types, prefix = [], []
    for a in inst.args:
        _supported_param(inst, a.type)
        prefix_types.append(a.type)
        prefix.append(a)
        if not _is_float(a.type):
            prefix_types.append(a.type)
            if isinstance(a.type, T.PointerType) and mode.activity.is_active_ptr(a):
                prefix.append(mode.shadows.of(a, inst))
            else:
                prefix.append(a)  # Enzyme passes the value again for arguments without derivatives
    rty = inst.type
    b, new, tape, result = _call_augmented(mode, inst, aug, prefix_types, prefix, "gradients")
    if result is None and inst.has_uses():
        # f_aug returns no result (Enzyme's f_aug returns it only when it is a pointer): f itself computes it
        result = b.insert(inst.clone())
    if result is not None:
        _take_result(mode, inst, aug, result)
    # the reverse function: the same prefix, the result's adjoint, the tape if it takes one
    expected = list(prefix_types) + ([rty] if _is_float(rty) else [])
    params = list(rev.function_type.params)
    has_tape = len(params) == len(expected) + 1
    if has_tape and tape is None:
        raise ad_error(f"the reverse function '{rev.name}' registered for '{inst.callee_name}' takes a tape, but "
                       f"'{aug.name}' returns none", inst)
    _check_params(inst, "reverse function", rev, expected + ([params[-1]] if has_tape else []))
    if has_tape and params[-1] != tape.type:
        raise ad_error(f"the reverse function '{rev.name}' takes a tape of type {params[-1]}, but '{aug.name}' "
                       f"returns one of type {tape.type}", inst)
    floats = [a.type for a in inst.args if _is_float(a.type)]
    ok = [T.void] if not floats else [T.StructType(tuple(floats))] + ([floats[0]] if len(floats) == 1 else [])
    if rev.return_type not in ok:
        raise ad_error(f"the reverse function '{rev.name}' registered for '{inst.callee_name}' returns "
                       f"{rev.return_type}; it must return the derivatives of the float parameters "
                       f"({' or '.join(map(str, ok))})", inst)
    entry = (new, prefix, rev, (tape if has_tape else None), result, list(inst.args), rty)
    inst.erase()
    return entry


def _call_augmented(mode, inst, aug, prefix_types: list, prefix: list, what: str) -> tuple:
    """Check the registered augmented forward function ``aug`` against its arguments ``prefix`` and ``inst``'s
    result, and call it just before ``inst``: (builder there, the call, its tape or None, its result or None).
    ``what``: the kind of registration, for the message."""
    _check_params(inst, "augmented forward function", aug, prefix_types)
    if isinstance(inst.type, T.PointerType) and mode.activity.is_active_ptr(inst):
        raise ad_error(f"'{inst.callee_name}' returns a pointer into memory with derivatives; registered {what} "
                       "of such functions are not supported", inst)
    b = IRBuilder.before(inst)
    new = b.call(aug, prefix)
    return (b, new, *_read_augmented(inst, aug, new, b))


def _take_result(mode, inst, aug, result) -> None:
    """``inst``'s result is now ``result`` (what the augmented forward function ``aug`` returned), active where
    ``inst``'s was."""
    if result.type != inst.type:
        raise ad_error(f"the augmented forward function '{aug.name}' registered for '{inst.callee_name}' "
                       f"returns the result as {result.type}, not {inst.type}", inst)
    if _is_float(inst.type) and mode.activity.is_active(inst):
        act = mode.activity
        act._mark(act.varied, result)
        act._mark(act.useful, result)
    inst.replace_all_uses_with(result)


def _read_augmented(inst, aug, value, b):
    """(tape, result) from what the augmented forward function returns (see the module docstring)."""
    rty, aty = inst.type, aug.return_type
    has_result = not isinstance(rty, T.VoidType)
    if isinstance(aty, T.VoidType):
        return None, None
    if has_result and aty == rty:
        return None, value
    if isinstance(aty, T.StructType) and len(aty.elements) == 3:
        return b.extract_value(value, [0]), b.extract_value(value, [1]) if has_result else None
    if isinstance(aty, T.StructType) and len(aty.elements) == 2:
        if aty.elements[0] == aty.elements[1]:
            return None, b.extract_value(value, [0]) if has_result else None
        return b.extract_value(value, [0]), b.extract_value(value, [1]) if has_result else None
    return value, None


def reverse_call(mode, entry, block, b: IRBuilder) -> None:
    """The registered reverse function, called at the reverse position of the augmented call."""
    _, prefix, rev, tape, result, primal_args, rty = entry
    args = [mode._primal(v, block, b) for v in prefix]
    if _is_float(rty):
        if result is not None and mode.activity.is_active(result):
            args.append(mode._take_adjoint(b, result))
        else:
            args.append(ConstantFloat(rty, 0.0))
    if tape is not None:
        args.append(mode._primal(tape, block, b))
    r = b.call(rev, args)
    for j, a in enumerate(a for a in primal_args if _is_float(a.type)):
        if mode.activity.is_active(a) or mode._is_out(a):
            mode._add_adjoint(b, a, b.extract_value(r, [j]) if isinstance(r.type, T.StructType) else r)



# -- the call rule ----------------------------------------------------------------------------------------

def _registered(call) -> bool:
    from enzcc.ad.hints import hints_of

    name, module = call.callee_name, call.module
    if not name or module is None:
        return False
    hints = hints_of(module)
    return name in hints.gradient or name in hints.derivative or name in hints.splitderivative


def _forward(mode, inst) -> bool:
    """The user's forward derivative (or forward split derivative) of a call."""
    from enzcc.ad.hints import hints_of

    if not mode.carries_derivatives(inst):
        return True
    name = inst.callee_name
    hints = hints_of(mode.module)
    if mode.width > 1 and name in hints.derivative:
        raise ad_error(f"vector mode (enzyme_width) with a call to '{name}', which has a registered derivative "
                       "(it takes one tangent), is not supported", inst)
    if mode.split and name in hints.splitderivative:  # the user's own, for forward split mode
        made, result = split_forward_call(mode, inst)
        mode.primal_returns.update({k: result for k, v in mode.primal_returns.items() if v is inst})
        k = next(j for j, i in enumerate(mode.primal_instructions) if i is inst)
        mode.primal_instructions[k:k + 1] = made
        mode.primal_callees.pop(id(inst), None)
        mode.primal_callees[id(made[0])] = made[0].callee_name
        return True
    if name in hints.derivative:  # the user's own derivative
        if mode.split:
            raise ad_error(f"forward split mode with a call to '{name}', whose registered forward derivative "
                           "computes the result and the tangent in one call: register a split derivative "
                           "(__enzyme_register_splitderivative_*) for it", inst)
        forward_call(mode, inst)
        return True
    if name in hints.splitderivative:
        raise ad_error(f"'{name}' has only a forward split mode derivative registered "
                       "(__enzyme_register_splitderivative_*); register a forward derivative "
                       "(__enzyme_register_derivative_*) to differentiate this call in forward mode", inst)
    return False  # (a gradient only: forward mode differentiates the body)


def _augment(mode, inst):
    """The user's augmented forward function replaces a call through which derivatives flow (reverse mode)."""
    from enzcc.ad.activity import is_user_call
    from enzcc.ad.hints import hints_of
    from enzcc.ad.prepare import inactive_functions

    name = inst.callee_name
    if mode.logic is None or not is_user_call(inst) or name in inactive_functions(mode.module) or \
            name not in hints_of(mode.module).gradient:
        return None
    act = mode.activity
    if mode.width > 1 and (any(act.is_active_ptr(a) or act.is_active(a) for a in inst.args) or act.is_active(inst)):
        raise ad_error(f"vector mode (enzyme_width) with a call to '{name}', which has a registered gradient (it "
                       "takes one adjoint), is not supported", inst)
    entry = augment_call(mode, inst)
    return entry[0], entry, []


def _reverse(mode, inst, entry, block, b: IRBuilder) -> bool:
    if entry is None:
        return False
    reverse_call(mode, entry, block, b)
    return True


# (first: the user's derivative of a function wins over any other rule for it)
register(CallRule("custom", forward=_forward, augment=_augment, reverse=_reverse), match=_registered, first=True)


__all__ = ["augment_call", "forward_call", "reverse_call", "split_forward_call"]
