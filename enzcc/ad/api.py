"""The user-facing API (Enzyme's C conventions): recognising ``__enzyme_*`` calls and their argument markers.

``__enzyme_autodiff(fn, args...)``  reverse mode (combined forward and reverse sweep)
``__enzyme_fwddiff(fn, args...)``   forward mode

Markers are ``extern int enzyme_dup, enzyme_dupnoneed, enzyme_const, enzyme_out;`` passed by value before
the argument they describe; in IR they are loads of those globals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from enzcc.ad.errors import MissingBodyError, ad_error
from enzcc.ir import types as T
from enzcc.ad.memory import base_object
from enzcc.ad.registry import request_completions
from enzcc.ir.instructions import Alloca, Call, Cast, GetElementPtr, Load, Store
from enzcc.ir.values import Argument, ConstantExpr, ConstantInt, GlobalRef, Value

AUTODIFF = "__enzyme_autodiff"
FWDDIFF = "__enzyme_fwddiff"
AUGMENTFWD = "__enzyme_augmentfwd"
REVERSE = "__enzyme_reverse"
AUGMENTSIZE = "__enzyme_augmentsize"
FWDSPLIT = "__enzyme_fwdsplit"
MARKERS = ("enzyme_dupnoneed", "enzyme_dup", "enzyme_const", "enzyme_out", "enzyme_dupv", "enzyme_dupnoneedv")
#: markers about the whole call (split mode): name -> whether a value follows
CALL_MARKERS = {"enzyme_tape": True, "enzyme_allocated": True, "enzyme_noret": False, "enzyme_nofree": False,
                "enzyme_primal_return": False,
                "enzyme_const_return": False, "enzyme_active_return": False, "enzyme_width": True,
                "enzyme_context": True, "enzyme_runtime_activity": False}

NOCACHE = "enzyme_nocache"

#: argument kinds
CONST, DUP, DUPNONEED, OUT = "const", "dup", "dupnoneed", "out"


def cxx_api_name(symbol: str) -> str | None:
    """The name C++ code gives an ``__enzyme_*`` function or global it declares without ``extern "C"``:
    ``_Z17__enzyme_autodiffPvd`` (a plain declaration), ``_Z17__enzyme_autodiffIdJPvdEET_DpT0_`` (Enzyme's
    ``template <typename Ret, typename... Args> Ret __enzyme_autodiff(Args...)``), ``_ZL..`` (internal
    linkage). Returns the unmangled identifier (``__enzyme_autodiff``), or None for any other symbol."""
    m = re.match(r"_ZL?(\d+)", symbol)
    if not m:
        return None
    n = int(m.group(1))
    ident = symbol[m.end():m.end() + n]
    return ident if len(ident) == n and ident.startswith("__enzyme_") else None


def mode_of(callee: str | None) -> str | None:
    """``reverse`` / ``forward`` for an ``__enzyme_*`` entry point (any suffix), else None."""
    if not callee:
        return None
    if callee.startswith(FWDDIFF):
        return "forward"
    if callee.startswith(FWDSPLIT):
        return "forward-split"
    if callee.startswith(AUTODIFF):
        return "reverse"
    if callee.startswith(AUGMENTFWD):
        return "augment"
    if callee.startswith(REVERSE):
        return "reverse-split"
    if callee.startswith(AUGMENTSIZE):
        return "size"
    return None


def has_float(ty: T.Type) -> bool:
    """Whether a value of this type can carry a derivative."""
    if isinstance(ty, T.FloatType):
        return ty.kind in ("half", "bfloat", "float", "double", "fp128", "x86_fp80")
    if isinstance(ty, T.VectorType):
        return has_float(ty.element)
    if isinstance(ty, T.ArrayType):
        return has_float(ty.element)
    if isinstance(ty, (T.StructType, T.NamedStructType)):
        return any(has_float(e) for e in ty.elements)
    return False


def has_pointer(ty: T.Type) -> bool:
    """Whether a value of this type is or contains a pointer."""
    if isinstance(ty, T.PointerType):
        return True
    if isinstance(ty, T.ArrayType):
        return has_pointer(ty.element)
    if isinstance(ty, (T.StructType, T.NamedStructType)):
        return any(has_pointer(e) for e in ty.elements)
    return False


def is_float(ty: T.Type) -> bool:
    return isinstance(ty, T.FloatType) or (isinstance(ty, T.VectorType) and isinstance(ty.element, T.FloatType))


def calls_named(module, prefix: str) -> list[Call]:
    """The calls to functions named ``prefix...`` in the module's definitions (a function not parsed yet is
    parsed only when its text names such a function). A module that names no such function has none: its
    instructions are not looked at (the lowerings of the API ask for one prefix each, and a derivative of
    generated code is a very long function)."""
    if not any(name.startswith(prefix) for name in (*module.functions, *module.globals)):
        return []
    out = []
    for fn in list(module.definitions()):
        text = fn._body_text
        if text is not None and prefix not in text:
            continue
        out += [i for i in fn.instructions() if isinstance(i, Call) and (i.callee_name or "").startswith(prefix)]
    return out


def marker_symbol(value: Value) -> str | None:
    """The ``enzyme_*`` global an argument passes: its value (``enzyme_dup``, a load) or, as Enzyme also
    accepts, its address (``&enzyme_dup``). On a GPU the global is a device variable (``__device__ int
    enzyme_dup;``, in another address space), reached through an ``addrspacecast``."""
    if isinstance(value, Load):
        value = _without_addrspacecast(value.pointer)
    else:
        value = _without_addrspacecast(value)
    if not isinstance(value, GlobalRef):
        return None
    return value.symbol if value.symbol.startswith("enzyme_") else None


def _without_addrspacecast(value: Value) -> Value:
    while isinstance(value, (ConstantExpr, Cast)) and value.opcode == "addrspacecast":
        value = value.operands[0]
    return value


def marker_of(value: Value) -> str | None:
    """``dup`` etc. if ``value`` passes a marker global (:func:`marker_symbol`)."""
    name = marker_symbol(value)
    return name[len("enzyme_"):] if name in MARKERS else None


def _unknown_marker(value: Value) -> str | None:
    """The name of an ``enzyme_*`` global passed as an argument that is not one of :data:`MARKERS`
    (``enzyme_width``, ``enzyme_tape``...: Enzyme features enzcc does not implement)."""
    name = marker_symbol(value)
    return name if name is not None and name not in MARKERS else None


@dataclass
class ArgSpec:
    """How one parameter of the differentiated function is treated."""

    param: Argument
    """The parameter of the function being differentiated."""
    kind: str
    """``const``, ``dup``, ``dupnoneed`` or ``out``."""
    primal: Value
    """The value passed at the call site."""
    shadow: Value | None = None
    """The shadow (``dup``: a pointer to the derivative memory; forward mode scalars: the tangent)."""
    shadows: list = field(default_factory=list)
    """Vector mode: the shadow of each lane (``shadow`` is the first); with ``stride``, only the first is given."""
    stride: Value | None = None
    """``enzyme_dupv, stride``: lane k's shadow is ``shadow`` plus k times this many bytes."""


@dataclass
class DiffCall:
    """One ``__enzyme_*`` call, understood."""

    call: Call
    mode: str
    """``reverse`` or ``forward``."""
    fn: "object"
    """The :class:`enzcc.ir.function.Function` to differentiate."""
    args: list[ArgSpec] = field(default_factory=list)
    sret: Value | None = None
    """Where the caller wants the result written (C struct returns through a hidden pointer)."""
    tape: Value | None = None
    """Split mode: the tape ``__enzyme_reverse`` is given, or the buffer of ``enzyme_tape``."""
    allocated: int | None = None
    """Split mode: the bytes of the caller's tape buffer (``enzyme_allocated, N``)."""
    allocated_call: Call | None = None
    """``enzyme_allocated, __enzyme_augmentsize(...)``: that call (its size is known when it is lowered)."""
    d_ret: Value | None = None
    """``__enzyme_reverse``: the adjoint of the result."""
    noret: bool = False
    """``enzyme_noret``: ``__enzyme_augmentfwd`` does not return the result."""
    nofree: bool = False
    """``enzyme_nofree``: ``__enzyme_reverse`` / ``__enzyme_fwdsplit`` leave the tape for the caller to free (with
    ``__enzyme_fwdsplit``: one tape serves several tangents)."""
    primal_return: bool = False
    """``enzyme_primal_return``: ``__enzyme_fwddiff`` returns ``{result, tangent}``, ``__enzyme_autodiff``
    ``{result, derivatives of the enzyme_out arguments...}``."""
    width: int = 1
    """``enzyme_width, N``: vector mode, N tangents per run."""
    return_kind: str | None = None
    """``const`` / ``active`` from ``enzyme_const_return`` / ``enzyme_active_return``, else None (the
    default: a float result is active)."""
    context: Value | None = None
    """``enzyme_context, ctx``: the shadows of globals come from this context (:mod:`enzcc.ad.calls.context`)."""
    runtime_activity: bool = False
    """``enzyme_runtime_activity``: a pointer whose shadow is the pointer itself at run time is inactive
    (:mod:`enzcc.ad.runtime_activity`)."""

    @property
    def active_return(self) -> bool:
        return is_float(self.fn.return_type) and self.return_kind != "const"

    @property
    def out_args(self) -> list[ArgSpec]:
        return [a for a in self.args if a.kind == OUT]


def parse_call(call: Call, module) -> DiffCall:
    """Match the call's arguments to the function's parameters, following Enzyme's rules; every misuse is an
    error naming the call's source line."""
    callee = call.callee_name
    mode = mode_of(callee)
    if mode is None:
        raise ad_error(f"{callee.split('.')[0]} is not supported by enzcc (known: __enzyme_autodiff, "
                       "__enzyme_fwddiff, __enzyme_augmentfwd, __enzyme_reverse, __enzyme_fwdsplit, "
                       "__enzyme_augmentsize, "
                       "__enzyme_batch)", call)
    args = list(call.args)
    sret = None
    if args and call.arg_attrs and any(a.startswith("sret") for a in call.arg_attrs[0]):
        sret, args = args[0], args[1:]
    if not args:
        raise ad_error(f"{callee} needs the function to differentiate as its first argument", call)
    target = resolve_function(args[0])
    if not isinstance(target, GlobalRef) or target.symbol not in module.functions:
        raise ad_error(f"the first argument of {callee} must be a function known at compile time, "
                       f"not {_describe(target)}", call)
    fn = module.functions[target.symbol]
    if fn.is_declaration:
        raise ad_error(f"cannot differentiate '{fn.name}': its body is not available (only a declaration is "
                       "linked in)", call, cls=MissingBodyError)
    if fn.is_varargs:
        raise ad_error(f"cannot differentiate variadic function '{fn.name}'", call)
    # enzyme_nocache before an argument: the user promises its memory is not changed before the reverse pass,
    # so Enzyme need not keep a copy; enzcc keeps what it needs anyway (the same derivative), so it is accepted
    rest = [a for a in args[1:] if marker_symbol(a) != NOCACHE]
    extra = _call_markers(rest, mode, call, callee)
    if mode == "size":
        return _parse_size(call, fn, rest, extra)
    specs: list[ArgSpec] = []
    pos = 0
    forwardish = mode in ("forward", "forward-split")  # (a float is passed with its tangent)

    def take(what: str, param: Argument) -> Value:
        nonlocal pos
        if pos >= len(rest):
            raise ad_error(f"too few arguments to {callee} for '{fn.name}': missing {what} for parameter "
                           f"{param.index + 1} ({param.type})", call)
        v = rest[pos]
        pos += 1
        return v

    for a in rest:
        unknown = _unknown_marker(a)
        if unknown:
            raise ad_error(f"{unknown} is not supported by enzcc (known markers: "
                           f"{', '.join(sorted(MARKERS))})", call)
    for complete in request_completions():  # (call-level markers of the families: a context's width...)
        complete(call, module, mode, callee, extra)
    width = extra.get("width", 1)
    for param in fn.args:
        value = take("the value", param)
        kind = marker_of(value)
        stride = None
        if kind in ("dupv", "dupnoneedv"):
            stride = take(f"the byte stride after enzyme_{kind}", param)
            if not isinstance(stride.type, T.IntType) or marker_of(stride) is not None:
                raise ad_error(f"enzyme_{kind} must be followed by the byte stride between the lanes' shadows "
                               f"(an integer), then the value and the shadow (parameter {param.index + 1} of "
                               f"'{fn.name}')", call)
            if not isinstance(param.type, T.PointerType):
                raise ad_error(f"enzyme_{kind} parameter {param.index + 1} of '{fn.name}' must be a pointer, "
                               f"not {param.type}", call)
            kind = kind[:-1]
        if kind is not None:
            value = take(f"the value after enzyme_{kind}", param)
            if marker_of(value) is not None:
                raise ad_error(f"enzyme_{kind} must be followed by a value, not another marker "
                               f"(parameter {param.index + 1} of '{fn.name}')", call)
        else:
            if isinstance(param.type, T.PointerType):
                nxt = rest[pos] if pos < len(rest) else None
                # as Enzyme: a pointer to integers the function only reads and writes as such, followed by a
                # value that cannot be its shadow, is constant (an int * without a marker)
                kind = CONST if nxt is not None and not isinstance(nxt.type, T.PointerType) and \
                    _integer_memory(param) else DUP
            elif is_float(param.type):
                kind = DUP if forwardish else OUT
            else:
                kind = CONST
        value = _coerce(value, param, call, fn, callee)
        shadow = None
        if kind == OUT:
            if forwardish:
                raise ad_error(f"enzyme_out is not allowed with {callee} (forward mode passes value and "
                               f"tangent: use enzyme_dup) for parameter {param.index + 1} of '{fn.name}'", call)
            if not is_float(param.type):
                raise ad_error(f"enzyme_out parameter {param.index + 1} of '{fn.name}' must be a floating-point "
                               f"value, not {param.type}", call)
        elif kind in (DUP, DUPNONEED):
            if not isinstance(param.type, T.PointerType) and not (forwardish and is_float(param.type)):
                raise ad_error(f"enzyme_{kind} parameter {param.index + 1} of '{fn.name}' must be a pointer"
                               f"{' or a floating-point value' if forwardish else ''}, not {param.type} "
                               f"(use enzyme_out or enzyme_const)", call)
            lanes = []
            for lane in range(1 if stride is not None else width):
                shadow = take("the shadow" if width == 1 else f"the shadow of lane {lane + 1} of {width}", param)
                if marker_of(shadow) is not None:
                    raise ad_error(f"missing shadow after the value of parameter {param.index + 1} of '{fn.name}'"
                                   + (f" (vector mode: {width} shadows, or enzyme_dupv)" if width > 1 else ""),
                                   call)
                lanes.append(_coerce(shadow, param, call, fn, callee, what="shadow of "))
            shadow = lanes[0]
        specs.append(ArgSpec(param, kind, value, shadow, lanes if shadow is not None else [], stride))
    dc = DiffCall(call, mode, fn, specs, sret, **extra)
    if mode in ("reverse-split", "forward-split"):
        if mode == "reverse-split" and dc.active_return:
            if pos >= len(rest):
                raise ad_error(f"{callee} for '{fn.name}' needs the adjoint of the result after the arguments",
                               call)
            dc.d_ret = rest[pos]
            pos += 1
        if dc.tape is None:
            if pos >= len(rest) or not isinstance(rest[pos].type, T.PointerType):
                raise ad_error(f"{callee} for '{fn.name}' needs the tape from __enzyme_augmentfwd as its last "
                               "argument (or enzyme_tape, buffer)", call)
            dc.tape = rest[pos]
            pos += 1
    if pos != len(rest):
        raise ad_error(f"too many arguments to {callee} for '{fn.name}': it has {len(fn.args)} parameter(s), "
                       f"{len(rest) - pos} argument(s) left over", call)
    if dc.width > 1 and dc.out_args:
        raise ad_error(f"enzyme_out (parameter {dc.out_args[0].param.index + 1} of '{fn.name}') with enzyme_width is "
                       f"not supported in {callee}: pass it by pointer with enzyme_dup (one shadow per lane)", call)
    if dc.width > 1 and dc.primal_return and mode != "forward":
        raise ad_error(f"enzyme_primal_return with enzyme_width is not supported in {callee}", call)
    if "tape" in extra and dc.allocated is None:
        raise ad_error(f"enzyme_tape needs enzyme_allocated, N (the bytes of the buffer) in {callee}", call)
    if dc.allocated is not None and "tape" not in extra:
        raise ad_error(f"enzyme_allocated needs enzyme_tape, buffer in {callee}", call)
    return dc


def _call_markers(rest: list, mode: str, call, callee: str) -> dict:
    """Remove the whole-call markers (and the values after them) from ``rest``; their meaning as
    :class:`DiffCall` fields."""
    out: dict = {}
    i = 0
    while i < len(rest):
        v = rest[i]
        name = marker_symbol(v)
        if name not in CALL_MARKERS:
            i += 1
            continue
        if name == "enzyme_width":
            if mode not in ("forward", "reverse"):
                raise ad_error(f"vector mode (enzyme_width) is supported with __enzyme_fwddiff and "
                               f"__enzyme_autodiff, not {callee}", call)
        elif name == "enzyme_primal_return":
            if mode not in ("forward", "reverse"):
                raise ad_error(f"enzyme_primal_return is supported with __enzyme_fwddiff and __enzyme_autodiff, "
                               f"not {callee}", call)
        elif name == "enzyme_context":
            if mode not in ("forward", "reverse"):
                raise ad_error(f"{name} is supported with __enzyme_fwddiff and __enzyme_autodiff, not "
                               f"{callee}", call)
        elif name == "enzyme_runtime_activity":
            if mode == "forward-split":
                raise ad_error(f"{name} is supported with __enzyme_fwddiff, __enzyme_autodiff, "
                               f"__enzyme_augmentfwd, __enzyme_reverse and __enzyme_augmentsize, not {callee}", call)
        elif (name in ("enzyme_const_return", "enzyme_active_return") and mode == "reverse") or \
                (name == "enzyme_noret" and mode in ("reverse", "forward")):
            pass  # (enzyme_noret: the result is not returned, already the default of these two)
        elif mode not in ("augment", "reverse-split", "forward-split", "size"):
            raise ad_error(f"{name} is only for split mode (__enzyme_augmentfwd, __enzyme_reverse, __enzyme_fwdsplit), "
                           f"not {callee}", call)
        value = None
        if CALL_MARKERS[name]:
            if i + 1 >= len(rest):
                raise ad_error(f"{name} must be followed by a value in {callee}", call)
            value = rest[i + 1]
        del rest[i:i + 1 + CALL_MARKERS[name]]
        if name == "enzyme_tape":
            if not isinstance(value.type, T.PointerType):
                raise ad_error(f"enzyme_tape must be followed by a pointer to the tape buffer in {callee}", call)
            out["tape"] = value
        elif name == "enzyme_allocated":
            size_call = _augmentsize_call(value)
            if size_call is not None:  # (what __enzyme_augmentsize gives: its size, once it is known)
                out["allocated"], out["allocated_call"] = 0, size_call
            elif not isinstance(value, ConstantInt):
                raise ad_error(f"enzyme_allocated must be followed by a constant number of bytes (or what "
                               f"__enzyme_augmentsize returns) in {callee}", call)
            else:
                out["allocated"] = value.value
        elif name == "enzyme_width":
            if not isinstance(value, ConstantInt) or value.value < 1:
                raise ad_error(f"enzyme_width must be followed by a constant number of lanes (1 or more) in {callee}",
                               call)
            out["width"] = value.value
        elif name == "enzyme_context":
            if not isinstance(value.type, T.PointerType):
                raise ad_error(f"enzyme_context must be followed by a context (from __enzyme_context) in {callee}",
                               call)
            out["context"] = value
        elif name == "enzyme_noret":
            out["noret"] = True
        elif name == "enzyme_nofree":
            out["nofree"] = True
        elif name == "enzyme_primal_return":
            out["primal_return"] = True
        elif name == "enzyme_runtime_activity":
            out["runtime_activity"] = True
        else:
            out["return_kind"] = "const" if name == "enzyme_const_return" else "active"
    return out


def _augmentsize_call(value: Value) -> Call | None:
    """The ``__enzyme_augmentsize`` call ``value`` is (through integer casts), else None."""
    while isinstance(value, Cast) and value.opcode in ("sext", "zext", "trunc"):
        value = value.value
    return value if isinstance(value, Call) and (value.callee_name or "").startswith(AUGMENTSIZE) else None


def _parse_size(call, fn, rest: list, extra: dict) -> DiffCall:
    """``__enzyme_augmentsize(f, marker, marker, ...)``: one activity marker per parameter, no values."""
    specs = []
    if len(rest) != len(fn.args):
        raise ad_error(f"__enzyme_augmentsize for '{fn.name}' needs one marker per parameter ({len(fn.args)}), "
                       f"got {len(rest)} argument(s)", call)
    for param, v in zip(fn.args, rest):
        kind = marker_of(v)
        if kind in ("dupv", "dupnoneedv"):
            raise ad_error(f"enzyme_{kind} (vector mode) is not supported with __enzyme_augmentsize", call)
        if kind is None:
            raise ad_error(f"__enzyme_augmentsize takes only markers (enzyme_dup, enzyme_const, enzyme_out), "
                           f"not a value for parameter {param.index + 1} of '{fn.name}'", call)
        specs.append(ArgSpec(param, kind, param))
    return DiffCall(call, "size", fn, specs, None, **extra)


def loop_step_name(call, is_api) -> str | None:
    """The step function a loop call (``__enzyme_fixed_point``, a checkpointed loop: ``is_api`` tells) passes
    first; None for other instructions."""
    if not isinstance(call, Call) or not is_api(call.callee_name) or not call.args:
        return None
    ref = resolve_function(call.args[0])
    return ref.symbol if isinstance(ref, GlobalRef) else None


def loop_step(call, module, is_api, what: str):
    """The step function of a loop call, which must have a body here (a one-line error otherwise)."""
    name = loop_step_name(call, is_api)
    step = module.functions.get(name) if name else None
    if step is None or step.is_declaration:
        raise ad_error(f"the step of {what} must be a function defined in the program", call)
    return step


def loop_step_kinds(mode, args, call, what: str) -> tuple[str, ...]:
    """The activity of a loop's step (its index, then ``args``): pointers to memory with derivatives are
    ``dup``; a float with a derivative passed by value is refused."""
    act = mode.activity
    kinds = [CONST]
    for a in args:
        if isinstance(a.type, T.PointerType) and act.is_active_ptr(a):
            kinds.append(DUP)
        elif isinstance(a.type, T.FloatType) and act.is_active(a):
            raise ad_error(f"{what}: a floating-point value with a derivative passed by value to the step is not "
                           "supported; pass a pointer to it", call)
        else:
            kinds.append(CONST)
    return tuple(kinds)


class MarkerArgs:
    """The arguments of an ``__enzyme_*`` loop call (``__enzyme_fixed_point``, a checkpointed loop) read in
    order: ``enzyme_*`` markers, each followed by what it takes, then the step's own arguments."""

    def __init__(self, call, what: str, args):
        self.call, self.what, self.args, self.k = call, what, list(args), 0

    def markers(self):
        """The markers, in order, up to the first argument that is not one; read what each takes with
        :meth:`take` before asking for the next."""
        while self.k < len(self.args):
            marker = marker_symbol(self.args[self.k])
            if marker is None:
                return
            self.k += 1
            yield marker

    def take(self, thing: str) -> Value:
        """The next argument (``thing`` names it in the error when it is missing)."""
        if self.k >= len(self.args):
            raise ad_error(f"{self.what}: {thing} is missing", self.call)
        self.k += 1
        return self.args[self.k - 1]

    def rest(self) -> list:
        """The arguments after the markers."""
        return self.args[self.k:]


def resolve_function(v: Value, depth: int = 0) -> Value:
    """See through casts and a pointer parked in a local variable (as unoptimized C and Fortran code does with
    ``c_funloc``) to the function itself."""
    if depth > 16 or isinstance(v, GlobalRef):
        return v
    if isinstance(v, ConstantExpr) and v.opcode in ("ptrtoint", "inttoptr", "bitcast", "addrspacecast"):
        return resolve_function(v.operands[0], depth + 1)
    if isinstance(v, Cast) and v.opcode in ("ptrtoint", "inttoptr", "bitcast", "addrspacecast"):
        return resolve_function(v.value, depth + 1)
    if isinstance(v, Load) and v.parent is not None:
        base = base_object(v.pointer)
        if isinstance(base, Alloca):
            stores = [u.user for p in _derived(base) for u in p.uses
                      if isinstance(u.user, Store) and u.index == 1]
            others = [u.user for p in _derived(base) for u in p.uses
                      if not isinstance(u.user, (Store, Load, GetElementPtr))]
            if len(stores) == 1 and not others and _same_address(stores[0].pointer, v.pointer) and \
                    stores[0].parent is v.parent and stores[0].index < v.index:
                return resolve_function(stores[0].value, depth + 1)
    return v


def _derived(base: Value) -> list[Value]:
    out, stack = [base], [base]
    while stack:
        p = stack.pop()
        for u in p.uses:
            if isinstance(u.user, GetElementPtr) and u.index == 0:
                out.append(u.user)
                stack.append(u.user)
    return out


def _same_address(a: Value, b: Value) -> bool:
    if a is b:
        return True
    if isinstance(a, GetElementPtr) and isinstance(b, GetElementPtr):
        return (_same_address(a.pointer, b.pointer) and a.source_type == b.source_type and
                len(a.indices) == len(b.indices) and
                all(isinstance(x, ConstantInt) and isinstance(y, ConstantInt) and x.value == y.value
                    for x, y in zip(a.indices, b.indices)))
    return False


def _describe(v: Value) -> str:
    if isinstance(v, GlobalRef):
        return f"@{v.symbol} (not a function)"
    if isinstance(v, Argument):
        return f"a function pointer passed in as parameter {v.index + 1}"
    return f"a {v.type} value computed at run time"


def _integer_memory(param: Argument) -> bool:
    """The parameter's memory is only read and written as integers in its function (through address
    arithmetic), or not at all: nothing with a derivative can be in it."""
    if param.parent is not None:
        param.parent.parse()  # (a body not parsed yet: its uses of the parameter count)
    stack, seen = [param], set()
    while stack:
        p = stack.pop()
        for u in p.uses:
            user = u.user
            if id(user) in seen:
                continue
            seen.add(id(user))
            if isinstance(user, GetElementPtr) and u.index == 0:
                stack.append(user)
            elif isinstance(user, Load) and isinstance(user.type, T.IntType):
                continue
            elif isinstance(user, Store) and u.index == 1 and isinstance(user.value.type, T.IntType):
                continue
            elif isinstance(user, Store) and u.index == 0 and isinstance(user.pointer, Alloca) and \
                    all(isinstance(x.user, Load) or x.user is user for x in user.pointer.uses):
                stack += [x.user for x in user.pointer.uses if x.user is not user]  # (-O0: kept in a local)
            else:
                return False
    return True


def _coerce(value: Value, param: Argument, call: Call, fn, callee: str, what: str = "") -> Value:
    """C varargs promote float to double: accept that (the caller converts back); other mismatches are errors."""
    if value.type == param.type:
        return value
    if isinstance(param.type, T.FloatType) and isinstance(value.type, T.FloatType):
        return value  # converted at the call site (fptrunc/fpext)
    if isinstance(param.type, T.IntType) and isinstance(value.type, T.IntType):
        return value  # integer promotion: converted at the call site
    raise ad_error(f"{what}argument for parameter {param.index + 1} of '{fn.name}' has type {value.type}, "
                   f"expected {param.type}", call)
