"""CUDA's libdevice: ``__nv_sin``, ``__nv_expf``, ``__nv_pow``... (what clang's CUDA headers call for ``sin``,
``expf``, ``pow`` in device code; the pipeline links libdevice in after AD, :mod:`enzcc.backend.libdevice`).

Each math function gets the derivative of its libm counterpart (``derivatives.yaml``: ``__nv_sinf`` has the rule
of ``sinf``; the rounding-mode arithmetic ``__nv_dadd_rn`` that of ``fadd``, ``__nv_drcp_rn`` NVVM's ``rcp``),
and a few that libm has not (``rcbrt``, ``sinpi``, ``normcdf``, ``erfinv``, Bessel functions...) rules of this
module, written in the same expression language. Every function the
derivative code calls is a libdevice function too (the derivative of ``__nv_sin`` calls ``__nv_cos``, not
``cos`` or ``llvm.cos.f64``, which NVPTX cannot lower).

Functions that also write through a pointer (``__nv_sincos``, ``__nv_frexp``, ``__nv_modf``, ``__nv_remquo``)
are rewritten when a function is prepared: ``sincos`` into ``sin`` and ``cos`` and two stores, the others into a
call that writes a local, copied to the pointer by an ordinary load and store (its value carries no derivative).

Integer functions, float-to-integer conversions and tests (``__nv_float2int_rn``, ``__nv_isnand``) carry no
derivative. A function that reinterprets a float's bits as integers or puts them together again (``__nv_double2hiint``,
``__nv_hiloint2double``) is refused when the float has derivatives (they would be lost in the integers), as the
nvvm family refuses NVVM's ``d2i.hi``.
"""

from __future__ import annotations

import re
from functools import lru_cache

from enzcc.ad.api import has_float
from enzcc.ad.emit import IRRuleBackend, LazyEnv, add_values, digamma_function, times
from enzcc.ad.errors import ad_error
from enzcc.ad.registry import CallRule, register, register_copy_preparation
from enzcc.ad.rules import Rule, evaluate, load_rules, parse_expr
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import Call

PREFIX = "__nv_"

#: ``derivatives.yaml``'s rules (libm's, by their double spelling, and NVVM's rsqrt and saturate) that libdevice
#: has under the same name, ``f`` for float
_LIBM = ("sin", "cos", "tan", "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "sqrt", "cbrt",
         "pow", "fabs", "copysign", "fmax", "fmin", "fma", "tanh", "sinh", "cosh", "asin", "acos", "atan",
         "atan2", "asinh", "acosh", "atanh", "erf", "erfc", "hypot", "floor", "ceil", "trunc", "round", "rint",
         "nearbyint", "fmod", "remainder", "ldexp", "scalbn", "frexp", "modf", "lgamma", "tgamma", "rsqrt",
         "saturate")

_PI = 3.141592653589793
_SQRT_PI_2 = 0.886226925452758  # sqrt(pi) / 2
_SQRT_2PI = 2.5066282746310002

#: rules of libdevice functions libm has not: name (the double spelling, without ``__nv_``) -> (args, partials)
_OWN = {
    "rcbrt": (("x",), {"x": "(fdiv ret (fmul -3.0 x))"}),
    "sinpi": (("x",), {"x": f"(fmul {_PI} (f cospi x))"}),
    "cospi": (("x",), {"x": f"(fmul {-_PI} (f sinpi x))"}),
    "rhypot": (("x", "y"), {"x": "(fneg (fmul x (fmul ret (fmul ret ret))))",
                            "y": "(fneg (fmul y (fmul ret (fmul ret ret))))"}),
    "norm3d": (("a", "b", "c"), {n: f"(fdiv {n} ret)" for n in "abc"}),
    "norm4d": (("a", "b", "c", "d"), {n: f"(fdiv {n} ret)" for n in "abcd"}),
    "rnorm3d": (("a", "b", "c"), {n: f"(fneg (fmul {n} (fmul ret (fmul ret ret))))" for n in "abc"}),
    "rnorm4d": (("a", "b", "c", "d"), {n: f"(fneg (fmul {n} (fmul ret (fmul ret ret))))" for n in "abcd"}),
    "fdim": (("x", "y"), {"x": "(select (fcmp ogt x y) 1.0 0.0)", "y": "(select (fcmp ogt x y) -1.0 0.0)"}),
    "erfinv": (("x",), {"x": f"(fmul {_SQRT_PI_2} (f exp (fmul ret ret)))"}),
    "erfcinv": (("x",), {"x": f"(fmul {-_SQRT_PI_2} (f exp (fmul ret ret)))"}),
    "erfcx": (("x",), {"x": "(fsub (fmul 2.0 (fmul x ret)) 1.1283791670955126)"}),
    "normcdf": (("x",), {"x": f"(fdiv (f exp (fmul -0.5 (fmul x x))) {_SQRT_2PI})"}),
    "normcdfinv": (("x",), {"x": f"(fmul {_SQRT_2PI} (f exp (fmul 0.5 (fmul ret ret))))"}),
    "j0": (("x",), {"x": "(fneg (f j1 x))"}),
    "j1": (("x",), {"x": "(fsub (f j0 x) (fdiv ret x))"}),
    "y0": (("x",), {"x": "(fneg (f y1 x))"}),
    "y1": (("x",), {"x": "(fsub (f y0 x) (fdiv ret x))"}),
    "cyl_bessel_i0": (("x",), {"x": "(f cyl_bessel_i1 x)"}),
    "cyl_bessel_i1": (("x",), {"x": "(fsub (f cyl_bessel_i0 x) (fdiv ret x))"}),
    "logb": (("x",), {"x": "0.0"}),
}

#: spellings of arithmetic with a rounding mode (``__nv_dadd_rn``, ``__nv_fmaf_ieee_rz``...) -> their rule
_ROUNDED = re.compile(r"^(?:d|f)(add|sub|mul|div|rcp|sqrt)_r[nzud]$|^(fma)f?(?:_ieee)?_r[nzud]$|^f(rsqrt)_rn$")
_ROUNDED_RULE = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv", "rcp": "rcp", "sqrt": "sqrt",
                 "fma": "fma", "rsqrt": "rsqrt"}

#: ``__nv_fast_*``: the fast (approximate) float functions, each with the rule of its accurate one; their
#: derivatives call fast functions where libdevice has one
_FAST = ("sinf", "cosf", "tanf", "expf", "exp10f", "logf", "log2f", "log10f", "powf", "tanhf")

#: functions whose value carries no derivative: integer arithmetic and bits, conversions of floats to integers
#: (piecewise constant) or of integers to floats, tests of floats (:func:`_inactive_names`)
_INTEGER = ("abs", "llabs", "min", "max", "umin", "umax", "llmin", "llmax", "ullmin", "ullmax", "hadd", "uhadd",
            "rhadd", "urhadd", "sad", "usad", "mul24", "umul24", "mulhi", "umulhi", "mul64hi", "umul64hi", "brev",
            "brevll", "clz", "clzll", "ffs", "ffsll", "popc", "popcll", "byte_perm")
_TESTS = ("isnand", "isnanf", "isinfd", "isinff", "isfinited", "finitef", "signbitd", "signbitf", "ilogb",
          "ilogbf", "llrint", "llrintf", "llround", "llroundf", "nan", "nanf")

#: functions that reinterpret a float's bits as integers or integers as a float's bits (:func:`_check_bits`)
_BITS = ("double2hiint", "double2loint", "double_as_longlong", "float_as_int", "float_as_uint", "hiloint2double",
         "longlong_as_double", "int_as_float", "uint_as_float")


def _inactive_names() -> list[str]:
    """:data:`_INTEGER`, :data:`_TESTS` and the conversions between floats and integers in each rounding mode."""
    floats, ints = ("float", "double"), ("int", "uint", "ll", "ull")
    conversions = [f"{a}2{b}_{m}" for m in ("rn", "rz", "ru", "rd") for x, y in ((floats, ints), (ints, floats))
                   for a in x for b in y]
    return [PREFIX + n for n in (*_INTEGER, *_TESTS, *conversions)]


#: functions that write through pointers, rewritten when a function is prepared (:func:`_rewrite_writing_calls`)
_SINCOS = {"sincos": ("sin", "cos"), "sincosf": ("sinf", "cosf"), "sincospi": ("sinpi", "cospi"),
           "sincospif": ("sinpif", "cospif"), "fast_sincosf": ("fast_sinf", "fast_cosf")}
_WRITES = {"frexp": 1, "frexpf": 1, "modf": 1, "modff": 1, "remquo": 2, "remquof": 2}


@lru_cache(maxsize=None)
def _own_rule(name: str) -> Rule:
    args, partials = _OWN[name]
    return Rule(name=name, args=args, partials={a: parse_expr(e) for a, e in partials.items()})


def device_rule(callee: str | None) -> tuple[Rule, bool] | None:
    """The derivative rule of the libdevice function ``callee`` and whether it is a fast one, or None."""
    if not callee or not callee.startswith(PREFIX):
        return None
    name = callee[len(PREFIX):]
    fast = name.startswith("fast_")
    if fast:
        name = name[len("fast_"):]
        if name == "fdividef":
            return load_rules().instructions["fdiv"], True
        if name not in _FAST:
            return None
    rounded = _ROUNDED.match(name)
    if rounded:
        stem = _ROUNDED_RULE[next(g for g in rounded.groups() if g)]
        rules = load_rules()
        return rules.instructions.get(stem) or rules.functions[stem], False
    if name in ("powi", "powif"):
        return load_rules().functions["powi"], fast
    if name in ("remquo", "remquof"):
        return _remquo_rule(), fast
    base = name[:-1] if name.endswith("f") and name[:-1] in _OWN | dict.fromkeys(_LIBM) else name
    if base in _LIBM:
        return load_rules().functions[base], fast
    if base in _OWN:
        return _own_rule(base), fast
    return None


def device_function(module, name: str, elem: T.Type, arg_types, fast: bool = False):
    """The declaration of libdevice's ``name`` (the double spelling, ``sin``) for the float type ``elem``:
    ``__nv_sin``, ``__nv_sinf``, or ``__nv_fast_sinf`` when ``fast`` and libdevice has it."""
    single = elem == T.f32
    if single and fast and name + "f" in _FAST:
        full = f"{PREFIX}fast_{name}f"
    else:
        full = PREFIX + name + ("f" if single else "")
    return module.get_or_insert_function(full, T.FunctionType(elem, tuple(arg_types)))


class DeviceMath(IRRuleBackend):
    """Rule expressions as IR whose math calls are libdevice functions (``(f cos x)`` -> ``__nv_cos``)."""

    def __init__(self, b: IRBuilder, ty: T.Type, fast: bool = False):
        super().__init__(b, ty)
        self.fast = fast

    def call(self, name: str, args: list):
        elem = args[0].type
        if isinstance(elem, T.VectorType):  # (libdevice's functions are scalar, and so are their calls)
            raise ValueError(f"libdevice has no vector '{name}'")
        if name == "digamma":  # enzcc's own (its tan and log become libdevice's with the rest of the module)
            x = args[0] if elem == T.f64 else self.b.cast("fpext", args[0], T.f64)
            r = self.b.call(digamma_function(self.b.module), [x])
            return r if elem == T.f64 else self.b.cast("fptrunc", r, elem)
        fn = device_function(self.b.module, name, elem, [a.type for a in args], self.fast)
        return self.b.call(fn, list(args))


def _partial(b: IRBuilder, rule: Rule, fast: bool, arg: str, env: dict, ty: T.Type):
    return evaluate(rule.partial(arg), env, DeviceMath(b, ty, fast))


def _forward(mode, call) -> bool:
    found = device_rule(call.callee_name)
    if found is None:
        return False
    if not any(id(a) in mode.tangents for a in call.args):
        return True
    rule, fast = found
    b = IRBuilder.after(call)
    env = LazyEnv({**{n: (lambda v=v: v) for n, v in zip(rule.args, call.args)}, "ret": lambda: call})
    total = None
    for name, v in zip(rule.args, call.args):
        if name in rule.inactive or id(v) not in mode.tangents:
            continue
        term = times(b, _partial(b, rule, fast, name, env, call.type), mode._t(v))
        total = term if total is None else add_values(b, total, term)
    if total is not None:
        mode._set(call, total)
    return True


def _reverse(mode, call, entry, block, b: IRBuilder) -> bool:
    found = device_rule(call.callee_name)
    if found is None:
        return False
    act = mode.activity
    if not act.is_active(call):
        return True  # e.g. its result reaches no output: nothing flows back
    rule, fast = found
    d = mode._take_adjoint(b, call)
    env = LazyEnv({**{n: (lambda v=v: mode._primal(v, block, b)) for n, v in zip(rule.args, call.args)},
                 "ret": lambda: mode._primal(call, block, b)})
    for name, v in zip(rule.args, call.args):
        if name in rule.inactive or not (act.is_active(v) or mode._is_out(v)):
            continue
        mode._add_adjoint(b, v, times(b, _partial(b, rule, fast, name, env, call.type), d))
    return True


# -- precision conversions ------------------------------------------------------------------------

def _forward_convert(mode, call) -> bool:
    """``__nv_double2float_rn(x)`` (any rounding): the tangent rounded too."""
    x = call.args[0]
    if id(x) in mode.tangents:
        mode._set(call, IRBuilder.after(call).cast("fptrunc", mode._t(x), call.type))
    return True


def _reverse_convert(mode, call, entry, block, b: IRBuilder) -> bool:
    x = call.args[0]
    if mode.activity.is_active(call) and (mode.activity.is_active(x) or mode._is_out(x)):
        mode._add_adjoint(b, x, b.cast("fpext", mode._take_adjoint(b, call), x.type))
    return True


# -- bits of floats --------------------------------------------------------------------------------------

def _check_bits(mode, call) -> bool:
    """Refuse a call that takes apart or puts together the bits of a float with derivatives."""
    from enzcc.ad.calls.nvvm import carries_float_bits  # (here: imported on top, nvvm would register earlier)

    act = mode.activity
    if any(has_float(a.type) and id(a) in act.varied or
           isinstance(a.type, T.IntType) and carries_float_bits(act, a) for a in call.args):
        raise ad_error(f"cannot differentiate '{call.callee_name}': it takes apart or puts together the bits of a "
                       "float with derivatives, whose derivative would be lost", call)
    return True


def _check_bits_reverse(mode, call, entry, block, b) -> bool:
    return _check_bits(mode, call)


# -- functions that write through pointers ----------------------------------------------------------

def _rewrite_writing_calls(fn) -> None:
    """In a copy a derivative is made from: ``__nv_sincos(x, s, c)`` -> ``*s = __nv_sin(x); *c = __nv_cos(x)``;
    ``__nv_frexp(x, e)`` (``modf``, ``remquo``) writes a local that is then copied to ``e`` (its value, an
    exponent, integral part or quotient, carries no derivative; the store gives ``e``'s memory a zero one)."""
    for call in [i for i in fn.instructions() if isinstance(i, Call) and (i.callee_name or "").startswith(PREFIX)]:
        name = call.callee_name[len(PREFIX):]
        if name in _SINCOS and len(call.args) == 3:
            x, ps, pc = call.args
            b = IRBuilder.before(call)
            for stem, p in zip(_SINCOS[name], (ps, pc)):
                f = fn.module.get_or_insert_function(PREFIX + stem, T.FunctionType(x.type, (x.type,)))
                b.store(b.call(f, [x]), p, align=fn.module.data_layout.abi_alignment(x.type))
            call.erase()
        elif name in _WRITES and len(call.args) > _WRITES[name]:
            k = _WRITES[name]
            target = call.args[k]
            ty = call.type if name.startswith("modf") else T.i32
            slot = IRBuilder.before(call).alloca(ty, in_entry=True)
            if call.tail in ("tail", "musttail"):
                call.tail = None  # (the callee now writes a local of the caller)
            call.set_arg(k, slot)
            b = IRBuilder.after(call)
            b.store(b.load(ty, slot), target)


@lru_cache(maxsize=None)
def _remquo_rule() -> Rule:
    """``remquo(a, b, q)``: the value is ``remainder(a, b)``'s."""
    r = load_rules().functions["remainder"]
    return Rule(name="remquo", args=("a", "b", "q"), partials=r.partials, inactive=("q",))


def _names() -> list[str]:
    """Every libdevice function with a derivative rule here."""
    out = []
    for base in (*_LIBM, *_OWN, "remquo"):
        out += [PREFIX + base, PREFIX + base + "f"]
    out += [f"{PREFIX}fast_{n}" for n in _FAST] + [f"{PREFIX}fast_fdividef", f"{PREFIX}powi", f"{PREFIX}powif"]
    for mode in ("rn", "rz", "ru", "rd"):
        out += [f"{PREFIX}{p}{op}_{mode}" for p in "df" for op in ("add", "sub", "mul", "div", "rcp", "sqrt")]
        out += [f"{PREFIX}fma_{mode}", f"{PREFIX}fmaf_{mode}", f"{PREFIX}fmaf_ieee_{mode}"]
    out.append(f"{PREFIX}frsqrt_rn")
    return [n for n in dict.fromkeys(out) if device_rule(n) is not None]


MATH = CallRule("libdevice", writes_no_memory=True, pure=True, forward=_forward, reverse=_reverse)
register(MATH, names=_names())
register(CallRule("libdevice", writes_no_memory=True, forward=_forward_convert, reverse=_reverse_convert),
         names=[f"{PREFIX}double2float_{m}" for m in ("rn", "rz", "ru", "rd")])
register(CallRule("libdevice", inactive=True, writes_no_memory=True), names=_inactive_names())
register(CallRule("libdevice", writes_no_memory=True, forward=_check_bits, reverse=_check_bits_reverse),
         names=[PREFIX + n for n in _BITS])
register_copy_preparation(20, _rewrite_writing_calls)

__all__ = ["DeviceMath", "PREFIX", "device_function", "device_rule"]
