"""PyTorch integration on the ABI 3 build layer (plugins/torch.py): several inputs and outputs of different
shapes, a const input, scalars, free ints, float32 and float64; gradcheck in float64; forward mode; torch.compile;
second order (double backward, gradgradcheck, forward over reverse); and the errors of issue 15 item 4.
Skipped when PyTorch is not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh installs it).
"""

from __future__ import annotations

import pytest

from enzcc_testing import plugins_importable

torch = pytest.importorskip("torch", reason="PyTorch not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh)")

plugins_importable()

from enzcc_plugins import EnzccBuildError, In, Int, Out, PrototypeError, Scalar, SecondOrderError, ShapeError  # noqa: E402
from enzcc_plugins.torch import enzyme  # noqa: E402

F64 = torch.float64

# y[i][j] = alpha * tanh(sum_q x[i][q] w[q][j]) + b[j]; s = alpha * sum x^2 (0-d); REAL = double or float
LAYER = r"""
#include <math.h>
#ifndef REAL
#define REAL double
#endif
void layer(const REAL *x, const REAL *w, const REAL *b, int n, long k, long m, REAL alpha, REAL *y, REAL *s) {
  REAL acc = 0;
  for (int i = 0; i < n; i++)
    for (long j = 0; j < m; j++) {
      REAL t = 0;
      for (long q = 0; q < k; q++) t += x[i * k + q] * w[q * m + j];
      y[i * m + j] = alpha * tanh(t) + b[j];
    }
  for (long i = 0; i < n * k; i++) acc += x[i] * x[i];
  *s = alpha * acc;
}
/* m[j] = sum_i x_i^(j+1) / n for j < deg: deg is a call argument */
void moments(const double *x, size_t n, int deg, double *m) {
  for (int j = 0; j < deg; j++) {
    double acc = 0;
    for (size_t i = 0; i < n; i++) acc += pow(x[i], j + 1);
    m[j] = acc / n;
  }
}
"""

DECL = [In("x", shape=("n", "k")), In("w", shape=("k", "m")), In("b", shape=("m",), const=True),
        Int("n"), Int("k"), Int("m"), Scalar("alpha"), Out("y", shape=("n", "m")), Out("s", shape=())]


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("torch-src")
    (d / "layer.c").write_text(LAYER)
    return d / "layer.c"


@pytest.fixture(scope="module")
def layer(compiler, src):
    return enzyme(src, "layer", DECL, compiler=compiler)


def ref(x, w, b, alpha):
    """The same function in torch: its autograd is the analytic reference."""
    return alpha * torch.tanh(x @ w) + b, alpha * (x * x).sum()


def data(dtype=F64, seed=0, grad=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, dtype=dtype, generator=g)
    w = torch.randn(4, 2, dtype=dtype, generator=g)
    b = torch.randn(2, dtype=dtype, generator=g)
    a = torch.tensor(0.7, dtype=dtype)
    if grad:
        x.requires_grad_(True)
        w.requires_grad_(True)
        a.requires_grad_(True)
    return x, w, b, a


def test_torch_values_and_gradients(layer):
    x, w, b, a = data()
    y, s = layer(x, w, b, alpha=a)
    yr, sr = ref(x, w, b, a)
    assert y.shape == (3, 2) and s.shape == () and y.dtype == F64
    assert torch.allclose(y, yr, rtol=1e-14, atol=0) and torch.allclose(s, sr, rtol=1e-14)
    g = torch.Generator().manual_seed(5)
    gy, gs = torch.randn(3, 2, dtype=F64, generator=g), 1.7
    got = torch.autograd.grad((y * gy).sum() + gs * s, (x, w, a))
    want = torch.autograd.grad((yr * gy).sum() + gs * sr, (x, w, a))
    for u, v in zip(got, want):
        assert torch.allclose(u, v, rtol=1e-12, atol=1e-14)
    # a Python number for the scalar (no gradient then); non-contiguous inputs are copied
    xt = x.detach().t().contiguous().t()
    assert not xt.is_contiguous()
    y2, _ = layer.apply(xt, w.detach(), b, 0.7)
    assert torch.allclose(y2, yr.detach(), rtol=1e-14)
    # only one output used: the other's cotangent is zero
    (gx,) = torch.autograd.grad(layer(x, w, b, a)[1], x)
    assert torch.allclose(gx, 2 * a.detach() * x.detach(), rtol=1e-14)


def test_torch_gradcheck_float64(layer, compiler, src):
    x, w, b, a = data(seed=1)
    assert torch.autograd.gradcheck(lambda x, w, a: layer(x, w, b, a), (x, w, a), eps=1e-6, atol=1e-7)
    mom = enzyme(src, "moments", [In("x", shape=("n",)), Int("n"), Int("deg"), Out("m", shape=("deg",))],
                 compiler=compiler)
    v = torch.tensor([0.5, -1.2, 2.0, 0.3], dtype=F64, requires_grad=True)
    m = mom(v, deg=3)
    assert m.shape == (3,) and torch.allclose(m, torch.stack([(v ** p).mean() for p in (1, 2, 3)]))
    assert torch.autograd.gradcheck(lambda v: mom(v, 3), (v,), eps=1e-6, atol=1e-7)
    with pytest.raises(ShapeError, match=r"the shape of 'm' is \(-1,\), with a negative extent"):
        mom(v, -1)
    with pytest.raises(TypeError, match="argument 'deg' is an Int, got float"):
        mom(v, 2.0)


def test_torch_float32(compiler, src):
    layer32 = enzyme(src, "layer", DECL, cflags=["-DREAL=float"], compiler=compiler,
                     op_name="layer_float32")  # (another library than layer's: another stable name)
    assert all(p.dtype == "float32" for p in layer32.kernel.params if p.kind != "int")  # from the prototype
    x, w, b, a = data(torch.float32, seed=2)
    y, s = layer32(x, w, b, a)
    yr, sr = ref(x, w, b, a)
    assert y.dtype == torch.float32 and torch.allclose(y, yr, rtol=1e-5, atol=1e-6)
    got = torch.autograd.grad(y.sum() + s, (x, w, a))
    want = torch.autograd.grad(yr.sum() + sr, (x, w, a))
    for u, v in zip(got, want):
        assert torch.allclose(u, v, rtol=1e-4, atol=1e-5)


def test_torch_forward_mode(layer):
    """torch.func.jvp and torch.autograd.forward_ad use NAME_enzcc_jvp (b, const, is closed over)."""
    x, w, b, a = (t.detach() for t in data(seed=3))
    g = torch.Generator().manual_seed(6)
    tx, tw, ta = torch.randn(3, 4, dtype=F64, generator=g), torch.randn(4, 2, dtype=F64, generator=g), \
        torch.tensor(0.3, dtype=F64)
    out, tan = torch.func.jvp(lambda x, w, a: layer(x, w, b, a), (x, w, a), (tx, tw, ta))
    out_r, tan_r = torch.func.jvp(lambda x, w, a: ref(x, w, b, a), (x, w, a), (tx, tw, ta))
    for u, v in zip(out + tan, out_r + tan_r):
        assert torch.allclose(u, v, rtol=1e-12, atol=1e-14)
    # central differences in float64
    h = 1e-6
    yp, sp = layer(x + h * tx, w + h * tw, b, a + h * ta)
    ym, sm = layer(x - h * tx, w - h * tw, b, a - h * ta)
    assert torch.allclose(tan[0], (yp - ym) / (2 * h), rtol=1e-7, atol=1e-8)
    assert torch.allclose(tan[1], (sp - sm) / (2 * h), rtol=1e-7)
    import torch.autograd.forward_ad as fwad
    with fwad.dual_level():
        y, s = layer(fwad.make_dual(x, tx), w, b, a)
        assert torch.allclose(fwad.unpack_dual(y).tangent, a * (1 - torch.tanh(x @ w) ** 2) * (tx @ w), rtol=1e-12)
        assert torch.allclose(fwad.unpack_dual(s).tangent, 2 * a * (x * tx).sum(), rtol=1e-12)


def test_torch_compile_full_graph(layer):
    """torch.compile captures the custom ops in one graph (fullgraph=True: no graph break) from their fake
    kernels; values and gradients equal the eager ones."""
    torch._dynamo.reset()
    b = data()[2]

    def loss(x, w, a):
        y, s = layer(x, w, b, a)
        return (y * y).sum() + s

    compiled = torch.compile(loss, fullgraph=True)
    x, w, _, a = data(seed=4)
    v = compiled(x, w, a)
    grads = torch.autograd.grad(v, (x, w, a))
    v_ref = (lambda y, s: (y * y).sum() + s)(*ref(x, w, b, a))
    grads_ref = torch.autograd.grad(v_ref, (x, w, a))
    assert torch.allclose(v, v_ref, rtol=1e-13)
    for u, r in zip(grads, grads_ref):
        assert torch.allclose(u, r, rtol=1e-12, atol=1e-14)
    assert torch.allclose(compiled(x * 2, w, a), loss(x * 2, w, a), rtol=1e-13)
    # dynamic shapes: the fake kernels compute the output shapes symbolically
    dyn = torch.compile(loss, fullgraph=True, dynamic=True)
    for n in (2, 5):
        xn = torch.randn(n, 4, dtype=F64, requires_grad=True)
        (g,) = torch.autograd.grad(dyn(xn, w, a), xn)
        (g_ref,) = torch.autograd.grad(loss(xn, w, a), xn)
        assert torch.allclose(g, g_ref, rtol=1e-12, atol=1e-14)


def test_torch_second_order(layer):
    """The backward is differentiable (NAME_enzcc_vjp_jvp, forward over reverse): gradgradcheck, and a
    Hessian-vector product against the analytic one of s = alpha * sum x^2 and against torch's own."""
    x, w, b, a = data(seed=7)
    assert torch.autograd.gradgradcheck(lambda x, w, a: layer(x, w, b, a), (x, w, a), eps=1e-6, atol=1e-6)
    g = torch.Generator().manual_seed(8)
    v = torch.randn(3, 4, dtype=F64, generator=g)
    (gx,) = torch.autograd.grad(layer(x, w, b, a)[1], x, create_graph=True)
    hx, ha = torch.autograd.grad((gx * v).sum(), (x, a))
    assert torch.allclose(hx, 2 * a.detach() * v, rtol=1e-14) and torch.allclose(ha, 2 * (x.detach() * v).sum())
    # both outputs, all differentiable inputs: against torch autograd's double backward of the reference
    gy = torch.randn(3, 2, dtype=F64, generator=g)

    def hvp(f):
        y, s = f(x, w, b, a)
        gx, gw, ga = torch.autograd.grad((y * gy).sum() + s, (x, w, a), create_graph=True)
        return torch.autograd.grad((gx * v).sum() + gw.sum() + 0.5 * ga, (x, w, a))
    for u, r in zip(hvp(layer), hvp(ref)):
        assert torch.allclose(u, r, rtol=1e-11, atol=1e-13)
    # forward over reverse with torch.func
    xd, wd, ad = x.detach(), w.detach(), a.detach()
    f = torch.func.grad(lambda x: layer(x, wd, b, ad)[0].pow(2).sum())
    fr = torch.func.grad(lambda x: ref(x, wd, b, ad)[0].pow(2).sum())
    assert torch.allclose(torch.func.jvp(f, (xd,), (v,))[1], torch.func.jvp(fr, (xd,), (v,))[1], rtol=1e-11)


def test_torch_func_transforms(layer):
    """torch.func.vmap (one call per example), jacrev, jacfwd and hessian against the same of the reference."""
    x, w, b, a = (t.detach() for t in data(seed=10))
    xs = torch.randn(4, 3, 4, dtype=F64, generator=torch.Generator().manual_seed(11))
    got = torch.func.vmap(lambda x: layer(x, w, b, a))(xs)
    want = torch.func.vmap(lambda x: ref(x, w, b, a))(xs)
    assert got[0].shape == (4, 3, 2) and got[1].shape == (4,)
    assert all(torch.allclose(u, v, rtol=1e-13) for u, v in zip(got, want))
    for jac in (torch.func.jacrev, torch.func.jacfwd):
        assert torch.allclose(jac(lambda x, w: layer(x, w, b, a)[0], argnums=(0, 1))(x, w)[1],
                              torch.func.jacrev(lambda x, w: ref(x, w, b, a)[0], argnums=(0, 1))(x, w)[1], rtol=1e-12)

    def loss(f):
        return lambda x, a: f(x, w, b, a)[0].pow(2).sum() + f(x, w, b, a)[1]
    h, h_ref = (torch.func.hessian(loss(f), argnums=(0, 1))(x, a) for f in (layer, ref))
    for i in range(2):
        for j in range(2):
            assert torch.allclose(h[i][j], h_ref[i][j], rtol=1e-11, atol=1e-13)


COUNTED = r"""
long runs; /* how many times an entry point of this library ran the function */
void counted(const double *x, long n, const double *c, double *y) {
  runs++;
  for (long i = 0; i < n; i++) y[i] = x[i] * x[i] * x[i] + c[0] * x[i];
}
"""



def counted_kernel(compiler, src):
    """COUNTED as an op (its libraries count the runs of the function)."""
    (src.parent / "counted.c").write_text(COUNTED)
    return enzyme(src.parent / "counted.c", "counted", [In("x"), Int("n", value=lambda x: x.size), In("c", shape=(1,)),
                                                 Out("y", shape=lambda x: x.shape)], compiler=compiler)

def test_torch_func_jacobians_through_vector_mode(layer, compiler, src):
    """torch.func.jacfwd / jacrev vmap the jvp / vjp op over a basis with the primal inputs shared: W = 8, 4, 2
    tangents or cotangents per run of the function (NAME_enzcc_<entry>_v<W>, the third library), the rest one by
    one, as the run counts show; a shared cotangent is copied per example, never consumed in place."""
    import ctypes

    x, w, b, a = (t.detach() for t in data(seed=12))
    for jac in (torch.func.jacfwd, torch.func.jacrev):  # 15 tangents / 7 cotangents, several inputs and outputs
        got = jac(lambda x, w, a: layer(x, w, b, a), argnums=(0, 1, 2))(x, w, a)
        want = jac(lambda x, w, a: ref(x, w, b, a), argnums=(0, 1, 2))(x, w, a)
        for u, v in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
            assert torch.allclose(u, v, rtol=1e-12, atol=1e-14)
    g = counted_kernel(compiler, src)
    v, c = torch.linspace(0.5, 2.0, 19, dtype=F64), torch.tensor([0.25], dtype=F64)
    first = ctypes.c_long.in_dll(ctypes.CDLL(str(g.kernel.library)), "runs")
    before = first.value
    want = torch.diag(3 * v * v + 0.25)
    assert torch.allclose(torch.func.jacfwd(g)(v, c), want, rtol=1e-14)
    vector = ctypes.c_long.in_dll(ctypes.CDLL(str(g.kernel.vector("jvp")[1])), "runs")
    assert (vector.value, first.value - before) == (3, 2)  # 8 + 8 + 2 and 1 (and the primal); 19 before
    assert torch.allclose(torch.func.jacrev(g)(v, c), want, rtol=1e-14)
    assert (vector.value, first.value - before) == (6, 4)
    # one output's cotangent batched, the other's shared by every example: the shared one is copied per example
    # (Enzyme consumes seeds), never zeroed in the caller's tensor
    _, pullback = torch.func.vjp(lambda x, w, a: layer(x, w, b, a), x, w, a)
    _, pullback_ref = torch.func.vjp(lambda x, w, a: ref(x, w, b, a), x, w, a)
    gys, gs = torch.randn(5, 3, 2, dtype=F64, generator=torch.Generator().manual_seed(13)), torch.tensor(1.5, dtype=F64)
    got = torch.func.vmap(lambda gy: pullback((gy, gs)))(gys)
    want = torch.func.vmap(lambda gy: pullback_ref((gy, gs)))(gys)
    assert all(torch.allclose(u, v, rtol=1e-12, atol=1e-14) for u, v in zip(got, want))
    assert gs.item() == 1.5


def test_torch_func_hessian_through_vector_mode(layer, compiler, src):
    """torch.func.hessian of a function with one result (jacfwd of jacrev: a vmap over tangent directions of
    one gradient, the inputs and the seed shared): W = 8, 4, 2 directions per run of forward over reverse
    (NAME_enzcc_vjp_jvp_v<W>, a fourth library), the rest one by one, as the run counts show."""
    import ctypes

    x, w, b, a = (t.detach() for t in data(seed=14))

    def loss(f):
        return lambda x, w, a: (f(x, w, b, a)[0] ** 3).sum() + f(x, w, b, a)[1] * a
    got = torch.func.hessian(loss(layer), argnums=(0, 1, 2))(x, w, a)
    want = torch.func.hessian(loss(ref), argnums=(0, 1, 2))(x, w, a)
    for u, v in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
        assert torch.allclose(u, v, rtol=1e-11, atol=1e-12)
    g = counted_kernel(compiler, src)
    v, c = torch.linspace(0.5, 2.0, 19, dtype=F64), torch.tensor([0.25], dtype=F64)
    H = torch.func.hessian(lambda v: (g(v, c) ** 2).sum())(v)  # (x^3 + x/4)^2: 30 x^4 + 6 x^2 + 1/8
    assert torch.allclose(H, torch.diag(30 * v ** 4 + 6 * v ** 2 + 0.125), rtol=1e-12)
    vector = ctypes.c_long.in_dll(ctypes.CDLL(str(g.kernel.vector("vjp_jvp")[1])), "runs")
    second = ctypes.c_long.in_dll(ctypes.CDLL(str(g.kernel.second_order_library)), "runs")
    assert (vector.value, second.value) == (3, 1)  # 8 + 8 + 2 and 1; 19 runs one by one before

def test_torch_every_second_order_and_no_silent_third(layer):
    """Every composition of two of torch.func.jacfwd/jacrev (forward over forward is NAME_enzcc_jvp_jvp; reverse
    over forward its transpose) against the reference; autograd's reverse over forward-mode AD; and every
    composition of three is an error, never a silent zero (under torch.func an op below the transform would
    give one)."""
    import itertools

    x, w, b, a = (t.detach() for t in data(seed=12))

    def loss(f):
        return lambda x, w, a: (f(x, w, b, a)[0] ** 3).sum() + f(x, w, b, a)[1] * a
    jf, jr = torch.func.jacfwd, torch.func.jacrev
    for order in (2, 3):
        for combo in itertools.product((jf, jr), repeat=order):
            def T(g):
                for t in combo:
                    g = t(g, argnums=(0, 1, 2))
                return g
            if order == 2:
                got, want = T(loss(layer))(x, w, a), T(loss(ref))(x, w, a)
                for u, v in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
                    assert torch.allclose(u, v, rtol=1e-11, atol=1e-12), [t.__name__ for t in combo]
            else:
                with pytest.raises(RuntimeError, match="a third derivative is not available"):
                    T(loss(layer))(x, w, a)
    # jvp of jvp with directions for the point and for the tangent (H[t, s] + J u)
    t, s_, u = torch.ones_like(x), torch.cos(x), x * x
    got = torch.func.jvp(lambda x, t: torch.func.jvp(lambda x: layer(x, w, b, a)[0], (x,), (t,))[1], (x, t), (s_, u))
    want = torch.func.jvp(lambda x, t: torch.func.jvp(lambda x: ref(x, w, b, a)[0], (x,), (t,))[1], (x, t), (s_, u))
    assert torch.allclose(got[1], want[1], rtol=1e-11, atol=1e-12) and got[1].abs().max() > 1e-3
    # autograd: reverse mode through forward-mode AD
    import torch.autograd.forward_ad as fwAD
    grads = []
    for f in (layer, ref):
        xr = x.clone().requires_grad_(True)
        with fwAD.dual_level():
            tan = fwAD.unpack_dual(f(fwAD.make_dual(xr, s_), w, b, a)[0]).tangent
        grads.append(torch.autograd.grad((tan ** 2).sum(), xr)[0])
    assert torch.allclose(grads[0], grads[1], rtol=1e-11, atol=1e-12)


def test_torch_seed_example(compiler, tmp_path, monkeypatch):
    """The seed's README example, enzyme("test.c", "f").apply(inp), with a gradient."""
    (tmp_path / "test.c").write_text("#include <math.h>\n#include <stddef.h>\n"
                                     "void f(const double *in, size_t n, double *out) {\n"
                                     "  for (size_t i = 0; i < n; i++) out[i] = exp(in[i]) * in[i];\n}\n")
    monkeypatch.chdir(tmp_path)
    inp = torch.tensor([[0.5, -1.0], [2.0, 0.0]], dtype=F64, requires_grad=True)
    out = enzyme("test.c", "f", compiler=compiler).apply(inp)
    assert out.shape == (2, 2)
    out.sum().backward()
    assert torch.allclose(inp.grad, torch.exp(inp.detach()) * (1 + inp.detach()), rtol=1e-14)


def test_torch_errors_name_the_argument(layer, compiler, src, tmp_path):
    x, w, b, a = data(grad=False)
    with pytest.raises(RuntimeError, match="argument 'w' is on meta, but the enzcc-compiled code runs on the CPU"):
        layer(x, w.to("meta"), b, a)  # any non-CPU device (a GPU tensor) is refused the same way
    with pytest.raises(TypeError, match=r"argument 'b' has dtype torch.float32, but the function takes double"):
        layer(x, w, b.float(), a)
    with pytest.raises(TypeError, match=r"argument 'alpha' has dtype torch.int64"):
        layer(x, w, b, torch.tensor(1))
    with pytest.raises(ShapeError, match=r"argument 'w' has shape \(3, 2\), but its axis 0 \('k'\) must equal "
                                         r"x.shape\[1\] = 4"):
        layer(x, w[:3], b, a)
    with pytest.raises(ShapeError, match=r"argument 'x' must have rank 2 \(shape \(n, k\)\), got shape \(12,\)"):
        layer(x.reshape(-1), w, b, a)
    with pytest.raises(ShapeError, match="argument 'alpha' is a scalar, got shape"):
        layer(x, w, b, torch.ones(2, dtype=F64))
    with pytest.raises(TypeError, match="argument 'x' must be a torch.Tensor, got list"):
        layer([[1.0]], w, b, a)
    with pytest.raises(TypeError, match="missing argument 'alpha'"):
        layer(x, w, b)
    # a gradient asked of a const input: an error, never a silent zero
    bg = b.clone().requires_grad_(True)
    y, _ = layer(x, w, bg, a)
    with pytest.raises(RuntimeError, match="argument 'b' is declared const=True"):
        y.sum().backward()
    with pytest.raises(RuntimeError, match="argument 'b' is declared const=True"):
        torch.func.jvp(lambda b: layer(x, w, b, a)[0], (b,), (torch.ones_like(b),))
    # at load time: a source that does not compile, a prototype mismatch
    bad = tmp_path / "bad.c"
    bad.write_text("void f(const double *x, double *y) { y[0] = oops; }\n")
    with pytest.raises(EnzccBuildError, match="bad.c:1:.*undeclared identifier 'oops'"):
        enzyme(bad, "f", [In("x"), Out("y", shape=(1,))], compiler=compiler)
    with pytest.raises(PrototypeError, match=r"parameter 7 'alpha' is declared Scalar\(float32\) but the function "
                                             r"takes double"):
        enzyme(src, "layer", DECL[:6] + [Scalar("alpha", dtype=torch.float32)] + DECL[7:], compiler=compiler)
    # a third derivative is refused, not silently zero
    x, w, b, a = data(seed=9)
    (gx,) = torch.autograd.grad(layer(x, w, b, a)[1], x, create_graph=True)
    (hx,) = torch.autograd.grad(gx.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="a third derivative is not available"):
        torch.autograd.grad(hx.sum(), a)


def test_torch_second_order_refused_is_a_clear_error(compiler, tmp_path):
    refusing = tmp_path / "refusing-enzcc"
    refusing.write_text("#!/bin/sh\nfor a in \"$@\"; do case $a in *.c) if grep -q enzcc_vjp_jvp \"$a\" "
                        "2>/dev/null; then echo \"$a:1: error: in function 'f_enzcc_vjp_call': no derivative rule "
                        "for call to '__enzyme_autodiff'\" >&2; exit 1; fi;; esac; done\n"
                        f"exec {compiler} \"$@\"\n")
    refusing.chmod(0o755)
    (tmp_path / "sq.c").write_text("void f(const double *x, double *y) { y[0] = x[0] * x[0] * x[0]; }\n")
    F = enzyme(tmp_path / "sq.c", "f", [In("x", shape=(1,)), Out("y", shape=(1,))], compiler=str(refusing),
               cache=tmp_path / "cache", op_name="f_refused_second_order")
    x = torch.tensor([2.0], dtype=F64, requires_grad=True)
    (g,) = torch.autograd.grad(F(x).sum(), x, create_graph=True)
    assert torch.allclose(g, torch.tensor([12.0], dtype=F64))  # first order never needs the second library
    with pytest.raises(SecondOrderError, match="no derivative rule for call to '__enzyme_autodiff'"):
        g.sum().backward()
