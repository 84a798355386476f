"""TensorFlow integration: a C/C++/Fortran/Rust function compiled by enzcc as a TensorFlow op with gradients.

    from enzcc_plugins.tensorflow import enzyme
    y = enzyme(x, filename="f.c", function="f")     # void f(const T *in, size_t n, T *out): y has x's shape

    from enzcc_plugins.tensorflow import In, Out, Scalar, Int     # (re-exported from enzcc_plugins)
    f = enzyme("g.c", "g", [In("x", shape=("n",)), In("c", shape=("n",), const=True), Scalar("s"), Int("n"),
                            Out("y", shape=("n",)), Out("t", shape=(2,))])
    with tf.GradientTape() as tape:
        y, t = f(x, c, s)                            # eager, or inside tf.function

Every function runs through ONE generic custom op, ``EnzccCall`` (plugins/native/tf_op.cc), compiled once per
machine against the installed TensorFlow's headers and ``libtensorflow_framework`` into the plugin cache and
loaded with ``tf.load_op_library``. The op calls the entry points of plugins/ABI.md with the tensors' buffers;
its ``spec`` attribute says which entry point (its address, checked against its symbol name), the shapes,
and what each pointer is. Derivatives:

- ``tf.GradientTape`` (eager and ``tf.function``): the op's registered gradient calls ``NAME_enzcc_vjp``;
- ``tf.autodiff.ForwardAccumulator``: ``NAME_enzcc_jvp`` (one call; registered as the op's forward rule);
- second order, where enzcc builds ``NAME_enzcc_vjp_jvp``: a ForwardAccumulator over a GradientTape
  (Hessian-vector products), a GradientTape over a GradientTape, and a GradientTape over a
  ForwardAccumulator. Forward over forward is not available (an error says so).

Shapes must be static when the op is built (TensorFlow retraces a ``tf.function`` for each new shape unless
an ``input_signature`` with unknown extents is given; that is an error naming the argument). Tensors must be
on the CPU and of the declared dtype; Python numbers and lists are converted to it.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from . import build as _build
from . import ship
from .build import EnzccBuildError, In, Int, Out, PrototypeError, Scalar, SecondOrderError, ShapeError, cache_dir
from .ship import NameClashError, ShippedLibraryError

__all__ = ["enzyme", "load_library", "EnzccOp", "op_library", "NameClashError", "ShippedLibraryError", "In", "Out", "Scalar", "Int", "EnzccBuildError", "PrototypeError",
           "SecondOrderError", "ShapeError"]

_OP_SOURCE = Path(__file__).resolve().parent / "native" / "tf_op.cc"
_REGISTRY_HEADER = _OP_SOURCE.parent / "entry_registry.h"
_TF_DTYPES = {"float32": tf.float32, "float64": tf.float64}
_C_NAMES = {"float32": "float", "float64": "double"}

# pointer kinds of tf_op.cc's layout (enum Slot)
_NULL, _INPUT, _OUTPUT, _OUTPUT_ZERO, _SCRATCH, _SCRATCH_ZERO, _SCRATCH_COPY, _INT = range(8)


# --- the op library: built once per machine and TensorFlow version ----------------------------------------

def _cxx() -> str:
    var = "ENZCC_TF_CXX" if os.environ.get("ENZCC_TF_CXX") else "ENZCC_PLUGINS_CXX"
    env = os.environ.get(var)
    if env:
        if shutil.which(env) is None:
            raise EnzccBuildError(f"{var}={env!r} is not an executable on PATH")
        return env
    for c in ("clang++-22", "clang++", "g++", "c++"):
        if shutil.which(c):
            return c
    raise EnzccBuildError("no C++ compiler found to build the enzcc TensorFlow op (install clang++ or g++, "
                          "or set ENZCC_PLUGINS_CXX)")


_op_lock = threading.Lock()
_op_module = None


def _op_library_path() -> tuple[Path, Callable]:
    """Where the op library lives in the plugin cache, and the command that builds it."""
    cflags, lflags = tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()
    cxx = _cxx()
    h = hashlib.sha256()
    for part in (tf.__version__, json.dumps([cflags, lflags]), shutil.which(cxx) or cxx, _OP_SOURCE.read_text(),
                 _REGISTRY_HEADER.read_text()):
        h.update(part.encode() + b"\0\1")
    stem = f"tf_op-{tf.__version__}-{h.hexdigest()[:16]}"
    path = cache_dir().absolute() / f"{stem}.so"
    return path, lambda out: [cxx, "-O2", "-shared", "-fPIC", "-w", *cflags, str(_OP_SOURCE), "-o", str(out),
                              *lflags]


def op_library() -> Path:
    """The path of the compiled EnzccCall op library, building it on first use (cached under the plugin cache
    directory, keyed by the TensorFlow version and build flags, the compiler, tf_op.cc's and
    entry_registry.h's text)."""
    path, command = _op_library_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    return _build.build_native_once(path, command, "the enzcc TensorFlow op")


_op_entries = None  # the op library through ctypes: enzcc_register_entry


def _ops():
    global _op_module, _op_entries
    with _op_lock:
        if _op_module is None:
            path = str(op_library())
            module = tf.load_op_library(path)
            lib = ctypes.CDLL(path)  # the same loaded library (and registry) as TensorFlow's
            lib.enzcc_register_entry.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
            lib.enzcc_register_entry.restype = ctypes.c_int
            _op_module, _op_entries = module, lib
        return _op_module


def _register_entry(qualname: str, entry: str, address: int) -> None:
    """Tell the op where ``entry`` of the kernel named ``qualname`` is (it finds it by name, never by an address
    kept in a graph)."""
    _ops()
    if _op_entries.enzcc_register_entry(qualname.encode(), entry.encode(), address) != 0:
        raise NameClashError(f"TensorFlow op {qualname!r}: the name's entry point {entry} is already another "
                             f"function in this process; choose another op_name= (or namespace=)")


def _register_if_built() -> None:
    """At import: load the op library when it is already built (no build), so that a SavedModel using
    EnzccCall loads, and runs into the op's error naming the library to load rather than 'Op type not
    registered'."""
    try:
        if _op_library_path()[0].exists():
            _ops()
    except (EnzccBuildError, OSError, tf.errors.OpError):
        pass


# --- one kernel at one set of shapes: the op's attributes for each entry point -----------------------------

class _Variant:
    """A kernel resolved at one set of input shapes and integer values: the attributes of the EnzccCall op
    for each entry point. Its ``key`` (the op's stable name and the free integers' values) lets the gradient and
    forward rules, which see only the op, find it again from the op's input shapes, in this process or in one
    that loaded a SavedModel."""

    def __init__(self, op: "EnzccOp", plan, free_ints: Sequence[int]):
        kernel = op.kernel
        self.kernel = kernel
        self.qualname = op.op_name
        self.plan = plan
        self.params = sorted(kernel.params, key=lambda p: p.index)
        self.ins = [p for p in self.params if p.kind in ("in", "scalar")]
        self.outs = [p for p in self.params if p.kind == "out"]
        self.diff = [p for p in self.ins if p.differentiable]
        self.ints = [p for p in self.params if p.kind == "int"]
        self.in_pos = {p.name: i for i, p in enumerate(self.ins)}
        self.out_pos = {p.name: j for j, p in enumerate(self.outs)}
        self.diff_pos = {p.name: g for g, p in enumerate(self.diff)}
        self.int_pos = {p.name: k for k, p in enumerate(self.ints)}
        self.int_values = [int(plan.ints[p.name]) for p in self.ints]
        self.shape = {p.name: tuple(int(e) for e in plan.shapes.get(p.name, ())) for p in self.params
                      if p.kind != "int"}
        self.dtype = {p.name: _TF_DTYPES[p.dtype] for p in self.params if p.kind != "int"}
        self.key = f"{op.op_name}|{','.join(str(int(v)) for v in free_ints)}"
        self._attrs: dict[str, tuple] = {}

    # the four entry points: op inputs, op outputs and the pointer layout

    def _layout(self, mode: str):
        nin, nout, ndiff = len(self.ins), len(self.outs), len(self.diff)
        ins = [(p.name, self.dtype[p.name], self.shape[p.name]) for p in self.ins]
        outs = [(f"d{p.name}" if mode != "primal" else p.name, self.dtype[p.name], self.shape[p.name])
                for p in self.outs]
        grads = [(p.name, self.dtype[p.name], self.shape[p.name]) for p in self.diff]
        scratch: list[tuple] = []

        def temp(p, kind, copy_of=0):
            scratch.append((self.dtype[p.name], self.shape[p.name]))
            return (kind, len(scratch) - 1, copy_of)

        def a_entry(p, out_kind):
            if p.kind in ("in", "scalar"):
                return (_INPUT, self.in_pos[p.name], 0)
            if p.kind == "int":
                return (_INT, self.int_pos[p.name], 0)
            return out_kind(p)

        a, d, ta, td = [], [], [], []
        if mode == "primal":          # inputs: x;  outputs: y
            op_in, op_out = ins, [(p.name, self.dtype[p.name], self.shape[p.name]) for p in self.outs]
            a = [a_entry(p, lambda p: (_OUTPUT, self.out_pos[p.name], 0)) for p in self.params]
            arrays = [a]
        elif mode == "jvp":           # inputs: x, tangents of diff inputs;  outputs: y, tangents of y
            op_in = ins + [(f"t_{n}", t, s) for n, t, s in grads]
            op_out = [(p.name, self.dtype[p.name], self.shape[p.name]) for p in self.outs] + outs
            a = [a_entry(p, lambda p: (_OUTPUT, self.out_pos[p.name], 0)) for p in self.params]
            for p in self.params:
                if p.kind == "out":
                    d.append((_OUTPUT, nout + self.out_pos[p.name], 0))
                elif p.name in self.diff_pos:
                    d.append((_INPUT, nin + self.diff_pos[p.name], 0))
                else:
                    d.append((_NULL, 0, 0))
            arrays = [a, d]
        elif mode in ("vjp", "vjp_jvp"):
            # vjp:     inputs: x, seeds;                       outputs: gradients of diff inputs
            # vjp_jvp: inputs: x, seeds, tangents of diff inputs, tangents of seeds;
            #          outputs: gradients, tangents of the gradients
            op_in = ins + [(f"seed_{p.name}", self.dtype[p.name], self.shape[p.name]) for p in self.outs]
            op_out = list(grads)
            if mode == "vjp_jvp":
                op_in += [(f"t_{n}", t, s) for n, t, s in grads]
                op_in += [(f"t_seed_{p.name}", self.dtype[p.name], self.shape[p.name]) for p in self.outs]
                op_out += [(f"t_{n}", t, s) for n, t, s in grads]
            a = [a_entry(p, lambda p: temp(p, _SCRATCH)) for p in self.params]
            for p in self.params:
                if p.kind == "out":  # the seed is consumed: a private copy
                    d.append(temp(p, _SCRATCH_COPY, nin + self.out_pos[p.name]))
                elif p.name in self.diff_pos:  # arrays accumulate (+=): zeroed; scalars are stored
                    d.append((_OUTPUT_ZERO if p.kind == "in" else _OUTPUT, self.diff_pos[p.name], 0))
                else:
                    d.append((_NULL, 0, 0))
            arrays = [a, d]
            if mode == "vjp_jvp":
                for p in self.params:
                    if p.kind == "out":
                        ta.append(temp(p, _SCRATCH_ZERO))
                        td.append(temp(p, _SCRATCH_COPY, nin + nout + ndiff + self.out_pos[p.name]))
                    elif p.name in self.diff_pos:
                        g = self.diff_pos[p.name]
                        ta.append((_INPUT, nin + nout + g, 0))
                        td.append((_OUTPUT_ZERO if p.kind == "in" else _OUTPUT, ndiff + g, 0))
                    else:
                        ta.append((_NULL, 0, 0))
                        td.append((_NULL, 0, 0))
                arrays = [a, d, ta, td]
        else:  # pragma: no cover - internal
            raise ValueError(mode)
        return op_in, op_out, scratch, arrays

    def attrs(self, mode: str, batch: tuple | None = None) -> tuple[list, dict]:
        """The op inputs' (name, dtype, shape) and the EnzccCall attributes for one entry point (the
        entry point is registered by name, building the second-order library on first use of vjp_jvp).
        batch: (B, one 0/1 flag per op input), the op that runs the entry point over B items (tf.vectorized_map:
        :func:`_pfor_rule`), its key ending in ``|B:flags``."""
        if (mode, batch) not in self._attrs:
            op_in, op_out, scratch, arrays = self._layout(mode)
            _register_entry(self.qualname, mode, int(self.kernel.address(mode)))
            fields = ["enzcc2", self.qualname, mode, self.kernel.name, len(arrays), len(self.params), len(op_in)]
            for n, _, shape in op_in:
                fields += [n, len(shape), *shape]
            fields.append(len(op_out))
            for _, _, shape in op_out:
                fields += [len(shape), *shape]
            fields.append(len(scratch))
            for t, shape in scratch:
                fields += [t.as_datatype_enum, len(shape), *shape]
            fields += [v for arr in arrays for entry in arr for v in entry]
            fields += [len(self.int_values), *self.int_values]
            key = f"{self.key}|{mode}"
            if batch is not None:
                fields += ["batch", batch[0], len(batch[1]), *batch[1]]
                key += f"|{batch[0]}:{''.join(map(str, batch[1]))}"
            if self.kernel.checked:
                fields += self._checked_fields(arrays)
            attrs = dict(Tout=[t for _, t, _ in op_out], spec=" ".join(str(f) for f in fields), key=key)
            self._attrs[(mode, batch)] = (op_in, attrs)
        return self._attrs[(mode, batch)]

    def call_batched(self, mode: str, inputs: Sequence, B: int) -> list:
        """Run the entry point ``mode`` over B items in one op: an input of one item's shape is shared by the
        items, one with a leading axis of B is item by item (None entries: shared zeros). Outputs have the
        leading axis of B."""
        op_in, _ = self.attrs(mode)
        inputs = [tf.zeros(s, t) if x is None else x for x, (_, t, s) in zip(inputs, op_in)]
        flags = []
        for x, (what, t, shape) in zip(inputs, op_in):
            got = tuple(x.shape.as_list())
            if x.dtype != t or got not in (tuple(shape), (B, *shape)):
                raise ValueError(f"{self.kernel.name}: {what} has shape {got} ({x.dtype.name}) in a batch of {B}; "
                                 f"one item's is {tuple(shape)} ({t.name})")
            flags.append(int(got != tuple(shape)))
        _, attrs = self.attrs(mode, (B, tuple(flags)))
        return _ops().enzcc_call(inputs, **attrs)

    def _checked_fields(self, arrays) -> list:
        """The spec's checked-mode section (plugins/native/tf_op.cc): the function's name, then per pointer its
        element size and what it is (hex: the texts hold spaces); registers guard.c's checked call with the op."""
        from . import guard
        _register_entry("enzcc::checked", "call", guard.native_call_address())
        fields = ["checked", self.kernel.name.encode().hex()]
        for k, arr in enumerate(arrays):
            for p in self.params:
                what, item = guard.describe_slot(k, p.kind, p.name, self.shape.get(p.name, ()), p.dtype or "")
                fields += [item, what.encode().hex()]
        return fields

    def call(self, mode: str, inputs: Sequence) -> list:
        """Run the entry point ``mode`` on op inputs (tensors; None entries become zeros)."""
        op_in, attrs = self.attrs(mode)
        inputs = [tf.zeros(s, t) if x is None else x for x, (_, t, s) in zip(inputs, op_in)]
        for x, (what, t, _) in zip(inputs, op_in):  # the op reads each buffer as the kernel's type
            if x.dtype != t:
                raise TypeError(f"{self.kernel.name}: {what} has dtype {x.dtype.name}, the kernel takes {t.name}")
        return _ops().enzcc_call(inputs, **attrs)

    # helpers for the derivative rules

    def zeros_if_none(self, values, params) -> list:
        return [tf.zeros(self.shape[p.name], self.dtype[p.name]) if v is None else v
                for v, p in zip(values, params)]

    def per_input(self, diff_values) -> list:
        """One entry per op input from one per differentiable input (None for const ones)."""
        return [diff_values[self.diff_pos[p.name]] if p.name in self.diff_pos else None for p in self.ins]

    def diff_only(self, per_input) -> list:
        return [per_input[self.in_pos[p.name]] for p in self.diff]


def _batch_of(key) -> tuple[int, tuple] | None:
    """(B, the op inputs' flags) of a batched op's key (tf.vectorized_map), None for an op of one call."""
    if isinstance(key, bytes):
        key = key.decode()
    parts = key.split("|")
    if len(parts) == 3:
        return None
    if len(parts) != 4:
        raise ValueError(key)
    b, flags = parts[3].split(":")
    return int(b), tuple(int(f) for f in flags)


def _variant_of(key, inputs) -> tuple[_Variant, str]:
    """The variant and entry point of an EnzccCall op from its ``key`` attribute (stable name, free integers,
    entry point) and its inputs' shapes (the kernel's inputs come first)."""
    if isinstance(key, bytes):
        key = key.decode()
    try:
        qualname, ints, mode = key.split("|")[:3]
        free = [int(v) for v in ints.split(",") if v]
        batch = _batch_of(key)
    except ValueError:
        raise LookupError(f"EnzccCall op key {key!r} is not one this enzcc_plugins writes (made by another "
                          f"version?)") from None
    op = _names.lookup(qualname)
    if op is None:
        raise LookupError(f"the enzcc op {qualname} is not loaded in this process, so its derivatives are unknown; "
                          f"call enzcc_plugins.tensorflow.load_library(path) with the library saved by "
                          f"save_library(...), or make the op again with enzcc_plugins.tensorflow.enzyme(...)")
    shapes = [tuple(t.shape.as_list()) for t in inputs[:len(op.kernel.inputs)]]
    if batch is not None:  # one item's shapes
        shapes = [s[1:] if f else s for s, f in zip(shapes, batch[1])]
    return op._variant(shapes, free), mode


# --- reverse mode: the registered gradient -----------------------------------------------------------------

def _refuse_const_gradients(v: "_Variant", op) -> None:
    """A gradient asked of a ``const=True`` input (watched, or computed from a watched tensor) would be
    missing the path through it: an error instead. TensorFlow says which inputs need no gradient
    (``skip_input_indices``) under a GradientTape, eagerly and inside ``tf.function``; ``tf.gradients`` in a
    graph does not, and there a const input is a constant, as with ``tf.stop_gradient``."""
    skip = getattr(op, "skip_input_indices", None)
    if skip is None:
        return
    for p in v.ins:
        if p.const and v.in_pos[p.name] not in skip:
            raise ValueError(f"{v.kernel.name}: a gradient flows into '{p.name}', which is declared const=True "
                             f"(enzcc computes no derivative for it); declare it without const, or pass "
                             f"tf.stop_gradient({p.name})")


def _grad(op, *grads):
    """The gradient of an EnzccCall op, for each entry point it can be (see the module docstring)."""
    v, mode = _variant_of(op.get_attr("key"), op.inputs)
    nin, nout, ndiff = len(v.ins), len(v.outs), len(v.diff)
    x = list(op.inputs[:nin])
    _refuse_const_gradients(v, op)
    batch = _batch_of(op.get_attr("key"))
    if batch is not None:
        return _batched_grad(v, mode, batch, x, grads)
    if mode == "primal":
        if all(g is None for g in grads) or not ndiff:
            return [None] * nin
        return v.per_input(v.call("vjp", x + v.zeros_if_none(grads, v.outs)))
    if mode == "vjp":
        # G = J(x)^T s;  cotangent w of G:  dx = H_s w (forward over reverse),  ds = J w (forward)
        w = list(grads)
        if all(g is None for g in w):
            return [None] * (nin + nout)
        w = v.zeros_if_none(w, v.diff)
        seeds = list(op.inputs[nin:nin + nout])
        skip = set(getattr(op, "skip_input_indices", None) or ())
        if all(v.in_pos[p.name] in skip for p in v.diff):
            dx = [None] * nin
        else:
            res = v.call("vjp_jvp", x + seeds + w + [None] * nout)
            dx = v.per_input(res[ndiff:])
        ds = v.call("jvp", x + w)[nout:]
        return dx + ds
    if mode == "jvp":
        # (y, ydot) = (f(x), J(x) t);  cotangents (u, v):  dx = J^T u + H_v t,  dt = J^T v
        u, vv = list(grads[:nout]), list(grads[nout:])
        t = list(op.inputs[nin:nin + ndiff])
        if all(g is None for g in vv):
            if all(g is None for g in u):
                return [None] * (nin + ndiff)
            return v.per_input(v.call("vjp", x + v.zeros_if_none(u, v.outs))) + [None] * ndiff
        res = v.call("vjp_jvp", x + v.zeros_if_none(vv, v.outs) + t + v.zeros_if_none(u, v.outs))
        return v.per_input(res[ndiff:]) + res[:ndiff]
    raise NotImplementedError(f"{v.kernel.name}: a derivative of the forward-over-reverse entry point (a third "
                              f"derivative, or forward over forward) is not available from enzcc; first and "
                              f"second derivatives are")


def _batched_grad(v: _Variant, mode: str, batch: tuple, x: list, grads) -> list:
    """The gradient of a batched op (tf.vectorized_map, taken outside the map): the batched vjp, whose items'
    gradients of a shared input are summed. Only of the primal: a derivative of a batched derivative (second
    order through the map) is an error, not a guess."""
    B, flags = batch
    nin = len(v.ins)
    if mode != "primal":
        raise NotImplementedError(f"{v.kernel.name}: a derivative of the '{mode}' entry point batched by "
                                  f"tf.vectorized_map (second order through the map) is not available; take the "
                                  f"derivatives inside the mapped function")
    if all(g is None for g in grads) or not v.diff:
        return [None] * nin
    seeds = [tf.zeros((B, *v.shape[p.name]), v.dtype[p.name]) if g is None else g for g, p in zip(grads, v.outs)]
    per_item = v.per_input(v.call_batched("vjp", x + seeds, B))
    return [g if g is None or f else tf.reduce_sum(g, axis=0) for g, f in zip(per_item, flags[:nin])]


# --- tf.vectorized_map: the op's pfor rule ----------------------------------------------------------------------

def _pfor_rule(pfor_input):
    """tf.vectorized_map (pfor) of an EnzccCall op: the same entry point over the B items in one op (the batch
    section of tf_op.cc's spec), the inputs that vary from item to item stacked, the others shared. Where B is not
    known when the graph is made, or the op is batched already, pfor's fallback (a while loop of the op) runs."""
    from tensorflow.python.ops.parallel_for import pfor as _pfor
    op = pfor_input.op
    key = op.get_attr("key")
    n = tf.get_static_value(pfor_input.pfor.loop_len_vector)
    if _batch_of(key) is not None or n is None:
        raise _pfor.ConversionNotImplementedError("EnzccCall: a batch of unknown size, or a batch of a batch")
    v, mode = _variant_of(key, op.inputs)
    inputs = [pfor_input.input(i)[0] for i in range(pfor_input.num_inputs)]
    outs = v.call_batched(mode, inputs, int(n[0]))
    return [_pfor.wrap(o, True) for o in outs]


# --- forward mode: the op's JVP rule for tf.autodiff.ForwardAccumulator -------------------------------------

def _jvp(attr_tuple, inputs, outputs, tangents):
    """Output tangents of an EnzccCall op from its input tangents (TensorFlow's forward-mode hook)."""
    attrs = dict(zip(attr_tuple[::2], attr_tuple[1::2]))
    v, mode = _variant_of(attrs["key"], inputs)
    nin, nout, ndiff = len(v.ins), len(v.outs), len(v.diff)
    x = list(inputs[:nin])
    if _batch_of(attrs["key"]) is not None:
        raise NotImplementedError(f"{v.kernel.name}: forward mode (tf.autodiff.ForwardAccumulator) over an op "
                                  f"batched by tf.vectorized_map is not available; take the derivatives inside "
                                  f"the mapped function")
    if mode not in ("primal", "vjp"):
        raise NotImplementedError(f"{v.kernel.name}: forward mode over a '{mode}' entry point (forward over "
                                  f"forward or third order) is not available from enzcc")
    with tf.control_dependencies(_const_tangents_are_zero(v, tangents[:nin])):
        if mode == "primal":
            if not ndiff:  # zeros made under the checks, so that they run
                return [tf.zeros(v.shape[p.name], v.dtype[p.name]) for p in v.outs]
            t = v.zeros_if_none(v.diff_only(list(tangents[:nin])), v.diff)
            return v.call("jvp", x + t)[nout:]
        # G = J(x)^T s:  Gdot = H_s xdot + J^T sdot
        seeds = list(inputs[nin:nin + nout])
        xdot = v.zeros_if_none(v.diff_only(list(tangents[:nin])), v.diff)
        sdot = v.zeros_if_none(list(tangents[nin:nin + nout]), v.outs)
        return v.call("vjp_jvp", x + seeds + xdot + sdot)[ndiff:]


def _const_tangents_are_zero(v: _Variant, tangents) -> list:
    """Checks that const inputs get no tangent: the derivative code ignores them, so forward mode would
    otherwise drop their contribution silently. TensorFlow passes zeros for inputs without a tangent."""
    checks = []
    for p, t in zip(v.ins, tangents):
        if t is not None and not p.differentiable:
            c = tf.debugging.assert_equal(
                tf.math.count_nonzero(t), tf.constant(0, tf.int64),
                message=f"{v.kernel.name}: argument '{p.name}' is declared const (no derivative), but forward "
                        f"mode gave it a nonzero tangent")
            if c is not None:
                checks.append(c)
    return checks


def _register_rules() -> None:
    try:
        tf.RegisterGradient("EnzccCall")(_grad)
    except KeyError:  # already registered: this module was reloaded
        pass
    try:
        from tensorflow.python.ops.parallel_for import pfor as _pfor
        if "EnzccCall" not in _pfor._pfor_converter_registry:
            _pfor.RegisterPFor("EnzccCall")(_pfor_rule)
    except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow: pfor's while-loop fallback
        pass
    try:
        from tensorflow.python.eager import forwardprop
        forwardprop._SPECIAL_CASES["EnzccCall"] = _jvp
    except (ImportError, AttributeError):  # pragma: no cover - another TensorFlow: the generic fallback
        pass                                # (a transposed gradient) still gives forward mode


_register_rules()


# --- the public API ------------------------------------------------------------------------------------------

class EnzccOp:
    """A compiled function as a TensorFlow operation: call it with the kernel's call arguments (positional or
    by name; ``.arg_names``). Returns the output tensor, or a tuple of them when the function has several."""

    def __init__(self, kernel, qualname: str | None = None, seed: bool = False):
        self.kernel = kernel
        self.op_name = qualname or ship.op_name(kernel.name)  # stable: what a SavedModel names
        self._seed = seed  # made by the one-array form (its declaration is rebuilt by load_library)
        entries = kernel.shipped_entries() if isinstance(kernel, ship.ShippedKernel) else {
            e: kernel.address(e) for e in ("primal", "vjp", "jvp")}
        for entry, address in entries.items():  # (a SavedModel's nodes find them by name)
            _register_entry(self.op_name, entry, address)
        self.arg_names = tuple(kernel.arg_names)
        self._args = tuple(kernel.by_name[n] for n in self.arg_names)  # In/Scalar in C order, free Ints
        self._variants: dict[tuple, _Variant] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<enzcc TensorFlow op {self.kernel.name}({', '.join(self.arg_names)}) from {self.kernel.source}>"

    def _tensor(self, p, value):
        """``value`` as a CPU tensor of the parameter's dtype, with a static shape (errors name the argument)."""
        name = self.kernel.name
        want = _TF_DTYPES[p.dtype]
        if isinstance(value, (tf.Tensor, tf.Variable, np.ndarray, np.generic)):
            if value.dtype != want:  # never a silent cast
                got = tf.as_dtype(value.dtype).name
                raise TypeError(f"{name}: argument '{p.name}' has dtype {got}, but the C function takes "
                                f"{_C_NAMES[p.dtype]} ({p.dtype}); convert it with tf.cast(..., tf.{p.dtype})")
            if isinstance(value, (tf.Tensor, tf.Variable)):
                device = value.device if tf.executing_eagerly() or isinstance(value, tf.Variable) else ""
                if device and ":CPU:" not in device.upper() + ":":
                    raise RuntimeError(f"{name}: argument '{p.name}' is on {device}, but the enzcc-compiled code "
                                       f"runs on the CPU only; copy it with tf.identity under tf.device('/CPU:0')")
            t = value if isinstance(value, tf.Tensor) else tf.convert_to_tensor(value)
        else:
            try:
                t = tf.convert_to_tensor(value, dtype=want)
            except (TypeError, ValueError) as e:
                raise TypeError(f"{name}: argument '{p.name}' cannot be converted to a {p.dtype} tensor: "
                                f"{e}") from None
        shape = t.shape
        if p.kind == "scalar" and shape.rank != 0:
            if shape.num_elements() != 1:
                raise ValueError(f"{name}: argument '{p.name}' is a scalar ({_C_NAMES[p.dtype]}) but has shape "
                                 f"{tuple(shape)}")
            t = tf.reshape(t, [])
            shape = t.shape
        if not shape.is_fully_defined():
            raise ValueError(f"{name}: argument '{p.name}' has shape {shape} here (a tf.function with an "
                             f"input_signature?): the enzcc op needs static shapes; leave the extents known "
                             f"(TensorFlow retraces for each new shape)")
        return t, tuple(shape.as_list())

    def _int(self, p, value) -> int:
        if isinstance(value, (tf.Tensor, tf.Variable, bool)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{self.kernel.name}: argument '{p.name}' is an integer parameter: pass a Python int, "
                            f"got {type(value).__name__}")
        return int(value)

    @tf.autograph.experimental.do_not_convert  # plain Python: nothing for autograph to rewrite in tf.function
    def __call__(self, *args, **kwargs):
        if kwargs or len(args) != len(self._args):
            bound = self.kernel.bind(*args, **kwargs)  # TypeError naming a missing or unknown argument
            args = [bound[n] for n in self.arg_names]
        tensors, shapes, ints = [], [], []
        for p, value in zip(self._args, args):
            if p.kind == "int":
                ints.append(self._int(p, value))
            else:
                t, shape = self._tensor(p, value)
                tensors.append(t)
                shapes.append(shape)
        _, attrs = self._variant(shapes, ints).attrs("primal")
        outs = (_op_module or _ops()).enzcc_call(tensors, **attrs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _variant(self, shapes: Sequence[tuple], ints: Sequence[int]) -> _Variant:
        """The variant for the inputs' shapes (C order) and the free integers' values, made once."""
        sig = (tuple(shapes), tuple(ints))
        variant = self._variants.get(sig)
        if variant is None:
            names = [p.name for p in self._args]
            plan = self.kernel.resolve(dict(zip((n for n, p in zip(names, self._args) if p.kind != "int"), shapes)),
                                       dict(zip((n for n, p in zip(names, self._args) if p.kind == "int"), ints)))
            with self._lock:
                variant = self._variants.get(sig)
                if variant is None:
                    variant = self._variants[sig] = _Variant(self, plan, ints)
        return variant

    def save_library(self, directory, *, second_order: bool = True) -> Path:
        """Copy the compiled libraries into ``directory`` with a manifest, for :func:`load_library` in the
        process that loads a SavedModel using this op. second_order: build and ship the second-derivative
        library too (where enzcc can). Returns the manifest's path."""
        return ship.save(self.kernel, self.op_name, directory, "tensorflow",
                         seed={"out_size": None} if self._seed else None, second_order=second_order)


_seed_lock = threading.Lock()
_seed_ops: dict[tuple, EnzccOp] = {}


_names = ship.Names("TensorFlow")


@_build.memoise_ops("tensorflow")  # the same source, function, declaration and options: the same op
def _load(source, name, params, dtype, cflags, compiler, cache, lang, qualname=None) -> EnzccOp:
    if isinstance(cflags, str):
        cflags = cflags.split()
    seed = params is None
    kernel = _build.load_kernel(source, name, list(params if not seed else _seed_params()), dtype,
                                cflags=tuple(cflags), compiler=compiler, cache=cache, lang=lang)
    return _named(qualname or ship.op_name(name), kernel, seed)


def _named(qualname: str, kernel, seed: bool) -> EnzccOp:
    """The op under its stable name: the one made before for the same kernel and declaration, a NameClashError
    for another (a SavedModel names the op by it)."""
    return _names.get_or_make(qualname, kernel, lambda: EnzccOp(kernel, qualname, seed))


def load_library(path, params=None) -> EnzccOp | list[EnzccOp]:
    """Load the ops saved by :meth:`EnzccOp.save_library` (a manifest, the library beside it, or a directory:
    all of them): the EnzccCall op library and the kernels' entry points by name, so that a SavedModel using them
    loads and runs (with gradients) in this process. Returns the op (a list for several). params: the
    declaration, when its shapes are Python callables (a file cannot hold them). No source, no enzcc needed."""
    got = []
    for m in ship.manifests(path):
        seed = bool(ship._read(m).get("seed"))
        qualname, kernel, _ = ship.load(m, params if params is not None else (_seed_params() if seed else None))
        got.append(_named(qualname, kernel, seed))
    _ops()
    return got[0] if len(got) == 1 else got


def _seed_params():
    """The seed's signature ``void f(const T *in, size_t n, T *out)``: out has in's shape."""
    return [In("x"), Int("n", lambda x: x.size), Out("out", shape=lambda x: x.shape)]


@tf.autograph.experimental.do_not_convert
def enzyme(*args, filename=None, function=None, params=None, dtype=None, cflags: Sequence[str] = (),
           compiler: str | None = None, cache=None, lang: str | None = None, namespace: str | None = None,
           op_name: str | None = None, **kwargs):
    """A C/C++/Fortran/Rust function compiled by enzcc, as a TensorFlow op with gradients.

    Two forms:

    - ``enzyme(source, name, params=None, dtype=None, ...)`` returns an :class:`EnzccOp` to call with tensors.
      ``params`` is the declaration (``In``/``Out``/``Scalar``/``Int`` of :mod:`enzcc_plugins.build`, in the C
      order); without it the function is ``void name(const T *in, size_t n, T *out)`` with ``out`` shaped like
      ``in`` (``dtype`` then picks ``T``; default: the prototype's).
    - ``enzyme(*tensors, filename=source, function=name, ...)`` compiles (once; cached) and calls it: the
      reference system's form ``enzyme(inp, filename="test.c", function="f")``. Without ``params`` the seed
      signature above is used with ``T`` from the tensor's dtype.

    cflags, compiler, cache, lang: as for ``enzcc_plugins.build.load_kernel``. namespace, op_name: the stable
    name ``namespace::op_name`` (defaults ``enzcc`` and the function's name; op_name may be ``'ns::op'``) by
    which a SavedModel names the function (:func:`load_library` in the loading process). Raises
    ``EnzccBuildError`` (``PrototypeError`` when the declaration does not match the function) at load time,
    ``NameClashError`` when the name already holds another function or declaration in this process.
    """
    if filename is None and function is None:
        if len(args) < 2 or kwargs:
            raise TypeError("enzyme(source, name, params=None, ...) or enzyme(*tensors, filename=..., function=...)")
        source, name = args[0], args[1]
        if len(args) > 2:
            if params is not None or len(args) > 3:
                raise TypeError("enzyme(source, name, params=None, ...): too many positional arguments")
            params = args[2]
        return _load(source, name, params, dtype, cflags, compiler, cache, lang,
                     ship.op_name(name, namespace, op_name))
    if filename is None or function is None:
        raise TypeError("enzyme(*tensors, filename=..., function=...) needs both filename and function")
    if params is None:
        if len(args) != 1 or kwargs:
            raise TypeError(f"enzyme(inp, filename=..., function={function!r}): the seed signature takes one "
                            f"tensor; pass params=[...] for other signatures")
        if dtype is None and hasattr(args[0], "dtype"):  # else: the prototype's type
            dtype = _build.normalize_dtype(getattr(args[0].dtype, "name", args[0].dtype))
    path = Path(filename).expanduser().resolve()
    try:
        st = path.stat()
    except OSError as e:
        raise FileNotFoundError(f"enzyme: cannot read source filename={filename!r}: {e}") from e
    key = (str(path), st.st_mtime_ns, st.st_size, function, repr(params), str(dtype), tuple(cflags), compiler,
           str(cache), lang, namespace, op_name)
    with _seed_lock:
        op = _seed_ops.get(key)
    if op is None:
        op = _load(path, function, params, dtype, cflags, compiler, cache, lang,
                   ship.op_name(function, namespace, op_name))
        with _seed_lock:
            op = _seed_ops.setdefault(key, op)
    return op(*args, **kwargs)


_register_if_built()
