"""Derivatives of complex arithmetic and ``<complex.h>`` functions of ``double _Complex`` (C ``_Complex`` and
``std::complex<double>``, which both lower to these calls).

On x86-64 a ``double _Complex`` argument is passed as two doubles (real, imaginary) and returned as
``{double, double}``. A holomorphic function w = f(z) has the tangent dw = f'(z) dz and the reverse
dz += conj(f'(z)) dw (complex products; the real and imaginary parts are two real variables). ``cabs`` and
``carg`` are real functions of the two parts. ``__muldc3`` / ``__divdc3`` are the compiler's runtime calls for
``*`` and ``/``. (``float _Complex``, passed as ``<2 x float>``, has no rules: such calls are refused as calls
without a derivative rule.)
"""

from __future__ import annotations

from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.values import ConstantFloat

D = T.f64
_PAIR = T.StructType((D, D))


class _C:
    """Complex arithmetic on (real, imaginary) pairs of IR doubles."""

    def __init__(self, b: IRBuilder, module):
        self.b = b
        self.module = module

    @staticmethod
    def k(x: float):
        return ConstantFloat(D, x)

    def add(self, x, y):
        return self.b.fadd(x[0], y[0]), self.b.fadd(x[1], y[1])

    def sub(self, x, y):
        return self.b.fsub(x[0], y[0]), self.b.fsub(x[1], y[1])

    def mul(self, x, y):
        b = self.b
        return (b.fsub(b.fmul(x[0], y[0]), b.fmul(x[1], y[1])), b.fadd(b.fmul(x[0], y[1]), b.fmul(x[1], y[0])))

    def div(self, x, y):
        b = self.b
        den = b.fadd(b.fmul(y[0], y[0]), b.fmul(y[1], y[1]))
        re = b.fadd(b.fmul(x[0], y[0]), b.fmul(x[1], y[1]))
        im = b.fsub(b.fmul(x[1], y[0]), b.fmul(x[0], y[1]))
        return b.fdiv(re, den), b.fdiv(im, den)

    def neg(self, x):
        return self.b.fneg(x[0]), self.b.fneg(x[1])

    def conj(self, x):
        return x[0], self.b.fneg(x[1])

    def call(self, name: str, z):
        fn = self.module.get_or_insert_function(name, T.FunctionType(_PAIR, (D, D)))
        r = self.b.call(fn, [z[0], z[1]])
        return self.b.extract_value(r, [0]), self.b.extract_value(r, [1])


ONE = (1.0, 0.0)

#: name -> f'(z) from (complex helper, z, w = f(z))
HOLOMORPHIC = {
    "cexp": lambda c, z, w: w,
    "clog": lambda c, z, w: c.div(_k(c, ONE), z),
    "csqrt": lambda c, z, w: c.div(_k(c, (0.5, 0.0)), w),
    "csin": lambda c, z, w: c.call("ccos", z),
    "ccos": lambda c, z, w: c.neg(c.call("csin", z)),
    "ctan": lambda c, z, w: c.add(_k(c, ONE), c.mul(w, w)),
    "csinh": lambda c, z, w: c.call("ccosh", z),
    "ccosh": lambda c, z, w: c.call("csinh", z),
    "ctanh": lambda c, z, w: c.sub(_k(c, ONE), c.mul(w, w)),
}
#: name -> (d/dz1, d/dz2) from (complex helper, z1, z2, w = f(z1, z2))
BINARY = {
    "__muldc3": lambda c, z1, z2, w: (z2, z1),
    "__divdc3": lambda c, z1, z2, w: (c.div(_k(c, ONE), z2), c.neg(c.div(w, z2))),
    "cpow": lambda c, z1, z2, w: (c.div(c.mul(z2, w), z1), c.mul(w, c.call("clog", z1))),
}
#: name -> (d/da, d/db) of a real function of z = a + ib, from (builder, a, b, r = f(z))
REAL = {
    "cabs": lambda b, x, y, r: (b.fdiv(x, r), b.fdiv(y, r)),
    "carg": lambda b, x, y, r: (b.fdiv(b.fneg(y), b.fadd(b.fmul(x, x), b.fmul(y, y))),
                                b.fdiv(x, b.fadd(b.fmul(x, x), b.fmul(y, y)))),
}


def _k(c: _C, v):
    return c.k(v[0]), c.k(v[1])


def handles(call) -> bool:
    """Whether ``call`` is one of the complex functions here, with the double signature."""
    name = call.callee_name
    if name in HOLOMORPHIC:
        return call.type == _PAIR and len(call.args) == 2 and all(a.type == D for a in call.args)
    if name in BINARY:
        return call.type == _PAIR and len(call.args) == 4 and all(a.type == D for a in call.args)
    if name in REAL:
        return call.type == D and len(call.args) == 2 and all(a.type == D for a in call.args)
    return False


def _partials(c: _C, call, w):
    """[(argument pair, derivative)] for a complex-valued call (w: its result as a pair)."""
    a = list(call.args)
    name = call.callee_name
    if name in HOLOMORPHIC:
        z = (a[0], a[1])
        return [(z, HOLOMORPHIC[name](c, z, w))]
    z1, z2 = (a[0], a[1]), (a[2], a[3])
    d1, d2 = BINARY[name](c, z1, z2, w)
    return [(z1, d1), (z2, d2)]


def forward(mode, call) -> None:
    """Tangent of a complex call (``mode``: :class:`enzcc.ad.forward.ForwardMode`)."""
    b = IRBuilder.after(call)
    t = mode.tangents.get
    if call.callee_name in REAL:
        x, y = call.args
        if t(id(x)) is None and t(id(y)) is None:
            return
        px, py = REAL[call.callee_name](b, x, y, call)
        dx, dy = mode._t(x), mode._t(y)
        mode._set(call, b.fadd(b.fmul(px, dx), b.fmul(py, dy)))
        return
    if not any(t(id(v)) is not None for v in call.args):
        return
    c = _C(b, mode.module)
    w = (b.extract_value(call, [0]), b.extract_value(call, [1]))
    total = None
    for z, d in _partials(c, call, w):
        if t(id(z[0])) is None and t(id(z[1])) is None:
            continue
        term = c.mul(d, (mode._t(z[0]), mode._t(z[1])))
        total = term if total is None else c.add(total, term)
    agg = b.insert_value(b.insert_value(IRBuilder.poison(_PAIR), total[0], [0]), total[1], [1])
    mode._set(call, agg)


def reverse(mode, call, block, b: IRBuilder) -> None:
    """Reverse of a complex call (``mode``: :class:`enzcc.ad.reverse.ReverseMode`), at ``b``."""
    act = mode.activity
    if not act.is_active(call):
        return
    args = [mode._primal(v, block, b) for v in call.args]
    r = mode._primal(call, block, b)
    d = mode._take_adjoint(b, call)
    if call.callee_name in REAL:
        px, py = REAL[call.callee_name](b, args[0], args[1], r)
        mode._add_adjoint(b, call.args[0], b.fmul(px, d))
        mode._add_adjoint(b, call.args[1], b.fmul(py, d))
        return
    c = _C(b, mode.module)
    w = (b.extract_value(r, [0]), b.extract_value(r, [1]))
    dw = (b.extract_value(d, [0]), b.extract_value(d, [1]))
    # partials computed on the values as available here; adjoints go to the primal arguments
    primal_call = _Shim(call, args)
    for (z, deriv), orig in zip(_partials(c, primal_call, w), _pairs(call.args)):
        g = c.mul(c.conj(deriv), dw)
        mode._add_adjoint(b, orig[0], g[0])
        mode._add_adjoint(b, orig[1], g[1])


def _pairs(args):
    a = list(args)
    return [(a[i], a[i + 1]) for i in range(0, len(a), 2)]


class _Shim:
    """A call's name with other argument values."""

    def __init__(self, call, args):
        self.callee_name = call.callee_name
        self.args = args


__all__ = ["forward", "handles", "reverse"]
