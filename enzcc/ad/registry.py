"""Call rules: what the engine asks of a call to a function it does not differentiate through its body.

The engine (activity, shadows, forward mode, reverse mode, the cache) names no library. Each family of special
calls (libm, memory functions, BLAS, complex arithmetic, C++ containers, OpenMP, registered derivatives,
checkpointed loops, fixed points, ``__enzyme_iter``, type hints, contexts: the modules of :mod:`enzcc.ad.calls`)
registers a :class:`CallRule` for its functions when it is imported, the way JAX's primitives fill
``primitive_jvps`` / ``primitive_transposes``; the engine looks the rule up by the callee's name
(:func:`rule_for`) and calls the rule's hooks where it needs them. A hook it does not find means "nothing
special": the call is then an ordinary call (differentiated through its body when the module defines it, or
an error naming it).

Module-level hooks (what runs before, between and after derivatives are made) are registered the same way:
:func:`register_lowering`, :func:`register_copy_preparation`, :func:`register_module_preparation`,
:func:`register_prepared_check` and :func:`register_called_function`.

This module imports nothing of the engine: the engine and the families both import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class CallRule:
    """The hooks of one family for its functions. Each hook is optional; the ones that emit code return True
    when they handled the call, and anything else to let the engine go on with its own handling (so a hook
    that forgets to say so makes a loud error, never a silent zero).

    Effects and activity:
      - ``inactive``: the call never carries a derivative and is kept as it is in both sweeps (output, time,
        the OpenMP runtime's bookkeeping, hints...).
      - ``passes_arguments``: the callee may store the floats and pointers it is given into memory its pointer
        arguments reach or into the memory it returns (BLAS, an OpenMP fork, a loop's step function): floats
        passed to it are useful when such memory has derivatives, and memory passed to it escapes.
      - ``declares_type``: the type the memory its first argument points to holds (a type hint), for the memory
        types (:class:`enzcc.ad.memory.MemoryTypes`).
      - ``writes_no_memory``: it writes no memory the function reads (intrinsics without effect, libm, hints).
      - ``pure``: its result is a function of its arguments alone (math: no memory read or written, no other
        effect), so the reverse sweep may compute it again instead of keeping it on the tape; done in GPU code,
        where a tape is device memory that each thread fills and a few operations cost much less.
      - ``result_is_shadowed(activity, call)``: whether its pointer result has derivatives (beyond what the
        engine finds itself: a container node linked to nodes with derivatives, a context's shadow).
      - ``shadow(shadows, call)``: the shadow of its pointer result, emitted after it (None: not this rule's).
      - ``mirror(shadows, call)``: code to emit on the shadows in the forward code when the call is given
        memory with derivatives but its result has none (a container's nodes linked on the shadows too).
      - ``allocates_through``: the index of a pointer argument through which the call stores the address of
        memory it allocates (``cudaMalloc(&p, n)``, as ``posix_memalign`` does): the memory it points to gets a
        shadow, whatever else it holds, for ``mirror`` to store the shadow allocation's address into.
      - ``copies``: ``(destination, source, size)``, argument indices of a call that copies bytes as ``memcpy``
        does (``cudaMemcpy``): activity and written globals treat it as one (values flow from the source to
        the destination); its rule makes the derivative code.
      - ``replaces_body``: the rule stands for the function even where the program defines it (a reference
        BLAS compiled in, or a mock that logs its calls): calls to it are not inlined, and its body is run, never
        differentiated, as a library's would be.
      - ``runtime_activity``: its derivative code compares each pointer it is given with its shadow and leaves
        memory whose shadow is itself alone (:mod:`enzcc.ad.runtime_activity`); without it, a call given memory
        with derivatives is refused under ``enzyme_runtime_activity``.

    Forward mode (the tangent):
      - ``forward(mode, call)``: emit the tangent code of ``call`` (mode: :class:`enzcc.ad.forward.ForwardMode`).
        Called for every call the rule matches, whether derivatives flow through it or not
        (``mode.carries_derivatives(call)`` says it).

    Reverse mode:
      - ``augment(mode, call)``: in the forward sweep, before the reverse code is made: returns None (nothing to
        keep) or ``(anchor, entry, kept)``: the instruction the call's reverse belongs to (the call itself or
        what replaced it), whatever the reverse needs later, and values to keep alive until then.
      - ``reverse(mode, call, entry, block, builder)``: emit the reverse of ``call`` (``entry``: what
        ``augment`` returned, or None). mode: :class:`enzcc.ad.reverse.ReverseMode`.
      - ``reverse_once_for_lanes``: in vector mode the call's reverse is made once for all lanes (with the
        last), so the call gets a block of its own.
    """

    family: str
    inactive: bool = False
    passes_arguments: bool = False
    declares_type: object = None
    writes_no_memory: bool = False
    pure: bool = False
    reverse_once_for_lanes: bool = False
    result_is_shadowed: Callable | None = None
    shadow: Callable | None = None
    mirror: Callable | None = None
    allocates_through: int | None = None
    copies: tuple[int, int, int] | None = None
    runtime_activity: bool = False
    replaces_body: bool = False
    forward: Callable | None = None
    augment: Callable | None = None
    reverse: Callable | None = None


def loop_rule(family: str, forward: Callable, augment: Callable, kept_values: Callable, reverse: Callable) -> CallRule:
    """The rule of a call that runs a loop of the program through a step function, with a derivative of its own
    (a checkpointed loop, a fixed point): ``forward(mode, call)`` makes its tangent where derivatives flow;
    ``augment(mode, call)`` returns ``(anchor, entry)`` (entry None: nothing to reverse), ``kept_values(entry)``
    what the reverse reads, ``reverse(mode, entry, block, builder)`` its reverse. Both need derived functions of
    the step (``mode.logic``); without them the call is left to the engine, which refuses it by name."""

    def forward_hook(mode, call) -> bool:
        if not mode.carries_derivatives(call):
            return True
        if mode.logic is None:
            return False
        forward(mode, call)
        return True

    def augment_hook(mode, call):
        if mode.logic is None:
            return None
        anchor, entry = augment(mode, call)
        return anchor, entry, (kept_values(entry) if entry is not None else [])

    def reverse_hook(mode, call, entry, block, builder) -> bool:
        if entry is not None:
            reverse(mode, entry, block, builder)
        return True

    return CallRule(family, passes_arguments=True, reverse_once_for_lanes=True, forward=forward_hook,
                    augment=augment_hook, reverse=reverse_hook)


@dataclass
class _Registry:
    names: dict[str, CallRule] = field(default_factory=dict)
    prefixes: list[tuple[str, CallRule]] = field(default_factory=list)
    matchers: list[tuple[Callable, CallRule]] = field(default_factory=list)
    first: list[tuple[Callable, CallRule]] = field(default_factory=list)
    lowerings: list[tuple[int, Callable, Callable]] = field(default_factory=list)
    copy_preparations: list[tuple[int, Callable]] = field(default_factory=list)
    module_preparations: list[tuple[int, Callable]] = field(default_factory=list)
    prepared_checks: list[Callable] = field(default_factory=list)
    called_functions: list[Callable] = field(default_factory=list)
    called_arguments: list[Callable] = field(default_factory=list)
    request_completions: list[Callable] = field(default_factory=list)
    global_shadow_sources: list = field(default_factory=list)
    global_shadow_zeroings: list = field(default_factory=list)
    named: dict[str, CallRule | None] = field(default_factory=dict)
    """Each name looked up so far and its rule by name or prefix (None: neither): a call's name is looked up a
    few times per instruction, and a name no rule names walks the hundred-odd prefixes. Emptied by
    :func:`register`."""


_REGISTRY = _Registry()


def register(rule: CallRule, names=(), prefixes=(), match: Callable | None = None, first: bool = False) -> CallRule:
    """Make ``rule`` the rule of the functions named ``names``, of those whose name starts with one of
    ``prefixes``, and of the calls for which ``match(call)`` is true. A name is looked up first, then the
    prefixes (the longest first), then the matchers in the order they were registered; ``first`` matchers
    (the user's own derivatives) come before all of them. A name registered twice is an error."""
    for name in names:
        if name in _REGISTRY.names and _REGISTRY.names[name] is not rule:
            raise ValueError(f"'{name}' has a call rule already (family {_REGISTRY.names[name].family})")
        _REGISTRY.names[name] = rule
    for prefix in prefixes:
        _REGISTRY.prefixes.append((prefix, rule))
    _REGISTRY.prefixes.sort(key=lambda p: -len(p[0]))
    if match is not None:
        (_REGISTRY.first if first else _REGISTRY.matchers).append((match, rule))
    _REGISTRY.named.clear()
    return rule


def rule_for(call) -> CallRule | None:
    """The rule of a call (or None): see :func:`register` for the order."""
    for match, rule in _REGISTRY.first:
        if match(call):
            return rule
    return rule_named(call.callee_name, call)


def rule_named(name: str | None, call=None) -> CallRule | None:
    """The rule of calls to ``name`` (matchers are asked only with a ``call``)."""
    if name:
        named = _REGISTRY.named
        rule = named[name] if name in named else _by_name_or_prefix(name)
        if rule is not None:
            return rule
    if call is not None:
        for match, rule in _REGISTRY.matchers:
            if match(call):
                return rule
    return None


def _by_name_or_prefix(name: str) -> CallRule | None:
    """The rule of ``name`` by name, else by its longest registered prefix, else None; remembered."""
    rule = _REGISTRY.names.get(name)
    if rule is None:
        rule = next((r for prefix, r in _REGISTRY.prefixes if name.startswith(prefix)), None)
    _REGISTRY.named[name] = rule
    return rule


def is_inactive(name: str | None) -> bool:
    """Whether calls to ``name`` never carry derivatives (a rule says so)."""
    rule = rule_named(name)
    return rule is not None and rule.inactive


def hook(call, name: str):
    """The field ``name`` of a call's rule (its names, prefixes and predicates; not the user's registered
    derivatives, which say nothing of effects), or None when the call has no rule."""
    rule = rule_named(call.callee_name, call)
    return getattr(rule, name) if rule is not None else None


def passes_arguments(call) -> bool:
    """Whether the callee may store what it is given into memory its pointer arguments reach (a rule says so)."""
    return bool(hook(call, "passes_arguments"))


def copied_arguments(call):
    """``(destination, source, size)`` of a call whose rule says it copies bytes as ``memcpy`` does (the values,
    not their indices), or None."""
    where = hook(call, "copies")
    return tuple(call.args[k] for k in where) if where is not None else None


def allocates_through(call) -> int | None:
    """The index of the pointer argument through which the call stores an allocation's address (a rule says
    so), or None."""
    return hook(call, "allocates_through")


# -- module-level hooks -------------------------------------------------------------------------------------

def register_lowering(order: int, is_call: Callable, lower: Callable) -> None:
    """``__enzyme_*`` calls that are no entry point: ``is_call(name)`` tells them, ``lower(module)`` replaces
    those left once no more derivatives are made and returns how many (lowerings run by ``order``)."""
    _REGISTRY.lowerings.append((order, is_call, lower))
    _REGISTRY.lowerings.sort(key=lambda x: x[0])


def lowerings() -> list[tuple[Callable, Callable]]:
    return [(is_call, lower) for _, is_call, lower in _REGISTRY.lowerings]


def register_copy_preparation(order: int, prepare: Callable) -> None:
    """``prepare(fn)`` on each private copy a derivative is made from, before (order < 0) or after the engine's
    own preparation (:func:`enzcc.ad.prepare.prepare`)."""
    _REGISTRY.copy_preparations.append((order, prepare))
    _REGISTRY.copy_preparations.sort(key=lambda x: x[0])


def copy_preparations(before: bool) -> list[Callable]:
    return [p for order, p in _REGISTRY.copy_preparations if (order < 0) == before]


def register_module_preparation(order: int, prepare: Callable) -> None:
    """``prepare(module, prepared)`` once the private copies are made and simplified (``prepared``: function ->
    its copy's name); returns the names of new functions to differentiate as they are (or None)."""
    _REGISTRY.module_preparations.append((order, prepare))
    _REGISTRY.module_preparations.sort(key=lambda x: x[0])


def module_preparations() -> list[Callable]:
    return [p for _, p in _REGISTRY.module_preparations]


def register_prepared_check(check: Callable) -> None:
    """``check(fn, call, forward)`` on each call of a prepared copy: raises for what cannot be differentiated in
    that mode (forward: True for forward mode)."""
    _REGISTRY.prepared_checks.append(check)


def prepared_checks() -> list[Callable]:
    return list(_REGISTRY.prepared_checks)


def register_called_function(find: Callable) -> None:
    """``find(inst)``: the name of the function a call runs on the program's behalf (an OpenMP region's body, a
    loop's step), or None: it is differentiated with the function that makes the call."""
    _REGISTRY.called_functions.append(find)


def called_function(inst) -> str | None:
    for find in _REGISTRY.called_functions:
        name = find(inst)
        if name:
            return name
    return None


def register_called_arguments(find: Callable) -> None:
    """``find(call)``: for a call that runs a function on the program's behalf (an OpenMP fork), the pairs
    ``(argument of the call, index of the parameter it becomes in that function)``, or None. The memory types
    of the calling function count what that function does with the memory it is given."""
    _REGISTRY.called_arguments.append(find)


def called_arguments(call) -> list | None:
    for find in _REGISTRY.called_arguments:
        pairs = find(call)
        if pairs is not None:
            return pairs
    return None


def register_request_completion(complete: Callable) -> None:
    """``complete(call, module, mode, callee, extra)`` while an ``__enzyme_*`` call is read
    (:func:`enzcc.ad.api.parse_call`): checks and completes ``extra``, the call-level markers (width, context)."""
    _REGISTRY.request_completions.append(complete)


def request_completions() -> list[Callable]:
    return list(_REGISTRY.request_completions)


@dataclass
class GlobalShadowSource:
    """Where the shadows of globals come from for some ``__enzyme_*`` calls, instead of being zeroed at entry
    (a context: :mod:`enzcc.ad.calls.context`). ``functions(module, calls)``: the functions differentiated that
    way (every global they use then has a shadow); ``enter(builder, module, request)``: before the derivative
    is called, None when the request is not one of them (the shadows are zeroed), else what ``leave(builder,
    that)`` takes after the call."""

    functions: Callable
    enter: Callable
    leave: Callable


def register_global_shadow_source(source: GlobalShadowSource) -> None:
    _REGISTRY.global_shadow_sources.append(source)


def global_shadow_sources() -> list[GlobalShadowSource]:
    return list(_REGISTRY.global_shadow_sources)


def register_global_shadow_zeroing(zero: Callable) -> None:
    """``zero(builder, module, shadows)`` before an ``__enzyme_*`` call, ``shadows`` being the (global, its shadow,
    bytes) to zero: zeroes those whose memory is not one copy for the whole program (GPU shared memory, one per
    thread block, which the block's threads zero together) and returns the names of the shadows it zeroed; the
    engine zeroes the others with ``memset``."""
    _REGISTRY.global_shadow_zeroings.append(zero)


def global_shadow_zeroings() -> list[Callable]:
    return list(_REGISTRY.global_shadow_zeroings)


def families() -> list[str]:
    """The families with a rule, in the order they registered (for ``enzcc/ad/README.md`` and tests)."""
    seen: list[str] = []
    for rule in [*_REGISTRY.names.values(), *(r for _, r in _REGISTRY.prefixes),
                 *(r for _, r in _REGISTRY.first), *(r for _, r in _REGISTRY.matchers)]:
        if rule.family not in seen:
            seen.append(rule.family)
    return seen


__all__ = ["CallRule", "GlobalShadowSource", "allocates_through", "called_arguments", "called_function",
           "copied_arguments",
           "copy_preparations", "families",
           "global_shadow_sources", "global_shadow_zeroings", "hook", "is_inactive", "loop_rule", "lowerings",
           "module_preparations", "passes_arguments", "prepared_checks", "register", "register_called_arguments",
           "register_called_function",
           "register_copy_preparation", "register_global_shadow_source", "register_global_shadow_zeroing",
           "register_lowering", "register_module_preparation", "register_prepared_check",
           "register_request_completion", "request_completions", "rule_for", "rule_named"]
