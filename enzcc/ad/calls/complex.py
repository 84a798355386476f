"""Derivatives of complex arithmetic and ``<complex.h>`` functions (C ``_Complex`` and ``std::complex``, which
both lower to these calls), in double and float.

On x86-64 a ``double _Complex`` argument is passed as two doubles (real, imaginary) and returned as
``{double, double}``; a ``float _Complex`` is passed and returned as ``<2 x float>``. ``__muldc3`` /
``__divdc3`` (``__mulsc3`` / ``__divsc3``) are the compiler's runtime calls for ``*`` and ``/``, taking four
scalars. A holomorphic function w = f(z) has the tangent dw = f'(z) dz and the reverse dz += conj(f'(z)) dw
(complex products; the real and imaginary parts are two real variables). ``cabs`` and ``carg`` are real
functions of the two parts.
"""

from __future__ import annotations

from enzcc.ad.registry import CallRule, register

from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.values import ConstantFloat


class _C:
    """Complex arithmetic on (real, imaginary) pairs of IR floats of type ``elem``."""

    def __init__(self, b: IRBuilder, module, elem):
        self.b = b
        self.module = module
        self.elem = elem

    def k(self, v):
        return ConstantFloat(self.elem, v[0]), ConstantFloat(self.elem, v[1])

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

    def call(self, base: str, z):
        """``base`` (``ccos``...) at z, in this precision."""
        b = self.b
        if self.elem == T.f64:
            fn = self.module.get_or_insert_function(base, T.FunctionType(_PAIR, (T.f64, T.f64)))
            r = b.call(fn, [z[0], z[1]])
            return b.extract_value(r, [0]), b.extract_value(r, [1])
        fn = self.module.get_or_insert_function(base + "f", T.FunctionType(_VEC, (_VEC,)))
        r = b.call(fn, [_vector(b, z)])
        return b.extract_element(r, 0), b.extract_element(r, 1)


_PAIR = T.StructType((T.f64, T.f64))
_VEC = T.VectorType(2, T.f32)
ONE = (1.0, 0.0)

#: name -> f'(z) from (complex helper, z, w = f(z))
HOLOMORPHIC = {
    "cexp": lambda c, z, w: w,
    "clog": lambda c, z, w: c.div(c.k(ONE), z),
    "csqrt": lambda c, z, w: c.div(c.k((0.5, 0.0)), w),
    "csin": lambda c, z, w: c.call("ccos", z),
    "ccos": lambda c, z, w: c.neg(c.call("csin", z)),
    "ctan": lambda c, z, w: c.add(c.k(ONE), c.mul(w, w)),
    "csinh": lambda c, z, w: c.call("ccosh", z),
    "ccosh": lambda c, z, w: c.call("csinh", z),
    "ctanh": lambda c, z, w: c.sub(c.k(ONE), c.mul(w, w)),
}
#: name -> (d/dz1, d/dz2) from (complex helper, z1, z2, w = f(z1, z2))
BINARY = {
    "__muldc3": lambda c, z1, z2, w: (z2, z1),
    "__divdc3": lambda c, z1, z2, w: (c.div(c.k(ONE), z2), c.neg(c.div(w, z2))),
    "cpow": lambda c, z1, z2, w: (c.div(c.mul(z2, w), z1), c.mul(w, c.call("clog", z1))),
}
#: name -> (d/da, d/db) of a real function of z = a + ib, from (builder, a, b, r = f(z))
REAL = {
    "cabs": lambda b, x, y, r: (b.fdiv(x, r), b.fdiv(y, r)),
    "carg": lambda b, x, y, r: (b.fdiv(b.fneg(y), b.fadd(b.fmul(x, x), b.fmul(y, y))),
                                b.fdiv(x, b.fadd(b.fmul(x, x), b.fmul(y, y)))),
}
#: float runtime calls -> the double ones they mirror
_FLOAT_RUNTIME = {"__mulsc3": "__muldc3", "__divsc3": "__divdc3"}


def _vector(b: IRBuilder, z):
    v = b.insert_element(IRBuilder.poison(_VEC), z[0], 0)
    return b.insert_element(v, z[1], 1)


class _Shape:
    """How one call passes its complex arguments and result: ``base`` (the double name), ``elem`` (the
    precision), ``args``: per complex argument, the IR argument indices of its parts ((i, i + 1) for two
    scalars, (i,) for a ``<2 x float>``), ``vector_result``."""

    def __init__(self, base: str, elem, args: list[tuple], vector_result: bool):
        self.base = base
        self.elem = elem
        self.args = args
        self.vector_result = vector_result


def shape_of(call) -> _Shape | None:
    """The :class:`_Shape` of a call to one of the complex functions here, else None."""
    name = call.callee_name or ""
    types = [a.type for a in call.args]
    d, f = T.f64, T.f32
    if name in HOLOMORPHIC and call.type == _PAIR and types == [d, d]:
        return _Shape(name, d, [(0, 1)], False)
    if name in BINARY and call.type == _PAIR and types == [d] * 4:
        return _Shape(name, d, [(0, 1), (2, 3)], False)
    if name in REAL and call.type == d and types == [d, d]:
        return _Shape(name, d, [(0, 1)], False)
    if name in _FLOAT_RUNTIME and call.type == _VEC and types == [f] * 4:
        return _Shape(_FLOAT_RUNTIME[name], f, [(0, 1), (2, 3)], True)
    base = name[:-1] if name.endswith("f") else None
    if base in HOLOMORPHIC and call.type == _VEC and types == [_VEC]:
        return _Shape(base, f, [(0,)], True)
    if base == "cpow" and call.type == _VEC and types == [_VEC, _VEC]:
        return _Shape(base, f, [(0,), (1,)], True)
    if base in REAL and call.type == f and types == [_VEC]:
        return _Shape(base, f, [(0,)], False)
    return None


def handles(call) -> bool:
    return shape_of(call) is not None


def _parts(b: IRBuilder, values: list, idx: tuple):
    """The (real, imaginary) parts of a complex argument."""
    if len(idx) == 2:
        return values[idx[0]], values[idx[1]]
    v = values[idx[0]]
    return b.extract_element(v, 0), b.extract_element(v, 1)


def _result_parts(b: IRBuilder, shape: _Shape, r):
    if shape.vector_result:
        return b.extract_element(r, 0), b.extract_element(r, 1)
    return b.extract_value(r, [0]), b.extract_value(r, [1])


def _derivatives(c: _C, shape: _Shape, zs: list, w):
    if shape.base in HOLOMORPHIC:
        return [HOLOMORPHIC[shape.base](c, zs[0], w)]
    return list(BINARY[shape.base](c, zs[0], zs[1], w))


def forward(mode, call) -> None:
    """Tangent of a complex call (``mode``: :class:`enzcc.ad.forward.ForwardMode`)."""
    shape = shape_of(call)
    if not any(id(a) in mode.tangents for a in call.args):
        return
    b = IRBuilder.after(call)
    args = list(call.args)
    tangents = [mode._t(a) for a in args]
    zs = [_parts(b, args, idx) for idx in shape.args]
    dzs = [_parts(b, tangents, idx) for idx in shape.args]
    if shape.base in REAL:
        px, py = REAL[shape.base](b, zs[0][0], zs[0][1], call)
        mode._set(call, b.fadd(b.fmul(px, dzs[0][0]), b.fmul(py, dzs[0][1])))
        return
    c = _C(b, mode.module, shape.elem)
    w = _result_parts(b, shape, call)
    total = None
    for idx, d, dz in zip(shape.args, _derivatives(c, shape, zs, w), dzs):
        if not any(id(args[i]) in mode.tangents for i in idx):
            continue
        term = c.mul(d, dz)
        total = term if total is None else c.add(total, term)
    if shape.vector_result:
        mode._set(call, _vector(b, total))
    else:
        mode._set(call, b.insert_value(b.insert_value(IRBuilder.poison(_PAIR), total[0], [0]), total[1], [1]))


def reverse(mode, call, block, b: IRBuilder) -> None:
    """Reverse of a complex call (``mode``: :class:`enzcc.ad.reverse.ReverseMode`), at ``b``."""
    if not mode.activity.is_active(call):
        return
    shape = shape_of(call)
    args = [mode._primal(v, block, b) for v in call.args]
    r = mode._primal(call, block, b)
    d = mode._take_adjoint(b, call)
    zs = [_parts(b, args, idx) for idx in shape.args]
    if shape.base in REAL:
        px, py = REAL[shape.base](b, zs[0][0], zs[0][1], r)
        gs = [(b.fmul(px, d), b.fmul(py, d))]
    else:
        c = _C(b, mode.module, shape.elem)
        w = _result_parts(b, shape, r)
        dw = _result_parts(b, shape, d)
        gs = [c.mul(c.conj(deriv), dw) for deriv in _derivatives(c, shape, zs, w)]
    # adjoints go to the primal arguments (the parts, or the <2 x float> as a whole)
    for idx, g in zip(shape.args, gs):
        if len(idx) == 2:
            mode._add_adjoint(b, call.args[idx[0]], g[0])
            mode._add_adjoint(b, call.args[idx[1]], g[1])
        else:
            mode._add_adjoint(b, call.args[idx[0]], _vector(b, g))



# -- the call rule ----------------------------------------------------------------------------------------

def _forward(mode, call) -> bool:
    if mode.carries_derivatives(call):
        forward(mode, call)
    return True


def _reverse(mode, call, entry, block, b: IRBuilder) -> bool:
    reverse(mode, call, block, b)
    return True


register(CallRule("complex", forward=_forward, reverse=_reverse), match=handles)


__all__ = ["forward", "handles", "reverse", "shape_of"]
