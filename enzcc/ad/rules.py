"""Derivative rules loaded from ``derivatives.yaml`` and the small expression language they are written in.

An expression is evaluated through a *backend*: :class:`PythonBackend` computes numbers (the rules' own
finite-difference tests use it), the AD transform's backend emits LLVM IR.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache

import yaml

from enzcc.errors import EnzccError

RULES_FILE = os.path.join(os.path.dirname(__file__), "derivatives.yaml")



@dataclass(frozen=True)
class Rule:
    """How to differentiate one instruction or math function."""

    name: str
    """Rule name (``sin``, ``fmul``...)."""
    args: tuple[str, ...]
    """Argument names, in call order."""
    partials: dict = field(hash=False, compare=False, default_factory=dict)
    """argument name -> parsed expression of d(result)/d(argument)."""
    inactive: tuple[str, ...] = ()
    """Arguments that carry no derivative."""
    names: tuple[str, ...] = ()
    """C library names (``sin``, ``sinf``)."""
    intrinsic: str | None = None
    """LLVM intrinsic stem (``llvm.sin``)."""
    domain: tuple = ()
    """Sampling ranges per argument for the rule's own tests."""
    writes: dict = field(hash=False, compare=False, default_factory=dict)
    """Pointer argument -> the type the function writes through it (``i32``, or ``ret``: the result's type);
    such values carry no derivative (``frexp``'s exponent, ``modf``'s integral part)."""

    def partial(self, arg: str):
        return self.partials.get(arg)


# ---------------------------------------------------------------------------------------------
# s-expressions

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def parse_expr(text: str | float | int):
    """``"(fmul y (f pow x (fsub y 1.0)))"`` -> ``('fmul', 'y', ('f', 'pow', 'x', ('fsub', 'y', 1.0)))``."""
    if isinstance(text, (int, float)):
        return float(text)
    tokens = _TOKEN.findall(text)
    pos = 0

    def atom(tok: str):
        try:
            return float(tok)
        except ValueError:
            return tok

    def parse():
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError(f"unexpected end of expression: {text}")
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            items = []
            while pos < len(tokens) and tokens[pos] != ")":
                items.append(parse())
            if pos >= len(tokens):
                raise ValueError(f"missing ')' in {text}")
            pos += 1
            return tuple(items)
        if tok == ")":
            raise ValueError(f"unexpected ')' in {text}")
        return atom(tok)

    out = parse()
    if pos != len(tokens):
        raise ValueError(f"trailing tokens in {text}")
    return out


def evaluate(expr, env: dict, backend):
    """Evaluate ``expr`` with argument values ``env`` (names and ``ret``) through ``backend``."""
    if isinstance(expr, float):
        return backend.const(expr)
    if isinstance(expr, str):
        if expr not in env:
            raise KeyError(f"unknown name '{expr}' in derivative rule")
        return env[expr]
    op, *rest = expr
    if op == "f":
        name, *args = rest
        return backend.call(name, [evaluate(a, env, backend) for a in args])
    if op == "fcmp":
        pred, a, b = rest
        return backend.fcmp(pred, evaluate(a, env, backend), evaluate(b, env, backend))
    if op == "sub":  # integer arithmetic on an inactive integer argument
        a, b = rest
        return backend.isub(evaluate(a, env, backend), int(b))
    args = [evaluate(a, env, backend) for a in rest]
    fn = getattr(backend, op, None)
    if fn is None:
        raise KeyError(f"unknown operation '{op}' in derivative rule")
    return fn(*args)


# ---------------------------------------------------------------------------------------------
# loading


@dataclass
class RuleTable:
    instructions: dict[str, Rule]
    functions: dict[str, Rule]
    """rule name -> rule"""
    by_c_name: dict[str, Rule]
    by_intrinsic: dict[str, Rule]
    _by_callee: dict[str, Rule | None] = field(default_factory=dict, repr=False, compare=False)
    """:meth:`for_call`'s answers so far."""

    def for_call(self, callee: str) -> Rule | None:
        """The rule for a call to ``callee`` (``sin``, ``llvm.sin.f64``, ``llvm.sin.v4f32``...); remembered per
        name (asked several times per call instruction, through the call-rule matchers)."""
        known = self._by_callee
        if callee not in known:
            known[callee] = self._lookup(callee)
        return known[callee]

    def _lookup(self, callee: str) -> Rule | None:
        if callee in self.by_c_name:
            return self.by_c_name[callee]
        if callee.startswith("llvm."):
            parts = callee.split(".")
            for n in range(len(parts), 1, -1):
                stem = ".".join(parts[:n])
                if stem in self.by_intrinsic:
                    return self.by_intrinsic[stem]
        return None


def _rule(name: str, spec: dict) -> Rule:
    try:
        args = tuple(spec["args"])
        partials = {a: parse_expr(e) for a, e in spec.get("partials", {}).items()}
    except (KeyError, ValueError) as exc:
        raise EnzccError(f"{RULES_FILE}: rule '{name}': {exc}") from None
    inactive = tuple(spec.get("inactive", ()))
    for a in list(partials) + list(inactive):
        if a not in args:
            raise EnzccError(f"{RULES_FILE}: rule '{name}': '{a}' is not an argument")
    writes = dict(spec.get("writes", {}))
    for a, ty in writes.items():
        if ty not in ("ret", "i32"):
            raise EnzccError(f"{RULES_FILE}: rule '{name}': writes '{ty}' through '{a}' (known: ret, i32)")
        if a not in inactive:
            raise EnzccError(f"{RULES_FILE}: rule '{name}': '{a}' is written through, so it must be inactive")
    for a in args:
        if a not in partials and a not in inactive:
            raise EnzccError(f"{RULES_FILE}: rule '{name}': no partial for argument '{a}'")
    return Rule(name=name, args=args, partials=partials, inactive=inactive, names=tuple(spec.get("names", ())),
                intrinsic=spec.get("intrinsic"), domain=tuple(tuple(d) for d in spec.get("domain", ())),
                writes=writes)


@lru_cache(maxsize=None)
def load_rules(path: str = RULES_FILE) -> RuleTable:
    try:
        with open(path) as fh:
            # libyaml's loader when PyYAML has it: the same data, a seventh of the time (every AD build loads
            # the rules)
            data = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as exc:
        raise EnzccError(f"cannot load derivative rules from {path}: {exc}") from None
    instructions = {n: _rule(n, s) for n, s in data.get("instructions", {}).items()}
    functions = {n: _rule(n, s) for n, s in data.get("functions", {}).items()}
    by_c = {c: r for r in functions.values() for c in r.names}
    by_intr = {r.intrinsic: r for r in functions.values() if r.intrinsic}
    for name, spellings in (data.get("same_as") or {}).items():  # (NVVM's rounding modes and approximations)
        rule = functions.get(name) or instructions.get(name)
        if rule is None:
            raise EnzccError(f"{RULES_FILE}: same_as: no rule '{name}'")
        by_c.update((callee, rule) for s in spellings for callee in alternatives(s))
    return RuleTable(instructions, functions, by_c, by_intr)


def alternatives(spelling: str) -> list[str]:
    """The names ``spelling`` stands for: ``"a.{x,y}.{d,f}"`` -> ``a.x.d``, ``a.x.f``, ``a.y.d``, ``a.y.f``."""
    m = re.search(r"\{([^{}]*)\}", spelling)
    if m is None:
        return [spelling]
    return [n for alt in m.group(1).split(",")
            for n in alternatives(spelling[:m.start()] + alt + spelling[m.end():])]


# ---------------------------------------------------------------------------------------------
# numbers


class PythonBackend:
    """Evaluates rule expressions on Python floats (for testing the rules themselves)."""

    FCMP = {"olt": lambda a, b: a < b, "ole": lambda a, b: a <= b, "ogt": lambda a, b: a > b,
            "oge": lambda a, b: a >= b, "oeq": lambda a, b: a == b, "one": lambda a, b: a != b}

    def const(self, x):
        return x

    def fadd(self, a, b):
        return a + b

    def fsub(self, a, b):
        return a - b

    def fmul(self, a, b):
        return a * b

    def fdiv(self, a, b):
        return a / b

    def fneg(self, a):
        return -a

    def select(self, c, a, b):
        return a if c else b

    def fcmp(self, pred, a, b):
        return self.FCMP[pred](a, b)

    def sitofp(self, n):
        return float(n)

    def isub(self, a, b):
        return int(a) - b

    def call(self, name, args):
        return PRIMALS[name](*args)


def _fmod(a, b):
    return math.fmod(a, b)


def digamma(x: float) -> float:
    """psi(x) = d/dx log|Gamma(x)| (the same method as the IR version in :func:`enzcc.ad.emit.digamma_function`:
    reflection below 0, recurrence up to 10, then the asymptotic series)."""
    shift = 0.0
    if x < 0:
        shift = -math.pi / math.tan(math.pi * x)
        x = 1 - x
    while x < 10:
        shift -= 1 / x
        x += 1
    x2 = 1 / (x * x)
    series = x2 * (1 / 12 - x2 * (1 / 120 - x2 * (1 / 252 - x2 * (1 / 240 - x2 / 132))))
    return shift + math.log(x) - 0.5 / x - series


#: Python versions of every rule's primal function (rule name -> callable)
PRIMALS = {
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "exp": math.exp, "exp2": lambda x: 2.0 ** x,
    "exp10": lambda x: 10.0 ** x, "expm1": math.expm1, "log": math.log, "log2": math.log2, "log10": math.log10,
    "log1p": math.log1p, "sqrt": math.sqrt, "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x),
    "pow": math.pow, "powi": lambda x, n: x ** int(n), "fabs": math.fabs, "copysign": math.copysign,
    "fmax": max, "fmin": min, "maximum": max, "minimum": min, "fma": lambda a, b, c: a * b + c,
    "fmuladd": lambda a, b, c: a * b + c, "tanh": math.tanh, "sinh": math.sinh, "cosh": math.cosh,
    "asin": math.asin, "acos": math.acos, "atan": math.atan, "atan2": math.atan2, "asinh": math.asinh,
    "acosh": math.acosh, "atanh": math.atanh, "erf": math.erf, "erfc": math.erfc, "hypot": math.hypot,
    "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc, "round": round, "rint": round,
    "nearbyint": round, "roundeven": round, "fmod": _fmod, "remainder": math.remainder,
    "ldexp": lambda x, n: math.ldexp(x, int(n)), "scalbn": lambda x, n: math.ldexp(x, int(n)),
    "frexp": lambda x, e: math.frexp(x)[0], "modf": lambda x, ip: math.modf(x)[0], "lgamma": math.lgamma,
    "tgamma": math.gamma, "digamma": digamma, "rcp": lambda x: 1.0 / x, "rsqrt": lambda x: x ** -0.5,
    "saturate": lambda x: min(max(x, 0.0), 1.0),
    # instructions
    "fadd": lambda a, b: a + b, "fsub": lambda a, b: a - b, "fmul": lambda a, b: a * b,
    "fdiv": lambda a, b: a / b, "fneg": lambda a: -a, "frem": _fmod,
}
