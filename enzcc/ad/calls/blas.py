"""Derivatives of BLAS calls through CBLAS, as BLAS calls again (Enzyme's BLAS support, by hand).

Supported: ``cblas_{d,s}{dot,axpy,scal,nrm2,gemv,gemm}``. Forward mode adds the tangent computation next to
the call; reverse mode copies, at the call, the arrays its reverse needs (they may be overwritten later;
the copy lives until the reverse of the call frees it) and accumulates the adjoints with ``axpy``, ``gemv``,
``ger`` and ``gemm``. For ``gemv`` and ``gemm``, derivatives with respect to ``alpha`` and ``beta`` are refused
(one-line error); any other ``cblas_*`` routine with derivatives is refused by the caller as having no rule.

CBLAS enums: ``CblasNoTrans`` = 111, ``CblasTrans`` = 112, ``CblasConjTrans`` = 113 (real: as ``Trans``).
"""

from __future__ import annotations

from enzcc.ad.registry import CallRule, register

import re

from enzcc.ad.emit import call_if
from enzcc.ad.errors import ad_error
from enzcc.ad.runtime_activity import differs, enabled
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.values import ConstantFloat, ConstantInt, ConstantPoison, ConstantUndef

NO_TRANS, TRANS = 111, 112

#: routine -> its parameters (CBLAS order)
SIGNATURES = {
    "dot": ("n", "x", "incx", "y", "incy"),
    "axpy": ("n", "alpha", "x", "incx", "y", "incy"),
    "scal": ("n", "alpha", "x", "incx"),
    "nrm2": ("n", "x", "incx"),
    "gemv": ("order", "trans", "m", "n", "alpha", "a", "lda", "x", "incx", "beta", "y", "incy"),
    "gemm": ("order", "transa", "transb", "m", "n", "k", "alpha", "a", "lda", "b", "ldb", "beta", "c", "ldc"),
}
_NAME = re.compile(r"cblas_([ds])(dot|axpy|scal|nrm2|gemv|gemm)$")


def routine(name: str | None) -> tuple[str, str] | None:
    """``("d", "gemm")`` for ``cblas_dgemm``; None for anything else."""
    m = _NAME.match(name or "")
    return (m.group(1), m.group(2)) if m else None


class _Call:
    """One BLAS call: its arguments by role, and helpers emitting BLAS calls of the same precision."""

    def __init__(self, inst, b: IRBuilder):
        self.inst = inst
        self.prec, self.op = routine(inst.callee_name)
        self.ty = T.f64 if self.prec == "d" else T.f32
        self.args = dict(zip(SIGNATURES[self.op], inst.args))
        for role, v in self.args.items():
            if isinstance(v, (ConstantPoison, ConstantUndef)):
                # (the optimizer saw a definition of the routine in the program that ignores this argument)
                raise ad_error(f"argument '{role}' of {inst.callee_name} is undefined here: the program's own "
                               f"{inst.callee_name} ignores it, and its derivative needs it", inst)
        self.b = b
        self.module = inst.module
        self.when = None
        """With runtime activity: the ``i1`` under which the next BLAS calls are made (their shadows are other memory
        than the primal's), or None: always."""

    def const(self, x: float):
        return ConstantFloat(self.ty, x)

    def blas(self, op: str, args: list, ret=T.void):
        """Call ``cblas_<prec><op>`` with ``args`` (floats of the call's precision). Integers go as the
        program's definition of the routine takes them (a mock or reference BLAS compiled in may take its
        order and transposition as ``char``), else as CBLAS's ``int``."""
        name = f"cblas_{self.prec}{op}"
        known = self.module.functions.get(name)
        if known is not None and len(known.function_type.params) == len(args):
            types = known.function_type.params
        else:
            types = tuple(T.i32 if isinstance(a.type, T.IntType) and a.type.bits < 32 else a.type for a in args)
        args = [self._as_int(a, t) for a, t in zip(args, types)]
        fn = self.module.get_or_insert_function(name, T.FunctionType(ret, tuple(types)))
        if self.when is not None:
            return call_if(self.module, self.b, self.when, fn, args)
        return self.b.call(fn, args)

    def only_if(self, *conditions) -> None:
        """Make the next calls only where all ``conditions`` (``i1`` values, or None for runtime activity's
        absence) hold."""
        conds = [x for x in conditions if x is not None]
        self.when = None
        for x in conds:
            self.when = x if self.when is None else self.b.and_(self.when, x)

    def _as_int(self, v, ty):
        """``v`` as the integer type ``ty`` (sign-extended or truncated; anything else unchanged)."""
        if not (isinstance(ty, T.IntType) and isinstance(v.type, T.IntType)) or v.type.bits == ty.bits:
            return v
        return self.b.sext(v, ty) if v.type.bits < ty.bits else self.b.trunc(v, ty)

    @staticmethod
    def like(v, x: int):
        """The constant ``x`` of the integer type of ``v`` (CBLAS's enums are ``int``, a mock's ``char``)."""
        return ConstantInt(v.type, x)

    def is_no_trans(self, t):
        return self.b.icmp("eq", t, self.like(t, NO_TRANS))

    def flip(self, t):
        return self.b.select(self.is_no_trans(t), self.like(t, TRANS), self.like(t, NO_TRANS))


def _vector_elements(b: IRBuilder, n, inc):
    """Elements a strided vector spans: 1 + (n - 1) * |inc| (as i64)."""
    n64, inc64 = b.sext(n, T.i64), b.sext(inc, T.i64)
    neg = b.icmp("slt", inc64, ConstantInt(T.i64, 0))
    mag = b.select(neg, b.sub(ConstantInt(T.i64, 0), inc64), inc64)
    return b.add(ConstantInt(T.i64, 1), b.mul(b.sub(n64, ConstantInt(T.i64, 1)), mag))


def _matrix_elements(b: IRBuilder, order, rows, cols, ld):
    """Elements a matrix stored with leading dimension ``ld`` spans: (major - 1) * ld + minor, where major is
    rows (row-major, order 101) or columns (column-major)."""
    row_major = b.icmp("eq", order, ConstantInt(order.type, 101))
    major = b.sext(b.select(row_major, rows, cols), T.i64)
    minor = b.sext(b.select(row_major, cols, rows), T.i64)
    return b.add(b.mul(b.sub(major, ConstantInt(T.i64, 1)), b.sext(ld, T.i64)), minor)


def _stored_shape(c: _Call, name: str):
    """(rows, cols) of the stored matrix ``a``/``b``/``c`` of a gemv/gemm call (i32 values)."""
    b, a = c.b, c.args
    if c.op == "gemv":
        return a["m"], a["n"]
    if name == "c":
        return a["m"], a["n"]
    if name == "a":  # op(A) is m x k
        nt = c.is_no_trans(a["transa"])
        return b.select(nt, a["m"], a["k"]), b.select(nt, a["k"], a["m"])
    nt = c.is_no_trans(a["transb"])  # op(B) is k x n
    return b.select(nt, a["k"], a["n"]), b.select(nt, a["n"], a["k"])


def _vector_length(c: _Call, name: str):
    """Logical length of vector ``x``/``y`` of the call."""
    a, b = c.args, c.b
    if c.op != "gemv":
        return a["n"]
    nt = c.is_no_trans(a["trans"])
    return b.select(nt, a["n"], a["m"]) if name == "x" else b.select(nt, a["m"], a["n"])


def _copy(c: _Call, name: str):
    """A heap copy of array argument ``name`` (same layout: same increment or leading dimension)."""
    b, a = c.b, c.args
    if name in ("x", "y"):
        count = _vector_elements(b, _vector_length(c, name), a["inc" + name])
    else:
        rows, cols = _stored_shape(c, name)
        count = _matrix_elements(b, a["order"], rows, cols, a["ld" + name])
    nbytes = b.mul(count, ConstantInt(T.i64, c.ty.bits // 8))
    malloc = c.module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,)))
    buf = b.call(malloc, [nbytes])
    b.memcpy(buf, a[name], nbytes)
    return buf


def _refuse_scalars(c: _Call, active) -> None:
    if c.op in ("gemv", "gemm"):
        for s in ("alpha", "beta"):
            if active(c.args[s]):
                raise ad_error(f"derivatives with respect to {s} of {c.inst.callee_name} are not supported "
                               f"(pass {s} as a constant)", c.inst)


# -- forward mode ------------------------------------------------------------------------------------


def forward(mode, inst) -> None:
    """Tangent code for one BLAS call (``mode``: a :class:`enzcc.ad.forward.ForwardMode`)."""
    act = mode.activity

    def shadow(name):
        p = c.args[name]
        return mode.shadows.of(p, inst) if act.is_active_ptr(p) else None

    def tangent(name):
        return mode.tangents.get(id(c.args[name]))

    def live(name):  # (runtime activity: the shadow is other memory)
        return differs(b, c.args[name], shadow(name)) if enabled(act) and shadow(name) is not None else None

    # (the tangent calls come before the call, as Enzyme makes them, but nrm2's, which reads its result)
    after = routine(inst.callee_name)[1] == "nrm2"
    b = IRBuilder.after(inst) if after else IRBuilder.before(inst)
    c = _Call(inst, b)
    _refuse_scalars(c, lambda v: id(v) in mode.tangents)
    a = c.args
    if enabled(act) and c.op in ("gemv", "gemm"):
        _forward_at_run_time(c, shadow, live)
    elif c.op == "dot":
        terms = []
        if shadow("x") is not None:
            c.only_if(live("x"))
            terms.append(c.blas("dot", [a["n"], shadow("x"), a["incx"], a["y"], a["incy"]], c.ty))
        if shadow("y") is not None:
            c.only_if(live("y"))
            terms.append(c.blas("dot", [a["n"], a["x"], a["incx"], shadow("y"), a["incy"]], c.ty))
        if terms:
            mode._set(inst, terms[0] if len(terms) == 1 else b.fadd(terms[0], terms[1]))
    elif c.op == "nrm2":
        if shadow("x") is not None:  # d|x| = x . dx / |x|  (0 at x = 0)
            c.only_if(live("x"))
            d = c.blas("dot", [a["n"], a["x"], a["incx"], shadow("x"), a["incx"]], c.ty)
            zero = b.fcmp("oeq", inst, c.const(0.0))
            mode._set(inst, b.select(zero, c.const(0.0), b.fdiv(d, inst)))
    elif c.op == "axpy":  # y += alpha x: dy += alpha dx + dalpha x
        if shadow("y") is None:
            return
        if shadow("x") is not None:
            c.only_if(live("y"), live("x"))
            c.blas("axpy", [a["n"], a["alpha"], shadow("x"), a["incx"], shadow("y"), a["incy"]])
        if tangent("alpha") is not None:
            c.only_if(live("y"))
            c.blas("axpy", [a["n"], tangent("alpha"), a["x"], a["incx"], shadow("y"), a["incy"]])
    elif c.op == "scal":  # x = alpha x: dx = alpha dx + dalpha x (x as before the call)
        if shadow("x") is None:
            return
        c.only_if(live("x"))
        if tangent("alpha") is not None:
            tmp = _copy(c, "x")
            c.blas("scal", [a["n"], a["alpha"], shadow("x"), a["incx"]])
            c.blas("axpy", [a["n"], tangent("alpha"), tmp, a["incx"], shadow("x"), a["incx"]])
            b.call(_free(c), [tmp])
        else:
            c.blas("scal", [a["n"], a["alpha"], shadow("x"), a["incx"]])
    elif c.op == "gemv":  # y = alpha op(A) x + beta y: dy = alpha op(dA) x + alpha op(A) dx + beta dy
        if shadow("y") is None:
            return
        beta = a["beta"]
        head = [a["order"], a["trans"], a["m"], a["n"], a["alpha"]]
        # (the term of dx first, then dA's, in Enzyme's order: a program logging its BLAS calls sees the same)
        if shadow("x") is not None:
            c.blas("gemv", head + [a["a"], a["lda"], shadow("x"), a["incx"], beta, shadow("y"), a["incy"]])
            beta = c.const(1.0)
        if shadow("a") is not None:
            c.blas("gemv", head + [shadow("a"), a["lda"], a["x"], a["incx"], beta, shadow("y"), a["incy"]])
            beta = c.const(1.0)
        if beta is a["beta"]:
            c.blas("scal", [_vector_length(c, "y"), beta, shadow("y"), a["incy"]])
    elif c.op == "gemm":  # C = alpha op(A) op(B) + beta C: dC = alpha (op(dA) op(B) + op(A) op(dB)) + beta dC
        if shadow("c") is None:
            return
        beta = a["beta"]
        head = [a["order"], a["transa"], a["transb"], a["m"], a["n"], a["k"]]
        if shadow("b") is not None:  # (dB's term first, then dA's, in Enzyme's order)
            c.blas("gemm", head + [a["alpha"], a["a"], a["lda"], shadow("b"), a["ldb"], beta, shadow("c"), a["ldc"]])
            beta = c.const(1.0)
        if shadow("a") is not None:
            c.blas("gemm", head + [a["alpha"], shadow("a"), a["lda"], a["b"], a["ldb"], beta, shadow("c"), a["ldc"]])
            beta = c.const(1.0)
        if beta is a["beta"]:  # alpha = 0: C = beta C (A and B are not read)
            c.blas("gemm", head + [c.const(0.0), a["a"], a["lda"], a["b"], a["ldb"], beta, shadow("c"), a["ldc"]])


def _forward_at_run_time(c: _Call, shadow, live) -> None:
    """Forward mode of gemv / gemm with runtime activity: the result's tangent scaled by beta first, then each term
    with a shadow that is other memory added (the calls a term needs are made only then)."""
    a = c.args
    out = "y" if c.op == "gemv" else "c"
    if shadow(out) is None:
        return
    one = c.const(1.0)
    if c.op == "gemv":
        head = [a["order"], a["trans"], a["m"], a["n"], a["alpha"]]
        c.only_if(live("y"))
        c.blas("scal", [_vector_length(c, "y"), a["beta"], shadow("y"), a["incy"]])
        if shadow("a") is not None:
            c.only_if(live("y"), live("a"))
            c.blas("gemv", head + [shadow("a"), a["lda"], a["x"], a["incx"], one, shadow("y"), a["incy"]])
        if shadow("x") is not None:
            c.only_if(live("y"), live("x"))
            c.blas("gemv", head + [a["a"], a["lda"], shadow("x"), a["incx"], one, shadow("y"), a["incy"]])
        return
    head = [a["order"], a["transa"], a["transb"], a["m"], a["n"], a["k"]]
    c.only_if(live("c"))  # (alpha = 0: C = beta C, A and B are not read)
    c.blas("gemm", head + [c.const(0.0), a["a"], a["lda"], a["b"], a["ldb"], a["beta"], shadow("c"), a["ldc"]])
    if shadow("a") is not None:
        c.only_if(live("c"), live("a"))
        c.blas("gemm", head + [a["alpha"], shadow("a"), a["lda"], a["b"], a["ldb"], one, shadow("c"), a["ldc"]])
    if shadow("b") is not None:
        c.only_if(live("c"), live("b"))
        c.blas("gemm", head + [a["alpha"], a["a"], a["lda"], shadow("b"), a["ldb"], one, shadow("c"), a["ldc"]])


def _free(c: _Call):
    return c.module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))


# -- reverse mode ------------------------------------------------------------------------------------


def _needed_copies(c: _Call, act) -> list[str]:
    """The arrays the reverse of the call reads (as they were at the call)."""
    active_ptr = {n: act.is_active_ptr(c.args[n]) for n in ("x", "y", "a", "b", "c") if n in c.args}
    need = []
    if c.op == "dot":
        need = [n for n, other in (("y", "x"), ("x", "y")) if active_ptr[other]]
    elif c.op == "axpy":
        need = ["x"] if active_ptr["y"] and act.is_active(c.args["alpha"]) else []
    elif c.op == "scal":
        need = ["x"] if active_ptr["x"] and act.is_active(c.args["alpha"]) else []
    elif c.op == "nrm2":
        need = ["x"] if active_ptr["x"] else []
    elif c.op == "gemv" and active_ptr["y"]:
        need = (["a"] if active_ptr["x"] else []) + (["x"] if active_ptr["a"] else [])
    elif c.op == "gemm" and active_ptr["c"]:
        need = (["a"] if active_ptr["b"] else []) + (["b"] if active_ptr["a"] else [])
    return need


def prepare_reverse(mode, inst) -> dict:
    """Forward sweep: copies of the arrays the reverse of ``inst`` reads, made just before it."""
    c = _Call(inst, IRBuilder.before(inst))
    _refuse_scalars(c, mode.activity.is_active)
    return {n: _copy(c, n) for n in _needed_copies(c, mode.activity)}


def reverse(mode, inst, copies: dict, block, b: IRBuilder) -> None:
    """Reverse of one BLAS call (``mode``: a :class:`enzcc.ad.reverse.ReverseMode`), at ``b``."""
    act = mode.activity
    c = _Call(inst, b)
    a = {k: (mode._primal(v, block, b) if not isinstance(v, (ConstantInt, ConstantFloat)) else v)
         for k, v in c.args.items() if not isinstance(v.type, T.PointerType)}
    alpha = c.args.get("alpha")  # (the primal value: its adjoint accumulates there)
    c.args.update(a)  # (the scalars as available in the reverse code)
    copy = {k: mode._primal(v, block, b) for k, v in copies.items()}

    def shadow(name):
        p = c.args[name]
        return mode._shadow(p, block, b, inst) if act.is_active_ptr(p) else None

    def live(name):  # (runtime activity: the shadow is other memory)
        if not enabled(act) or shadow(name) is None:
            return None
        return differs(b, mode._primal(c.args[name], block, b), shadow(name))

    if c.op == "dot":
        d = mode._take_adjoint(b, inst) if act.is_active(inst) else None
        if d is not None:
            if shadow("x") is not None:
                c.only_if(live("x"))
                c.blas("axpy", [a["n"], d, copy["y"], a["incy"], shadow("x"), a["incx"]])
            if shadow("y") is not None:
                c.only_if(live("y"))
                c.blas("axpy", [a["n"], d, copy["x"], a["incx"], shadow("y"), a["incy"]])
    elif c.op == "nrm2":
        d = mode._take_adjoint(b, inst) if act.is_active(inst) else None
        if d is not None and shadow("x") is not None:  # dx += (d / |x|) x
            c.only_if(live("x"))
            r = mode._primal(inst, block, b)
            scale = b.select(b.fcmp("oeq", r, c.const(0.0)), c.const(0.0), b.fdiv(d, r))
            c.blas("axpy", [a["n"], scale, copy["x"], a["incx"], shadow("x"), a["incx"]])
    elif c.op == "axpy":  # y += alpha x: dx += alpha dy, dalpha += x . dy
        if shadow("y") is not None:
            if shadow("x") is not None:
                c.only_if(live("y"), live("x"))
                c.blas("axpy", [a["n"], a["alpha"], shadow("y"), a["incy"], shadow("x"), a["incx"]])
            c.only_if(live("y"))
            if "x" in copy:
                mode._add_adjoint(b, alpha,
                                  c.blas("dot", [a["n"], copy["x"], a["incx"], shadow("y"), a["incy"]], c.ty))
    elif c.op == "scal":  # x = alpha x: dalpha += x_old . dx, dx = alpha dx
        if shadow("x") is not None:
            c.only_if(live("x"))
            if "x" in copy:
                mode._add_adjoint(b, alpha,
                                  c.blas("dot", [a["n"], copy["x"], a["incx"], shadow("x"), a["incx"]], c.ty))
            c.blas("scal", [a["n"], a["alpha"], shadow("x"), a["incx"]])
    elif c.op == "gemv" and shadow("y") is not None:
        dy = shadow("y")
        if shadow("x") is not None:  # dx += alpha op(A)^T dy
            c.only_if(live("y"), live("x"))
            c.blas("gemv", [a["order"], c.flip(a["trans"]), a["m"], a["n"], a["alpha"], copy["a"], a["lda"], dy,
                            a["incy"], c.const(1.0), shadow("x"), a["incx"]])
        if shadow("a") is not None:  # dA += alpha dy x^T (no trans) or alpha x dy^T (trans)
            c.only_if(live("y"), live("a"))
            nt = c.is_no_trans(a["trans"])
            first, inc1 = b.select(nt, dy, copy["x"]), b.select(nt, a["incy"], a["incx"])
            second, inc2 = b.select(nt, copy["x"], dy), b.select(nt, a["incx"], a["incy"])
            c.blas("ger", [a["order"], a["m"], a["n"], a["alpha"], first, inc1, second, inc2, shadow("a"), a["lda"]])
        c.only_if(live("y"))
        c.blas("scal", [_vector_length(c, "y"), a["beta"], dy, a["incy"]])
    elif c.op == "gemm" and shadow("c") is not None:
        dc = shadow("c")
        one = c.const(1.0)
        if shadow("a") is not None:
            c.only_if(live("c"), live("a"))
            nt = c.is_no_trans(a["transa"])
            c.blas("gemm", [a["order"], b.select(nt, c.like(a["transb"], NO_TRANS), a["transb"]),
                            b.select(nt, c.flip(a["transb"]), c.like(a["transb"], TRANS)),
                            b.select(nt, a["m"], a["k"]), b.select(nt, a["k"], a["m"]), a["n"], a["alpha"],
                            b.select(nt, dc, copy["b"]), b.select(nt, a["ldc"], a["ldb"]),
                            b.select(nt, copy["b"], dc), b.select(nt, a["ldb"], a["ldc"]),
                            one, shadow("a"), a["lda"]])
        if shadow("b") is not None:
            c.only_if(live("c"), live("b"))
            nt = c.is_no_trans(a["transb"])
            c.blas("gemm", [a["order"], b.select(nt, c.flip(a["transa"]), c.like(a["transa"], TRANS)),
                            b.select(nt, c.like(a["transa"], NO_TRANS), a["transa"]),
                            b.select(nt, a["k"], a["n"]), b.select(nt, a["n"], a["k"]), a["m"], a["alpha"],
                            b.select(nt, copy["a"], dc), b.select(nt, a["lda"], a["ldc"]),
                            b.select(nt, dc, copy["a"]), b.select(nt, a["ldc"], a["lda"]),
                            one, shadow("b"), a["ldb"]])
        # dC = beta dC (alpha = 0: A and B are not read)
        c.only_if(live("c"))
        c.blas("gemm", [a["order"], a["transa"], a["transb"], a["m"], a["n"], a["k"], c.const(0.0),
                        mode._shadow(c.args["c"], block, b, inst), a["lda"], dc, a["ldb"], a["beta"], dc, a["ldc"]])
    c.only_if()
    if mode.lane == mode.width - 1:  # (vector mode: after the last lane)
        for v in copy.values():
            b.call(_free(c), [v])



# -- the call rule ----------------------------------------------------------------------------------------

def _forward(mode, inst) -> bool:
    if mode.carries_derivatives(inst):
        forward(mode, inst)
    return True


def _augment(mode, inst):
    act = mode.activity
    if not (any(act.is_active_ptr(a) or act.is_active(a) for a in inst.args) or act.is_active(inst)):
        return None
    if mode.parallel:
        raise ad_error(f"reverse mode through BLAS ('{inst.callee_name}') in an OpenMP parallel region is not "
                       "supported", inst)
    return inst, prepare_reverse(mode, inst), []


def _reverse(mode, inst, copies, block, b: IRBuilder) -> bool:
    if copies is None:
        return False  # (no derivative flows through it)
    reverse(mode, inst, copies, block, b)
    return True


# (by name, so that the pipeline finds the definitions these rules stand for: enzcc.backend.pipeline)
register(CallRule("blas", passes_arguments=True, forward=_forward, augment=_augment, reverse=_reverse,
                  runtime_activity=True, replaces_body=True),
         names=tuple(f"cblas_{prec}{op}" for prec in "ds" for op in SIGNATURES))


__all__ = ["forward", "prepare_reverse", "reverse", "routine"]
