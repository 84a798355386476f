"""PyTorch integration: a function compiled by enzcc as ``torch.library`` custom ops with autograd kernels.

    from enzcc_plugins.torch import enzyme
    from enzcc_plugins import In, Out, Scalar, Int
    F = enzyme("f.c", "f", [In("x", shape=("n", "k")), In("w", shape=("k", "m"), const=True),
                            Int("n"), Int("k"), Int("m"), Scalar("alpha"), Out("y", shape=("n", "m"))])
    y = F(x, w, alpha=0.5)            # or F.apply(x, w, 0.5); several outputs come back as a tuple
    y.sum().backward()                # reverse mode: NAME_enzcc_vjp

    F = enzyme("f.c", "f")            # the seed's void f(const T *in, size_t n, T *out): F.apply(x)

Each kernel becomes five custom ops, ``torch.ops.<namespace>.<name>_{primal,vjp,jvp,vjp_jvp,jvp_jvp}`` (the stable
name ``namespace::name``: ``enzcc::<function>`` unless given), with CPU
kernels calling the library through ctypes and fake kernels computed from the declared shapes, so
``torch.compile`` captures them in its graph (``fullgraph=True`` works). Their Autograd kernels are
``autograd.Function``s: the primal's backward is the vjp op and its forward-mode rule the jvp op
(``torch.func.jvp``, ``torch.autograd.forward_ad``); the vjp op's backward uses ``NAME_enzcc_vjp_jvp``
(forward over reverse, a second library built on first use) and the jvp op, so double backward,
``gradgradcheck``, Hessian-vector products and ``torch.func.hessian`` work. ``torch.func.vmap`` of any op is
one native call for the whole batch (a C loop over the examples, plugins/batch.py; shared inputs are not
copied per example), and where only the tangents of the jvp op or the cotangents of the vjp op are batched
(``torch.func.jacfwd``, ``jacrev``) 8, 4 or 2 of them per run through the vector-mode entry points
(``NAME_enzcc_jvp_v<W>``, ``_vjp_v<W>``; plugins/ABI.md). Nested vmaps (the inner level), the checked mode and a
machine without a C compiler call the op once per example.

Arguments are CPU tensors of the declared dtype (non-contiguous ones are copied); scalars may be Python
numbers or 0-d tensors; free ``Int`` parameters are Python ints. A GPU tensor, a wrong dtype, a wrong rank or
shape is one exception naming the argument; so is a gradient asked of an input declared ``const=True``.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import threading
from typing import Callable, Sequence

import torch
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

from . import batch, ship, tape
from .build import (VECTOR_WIDTHS, CompiledKernel, EnzccBuildError, In, Int, Out, PrototypeError, SecondOrderError,
                    ShapeError, load_kernel, memoise_ops)

from .ship import NameClashError, ShippedLibraryError

__all__ = ["enzyme", "load_library", "EnzymeFunction", "EnzccBuildError", "NameClashError", "PrototypeError",
           "SecondOrderError", "ShapeError", "ShippedLibraryError"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
SPLIT_DROPS = 4
"""Forwards in a row whose tapes were freed without a backward, after which forwards stop keeping tapes until
a backward comes (plugins/tape.py)."""
_C = {"float32": "float", "float64": "double"}


class _Runner:
    """The per-kernel state shared by the ops and the autograd rules: address arrays, plans, checks."""

    def __init__(self, kernel: CompiledKernel):
        self.k = kernel
        self.name = kernel.name
        self.inputs = kernel.inputs                      # In + Scalar, C order: the tensors of the ops
        self.outputs = kernel.outputs
        self.free = [p.name for p in kernel.free_ints]   # the ints of the ops
        self.n_in = len(self.inputs)
        self.diff = [p.differentiable for p in self.inputs]
        self.dtypes = [_DTYPES[p.dtype] for p in self.inputs]
        self.out_dtypes = [_DTYPES[p.dtype] for p in self.outputs]
        self._plans: dict = {}
        self._plan_lock = threading.Lock()
        self._scratch = threading.local()
        self._slot = []  # per C parameter: ("in", j) / ("out", j) / ("int", j)
        counts = {"in": 0, "out": 0, "int": 0}
        for p in kernel.params:
            kind = "in" if p.kind in ("in", "scalar") else p.kind
            self._slot.append((kind, counts[kind]))
            counts[kind] += 1

    # --- plans and addresses ---

    def plan(self, ins, ints):
        """(Plan, int64 buffer, its address) for inputs of these shapes, memoized."""
        key = (tuple(tuple(t.shape) for t in ins), tuple(ints))
        try:
            got = self._plans.get(key)
        except TypeError:  # symbolic sizes (torch.compile, dynamic shapes): only the fake kernels get here
            shapes = {p.name: tuple(t.shape) for p, t in zip(self.inputs, ins)}
            return self.k.resolve(shapes, dict(zip(self.free, ints))), None, 0
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

    def scratch(self, plan, role: str) -> list:
        """Output-shaped buffers whose contents do not matter (the VJP writes the primal outputs), kept per
        thread and shape: large ones would otherwise cost fresh pages on every backward."""
        cache = getattr(self._scratch, "buffers", None)
        if cache is None:
            cache = self._scratch.buffers = {}
        key = (role, tuple(plan.shapes[p.name] for p in self.outputs))
        bufs = cache.get(key)
        if bufs is None:
            if len(cache) >= 8:
                cache.clear()
            bufs = cache[key] = [torch.empty(s, dtype=dt) for s, dt in zip(self.out_shapes(plan), self.out_dtypes)]
        return bufs

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

    def vector_entries(self, entry: str):
        """The kernel's vector-mode versions of ``entry`` (jvp, vjp, vjp_jvp), or None when enzcc cannot build
        them (the examples of a vmap then go through the batch loop)."""
        try:
            return self.k.vector(entry)
        except EnzccBuildError:
            return None

    def out_shapes(self, plan):
        return [plan.shapes[p.name] for p in self.outputs]

    # --- checks (run by apply; while torch.compile traces, the fake kernels check the shapes) ---

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
        if not torch.compiler.is_compiling() and not torch.jit.is_tracing():
            self.plan(ins, ints)  # shape errors now, naming the argument (else the op's kernels check them)
        return ins, ints


def _register_ops(r: _Runner, qualname: str):
    """The five custom ops of one kernel with their real (ctypes) and fake kernels, named
    ``namespace::<name>_<entry>`` from the stable name ``namespace::<name>``."""
    k = r.k
    ns, opname = qualname.split("::")

    def empty(shape, dtype):
        return torch.empty(shape, dtype=dtype)

    def contiguous(ins):
        return [t.contiguous() for t in ins]

    def tangents(vals, ins):
        # contiguous, in the inputs' shapes; None for the inputs that take no derivative
        return [v.contiguous().reshape(x.shape) if d else None for v, x, d in zip(vals, ins, r.diff)]

    def seeds(cots, shapes):
        # private contiguous copies: Enzyme consumes (zeroes) the seeds
        return [c.clone(memory_format=torch.contiguous_format).reshape(s) for c, s in zip(cots, shapes)]

    # primal
    def primal(ins, ints):
        plan, _, ia = r.plan(ins, ints)
        xs = contiguous(ins)
        outs = [empty(s, dt) for s, dt in zip(r.out_shapes(plan), r.out_dtypes)]
        k.call("primal", r.addresses(xs, outs, ia), plan=plan)
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
        outs = r.scratch(plan, "out")  # the primal outputs are scratch here
        grads = grads_like(ins, r.diff)
        sd = seeds(cots, shapes)  # kept alive until the call returns
        k.call("vjp", r.addresses(xs, outs, ia), r.per_param([g if d else None for g, d in zip(grads, r.diff)], sd),
               plan=plan)
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
        ts = tangents(tans, ins)
        k.call("jvp", r.addresses(xs, outs, ia), r.per_param(ts, touts), plan=plan)
        return outs + touts

    def jvp_fake(ins, tans, ints):
        shapes = r.out_shapes(r.plan(ins, ints)[0])
        return [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)] * 2

    # second order: gradients and their tangents (forward over reverse)
    def vjp_jvp(ins, cots, tins, tcots, ints):
        plan, _, ia = r.plan(ins, ints)
        xs = contiguous(ins)
        shapes = r.out_shapes(plan)
        outs, scratch = r.scratch(plan, "out"), r.scratch(plan, "tangent")
        grads = grads_like(ins, r.diff)
        tgrads = grads_like(ins, r.diff)
        ts = tangents(tins, ins)
        sd, tsd = seeds(cots, shapes), seeds(tcots, shapes)  # kept alive until the call returns
        k.call("vjp_jvp", r.addresses(xs, outs, ia),
               r.per_param([g if d else None for g, d in zip(grads, r.diff)], sd),
               r.per_param(ts, scratch),
               r.per_param([g if d else None for g, d in zip(tgrads, r.diff)], tsd), plan=plan)
        return grads + tgrads

    def vjp_jvp_fake(ins, cots, tins, tcots, ints):
        return vjp_fake(ins, cots, ints) * 2

    # second order: the second tangents of the outputs (forward over forward), H[t, s] + J u
    def jvp_jvp(ins, tans, sins, utans, ints):
        plan, _, ia = r.plan(ins, ints)
        xs = contiguous(ins)
        shapes = r.out_shapes(plan)
        outs, touts, souts = r.scratch(plan, "out"), r.scratch(plan, "tangent"), r.scratch(plan, "direction")
        res = [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)]
        ts, ss, us = tangents(tans, ins), tangents(sins, ins), tangents(utans, ins)  # alive until the call returns
        k.call("jvp_jvp", r.addresses(xs, outs, ia), r.per_param(ts, touts), r.per_param(ss, souts),
               r.per_param(us, res), plan=plan)
        return res

    def jvp_jvp_fake(ins, tans, sins, utans, ints):
        shapes = r.out_shapes(r.plan(ins, ints)[0])
        return [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)]

    impls = {"primal": (primal, primal_fake, "(Tensor[] ins, SymInt[] ints) -> Tensor[]"),
             "vjp": (vjp, vjp_fake, "(Tensor[] ins, Tensor[] cots, SymInt[] ints) -> Tensor[]"),
             "jvp": (jvp, jvp_fake, "(Tensor[] ins, Tensor[] tans, SymInt[] ints) -> Tensor[]"),
             "vjp_jvp": (vjp_jvp, vjp_jvp_fake,
                         "(Tensor[] ins, Tensor[] cots, Tensor[] tins, Tensor[] tcots, SymInt[] ints) -> Tensor[]"),
             "jvp_jvp": (jvp_jvp, jvp_jvp_fake,
                         "(Tensor[] ins, Tensor[] tans, Tensor[] sins, Tensor[] utans, SymInt[] ints) -> Tensor[]")}
    lib = torch.library.Library(ns, "FRAGMENT")
    ops = {}
    for entry, (impl, fake, schema) in impls.items():
        _define(lib, qualname, f"{opname}_{entry}{schema}")
        lib.impl(f"{opname}_{entry}", impl, "CPU")
        torch.library.register_fake(f"{ns}::{opname}_{entry}", fake, lib=lib)
        ops[entry] = getattr(getattr(torch.ops, ns), f"{opname}_{entry}").default
    # torch.func.vmap: the whole batch in one native call (a C loop over the examples, plugins/batch.py); where
    # only the tangents (cotangents) of the jvp (vjp) op are batched, as in torch.func.jacfwd (jacrev): vector
    # mode, W of them per run of the function
    batched_rule = _batched_vmap(r, ops)

    def example(vals, dims, b):
        """Example b of tensors batched along ``dims`` (None: shared by every example)."""
        return [v if vd is None else v.select(vd, b) for v, vd in zip(vals, dims)]

    def vector_calls(entry, B, run_lanes, run_one) -> None:
        """Examples 0..B-1: W at a time through NAME_enzcc_<entry>_v<W>, the rest one by one."""
        b = 0
        for w in reversed(VECTOR_WIDTHS):
            while b + w <= B:
                k.call(f"{entry}_v{w}", *run_lanes(range(b, b + w)))
                b += w
        for b in range(b, B):
            k.call(entry, *run_one(b))

    def second_order_rule():
        """vjp_jvp's vmap rule: when only the tangents are batched (the inputs and the seeds shared, as in
        torch.func.hessian of a function with one result), W directions per run of NAME_enzcc_vjp_jvp_v<W>."""
        sequential = batched_rule("vjp_jvp")

        def rule(info, in_dims, ins, cots, tins, tcots, ints):
            B = info.batch_size
            dims = [d if isinstance(d, (list, tuple)) else [d] * len(x)
                    for d, x in zip(in_dims[:4], (ins, cots, tins, tcots))]
            wrapped = torch._C._functorch.is_functorch_wrapped_tensor
            if B < 2 or any(d is not None for d in (*dims[0], *dims[1])) or \
                    any(wrapped(t) for t in (*ins, *cots, *tins, *tcots)) or r.vector_entries("vjp_jvp") is None:
                return sequential(info, in_dims, ins, cots, tins, tcots, ints)
            plan, _, ia = r.plan(ins, ints)
            xs = contiguous(ins)
            shapes = r.out_shapes(plan)
            outs = r.scratch(plan, "out")
            grads, tgrads = ([torch.zeros((B,) + tuple(t.shape), dtype=t.dtype) if d else
                              torch.empty((B, 0), dtype=t.dtype) for t, d in zip(ins, r.diff)] for _ in range(2))
            kept = []  # seeds, tangents and scratch stay alive until the calls return

            def shared(b):  # the gradient (written once per run, into item b's) and a copy of the seeds to consume
                kept.append(seeds(cots, shapes))
                return r.per_param([g[b] if d else None for g, d in zip(grads, r.diff)], kept[-1])

            def lane(b):
                ts = tangents(example(tins, dims[2], b), ins)
                scratch = [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)]
                tsd = seeds(example(tcots, dims[3], b), shapes)
                kept.append((ts, scratch, tsd))
                return r.per_param(ts, scratch), r.per_param([g[b] if d else None for g, d in zip(tgrads, r.diff)],
                                                             tsd)
            a = r.addresses(xs, outs, ia)

            def run_lanes(bs):
                lanes = [lane(b) for b in bs]
                return a, shared(bs[0]), [p for ta, _ in lanes for p in ta], [p for _, td in lanes for p in td]

            def run_one(b):
                ta, td = lane(b)
                return a, shared(b), ta, td
            vector_calls("vjp_jvp", B, run_lanes, run_one)
            for g in grads:  # every run wrote the same gradient into its first item
                if g.numel():
                    g.copy_(g[:1].expand_as(g))
            return grads + tgrads, [0] * (2 * len(grads))
        return rule

    def vector_rule(entry):
        sequential = batched_rule(entry)

        def rule(info, in_dims, ins, vals, ints):
            B = info.batch_size
            ins_dims, val_dims = (d if isinstance(d, (list, tuple)) else [d] * len(x)
                                  for d, x in zip(in_dims[:2], (ins, vals)))
            wrapped = torch._C._functorch.is_functorch_wrapped_tensor
            if B < 2 or any(d is not None for d in ins_dims) or any(wrapped(t) for t in (*ins, *vals)) or \
                    r.vector_entries(entry) is None:  # (tensors of another transform: through the dispatcher)
                return sequential(info, in_dims, ins, vals, ints)
            plan, _, ia = r.plan(ins, ints)
            xs = contiguous(ins)
            shapes = r.out_shapes(plan)
            kept = []  # each example's tangents or seeds stay alive until the calls return
            if entry == "jvp":
                outs = [empty(s, dt) for s, dt in zip(shapes, r.out_dtypes)]
                touts = [empty((B,) + tuple(s), dt) for s, dt in zip(shapes, r.out_dtypes)]

                def tangent_lane(b):
                    kept.append(tangents(example(vals, val_dims, b), ins))
                    return r.per_param(kept[-1], [t[b] for t in touts])
                a = r.addresses(xs, outs, ia)
                vector_calls("jvp", B, lambda bs: (a, [p for b in bs for p in tangent_lane(b)]),
                             lambda b: (a, tangent_lane(b)))
                return outs + touts, [None] * len(outs) + [0] * len(touts)
            outs = r.scratch(plan, "out")
            grads = [torch.zeros((B,) + tuple(t.shape), dtype=t.dtype) if d else torch.empty((B, 0), dtype=t.dtype)
                     for t, d in zip(ins, r.diff)]

            def seed_lane(b):
                kept.append(seeds(example(vals, val_dims, b), shapes))  # (private copies: Enzyme consumes them)
                return r.per_param([g[b] if d else None for g, d in zip(grads, r.diff)], kept[-1])
            a = r.addresses(xs, outs, ia)
            vector_calls("vjp", B, lambda bs: (a, [p for b in bs for p in seed_lane(b)]),
                         lambda b: (a, seed_lane(b)))
            return grads, [0] * len(grads)
        return rule

    r.vmap_rules = {}  # (also the autograd.Functions' vmap rules: _register_autograd)
    for entry in impls:
        rule = vector_rule(entry) if entry in ("jvp", "vjp") else second_order_rule() if entry == "vjp_jvp" else \
            batched_rule(entry)
        torch.library.register_vmap(f"{ns}::{opname}_{entry}", rule, lib=lib)
        r.vmap_rules[entry] = rule
    return lib, ops, {entry: impl for entry, (impl, _, _) in impls.items()}


def _define(lib, qualname: str, schema: str) -> None:
    """Define one op; a name that PyTorch already knows (defined by something other than enzcc_plugins in this
    process) is a NameClashError, not PyTorch's registration error."""
    try:
        lib.define(schema)
    except RuntimeError as e:
        if "already" not in str(e) and "multiple" not in str(e).lower():
            raise
        raise NameClashError(f"PyTorch op {qualname!r}: {schema.split('(')[0]} is already defined in this process "
                             f"by something else; choose another op_name= (or namespace=)") from None


def _batched_vmap(r: _Runner, ops):
    """``rule(entry)``: torch.func.vmap of the op ``entry`` as one native call for the whole batch
    (plugins/batch.py): each batched tensor moved to a leading batch axis and made contiguous (example b at
    b * its size), a shared one passed once (stride 0: not copied per example), outputs and gradients allocated
    for the batch, the seeds (which Enzyme consumes) copied per example, the primal outputs that the derivative
    entry points write as scratch shared. Tensors of another transform level (nested vmap, vmap inside grad),
    the checked mode and a machine without a C compiler take the op once per example instead."""
    k = r.k
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor

    def per_example_bytes(t) -> int:
        return math.prod(t.shape[1:]) * t.element_size()

    def lead(t, d, shape):
        """(tensor, (address, stride)): ``t`` with its batch axis ``d`` first, contiguous, each example of
        ``shape``; shared (d None) as it is."""
        if d is None:
            c = t.contiguous().reshape(shape)
            return c, (c.data_ptr(), 0)
        c = t.movedim(d, 0).contiguous()
        c = c.reshape((c.shape[0],) + tuple(shape))
        return c, (c.data_ptr(), per_example_bytes(c))

    def new(B, shape, dtype, zero=False):
        t = (torch.zeros if zero else torch.empty)((B,) + tuple(shape), dtype=dtype)
        return t, (t.data_ptr(), per_example_bytes(t))

    def seed(B, c, d, shape):
        """A private copy per example (Enzyme zeroes the seed it is given, so a shared one cannot be reused)."""
        c = c.reshape(shape).unsqueeze(0).expand((B,) + tuple(shape)) if d is None else \
            c.movedim(d, 0).reshape((B,) + tuple(shape))
        c = c.clone(memory_format=torch.contiguous_format)
        return c, (c.data_ptr(), per_example_bytes(c))

    def run(entry, B, lists, dims, ints):
        ins, ins_d = lists[0], dims[0]
        ex = [x if d is None else x.select(d, 0) for x, d in zip(ins, ins_d)]  # example 0: the shapes
        plan, _, ia = r.plan(ex, ints)
        shapes = r.out_shapes(plan)
        xshapes = [tuple(x.shape) for x in ex]
        kept = []  # every buffer stays alive until the call returns

        def keep(pair):
            kept.append(pair[0])
            return pair[1]

        def slots(in_e, out_e):
            return [in_e[j] if kind == "in" else out_e[j] if kind == "out" else (ia + 8 * j, 0)
                    for kind, j in r._slot]

        def per(in_e, out_e):
            return [(in_e[j] if kind == "in" else out_e[j] if kind == "out" else None) or (0, 0)
                    for kind, j in r._slot]

        def tangent_entries(vals, vd):
            return [keep(lead(v, d, s)) if diff else None for v, d, s, diff in zip(vals, vd, xshapes, r.diff)]

        def seed_entries(cots, cd):
            return [keep(seed(B, c, d, s)) for c, d, s in zip(cots, cd, shapes)]

        def grads_new():
            ts = [new(B, s, dt, True) if diff else new(B, (0,), dt) for s, dt, diff in zip(xshapes, r.dtypes, r.diff)]
            return [t for t, _ in ts], [e if diff else None for (_, e), diff in zip(ts, r.diff)]

        def shared(bufs):
            kept.extend(bufs)
            return [(b.data_ptr(), 0) for b in bufs]

        xs = [keep(lead(x, d, s)) for x, d, s in zip(ins, ins_d, xshapes)]
        if entry == "primal":
            outs = [new(B, s, dt) for s, dt in zip(shapes, r.out_dtypes)]
            arrays, results = [slots(xs, [e for _, e in outs])], [t for t, _ in outs]
        elif entry == "vjp":
            grads, ge = grads_new()
            arrays = [slots(xs, shared(r.scratch(plan, "out"))), per(ge, seed_entries(lists[1], dims[1]))]
            results = grads
        elif entry == "jvp":
            outs = [new(B, s, dt) for s, dt in zip(shapes, r.out_dtypes)]
            touts = [new(B, s, dt) for s, dt in zip(shapes, r.out_dtypes)]
            arrays = [slots(xs, [e for _, e in outs]), per(tangent_entries(lists[1], dims[1]), [e for _, e in touts])]
            results = [t for t, _ in outs] + [t for t, _ in touts]
        elif entry == "vjp_jvp":
            (grads, ge), (tgrads, tge) = grads_new(), grads_new()
            arrays = [slots(xs, shared(r.scratch(plan, "out"))), per(ge, seed_entries(lists[1], dims[1])),
                      per(tangent_entries(lists[2], dims[2]), shared(r.scratch(plan, "tangent"))),
                      per(tge, seed_entries(lists[3], dims[3]))]
            results = grads + tgrads
        else:  # jvp_jvp
            res = [new(B, s, dt) for s, dt in zip(shapes, r.out_dtypes)]
            arrays = [slots(xs, shared(r.scratch(plan, "out"))),
                      per(tangent_entries(lists[1], dims[1]), shared(r.scratch(plan, "tangent"))),
                      per(tangent_entries(lists[2], dims[2]), shared(r.scratch(plan, "direction"))),
                      per(tangent_entries(lists[3], dims[3]), [e for _, e in res])]
            results = [t for t, _ in res]
        batch.batched_call(k.address(entry), arrays, B)
        return results, [0] * len(results)

    def direct_primal(ins, ints):
        """The primal op under one torch.func.vmap (the only transform), without the dispatcher's vmap machinery
        (a pytree round trip that costs more than a small batch's work): the inputs unwrapped at the vmap's
        level, one native call, the outputs wrapped with their batch dimension 0. None where it does not apply
        (a nested vmap, the checked mode, no batch loop): then the op goes through the dispatcher."""
        stack = retrieve_all_functorch_interpreters()
        if len(stack) != 1 or k.checked or not batch.available():
            return None
        level, B = stack[0].level(), stack[0].batch_size()
        vals, dims = zip(*[torch._C._functorch._unwrap_batched(t, level) for t in ins]) if ins else ((), ())
        if any(wrapped(t) for t in vals):
            return None
        if B == 0:
            raise ValueError("enzcc_plugins: vmap over an empty batch")
        outs, _ = run("primal", B, [list(vals)], [list(dims)], ints)
        return [torch._C._functorch._add_batch_dim(o, 0, level) for o in outs]
    r.vmap_primal = direct_primal

    def rule_for(entry):
        sequential = _sequential_vmap(ops[entry])

        def rule(info, in_dims, *args):
            B = info.batch_size
            if B == 0:
                raise ValueError("enzcc_plugins: vmap over an empty batch")
            lists, ints = args[:-1], args[-1]
            dims = [d if isinstance(d, (list, tuple)) else [d] * len(x) for d, x in zip(in_dims[:-1], lists)]
            if k.checked or any(wrapped(t) for x in lists for t in x) or not batch.available():
                return sequential(info, in_dims, *args)
            return run(entry, B, lists, dims, ints)
        return rule
    return rule_for


def _sequential_vmap(op):
    """torch.func.vmap of an op: one call per batch element, results stacked on dimension 0 (the compiled
    function knows nothing of batches)."""
    def rule(info, in_dims, *args):
        per_example = []
        for b in range(info.batch_size):
            call = []
            for a, d in zip(args, in_dims):
                if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
                    ds = d if isinstance(d, (list, tuple)) else [d] * len(a)
                    call.append([t if dd is None else t.select(dd, b) for t, dd in zip(a, ds)])
                else:
                    call.append(a)
            per_example.append(op(*call))
        if not per_example:
            raise ValueError("enzcc_plugins: vmap over an empty batch")
        outs = [torch.stack([r[i] for r in per_example]) for i in range(len(per_example[0]))]
        return outs, [0] * len(outs)
    return rule


def _plain_eager(args) -> bool:
    """True when the ops' CPU kernels can be called directly: ordinary CPU tensors, no torch.compile tracing,
    no torch.func transform, no dispatch mode (fake tensors, functionalization)."""
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return False
    if torch.utils._python_dispatch._get_current_dispatch_mode() is not None:
        return False
    return all(type(t) in (torch.Tensor, torch.nn.Parameter) for a in args if isinstance(a, list)
               for t in a if isinstance(t, torch.Tensor))


def _functorch_active() -> bool:
    """True inside torch.func transforms (jvp, grad, vmap, hessian...): they take autograd.Functions directly,
    not ops whose Autograd kernel is one."""
    return not torch.compiler.is_compiling() and torch._C._functorch.peek_interpreter_stack() is not None


def _vmap_only(ins) -> bool:
    """Inside torch.func.vmap alone (every transform on the stack a vmap, no forward-mode level) with nothing
    that autograd records (grad mode off, or no input whose unwrapped tensor requires a gradient): the op can
    go to its vmap rule directly, without the autograd.Function that functorch would run its forward through
    (most of a small batch's time)."""
    if torch.autograd.forward_ad._current_level >= 0:
        return False
    vmap = torch._C._functorch.TransformType.Vmap
    if any(i.key() != vmap for i in retrieve_all_functorch_interpreters()):
        return False
    if not torch.is_grad_enabled():
        return True
    wrapped, unwrap = torch._C._functorch.is_functorch_wrapped_tensor, torch._C._functorch.get_unwrapped
    for t in ins:
        while wrapped(t):
            t = unwrap(t)
        if t.requires_grad:
            return False
    return True


def _apply(fn, *args):
    """``fn.apply(*args)`` without the per-call ``inspect.signature`` binding of ``Function.apply`` (our forwards
    take ``*args`` and have no defaults) when no torch.func transform is active."""
    if torch._C._are_functorch_transforms_active():
        return fn.apply(*args)
    return super(torch.autograd.Function, fn).apply(*args)


def _below_autograd(op, *args):
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def _register_autograd(r: _Runner, lib, qualname: str, ops, impls) -> None:
    """Autograd kernels of the ops: the primal's derivatives are the vjp op (reverse) and the jvp op
    (forward); the vjp op's are vjp_jvp (H v) and jvp (J v), so backward is differentiable; the jvp and
    vjp_jvp ops are not differentiated further (a third derivative is a clear error)."""
    n_in, n_out = r.n_in, len(r.outputs)
    name = r.name
    diff_idx = [i for i, d in enumerate(r.diff) if d]

    def no_const_grad(needs, what: str):
        for p, need in zip(r.inputs, needs):
            if need and p.const:
                raise RuntimeError(f"{name}: argument {p.name!r} is declared const=True (no gradient), but "
                                   f"{what} was requested for it; declare it without const=True, or detach it")

    def input_grads(ctx, gouts, vjp):
        """A backward's results (Primal's, SplitPrimal's): the gradients autograd asks for, from ``vjp(ins,
        cots)`` on the saved inputs and the cotangents (zeros for an output that got none); None for the
        integers and for inputs that need none."""
        ins = list(ctx.saved_tensors)
        needs = ctx.needs_input_grad[:n_in]
        no_const_grad(needs, "a gradient")
        grads = [None] * n_in
        if any(needs):
            plan = r.plan(ins, ctx.ints)[0]
            cots = [g if g is not None else torch.zeros(s, dtype=dt)
                    for g, s, dt in zip(gouts, r.out_shapes(plan), r.out_dtypes)]
            got = vjp(ins, cots)
            grads = [g if (d and need) else None for g, d, need in zip(got, r.diff, needs)]
        return (*grads, *([None] * len(ctx.ints)))

    def no_const_tangent(tangents):
        # torch.func.jvp passes zero tangents for tensors it closes over: only a nonzero one is an error
        # (not checked while torch.compile traces: the values are not known then)
        if torch.compiler.is_compiling():
            return
        for p, t in zip(r.inputs, tangents):
            if p.const and t is not None and bool(torch.any(t != 0)):
                raise RuntimeError(f"{name}: argument {p.name!r} is declared const=True (no derivative), but a "
                                   f"nonzero tangent was given for it")

    def tangent_list(tangents, ins):
        """One tangent per input: zeros for a missing one, an empty tensor for a non-differentiable input."""
        return [(t.reshape(x.shape) if t is not None else torch.zeros_like(x)) if d
                else torch.empty(0, dtype=x.dtype) for t, x, d in zip(tangents, ins, r.diff)]

    def last(op, *args):
        """A call of the jvp / vjp_jvp / jvp_jvp op inside a derivative rule: the last derivative there is. It
        runs through an autograd.Function whose own derivatives refuse (a third derivative), called directly:
        under torch.func the op's Autograd kernel runs below the transform, where a derivative would be silently
        zero. While torch.compile traces, the op itself (whose Autograd kernel refuses too)."""
        if torch.compiler.is_compiling():
            return op(*args)
        lists, ints = args[:-1], args[-1]
        return list(_apply(no_further(entry_of[op]), len(lists), *(len(x) for x in lists),
                           *(t for x in lists for t in x), *ints))

    def run(entry, *args):
        """An op below autograd: through the dispatcher while torch.compile or torch.func trace or transform,
        else its CPU kernel directly (a dispatcher round trip less)."""
        if _plain_eager(args):
            return impls[entry](*args)
        return _below_autograd(ops[entry], *args)

    def vmap_rule(entry, lens, pick):
        """An autograd.Function's ``vmap`` staticmethod: the op ``entry``'s own vmap rule (one native call for the
        batch) on the Function's flat arguments (lists of ``lens`` tensors, then the integers), its results
        cut as the Function's forward cuts them (pick: results -> the forward's). Why not
        ``generate_vmap_rule``: functorch then runs the forward through a generated Function and pytree
        round trips on every call, most of a small batch's time under vmap(grad(f))."""
        starts = [sum(lens[:k]) for k in range(len(lens) + 1)]

        def rule(info, in_dims, *args):
            lists = [list(args[a:b]) for a, b in zip(starts, starts[1:])]
            dims = [list(in_dims[a:b]) for a, b in zip(starts, starts[1:])]
            with torch._C._AutoDispatchBelowAutograd():  # (as the forward runs the op: the Function records)
                outs, out_dims = r.vmap_rules[entry](info, (*dims, None), *lists, list(args[starts[-1]:]))
            return tuple(pick(list(outs))), tuple(pick(list(out_dims)))
        return staticmethod(rule)

    class Primal(torch.autograd.Function):
        generate_vmap_rule = True  # torch.func.vmap: the ops' own (sequential) vmap rules

        @staticmethod
        def forward(*args):
            return tuple(run("primal", list(args[:n_in]), list(args[n_in:])))

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.ints = list(inputs[n_in:])
            ctx.save_for_backward(*inputs[:n_in])
            ctx.save_for_forward(*inputs[:n_in])

        @staticmethod
        def backward(ctx, *gouts):
            r.split_drops = 0  # backwards come again: the next forwards keep their tapes (use_split)
            # (vjp_call is differentiable: VJP below)
            return input_grads(ctx, gouts, lambda ins, cots: vjp_call(ins, cots, ctx.ints))

        @staticmethod
        def jvp(ctx, *tangents):
            ins = list(ctx.saved_tensors)
            no_const_tangent(tangents[:n_in])
            return _apply(JVP, *ins, *tangent_list(tangents[:n_in], ins), *ctx.ints)  # differentiable: JVP below

    class JVP(torch.autograd.Function):
        """The output tangents J(ins) t (t: the tangents of the differentiable inputs)."""

        generate_vmap_rule = True

        @staticmethod
        def forward(*args):
            ins, ts, ints = list(args[:n_in]), list(args[n_in:2 * n_in]), list(args[2 * n_in:])
            return tuple(run("jvp", ins, ts, ints)[n_out:])

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.ints = list(inputs[2 * n_in:])
            ctx.save_for_backward(*inputs[:2 * n_in])
            ctx.save_for_forward(*inputs[:2 * n_in])

        @staticmethod
        def jvp(ctx, *tangents):
            # forward over forward: along s (the inputs) and u (their tangents), J t changes by H[t, s] + J u
            saved = ctx.saved_tensors
            ins, ts = list(saved[:n_in]), list(saved[n_in:])
            no_const_tangent(tangents[:n_in])
            s_, u = tangent_list(tangents[:n_in], ins), tangent_list(tangents[n_in:2 * n_in], ins)
            return tuple(last(ops["jvp_jvp"], ins, ts, s_, u, ctx.ints))

        @staticmethod
        def backward(ctx, *gts):
            # reverse over forward: d/dx <c, J t> = H_c t; d/dt <c, J t> = J^T c
            saved = ctx.saved_tensors
            ins, ts = list(saved[:n_in]), list(saved[n_in:])
            needs = ctx.needs_input_grad
            no_const_grad(needs[:n_in], "a second derivative")
            plan = r.plan(ins, ctx.ints)[0]
            c = [g if g is not None else torch.zeros(sh, dtype=dt)
                 for g, sh, dt in zip(gts, r.out_shapes(plan), r.out_dtypes)]
            d_ins, d_ts = [None] * n_in, [None] * n_in
            if any(needs[:n_in]):
                res = last(ops["vjp_jvp"], ins, c, ts, [torch.zeros_like(x) for x in c], ctx.ints)
                d_ins = [g if (d and need) else None for g, d, need in zip(res[n_in:], r.diff, needs[:n_in])]
            if any(needs[n_in:2 * n_in]):
                got = vjp_call(ins, c, ctx.ints)
                d_ts = [g if (d and need) else None for g, d, need in zip(got, r.diff, needs[n_in:2 * n_in])]
            return (*d_ins, *d_ts, *([None] * len(ctx.ints)))

    class VJP(torch.autograd.Function):
        """grads = J(ins)^T cots (the entries of the differentiable inputs)."""

        generate_vmap_rule = True

        @staticmethod
        def forward(*args):
            ins, cots, ints = list(args[:n_in]), list(args[n_in:n_in + n_out]), list(args[n_in + n_out:])
            got = run("vjp", ins, cots, ints)
            return tuple(got[i] for i in diff_idx)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.ints = list(inputs[n_in + n_out:])
            ctx.save_for_backward(*inputs[:n_in + n_out])
            ctx.save_for_forward(*inputs[:n_in + n_out])

        @staticmethod
        def backward(ctx, *ggrads):
            # d/dx <v, J^T s> = H_s v (forward over reverse); d/ds <v, J^T s> = J v (forward mode)
            saved = ctx.saved_tensors
            ins, cots = list(saved[:n_in]), list(saved[n_in:])
            no_const_grad(ctx.needs_input_grad[:n_in], "a second derivative")
            v = [None] * n_in
            for i, g in zip(diff_idx, ggrads):
                v[i] = g
            v = tangent_list(v, ins)
            d_ins = [None] * n_in
            if any(ctx.needs_input_grad[:n_in]):
                res = last(ops["vjp_jvp"], ins, cots, v, [torch.zeros_like(c) for c in cots], ctx.ints)
                d_ins = [t if (d and need) else None
                         for t, d, need in zip(res[n_in:], r.diff, ctx.needs_input_grad[:n_in])]
            d_cots = [None] * n_out
            if any(ctx.needs_input_grad[n_in:n_in + n_out]):
                d_cots = list(last(ops["jvp"], ins, v, ctx.ints)[n_out:])
            return (*d_ins, *d_cots, *([None] * len(ctx.ints)))

        @staticmethod
        def jvp(ctx, *tangents):
            saved = ctx.saved_tensors
            ins, cots = list(saved[:n_in]), list(saved[n_in:])
            no_const_tangent(tangents[:n_in])
            t_cots = [t if t is not None else torch.zeros_like(c) for c, t in zip(cots, tangents[n_in:n_in + n_out])]
            res = last(ops["vjp_jvp"], ins, cots, tangent_list(tangents[:n_in], ins), t_cots, ctx.ints)
            return tuple(res[n_in + i] for i in diff_idx)

    class FastPrimal(Primal):
        """Primal whose vmap rule is the op's batch rule itself (see :func:`fast_vmap`)."""

        generate_vmap_rule = False
        vmap = vmap_rule("primal", (n_in,), lambda x: x)

    class FastVJP(VJP):
        """VJP whose vmap rule is the op's batch rule itself (see :func:`fast_vmap`)."""

        generate_vmap_rule = False
        vmap = vmap_rule("vjp", (n_in, n_out), lambda x: [x[i] for i in diff_idx])

    def fast_vmap() -> bool:
        """Whether the Functions may take the op's batch rule as their vmap rule: an outermost torch.func.vmap
        with only grad transforms inside it (``vmap(grad(f))``, per-example gradients), so that the vmap level
        sees plain tensors and the rule runs the batch loop; not in the checked mode or without the loop. Other
        stacks (a jvp level, a vmap inside grad) keep functorch's generated rule, which handles their tensors."""
        if r.k.checked or not batch.available():
            return False
        keys = [i.key() for i in retrieve_all_functorch_interpreters()]
        T = torch._C._functorch.TransformType
        return len(keys) >= 2 and keys[0] == T.Vmap and all(k == T.Grad for k in keys[1:])

    entry_of = {op: entry for entry, op in ops.items()}

    @functools.lru_cache(maxsize=None)
    def no_further(entry):
        """An autograd.Function running ``entry`` whose derivatives (reverse and forward) are refused."""
        def third(*_):
            raise RuntimeError(f"{name}: enzcc_plugins gives first and second derivatives (reverse, forward, and "
                               f"the derivatives of both); a third derivative is not available")

        class NoFurther(torch.autograd.Function):
            generate_vmap_rule = True

            @staticmethod
            def forward(k, *rest):
                # k, the lengths of the op's k tensor lists, the lists' tensors, the integers: all flat (no nested
                # tuple), so that autograd and torch.func see every tensor
                lens, flat = rest[:k], rest[k:]
                lists, at = [], 0
                for n in lens:
                    lists.append(list(flat[at:at + n]))
                    at += n
                return tuple(run(entry, *lists, list(flat[at:])))

            @staticmethod
            def setup_context(ctx, inputs, output):
                pass

            backward = staticmethod(third)
            jvp = staticmethod(third)
        return NoFurther

    def not_differentiated(entry):
        def kernel(keyset, *args):
            if _functorch_active():  # torch.func calls it from a jvp rule: no autograd.Function here
                return ops[entry].redispatch(keyset & torch._C._after_autograd_keyset, *args)
            lists, ints = args[:-1], args[-1]
            return list(_apply(no_further(entry), len(lists), *(len(x) for x in lists),
                               *(t for x in lists for t in x), *ints))
        return kernel

    class SplitPrimal(torch.autograd.Function):
        """The primal when a plain eager backward may follow: ``NAME_enzcc_augfwd`` keeps enzcc's tape in ctx
        and the backward runs ``NAME_enzcc_rev`` on it (plugins/tape.py), so the function runs once per forward
        and backward, not again inside the reverse pass. A backward that builds a graph (create_graph) or
        comes a second time (retain_graph) takes the combined VJP from the saved inputs instead."""

        @staticmethod
        def forward(ctx, *args):
            ins, ints = list(args[:n_in]), list(args[n_in:])
            ctx.ints = ints
            ctx.save_for_backward(*ins)
            outs, ctx.split = split_forward(ins, ints)
            return tuple(outs)

        @staticmethod
        def backward(ctx, *gouts):
            def from_tape(ins, cots):
                got = None if torch.is_grad_enabled() else split_backward(ctx.split, ins, cots, ctx.ints)
                if got is None:
                    return vjp_call(ins, cots, ctx.ints)
                ctx.split = (ctx.split[0], None, None)  # (the seed buffers go now, not with the graph)
                return got
            return input_grads(ctx, gouts, from_tape)

    def split_forward(ins, ints):
        """The outputs, and (tape, gradient buffers, seed buffers) for the backward."""
        augfwd, rev = r.k.split()
        plan, ibuf, ia = r.plan(ins, ints)
        xs = [t.contiguous() for t in ins]
        shapes, in_shapes = r.out_shapes(plan), [(tuple(t.shape), t.dtype) for t in xs]
        outs = [torch.empty(s, dtype=dt) for s, dt in zip(shapes, r.out_dtypes)]
        grads = [torch.zeros(t.shape, dtype=t.dtype) if d else None for t, d in zip(xs, r.diff)]
        seeds = [torch.empty(s, dtype=dt) for s, dt in zip(shapes, r.out_dtypes)]

        def release_a():  # buffers of the primal arrays' sizes, for a reverse run only to free the tape
            bufs = [torch.empty(s, dtype=dt) for s, dt in in_shapes], [torch.empty(s, dtype=dt)
                                                                       for s, dt in zip(shapes, r.out_dtypes)]
            return r.addresses(*bufs, ia), bufs

        def zero_seeds():
            for s in seeds:
                s.zero_()
        def dropped():  # (a reverse pass spent only to free the tape)
            r.split_drops += 1
        t = tape.Tape(augfwd, rev, r.addresses(xs, outs, ia), r.per_param(grads, seeds), (grads, seeds, ibuf),
                      release_a, zero_seeds, dropped)
        return outs, (t, grads, seeds)

    def split_backward(state, ins, cots, ints):
        """The gradients from the forward's tape, or None when it was consumed already."""
        t, grads, seeds = state
        plan, _, ia = r.plan(ins, ints)
        xs = [x.contiguous() for x in ins]

        def fill_seeds():
            for s, c in zip(seeds, cots):
                s.copy_(c.reshape(s.shape))
        if not t.reverse(r.addresses(xs, r.scratch(plan, "out"), ia), fill_seeds):
            return None
        r.split_drops = 0
        return [g if g is not None else torch.empty(0, dtype=x.dtype) for g, x in zip(grads, ins)]

    r.split_drops = 0  # tapes freed without their backward since the last backward

    def use_split(ins) -> bool:
        """Whether a forward that autograd records can keep a tape: plain eager tensors, not the checked mode,
        not turned off (ENZCC_PLUGINS_SPLIT=0), a split-mode library enzcc could build, and not in a run of
        forwards whose backward never comes (evaluation without no_grad: each dropped tape costs a reverse
        pass to free; after SPLIT_DROPS of them the plain forward is used until a backward comes again)."""
        return (r.split_drops < SPLIT_DROPS and not r.k.checked and os.environ.get("ENZCC_PLUGINS_SPLIT", "1") != "0"
                and _plain_eager([ins]) and r.k.split() is not None)

    def primal_autograd(ins, ints):
        return list(_apply(FastPrimal if fast_vmap() else Primal, *ins, *ints))

    def vjp_autograd(ins, cots, ints):
        got = _apply(FastVJP if fast_vmap() else VJP, *ins, *cots, *ints)
        full = [torch.empty(0, dtype=t.dtype) for t in ins]
        for i, g in zip(diff_idx, got):
            full[i] = g
        return full

    def vjp_call(ins, cots, ints):
        if torch.compiler.is_compiling():
            return ops["vjp"](ins, cots, ints)
        if _functorch_active() or torch.is_grad_enabled():  # create_graph: the VJP is differentiated
            return vjp_autograd(ins, cots, ints)
        if _plain_eager([ins, cots]):
            return impls["vjp"](ins, cots, ints)
        return ops["vjp"](ins, cots, ints)

    def primal_call(ins, ints):
        if torch.compiler.is_compiling() or torch.jit.is_tracing():
            return ops["primal"](ins, ints)  # one op in the graph (torch.jit.trace records it, not its insides)
        if _functorch_active() and _vmap_only(ins):  # no derivative to record: straight to the vmap rule
            got = r.vmap_primal(ins, ints)
            return got if got is not None else ops["primal"](ins, ints)
        if _functorch_active() or torch.autograd.forward_ad._current_level >= 0:
            return primal_autograd(ins, ints)
        if torch.is_grad_enabled() and any(t.requires_grad for t in ins):
            if use_split(ins):  # the tape kept for the backward: the function runs once
                return list(_apply(SplitPrimal, *ins, *ints))
            return primal_autograd(ins, ints)
        if _plain_eager([ins]):
            return impls["primal"](ins, ints)  # nothing to differentiate: straight to the library
        return ops["primal"](ins, ints)

    r.primal_call = primal_call

    opname = qualname.split("::")[1]
    lib.impl(f"{opname}_primal", primal_autograd, "Autograd")
    lib.impl(f"{opname}_vjp", vjp_autograd, "Autograd")
    lib.impl(f"{opname}_jvp", not_differentiated("jvp"), "Autograd", with_keyset=True)
    lib.impl(f"{opname}_vjp_jvp", not_differentiated("vjp_jvp"), "Autograd", with_keyset=True)
    lib.impl(f"{opname}_jvp_jvp", not_differentiated("jvp_jvp"), "Autograd", with_keyset=True)


class EnzymeFunction:
    """A compiled function as a PyTorch operation: ``F(*args, **kwargs)`` or ``F.apply(*args)``.

    Attributes: ``kernel`` (the :class:`enzcc_plugins.CompiledKernel`), ``ops`` (the ``torch.ops.enzcc``
    overloads: primal, vjp, jvp, vjp_jvp, jvp_jvp)."""

    def __init__(self, runner: _Runner, ops, lib, doc: str, qualname: str, seed: dict | None = None):
        self._runner = runner
        self.kernel = runner.k
        self.op_name = qualname  # stable: the ops are torch.ops.<namespace>.<name>_<entry>
        self._seed = seed  # the one-array form's out_size, for the manifest (None: a declaration)
        self.ops = ops
        self._lib = lib  # keeps the registrations alive
        self.__doc__ = doc
        self.__name__ = runner.name

    def __repr__(self) -> str:
        return f"<enzcc torch op {self.kernel!r}>"

    def apply(self, *args):
        """Arguments positionally, in the order of ``kernel.arg_names``; one output as a tensor, several as a
        tuple."""
        r = self._runner
        ins, ints = r.check_inputs(args)
        outs = r.primal_call(ins, ints)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __call__(self, *args, **kwargs):
        """Arguments positionally or by name."""
        bound = self.kernel.bind(*args, **kwargs)
        return self.apply(*(bound[n] for n in self.kernel.arg_names))

    def save_library(self, directory, *, second_order: bool = True):
        """Copy the compiled libraries into ``directory`` with a manifest, for :func:`load_library` in the
        process that loads a ``torch.export`` program using these ops. second_order: build and ship the
        second-derivative library too (where enzcc can). Returns the manifest's path."""
        return ship.save(self.kernel, self.op_name, directory, "torch", seed=self._seed, second_order=second_order)


@memoise_ops("torch")  # the same source, function, declaration and options: the same op
def enzyme(source, name: str, params: Sequence | None = None, dtype=None, *,
           out_size: int | Callable[[int], int] | None = None, cflags: Sequence[str] = (),
           compiler: str | None = None, cache=None, lang: str | None = None, namespace: str | None = None,
           op_name: str | None = None) -> EnzymeFunction:
    """Compile ``name`` from ``source`` (C, C++, Fortran, Rust) with its derivatives and return ``F``, a PyTorch
    operation: ``F(*args, **kwargs)`` or ``F.apply(*args)`` (arguments in the C order of the inputs, scalars
    and free ints); one output is returned as a tensor, several as a tuple.

    params: the declaration (:func:`enzcc_plugins.In`, ``Out``, ``Scalar``, ``Int``; plugins/ABI.md); a dtype
    in its place is the seed's ``enzyme(source, name, dtype)``. Without a declaration, the seed's
    ``void f(const T *in, size_t n, T *out)``: ``F.apply(x)`` flattens ``x`` (``n = x.numel()``) and returns
    ``x``'s shape, or 1-D of ``out_size(n)`` when out_size (an int or ``n -> int``) is given.
    dtype: the default element type ('float32'/'float64' or a torch dtype; default: the prototype's).
    cflags, compiler, cache, lang: as for :func:`enzcc_plugins.load_kernel`. namespace, op_name: the stable
    name ``namespace::op_name`` (defaults ``enzcc`` and the function's name; op_name may be ``'ns::op'``): the
    ops are ``torch.ops.<namespace>.<op_name>_{primal,vjp,jvp,vjp_jvp,jvp_jvp}``, so a ``torch.export``
    program runs in another process after :func:`load_library`. Raises :class:`EnzccBuildError` (with enzcc's
    one-line error) / :class:`PrototypeError` at load time, :class:`NameClashError` when the name already holds
    another function or declaration in this process.
    """
    qualname = ship.op_name(name, namespace, op_name)
    if params is not None and not isinstance(params, (list, tuple)):
        if dtype is not None:
            raise TypeError("give the dtype once: enzyme(source, name, params, dtype) or enzyme(source, name, dtype)")
        params, dtype = None, params  # the seed's enzyme(source, name, dtype)
    seed = None
    if params is None:
        params = _seed_params(dtype, out_size)
        seed = None if callable(out_size) else {"out_size": out_size}
    elif out_size is not None:
        raise TypeError("out_size is for the seed's one-array signature; give the output's shape in Out(...)")
    kernel = load_kernel(source, name, params, dtype, cflags=cflags, compiler=compiler, cache=cache, lang=lang)
    return _named(qualname, kernel, seed)


_names = ship.Names("PyTorch")


def _named(qualname: str, kernel: CompiledKernel, seed: dict | None) -> EnzymeFunction:
    """The ops under their stable name: those registered before for the same kernel and declaration, a
    NameClashError for another (a saved program would call the wrong function)."""
    return _names.get_or_make(qualname, kernel, lambda: _make(qualname, kernel, seed))


def _make(qualname: str, kernel: CompiledKernel, seed: dict | None) -> EnzymeFunction:
    r = _Runner(kernel)
    lib, ops, impls = _register_ops(r, qualname)
    _register_autograd(r, lib, qualname, ops, impls)
    doc = f"{kernel.name} from {kernel.source}, compiled by enzcc; derivatives by enzcc. Arguments: " + \
          ", ".join(f"{p.name}: {p.describe()}" for p in kernel.params if p.name in kernel.arg_names)
    return EnzymeFunction(r, ops, lib, doc, qualname, seed)


def load_library(path, params: Sequence | None = None):
    """Register the ops saved by :meth:`EnzymeFunction.save_library` (a manifest, the library beside it, or a
    directory: all of them) under their stable names, with their autograd rules, so that a ``torch.export``
    program using them loads (``torch.export.load``) and runs, with gradients, in this process. Returns the
    :class:`EnzymeFunction` (a list for several). params: the declaration, when its shapes are Python callables
    (a file cannot hold them). No source, no enzcc needed."""
    got = []
    for m in ship.manifests(path):
        seed = ship._read(m).get("seed")
        given = params if params is not None else (_seed_params(None, seed["out_size"]) if seed else None)
        qualname, kernel, _ = ship.load(m, given)
        got.append(_named(qualname, kernel, seed))
    return got[0] if len(got) == 1 else got


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
