"""IR emission helpers shared by forward and reverse mode: derivative rules as IR, zeros, aggregate sums."""

from __future__ import annotations

from enzcc.ad.rules import evaluate, load_rules
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder, const_float, const_zero
from enzcc.ir.values import ConstantFloat, ConstantInt, ConstantSplat, ConstantZero, Value


def atomic_add(module, b: IRBuilder, ptr: Value, d: Value, align) -> None:
    """``*ptr += d`` with atomic adds (each lane of a vector on its own): adjoints that other threads may add to
    the same memory at the same time."""
    from enzcc.ad.errors import ad_error
    from enzcc.ir.values import ConstantInt

    ty = d.type
    if isinstance(ty, T.FloatType):
        b.atomic_rmw("fadd", ptr, d, "monotonic", align=align)
        return
    if isinstance(ty, T.VectorType) and isinstance(ty.element, T.FloatType):
        size = module.data_layout.store_size(ty.element)
        for k in range(ty.count):
            p = b.gep(ty.element, ptr, [ConstantInt(T.i64, k)]) if k else ptr
            b.atomic_rmw("fadd", p, b.extract_element(d, ConstantInt(T.i64, k)), "monotonic",
                         align=min(align or size, size) if k else align)
        return
    raise ad_error(f"adding adjoints of {ty} from several threads (an OpenMP parallel region) is not supported")


def fail_at_run_time(module, b: IRBuilder, message: str) -> None:
    """At ``b``: write ``enzcc: message`` to standard error and abort (what a derivative cannot do, found
    only when it runs)."""
    from enzcc.ir.values import ConstantInt, ConstantNull, ConstantString

    text = f"enzcc: {message}\n".encode()
    name = module.unique_function_name("__enzcc_message")  # (unique among globals too)
    if module.targets_gpu:  # (no write or abort on a GPU: device printf, then a trap that stops the kernel)
        text = text.replace(b"%", b"%%") + b"\0"
        ty = T.ArrayType(len(text), T.i8)
        module.add_global(name, ty, ConstantString(ty, text), constant=True, linkage="private")
        vprintf = module.get_or_insert_function("vprintf", T.FunctionType(T.i32, (T.ptr, T.ptr)))
        b.call(vprintf, [module.global_ref(name), ConstantNull(T.ptr)])
        b.call(module.get_or_insert_function("llvm.trap", T.FunctionType(T.void, ())), [])
        b.unreachable()
        return
    ty = T.ArrayType(len(text), T.i8)
    module.add_global(name, ty, ConstantString(ty, text), constant=True, linkage="private")
    write = module.get_or_insert_function("write", T.FunctionType(T.i64, (T.i32, T.ptr, T.i64)))
    b.call(write, [ConstantInt(T.i32, 2), module.global_ref(name), ConstantInt(T.i64, len(text))])
    b.call(module.get_or_insert_function("abort", T.FunctionType(T.void, ())), [])
    b.unreachable()


def fail_call_at_run_time(module, b: IRBuilder, message: str) -> None:
    """At ``b``: a call to a new internal function that does :func:`fail_at_run_time` with ``message``. A call,
    not a terminator, so it goes in the middle of a block (what follows it is never reached)."""
    from enzcc.ir.function import Function

    fn = Function(module.unique_function_name("__enzcc_fail"), T.FunctionType(T.void, ()))
    fn.linkage = "internal"
    module.add_function(fn)
    fail_at_run_time(module, IRBuilder.at_end(fn.append_block("entry")), message)
    b.call(fn, [])


def fail_call_at_run_time_if(module, b: IRBuilder, condition: Value, message: str) -> None:
    """At ``b``: a call to a new internal function that does :func:`fail_at_run_time` with ``message`` when
    ``condition`` (an ``i1``) is true, and returns otherwise (a check in the middle of a block, which leaves the
    control flow of the function it is in as it is)."""
    from enzcc.ir.function import Function

    fn = Function(module.unique_function_name("__enzcc_fail_if"), T.FunctionType(T.void, (T.i1,)), ["failed"])
    fn.linkage = "internal"
    module.add_function(fn)
    entry, fail, done = fn.append_block("entry"), fn.append_block("fail"), fn.append_block("done")
    IRBuilder.at_end(entry).cond_br(fn.args[0], fail, done)
    fail_at_run_time(module, IRBuilder.at_end(fail), message)
    IRBuilder.at_end(done).ret_void()
    b.call(fn, [condition])


def call_if(module, b: IRBuilder, condition: Value, callee, args: list) -> Value | None:
    """At ``b``: ``condition ? callee(args) : zero`` through an internal function that makes the call only when
    ``condition`` (an ``i1``) is true, so the call itself is not made otherwise (a BLAS routine on a shadow that is
    the primal memory, with runtime activity) and the control flow around ``b`` stays as it is. Returns the
    result (zero where the call is not made), None for a void callee."""
    from enzcc.ir.function import Function

    ftype = callee.function_type
    name = f"__enzcc_call_if.{callee.name}"
    fn = module.functions.get(name)
    if fn is None:
        fn = Function(name, T.FunctionType(ftype.ret, (T.i1, *ftype.params)),
                      ["call"] + [f"a{k}" for k in range(len(ftype.params))])
        fn.linkage = "internal"
        module.add_function(fn)
        entry, yes, no = fn.append_block("entry"), fn.append_block("call"), fn.append_block("skip")
        IRBuilder.at_end(entry).cond_br(fn.args[0], yes, no)
        yb, nb = IRBuilder.at_end(yes), IRBuilder.at_end(no)
        r = yb.call(callee, list(fn.args[1:]))
        if isinstance(ftype.ret, T.VoidType):
            yb.ret_void()
            nb.ret_void()
        else:
            yb.ret(r)
            nb.ret(zero(ftype.ret))
    r = b.call(fn, [condition, *args])
    return None if isinstance(ftype.ret, T.VoidType) else r


def signed_i64(b: IRBuilder, v: Value) -> Value:
    """An integer as ``i64``, sign-extended (counts and sizes where a negative value means "the default")."""
    return v if v.type == T.i64 else b.sext(v, T.i64)


def call_again(call, args) -> Value:
    """The same function as ``call``'s called again, right after it, with ``args``."""
    callee = call.callee.resolve() if hasattr(call.callee, "resolve") else call.callee
    return IRBuilder.after(call).call(callee, list(args))


def round_function(module, name: str, ftype: T.FunctionType, body, names=None):
    """The internal helper ``name`` of this round of AD, made by ``body(fn)`` on first request. A function of
    that name an earlier round (nested AD) left is not reused: the optimizer has since specialized it to that
    round's calls (a parameter's ``range(i64 8, 41)`` inferred from them, which another call would break)."""
    from enzcc.ir.function import Function

    made = getattr(module, "_enzcc_round_functions", None)
    if made is None:
        made = module._enzcc_round_functions = {}
    fn = made.get(name)
    if fn is None:
        fn = Function(module.unique_function_name(name), ftype, names)
        fn.linkage = "internal"
        module.add_function(fn)
        made[name] = fn
        body(fn)
    return fn


def counted_loop_function(module, name: str, params, step):
    """The round helper ``name(params..., i64 count)``: ``step(builder, args, i)`` for each ``i < count``, in one
    loop block (``step`` adds no blocks)."""
    def body(fn):
        *args, count = fn.args
        zero = ConstantInt(T.i64, 0)
        entry, loop, done = fn.append_block("entry"), fn.append_block("loop"), fn.append_block("done")
        b = IRBuilder.at_end(entry)
        b.cond_br(b.icmp("sgt", count, zero), loop, done)
        lb = IRBuilder.at_end(loop)
        i = lb.phi(T.i64, [(zero, entry)])
        step(lb, args, i)
        nxt = lb.add(i, ConstantInt(T.i64, 1))
        i.add_incoming(nxt, loop)
        lb.cond_br(lb.icmp("eq", nxt, count), done, loop)
        IRBuilder.at_end(done).ret_void()
    return round_function(module, name, T.FunctionType(T.void, (*params, T.i64)), body)


def internal_function(module, name: str, ret: T.Type, params, names=None):
    """A new internal function named ``name`` (made unique) with an empty body."""
    from enzcc.ir.function import Function

    f = Function(module.unique_function_name(name), T.FunctionType(ret, tuple(params)), names)
    f.linkage = "internal"
    module.add_function(f)
    return f


def splat(ty: T.Type, x: float) -> Value:
    """The constant ``x`` of a float or float-vector type."""
    if isinstance(ty, T.VectorType):
        return ConstantSplat(ty, ConstantFloat(ty.element, float(x)))
    return const_float(ty, x)


def is_zero_const(v: Value) -> bool:
    if isinstance(v, ConstantZero):
        return True
    if isinstance(v, ConstantFloat):
        return v.value == 0.0
    if isinstance(v, ConstantSplat):
        return is_zero_const(v.element)
    return False


def const_value(v: Value) -> float | None:
    if isinstance(v, ConstantFloat):
        return v.value
    if isinstance(v, ConstantSplat) and isinstance(v.element, ConstantFloat):
        return v.element.value
    return None


SUM_FLAGS = ("nsz",)
"""Fast-math flags of the additions that sum derivatives (adjoints, tangent terms): the sign of a zero sum
is insignificant, so that ``0.0 + d`` is ``d`` (an adjoint zeroed in memory and added to again, as the reverse
of ``a[i] += t`` does, costs no addition)."""


def add_values(b: IRBuilder, x: Value, y: Value) -> Value:
    """``x + y`` for floats, float vectors and aggregates of them (with :data:`SUM_FLAGS`)."""
    if is_zero_const(x):
        return y
    if is_zero_const(y):
        return x
    ty = x.type
    if isinstance(ty, (T.StructType, T.NamedStructType, T.ArrayType)):
        elems = ty.elements if not isinstance(ty, T.ArrayType) else [ty.element] * ty.count
        out = x
        for i, _ in enumerate(elems):
            s = add_values(b, b.extract_value(x, [i]), b.extract_value(y, [i]))
            out = b.insert_value(out, s, [i])
        return out
    return b.fadd(x, y, flags=SUM_FLAGS)


def zero(ty: T.Type) -> Value:
    return const_zero(ty)


class IRRuleBackend:
    """Evaluates derivative-rule expressions by emitting IR at a builder's insertion point.

    ``ty`` is the floating-point (vector) type of the rule's result; numeric literals become constants of it.
    Simple algebra is folded at generation time (x*1, x*0, 0+x, --x).
    """

    def __init__(self, b: IRBuilder, ty: T.Type):
        self.b = b
        self.ty = ty

    def const(self, x: float) -> Value:
        return splat(self.ty, x)

    def fadd(self, a, b):
        if is_zero_const(a):
            return b
        if is_zero_const(b):
            return a
        return self.b.fadd(a, b)

    def fsub(self, a, b):
        if is_zero_const(b):
            return a
        return self.b.fsub(a, b)

    def fmul(self, a, b):
        for x, y in ((a, b), (b, a)):
            c = const_value(x)
            if c == 1.0:
                return y
            if c == 0.0:
                return splat(y.type, 0.0)
            if c == -1.0:
                return self.fneg(y)
        return self.b.fmul(a, b)

    def fdiv(self, a, b):
        if const_value(b) == 1.0:
            return a
        return self.b.fdiv(a, b)

    def fneg(self, a):
        c = const_value(a)
        if c is not None:
            return splat(a.type, -c)
        return self.b.fneg(a)

    def select(self, c, a, b):
        return self.b.select(c, a, b)

    def fcmp(self, pred, a, b):
        return self.b.fcmp(pred, a, b)

    def sitofp(self, n):
        elem = self.ty.element if isinstance(self.ty, T.VectorType) else self.ty
        v = self.b.sitofp(n, elem)
        if isinstance(self.ty, T.VectorType):
            vec = self.b.insert_element(const_zero(self.ty), v, 0)
            return self.b.shuffle_vector(vec, const_zero(self.ty), [0] * self.ty.count)
        return v

    def isub(self, a, b: int):
        return self.b.sub(a, b)

    def call(self, name: str, args: list[Value]) -> Value:
        return call_math(self.b, name, args)


def times(b: IRBuilder, partial: Value, d: Value) -> Value:
    """``partial * d`` with constant folding (1, -1, 0)."""
    return IRRuleBackend(b, d.type).fmul(partial, d)


def call_math(b: IRBuilder, rule_name: str, args: list[Value]) -> Value:
    """Call the primal of rule ``rule_name`` (``cos``, ``pow``...) on IR values: the LLVM intrinsic when there is
    one (works for vectors too), else the C library function (scalarized for vectors)."""
    ty = args[0].type
    if rule_name == "digamma":
        return _scalarized(b, digamma_function(b.module), args, T.f64)
    rule = load_rules().functions[rule_name]
    if rule.intrinsic:
        overloads = [ty] + ([args[1].type] if rule_name == "powi" else [])
        return b.call_intrinsic(rule.intrinsic, args, overload_types=overloads)
    elem = ty.element if isinstance(ty, T.VectorType) else ty
    scalar_types = tuple(a.type.element if isinstance(a.type, T.VectorType) else a.type for a in args)
    fn = b.module.get_or_insert_function(_c_name(rule, elem), T.FunctionType(elem, scalar_types))
    return _scalarized(b, fn, args)


def c_function_for(module, rule, elem: T.Type, param_types: list[T.Type]):
    """The declaration of ``rule``'s C function for the float type ``elem`` (``frexpf`` for float)."""
    return module.get_or_insert_function(_c_name(rule, elem), T.FunctionType(elem, tuple(param_types)))


def _scalarized(b: IRBuilder, fn, args: list[Value], via: T.Type | None = None) -> Value:
    """Call the scalar function ``fn`` on scalar arguments, or lane by lane on vectors; ``via``: the float type
    ``fn`` takes and returns, converted from and to the arguments' type."""
    ty = args[0].type
    elem = ty.element if isinstance(ty, T.VectorType) else ty

    def one(lanes):
        if via is not None and elem != via:
            lanes = [b.cast("fpext" if via.bits > elem.bits else "fptrunc", a, via) for a in lanes]
            r = b.call(fn, lanes)
            return b.cast("fptrunc" if via.bits > elem.bits else "fpext", r, elem)
        return b.call(fn, lanes)

    if isinstance(ty, T.VectorType):
        out = const_zero(ty)
        for i in range(ty.count):
            lanes = [b.extract_element(a, i) if isinstance(a.type, T.VectorType) else a for a in args]
            out = b.insert_element(out, one(lanes), i)
        return out
    return one(list(args))


def _c_name(rule, elem: T.Type) -> str:
    """The C library function for the element type: ``names`` are the double, float and long double spellings."""
    names = list(rule.names)
    if not names:
        raise KeyError(f"no C function for rule '{rule.name}'")
    kind = elem.kind if isinstance(elem, T.FloatType) else "double"
    want = {"float": names[0] + "f", "x86_fp80": names[0] + "l"}.get(kind)
    if want is not None and want not in names:
        raise KeyError(f"no {kind} version of '{names[0]}'")
    return want or names[0]


DIGAMMA = "__enzcc_digamma"


def digamma_function(module):
    """``double __enzcc_digamma(double)``, psi(x) = d/dx log|Gamma(x)| (the derivative of ``lgamma``), added
    to the module on first use: reflection psi(x) = psi(1 - x) - pi / tan(pi x) below 0, the recurrence
    psi(x) = psi(x + 1) - 1/x up to 10, then the asymptotic series (error below 1e-14 there)."""
    return round_function(module, DIGAMMA, T.FunctionType(T.f64, (T.f64,)), _digamma_body, ["x"])


def _digamma_body(fn) -> None:
    module = fn.module
    d = T.f64
    entry, reflect, loop, tail = (fn.append_block(n) for n in ("entry", "reflect", "loop", "tail"))
    x = fn.args[0]
    b = IRBuilder.at_end(entry)
    b.cond_br(b.fcmp("olt", x, const_float(d, 0.0)), reflect, loop)
    b = IRBuilder.at_end(reflect)
    pi = const_float(d, 3.141592653589793)
    tan = b.call(module.get_or_insert_function("tan", T.FunctionType(d, (d,))), [b.fmul(pi, x)])
    r_shift = b.fneg(b.fdiv(pi, tan))
    r_x = b.fsub(const_float(d, 1.0), x)
    b.br(loop)
    b = IRBuilder.at_end(loop)
    xv = b.phi(d, [(x, entry), (r_x, reflect)])
    shift = b.phi(d, [(const_float(d, 0.0), entry), (r_shift, reflect)])
    small = b.fcmp("olt", xv, const_float(d, 10.0))
    step = IRBuilder.at_end(fn.append_block("step"))
    nshift = step.fsub(shift, step.fdiv(const_float(d, 1.0), xv))
    nx = step.fadd(xv, const_float(d, 1.0))
    step.br(loop)
    xv.add_incoming(nx, step.block)
    shift.add_incoming(nshift, step.block)
    b.cond_br(small, step.block, tail)
    b = IRBuilder.at_end(tail)
    x2 = b.fdiv(const_float(d, 1.0), b.fmul(xv, xv))
    series = const_float(d, 1 / 132)
    for c in (1 / 240, 1 / 252, 1 / 120, 1 / 12):
        series = b.fsub(const_float(d, c), b.fmul(x2, series))
    series = b.fmul(x2, series)
    log = b.call_intrinsic("llvm.log", [xv], overload_types=[d])
    r = b.fsub(b.fsub(b.fadd(shift, log), b.fdiv(const_float(d, 0.5), xv)), series)
    b.ret(r)


def emit_partial(b: IRBuilder, rule, arg: str, env: dict, ty: T.Type) -> Value:
    """IR for d(result)/d(arg) of ``rule``, with ``env`` mapping argument names (and ``ret``) to IR values or to
    zero-argument callables producing them (so primal values are only materialized when the rule needs them)."""
    return evaluate(rule.partial(arg), LazyEnv(env), IRRuleBackend(b, ty))


class LazyEnv(dict):
    """A rule's environment: argument names -> IR values, each made on first use from ``src``'s zero-argument
    callables (a primal value the reverse sweep reads costs a place on the tape or a recomputation: only the ones
    a partial needs are asked for). Shared by the partials of one call, each value is made once."""

    def __init__(self, src: dict):
        super().__init__()
        self._src = src

    def __contains__(self, key):
        return key in self._src

    def __getitem__(self, key):
        if not dict.__contains__(self, key):
            v = self._src[key]
            dict.__setitem__(self, key, v() if callable(v) else v)
        return dict.__getitem__(self, key)
