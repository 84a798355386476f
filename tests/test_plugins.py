"""The Python framework integrations (plugins/, import name enzcc_plugins).

The shared build/ctypes layer needs neither framework and always runs; the PyTorch and JAX tests are skipped
when the framework is not installed (scripts/setup.sh installs both with ENZCC_WITH_FRAMEWORKS=1).
Libraries are compiled with this checkout's enzcc into the normal plugin cache (ENZCC_PLUGINS_CACHE /
$XDG_CACHE_HOME/enzcc/plugins), so a second run only loads them; the cache tests use private directories.
"""

from __future__ import annotations

import array
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from enzcc_testing import have, plugins_importable

plugins_importable()

from enzcc_plugins import (EnzccBuildError, In, Int, Kernel, Out, PrototypeError, Scalar, SecondOrderError, ShapeError,
                           cache_dir, detect_dtype, load, load_kernel, normalize_dtype)

# a library costs two enzcc runs: the source alone to bitcode (its prototype is checked), then the library
CALLS_PER_BUILD = 2

# --- C sources -------------------------------------------------------------------------------------------

# REAL defaults to the declared type; -DREAL=... builds the other precision (dtype given explicitly then)
ELEMENTWISE = r"""
#include <math.h>
#include <stddef.h>
#ifndef REAL
#define REAL double
#endif
/* out[i] = sin(in[i]) * in[i] */
void sinx(const REAL *in, size_t n, REAL *out) {
  for (size_t i = 0; i < n; i++) out[i] = sin(in[i]) * in[i];
}
"""

FLOAT_ELEMENTWISE = r"""
#include <math.h>
#include <stddef.h>
void sinxf(const float *in, size_t n, float *out) {
  for (size_t i = 0; i < n; i++) out[i] = sinf(in[i]) * in[i];
}
"""

# non-elementwise: a numerically stable softmax, a prefix product, a running sum with a leading zero
# (n + 1 outputs), a sum of squares (1 output) with int n and a non-const input (called through its prototype)
VECTOR = r"""
#include <math.h>
#include <stddef.h>
static double max_of(const double *v, size_t n) {
  double m = v[0];
  for (size_t i = 1; i < n; i++) m = fmax(m, v[i]);
  return m;
}
void softmax(const double *in, size_t n, double *out) {
  double m = max_of(in, n), s = 0;
  for (size_t i = 0; i < n; i++) { out[i] = exp(in[i] - m); s += out[i]; }
  for (size_t i = 0; i < n; i++) out[i] /= s;
}
static void cumprod(const double *in, size_t n, double *out) {  /* static works: one translation unit */
  double p = 1;
  for (size_t i = 0; i < n; i++) { p *= in[i]; out[i] = p; }
}
void runsum0(const double *in, size_t n, double *out) {
  out[0] = 0;
  for (size_t i = 0; i < n; i++) out[i + 1] = out[i] + in[i];
}
void sumsq(double *in, int n, double *out) {
  double s = 0;
  for (int i = 0; i < n; i++) s += in[i] * in[i];
  out[0] = s;
}
"""

FLOAT_SOFTMAX = r"""
#include <math.h>
#include <stddef.h>
void softmaxf(const float *in, size_t n, float *out) {
  float m = in[0], s = 0;
  for (size_t i = 1; i < n; i++) m = fmaxf(m, in[i]);
  for (size_t i = 0; i < n; i++) { out[i] = expf(in[i] - m); s += out[i]; }
  for (size_t i = 0; i < n; i++) out[i] /= s;
}
"""


@pytest.fixture(scope="session")
def csrc(tmp_path_factory):
    d = tmp_path_factory.mktemp("plugin-src")
    files = {"elementwise.c": ELEMENTWISE, "float_elementwise.c": FLOAT_ELEMENTWISE, "vector.c": VECTOR,
             "float_softmax.c": FLOAT_SOFTMAX}
    for name, text in files.items():
        (d / name).write_text(text)
    return d


@pytest.fixture(scope="session")
def build(compiler, csrc):
    """load() with this checkout's enzcc and the sources above (file names relative to csrc)."""
    def b(file: str, name: str, dtype=None, **kw) -> Kernel:
        return load(csrc / file, name, dtype, compiler=compiler, **kw)
    return b


def close(a, b, rel=1e-6, abs_=1e-9):
    a, b = list(a), list(b)
    assert len(a) == len(b), (a, b)
    for u, v in zip(a, b):
        assert math.isclose(u, v, rel_tol=rel, abs_tol=abs_), (a, b)


X = [0.5, -1.25, 2.0, 0.1, 3.0]

# --- shared build/ctypes layer (no framework) -------------------------------------------------------------


def test_build_elementwise_double_and_float(build):
    k = build("elementwise.c", "sinx", "double")
    assert k.dtype == "float64" and k.library.exists()
    assert Path(k.library).suffix == ".so"
    out = k.forward(array.array("d", X))
    assert isinstance(out, array.array) and out.typecode == "d"
    close(out, [math.sin(v) * v for v in X], rel=1e-14)
    close(k.backward(X, [1.0] * len(X)), [math.cos(v) * v + math.sin(v) for v in X], rel=1e-13)
    # the seed is a vector: d(sum(out * g))/d in = g * f'(in)
    g = [2.0, -1.0, 0.0, 0.5, 3.0]
    close(k.backward(X, g), [gi * (math.cos(v) * v + math.sin(v)) for gi, v in zip(g, X)], rel=1e-13)

    f = build("elementwise.c", "sinx", "float", cflags=["-DREAL=float"])
    assert f.dtype == "float32" and f.library != k.library
    out = f.forward(X)  # a list works: converted to float
    assert out.typecode == "f"
    close(out, [math.sin(v) * v for v in X], rel=1e-5)
    close(f.backward(array.array("f", X), array.array("f", [1.0] * 5)),
          [math.cos(v) * v + math.sin(v) for v in X], rel=1e-5, abs_=1e-6)


def test_build_non_elementwise_and_out_size(build):
    sm = build("vector.c", "softmax")
    e = [math.exp(v) for v in X]
    p = [v / sum(e) for v in e]
    close(sm.forward(X), p, rel=1e-13)
    g = [1.0, 0.0, -2.0, 0.5, 0.25]
    pg = sum(pi * gi for pi, gi in zip(p, g))
    close(sm.backward(X, g), [pi * (gi - pg) for pi, gi in zip(p, g)], rel=1e-12, abs_=1e-15)

    cp = build("vector.c", "cumprod")
    x = [0.5, -2.0, 1.5, 0.25]
    close(cp.forward(x), [0.5, -1.0, -1.5, -0.375])
    # d/dx_j sum_i prod_{k<=i} x_k = sum_{i>=j} prod_{k<=i, k!=j} x_k
    want = [sum(math.prod(x[k] for k in range(i + 1) if k != j) for i in range(j, 4)) for j in range(4)]
    close(cp.backward(x, [1.0] * 4), want, rel=1e-13)

    rs = build("vector.c", "runsum0", out_size=lambda n: n + 1)
    assert rs.out_size(4) == 5
    close(rs.forward(x), [0, 0.5, -1.5, 0.0, 0.25])
    # d/dx_j sum_i g_i out_i = sum_{i > j} g_i
    g = [1.0, 2.0, 3.0, 4.0, 5.0]
    close(rs.backward(x, g), [sum(g[j + 1:]) for j in range(4)])
    with pytest.raises(ValueError, match="grad_out has 4 elements, the output has 5"):
        rs.backward(x, g[:4])

    ss = build("vector.c", "sumsq", out_size=1)  # int n, non-const input
    close(ss.forward(x), [sum(v * v for v in x)])
    close(ss.backward(x, [3.0]), [6 * v for v in x])


def test_build_numpy_arrays_when_available(build):
    np = pytest.importorskip("numpy", reason="numpy not installed (comes with torch and jax)")
    k = build("elementwise.c", "sinx", "double")
    x = np.array(X[:4]).reshape(2, 2)
    out = k.forward(x)
    assert isinstance(out, np.ndarray) and out.shape == (2, 2) and out.dtype == np.float64
    assert np.allclose(out, np.sin(x) * x, rtol=1e-14)
    g = np.full((2, 2), 2.0)
    din = k.backward(x.T, g)  # non-contiguous input: copied
    assert np.allclose(din, 2 * (np.cos(x.T) * x.T + np.sin(x.T)), rtol=1e-13)
    assert (g == 2.0).all(), "backward must not consume the caller's grad_out"


def test_build_raw_pointer_convention(build):
    """din accumulates, dout is consumed: the raw entry point is Enzyme's output-buffer convention."""
    k = build("elementwise.c", "sinx", "double")
    n = 3
    x = (k.ctype * n)(*X[:n])
    din = (k.ctype * n)(10.0, 10.0, 10.0)
    out = (k.ctype * n)()
    dout = (k.ctype * n)(1.0, 0.0, 2.0)
    k.backward_ptr(*(ctypes_addr(a) for a in (x,)), ctypes_addr(din), n, ctypes_addr(out), ctypes_addr(dout))
    d = [math.cos(v) * v + math.sin(v) for v in X[:n]]
    close(din, [10 + d[0], 10.0, 10 + 2 * d[2]], rel=1e-13)
    close(dout, [0.0, 0.0, 0.0])


def ctypes_addr(a) -> int:
    import ctypes
    return ctypes.addressof(a)


def test_build_local_header_and_cflags(compiler, tmp_path, monkeypatch):
    """The source's own "headers" resolve beside it; cflags reach enzcc (relative to the current directory)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "scale.h").write_text("#define SCALE 3.0\n")
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "offset.h").write_text("#define OFFSET 0.5\n")
    src = tmp_path / "src" / "affine.c"
    src.write_text('#include "scale.h"\n#include "offset.h"\n'
                   "void affine(const double *in, size_t n, double *out) {\n"  # size_t without <stddef.h>
                   "  for (size_t i = 0; i < n; i++) out[i] = SCALE * in[i] * in[i] + OFFSET * POWER; }\n")
    monkeypatch.chdir(tmp_path)
    k = load(src, "affine", compiler=compiler, cache="cache", cflags=["-Iinc", "-DPOWER=2"])
    assert k.library.parent == tmp_path / "cache"
    close(k.forward([1.0, 2.0]), [4.0, 13.0])
    close(k.backward([1.0, 2.0], [1.0, 1.0]), [6.0, 12.0])


def test_build_cache_is_content_addressed(compiler, tmp_path, monkeypatch):
    """Same text -> same library (no recompilation), even from another path; new text -> a new one;
    XDG_CACHE_HOME is honoured; no temporaries are left behind."""
    log = tmp_path / "calls.log"
    counting = tmp_path / "counting-enzcc"
    counting.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] || echo call >> {log}\nexec {compiler} \"$@\"\n")
    counting.chmod(0o755)
    monkeypatch.delenv("ENZCC_PLUGINS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "enzcc" / "plugins"

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    src_a = tmp_path / "a" / "k.c"
    src_b = tmp_path / "b" / "k.c"
    src_a.write_text(FLOAT_ELEMENTWISE)
    src_b.write_text(FLOAT_ELEMENTWISE)
    k1 = load(src_a, "sinxf", compiler=str(counting))
    assert k1.library.parent == cache_dir()
    mtime = k1.library.stat().st_mtime_ns
    k2 = load(src_b, "sinxf", compiler=str(counting))
    assert k2.library == k1.library and k2.library.stat().st_mtime_ns == mtime
    assert log.read_text().count("call") == CALLS_PER_BUILD

    src_a.write_text(FLOAT_ELEMENTWISE.replace("sinf(in[i]) * in[i]", "sinf(in[i]) * in[i] * 2"))
    k3 = load(src_a, "sinxf", compiler=str(counting))
    assert k3.library != k1.library
    close(k3.forward([1.0]), [2 * math.sin(1.0)], rel=1e-6)
    close(k1.forward([1.0]), [math.sin(1.0)], rel=1e-6)  # the old library is still loaded and valid
    assert log.read_text().count("call") == 2 * CALLS_PER_BUILD
    leftovers = [p.name for p in cache_dir().iterdir() if p.suffix not in (".so", ".json")]
    assert leftovers == []

    # an explicit cache directory
    k4 = load(src_b, "sinxf", compiler=str(counting), cache=tmp_path / "explicit")
    assert k4.library.parent == tmp_path / "explicit"


def test_build_parallel_processes_share_one_build(compiler, tmp_path):
    """Processes racing to build the same library: all succeed, enzcc runs once, one file results."""
    log = tmp_path / "calls.log"
    counting = tmp_path / "counting-enzcc"
    counting.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] || echo call >> {log}\nexec {compiler} \"$@\"\n")
    counting.chmod(0o755)
    src = tmp_path / "k.c"
    src.write_text(FLOAT_ELEMENTWISE.replace("sinf(in[i])", "cosf(in[i])"))
    script = textwrap.dedent(f"""
        import math, sys
        from enzcc_plugins import load
        k = load({str(src)!r}, "sinxf", compiler={str(counting)!r}, cache={str(tmp_path / 'cache')!r})
        out = k.forward([0.5])
        assert abs(out[0] - math.cos(0.5) * 0.5) < 1e-6, out
        print(k.library)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    for out, err, rc in results:
        assert rc == 0, err
    assert len({out.strip() for out, _, _ in results}) == 1
    assert log.read_text().count("call") == CALLS_PER_BUILD
    assert sorted(p.suffix for p in (tmp_path / "cache").iterdir()) == [".json", ".so"]


def test_build_errors_carry_enzcc_one_line_message(compiler, tmp_path):
    cache = tmp_path / "cache"
    bad = tmp_path / "bad.c"
    bad.write_text("#include <stddef.h>\nvoid f(const double *in, size_t n, double *out) { out[0] = oops; }\n")
    with pytest.raises(EnzccBuildError) as e:
        load(bad, "f", compiler=compiler, cache=cache)
    first = str(e.value).splitlines()[0]
    assert "bad.c:2:" in first and "error: use of undeclared identifier 'oops'" in first
    assert "oops" in e.value.output and e.value.command[0] == compiler

    # an AD error (no derivative for an external function): enzcc's one line, with the source line
    ext = tmp_path / "ext.c"
    ext.write_text("#include <stddef.h>\ndouble mystery(double);\n"
                   "void f(const double *in, size_t n, double *out) {\n"
                   "  for (size_t i = 0; i < n; i++) out[i] = mystery(in[i]);\n}\n")
    with pytest.raises(EnzccBuildError) as e:
        load(ext, "f", compiler=compiler, cache=cache)
    first = str(e.value).splitlines()[0]
    assert "error: in function" in first and "no derivative rule for call to 'mystery'" in first
    assert "ext.c:4:" in first

    # the wrong type for the function: a clear message
    good = tmp_path / "good.c"
    good.write_text(FLOAT_ELEMENTWISE)
    with pytest.raises(PrototypeError, match=r"'x' is declared In\(float64\) but the function takes float elements"
                                             r".*must be void sinxf\(const double"):
        load(good, "sinxf", "float64", compiler=compiler, cache=cache)
    with pytest.raises(EnzccBuildError, match="defines no function nope"):
        load(good, "nope", "float32", compiler=compiler, cache=cache)
    assert not list(cache.glob("*.so")) and not [p for p in cache.iterdir() if p.name.startswith(".build")]

    with pytest.raises(EnzccBuildError, match="not an executable on PATH"):
        load(good, "sinxf", compiler=str(tmp_path / "no-such-enzcc"), cache=cache)
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.c", "f", compiler=compiler, cache=cache)
    with pytest.raises(ValueError, match="C identifier"):
        load(good, "sinxf; system", compiler=compiler, cache=cache)


def test_dtypes_and_detection():
    assert detect_dtype(FLOAT_ELEMENTWISE, "sinxf") == "float32"
    assert detect_dtype(VECTOR, "softmax") == "float64"
    assert detect_dtype(VECTOR, "sumsq") == "float64"
    assert detect_dtype("void g(float const *in, size_t n, float *out);", "g") == "float32"
    assert detect_dtype(ELEMENTWISE, "sinx") is None  # a macro type
    assert detect_dtype("/* void h(float *a, size_t n, float *b) */ void h(double *a, size_t n, double *b);",
                        "h") == "float64"
    for name, want in [("float", "float32"), ("f4", "float32"), ("double", "float64"), ("float64", "float64"),
                       ("torch.float32", "float32"), (float, "float64")]:
        assert normalize_dtype(name) == want
    with pytest.raises(ValueError, match="unsupported dtype"):
        normalize_dtype("int32")


def test_macro_type_read_from_the_prototype(build):
    """The source says REAL: the element type comes from the compiled prototype's debug information."""
    k = build("elementwise.c", "sinx", cflags=["-DREAL=float"])
    assert k.dtype == "float32"
    close(k.forward([0.5, 1.0]), [math.sin(0.5) * 0.5, math.sin(1.0)], rel=1e-6)


# --- PyTorch ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh)")


@pytest.fixture(scope="module")
def tenzyme(torch, compiler, csrc):
    from enzcc_plugins.torch import enzyme

    def e(file, name, dtype=None, **kw):
        return enzyme(csrc / file, name, dtype, compiler=compiler, **kw)
    return e


def test_torch_forward_matches_torch(torch, tenzyme):
    F = tenzyme("elementwise.c", "sinx", "double")
    assert callable(F.apply) and callable(F)
    x = torch.linspace(-3, 3, 12, dtype=torch.float64).reshape(3, 4)
    y = F.apply(x)
    assert y.shape == x.shape and y.dtype == torch.float64
    assert torch.allclose(y, torch.sin(x) * x, rtol=1e-14, atol=0)
    xt = x.t()  # non-contiguous: handled
    assert not xt.is_contiguous()
    assert torch.allclose(F.apply(xt), torch.sin(xt) * xt, rtol=1e-14, atol=0)

    F32 = tenzyme("float_elementwise.c", "sinxf")
    x32 = x.float()[:, ::2]
    assert torch.allclose(F32.apply(x32), torch.sin(x32) * x32, rtol=1e-6, atol=1e-6)

    SM = tenzyme("vector.c", "softmax")
    v = torch.tensor(X, dtype=torch.float64)
    assert torch.allclose(SM.apply(v), torch.softmax(v, 0), rtol=1e-13, atol=0)
    CP = tenzyme("vector.c", "cumprod")
    assert torch.allclose(CP.apply(v), torch.cumprod(v, 0), rtol=1e-13, atol=0)
    RS = tenzyme("vector.c", "runsum0", out_size=lambda n: n + 1)
    r = RS.apply(v.reshape(5, 1))
    assert r.shape == (6,)
    assert torch.allclose(r, torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(v, 0)]))


def test_torch_gradients_analytic_and_reference(torch, tenzyme):
    F = tenzyme("elementwise.c", "sinx", "double")
    x = torch.linspace(-2, 2, 7, dtype=torch.float64, requires_grad=True)
    F.apply(x).sum().backward()
    with torch.no_grad():
        assert torch.allclose(x.grad, torch.cos(x) * x + torch.sin(x), rtol=1e-13)

    # against torch's own autograd on the same function, with a non-trivial upstream gradient
    w = torch.tensor([0.3, -1.0, 2.0, 0.7, 1.5], dtype=torch.float64)
    for name, ref in [("softmax", lambda t: torch.softmax(t, 0)), ("cumprod", lambda t: torch.cumprod(t, 0))]:
        Fn = tenzyme("vector.c", name)
        a = torch.tensor(X, dtype=torch.float64, requires_grad=True)
        b = torch.tensor(X, dtype=torch.float64, requires_grad=True)
        (Fn.apply(a) * w).sum().backward()
        (ref(b) * w).sum().backward()
        assert torch.allclose(a.grad, b.grad, rtol=1e-12, atol=1e-14), name

    # float32 softmax on a non-contiguous slice of a 2-D tensor
    SMf = tenzyme("float_softmax.c", "softmaxf")
    base = torch.randn(4, 6, generator=torch.Generator().manual_seed(0), requires_grad=True)
    (SMf.apply(base[1, ::2]) * torch.tensor([1.0, -1.0, 0.5])).sum().backward()
    base2 = base.detach().clone().requires_grad_(True)
    (torch.softmax(base2[1, ::2], 0) * torch.tensor([1.0, -1.0, 0.5])).sum().backward()
    assert torch.allclose(base.grad, base2.grad, rtol=1e-5, atol=1e-6)


def test_torch_gradcheck(torch, tenzyme):
    gen = torch.Generator().manual_seed(1)
    for name, kw in [("softmax", {}), ("cumprod", {}), ("runsum0", {"out_size": lambda n: n + 1}),
                     ("sumsq", {"out_size": 1})]:
        Fn = tenzyme("vector.c", name, **kw)
        x = torch.randn(6, dtype=torch.float64, generator=gen, requires_grad=True)
        assert torch.autograd.gradcheck(Fn.apply, (x,), eps=1e-6, atol=1e-7, rtol=1e-6), name
    F = tenzyme("elementwise.c", "sinx", "double")
    x = torch.randn(3, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(F.apply, (x,), eps=1e-6, atol=1e-7, rtol=1e-6)


def test_torch_training_loop(torch, tenzyme):
    """Fit logits so that the compiled softmax matches a target distribution, and fit the scale and shift
    of a compiled elementwise feature map: both losses drop by orders of magnitude."""
    SM = tenzyme("vector.c", "softmax")
    target = torch.softmax(torch.tensor([1.0, -0.5, 2.0, 0.0], dtype=torch.float64), 0)
    logits = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([logits], lr=0.1)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = ((SM.apply(logits) - target) ** 2).sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 1e-3, losses[::25]

    F = tenzyme("float_elementwise.c", "sinxf")
    xs = torch.linspace(-1, 1, 32)
    ys = torch.sin(0.8 * xs + 0.3) * (0.8 * xs + 0.3)
    a = torch.tensor(1.5, requires_grad=True)
    b = torch.tensor(-0.2, requires_grad=True)
    opt = torch.optim.SGD([a, b], lr=0.2, momentum=0.5)
    first = None
    for _ in range(200):
        opt.zero_grad()
        loss = ((F.apply(a * xs + b) - ys) ** 2).mean()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < first * 1e-3
    assert abs(a.item() - 0.8) < 0.02 and abs(b.item() - 0.3) < 0.02


def test_torch_errors(torch, tenzyme):
    F = tenzyme("elementwise.c", "sinx", "double")  # double
    with pytest.raises(TypeError, match=r"dtype torch.float32.*takes double"):
        F.apply(torch.ones(3))
    with pytest.raises(TypeError, match="dtype torch.int64"):
        F.apply(torch.arange(3))
    with pytest.raises(RuntimeError, match="CPU only"):
        F.apply(torch.ones(3, dtype=torch.float64, device="meta"))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        F.apply([1.0, 2.0])
    # the backward is differentiable now (forward over reverse): d2/dx2 (x sin x) = 2 cos x - x sin x
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(F.apply(x).sum(), x, create_graph=True)
    g.sum().backward()
    with torch.no_grad():
        assert torch.allclose(x.grad, 2 * torch.cos(x) - x * torch.sin(x), rtol=1e-13)
    from enzcc_plugins.torch import enzyme
    with pytest.raises(EnzccBuildError):
        enzyme(__file__, "x", "double")  # not C


# --- JAX ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax", reason="JAX not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh)")
    with jax.enable_x64(True):
        yield jax


@pytest.fixture(scope="module")
def jenzyme(jax, compiler, csrc):
    from enzcc_plugins.jax import enzyme

    def e(file, name, dtype=None, **kw):
        return enzyme(csrc / file, name, dtype, compiler=compiler, **kw)
    return e


def test_jax_forward_matches_jax(jax, jenzyme):
    jnp = jax.numpy
    f = jenzyme("elementwise.c", "sinx", "double")
    x = jnp.linspace(-3, 3, 12, dtype=jnp.float64).reshape(3, 4)
    y = f(x)
    assert y.shape == x.shape and y.dtype == jnp.float64
    assert jnp.allclose(y, jnp.sin(x) * x, rtol=1e-14, atol=0)
    assert jnp.allclose(jax.jit(f)(x), y, rtol=0, atol=0)
    assert jnp.allclose(jax.vmap(f)(x), y, rtol=0, atol=0)

    f32 = jenzyme("float_elementwise.c", "sinxf")
    x32 = x.astype(jnp.float32)
    y32 = f32(x32)
    assert y32.dtype == jnp.float32 and jnp.allclose(y32, jnp.sin(x32) * x32, rtol=1e-6, atol=1e-6)

    v = jnp.array(X)
    assert jnp.allclose(jenzyme("vector.c", "softmax")(v), jax.nn.softmax(v), rtol=1e-13, atol=0)
    assert jnp.allclose(jenzyme("vector.c", "cumprod")(v), jnp.cumprod(v), rtol=1e-13, atol=0)
    rs = jenzyme("vector.c", "runsum0", out_size=lambda n: n + 1)(v)
    assert rs.shape == (6,) and jnp.allclose(rs, jnp.concatenate([jnp.zeros(1), jnp.cumsum(v)]))


def test_jax_gradients(jax, jenzyme):
    jnp = jax.numpy
    from jax.test_util import check_grads
    f = jenzyme("elementwise.c", "sinx", "double")
    x = jnp.linspace(-2, 2, 7)
    g = jax.grad(lambda t: f(t).sum())(x)
    assert jnp.allclose(g, jnp.cos(x) * x + jnp.sin(x), rtol=1e-13)
    assert jnp.allclose(jax.jit(jax.grad(lambda t: f(t).sum()))(x), g, rtol=1e-15)
    check_grads(f, (x,), order=1, modes=["rev"])

    w = jnp.array([0.3, -1.0, 2.0, 0.7, 1.5])
    v = jnp.array(X)
    for name, ref in [("softmax", jax.nn.softmax), ("cumprod", jnp.cumprod)]:
        fn = jenzyme("vector.c", name)
        out, vjp = jax.vjp(fn, v)
        out_ref, vjp_ref = jax.vjp(ref, v)
        assert jnp.allclose(out, out_ref, rtol=1e-13)
        assert jnp.allclose(vjp(w)[0], vjp_ref(w)[0], rtol=1e-12, atol=1e-14), name
        check_grads(fn, (v,), order=1, modes=["rev"])
    check_grads(jenzyme("vector.c", "runsum0", out_size=lambda n: n + 1), (v,), order=1, modes=["rev"])
    check_grads(jenzyme("vector.c", "sumsq", out_size=1), (v,), order=1, modes=["rev"])

    # batched gradients through vmap, float32 code
    f32 = jenzyme("float_softmax.c", "softmaxf")
    xb = jnp.arange(12, dtype=jnp.float32).reshape(3, 4) / 5
    gb = jax.vmap(jax.grad(lambda t: f32(t)[0]))(xb)
    gr = jax.vmap(jax.grad(lambda t: jax.nn.softmax(t)[0]))(xb)
    assert gb.dtype == jnp.float32 and jnp.allclose(gb, gr, rtol=1e-5, atol=1e-6)


def test_jax_training_loop(jax, jenzyme):
    jnp = jax.numpy
    sm = jenzyme("vector.c", "softmax")
    target = jax.nn.softmax(jnp.array([1.0, -0.5, 2.0, 0.0]))

    @jax.jit
    def step(logits):
        loss, g = jax.value_and_grad(lambda t: jnp.sum((sm(t) - target) ** 2))(logits)
        return logits - 2.0 * g, loss

    logits = jnp.zeros(4)
    losses = []
    for _ in range(300):
        logits, loss = step(logits)
        losses.append(float(loss))
    assert losses[-1] < losses[0] * 1e-3, losses[::50]
    assert jnp.allclose(sm(logits), target, atol=1e-3)


def test_jax_errors(jax, jenzyme):
    jnp = jax.numpy
    f = jenzyme("elementwise.c", "sinx", "double")  # double
    with pytest.raises(TypeError, match="dtype float32.*takes double"):
        f(jnp.ones(3, dtype=jnp.float32))
    assert jnp.allclose(f([0.5, 1.0]), jnp.sin(jnp.array([0.5, 1.0])) * jnp.array([0.5, 1.0]))  # lists convert
    with jax.enable_x64(False):
        with pytest.raises(TypeError, match="jax_enable_x64"):
            f(jnp.ones(3))


# --- the ABI 3 build layer: declarations, prototype checks, languages, entry points ---------------------------

# y[i][j] = alpha * tanh(sum_q x[i][q] w[q][j]) + b[j]; s = alpha * sum x^2 (a 0-d output); int and long sizes
LAYER = r"""
#include <math.h>
void layer(const double *x, const double *w, const double *b, int n, long k, long m, double alpha,
           double *y, double *s) {
  double acc = 0;
  for (int i = 0; i < n; i++)
    for (long j = 0; j < m; j++) {
      double t = 0;
      for (long q = 0; q < k; q++) t += x[i * k + q] * w[q * m + j];
      y[i * m + j] = alpha * tanh(t) + b[j];
    }
  for (long i = 0; i < n * k; i++) acc += x[i] * x[i];
  *s = alpha * acc;
}
/* the first `deg` moments of x: m[j] = sum_i x_i^(j+1) / n; deg is a call argument */
void moments(const float *x, size_t n, int deg, float *m) {
  for (int j = 0; j < deg; j++) {
    float acc = 0;
    for (size_t i = 0; i < n; i++) acc += powf(x[i], (float)(j + 1));
    m[j] = acc / (float)n;
  }
}
"""

LAYER_DECL = [In("x", shape=("n", "k")), In("w", shape=("k", "m")), In("b", shape=("m",), const=True),
              Int("n"), Int("k"), Int("m"), Scalar("alpha"), Out("y", shape=("n", "m")), Out("s", shape=())]


@pytest.fixture(scope="module")
def np():
    return pytest.importorskip("numpy", reason="numpy not installed (comes with torch and jax)")


@pytest.fixture(scope="module")
def layer(compiler, tmp_path_factory, np):
    d = tmp_path_factory.mktemp("layer")
    (d / "layer.c").write_text(LAYER)
    return load_kernel(d / "layer.c", "layer", LAYER_DECL, compiler=compiler)


def layer_ref(np, x, w, b, alpha):
    t = x @ w
    return alpha * np.tanh(t) + b, alpha * (x * x).sum()


def test_kernel_declaration_and_values(layer, np):
    k = layer
    assert k.arg_names == ("x", "w", "b", "alpha")
    assert [p.dtype for p in k.params] == ["float64"] * 3 + [None] * 3 + ["float64"] * 3  # from the prototype
    assert [p.ctype for p in k.params if p.kind == "int"] == ["int32_t", "int64_t", "int64_t"]
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=2)
    y, s = k(x, w, b, 0.7)
    yr, sr = layer_ref(np, x, w, b, 0.7)
    assert y.shape == (3, 2) and s.shape == () and np.allclose(y, yr, rtol=1e-14) and np.isclose(s, sr)
    y2, _ = k(x, w, b=b, alpha=0.7)  # by name
    assert np.array_equal(y, y2)
    plan = k.resolve({"x": (3, 4), "w": (4, 2), "b": (2,)})
    assert plan.ints == {"n": 3, "k": 4, "m": 2} and plan.int_values == (3, 4, 2)
    assert plan.shapes == {"x": (3, 4), "w": (4, 2), "b": (2,), "alpha": (), "y": (3, 2), "s": ()}


def test_kernel_vjp_jvp_analytic_and_fd(layer, np):
    k = layer
    rng = np.random.default_rng(1)
    x, w, b, a = rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=2), 0.7
    gy, gs = rng.normal(size=(3, 2)), 1.3
    gx, gw, gb, ga = k.vjp((x, w, b, a), (gy, gs))
    t = x @ w
    sech2 = 1 - np.tanh(t) ** 2
    assert gb is None  # const
    assert np.allclose(gx, (a * sech2 * gy) @ w.T + 2 * a * gs * x, rtol=1e-13)
    assert np.allclose(gw, x.T @ (a * sech2 * gy), rtol=1e-13)
    assert np.isclose(ga, (np.tanh(t) * gy).sum() + gs * (x * x).sum(), rtol=1e-13)
    # forward mode against central differences
    tx, tw, ta = rng.normal(size=x.shape), rng.normal(size=w.shape), 0.4
    (y, s), (ty, ts) = k.jvp((x, w, b, a), (tx, tw, None, ta))
    h = 1e-6
    yp, sp = k(x + h * tx, w + h * tw, b, a + h * ta)
    ym, sm = k(x - h * tx, w - h * tw, b, a - h * ta)
    assert np.allclose(ty, (yp - ym) / (2 * h), rtol=1e-7, atol=1e-8)
    assert np.isclose(ts, (sp - sm) / (2 * h), rtol=1e-7)
    # the VJP is the transpose of the JVP: <gy, ty> + gs ts = <gx, tx> + <gw, tw> + ga ta
    assert np.isclose((gy * ty).sum() + gs * ts, (gx * tx).sum() + (gw * tw).sum() + ga * ta, rtol=1e-12)


def test_kernel_second_order_hvp(layer, np):
    """NAME_enzcc_vjp_jvp (forward over reverse) from its own library, built on first use: Hessian-vector
    products against finite differences of the VJP and, for x, the analytic Hessian of a * sum x^2."""
    k = layer
    with pytest.raises(AttributeError):
        getattr(__import__("ctypes").CDLL(str(k.library)), "layer_enzcc_vjp_jvp")  # not in the first library
    rng = np.random.default_rng(2)
    x, w, b, a = rng.normal(size=(2, 3)), rng.normal(size=(3, 2)), rng.normal(size=2), 0.9
    gy = np.zeros((2, 2))
    tx, tw, ta = rng.normal(size=x.shape), rng.normal(size=w.shape), 0.25
    (gx, gw, gb, ga), (hx, hw, hb, ha) = k.vjp_jvp((x, w, b, a), (gy, 1.0), (tx, tw, None, ta))
    assert k.second_order_library != k.library and k.address("vjp_jvp")
    assert hb is None and gb is None
    # s = a * sum x^2 alone (gy = 0): d/dx = 2 a x, so H (tx, ta) = (2 a tx + 2 ta x, 2 <x, tx>)
    assert np.allclose(gx, 2 * a * x) and np.allclose(hx, 2 * a * tx + 2 * ta * x, rtol=1e-13)
    assert np.isclose(ha, 2 * (x * tx).sum()) and np.allclose(hw, 0)
    # with both outputs seeded: against central differences of the VJP
    gy = rng.normal(size=(2, 2))
    _, (hx, hw, _, ha) = k.vjp_jvp((x, w, b, a), (gy, 0.5), (tx, tw, None, ta))
    h = 1e-6
    p = k.vjp((x + h * tx, w + h * tw, b, a + h * ta), (gy, 0.5))
    m = k.vjp((x - h * tx, w - h * tw, b, a - h * ta), (gy, 0.5))
    for got, hi, lo in [(hx, p[0], m[0]), (hw, p[1], m[1]), (ha, p[3], m[3])]:
        assert np.allclose(got, (hi - lo) / (2 * h), rtol=1e-6, atol=1e-7)



def layer_primal(np, rng):
    """The layer's inputs (x, w, b, a) and its primal address array (ints 3, 4, 2; y and s as scratch), with
    the arrays it points into (keep them alive while it is used)."""
    x, w, b, a = rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=2), np.array(0.7)
    ints = np.array([3, 4, 2], np.int64)
    y, s = np.empty((3, 2)), np.empty(())
    prim = [x.ctypes.data, w.ctypes.data, b.ctypes.data, *(ints.ctypes.data + 8 * i for i in range(3)), a.ctypes.data,
            y.ctypes.data, s.ctypes.data]
    return (x, w, b, a), prim, (ints, y, s)

def test_kernel_vector_mode_lanes(layer, np):
    """NAME_enzcc_jvp_v4 and NAME_enzcc_vjp_v4 (vector mode, their own library built on first use): four tangent
    directions or seeds in one run, each lane equal to NAME_enzcc_jvp's / NAME_enzcc_vjp's; address arrays of
    the wrong size are refused."""
    import ctypes
    k = layer
    rng = np.random.default_rng(3)
    (x, w, b, a), prim, _keep = layer_primal(np, rng)
    lanes = [(rng.normal(size=x.shape), rng.normal(size=w.shape), np.array(rng.normal())) for _ in range(4)]
    outs = [(np.empty((3, 2)), np.empty(())) for _ in range(4)]
    d = [v for (tx, tw, ta), (ty, ts) in zip(lanes, outs)
         for v in (tx.ctypes.data, tw.ctypes.data, 0, 0, 0, 0, ta.ctypes.data, ty.ctypes.data, ts.ctypes.data)]
    k.call("jvp_v4", prim, d)
    assert k.vector("jvp")[1] not in (k.library, k.second_order_library)
    assert k.address("jvp_v4") == k.vector("jvp")[0][1]
    with pytest.raises(AttributeError):
        getattr(ctypes.CDLL(str(k.library)), "layer_enzcc_jvp_v4")  # not in the first library
    for (tx, tw, ta), (ty, ts) in zip(lanes, outs):
        _, (ty1, ts1) = k.jvp((x, w, b, float(a)), (tx, tw, None, float(ta)))
        assert np.allclose(ty, ty1, rtol=1e-14, atol=1e-15) and np.isclose(ts, ts1, rtol=1e-14)
    with pytest.raises(ValueError, match="jvp_v4 needs address arrays of 9, 36 entries"):
        k.call("jvp_v4", prim, d[:9])
    # reverse: four seeds in one run; gradients added into zeros, the scalar's stored, the seeds consumed
    seeds = [(rng.normal(size=(3, 2)), np.array(rng.normal())) for _ in range(4)]
    want = [k.vjp((x, w, b, float(a)), (gy.copy(), float(gs))) for gy, gs in seeds]
    grads = [(np.zeros(x.shape), np.zeros(w.shape), np.array(5.0)) for _ in range(4)]
    d = [v for (gx, gw, ga), (gy, gs) in zip(grads, seeds)
         for v in (gx.ctypes.data, gw.ctypes.data, 0, 0, 0, 0, ga.ctypes.data, gy.ctypes.data, gs.ctypes.data)]
    k.call("vjp_v4", prim, d)
    for (gx, gw, ga), (gx1, gw1, _, ga1), (gy, gs) in zip(grads, want, seeds):
        assert np.allclose(gx, gx1, rtol=1e-14, atol=1e-15) and np.allclose(gw, gw1, rtol=1e-14, atol=1e-15)
        assert np.isclose(ga, ga1, rtol=1e-14) and not gy.any() and gs == 0


def test_kernel_second_order_vector_mode_lanes(layer, np):
    """NAME_enzcc_vjp_jvp_v4 (forward over reverse in vector mode, a fourth library): four tangent directions of
    the inputs and of the seeds in one run with the inputs and seeds shared, each lane's gradient tangent equal
    to NAME_enzcc_vjp_jvp's; the gradient itself is written once, into the d array given."""
    k = layer
    rng = np.random.default_rng(5)
    (x, w, b, a), prim, _keep = layer_primal(np, rng)
    gy, gs = rng.normal(size=(3, 2)), np.array(rng.normal())
    lanes = [(rng.normal(size=x.shape), rng.normal(size=w.shape), np.array(rng.normal()),
              rng.normal(size=(3, 2)), np.array(rng.normal())) for _ in range(4)]
    want = [k.vjp_jvp((x, w, b, float(a)), (gy.copy(), float(gs)), (tx, tw, None, float(ta)),
                      (tgy.copy(), float(tgs))) for tx, tw, ta, tgy, tgs in lanes]
    grads = (np.zeros(x.shape), np.zeros(w.shape), np.array(5.0))
    seeds = (gy.copy(), gs.copy())
    d = [grads[0].ctypes.data, grads[1].ctypes.data, 0, 0, 0, 0, grads[2].ctypes.data, seeds[0].ctypes.data,
         seeds[1].ctypes.data]
    scratch = [(np.empty((3, 2)), np.empty(())) for _ in range(4)]
    tgrads = [(np.zeros(x.shape), np.zeros(w.shape), np.array(5.0)) for _ in range(4)]
    tseeds = [(tgy.copy(), tgs.copy()) for *_, tgy, tgs in lanes]
    ta = [v for (tx, tw, t, _, _), (sy, ss) in zip(lanes, scratch)
          for v in (tx.ctypes.data, tw.ctypes.data, 0, 0, 0, 0, t.ctypes.data, sy.ctypes.data, ss.ctypes.data)]
    td = [v for (gx, gw, ga), (ty, ts) in zip(tgrads, tseeds)
          for v in (gx.ctypes.data, gw.ctypes.data, 0, 0, 0, 0, ga.ctypes.data, ty.ctypes.data, ts.ctypes.data)]
    k.call("vjp_jvp_v4", prim, d, ta, td)
    assert k.vector("vjp_jvp")[1] not in (k.library, k.second_order_library, k.vector("jvp")[1])
    (g0, _), _ = want[0], None
    assert np.allclose(grads[0], g0[0], rtol=1e-13, atol=1e-14) and np.isclose(grads[2], g0[3], rtol=1e-13)
    for (gx, gw, ga), (_, (tx1, tw1, _, ta1)) in zip(tgrads, want):
        assert np.allclose(gx, tx1, rtol=1e-13, atol=1e-14) and np.allclose(gw, tw1, rtol=1e-13, atol=1e-14)
        assert np.isclose(ga, ta1, rtol=1e-13)
    with pytest.raises(ValueError, match="vjp_jvp_v4 needs address arrays of 9, 9, 36, 36 entries"):
        k.call("vjp_jvp_v4", prim, d, ta[:9], td)

def test_kernel_entry_addresses_follow_the_abi(layer, np):
    """What an XLA FFI handler or a TensorFlow op does: call NAME_enzcc_primal / _vjp by address with arrays
    of argument addresses (integers as int64_t)."""
    import ctypes
    k = layer
    x, w, b = np.arange(6.0).reshape(2, 3) / 10, np.ones((3, 2)) / 4, np.array([0.5, -0.5])
    alpha = ctypes.c_double(2.0)
    ints = (ctypes.c_int64 * 3)(2, 3, 2)
    y, s = np.empty((2, 2)), np.empty(())
    a = (ctypes.c_void_p * 9)(x.ctypes.data, w.ctypes.data, b.ctypes.data, ctypes.addressof(ints),
                              ctypes.addressof(ints) + 8, ctypes.addressof(ints) + 16, ctypes.addressof(alpha),
                              y.ctypes.data, s.ctypes.data)
    primal = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(k.address("primal"))
    primal(a)
    yr, sr = layer_ref(np, x, w, b, 2.0)
    assert np.allclose(y, yr, rtol=1e-14) and np.isclose(s, sr)
    gx, gw, galpha = np.full((2, 3), 10.0), np.zeros((3, 2)), ctypes.c_double(99.0)
    seed_y, seed_s = np.ones((2, 2)), np.array(0.0)
    d = (ctypes.c_void_p * 9)(gx.ctypes.data, gw.ctypes.data, None, None, None, None, ctypes.addressof(galpha),
                              seed_y.ctypes.data, seed_s.ctypes.data)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(k.address("vjp"))(a, d)
    want = k.vjp((x, w, b, 2.0), (np.ones((2, 2)), 0.0))
    assert np.allclose(gx, 10 + want[0]), "input gradients accumulate"
    assert np.isclose(galpha.value, want[3]), "a scalar's gradient is stored"
    assert (seed_y == 0).all(), "the seed is consumed"


def test_kernel_free_int_float32_and_shape_errors(compiler, tmp_path, np):
    (tmp_path / "layer.c").write_text(LAYER)
    mom = load_kernel(tmp_path / "layer.c", "moments",
                      [In("x", shape=("n",)), Int("n"), Int("deg"), Out("m", shape=lambda deg: (deg,))],
                      compiler=compiler)
    assert mom.arg_names == ("x", "deg") and mom.params[0].dtype == "float32"
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    m = mom(x, 3)
    assert m.dtype == np.float32 and np.allclose(m, [np.mean(x ** p) for p in (1, 2, 3)], rtol=1e-6)
    (g,) = mom.vjp((x, 3), np.array([1.0, 1.0, 1.0]))
    assert np.allclose(g, (1 + 2 * x + 3 * x ** 2) / 3, rtol=1e-6)
    assert mom(x, deg=0).shape == (0,)
    with pytest.raises(ShapeError, match=r"the shape of 'm' is \(-2,\), with a negative extent"):
        mom(x, -2)

    k = load_kernel(tmp_path / "layer.c", "layer", LAYER_DECL, compiler=compiler)
    x, w, b = np.ones((3, 4)), np.ones((4, 2)), np.ones(2)
    with pytest.raises(ShapeError, match=r"argument 'w' has shape \(5, 2\), but its axis 0 \('k'\) must equal "
                                         r"x.shape\[1\] = 4"):
        k(x, np.ones((5, 2)), b, 1.0)
    with pytest.raises(ShapeError, match=r"argument 'x' must have rank 2 \(shape \(n, k\)\), got shape \(12,\)"):
        k(x.reshape(-1), w, b, 1.0)
    with pytest.raises(ShapeError, match="argument 'alpha' is a scalar"):
        k(x, w, b, [1.0, 2.0])
    with pytest.raises(TypeError, match="missing argument 'alpha'"):
        k(x, w, b)
    with pytest.raises(TypeError, match="unexpected argument 'beta'"):
        k(x, w, b, 1.0, beta=2)
    with pytest.raises(TypeError, match=r"cotangents needs 2 entries \(y, s\)"):
        k.vjp((x, w, b, 1.0), (np.ones((3, 2)),))
    with pytest.raises(ShapeError, match=r"cotangents for 'y' has shape \(2, 3\), expected \(3, 2\)"):
        k.vjp((x, w, b, 1.0), (np.ones((2, 3)), 1.0))
    with pytest.raises(TypeError, match="argument 'deg' must be an int"):
        mom(np.ones(2, dtype=np.float32), 2.5)
    fixed = load_kernel(tmp_path / "layer.c", "moments", [In("x", shape=(3,)), Int("n", 3), Int("deg", 2),
                                                          Out("m", shape=(2,))], compiler=compiler)
    xf = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    assert fixed.arg_names == ("x",) and np.allclose(fixed(xf), [xf.mean(), (xf * xf).mean()], rtol=1e-6)
    with pytest.raises(ShapeError, match=r"argument 'x' must have shape \(3,\), got \(4,\)"):
        fixed(np.ones(4, dtype=np.float32))


def test_kernel_prototype_mismatches_are_named(compiler, tmp_path):
    """The declaration is checked against the compiled prototype before anything is built or called."""
    src = tmp_path / "layer.c"
    src.write_text(LAYER)
    cache = tmp_path / "cache"

    def bad(decl, match, name="layer", exc=PrototypeError):
        with pytest.raises(exc, match=match):
            load_kernel(src, name, decl, compiler=compiler, cache=cache)

    bad(LAYER_DECL[:-1], r"the declaration has 8 parameters \(x, w, b, n, k, m, alpha, y\) but the function takes 9")
    bad(LAYER_DECL[:6] + [Int("alpha")] + LAYER_DECL[7:],
        r"parameter 7 'alpha' is declared Int\(\) \(an integer by value\) but the function takes double")
    bad([In("x"), In("w"), In("b"), Scalar("n"), Int("k", 1), Int("m", 1), Scalar("alpha"), Out("y", shape=(1,)),
         Out("s", shape=())],
        r"parameter 4 'n' is declared Scalar\(\) \(float or double by value\) but the function takes i32")
    bad(LAYER_DECL[:6] + [In("alpha")] + LAYER_DECL[7:],
        r"parameter 7 'alpha' is declared In\(\) \(a pointer\) but the function takes double")
    bad([In("x", dtype="float32")] + LAYER_DECL[1:],
        r"parameter 1 'x' is declared In\(float32\) but the function takes double elements")
    bad(LAYER_DECL[:6] + [Scalar("alpha", dtype="float32")] + LAYER_DECL[7:],
        r"parameter 7 'alpha' is declared Scalar\(float32\) but the function takes double")
    bad(LAYER_DECL, "layer.c defines no function nosuch", name="nosuch")
    src.write_text(LAYER + "double total(const double *x, int n) { double s = 0; for (int i = 0; i < n; i++) "
                   "s += x[i]; return s; }\nint status(const double *x, double *y) { y[0] = 2 * x[0]; return 0; }\n")
    bad([In("x"), Int("n")], "total returns double: a kernel gives its results through Out", name="total")
    st = load_kernel(src, "status", [In("x", shape=(1,)), Out("y", shape=(1,))], compiler=compiler, cache=cache)
    assert list(st(__import__("numpy").array([1.5]))) == [3.0]  # an integer status is ignored
    # malformed declarations
    bad([In("x"), In("x")], "parameter name 'x' is used twice", exc=ValueError)
    bad([In("x"), Out("y", shape=lambda z: (1,))], "the callable's parameter 'z' is not a parameter", exc=ValueError)
    bad([In("x"), Out("y", shape=("q",))], "'q' is neither an Int parameter nor an extent name", exc=ValueError)
    with pytest.raises(TypeError, match="an output needs shape="):
        Out("y", None)
    with pytest.raises(TypeError, match="shape entries must be"):
        In("x", shape=(-1,))
    with pytest.raises(ValueError, match="unsupported dtype"):
        In("x", dtype="int32")
    assert [p.name.split("-")[0] for p in cache.glob("*.so")] == ["status"]  # nothing else was built


def test_kernel_source_that_does_not_compile(compiler, tmp_path):
    src = tmp_path / "broken.c"
    src.write_text("void f(const double *x, double *y) { y[0] = x[0] * oops; }\n")
    with pytest.raises(EnzccBuildError) as e:
        load_kernel(src, "f", [In("x"), Out("y", shape=(1,))], compiler=compiler, cache=tmp_path / "c")
    assert "broken.c:1:" in str(e.value).splitlines()[0] and "undeclared identifier 'oops'" in str(e.value)
    assert not isinstance(e.value, PrototypeError)


def test_kernel_second_order_refused_is_a_clear_error(compiler, tmp_path, np):
    """First order never depends on the second-order build; when enzcc refuses it (simulated by a compiler
    that fails on the second-order wrapper), the first use says so."""
    refusing = tmp_path / "refusing-enzcc"
    refusing.write_text("#!/bin/sh\nfor a in \"$@\"; do case $a in *.c) if grep -q enzcc_vjp_jvp \"$a\" "
                        "2>/dev/null; then echo \"$a:1: error: in function 'f_enzcc_vjp_call': no derivative rule "
                        "for call to '__enzyme_autodiff'\" >&2; exit 1; fi;; esac; done\n"
                        f"exec {compiler} \"$@\"\n")
    refusing.chmod(0o755)
    src = tmp_path / "sq.c"
    src.write_text("void f(const double *x, double *y) { y[0] = x[0] * x[0]; }\n")
    k = load_kernel(src, "f", [In("x", shape=(1,)), Out("y", shape=(1,))], compiler=str(refusing),
                    cache=tmp_path / "c")
    assert np.allclose(k.vjp((np.array([3.0]),), (np.array([1.0]),))[0], [6.0])
    with pytest.raises(SecondOrderError, match="no derivative rule for call to '__enzyme_autodiff'.*\n"
                                               "enzcc could not build the second derivative"):
        k.vjp_jvp((np.array([3.0]),), (np.array([1.0]),), (np.array([1.0]),))


CXX_SQ = r"""
#include <cstddef>
#include <numeric>
#include <vector>
extern "C" void sq(const double *x, std::size_t n, double a, double *y, double *s) {
  std::vector<double> v(x, x + n);
  for (std::size_t i = 0; i < n; i++) y[i] = a * v[i] * v[i];
  *s = std::accumulate(v.begin(), v.end(), 0.0, [](double acc, double t) { return acc + t * t * t; });
}
"""

FORTRAN_SQ = """
subroutine sq(x, n, a, y, s) bind(c, name="sq")
  use iso_c_binding
  integer(c_int64_t), value :: n
  real(c_double), value :: a
  real(c_double), intent(in) :: x(n)
  real(c_double), intent(out) :: y(n)
  real(c_double), intent(out) :: s
  y = a * x * x
  s = sum(x * x * x)
end subroutine
"""

RUST_SQ = """
#[no_mangle]
pub extern "C" fn sq(x: *const f64, n: usize, a: f64, y: *mut f64, s: *mut f64) {
    let x = unsafe { std::slice::from_raw_parts(x, n) };
    let y = unsafe { std::slice::from_raw_parts_mut(y, n) };
    let mut acc = 0.0;
    for i in 0..n {
        y[i] = a * x[i] * x[i];
        acc += x[i] * x[i] * x[i];
    }
    unsafe { *s = acc; }
}
"""

C_SQ = """
#include <stddef.h>
void sq(const double *x, size_t n, double a, double *y, double *s) {
  double acc = 0;
  for (size_t i = 0; i < n; i++) { y[i] = a * x[i] * x[i]; acc += x[i] * x[i] * x[i]; }
  *s = acc;
}
"""


@pytest.mark.parametrize("suffix,text", [
    (".c", C_SQ),
    (".cpp", CXX_SQ),
    pytest.param(".f90", FORTRAN_SQ, marks=pytest.mark.skipif(not have("flang-22"), reason="needs flang-22")),
    pytest.param(".rs", RUST_SQ, marks=pytest.mark.skipif(not have("rustc"), reason="needs rustc")),
], ids=["c", "c++", "fortran", "rust"])
def test_kernel_languages(compiler, tmp_path, np, suffix, text):
    """The same function in C, C++ (extern "C"), Fortran (bind(c)) and Rust (#[no_mangle] extern "C"): values,
    gradients, tangents and the prototype check (element types from the debug information)."""
    src = tmp_path / f"sq{suffix}"
    src.write_text(text)
    decl = [In("x", shape=("n",)), Int("n"), Scalar("a"), Out("y", shape=("n",)), Out("s", shape=())]
    k = load_kernel(src, "sq", decl, compiler=compiler)
    assert [p.dtype for p in k.params if p.kind != "int"] == ["float64"] * 4
    x = np.array([0.5, -1.5, 2.0])
    y, s = k(x, 1.5)
    assert np.allclose(y, 1.5 * x * x, rtol=1e-15) and np.isclose(s, (x ** 3).sum(), rtol=1e-15)
    gx, ga = k.vjp((x, 1.5), (np.array([1.0, 2.0, 3.0]), 2.0))
    assert np.allclose(gx, 2 * 1.5 * x * [1, 2, 3] + 2 * 3 * x * x, rtol=1e-14)
    assert np.isclose(ga, (x * x * [1, 2, 3]).sum(), rtol=1e-14)
    (_, _), (ty, ts) = k.jvp((x, 1.5), (np.ones(3), 0.5))
    assert np.allclose(ty, 3 * x + 0.5 * x * x, rtol=1e-14) and np.isclose(ts, (3 * x * x).sum(), rtol=1e-14)
    with pytest.raises(PrototypeError, match="'x' is declared In\\(float32\\) but the function takes double"):
        load_kernel(src, "sq", [In("x", shape=("n",), dtype="float32")] + decl[1:], compiler=compiler,
                    cache=tmp_path / "c")
    with pytest.raises(PrototypeError, match="'n' is declared Scalar"):
        load_kernel(src, "sq", [In("x"), Scalar("n"), Scalar("a"), Out("y", shape=lambda x: x.shape),
                                Out("s", shape=())], compiler=compiler, cache=tmp_path / "c")


INT_ARRAYS = {
    ".f90": """
subroutine ic(x, n, y) bind(c, name="ic")
  use iso_c_binding
  integer(c_int), intent(in) :: x(*)
  integer(c_int64_t), value :: n
  real(c_double), intent(out) :: y(*)
  y(1:n) = x(1:n)
end subroutine
""",
    ".rs": """
#[no_mangle]
pub extern "C" fn ic(x: *const i32, n: usize, y: *mut f64) {
    for i in 0..n { unsafe { *y.add(i) = *x.add(i) as f64; } }
}
""",
    ".c": "#include <stddef.h>\nvoid ic(const int *x, size_t n, double *y) { for (size_t i = 0; i < n; i++) y[i] = x[i]; }\n",
}


@pytest.mark.parametrize("suffix", [
    ".c",
    pytest.param(".f90", marks=pytest.mark.skipif(not have("flang-22"), reason="needs flang-22")),
    pytest.param(".rs", marks=pytest.mark.skipif(not have("rustc"), reason="needs rustc")),
], ids=["c", "fortran", "rust"])
def test_kernel_integer_array_declared_float_is_refused(compiler, tmp_path, suffix):
    """An array of integers declared as a float array would be read past its end: refused from the debug
    information in every language (C also by the wrapper's prototype)."""
    src = tmp_path / f"ic{suffix}"
    src.write_text(INT_ARRAYS[suffix])
    with pytest.raises(PrototypeError, match="parameter 1 'x' is declared In\\(float64\\) but the function takes"):
        load_kernel(src, "ic", [In("x", dtype="float64"), Int("n"), Out("y", shape=("n",))], compiler=compiler,
                    cache=tmp_path / "c")


def test_kernel_integer_too_large_for_the_c_int_and_const_tangent(compiler, tmp_path, np):
    """An int that the function's 32-bit parameter cannot hold would wrap (a shorter loop, unwritten output):
    a ShapeError. A nonzero tangent for a const input would be dropped: a ValueError."""
    src = tmp_path / "mulw.c"
    src.write_text("void mulw(const double *x, const double *w, int n, double *y) "
                   "{ for (int i = 0; i < n; i++) y[i] = x[i] * w[i]; }\n")
    k = load_kernel(src, "mulw", [In("x"), In("w", const=True), Int("n"), Out("y", shape=(3,))],
                    compiler=compiler, cache=tmp_path / "c")
    x, w = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    assert np.allclose(k(x, w, 3), x * w)
    with pytest.raises(ShapeError, match="Int 'n' is 4294967296, which the function's 32-bit integer"):
        k(x, w, 1 << 32)
    (_, ty) = k.jvp((x, w, 3), (np.ones(3), np.zeros(3)))
    assert np.allclose(ty, w)
    with pytest.raises(ValueError, match="'w' is declared const=True"):
        k.jvp((x, w, 3), (np.ones(3), np.ones(3)))


def test_kernel_cxx_function_needs_c_linkage(compiler, tmp_path):
    src = tmp_path / "m.cpp"
    src.write_text("void sq(const double *x, double *y) { y[0] = x[0] * x[0]; }\n")
    with pytest.raises(PrototypeError, match='defines no function sq \\(a C\\+\\+ function must be declared extern "C"\\)'):
        load_kernel(src, "sq", [In("x"), Out("y", shape=(1,))], compiler=compiler, cache=tmp_path / "c")
