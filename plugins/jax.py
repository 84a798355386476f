"""JAX integration: C (C++, Fortran, Rust) functions compiled by enzcc as JAX primitives called through XLA's FFI.

    from enzcc_plugins.jax import enzyme, In, Out, Scalar, Int
    f = enzyme("f.c", "f", [In("x", shape=("n",)), Int("n"), Scalar("alpha"), In("w", shape=("n",), const=True),
                            Out("y", shape=("n",)), Out("s", shape=(1,))])
    y, s = f(x, 0.5, w)                         # one XLA custom call (also under jit)
    jax.grad(lambda x, a: f(x, a, w)[1][0], argnums=(0, 1))(x, 0.5)   # enzcc's reverse mode
    jax.jvp(lambda x: f(x, 0.5, w)[0], (x,), (t,))                    # enzcc's forward mode
    jax.vmap(f, in_axes=(0, None, None))(xs, 0.5, w)                  # one call, a loop over the batch

    g = enzyme("g.c", "g")                      # the one-array form void g(const T *in, size_t n, T *out)

How it works: one generic C++ FFI handler (plugins/native/xla_ffi.cc, compiled once per machine and jaxlib
into the plugin cache and registered as the CPU target ``enzcc_call``) calls a kernel's entry points
(plugins/ABI.md) with the buffers XLA hands it; the entry point's address and the parameter layout travel as
the custom call's attributes. Four primitives use it: ``enzcc_primal``; ``enzcc_tangent`` (the ``_jvp``
entry), emitted by the primal's JVP rule and linear in the tangents; ``enzcc_vjp`` (the ``_vjp`` entry), the
transpose of ``enzcc_tangent``, so ``jax.grad`` runs the primal once and enzcc's reverse pass once; and
``enzcc_vjp_tangent`` (the ``_vjp_jvp`` entry, a second library built on first use), the JVP of
``enzcc_vjp``, for forward-over-reverse second derivatives (``jax.hessian``, ``jax.jvp`` of ``jax.grad``),
and its transpose for reverse over reverse (``jax.jacrev`` of ``jax.grad``); and ``enzcc_tangent_tangent``
(the ``_jvp_jvp`` entry, in the same second library), the JVP of ``enzcc_tangent``, for forward over forward
(``jax.jacfwd`` of ``jax.jacfwd``, ``jax.jvp`` of ``jax.jvp``), and its transpose for reverse over forward
(``jax.grad`` through ``jax.jvp``). Third derivatives raise NotImplementedError. ``jax.vmap`` becomes one custom call whose
handler loops over the batch (arguments without a batch axis are shared, not copied); when only the tangents
of ``enzcc_tangent`` or the cotangents of ``enzcc_vjp`` are batched (``jax.jacfwd``, ``jax.jacrev``), it runs
the function once per 8, 4 or 2 of them through vector-mode versions of the ``_jvp`` / ``_vjp`` entry (a third
library, built on first use); likewise for the tangents of ``enzcc_vjp_tangent`` when its inputs and seeds are
shared (``jax.hessian`` of a function with one result), through the ``_vjp_jvp`` entry's (a fourth library).

Arrays are C-contiguous of the declared dtype (float32 for ``float``; float64 for ``double``, which needs
``jax_enable_x64``); another dtype, a wrong shape, an array on a GPU or an integer that is not a static int
is a TypeError/ValueError naming the argument. An input declared ``const=True`` takes no derivative: a
derivative flowing into it is an error (use ``jax.lax.stop_gradient`` to say it is constant).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from . import ship
from .build import memoise_ops
from .build import VECTOR_WIDTHS, EnzccBuildError, In, Int, Out, Scalar, build_native_once, cache_dir
from .ship import NameClashError, ShippedLibraryError

__all__ = ["enzyme", "load_library", "export", "EnzymeFunction", "EnzccBuildError", "NameClashError", "ShippedLibraryError",
           "In", "Out", "Scalar", "Int"]

# --- the FFI handler: one C++ file, compiled once per machine and jaxlib -------------------------------------

HANDLER_SOURCE = Path(__file__).resolve().parent / "native" / "xla_ffi.cc"
REGISTRY_HEADER = HANDLER_SOURCE.parent / "entry_registry.h"
TARGET = "enzcc_call"
CHECKED_TARGET = "enzcc_call_checked"  # the checked mode (plugins/guard.py): each call on guarded copies

_handler_lock = threading.Lock()
_handler_registered = False
_handler = None  # the handler's ctypes library: enzcc_register_entry


def _cxx() -> str:
    """The C++ compiler for the handler: $ENZCC_PLUGINS_CXX, else clang++-22, else clang++, else c++."""
    env = os.environ.get("ENZCC_PLUGINS_CXX")
    if env:
        return env
    for name in ("clang++-22", "clang++", "c++"):
        if shutil.which(name):
            return name
    raise EnzccBuildError("no C++ compiler for the XLA FFI handler (clang++-22, clang++ or c++ on PATH, or set "
                          "ENZCC_PLUGINS_CXX)")


def _handler_path() -> tuple[Path, list]:
    """Where the handler lives in the plugin cache and the command that builds it."""
    import jaxlib

    source = HANDLER_SOURCE.read_bytes() + b"\0" + REGISTRY_HEADER.read_bytes()
    cxx = _cxx()
    key = hashlib.sha256(source + b"\0" + cxx.encode() + b"\0" + jaxlib.__version__.encode()).hexdigest()[:20]
    root = cache_dir().absolute() / "jax-ffi"
    return root / f"enzcc_xla_ffi-jaxlib{jaxlib.__version__}-{key}.so", [
        cxx, "-std=c++17", "-O2", "-shared", "-fPIC", "-I", jax.ffi.include_dir(), str(HANDLER_SOURCE), "-o"]


def handler_library() -> Path:
    """The compiled handler (plugins/native/xla_ffi.cc) in the plugin cache, built on first use. The file name
    holds the jaxlib version and a hash of the source and compiler, so a new jaxlib or handler rebuilds it; the
    build happens in a private directory and is renamed into place under a lock (concurrent processes wait)."""
    path, command = _handler_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    return build_native_once(path, lambda out: [*command, str(out)], f"the XLA FFI handler {HANDLER_SOURCE}")


def register_handler() -> None:
    """Build (or fetch) the handler and register it with XLA as the CPU FFI target ``enzcc_call`` (once)."""
    global _handler_registered, _handler
    with _handler_lock:
        if _handler_registered:
            return
        lib = ctypes.CDLL(str(handler_library()))
        lib.enzcc_register_entry.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
        lib.enzcc_register_entry.restype = ctypes.c_int
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.EnzccCall), platform="cpu")
        jax.ffi.register_ffi_target(CHECKED_TARGET, jax.ffi.pycapsule(lib.EnzccCallChecked), platform="cpu")
        _handler = lib
        _handler_registered = True


def _register_if_built() -> None:
    """At import: register the handler when it is already built (no build), so that a deserialized
    ``jax.export`` run before :func:`load_library` gets the handler's error naming the op to load, not XLA's."""
    try:
        if _handler_path()[0].exists():
            register_handler()
    except (EnzccBuildError, OSError):
        pass


def export(fun, **kwargs):
    """``jax.export.export(fun, ...)`` that accepts enzcc's FFI target. JAX refuses to serialize custom calls
    whose targets it does not know to be stable; ``enzcc_call`` names its kernels and entry points by stable
    names (not addresses), and its attributes are part of enzcc_plugins' ABI, so this passes
    ``disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("enzcc_call")]`` (added to any given)."""
    checks = list(kwargs.pop("disabled_checks", ())) + [jax.export.DisabledSafetyCheck.custom_call(TARGET)]
    return jax.export.export(fun, disabled_checks=checks, **kwargs)


def _register_entry(qualname: str, entry: str, address: int) -> None:
    """Tell the handler where ``entry`` of the kernel named ``qualname`` is (it finds it by name when it runs)."""
    register_handler()
    rc = _handler.enzcc_register_entry(qualname.encode(), entry.encode(), address)
    if rc != 0:
        raise NameClashError(f"JAX op {qualname!r}: the name's entry point {entry} is already another function in "
                             f"this process; choose another op_name= (or namespace=)")


# --- the static description of one call ---------------------------------------------------------------------

IN, OUT, SCALAR, INT = "in", "out", "scalar", "int"
_NULL, _OPERAND, _RESULT, _INTCELL, _SCRATCH = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Layout:
    """One kernel call with fixed shapes: the C parameters in order (kind, dtype, const, shape, integer value)
    and the first-order entry points' addresses. Hashable: it is a parameter of the primitives (and so part of
    jit's cache key). ``shapes`` holds each array's shape (for one batch item), ``()`` for scalars and
    integers; ``ints`` each integer's value (0 for the other parameters)."""

    name: str
    kinds: tuple
    dtypes: tuple  # NumPy dtype names ('float32'/'float64'); '' for integers
    const: tuple
    shapes: tuple
    ints: tuple
    names: tuple  # the parameters' names, for messages
    qualname: str  # the stable op name ("namespace::function"), by which the handler finds the entry points
    #: the CompiledKernel, asked for the second-order entry point (a second library, built on first use)
    kernel: object = field(default=None, compare=False, repr=False)

    def __repr__(self) -> str:  # short: it is printed in every jaxpr
        sig = ", ".join(f"{n}:{k}{list(s) if k in (IN, OUT) else ''}" for n, k, s in
                        zip(self.names, self.kinds, self.shapes))
        return f"{self.name}({sig})"

    @functools.cached_property
    def inputs(self) -> tuple:
        """C indices of the JAX operands: input arrays and float scalars, in C order."""
        return tuple(i for i, k in enumerate(self.kinds) if k in (IN, SCALAR))

    @functools.cached_property
    def outputs(self) -> tuple:
        return tuple(i for i, k in enumerate(self.kinds) if k == OUT)

    @functools.cached_property
    def diff(self) -> tuple:
        """C indices of the differentiable inputs (not const)."""
        return tuple(i for i in self.inputs if not self.const[i])

    def aval(self, i: int, batch: tuple = ()) -> jax.core.ShapedArray:
        return jax.core.ShapedArray(tuple(batch) + tuple(self.shapes[i]), np.dtype(self.dtypes[i]))

    def entry(self, mode: str) -> str:
        """The name of the entry point a primitive calls ('primal', 'tangent', 'vjp', 'vjp_tangent',
        'tangent_tangent'), registered with the handler (the second-order library is built on first use)."""
        entry = _ENTRY_OF[mode]
        if mode in ("vjp_tangent", "tangent_tangent"):
            if self.kernel is None:
                raise NotImplementedError(f"{self.name}: no second-order entry point")
            _register_entry(self.qualname, entry, self.kernel.address(entry))
        return entry


_ENTRY_OF = {"primal": "primal", "tangent": "jvp", "vjp": "vjp", "vjp_tangent": "vjp_jvp",
             "tangent_tangent": "jvp_jvp"}


def _attrs(layout: Layout, entry: str, arrays: list[list[tuple[int, int]]], zero=(), batch=(),
           batched=(), scratch=(), vector=None) -> dict:
    """The FFI attributes of one call (see plugins/native/xla_ffi.cc): the kernel and entry point by name;
    ``vector``: the entry point whose vector-mode versions (``_v2``, ``_v4``, ``_v8``) run under vmap."""
    kinds = [k for arr in arrays for k, _ in arr]
    index = [i for arr in arrays for _, i in arr]
    return dict(kernel=layout.qualname, entry=entry, arrays=np.int64(len(arrays)),
                slot_kind=np.array(kinds, np.int64), slot_index=np.array(index, np.int64),
                ints=np.array(layout.ints, np.int64),
                zero=np.array(list(zero), np.int64), batch=np.int64(math.prod(batch)),
                batched=np.array([1 if b else 0 for b in batched], np.int64),
                scratch=np.array(list(scratch), np.int64),
                ventry=vector or "")


# --- the primitives -----------------------------------------------------------------------------------------
#
# enzcc_primal(*inputs) -> outputs                        NAME_enzcc_primal
# enzcc_tangent(*inputs, *tangents) -> output tangents     NAME_enzcc_jvp; linear in the tangents
# enzcc_vjp(*inputs, *seeds) -> input gradients            NAME_enzcc_vjp; the transpose of enzcc_tangent
# enzcc_vjp_tangent(*inputs, *seeds, *their tangents)      NAME_enzcc_vjp_jvp; the JVP of enzcc_vjp
# enzcc_tangent_tangent(*inputs, *tangents, *input directions, *tangent directions) -> second output tangents
#                                                          NAME_enzcc_jvp_jvp; the JVP of enzcc_tangent
#
# inputs are the input arrays and float scalars in C order; tangents those of the differentiable (non-const)
# ones. Every primitive takes the parameters layout (Layout), batch (the shape of the jax.vmap axes, outermost
# first; () outside vmap) and batched (one flag per operand: whether it carries the batch axes in front;
# operands without them are shared by all batch items). Results always carry the batch axes. enzcc_vjp and
# enzcc_vjp_tangent also return the seeds they consume (results aliased to the seed operands): callers drop
# them. The primal outputs that the derivative entry points write again live in the handler's own scratch.

primal_p = Primitive("enzcc_primal")
tangent_p = Primitive("enzcc_tangent")
vjp_p = Primitive("enzcc_vjp")
vjp_tangent_p = Primitive("enzcc_vjp_tangent")
tangent_tangent_p = Primitive("enzcc_tangent_tangent")
_PRIMITIVES = (primal_p, tangent_p, vjp_p, vjp_tangent_p, tangent_tangent_p)
for _p in _PRIMITIVES:
    _p.multiple_results = True


def _impl(prim, *args, **params):
    """Eager evaluation: the primitive compiled alone (once per parameters and shapes, then cached), as JAX
    evaluates its own primitives; jax._src.dispatch is the only place JAX 0.10 offers this."""
    from jax._src import dispatch
    return dispatch.apply_primitive(prim, *args, **params)


def _plan(layout: Layout, mode: str) -> dict:
    """For one primitive: the pointer arrays (one list of (kind, index) per C parameter for each array the entry
    point takes), the results (role, C index), the results to zero, the seed aliases {operand: result} and the
    scratch (bytes per batch item of each buffer that the entry point writes and nobody reads: the primal
    outputs of the derivative entry points; the handler keeps them in memory of its own, reused from call to
    call, instead of XLA results that would be fresh memory every time)."""
    P = len(layout.kinds)
    I, O, D = len(layout.inputs), len(layout.outputs), len(layout.diff)
    in_pos = {c: j for j, c in enumerate(layout.inputs)}
    out_pos = {c: k for k, c in enumerate(layout.outputs)}
    diff_pos = {c: k for k, c in enumerate(layout.diff)}
    out_bytes = [math.prod(layout.shapes[c]) * np.dtype(layout.dtypes[c]).itemsize for c in layout.outputs]

    def primal_array(out_kind: int) -> list:
        a = []
        for i, kind in enumerate(layout.kinds):
            if kind == OUT:
                a.append((out_kind, out_pos[i]))
            elif kind == INT:
                a.append((_INTCELL, i))
            else:
                a.append((_OPERAND, in_pos[i]))
        return a

    null = [(_NULL, 0)] * P
    outs = [("out", c) for c in layout.outputs]
    if mode == "primal":  # results: outputs
        return dict(arrays=[primal_array(_RESULT)], results=outs, zero=(), aliases={}, scratch=())
    if mode == "tangent":  # operands: inputs, tangents; results: output tangents
        d = list(null)
        for c in layout.diff:
            d[c] = (_OPERAND, I + diff_pos[c])
        for c in layout.outputs:
            d[c] = (_RESULT, out_pos[c])
        return dict(arrays=[primal_array(_SCRATCH), d], results=outs, zero=(), aliases={}, scratch=out_bytes)
    if mode == "vjp":  # operands: inputs, seeds; results: gradients, seeds (consumed)
        d = list(null)
        for c in layout.diff:
            d[c] = (_RESULT, diff_pos[c])
        for c in layout.outputs:
            d[c] = (_RESULT, D + out_pos[c])
        return dict(arrays=[primal_array(_SCRATCH), d], results=[("in", c) for c in layout.diff] + outs,
                    zero=tuple(range(D)), aliases={I + k: D + k for k in range(O)}, scratch=out_bytes)
    if mode == "vjp_tangent":
        # operands: inputs, seeds, input tangents (diff), seed tangents; results: gradients, gradient tangents,
        # seeds (consumed), seed tangents (consumed); scratch: outputs, output tangents
        d, ta, td = list(null), list(null), list(null)
        for c in layout.diff:
            d[c] = (_RESULT, diff_pos[c])
            ta[c] = (_OPERAND, I + O + diff_pos[c])
            td[c] = (_RESULT, D + diff_pos[c])
        for c in layout.outputs:
            d[c] = (_RESULT, 2 * D + out_pos[c])
            td[c] = (_RESULT, 2 * D + O + out_pos[c])
            ta[c] = (_SCRATCH, O + out_pos[c])
        return dict(arrays=[primal_array(_SCRATCH), d, ta, td],
                    results=[("in", c) for c in layout.diff] * 2 + outs * 2, zero=tuple(range(2 * D)),
                    aliases={**{I + k: 2 * D + k for k in range(O)},
                             **{I + O + D + k: 2 * D + O + k for k in range(O)}},
                    scratch=out_bytes * 2)
    if mode == "tangent_tangent":
        # operands: inputs, their tangents t (diff), directions s of the inputs, directions u of the tangents;
        # results: the second tangents of the outputs (H[t, s] + J u); scratch: outputs, output tangents (J t),
        # and the outputs' tangents along s
        d, ta, td = list(null), list(null), list(null)
        for c in layout.diff:
            d[c] = (_OPERAND, I + diff_pos[c])
            ta[c] = (_OPERAND, I + D + diff_pos[c])
            td[c] = (_OPERAND, I + 2 * D + diff_pos[c])
        for c in layout.outputs:
            d[c] = (_SCRATCH, O + out_pos[c])
            ta[c] = (_SCRATCH, 2 * O + out_pos[c])
            td[c] = (_RESULT, out_pos[c])
        return dict(arrays=[primal_array(_SCRATCH), d, ta, td], results=outs, zero=(), aliases={},
                    scratch=out_bytes * 3)
    raise AssertionError(mode)


_MODES = {primal_p: "primal", tangent_p: "tangent", vjp_p: "vjp", vjp_tangent_p: "vjp_tangent",
          tangent_tangent_p: "tangent_tangent"}


def _operand_cs(layout: Layout, mode: str) -> list:
    """The C index each operand of the primitive corresponds to (for its item shape and dtype)."""
    ins, outs, diff = list(layout.inputs), list(layout.outputs), list(layout.diff)
    return {"primal": ins, "tangent": ins + diff, "vjp": ins + outs,
            "vjp_tangent": ins + outs + diff + outs, "tangent_tangent": ins + diff * 3}[mode]


def _abstract_eval(prim, *avals, layout: Layout, batch: tuple, batched: tuple):
    mode = _MODES[prim]
    cs = _operand_cs(layout, mode)
    assert len(avals) == len(cs) == len(batched), (prim, len(avals), len(cs), len(batched))
    for a, c, b in zip(avals, cs, batched):
        want = layout.aval(c, batch if b else ())
        assert (a.shape, a.dtype) == (want.shape, want.dtype), (prim, c, a, want)
    return [layout.aval(c, batch) for _, c in _plan(layout, mode)["results"]]


def _vector_entries(layout: Layout, mode: str, batch: tuple, batched: tuple):
    """Under jax.vmap, for the forward or reverse entry point whose primal inputs are shared by the batch items
    (the tangents or cotangents alone are batched, as in ``jax.jacfwd`` and ``jax.jacrev``): its vector-mode
    versions, which take several of them in one run of the function (a third library, built on first use).
    The same for forward over reverse when the inputs and the seeds are shared (``jax.hessian`` of a function
    with a scalar result: a vmap over tangent directions of one gradient; a fourth library). None otherwise, or
    when enzcc cannot build them (the handler then runs the items one by one, as it does for the other
    primitives)."""
    entry = {"tangent": "jvp", "vjp": "vjp", "vjp_tangent": "vjp_jvp"}.get(mode)
    I = len(layout.inputs)
    if entry is None or math.prod(batch) < 2 or layout.kernel is None or any(batched[:I]):
        return None
    if entry == "vjp_jvp" and any(b is True for b in batched[I:I + len(layout.outputs)]):
        return None  # seeds that differ from item to item (copies of one seed are flagged COPIES)
    try:
        addresses, _ = layout.kernel.vector(entry)
    except EnzccBuildError:
        return None
    for w, address in zip(VECTOR_WIDTHS, addresses):
        _register_entry(layout.qualname, f"{entry}_v{w}", address)
    return entry


def _checked_attrs(layout: Layout, arrays: list[list[tuple[int, int]]]) -> dict:
    """The checked mode's two more attributes (plugins/native/xla_ffi.cc): the function's name and what each
    slot is; registers guard.c's checked call with the handler."""
    from . import guard
    _register_entry("enzcc::checked", "call", guard.native_call_address())
    slots = [guard.describe_slot(k, layout.kinds[i], layout.names[i], layout.shapes[i], layout.dtypes[i])
             for k, arr in enumerate(arrays) for i in range(len(arr))]
    return dict(owner=layout.name, describe=guard.describe_lines(slots))


def _lowering(prim):
    mode = _MODES[prim]

    def lower(ctx, *args, layout: Layout, batch: tuple, batched: tuple):
        plan = _plan(layout, mode)
        checked = layout.kernel is not None and layout.kernel.checked
        vector = None if checked else _vector_entries(layout, mode, batch, batched)
        attrs = _attrs(layout, layout.entry(mode), plan["arrays"], plan["zero"], batch, batched,
                       plan["scratch"], vector)
        if checked:  # each call (each batch item) on guarded copies of its buffers: an overrun is an error
            attrs.update(_checked_attrs(layout, plan["arrays"]))
        rule = jax.ffi.ffi_lowering(CHECKED_TARGET if checked else TARGET,
                                    operand_output_aliases=plan["aliases"] or None)
        return rule(ctx, *args, **attrs)
    return lower


for _p in _PRIMITIVES:
    _p.def_impl(functools.partial(_impl, _p))
    _p.def_abstract_eval(functools.partial(_abstract_eval, _p))
    mlir.register_lowering(_p, _lowering(_p), platform="cpu")


# --- differentiation ----------------------------------------------------------------------------------------


def _is_zero(t) -> bool:
    return type(t) is ad.Zero


def _dense(t):
    """A tangent or cotangent as an array: a symbolic zero becomes zeros of its shape."""
    return ad.instantiate_zeros(t) if not _is_zero(t) else jnp.zeros(t.aval.shape, t.aval.dtype)


def _fold(g, flag: bool, batch: tuple):
    """The cotangent of an operand: summed over the batch axes when the operand is shared by the batch items
    (``flag`` false under vmap)."""
    return jnp.sum(g, axis=tuple(range(len(batch)))) if batch and not flag else g


def _check_const_tangents(layout: Layout, operand_cs, tangents) -> None:
    """A derivative flowing into an input declared const would be dropped: refuse instead of returning a
    silently wrong derivative."""
    for c, t in zip(operand_cs, tangents):
        if layout.const[c] and not _is_zero(t):
            raise ValueError(f"{layout.name}: argument {layout.names[c]!r} is declared const (no gradient), but "
                             f"the value passed for it depends on the variables being differentiated; declare it "
                             f"differentiable, or pass jax.lax.stop_gradient(...) to mean a constant")


def _primal_jvp(primals, tangents, *, layout: Layout, batch: tuple, batched: tuple):
    outs = primal_p.bind(*primals, layout=layout, batch=batch, batched=batched)
    _check_const_tangents(layout, layout.inputs, tangents)
    diff_j = [j for j, c in enumerate(layout.inputs) if not layout.const[c]]
    if all(_is_zero(tangents[j]) for j in diff_j):
        return outs, [ad.Zero(o.aval.to_tangent_aval()) for o in outs]
    tans = [ad.instantiate_zeros(tangents[j]) for j in diff_j]
    res = tangent_p.bind(*primals, *tans, layout=layout, batch=batch,
                         batched=tuple(batched) + tuple(batched[j] for j in diff_j))
    return outs, res[:len(outs)]


def _tangent_transpose(cts, *operands, layout: Layout, batch: tuple, batched: tuple):
    I, O = len(layout.inputs), len(layout.outputs)
    primals, tans = operands[:I], operands[I:]
    if any(ad.is_undefined_primal(p) for p in primals):
        raise NotImplementedError(f"{layout.name}: cannot transpose with respect to the primal inputs")
    seeds = [_dense(ct) for ct in cts[:O]]
    seed_flags = tuple(bool(batch) for _ in seeds)
    res = vjp_p.bind(*primals, *seeds, layout=layout, batch=batch, batched=tuple(batched[:I]) + seed_flags)
    return [None] * I + [_fold(res[k], batched[I + k], batch) if ad.is_undefined_primal(t) else None
                         for k, t in enumerate(tans)]


def _vjp_jvp(primals, tangents, *, layout: Layout, batch: tuple, batched: tuple):
    I, O, D = len(layout.inputs), len(layout.outputs), len(layout.diff)
    outs = vjp_p.bind(*primals, layout=layout, batch=batch, batched=batched)
    _check_const_tangents(layout, layout.inputs, tangents[:I])
    diff_j = [j for j, c in enumerate(layout.inputs) if not layout.const[c]]
    in_t = [tangents[j] for j in diff_j]
    seed_t = list(tangents[I:])
    zeros = [ad.Zero(o.aval.to_tangent_aval()) for o in outs]
    if all(_is_zero(t) for t in in_t + seed_t):
        return outs, zeros
    layout.entry("vjp_tangent")  # builds the second-order library now: its errors surface here, not in XLA
    flags = tuple(batched[:I + O]) + tuple(batched[j] for j in diff_j) + tuple(bool(batch) for _ in seed_t)
    seed_t = [_dense(t) for t in seed_t]
    res = vjp_tangent_p.bind(*primals, *[ad.instantiate_zeros(t) for t in in_t], *seed_t, layout=layout,
                             batch=batch, batched=flags)
    return outs, list(res[D:2 * D]) + zeros[D:]


def _vjp_tangent_transpose(cts, *operands, layout: Layout, batch: tuple, batched: tuple):
    """enzcc_vjp_tangent is linear in the input tangents t and the seed tangents u: its gradient tangents are
    H_s t + J^T u (H_s the Hessian of s . f, symmetric). The transpose maps a cotangent c of the gradient
    tangents to H_s c (for t: enzcc_vjp_tangent again, with c as input tangents and zero seed tangents) and
    J c (for u: enzcc_tangent). Reverse over reverse (jax.grad of jax.grad) needs it."""
    I, O, D = len(layout.inputs), len(layout.outputs), len(layout.diff)
    primals, seeds = operands[:I], operands[I:I + O]
    t, u = operands[I + O:I + O + D], operands[I + O + D:]
    if any(ad.is_undefined_primal(p) for p in (*primals, *seeds)):
        raise NotImplementedError(f"{layout.name}: third derivatives are not available")
    c = [_dense(ct) for ct in cts[D:2 * D]]
    flags_in = tuple(batched[:I + O])
    c_flags = tuple(bool(batch) for _ in c)  # cotangents of results carry the batch axes

    ct_t, ct_u = [None] * D, [None] * O
    if any(ad.is_undefined_primal(v) for v in t):
        zero_u = [jnp.zeros_like(s) for s in seeds]
        res = vjp_tangent_p.bind(*primals, *seeds, *c, *zero_u, layout=layout, batch=batch,
                                 batched=flags_in + c_flags + tuple(batched[I:I + O]))
        ct_t = [_fold(res[D + k], batched[I + O + k], batch) if ad.is_undefined_primal(v) else None
                for k, v in enumerate(t)]
    if any(ad.is_undefined_primal(v) for v in u):
        res = tangent_p.bind(*primals, *c, layout=layout, batch=batch, batched=tuple(batched[:I]) + c_flags)
        ct_u = [_fold(res[k], batched[I + O + D + k], batch) if ad.is_undefined_primal(v) else None
                for k, v in enumerate(u)]
    return [None] * (I + O) + ct_t + ct_u


def _tangent_jvp(primals, tangents, *, layout: Layout, batch: tuple, batched: tuple):
    """The JVP of enzcc_tangent (forward over forward): along directions s of the inputs and u of their
    tangents t, the output tangents J t change by H[t, s] + J u, which enzcc_tangent_tangent computes."""
    I, D = len(layout.inputs), len(layout.diff)
    outs = tangent_p.bind(*primals, layout=layout, batch=batch, batched=batched)
    _check_const_tangents(layout, layout.inputs, tangents[:I])
    diff_j = [j for j, c in enumerate(layout.inputs) if not layout.const[c]]
    s_t = [tangents[j] for j in diff_j]
    u_t = list(tangents[I:])
    if all(_is_zero(t) for t in s_t + u_t):
        return outs, [ad.Zero(o.aval.to_tangent_aval()) for o in outs]
    layout.entry("tangent_tangent")  # builds the second-order library now: its errors surface here, not in XLA

    flags = tuple(batched[:I + D]) + tuple(batched[j] for j in diff_j) + tuple(batched[I:I + D])
    res = tangent_tangent_p.bind(*primals, *[_dense(t) for t in s_t], *[_dense(t) for t in u_t], layout=layout,
                                 batch=batch, batched=flags)
    return outs, list(res)


def _tangent_tangent_transpose(cts, *operands, layout: Layout, batch: tuple, batched: tuple):
    """enzcc_tangent_tangent is linear in the directions s and u: H[t, s] + J u. Its transpose maps a cotangent
    c of the outputs to H_c t for s (enzcc_vjp_tangent with c as seeds, t as input tangents and zero seed
    tangents: the Hessian of c . f is symmetric) and J^T c for u (enzcc_vjp). Reverse over forward (jax.grad
    through jax.jvp) needs it."""
    I, D = len(layout.inputs), len(layout.diff)
    primals, t = operands[:I], operands[I:I + D]
    s, u = operands[I + D:I + 2 * D], operands[I + 2 * D:]
    if any(ad.is_undefined_primal(v) for v in (*primals, *t)):
        raise NotImplementedError(f"{layout.name}: third derivatives are not available")
    c = [_dense(ct) for ct in cts]
    c_flags = tuple(bool(batch) for _ in c)  # cotangents of results carry the batch axes

    ct_s, ct_u = [None] * D, [None] * D
    if any(ad.is_undefined_primal(v) for v in s):
        zero_u = [jnp.zeros_like(x) for x in c]
        res = vjp_tangent_p.bind(*primals, *c, *t, *zero_u, layout=layout, batch=batch,
                                 batched=tuple(batched[:I]) + c_flags + tuple(batched[I:I + D]) + c_flags)
        ct_s = [_fold(res[D + k], batched[I + D + k], batch) if ad.is_undefined_primal(v) else None
                for k, v in enumerate(s)]
    if any(ad.is_undefined_primal(v) for v in u):
        res = vjp_p.bind(*primals, *c, layout=layout, batch=batch, batched=tuple(batched[:I]) + c_flags)
        ct_u = [_fold(res[k], batched[I + 2 * D + k], batch) if ad.is_undefined_primal(v) else None
                for k, v in enumerate(u)]
    return [None] * (I + D) + ct_s + ct_u


def _no_jvp(what: str):
    def rule(primals, tangents, *, layout: Layout, **_):
        raise NotImplementedError(
            f"{layout.name}: {what} is not available (plugins/ABI.md has no entry point for it). Second "
            f"derivatives are: forward over reverse (jax.hessian, jax.jvp of jax.grad), reverse over reverse "
            f"(jax.jacrev of jax.grad), forward over forward (jax.jacfwd of jax.jacfwd, jax.jvp of jax.jvp) and "
            f"reverse over forward (jax.grad through jax.jvp)")
    return rule


ad.primitive_jvps[primal_p] = _primal_jvp
ad.primitive_jvps[tangent_p] = _tangent_jvp
ad.primitive_transposes[tangent_p] = _tangent_transpose
ad.primitive_jvps[vjp_p] = _vjp_jvp
ad.primitive_jvps[vjp_tangent_p] = _no_jvp("a third derivative")
ad.primitive_transposes[vjp_tangent_p] = _vjp_tangent_transpose
ad.primitive_jvps[tangent_tangent_p] = _no_jvp("a third derivative")
ad.primitive_transposes[tangent_tangent_p] = _tangent_tangent_transpose


# --- vmap: one FFI call that loops over the batch -----------------------------------------------------------


COPIES = 2
"""A ``batched`` flag: the operand carries the batch axes, but every item holds the same value (truthy, like
True)."""


def _batching(prim):
    mode = _MODES[prim]

    def rule(args, dims, *, layout: Layout, batch: tuple, batched: tuple):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        cs = _operand_cs(layout, mode)
        consumed = set(_plan(layout, mode)["aliases"])  # seeds: written by the call, one per batch item
        new_batch = (size,) + tuple(batch)
        new_args, flags = [], []
        for j, (a, d, was, c) in enumerate(zip(args, dims, batched, cs)):
            item = tuple(layout.shapes[c])
            if d is None and not was and j not in consumed:
                new_args.append(a)  # shared by every item
                flags.append(False)
                continue
            if d is None:
                a = jnp.broadcast_to(a, (size,) + a.shape)
            else:
                a = jnp.moveaxis(a, d, 0)
            if not was:  # (size, *item) -> (size, *batch, *item)
                a = jnp.broadcast_to(a.reshape((size,) + (1,) * len(batch) + item), new_batch + item)
            # copies of one value (a seed the call consumes, so each item needs its own; anything along an axis of
            # size 1, as jax.jacrev's basis for a scalar result) are COPIES
            flags.append(True if (d is not None and size > 1) or was is True else COPIES)
            new_args.append(a)
        outs = prim.bind(*new_args, layout=layout, batch=new_batch, batched=tuple(flags))
        return outs, [0] * len(outs)
    return rule


for _p in _PRIMITIVES:
    batching.primitive_batchers[_p] = _batching(_p)


def _unsupported_platform(ctx, *args, layout: Layout, **_):
    platforms = ", ".join(getattr(ctx.module_context, "platforms", ()) or ("?",))
    raise ValueError(f"{layout.name}: the enzcc-compiled code runs on the CPU only, but this computation is placed "
                     f"on {platforms}; put its arguments on the CPU (jax.device_put(x, jax.devices('cpu')[0]))")


for _p in _PRIMITIVES:
    mlir.register_lowering(_p, _unsupported_platform)  # the CPU lowering above takes precedence on CPU


# --- the user-facing function -------------------------------------------------------------------------------


class EnzymeFunction:
    """A compiled C function as a JAX function (returned by :func:`enzyme`).

    ``f(*args, **kwargs)`` takes the declaration's call arguments (``f.arg_names``: the input arrays and float
    scalars, and the integers that are neither bound to a shape nor computed) and returns its output array, or
    a tuple of them when the function has several. It composes with ``jax.jit``, ``jax.grad``/``jax.vjp``
    (the enzcc reverse-mode derivative), ``jax.jvp``/``jax.jacfwd`` (the forward-mode derivative),
    ``jax.vmap`` (one FFI call that loops over the batch) and, where enzcc builds it, ``jax.hessian`` and
    other forward-over-reverse second derivatives.
    """

    def __init__(self, kernel, seed_shape: Callable | None = None, qualname: str | None = None,
                 seed: dict | None = None):
        self.kernel = kernel
        self.name = kernel.name
        self.op_name = qualname or ship.op_name(kernel.name)  # stable: what a jax.export names
        self._seed = seed  # the one-array form's out_size, for the manifest (None: a declaration)
        self.params = tuple(kernel.params)
        self.arg_names = tuple(kernel.arg_names)
        self._seed_shape = seed_shape  # the seed's one-array form: the output's shape from the input's
        self._layouts: dict = {}
        self._eager: dict = {}  # layout -> jax.jit of _run
        self.__name__ = self.__qualname__ = kernel.name
        self.__doc__ = f"{kernel.name} from {kernel.source}, compiled by enzcc; derivatives by enzcc."
        entries = kernel.shipped_entries() if isinstance(kernel, ship.ShippedKernel) else {
            e: kernel.address(e) for e in ("primal", "vjp", "jvp")}
        for entry, address in entries.items():  # (a deserialized export's calls find them by name)
            _register_entry(self.op_name, entry, address)

    def save_library(self, directory, *, second_order: bool = True) -> Path:
        """Copy the compiled libraries into ``directory`` with a manifest, for :func:`load_library` in another
        process (a ``jax.export`` of this function names its entry points by ``op_name``). second_order: build
        and ship the second-derivative library too (where enzcc can). Returns the manifest's path."""
        return ship.save(self.kernel, self.op_name, directory, "jax", seed=self._seed, second_order=second_order)

    def __repr__(self) -> str:
        return f"<enzcc JAX function {self.name}({', '.join(self.arg_names)}) from {self.kernel.source}>"

    def _array(self, p, value):
        """value as a JAX array (or tracer) of p's dtype; a clear error naming p otherwise."""
        want = np.dtype(p.dtype)
        if want == np.float64 and jax.dtypes.canonicalize_dtype(np.float64) != np.float64:
            raise TypeError(f"{self.name}: argument {p.name!r} is double (float64), which JAX truncates to float32 "
                            f"unless 64-bit types are enabled: jax.config.update('jax_enable_x64', True) or "
                            f"'with jax.enable_x64(True):'")
        if isinstance(value, (jax.Array, np.ndarray, np.generic)) or hasattr(value, "aval"):
            if value.dtype != want:
                raise TypeError(f"{self.name}: argument {p.name!r} has dtype {value.dtype}, but the C function "
                                f"takes {'float' if want == np.float32 else 'double'} ({want}); convert it with "
                                f".astype(jnp.{want}) or build the function for the other type")
            if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
                platforms = {d.platform for d in value.devices()}
                if platforms - {"cpu"}:
                    raise ValueError(f"{self.name}: argument {p.name!r} is on {', '.join(sorted(platforms))}, but "
                                     f"the enzcc-compiled code runs on the CPU only; move it with "
                                     f"jax.device_put(x, jax.devices('cpu')[0])")
            return value if isinstance(value, jax.Array) else jnp.asarray(value)
        try:
            return jnp.asarray(value, dtype=want)  # Python numbers and (nested) lists
        except (TypeError, ValueError) as e:
            raise TypeError(f"{self.name}: argument {p.name!r} must be an array or a number, got "
                            f"{type(value).__name__}: {e}") from None

    def _layout(self, shapes: dict, free: dict) -> Layout:
        key = (tuple(sorted(shapes.items())), tuple(sorted(free.items())))
        layout = self._layouts.get(key)
        if layout is None:
            k = self.kernel
            plan = k.resolve(shapes, free)
            ints = [0] * len(self.params)
            for p, v in zip([p for p in self.params if p.kind == INT], plan.int_values):
                ints[p.index] = int(v)
            layout = Layout(
                name=self.name, kinds=tuple(p.kind for p in self.params),
                dtypes=tuple(p.dtype or "" for p in self.params), const=tuple(bool(p.const) for p in self.params),
                shapes=tuple(tuple(plan.shapes.get(p.name, ())) if p.kind != INT else () for p in self.params),
                ints=tuple(ints), names=tuple(p.name for p in self.params), qualname=self.op_name, kernel=k)
            self._layouts[key] = layout
        return layout

    def __call__(self, *args, **kwargs):
        bound = self.kernel.bind(*args, **kwargs)
        operands, shapes, free = [], {}, {}
        for p in self.params:
            if p.kind in (IN, SCALAR):
                a = self._array(p, bound[p.name])
                if p.kind == SCALAR and a.shape == (1,):
                    a = a.reshape(())  # (a size-1 scalar, as the other frameworks take it)
                if p.kind == SCALAR and a.shape != ():
                    raise ValueError(f"{self.name}: argument {p.name!r} is a scalar, got an array of shape "
                                     f"{a.shape}")
                operands.append(a)
                shapes[p.name] = tuple(a.shape)
            elif p.kind == INT and p.name in bound:
                v = bound[p.name]
                if isinstance(v, jax.core.Tracer) or isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                    raise TypeError(f"{self.name}: argument {p.name!r} is an integer parameter and must be a "
                                    f"static Python int, got {type(v).__name__}")
                free[p.name] = int(v)
        layout = self._layout(shapes, free)
        if any(isinstance(a, jax.core.Tracer) for a in operands):
            return self._run(layout, *operands)
        # eager: one jitted function per layout, so that a call takes JAX's C++ dispatch path
        run = self._eager.get(layout)
        if run is None:
            run = self._eager[layout] = jax.jit(functools.partial(self._run, layout))
        return run(*operands)

    def _run(self, layout: Layout, *operands):
        if all(math.prod(layout.shapes[c]) == 0 for c, k in enumerate(layout.kinds) if k in (IN, OUT)):
            outs = [jnp.zeros(layout.shapes[c], layout.dtypes[c]) for c in layout.outputs]  # nothing to compute
        else:
            outs = primal_p.bind(*operands, layout=layout, batch=(), batched=(False,) * len(operands))
        if self._seed_shape is not None:
            outs = [outs[0].reshape(self._seed_shape(operands[0].shape))]
        return outs[0] if len(outs) == 1 else tuple(outs)


@memoise_ops("jax")  # the same source, function, declaration and options: the same function
def enzyme(source, name: str, params=None, dtype=None, *, out_size: int | Callable[[int], int] | None = None,
           cflags: Sequence[str] = (), compiler: str | None = None, cache=None,
           lang: str | None = None, namespace: str | None = None, op_name: str | None = None) -> EnzymeFunction:
    """Compile ``name`` from ``source`` (C, C++, Fortran ``bind(c)`` or Rust) and its derivatives with enzcc and
    return it as a JAX function (:class:`EnzymeFunction`) that runs through XLA's FFI.

    params: the declaration, the C parameters in order (``In``, ``Out``, ``Scalar``, ``Int`` from
    ``enzcc_plugins``; see plugins/ABI.md). Without it the function is the one-array
    ``void f(const T *in, size_t n, T *out)``: ``f(x)`` flattens ``x`` into ``in`` with ``n = x.size`` and
    returns an array of ``x``'s shape, or 1-D of ``out_size(n)`` when ``out_size`` (an int or a callable
    ``n -> int``) is given; for this form the third positional argument may be the dtype
    (``enzyme("f.c", "f", "double")``). dtype, cflags, compiler, cache, lang: as for
    :func:`enzcc_plugins.load_kernel`. namespace, op_name: the stable name ``namespace::op_name`` (defaults
    ``enzcc`` and the function's name; op_name may be ``'ns::op'``) by which the handler finds the entry points,
    so that a ``jax.export`` of the function runs in another process after :func:`load_library`. Raises
    ``EnzccBuildError`` (the source does not compile, enzcc refuses a derivative), ``PrototypeError`` (the
    declaration does not match the C function) at load time, ``NameClashError`` when the name already holds
    another function or declaration in this process.
    """
    from .build import load_kernel

    qualname = ship.op_name(name, namespace, op_name)

    if params is not None and not isinstance(params, (list, tuple)):
        if dtype is not None:
            raise TypeError("enzyme(): params must be a list of In/Out/Scalar/Int declarations")
        params, dtype = None, params  # the seed's enzyme(source, name, dtype)
    seed_shape, seed = None, None
    if params is None:
        params, seed_shape = _seed_params(out_size)
        seed = None if callable(out_size) else {"out_size": out_size}
    elif out_size is not None:
        raise TypeError("enzyme(): out_size is for the one-array form; give an Out(...) shape in params instead")
    kernel = load_kernel(source, name, list(params), dtype, cflags=cflags, compiler=compiler, cache=cache,
                         lang=lang)
    return _named(qualname, kernel, seed_shape, seed)


_names = ship.Names("JAX")


def _named(qualname: str, kernel, seed_shape, seed) -> EnzymeFunction:
    """The function under its stable name: the one made before for the same kernel and declaration, a
    NameClashError for another."""
    return _names.get_or_make(qualname, kernel, lambda: EnzymeFunction(kernel, seed_shape, qualname, seed))


def _seed_params(out_size):
    """The one-array form's declaration and the output's shape from the input's."""
    if out_size is not None and not callable(out_size) and (
            isinstance(out_size, bool) or not isinstance(out_size, int) or out_size < 0):
        raise ValueError(f"out_size must be a non-negative int or a callable n -> int, got {out_size!r}")

    def out_len(n: int) -> int:
        m = out_size(n) if callable(out_size) else out_size
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 0:
            raise ValueError(f"out_size({n}) returned {m!r}, not a non-negative int")
        return int(m)

    if out_size is None:
        params = [In("x"), Int("n", value=lambda x: x.size), Out("y", shape=lambda x: (x.size,))]
        seed_shape = tuple
    else:
        params = [In("x"), Int("n", value=lambda x: x.size), Out("y", shape=lambda x: (out_len(x.size),))]
        seed_shape = lambda shape: (out_len(math.prod(shape)),)  # noqa: E731
    return params, seed_shape


def load_library(path, params=None) -> EnzymeFunction | list[EnzymeFunction]:
    """Load the ops saved by :meth:`EnzymeFunction.save_library` (a manifest, the library beside it, or a
    directory: all of them) and register their entry points by name, so that a deserialized ``jax.export`` that
    calls them runs in this process. Returns the function (a list for several). params: the declaration, when
    its shapes are Python callables (a file cannot hold them). No source, no enzcc needed."""
    got = []
    for m in ship.manifests(path):
        qualname, kernel, doc = ship.load(m, params if params is not None else _seed_decl(m))
        seed_shape = _seed_params(doc["seed"]["out_size"])[1] if doc.get("seed") else None
        got.append(_named(qualname, kernel, seed_shape, doc.get("seed")))
    return got[0] if len(got) == 1 else got


def _seed_decl(manifest_path):
    """The one-array form's declaration when the manifest says the function was made in that form."""
    doc = ship._read(manifest_path)
    return _seed_params(doc["seed"]["out_size"])[0] if doc.get("seed") else None


_register_if_built()
