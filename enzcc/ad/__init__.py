"""The AD engine: replaces ``__enzyme_autodiff`` / ``__enzyme_fwddiff`` / ``__enzyme_augmentfwd`` /
``__enzyme_reverse`` / ``__enzyme_augmentsize`` calls with synthesized derivatives.

Entry point: :func:`differentiate_text` (LLVM 22 text in, text out), used by the pipeline's ``ad`` stage.
Derived functions are made on demand and cached by :class:`enzcc.ad.logic.DerivedFunctions`; reverse mode
is :mod:`enzcc.ad.reverse` (layout), :mod:`enzcc.ad.adjoint` (per-instruction adjoints) and
:mod:`enzcc.ad.cache` (cache or recompute); forward mode is :mod:`enzcc.ad.forward`.
"""

from __future__ import annotations

import gc

from enzcc.ad.api import calls_named, marker_symbol, mode_of, parse_call, resolve_function
from enzcc.ad.batch import BATCH, replace_batch
from enzcc.ad.errors import ADError, ad_error
from enzcc.ad.globals import used_globals, zero_shadows
from enzcc.ad.hints import hints_of
from enzcc.ad.inline import invoke_to_call, is_kept_recursive
from enzcc.ad import calls as _families  # noqa: F401  (registers every call family: enzcc.ad.registry)
from enzcc.ad.registry import (called_function, copy_preparations, global_shadow_sources, lowerings,
                               module_preparations, prepared_checks)
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.dce import remove_dead_instructions
from enzcc.ir.instructions import Alloca, Call, Invoke, Load
from enzcc.ir.module import SYMBOL_REF, Module
from enzcc.ir.parser import parse_module
from enzcc.ir.values import ConstantInt, GlobalRef

ENZYME_PREFIX = "__enzyme_"
#: functions a program defines for Enzyme's floating-point profiling to call (not supported: an error)
PROFILING_HOOKS = ("enzymeLogGrad", "enzymeLogValue", "enzymeLogError")


def differentiate_text(text: str, target_machine=None, inline: str = "auto") -> tuple[str, int]:
    """Differentiate the ``__enzyme_*`` calls of the module whose function reaches no other ``__enzyme_*``
    call (all of them, unless AD is nested: see :func:`ready_calls`). Returns (new text, number of calls
    replaced); the caller repeats until no call is left.

    Python's cyclic garbage collector is off meanwhile: the IR model is millions of small objects that live
    until the end, and its repeated full scans of them took a third of the time on large functions (4,000
    statements: 4.5 s of 12.8 s) for no memory back (the same peak).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _differentiate_text(text, target_machine, inline)
    finally:
        if enabled:
            gc.enable()


def _differentiate_text(text: str, target_machine, inline: str) -> tuple[str, int]:
    """:func:`differentiate_text` with the collector off.

    Three steps: (1) for each function to differentiate, and each function reached by a call that is not
    inlined (recursion, ``inline`` = ``auto``/``none``: see :func:`enzcc.ad.prepare.should_inline`), a
    private copy with the calls it inlines inlined; (2) LLVM's SROA and CFG simplification on those copies only
    (promoting locals to SSA values, as Enzyme's preprocessing does); (3) derivative synthesis from the
    simplified copies, which are then deleted.
    """
    module = parse_module(text)
    every = _enzyme_calls(module)
    calls = ready_calls(module, every)
    if not calls:
        if every:
            call = every[0]
            target = resolve_function(call.args[0]) if call.args else None
            what = f"'{target.symbol}'" if isinstance(target, GlobalRef) else "its function"
            raise ad_error(f"cannot differentiate {what}: nested AD must not be recursive, and this "
                           f"function reaches this {call.callee_name} call itself", call)
        return (str(module), 1) if _lower_api_calls(module) else (text, 0)
    module.enzcc_inline = inline
    for name, fn in module.functions.items():  # Enzyme calls them from derivatives when defined (FPOpt builds)
        hook = next((h for h in PROFILING_HOOKS if name in (h, f"_Z{len(h)}{h}") or
                     name.startswith(f"_Z{len(h)}{h}")), None)
        if hook is not None and not fn.is_declaration:
            raise ad_error(f"{hook} is defined: Enzyme's floating-point profiling hooks (enzymeLogGrad, "
                           "enzymeLogValue, enzymeLogError) are not supported by enzcc; derivatives would never "
                           "call it", calls[0])
    requests = [parse_call(c, module) for c in calls if not (c.callee_name or "").startswith(BATCH)]
    prep_names: dict[str, str] = {}
    todo = _requests_large_last(module, requests)
    protected = hints_of(module).protected()
    large = module.enzcc_large = set()  # (functions prepared with a large program's budgets: enzcc.ad.prepare)
    seen = set()
    while todo:  # the functions asked for, and those their recursive calls reach (in forward mode only, or not)
        fn, forward, in_large = todo.pop()
        if (fn.name, forward) in seen:
            continue
        seen.add((fn.name, forward))
        if fn.name not in prep_names:
            if in_large:
                large.add(fn.name)
            prep_names[fn.name] = _make_prepared_copy(module, fn)
        in_large = fn.name in large  # (the callees its derivative calls inherit the budgets it was prepared with)
        checks = prepared_checks()
        for inst in module.functions[prep_names[fn.name]].instructions():
            if isinstance(inst, Call):  # (what the call families refuse to differentiate)
                for check in checks:
                    check(fn, inst, forward)
            forked = called_function(inst)
            if forked in module.functions and not module.functions[forked].is_declaration:
                # an OpenMP region's body, a fixed point's step
                todo.append((module.functions[forked], forward, in_large))
            elif isinstance(inst, Call) and is_kept_recursive(inst):
                todo.append((module.functions[inst.callee_name], forward, in_large))
            elif isinstance(inst, Call) and inst.callee_name in module.functions and \
                    not module.functions[inst.callee_name].is_declaration and \
                    inst.callee_name not in protected and _differentiable(module.functions[inst.callee_name]):
                todo.append((module.functions[inst.callee_name], forward, in_large))  # not inlined: called
    copies = [module.functions[name] for name in prep_names.values()]
    if all(_straight_line(fn) for fn in copies):
        for fn in copies:  # (nothing for SROA or CFG simplification: the text's round trip through LLVM is skipped)
            remove_dead_instructions(fn)
    else:
        text = _simplify(str(module), list(prep_names.values()), target_machine)
        module = parse_module(text)
        module.enzcc_inline = inline
        module.enzcc_large = large
    # tape buffers pass from one call to the next, unless this round's derivatives are differentiated again
    # (nested AD follows the tape's memory) or the code runs on a GPU
    module.enzcc_chunked_tape = len(calls) != len(every)  # (a later round differentiates these derivatives)
    module.enzcc_reuse_tape = len(calls) == len(every) and not module.targets_gpu
    steps = {}  # functions the families made to be differentiated as they are (outlined loop steps: kept)
    for prepare_module in module_preparations():
        steps.update((s, s) for s in prepare_module(module, prep_names) or ())
    count = differentiate_module(module, {**prep_names, **steps})
    for name in prep_names.values():
        module.remove_function(name)  # (its calls no longer count as uses of their callees)
    if len(calls) == len(every):  # the last round: no more derivatives of these functions
        _lower_api_calls(module)
    return str(module), count


def _requests_large_last(module: Module, requests) -> list[tuple]:
    """The work list of functions to prepare, (function, forward mode, large request), one per request: the
    large requests (:func:`enzcc.ad.prepare.large_request`) last, so that they and every function their
    derivatives call are prepared first, with the large program's budgets (a function has one prepared copy
    per round, shared by every request that reaches it: the derived-function cache keys stay those of one
    body). A request counted once per entry function."""
    from enzcc.ad.prepare import large_request

    sized: dict[str, bool] = {}
    todo = []
    for dc in requests:
        if dc.fn.name not in sized:
            sized[dc.fn.name] = large_request(dc.fn)
        todo.append((dc.fn, dc.mode in ("forward", "forward-split"), sized[dc.fn.name]))
    return sorted(todo, key=lambda t: t[2])  # (stable: the program's order within each kind)


def _differentiable(callee) -> bool:
    """Whether a callee that was not inlined may need derived functions: not a variadic one (its ``va_start``
    needs a variadic function around it: a call to it stays the primal's, or is refused where derivatives
    flow through it: :func:`enzcc.ad.usercalls.check_call_signature`), nor one that ends the program."""
    from enzcc.ad.prepare import inactive_functions

    return not callee.is_varargs and callee.name not in inactive_functions(callee.module)


def _lower_api_calls(module) -> int:
    """Replace the ``__enzyme_*`` calls that are no entry point (markers, hints, runtime calls: the families
    register them with :func:`enzcc.ad.registry.register_lowering`) left in the module, in the order the
    families asked (markers of fixed-point loops before the loops); returns how many there were."""
    return sum(lower(module) for _, lower in lowerings())


def _enzyme_calls(module: Module) -> list[Call]:
    """The ``__enzyme_*`` entry-point calls (not the markers and runtime calls other modules lower)."""
    if not any(n.startswith(ENZYME_PREFIX) for n in module.functions):
        return []
    return [c for c in calls_named(module, ENZYME_PREFIX)
            if not any(lowered(c.callee_name) for lowered, _ in lowerings())]


def ready_calls(module: Module, calls: list[Call]) -> list[Call]:
    """The calls among ``calls`` whose function to differentiate reaches (calls, or refers to, directly or
    through other functions) no ``__enzyme_*`` call: nested AD, e.g. ``__enzyme_fwddiff`` of a function that
    calls ``__enzyme_autodiff``, is done inside out, the inner call first, so that the outer derivative is
    taken of the synthesized inner one. ``__enzyme_batch`` calls are always ready."""
    callers = {c.parent.parent.name for c in calls}
    reaches: dict[str, bool] = {}

    def reaches_enzyme(name: str) -> bool:
        if name in reaches:
            return reaches[name]
        reaches[name] = False  # (a cycle adds nothing)
        found = name in callers or any(reaches_enzyme(r) for r in _referenced_functions(module, name))
        reaches[name] = found
        return found

    ready = []
    for call in calls:
        if (call.callee_name or "").startswith(BATCH) or not call.args:
            ready.append(call)
            continue
        args = list(call.args)
        if call.arg_attrs and any(a.startswith("sret") for a in call.arg_attrs[0]):
            args = args[1:]  # (a struct result returned through memory comes first, as in parse_call)
        target = resolve_function(args[0]) if args else None
        if not isinstance(target, GlobalRef) or not reaches_enzyme(target.symbol):
            ready.append(call)  # (a bad first argument is reported by parse_call)
    return ready


def _referenced_functions(module: Module, name: str) -> set[str]:
    """Names of the defined functions that function ``name``'s body calls or refers to."""
    fn = module.functions.get(name)
    if fn is None or fn.is_declaration:
        return set()
    if fn.is_parsed:
        names = used_globals(fn)
    else:  # (not parsed yet: its text says it)
        names = {m.group(1) or m.group(2) for m in SYMBOL_REF.finditer(fn._body_text)}
    return {n for n in names if n in module.functions and not module.functions[n].is_declaration}


def _make_prepared_copy(module: Module, fn) -> str:
    from enzcc.ad.prepare import clone_body, new_derivative_function, prepare

    copy = new_derivative_function(module, fn, f"__enzcc_prep_{fn.name}", [a.type for a in fn.args],
                                   fn.return_type, [a.name for a in fn.args])
    if not fn.is_parsed and [a.name for a in copy.args] == [a.name for a in fn.args]:
        # the same text parsed as the copy's body: the primal itself is never parsed, and is printed back
        # from its text (large generated functions: a third less parsing and printing)
        copy._body_text, copy._body_line = fn._body_text, fn._body_line
    else:
        clone_body(fn, copy)
    for before in copy_preparations(before=True):  # (the families' own preparation: enzcc.ad.registry)
        before(copy)
    prepare(copy)
    for after in copy_preparations(before=False):
        after(copy)
    return copy.name


def _straight_line(fn) -> bool:
    """Whether ``fn`` is one block without stack slots (generated straight-line code, once optimized)."""
    return len(fn.blocks) == 1 and not any(isinstance(i, Alloca) for i in fn.blocks[0].instructions)


def _simplify(text: str, names: list[str], tm) -> str:
    import llvmlite.binding as llvm

    from enzcc.backend.llvm import ensure_initialized, target_machine

    ensure_initialized()
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except Exception as exc:
        raise ADError(f"internal error while preparing the derivative: {str(exc).strip().splitlines()[0]}") from None
    tm = tm or target_machine(mod.triple or llvm.get_default_triple(), 2)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=2))
    fpm = llvm.create_new_function_pass_manager()
    fpm.add_sroa_pass()
    fpm.add_simplify_cfg_pass()
    fpm.add_dead_code_elimination_pass()
    for name in names:
        fpm.run(mod.get_function(name), pb)
    return str(mod)


def differentiate_module(module: Module, prepared: dict[str, str] | None = None) -> int:
    """Replace the ``__enzyme_*`` calls of an already prepared module (see :func:`differentiate_text`)."""
    from enzcc.ad.globals import ActiveGlobals
    from enzcc.ad.logic import DerivedFunctions

    logic = DerivedFunctions(module, prepared)
    calls = ready_calls(module, _enzyme_calls(module))
    from_sources = set()  # (functions whose globals' shadows come from elsewhere: a context)
    for source in global_shadow_sources():
        from_sources |= source.functions(module, calls)
    module.enzcc_active_globals = ActiveGlobals(module, prepared or {}, from_sources)
    module.enzcc_prepared = dict(prepared or {})  # (function -> the copy derivatives are made from)
    forward_split = _forward_split_keys(module, calls)
    _check_split_runtime_activity(module, calls, forward_split)
    for call in calls:
        if isinstance(call, Invoke):  # C++: the __enzyme_* declaration may throw, as far as clang knows
            call = invoke_to_call(call)
        if (call.callee_name or "").startswith(BATCH):
            replace_batch(call, module)
            continue
        mode = mode_of(call.callee_name)
        dc = parse_call(call, module)
        if mode == "forward-split":
            _replace_fwdsplit_call(dc, logic)
        elif mode in ("augment", "reverse-split", "size"):
            logic.runtime_activity = dc.runtime_activity  # (the functions its calls need: with it too)
            try:
                _replace_split_call(dc, logic, forward_split)
            finally:
                logic.runtime_activity = False
        else:
            _replace_call(dc, logic.for_call(dc))
    logic.cleanup()
    return len(calls)


def _forward_split_keys(module, calls) -> set:
    """(function, activity) of each ``__enzyme_fwdsplit`` call: the ``__enzyme_augmentfwd`` and
    ``__enzyme_augmentsize`` calls of the same function and activity make and measure its tape
    (:mod:`enzcc.ad.fwdsplit`), which an ``__enzyme_reverse`` cannot read."""
    from enzcc.ad.fwdsplit import activity_key

    keys = set()
    for call in calls:
        if mode_of(call.callee_name) == "forward-split":
            dc = parse_call(call, module)
            keys.add((dc.fn.name, activity_key(dc)))
    if keys:
        for call in calls:
            if mode_of(call.callee_name) == "reverse-split":
                dc = parse_call(call, module)
                if (dc.fn.name, activity_key(dc)) in keys:
                    raise ad_error(f"the tape of __enzyme_augmentfwd of '{dc.fn.name}' goes to __enzyme_fwdsplit and to "
                                   f"{call.callee_name} in this program (the same argument activity): enzcc's tape serves "
                                   "one of them", call)
    return keys


def _check_split_runtime_activity(module, calls, forward_split: set) -> None:
    """The ``__enzyme_augmentfwd`` / ``__enzyme_reverse`` / ``__enzyme_augmentsize`` calls of one function and
    argument activity share one tape: they must agree on ``enzyme_runtime_activity`` (a tape written with it
    is not the tape the reverse function without it reads); and forward split mode has no runtime activity."""
    from enzcc.ad.fwdsplit import activity_key

    seen: dict[tuple, object] = {}
    for call in calls:
        if mode_of(call.callee_name) not in ("augment", "reverse-split", "size"):
            continue
        dc = parse_call(call, module)
        if dc.runtime_activity and (dc.fn.name, activity_key(dc)) in forward_split:
            raise ad_error(f"enzyme_runtime_activity is not supported with __enzyme_fwdsplit, which continues this "
                           f"{call.callee_name} of '{dc.fn.name}'", call)
        key = (dc.fn.name, tuple("dup" if s.kind == "dupnoneed" else s.kind for s in dc.args), dc.active_return)
        other = seen.setdefault(key, dc)
        if other.runtime_activity != dc.runtime_activity:
            with_it, without = (other, dc) if other.runtime_activity else (dc, other)
            raise ad_error(f"{with_it.call.callee_name} of '{dc.fn.name}' has enzyme_runtime_activity and "
                           f"{without.call.callee_name} with the same argument activity does not: both read and "
                           "write one tape, give the marker to both", dc.call)


def _replace_fwdsplit_call(dc, logic) -> None:
    """``__enzyme_fwdsplit(f, args and tangents..., tape)``: the tangent half of ``f``'s forward derivative
    (:mod:`enzcc.ad.fwdsplit`), reading the tape its ``__enzyme_augmentfwd`` wrote."""
    from enzcc.ad.fwdsplit import activity_key

    call = dc.call
    if dc.width > 1:
        raise ad_error(f"vector mode (enzyme_width) is not supported with {call.callee_name}", call)
    split = logic.forward_split(dc, activity_key(dc))
    D = split.tangent(buffer=dc.allocated is not None, nofree=dc.nofree)
    if dc.allocated is not None:
        _check_allocated(dc, logic, split.size, {(dc.fn.name, activity_key(dc))})
    b = IRBuilder.before(call)
    args = []
    for spec in dc.args:
        args.append(_convert(b, spec.primal, spec.param.type))
        if spec.shadow is not None:
            args.append(_convert(b, spec.shadow, spec.param.type))
    zero_shadows(b, dc.fn.module, dc.fn.name)
    r = b.call(D, args + [dc.tape])
    _deliver(dc, b, None if isinstance(r.type, T.VoidType) else r, f"the tangent of '{dc.fn.name}' is")


def _check_allocated(dc, logic, size: int, forward_split: set = frozenset()) -> None:
    """``enzyme_allocated, N``: N bytes must hold the tape (a compile-time error otherwise). N may be what an
    ``__enzyme_augmentsize`` call returns, which is then the size of the tape it names."""
    given = dc.allocated
    if dc.allocated_call is not None:
        sdc = parse_call(dc.allocated_call, dc.fn.module)
        given = _split_size(sdc, logic, forward_split)
    if size > given:
        raise ad_error(f"the tape of '{dc.fn.name}' needs {size} bytes, enzyme_allocated gives {given}", dc.call)


def _split_size(dc, logic, forward_split: set) -> int:
    """The bytes of the tape of the split call ``dc`` (whatever its mode): that of forward split mode for a
    function and activity an ``__enzyme_fwdsplit`` continues, else that of ``__enzyme_reverse``."""
    from enzcc.ad.fwdsplit import activity_key

    if (dc.fn.name, activity_key(dc)) in forward_split:
        return logic.forward_split(dc, activity_key(dc)).size
    return _reverse_split(dc, logic)[3]


def _reverse_split(dc, logic):
    """(key, augmented primal, reverse, tape bytes) of the split call ``dc`` in reverse split mode
    (:mod:`enzcc.ad.split`)."""
    from enzcc.ad.api import DUP, DUPNONEED, OUT

    kinds = tuple("dup" if s.kind in (DUP, DUPNONEED) else "out" if s.kind == OUT else "const" for s in dc.args)
    key = ("split", dc.fn.name, kinds, dc.active_return) + (("runtime-activity",) if dc.runtime_activity else ())
    aug, rev = logic.split_of_call(dc.call, dc.fn, kinds, dc.active_return, dc=dc)
    return key, aug, rev, logic.split_makers[key].frame_size


def _replace_split_call(dc, logic, forward_split: set = frozenset()) -> None:
    """``__enzyme_augmentfwd`` / ``__enzyme_reverse`` / ``__enzyme_augmentsize``: the callee's augmented
    primal and reverse functions (:mod:`enzcc.ad.split`); the tape is the frame the augmented primal
    returns, or the caller's buffer (``enzyme_allocated, N, enzyme_tape, buffer``). For a function and activity
    that an ``__enzyme_fwdsplit`` continues (``forward_split``), the augmented primal of forward split mode."""
    from enzcc.ad.api import DUP, DUPNONEED
    from enzcc.ad.fwdsplit import activity_key
    from enzcc.ad.split import buffer_variant, replay_variant

    call = dc.call
    fkey = activity_key(dc)
    if dc.mode != "reverse-split" and (dc.fn.name, fkey) in forward_split:  # (its size: _split_size)
        split = logic.forward_split(dc, fkey)
        aug, size = split.augmented(buffer=False), split.size
        if dc.allocated is not None and dc.mode == "augment":
            aug = split.augmented(buffer=True)
    else:
        key, aug, rev, size = _reverse_split(dc, logic)
        if dc.allocated is not None and dc.mode != "size":
            aug, rev, size = buffer_variant(logic, key)
            if dc.nofree and dc.mode == "reverse-split":
                rev = replay_variant(logic, key) or rev
        elif dc.nofree and dc.mode == "reverse-split":
            # the same frame, not freed; run on a copy of it, so that it can run again, where enzcc knows how
            rev = replay_variant(logic, key) or buffer_variant(logic, key)[1]
    b = IRBuilder.before(call)
    if dc.mode == "size":
        if not isinstance(call.type, T.IntType):
            raise ad_error(f"{call.callee_name} must be declared to return an integer (the tape's size)", call)
        call.replace_all_uses_with(ConstantInt(call.type, size))
        _erase_call(call)
        return
    if dc.allocated is not None:
        _check_allocated(dc, logic, size, forward_split)
    args = [_convert(b, s.primal, s.param.type) for s in dc.args] + \
        [s.shadow for s in dc.args if s.kind in (DUP, DUPNONEED)]
    has_result = not isinstance(dc.fn.return_type, T.VoidType)
    if dc.mode == "augment":
        zero_shadows(b, dc.fn.module, dc.fn.name)
        r = b.call(aug, args + ([dc.tape] if dc.allocated is not None else []))
        parts = ([] if dc.allocated is not None else [b.extract_value(r, [0])]) + \
            ([b.extract_value(r, [1])] if has_result and not dc.noret else [])
        if not parts:
            value = None
        elif len(parts) == 1:
            value = parts[0]
        else:
            value = b.insert_value(b.insert_value(IRBuilder.poison(r.type), parts[0], [0]), parts[1], [1])
        _deliver(dc, b, value, "its augmented primal returns")
    else:
        extra = [_convert(b, dc.d_ret, dc.fn.return_type)] if dc.active_return else []
        r = b.call(rev, args + extra + [dc.tape])
        _deliver(dc, b, None if isinstance(r.type, T.VoidType) else r, f"differentiating '{dc.fn.name}' gives")


def _deliver(dc, b: IRBuilder, value, what: str) -> None:
    """Hand ``value`` to the users of the ``__enzyme_*`` call (converted to its declared type) and erase it."""
    call = dc.call
    want = call.type
    if value is None or isinstance(want, T.VoidType):
        if value is None and not isinstance(want, T.VoidType) and call.has_uses():
            raise ad_error(f"{call.callee_name} is declared to return {want}, but {what} nothing", call)
        out = None
    elif value.type == want:
        out = value
    elif isinstance(want, (T.StructType, T.NamedStructType)) and isinstance(value.type, T.StructType) and \
            len(want.elements) == len(value.type.elements):
        got = list(value.type.elements)
        order = list(range(len(got)))
        if len(got) == 2 and not _fits(got[0], want.elements[0]) and _fits(got[1], want.elements[0]) and \
                _fits(got[0], want.elements[1]):
            order.reverse()  # declared {result, tape}: the tape is the pointer, as Enzyme matches it
        if not all(_fits(got[j], ety) for j, ety in zip(order, want.elements)):
            raise ad_error(f"{call.callee_name} is declared to return {want}, but {what} {value.type}", call)
        out = IRBuilder.poison(want)
        for i, ety in enumerate(want.elements):
            out = b.insert_value(out, _convert(b, b.extract_value(value, [order[i]]), ety), [i])
    elif _same_size(call, want, value.type):
        slot = b.alloca(want, in_entry=True)
        b.store(value, slot)
        out = b.load(want, slot)
    else:
        raise ad_error(f"{call.callee_name} is declared to return {want}, but {what} {value.type}", call)
    if out is not None:
        call.replace_all_uses_with(out)
    _erase_call(call)


def _erase_call(call) -> None:
    markers = [a for a in call.args if isinstance(a, Load) and marker_symbol(a) is not None]
    call.erase()
    for m in markers:  # loads of enzyme_dup & co. are dead now; they must not leave undefined symbols
        if not m.has_uses():
            m.erase()


def _replace_call(dc, G) -> None:
    call = dc.call
    b = IRBuilder.before(call)
    args = []
    for spec in dc.args:
        args.append(_convert(b, spec.primal, spec.param.type))
    for spec in dc.args:
        if spec.shadow is not None and isinstance(spec.param.type, T.PointerType):
            args += _lane_shadows(b, spec, dc.width)
    if dc.mode == "forward":
        args = []
        for spec in dc.args:
            args.append(_convert(b, spec.primal, spec.param.type))
            if spec.shadow is not None:
                args += _lane_shadows(b, spec, dc.width)
    entered = None  # the shadows of globals: from a source the families registered (a context), else zeroed
    for source in global_shadow_sources():
        token = source.enter(b, G.module, dc)
        if token is not None:
            entered = (source, token)
            break
    if entered is None:
        zero_shadows(b, G.module, dc.fn.name, dc.width)
    result = b.call(G, args)
    if entered is not None:
        entered[0].leave(b, entered[1])
    rt = G.return_type
    want = call.type
    if dc.sret is not None:
        if isinstance(rt, T.StructType):
            for i, ety in enumerate(rt.elements):
                b.store(b.extract_value(result, [i]), b.struct_gep(rt, dc.sret, i))
        elif not isinstance(rt, T.VoidType):
            b.store(result, dc.sret)
        value = None
    elif isinstance(want, T.VoidType):
        value = None
    elif isinstance(rt, T.VoidType):
        value = IRBuilder.const_zero(want)  # no derivative to return: the caller ignores it
    elif rt == want:
        value = result
    elif isinstance(want, T.FloatType) and isinstance(rt, T.FloatType):
        value = b.cast("fpext" if want.bits > rt.bits else "fptrunc", result, want)
    elif isinstance(want, (T.StructType, T.NamedStructType, T.ArrayType)) and isinstance(rt, T.StructType) \
            and len(_elements(want)) == len(rt.elements):
        value = IRBuilder.poison(want)
        for i, ety in enumerate(_elements(want)):
            e = _convert(b, b.extract_value(result, [i]), ety)
            value = b.insert_value(value, e, [i])
    elif isinstance(rt, T.StructType) and _same_size(call, want, rt):
        # the C ABI coerced the declared struct return (e.g. {float, float} -> <2 x float>): same bytes
        slot = b.alloca(want, in_entry=True)
        b.store(result, slot)
        value = b.load(want, slot)
    else:
        n = len(rt.elements) if isinstance(rt, T.StructType) else 1
        raise ad_error(f"{call.callee_name} is declared to return {want}, but differentiating "
                       f"'{dc.fn.name}' gives {n} derivative(s) of type {rt}", call)
    if value is not None:
        call.replace_all_uses_with(value)
    _erase_call(call)


def _lane_shadows(b: IRBuilder, spec, width: int) -> list:
    """The shadow of each lane (one without vector mode); ``enzyme_dupv``: lane k's is k strides past the first."""
    if spec.stride is None:
        return [_convert(b, s, spec.param.type) for s in spec.shadows]
    stride = _convert(b, spec.stride, T.i64)
    return [spec.shadow] + [b.gep(T.i8, spec.shadow, [b.mul(stride, ConstantInt(T.i64, lane))])
                            for lane in range(1, width)]


def _same_size(call, a, b) -> bool:
    dl = call.module.data_layout
    return dl.store_size(a) >= dl.store_size(b)  # the declared type may carry tail padding


def _elements(ty):
    return [ty.element] * ty.count if isinstance(ty, T.ArrayType) else list(ty.elements)


def _fits(have, want) -> bool:
    """A value of type ``have`` can be delivered as ``want`` (:func:`_convert`)."""
    return have == want or (isinstance(have, T.FloatType) and isinstance(want, T.FloatType)) or \
        (isinstance(have, T.IntType) and isinstance(want, T.IntType)) or \
        (isinstance(have, T.PointerType) and isinstance(want, T.PointerType))


def _convert(b: IRBuilder, v, ty):
    if v.type == ty:
        return v
    if isinstance(ty, T.FloatType) and isinstance(v.type, T.FloatType):
        return b.cast("fptrunc" if v.type.bits > ty.bits else "fpext", v, ty)
    if isinstance(ty, T.IntType) and isinstance(v.type, T.IntType):
        return b.cast("trunc" if v.type.bits > ty.bits else "sext", v, ty)
    return v


__all__ = ["differentiate_text", "differentiate_module", "ADError"]
