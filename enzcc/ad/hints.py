"""What the user tells the AD engine about functions through globals and attributes (Enzyme's conventions).

- ``void *__enzyme_inactivefn[] = {(void *)log_msg};``: calls never carry derivatives.
- ``__attribute__((enzyme_inactive))`` on a function: the same (enzcc's clang frontend turns the attribute into
  ``annotate("enzyme_inactive")``, found in ``@llvm.global.annotations``); on a global variable, or
  ``void *__enzyme_inactive_global[] = {(void *)&g};``: its memory carries no derivatives;
  ``enzyme_inactive_noblock``: as ``enzyme_inactive``; ``enzyme_nofree``, ``enzyme_notypeanalysis``,
  ``enzyme_no_escaping_allocation``: accepted (promises and hints enzcc's derivatives do not rely on);
  ``__attribute__((enzyme_function_like("log")))``: as ``__enzyme_function_like`` below;
  ``__attribute__((enzyme_shadow(g_shadow))) double g;``: the program's global ``g_shadow`` (same type, in the
  same scope) is ``g``'s shadow: reverse mode adds ``g``'s adjoint into it, forward mode reads the tangent seeded
  there; it is never zeroed by enzcc (:mod:`enzcc.ad.globals`).
- ``void *__enzyme_function_like[2] = {(void *)mylog, (void *)"log"};``: calls are differentiated with the rule
  of the named math function.
- ``void *__enzyme_allocation_like[4] = {(void *)my_alloc, (void *)1, (void *)"2,-1", (void *)my_free};``:
  ``my_alloc`` allocates (its argument 1 is the size in bytes); ``my_free(arg 2 of the allocation, pointer)``
  releases. Shadows are made and released with the same functions.
- ``void *__enzyme_register_gradient_f[3] = {(void *)f, (void *)f_aug, (void *)f_rev};`` and
  ``void *__enzyme_register_derivative_f[2] = {(void *)f, (void *)f_fwd};``: derivatives the user wrote, called
  instead of differentiating ``f`` (:mod:`enzcc.ad.calls.custom` has the calling conventions).
- ``void *__enzyme_register_splitderivative_f[3] = {(void *)f, (void *)f_aug, (void *)f_err};``: forward split
  mode's derivative the user wrote (``__enzyme_augmentfwd`` calls ``f_aug``, ``__enzyme_fwdsplit`` calls
  ``f_err`` with its tape). Other modes do not use it: an active call there is a one-line error unless a
  derivative for that mode is registered too.

Other ``__enzyme_*`` globals are Enzyme features enzcc does not implement: each is a one-line error, never a
silently different gradient. The globals are read from their LLVM text, so the same reader serves the IR model
(:func:`hints_of`) and the pipeline, which marks every function named here ``noinline`` before optimizing so
that the calls are still there when the derivative is made (:func:`protected_functions`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from enzcc.ad.errors import ADError
from enzcc.ir import types as T

PREFIX = "__enzyme_"
ANNOTATIONS = "llvm.global.annotations"

#: globals whose name starts with one of these are read here
INACTIVE_FN = "__enzyme_inactivefn"
INACTIVE_GLOBAL = "__enzyme_inactive_global"
ALLOCATION_LIKE = "__enzyme_allocation_like"
FUNCTION_LIKE = "__enzyme_function_like"

REGISTER_GRADIENT = "__enzyme_register_gradient"
REGISTER_DERIVATIVE = "__enzyme_register_derivative"
REGISTER_SPLITDERIVATIVE = "__enzyme_register_splitderivative"

#: annotations enzcc knows (from Enzyme's function attributes): ``enzyme_inactive_noblock`` is
#: ``enzyme_inactive`` (the call carries no derivative; enzcc never treats a whole block as inactive); the others
#: are promises or hints enzcc's derivatives do not rely on
INACTIVE_ANNOTATIONS = ("enzyme_inactive", "enzyme_inactive_noblock")
KNOWN_ANNOTATIONS = INACTIVE_ANNOTATIONS + ("enzyme_nofree", "enzyme_notypeanalysis", "enzyme_no_escaping_allocation")

_SYMBOL = r'@(?:"((?:[^"\\]|\\.)+)"|([-\w.$]+))'


@dataclass
class Hints:
    """Facts about functions, from the module's ``__enzyme_*`` globals and annotations."""

    inactive: frozenset = frozenset()
    """Functions whose calls carry no derivative."""
    like: dict = field(default_factory=dict)
    """Function name -> the math function whose derivative rule its calls use."""
    gradient: dict = field(default_factory=dict)
    """Function name -> (augmented forward, reverse): its registered reverse-mode derivative."""
    derivative: dict = field(default_factory=dict)
    """Function name -> its registered forward-mode derivative."""
    splitderivative: dict = field(default_factory=dict)
    """Function name -> (augmented primal, tangent): its registered forward split mode derivative."""
    allocators: dict = field(default_factory=dict)
    """Allocation function name -> (index of its size argument, deallocation function, where each argument of
    the deallocation call comes from: an argument index of the allocation call, or -1 for the pointer)."""
    inactive_globals: frozenset = frozenset()
    """Global variables whose memory carries no derivatives (what is stored there loses its derivative, as
    the user asked)."""
    shadows: dict = field(default_factory=dict)
    """Global variable -> the global the program declared its shadow with ``enzyme_shadow``."""

    def protected(self) -> set[str]:
        """Functions that must stay calls until the derivative is made (not inlined before)."""
        return set(self.inactive) | set(self.like) | set(self.gradient) | set(self.derivative) | \
            set(self.splitderivative) | set(self.allocators) | {d for _, d, _ in self.allocators.values()}

    @property
    def deallocators(self) -> dict:
        """Deallocation function name -> (allocation function, argument sources) (see :attr:`allocators`)."""
        return {d: (a, idx) for a, (_, d, idx) in self.allocators.items()}


def _symbols(text: str) -> list[str]:
    init = text.split("=", 1)[1] if "=" in text else ""
    return [m.group(1) or m.group(2) for m in re.finditer(_SYMBOL, init)]


def _c_string(text: str | None) -> str | None:
    """The string of a global initialized with ``c"..."`` (without its terminating NUL), or None."""
    if not text:
        return None
    m = re.search(r'c"((?:[^"\\]|\\[0-9A-Fa-f]{2}|\\\\)*)"', text)
    if m is None:
        return None
    raw = re.sub(r"\\([0-9A-Fa-f]{2})", lambda x: chr(int(x.group(1), 16)), m.group(1).replace("\\\\", "\\5C"))
    return raw.split("\0", 1)[0]


def read_hints(names: Iterable[str], text_of: Callable[[str], str | None],
               is_function: Callable[[str], bool]) -> Hints:
    """Hints from the module's globals: ``names`` are all global variable names, ``text_of(name)`` the LLVM
    text of one, ``is_function(name)`` whether a function of that name exists. Raises :class:`ADError` for an
    Enzyme global enzcc does not implement or cannot read."""
    inactive: set[str] = set()
    like: dict[str, str] = {}
    gradient: dict[str, tuple[str, str]] = {}
    derivative: dict[str, str] = {}
    splitderivative: dict[str, tuple[str, str]] = {}
    inactive_globals: set[str] = set()
    allocators: dict = {}
    shadows: dict[str, str] = {}
    names = list(names)
    for name in names:
        if name == ANNOTATIONS:
            text = text_of(name) or ""
            for m in re.finditer(r"\{\s*ptr " + _SYMBOL + r",\s*ptr " + _SYMBOL, text):
                fn, tag = m.group(1) or m.group(2), m.group(3) or m.group(4)
                what = _c_string(text_of(tag))
                if what in INACTIVE_ANNOTATIONS:
                    if is_function(fn):
                        inactive.add(fn)
                    else:
                        inactive_globals.add(fn)
                elif what and what.startswith("enzyme_function_like="):
                    like[fn] = what.split("=", 1)[1]
                elif what and what.startswith("enzyme_shadow="):
                    shadows[fn] = _declared_shadow(fn, what.split("=", 1)[1], names, is_function)
                elif what and what.startswith("enzyme_") and what not in KNOWN_ANNOTATIONS:
                    raise ADError(f"attribute {what} on '{fn}' is not supported by enzcc "
                                  f"(known: {', '.join(KNOWN_ANNOTATIONS)})")
            continue
        if not name.startswith(PREFIX):
            continue
        text = text_of(name) or ""
        if "=" not in text or re.search(r"=\s*(?:[\w.]+\s+)*?external\b", text.split("=", 1)[1][:60]):
            continue  # a declaration: defined in another object, read there
        if name.startswith(INACTIVE_FN):
            inactive.update(s for s in _symbols(text) if is_function(s))
        elif name.startswith(INACTIVE_GLOBAL):
            syms = _symbols(text)
            if not syms or any(is_function(x) for x in syms):
                raise ADError(f"@{name} must point to global variables ((void *)&name)")
            inactive_globals.update(syms)
        elif name.startswith((REGISTER_GRADIENT, REGISTER_DERIVATIVE, REGISTER_SPLITDERIVATIVE)):
            split = name.startswith(REGISTER_SPLITDERIVATIVE)
            n = 2 if name.startswith(REGISTER_DERIVATIVE) else 3
            syms = _symbols(text)
            shape = ("{(void *)f, (void *)augment, (void *)tangent}" if split else
                     "{(void *)f, (void *)augment, (void *)reverse}" if n == 3 else "{(void *)f, (void *)forward}")
            if len(syms) < n or not all(is_function(x) for x in syms[:n]):
                raise ADError(f"@{name} must be {shape}, with functions defined in this program")
            if len(syms) > n:
                raise ADError(f"@{name}: extra elements after {shape} (such as \"byref_N\") are not supported "
                              "by enzcc")
            if split:
                splitderivative[syms[0]] = (syms[1], syms[2])
            elif n == 3:
                gradient[syms[0]] = (syms[1], syms[2])
            else:
                derivative[syms[0]] = syms[1]
        elif name.startswith(ALLOCATION_LIKE):
            shape = ('{(void *)alloc, (void *)size_index, (void *)"dealloc argument indices", '
                     '(void *)dealloc}')
            m = re.search(r"\[\s*ptr " + _SYMBOL + r",\s*ptr (null|inttoptr \(i64 (\d+) to ptr\)),\s*ptr "
                          + _SYMBOL + r",\s*ptr " + _SYMBOL + r"\s*\]", text)
            if m is None:
                raise ADError(f"@{name} must be {shape}")
            alloc, dealloc = m.group(1) or m.group(2), m.group(7) or m.group(8)
            size_index = int(m.group(4)) if m.group(4) else 0
            spec = _c_string(text_of(m.group(5) or m.group(6)))
            try:
                indices = [int(t) for t in (spec or "").split(",") if t.strip()]
            except ValueError:
                indices = []
            if not (is_function(alloc) and is_function(dealloc)) or indices.count(-1) != 1:
                raise ADError(f"@{name} must be {shape}, with functions defined in this program and the "
                              "pointer (-1) once among the deallocation arguments")
            allocators[alloc] = (size_index, dealloc, tuple(indices))
        elif name.startswith(FUNCTION_LIKE):
            syms = _symbols(text)
            if len(syms) != 2 or not is_function(syms[0]):
                raise ADError(f"@{name} must be {{(void *)function, (void *)\"name\"}} with a function defined "
                              "in this program")
            target = _c_string(text_of(syms[1]))
            if not target:
                raise ADError(f"@{name}: the second element must be a string naming a math function")
            like[syms[0]] = target
        else:
            raise ADError(f"@{name} is not an Enzyme global enzcc knows (known: {INACTIVE_FN}, {INACTIVE_GLOBAL}, "
                          f"{FUNCTION_LIKE}, {ALLOCATION_LIKE}, {REGISTER_GRADIENT}_*, {REGISTER_DERIVATIVE}_*, "
                          f"{REGISTER_SPLITDERIVATIVE}_*)")
    return Hints(inactive=frozenset(inactive), like=like, gradient=gradient, derivative=derivative,
                 splitderivative=splitderivative, allocators=allocators, inactive_globals=frozenset(inactive_globals),
                 shadows=shadows)


def _declared_shadow(symbol: str, name: str, names: list[str], is_function) -> str:
    """The global that ``enzyme_shadow(name)`` on global ``symbol`` names: ``name`` itself (C, C++ at global
    scope) or, for a C++ global in a namespace or class (``_ZN6Params6offsetE``), ``name`` in the same scope
    (``_ZN6Params13offset_shadowE``)."""
    if is_function(symbol):
        raise ADError(f"enzyme_shadow({name}) is on function '{symbol}': it applies to global variables")
    candidates = [name]
    if symbol.startswith("_ZN") and symbol.endswith("E"):  # nested name: <length><identifier>..., its own last
        parts, rest = [], symbol[3:-1]
        while rest:
            k = re.match(r"\d+", rest)
            if k is None:
                parts = []
                break
            n = int(k.group(0))
            parts.append(rest[k.end():k.end() + n])
            rest = rest[k.end() + n:]
        if len(parts) > 1:
            candidates.insert(0, "_ZN" + "".join(f"{len(p)}{p}" for p in parts[:-1] + [name]) + "E")
    present = set(names)
    for c in candidates:
        if c in present:
            return c
    raise ADError(f"enzyme_shadow({name}) on '{symbol}': no global variable '{name}' is defined in this program "
                  "(a declared shadow must be defined, with external linkage: not static)")


def hints_of(module) -> Hints:
    """:class:`Hints` of an IR-model module (cached on it)."""
    cached = getattr(module, "_enzcc_hints", None)
    if cached is None:
        globals_ = module.globals
        cached = read_hints(list(globals_), lambda n: str(globals_[n]) if n in globals_ else None,
                            lambda n: n in module.functions)
        for alloc, (size_index, dealloc, sources) in cached.allocators.items():
            _check_allocation_like(module.functions[alloc], module.functions[dealloc], size_index, sources)
        cached.allocators.update(_rust_allocators(module.functions))
        module._enzcc_hints = cached
    return cached


#: Rust's global allocator shims (names as rustc 1.95 mangles them end with the length and the name, e.g.
#: ``_RNv..._7___rustc12___rust_alloc``): allocation -> deallocation
_RUST_ALLOCATORS = {"__rust_alloc": "__rust_dealloc", "__rust_alloc_zeroed": "__rust_dealloc"}


def _rust_allocators(functions) -> dict:
    """Rust's allocator shims, as if registered with ``__enzyme_allocation_like``: ``__rust_alloc(size, align)``
    and ``__rust_alloc_zeroed`` give shadows from the same call, released by ``__rust_dealloc(ptr, size,
    align)`` (when the module declares it: memory a Rust function allocates and frees). ``__rust_realloc`` is
    not among them: a Vec growing in differentiated code stays an error."""
    def find(name: str):
        tail = f"{len(name)}_{name}"  # (v0 mangling separates an identifier that starts with "_" by one "_")
        return next((f for f in functions if f == name or (f.startswith("_R") and f.endswith(tail))), None)

    out = {}
    for alloc, dealloc in _RUST_ALLOCATORS.items():
        a, d = find(alloc), find(dealloc)
        if a is None or d is None:
            continue
        fa, fd = functions[a], functions[d]
        if [x.type for x in fa.args] == [T.i64, T.i64] and isinstance(fa.return_type, T.PointerType) and \
                [x.type for x in fd.args] == [T.ptr, T.i64, T.i64]:
            out[a] = (0, d, (-1, 0, 1))
    return out


def _check_allocation_like(alloc, dealloc, size_index: int, sources: tuple) -> None:
    """The functions of an ``__enzyme_allocation_like`` entry fit it: the allocation function returns a pointer
    and takes an integer size where the entry says, and each argument the deallocation call is given (an argument
    of the allocation call, or -1: the pointer) has the type of that parameter."""
    where = f"{ALLOCATION_LIKE} of '{alloc.name}'"
    params = [a.type for a in alloc.args]
    if not isinstance(alloc.return_type, T.PointerType):
        raise ADError(f"{where}: '{alloc.name}' must return a pointer (it returns {alloc.return_type})")
    if not (0 <= size_index < len(params)) or not isinstance(params[size_index], T.IntType):
        raise ADError(f"{where}: the size index {size_index} must name an integer parameter of '{alloc.name}' "
                      f"({', '.join(map(str, params)) or 'it has none'})")
    wants = [a.type for a in dealloc.args]
    if len(sources) != len(wants):
        raise ADError(f"{where}: the deallocation arguments \"{','.join(map(str, sources))}\" are {len(sources)}, "
                      f"'{dealloc.name}' takes {len(wants)}")
    for i, (k, want) in enumerate(zip(sources, wants)):
        if k != -1 and not 0 <= k < len(params):
            raise ADError(f"{where}: deallocation argument {i} comes from argument {k} of '{alloc.name}', which "
                          f"takes {len(params)}")
        have = T.ptr if k == -1 else params[k]
        if have != want:
            what = "the pointer" if k == -1 else f"argument {k} of '{alloc.name}'"
            raise ADError(f"{where}: deallocation argument {i} of '{dealloc.name}' is {want}, but {what} is {have}")


def rule_name(module, callee: str) -> str:
    """The name whose derivative rule a call to ``callee`` uses (itself unless ``__enzyme_function_like``
    says otherwise)."""
    return hints_of(module).like.get(callee, callee) if module is not None else callee


def protected_functions(names: Iterable[str], text_of, is_function) -> set[str]:
    """Functions the pipeline keeps from being inlined before AD (see the module docstring)."""
    return read_hints(names, text_of, is_function).protected()


__all__ = ["Hints", "hints_of", "protected_functions", "read_hints", "rule_name"]
