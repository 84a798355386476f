"""PyTorch integration: a function compiled by enzcc as ``torch.library`` custom ops with an autograd rule.

    from enzcc_plugins.torch import enzyme
    from enzcc_plugins import In, Out, Scalar, Int
    F = enzyme("f.c", "f", [In("x", shape=("n", "k")), In("w", shape=("k", "m"), const=True),
                            Int("n"), Int("k"), Int("m"), Scalar("alpha"), Out("y", shape=("n", "m"))])
    y = F(x, w, alpha=0.5)            # or F.apply(x, w, 0.5); several outputs come back as a tuple
    y.sum().backward()                # reverse mode: NAME_enzcc_vjp

    F = enzyme("f.c", "f")            # the seed's void f(const T *in, size_t n, T *out): F.apply(x)

``F`` is a ``torch.autograd.Function`` subclass whose forward, backward and forward-mode rule call four
custom ops (``enzcc::<name>_<key>_{primal,vjp,jvp,vjp_jvp}``) with fake (meta) kernels computed from the
declared shapes, so ``torch.compile`` traces through them. Forward mode (``torch.func.jvp``,
``torch.autograd.forward_ad``) uses ``NAME_enzcc_jvp``; the backward is itself differentiable: its derivative
uses ``NAME_enzcc_vjp_jvp`` (forward over reverse, a second library built on first use) and
``NAME_enzcc_jvp``, so double backward, ``gradgradcheck`` and Hessian-vector products work.

Arguments are CPU tensors of the declared dtype (non-contiguous ones are copied); scalars may be Python
numbers or 0-d tensors; free ``Int`` parameters are Python ints. A GPU tensor, a wrong dtype, a wrong rank or
shape is one exception naming the argument.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Callable, Sequence

import torch
from torch.autograd.function import FunctionMeta

from .build import (CompiledKernel, EnzccBuildError, In, Int, Out, PrototypeError, SecondOrderError, ShapeError,
                    load_kernel)

__all__ = ["enzyme", "EnzccBuildError", "PrototypeError", "SecondOrderError", "ShapeError"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_C = {"float32": "float", "float64": "double"}
_counter = itertools.count()
_counter_lock = threading.Lock()


class _KernelMeta(FunctionMeta):
    """Lets the Function class be called like a function: ``F(x, w, alpha=0.5)`` binds the arguments by
    name and calls ``F.apply``."""

    def __call__(cls, *args, **kwargs):
        runner = cls.__dict__.get("_runner")
        if runner is None:  # pragma: no cover - the base class itself
            return super().__call__(*args, **kwargs)
        return runner.call(*args, **kwargs)


class _Runner:
    """The per-kernel state shared by the ops and the autograd rules: address arrays, plans, checks."""

    def __init__(self, kernel: CompiledKernel, out_reshape: Callable | None = None):
        self.k = kernel
        self.name = kernel.name
        self.inputs = kernel.inputs                      # In + Scalar, C order: the tensors of the ops
        self.outputs = kernel.outputs
        self.free = [p.name for p in kernel.free_ints]   # the ints of the ops
        self.n_in = len(self.inputs)
        self.diff = [p.differentiable for p in self.inputs]
        self.dtypes = [_DTYPES[p.dtype] for p in self.inputs]
        self.out_dtypes = [_DTYPES[p.dtype] for p in self.outputs]
        self.arg_pos = {n: i for i, n in enumerate(kernel.arg_names)}
        self._plans: dict = {}
        self._plan_lock = threading.Lock()
        self._slot = []  # per C parameter: ("in", j) / ("out", j) / ("int", j)
        counts = {"in": 0, "out": 0, "int": 0}
        for p in kernel.params:
            kind = "in" if p.kind in ("in", "scalar") else p.kind
            self._slot.append((kind, counts[kind]))
            counts[kind] += 1

    # --- plans and addresses ---

    def plan(self, ins, ints):
        """(Plan, int64 buffer, its address) for inputs of these shapes, memoized."""
        key = (tuple(tuple(t.shape) for t in ins), tuple(int(i) for i in ints))
        got = self._plans.get(key)
        if got is None:
            shapes = {p.name: tuple(t.shape) for p, t in zip(self.inputs, ins)}
            plan = self.k.resolve(shapes, dict(zip(self.free, key[1])))
            buf = (ctypes.c_int64 * max(1, len(plan.int_values)))(*plan.int_values)
            got = (plan, buf, ctypes.addressof(buf))
            with self._plan_lock:
                if len(self._plans) > 4096:
                    self._plans.clear()
                self._plans[key] = got
        return got

    def addresses(self, ins, outs, int_addr) -> list:
        a = []
        for kind, j in self._slot:
            if kind == "in":
                a.append(ins[j].data_ptr())
            elif kind == "out":
                a.append(outs[j].data_ptr())
            else:
                a.append(int_addr + 8 * j)
        return a

    def per_param(self, in_vals, out_vals) -> list:
        """One address per C parameter: in_vals for inputs (None: NULL), out_vals for outputs."""
        d = []
        for kind, j in self._slot:
            v = in_vals[j] if kind == "in" else out_vals[j] if kind == "out" else None
            d.append(0 if v is None else v.data_ptr())
        return d

    def out_shapes(self, plan):
        return [plan.shapes[p.name] for p in self.outputs]

    # --- checks (run in the Function's forward, also under torch.compile on fake tensors) ---

    def check_inputs(self, args):
        """Tensors of the inputs in C order (scalars converted) and the free ints."""
        if len(args) != len(self.k.arg_names):
            raise TypeError(f"{self.name}.apply takes {len(self.k.arg_names)} arguments "
                            f"({', '.join(self.k.arg_names)}), got {len(args)}")
        ins, ints = [], []
        for name, v in zip(self.k.arg_names, args):
            p = self.k.by_name[name]
            if p.kind == "int":
                if isinstance(v, bool) or not isinstance(v, (int, torch.SymInt)):
                    raise TypeError(f"{self.name}: argument {name!r} is an Int, got {type(v).__name__}")
                ints.append(v)
                continue
            want = _DTYPES[p.dtype]
            if p.kind == "scalar" and isinstance(v, (int, float)) and not isinstance(v, bool):
                ins.append(torch.tensor(float(v), dtype=want))
                continue
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"{self.name}: argument {name!r} must be a torch.Tensor, got {type(v).__name__}")
            if v.device.type != "cpu":
                raise RuntimeError(f"{self.name}: argument {name!r} is on {v.device}, but the enzcc-compiled code "
                                   f"runs on the CPU only; move it with .cpu()")
            if v.layout != torch.strided:
                raise TypeError(f"{self.name}: argument {name!r} must be a dense (strided) tensor, got layout "
                                f"{v.layout}")
            if v.dtype != want:
                raise TypeError(f"{self.name}: argument {name!r} has dtype {v.dtype}, but the function takes "
                                f"{_C[p.dtype]} ({want}); convert it with .to({want})")
            if p.kind == "scalar":
                if v.numel() != 1:
                    raise ShapeError(f"{self.name}: argument {name!r} is a scalar, got shape {tuple(v.shape)}")
            ins.append(v)
        self.plan(ins, ints)  # shape errors now, naming the argument
        return ins, ints

    def call(self, *args, **kwargs):
        bound = self.k.bind(*args, **kwargs)
        return self.fn.apply(*(bound[n] for n in self.k.arg_names))


def _register_ops(r: _Runner, opname: str):
    """The four custom ops of one kernel with their real (ctypes) and fake kernels."""
    k = r.k

    def empty(shape, dtype):
        return torch.empty(shape, dtype=dtype)

    def contiguous(ins):
        return [t.contiguous() for t in ins]

    def seeds(cots, shapes):
        # private contiguous copies: Enzyme consumes (zeroes) the seeds
        return [c.clone(memory_format=torch.contiguous_format).reshape(s) for c, s in zip(cots, shapes)]

    # primal
    def primal(ins, ints):
        plan, _, ia = r.plan(ins, ints)
        xs = contiguous(ins)
        outs = [empty(s, dt) for s, dt in zip(r.out_shapes(plan), r.out_dtypes)]
        k.call("primal", r.addresses(xs, outs, ia))
        return outs

    def primal_fake(ins, ints):
        plan = r.plan(ins, ints)[0]
        return [empty(s, dt) for s, dt in zip(r.out_shapes(plan), r.out_dtypes)]

    # reverse: gradients of the inputs (empty for const ones)
    def grads_like(ins, diff):
        return [torch.zeros(t.shape, dtype=t.dtype) if d else torch.empty(0, dtype=t.dtype)
                for t, d in zip(ins, diff)]

    def vjp(ins, cots, ints):
        plan, _, ia = r.plan(ins, ints)
        xs = contiguous(ins)
        shapes = r.out_shapes(plan)
        outs = [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)]
        grads = grads_like(ins, r.diff)
        sd = seeds(cots, shapes)  # kept alive until the call returns
        k.call("vjp", r.addresses(xs, outs, ia), r.per_param([g if d else None for g, d in zip(grads, r.diff)], sd))
        return grads

    def vjp_fake(ins, cots, ints):
        return [torch.empty(t.shape if d else (0,), dtype=t.dtype) for t, d in zip(ins, r.diff)]

    # forward: outputs and their tangents
    def jvp(ins, tans, ints):
        plan, _, ia = r.plan(ins, ints)
        xs = contiguous(ins)
        shapes = r.out_shapes(plan)
        outs = [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)]
        touts = [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)]
        ts = [t.contiguous().reshape(x.shape) if d else None for t, x, d in zip(tans, ins, r.diff)]
        k.call("jvp", r.addresses(xs, outs, ia), r.per_param(ts, touts))
        return outs + touts

    def jvp_fake(ins, tans, ints):
        shapes = r.out_shapes(r.plan(ins, ints)[0])
        return [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)] * 2

    # second order: gradients and their tangents (forward over reverse)
    def vjp_jvp(ins, cots, tins, tcots, ints):
        plan, _, ia = r.plan(ins, ints)
        xs = contiguous(ins)
        shapes = r.out_shapes(plan)
        outs = [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)]
        scratch = [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)]
        grads = grads_like(ins, r.diff)
        tgrads = grads_like(ins, r.diff)
        ts = [t.contiguous().reshape(x.shape) if d else None for t, x, d in zip(tins, ins, r.diff)]
        sd, tsd = seeds(cots, shapes), seeds(tcots, shapes)  # kept alive until the call returns
        k.call("vjp_jvp", r.addresses(xs, outs, ia),
               r.per_param([g if d else None for g, d in zip(grads, r.diff)], sd),
               r.per_param(ts, scratch),
               r.per_param([g if d else None for g, d in zip(tgrads, r.diff)], tsd))
        return grads + tgrads

    def vjp_jvp_fake(ins, cots, tins, tcots, ints):
        return vjp_fake(ins, cots, ints) * 2

    ops = {}
    for entry, impl, fake, schema in [
            ("primal", primal, primal_fake, "(Tensor[] ins, SymInt[] ints) -> Tensor[]"),
            ("vjp", vjp, vjp_fake, "(Tensor[] ins, Tensor[] cots, SymInt[] ints) -> Tensor[]"),
            ("jvp", jvp, jvp_fake, "(Tensor[] ins, Tensor[] tans, SymInt[] ints) -> Tensor[]"),
            ("vjp_jvp", vjp_jvp, vjp_jvp_fake,
             "(Tensor[] ins, Tensor[] cots, Tensor[] tins, Tensor[] tcots, SymInt[] ints) -> Tensor[]")]:
        op = torch.library.custom_op(f"enzcc::{opname}_{entry}", impl, mutates_args=(), schema=schema)
        op.register_fake(fake)
        ops[entry] = op
    return ops


def _zeros_for(tensors, values):
    return [v if v is not None else torch.zeros_like(t) for t, v in zip(tensors, values)]


def _make_functions(r: _Runner, ops, doc: str):
    """The autograd.Function of the kernel and the one of its VJP (so that backward is differentiable)."""
    n_in, n_out = r.n_in, len(r.outputs)
    name = r.name

    def split(args):
        return list(args[:n_in]), list(args[n_in:])

    def no_const_grad(needs, what: str):
        for p, need in zip(r.inputs, needs):
            if need and p.const:
                raise RuntimeError(f"{name}: argument {p.name!r} is declared const=True (no gradient), but "
                                   f"{what} was requested for it; declare it without const=True, or detach it")

    def no_const_tangent(tangents):
        # torch.func.jvp passes zero tangents for tensors it closes over: only a nonzero one is an error
        # (not checked while torch.compile traces: the values are not known then)
        if torch.compiler.is_compiling():
            return
        for p, t in zip(r.inputs, tangents):
            if p.const and t is not None and bool(torch.any(t != 0)):
                raise RuntimeError(f"{name}: argument {p.name!r} is declared const=True (no derivative), but a "
                                   f"nonzero tangent was given for it")

    class VJP(torch.autograd.Function):
        """grads = J(ins)^T cots: differentiable by forward over reverse (H v) and forward mode (J v)."""

        @staticmethod
        def forward(*args):
            ins, rest = split(args)
            cots, ints = rest[:n_out], rest[n_out:]
            grads = ops["vjp"](ins, cots, ints)
            return tuple(g for g, d in zip(grads, r.diff) if d)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ins, rest = split(inputs)
            ctx.ints = rest[n_out:]
            ctx.save_for_backward(*ins, *rest[:n_out])
            ctx.save_for_forward(*ins, *rest[:n_out])

        @staticmethod
        def backward(ctx, *ggrads):
            saved = ctx.saved_tensors
            ins, cots = list(saved[:n_in]), list(saved[n_in:])
            no_const_grad(ctx.needs_input_grad[:n_in], "a second derivative")
            it = iter(ggrads)
            v = [next(it) if d else None for d in r.diff]
            v = [g if (g is not None or not d) else torch.zeros_like(t) for g, t, d in zip(v, ins, r.diff)]
            vv = [g if g is not None else torch.empty(0, dtype=t.dtype) for g, t in zip(v, ins)]
            d_ins = [None] * n_in
            if any(ctx.needs_input_grad[:n_in]):
                zero_cots = [torch.zeros_like(c) for c in cots]
                res = ops["vjp_jvp"](ins, cots, vv, zero_cots, ctx.ints)
                d_ins = [t if (d and need) else None
                         for t, d, need in zip(res[n_in:], r.diff, ctx.needs_input_grad[:n_in])]
            d_cots = [None] * n_out
            if any(ctx.needs_input_grad[n_in:n_in + n_out]):
                d_cots = list(ops["jvp"](ins, vv, ctx.ints)[n_out:])
            return (*d_ins, *d_cots, *([None] * len(ctx.ints)))

        @staticmethod
        def jvp(ctx, *tangents):
            saved = ctx.saved_tensors
            ins, cots = list(saved[:n_in]), list(saved[n_in:])
            t_ins, t_cots = list(tangents[:n_in]), list(tangents[n_in:n_in + n_out])
            no_const_tangent(t_ins)
            t_ins = [t if t is not None else (torch.zeros_like(x) if d else torch.empty(0, dtype=x.dtype))
                     for t, x, d in zip(t_ins, ins, r.diff)]
            t_cots = _zeros_for(cots, t_cots)
            res = ops["vjp_jvp"](ins, cots, t_ins, t_cots, ctx.ints)
            return tuple(t for t, d in zip(res[n_in:], r.diff) if d)

    class Fn(torch.autograd.Function, metaclass=_KernelMeta):
        @staticmethod
        def forward(*args):
            ins, ints = r.check_inputs(args)
            outs = ops["primal"](ins, ints)
            return outs[0] if n_out == 1 else tuple(outs)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ins, ints = r.check_inputs(inputs)
            ctx.ints = ints
            ctx.save_for_backward(*ins)
            ctx.save_for_forward(*ins)
            ctx.arg_index = [r.arg_pos[p.name] for p in r.inputs]

        @staticmethod
        def backward(ctx, *gouts):
            ins = list(ctx.saved_tensors)
            needs = [ctx.needs_input_grad[i] for i in ctx.arg_index]
            no_const_grad(needs, "a gradient")
            grads_by_input = [None] * n_in
            if any(needs):
                plan = r.plan(ins, ctx.ints)[0]
                cots = [g if g is not None else torch.zeros(s, dtype=dt)
                        for g, s, dt in zip(gouts, r.out_shapes(plan), r.out_dtypes)]
                got = VJP.apply(*ins, *cots, *ctx.ints)
                if not isinstance(got, tuple):
                    got = (got,)
                it = iter(got)
                grads_by_input = [next(it) if d else None for d in r.diff]
            out = [None] * len(ctx.needs_input_grad)
            for i, g, need in zip(ctx.arg_index, grads_by_input, needs):
                out[i] = g if need else None
            return tuple(out)

        @staticmethod
        def jvp(ctx, *tangents):
            ins = list(ctx.saved_tensors)
            t_ins = [tangents[i] for i in ctx.arg_index]
            no_const_tangent(t_ins)
            t_ins = [(t.reshape(x.shape) if t is not None else torch.zeros_like(x)) if d
                     else torch.empty(0, dtype=x.dtype) for t, x, d in zip(t_ins, ins, r.diff)]
            res = ops["jvp"](ins, t_ins, ctx.ints)
            touts = res[n_out:]
            return touts[0] if n_out == 1 else tuple(touts)

    cname = f"Enzyme_{name}"
    Fn.__name__ = Fn.__qualname__ = cname
    Fn.__doc__ = doc
    Fn.__module__ = __name__
    VJP.__name__ = VJP.__qualname__ = f"{cname}_vjp"
    Fn._runner = r
    Fn.kernel = r.k
    Fn.ops = ops
    return Fn


def enzyme(source, name: str, params: Sequence | None = None, dtype=None, *,
           out_size: int | Callable[[int], int] | None = None, cflags: Sequence[str] = (),
           compiler: str | None = None, cache=None, lang: str | None = None) -> type[torch.autograd.Function]:
    """Compile ``name`` from ``source`` (C, C++, Fortran, Rust) with its derivatives and return a
    ``torch.autograd.Function`` subclass ``F``: ``F.apply(*args)`` (arguments in the C order of the inputs,
    scalars and free ints) or ``F(*args, **kwargs)``; one output is returned as a tensor, several as a tuple.

    params: the declaration (:func:`enzcc_plugins.In`, ``Out``, ``Scalar``, ``Int``; plugins/ABI.md); a dtype
    in its place is the seed's ``enzyme(source, name, dtype)``. Without a declaration, the seed's ``void f(const T *in, size_t n, T *out)``: ``F.apply(x)`` flattens ``x`` (``n = x.numel()``)
    and returns ``x``'s shape, or 1-D of ``out_size(n)`` when out_size (an int or ``n -> int``) is given.
    dtype: the default element type ('float32'/'float64' or a torch dtype; default: the prototype's).
    cflags, compiler, cache, lang: as for :func:`enzcc_plugins.load_kernel`. Raises
    :class:`EnzccBuildError` (with enzcc's one-line error) / :class:`PrototypeError` at load time.
    """
    if params is not None and not isinstance(params, (list, tuple)):
        if dtype is not None:
            raise TypeError("give the dtype once: enzyme(source, name, params, dtype) or enzyme(source, name, dtype)")
        params, dtype = None, params  # the seed's enzyme(source, name, dtype)
    if params is None:
        params = _seed_params(dtype, out_size)
    elif out_size is not None:
        raise TypeError("out_size is for the seed's one-array signature; give the output's shape in Out(...)")
    kernel = load_kernel(source, name, params, dtype, cflags=cflags, compiler=compiler, cache=cache, lang=lang)
    r = _Runner(kernel)
    with _counter_lock:
        serial = next(_counter)
    ops = _register_ops(r, f"{name}_{kernel.library.stem.rsplit('-', 1)[-1][:10]}_{serial}")
    doc = f"{name} from {kernel.source}, compiled by enzcc; derivatives by enzcc. Arguments: " + \
          ", ".join(f"{p.name}: {p.describe()}" for p in kernel.params if p.name in kernel.arg_names)
    r.fn = _make_functions(r, ops, doc)
    return r.fn


def _seed_params(dtype, out_size):
    def out_shape(x, n):
        if out_size is None:
            return x.shape
        m = out_size(n) if callable(out_size) else out_size
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise ValueError(f"out_size({n}) returned {m!r}, not a non-negative int")
        return (m,)
    if out_size is not None and not callable(out_size) and (
            not isinstance(out_size, int) or isinstance(out_size, bool) or out_size < 0):
        raise ValueError(f"out_size must be a non-negative int or a callable n -> int, got {out_size!r}")
    return [In("x", dtype=dtype), Int("n", lambda x: x.size), Out("y", shape=out_shape, dtype=dtype)]
