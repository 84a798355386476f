"""Ops that save and load (issue 36 item 2): stable op names, shipped libraries, and a saved program of each
framework (torch.export, a TensorFlow SavedModel, jax.export) loaded and run in a fresh Python process after
``load_library``: values and gradients (and, for PyTorch, a second derivative) equal to the saving process's and
to the framework's own derivatives of the same function. Errors: two functions under one name in one process,
a saved program run without its library, a manifest whose declaration holds Python callables.
``torch.jit.trace`` records the op itself.

Each framework's tests are skipped when it is not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from enzcc_testing import plugins_importable

np = pytest.importorskip("numpy")
plugins_importable()

from enzcc_plugins import In, Int, Out, Scalar  # noqa: E402
from enzcc_plugins import ship  # noqa: E402

# y = a * softplus(w * x), s = sum(y^2): two inputs, a scalar, a bound integer, two outputs (the second 0-d)
SOURCE = r"""
#include <math.h>
void softplus_head(const double *x, const double *w, double a, int n, double *y, double *s) {
  double t = 0;
  for (int i = 0; i < n; i++) { y[i] = a * log1p(exp(w[i] * x[i])); t += y[i] * y[i]; }
  *s = t;
}
"""

X = [-1.0, -0.25, 0.5, 1.25, 2.0]
W = [0.5, 1.5, -0.75, 1.0, 0.25]
A = 0.75
NS = "shiptest"


def decl():
    return [In("x", shape=("n",)), In("w", shape=("n",)), Scalar("a"), Int("n"), Out("y", shape=("n",)),
            Out("s", shape=())]


def reference():
    """s and its gradient (x, w, a), in NumPy from the formulas."""
    x, w = np.array(X), np.array(W)
    sp, sig = np.log1p(np.exp(w * x)), 1 / (1 + np.exp(-w * x))
    y = A * sp
    return float(np.sum(y * y)), [2 * y * A * sig * w, 2 * y * A * sig * x, float(np.sum(2 * y * sp))]


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    path = tmp_path_factory.mktemp("ship-src") / "softplus_head.c"
    path.write_text(SOURCE)
    return path


def fresh(script: str, tmp_path, name: str) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh Python (this one's sys.path; quiet TensorFlow), in tmp_path."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(script))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


def result_of(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def close(got, want, tol=1e-12):
    assert np.allclose(np.asarray(got, float), np.asarray(want, float), rtol=tol, atol=tol), (got, want)


# --- names -----------------------------------------------------------------------------------------------------


def test_op_names():
    assert ship.op_name("f") == "enzcc::f"
    assert ship.op_name("f", "mylib") == "mylib::f"
    assert ship.op_name("f", name="mylib::g") == "mylib::g"
    assert ship.op_name("f", "mylib", "g") == "mylib::g"
    for bad in [("f", "my-lib"), ("f", None, "a b"), ("f", "x", "y::z")]:
        with pytest.raises(ValueError):
            ship.op_name(*bad)


def test_manifest_with_callables_needs_the_declaration(compiler, tmp_path):
    """A shape given by a Python callable cannot travel in a file: loading says so and takes the declaration;
    given it, the shipped library runs without source, headers or enzcc (the NumPy level): values, gradient and
    second order (the shipped second library) = the formulas."""
    from enzcc_plugins import load_kernel
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "scale.h").write_text("#define SCALE 1.0\n")
    src = tmp_path / "src" / "head.c"
    src.write_text('#include "scale.h"\n' + SOURCE.replace("y[i] = a *", "y[i] = SCALE * a *"))
    params = [In("x"), In("w", shape=lambda x: x.shape), Scalar("a"), Int("n", lambda x: x.size),
              Out("y", shape=lambda x: x.shape), Out("s", shape=())]
    k = load_kernel(src, "softplus_head", params, compiler=compiler)
    manifest = ship.save(k, "shiptest::cb", tmp_path / "ship", "numpy")
    assert manifest.name == "shiptest.cb.enzcc.json"
    for f in (tmp_path / "src").iterdir():  # another machine: neither the source nor its header
        f.unlink()
    with pytest.raises(ship.ShippedLibraryError, match=r"parameter 'w' is a Python callable.*params="):
        ship.load(manifest)
    qualname, shipped, _ = ship.load(manifest, params)
    assert qualname == "shiptest::cb" and isinstance(shipped, ship.ShippedKernel)
    x, w = np.array(X), np.array(W)
    y, s = shipped(x, w, A)
    close(s, reference()[0])
    grads = shipped.vjp((x, w, A), (np.zeros_like(x), np.array(1.0)))
    for a, b in zip(grads, reference()[1]):
        close(a, b)
    t = np.ones_like(x)  # a second derivative: d/dx of <grad_x s, t> along t ... through the shipped vjp_jvp
    _, tg = shipped.vjp_jvp((x, w, A), (np.zeros_like(x), np.array(1.0)), (t, np.zeros_like(w), 0.0))
    eps = 1e-6
    fd = (shipped.vjp((x + eps * t, w, A), (np.zeros_like(x), np.array(1.0)))[0]
          - shipped.vjp((x - eps * t, w, A), (np.zeros_like(x), np.array(1.0)))[0]) / (2 * eps)
    close(tg[0], fd, 1e-6)
    with pytest.raises(ship.ShippedLibraryError, match="does not match"):
        ship.load(manifest, params[:-1])
    with pytest.raises(ship.ShippedLibraryError, match="no enzcc op manifest"):
        ship.manifests(tmp_path)


def test_shipped_without_second_order(src, compiler, tmp_path):
    """Shipped without its second-order library, a second derivative is an error naming the directory."""
    from enzcc_plugins import load_kernel
    k = load_kernel(src, "softplus_head", decl(), compiler=compiler)
    manifest = ship.save(k, "shiptest::first", tmp_path / "ship", "numpy", second_order=False)
    assert not list((tmp_path / "ship").glob("*vjp_jvp*"))
    _, shipped, _ = ship.load(manifest)
    assert shipped.arg_names == ("x", "w", "a")
    close(shipped(np.array(X), np.array(W), A)[1], reference()[0])
    with pytest.raises(ship.SecondOrderError, match="no second derivatives"):
        shipped.address("vjp_jvp")


# --- PyTorch ---------------------------------------------------------------------------------------------------


def test_torch_export_loads_in_a_fresh_process(src, compiler, tmp_path):
    torch = pytest.importorskip("torch")
    from enzcc_plugins.torch import NameClashError, enzyme
    F = enzyme(src, "softplus_head", decl(), compiler=compiler, namespace=NS)
    assert F.op_name == f"{NS}::softplus_head" and str(F.ops["primal"]) == f"{NS}.softplus_head_primal.default"
    assert enzyme(src, "softplus_head", decl(), compiler=compiler, namespace=NS) is F  # the same ops again
    with pytest.raises(NameClashError, match=f"'{NS}::softplus_head' already names another function"):
        enzyme(src, "softplus_head", decl(), compiler=compiler, namespace=NS, cflags=["-DUNUSED=1"])

    class Head(torch.nn.Module):
        def forward(self, x, w, a):
            return F(x, w, a)[1]

    args = [torch.tensor(X, dtype=torch.float64), torch.tensor(W, dtype=torch.float64),
            torch.tensor(A, dtype=torch.float64)]
    ep = torch.export.export(Head(), tuple(args))
    assert f"torch.ops.{NS}.softplus_head_primal.default" in str(ep.graph)
    torch.export.save(ep, str(tmp_path / "head.pt2"))
    F.save_library(tmp_path / "ship")
    s, grads = reference()
    script = f"""
        import json, sys, torch
        import enzcc_plugins.torch as ez
        if sys.argv[-1] != "without":
            ez.load_library({str(tmp_path / "ship")!r})
        m = torch.export.load("head.pt2").module()
        args = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in ({X!r}, {W!r}, {A!r})]
        s = m(*args)
        g = torch.autograd.grad(s, args, create_graph=True)
        hv = torch.autograd.grad(g[0].sum(), args[0])[0]  # a second derivative: the shipped vjp_jvp
        print(json.dumps({{"s": s.item(), "g": [t.tolist() for t in g], "hv": hv.tolist()}}))
    """
    got = result_of(fresh(script, tmp_path, "torch_load"))
    close(got["s"], s)
    for a, b in zip(got["g"], grads):
        close(a, b)
    # the same second derivative here, by PyTorch's own autograd of the formula
    x, w = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (X, W))
    ref = torch.sum((A * torch.nn.functional.softplus(w * x)) ** 2)
    gx = torch.autograd.grad(ref, x, create_graph=True)[0]
    close(got["hv"], torch.autograd.grad(gx.sum(), x)[0].tolist(), 1e-10)
    # without the library: PyTorch cannot resolve the op, by its stable name
    proc = subprocess.run([sys.executable, str(tmp_path / "torch_load.py"), "without"], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert f"failed to resolve torch.ops.{NS}.softplus_head_primal" in proc.stderr, proc.stderr[-2000:]


def test_torch_jit_trace_records_the_op(src, compiler, tmp_path):
    """torch.jit.trace records the op itself (not the aten::empty of its Python kernel); check_trace passes, the
    trace computes what the op does, and saved (torch.jit.save) it runs in a fresh process after
    load_library, with its gradient."""
    torch = pytest.importorskip("torch")
    import warnings
    from enzcc_plugins.torch import enzyme
    F = enzyme(src, "softplus_head", decl(), compiler=compiler, namespace=NS)

    def head(x, w, a):
        return F(x, w, a)[1]

    args = (torch.tensor(X, dtype=torch.float64), torch.tensor(W, dtype=torch.float64),
            torch.tensor(A, dtype=torch.float64))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(head, args)  # check_trace: runs the trace again, compares
    assert not [w for w in caught if "does not match" in str(w.message)], [str(w.message) for w in caught]
    graph = str(traced.graph)
    assert f"{NS}::softplus_head_primal" in graph and "aten::empty" not in graph, graph
    close(traced(*args).item(), reference()[0])
    x = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    traced(x, *args[1:]).backward()
    close(x.grad.tolist(), reference()[1][0])
    traced.save(str(tmp_path / "head.ts"))
    F.save_library(tmp_path / "ship", second_order=False)
    script = f"""
        import json, torch
        import enzcc_plugins.torch as ez
        ez.load_library({str(tmp_path / "ship")!r})
        m = torch.jit.load("head.ts")
        x = torch.tensor({X!r}, dtype=torch.float64, requires_grad=True)
        s = m(x, torch.tensor({W!r}, dtype=torch.float64), torch.tensor({A!r}, dtype=torch.float64))
        s.backward()
        print(json.dumps({{"s": s.item(), "gx": x.grad.tolist()}}))
    """
    got = result_of(fresh(script, tmp_path, "ts_load"))
    close(got["s"], reference()[0])
    close(got["gx"], reference()[1][0])


# --- JAX -------------------------------------------------------------------------------------------------------


def test_jax_export_runs_in_a_fresh_process(src, compiler, tmp_path):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import enzcc_plugins.jax as ej
    with jax.enable_x64(True):
        f = ej.enzyme(src, "softplus_head", decl(), compiler=compiler, namespace=NS)
        assert f.op_name == f"{NS}::softplus_head"
        assert ej.enzyme(src, "softplus_head", decl(), compiler=compiler, namespace=NS) is f
        with pytest.raises(ej.NameClashError, match="already names another function"):
            ej.enzyme(src, "softplus_head", decl(), compiler=compiler, namespace=NS, cflags=["-DUNUSED=1"])

        def loss(x, w, a):
            return f(x, w, a)[1]

        args = (jnp.array(X), jnp.array(W), jnp.array(A))
        exp = ej.export(jax.jit(loss))(*args)
        assert f'kernel = "{NS}::softplus_head"' in exp.mlir_module()
        (tmp_path / "loss.jax").write_bytes(exp.serialize(vjp_order=1))
        f.save_library(tmp_path / "ship")
    s, grads = reference()
    script = f"""
        import json, sys, jax, jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
        import enzcc_plugins.jax as ej
        if sys.argv[-1] != "without":
            ej.load_library({str(tmp_path / "ship")!r})
        exp = jax.export.deserialize(bytearray(open("loss.jax", "rb").read()))
        args = (jnp.array({X!r}), jnp.array({W!r}), jnp.array({A!r}))
        try:
            s, g = exp.call(*args), jax.grad(exp.call, (0, 1, 2))(*args)
        except Exception as e:
            print(e, file=sys.stderr)
            sys.exit(3)
        print(json.dumps({{"s": float(s), "g": [jnp.asarray(t).tolist() for t in g]}}))
    """
    got = result_of(fresh(script, tmp_path, "jax_load"))
    close(got["s"], s)
    for a, b in zip(got["g"], grads):
        close(a, b)
    proc = subprocess.run([sys.executable, str(tmp_path / "jax_load.py"), "without"], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert f"enzcc op {NS}::softplus_head (entry point primal) is not loaded in this process" in proc.stderr


# --- TensorFlow ------------------------------------------------------------------------------------------------


def test_tf_saved_model_runs_in_a_fresh_process(src, compiler, tmp_path):
    tf = pytest.importorskip("tensorflow")
    import enzcc_plugins.tensorflow as et
    f = et.enzyme(src, "softplus_head", decl(), compiler=compiler, namespace=NS)
    assert f.op_name == f"{NS}::softplus_head"
    assert et.enzyme(src, "softplus_head", decl(), compiler=compiler, namespace=NS) is f
    with pytest.raises(et.NameClashError, match="already names another function"):
        et.enzyme(src, "softplus_head", decl(), compiler=compiler, namespace=NS, cflags=["-DUNUSED=1"])
    spec = tf.TensorSpec([len(X)], tf.float64)

    class Head(tf.Module):
        @tf.function(input_signature=[spec, spec, tf.TensorSpec([], tf.float64)])
        def loss(self, x, w, a):
            return f(x, w, a)[1]

    tf.saved_model.save(Head(), str(tmp_path / "head"))
    f.save_library(tmp_path / "ship")
    s, grads = reference()
    script = f"""
        import json, sys, tensorflow as tf
        import enzcc_plugins.tensorflow as et
        if sys.argv[-1] != "without":
            et.load_library({str(tmp_path / "ship")!r})
        m = tf.saved_model.load("head")
        args = [tf.constant(v, tf.float64) for v in ({X!r}, {W!r}, {A!r})]
        try:
            s = m.loss(*args)  # (first without a tape: the op's own error when the library is not loaded)
            with tf.GradientTape() as tape:
                tape.watch(args)
                s = m.loss(*args)
            g = tape.gradient(s, args)
        except Exception as e:
            print(e, file=sys.stderr)
            sys.exit(3)
        print(json.dumps({{"s": float(s), "g": [t.numpy().tolist() for t in g]}}))
    """
    got = result_of(fresh(script, tmp_path, "tf_load"))
    close(got["s"], s)
    for a, b in zip(got["g"], grads):
        close(a, b)
    proc = subprocess.run([sys.executable, str(tmp_path / "tf_load.py"), "without"], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                                   TF_CPP_MIN_LOG_LEVEL="3"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert f"enzcc op {NS}::softplus_head (entry point primal) is not loaded in this process" in proc.stderr
