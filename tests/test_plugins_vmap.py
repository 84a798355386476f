"""torch.func.vmap of enzcc ops in one native call (issue 36 item 4, plugins/batch.py): every op (primal, vjp,
jvp, vjp_jvp, jvp_jvp) over a batch, inputs batched along dimension 0 or another one and others shared, equal
exactly to a loop of single calls and to the same function in torch (its own ops and autograd); one batch loop
call per op, never a Python-level call per example; an empty batch is one clear error; a nested vmap and the
checked mode go example by example at the inner level and agree too."""

from __future__ import annotations

import pytest

from enzcc_testing import plugins_importable

torch = pytest.importorskip("torch", reason="PyTorch not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh)")

plugins_importable()

from enzcc_plugins import In, Int, Out, Scalar  # noqa: E402
from enzcc_plugins import batch  # noqa: E402
from enzcc_plugins.torch import enzyme  # noqa: E402

F64 = torch.float64

# y[i][j] = alpha * tanh(sum_q x[i][q] w[q][j]) + b[j]; s = alpha * sum x^2 (0-d)
LAYER = r"""
#include <math.h>
void vlayer(const double *x, const double *w, const double *b, int n, long k, long m, double alpha, double *y,
            double *s) {
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
"""

DECL = [In("x", shape=("n", "k")), In("w", shape=("k", "m")), In("b", shape=("m",), const=True),
        Int("n"), Int("k"), Int("m"), Scalar("alpha"), Out("y", shape=("n", "m")), Out("s", shape=())]


@pytest.fixture(scope="module")
def layer(enzcc_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("vmap-src")
    (d / "vlayer.c").write_text(LAYER)
    return enzyme(d / "vlayer.c", "vlayer", DECL, compiler=str(enzcc_bin / "enzcc"))


def ref(x, w, b, alpha):
    """The same function in torch: its ops and autograd are the analytic reference."""
    return alpha * torch.tanh(x @ w) + b, alpha * (x * x).sum()


def data(seed=0, B=5):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(B, 3, 4, dtype=F64, generator=g)
    w = torch.randn(4, 2, dtype=F64, generator=g)
    b = torch.randn(2, dtype=F64, generator=g)
    alphas = torch.rand(B, dtype=F64, generator=g) + 0.5
    return xs, w, b, alphas


@pytest.fixture
def calls(monkeypatch):
    """Counts the batch loop's native calls; a Python-level call of an entry point per example fails the test."""
    seen = []
    real = batch.batched_call

    def counting(fn, arrays, B):
        seen.append(B)
        return real(fn, arrays, B)
    monkeypatch.setattr(batch, "batched_call", counting)
    return seen


def no_single_calls(monkeypatch, F):
    def refuse(*a, **k):
        raise AssertionError("an entry point was called once per example")
    monkeypatch.setattr(F.kernel, "call", refuse)


def same(got, want, exact=True, rtol=1e-12, atol=1e-14):
    got, want = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    assert len(got) == len(want)
    for u, v in zip(got, want):
        assert u.shape == v.shape
        assert torch.equal(u, v) if exact else torch.allclose(u, v, rtol=rtol, atol=atol), (u - v).abs().max()


def stack(results):
    """The per-example results (nested tuples of tensors) stacked leaf by leaf."""
    leaves = [torch.utils._pytree.tree_leaves(r) for r in results]
    return [torch.stack(r) for r in zip(*leaves)]


def test_primal_batched_and_shared(layer, calls, monkeypatch):
    """x and alpha batched (alpha along dimension 0, x along dimension 2), w and b shared: one native call."""
    xs, w, b, alphas = data()
    loop = stack([layer(x, w, b, a) for x, a in zip(xs, alphas)])
    one = stack([layer(xs[0], w, b, alphas[0])] * 5)
    no_single_calls(monkeypatch, layer)
    got = torch.func.vmap(lambda x, a: layer(x, w, b, a))(xs, alphas)
    same(got, loop)
    same(got, torch.func.vmap(lambda x, a: ref(x, w, b, a))(xs, alphas), exact=False)
    got = torch.func.vmap(lambda x, a: layer(x, w, b, a), in_dims=(2, 0))(xs.permute(1, 2, 0), alphas)
    same(got, loop)
    ws = w.unsqueeze(1).expand(4, 5, 2).contiguous()  # w batched along dimension 1, x shared
    same(torch.func.vmap(lambda x, w: layer(x, w, b, alphas[0]), in_dims=(None, 1))(xs[0], ws), one)
    assert calls == [5, 5, 5]


def test_per_example_gradients(layer, calls, monkeypatch):
    """vmap(grad(...)) (per-example gradients: the vjp op with its inputs batched) and vmap of the jvp."""
    xs, w, b, alphas = data(seed=1)

    def loss(f):
        return lambda x, w, a: (f(x, w, b, a)[0] ** 2).sum() + f(x, w, b, a)[1]
    loop = [torch.autograd.grad(loss(layer)(x, w.clone().requires_grad_(), a), (x, ), allow_unused=True)
            for x, a in zip(xs.clone().requires_grad_(), alphas)]
    g = torch.func.vmap(torch.func.grad(loss(layer), argnums=(0, 1, 2)), in_dims=(0, None, 0))
    got = g(xs, w, alphas)
    same(got, torch.func.vmap(torch.func.grad(loss(ref), argnums=(0, 1, 2)), in_dims=(0, None, 0))(xs, w, alphas),
         exact=False)
    singles = [torch.func.grad(loss(layer), argnums=(0, 1, 2))(x, w, a) for x, a in zip(xs, alphas)]
    same(got, stack(singles))
    assert loop and torch.equal(got[0], torch.stack([l[0] for l in loop]))
    calls.clear()
    no_single_calls(monkeypatch, layer)
    g(xs, w, alphas)
    assert calls and all(B == 5 for B in calls)  # the primal and the vjp: each one call for the batch
    # forward mode, tangents and inputs batched (tangents along dimension 1)
    ts = torch.randn(3, 5, 4, dtype=F64, generator=torch.Generator().manual_seed(2))

    def jv(f):
        return lambda x, t: torch.func.jvp(lambda x: f(x, w, b, alphas[0]), (x,), (t,))
    got = torch.func.vmap(jv(layer), in_dims=(0, 1))(xs, ts)
    same(got, torch.func.vmap(jv(ref), in_dims=(0, 1))(xs, ts), exact=False)


def test_per_example_gradients_take_the_batch_rule(layer, calls, monkeypatch):
    """vmap(grad(f)): the autograd.Functions take the op's batch rule as their vmap rule (functorch's generated
    rule, which makes a Function and pytree round trips on every call, is not run); per-example second
    derivatives (vmap(grad(grad . c))) too; values = single calls exactly and = torch's own autograd."""
    import torch._functorch.autograd_function as af
    generated, real = [], af.custom_function_call_vmap_generate_rule

    def counting(*args, **kwargs):
        generated.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(af, "custom_function_call_vmap_generate_rule", counting)
    xs, w, b, alphas = data(seed=4)

    def loss(f):
        return lambda x, a: (f(x, w, b, a)[0] ** 2).sum() + f(x, w, b, a)[1] * a
    got = torch.func.vmap(torch.func.grad(loss(layer), argnums=(0, 1)))(xs, alphas)
    assert not generated and calls and all(B == 5 for B in calls)
    same(got, stack([torch.func.grad(loss(layer), argnums=(0, 1))(x, a) for x, a in zip(xs, alphas)]))
    same(got, torch.func.vmap(torch.func.grad(loss(ref), argnums=(0, 1)))(xs, alphas), exact=False)
    c = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(6))

    def gg(f):
        return lambda x, a: torch.func.grad(lambda x: (torch.func.grad(loss(f))(x, a) * c).sum())(x)
    got = torch.func.vmap(gg(layer))(xs, alphas)
    same(got, stack([gg(layer)(x, a) for x, a in zip(xs, alphas)]))
    same(got, torch.func.vmap(gg(ref))(xs, alphas), exact=False, rtol=1e-10, atol=1e-12)


def test_second_order_batched(layer, calls):
    """vmap of Hessians (forward over reverse, vjp_jvp, inputs batched) and of jacfwd(jacfwd) (jvp_jvp)."""
    xs, w, b, alphas = data(seed=3, B=3)

    def loss(f):
        return lambda x, a: (f(x, w, b, a)[0] ** 3).sum() + f(x, w, b, a)[1] * a
    for T in (lambda g: torch.func.hessian(g, argnums=(0, 1)),
              lambda g: torch.func.jacfwd(torch.func.jacfwd(g, argnums=(0, 1)), argnums=(0, 1))):
        calls.clear()
        got = torch.func.vmap(T(loss(layer)))(xs, alphas)
        assert calls and all(B == 3 for B in calls)
        same(got, torch.func.vmap(T(loss(ref)))(xs, alphas), exact=False, rtol=1e-11, atol=1e-12)
        same(got, stack([T(loss(layer))(x, a) for x, a in zip(xs, alphas)]))


def test_empty_batch_nested_and_checked(layer, calls, enzcc_bin, tmp_path, monkeypatch):
    """An empty batch is one ValueError; a nested vmap runs the outer batch natively, example by example at the
    inner level, and agrees; the checked mode calls the guarded entry point once per example."""
    xs, w, b, alphas = data(seed=4)
    with pytest.raises(ValueError, match="empty batch"):
        torch.func.vmap(lambda x: layer(x, w, b, alphas[0]))(xs[:0])
    xss = torch.stack([xs, 2 * xs])  # (2, 5, 3, 4)
    calls.clear()
    got = torch.func.vmap(torch.func.vmap(lambda x, a: layer(x, w, b, a), in_dims=(0, None)),
                          in_dims=(0, None))(xss, alphas[0])
    same(got, [torch.stack(r) for r in zip(*[stack([layer(x, w, b, alphas[0]) for x in xx]) for xx in xss])])
    assert calls == [2] * 5  # the inner examples one by one, each a native call over the outer batch
    (tmp_path / "vlayer.c").write_text(LAYER)
    monkeypatch.setenv("ENZCC_CHECKED", "1")
    checked = enzyme(tmp_path / "vlayer.c", "vlayer", DECL, compiler=str(enzcc_bin / "enzcc"),
                     op_name="enzcc::vlayer_checked")
    assert checked.kernel.checked
    calls.clear()
    got = torch.func.vmap(lambda x: checked(x, w, b, alphas[0]))(xs)
    assert calls == []
    same(got, stack([layer(x, w, b, alphas[0]) for x in xs]))


def test_vmap_alone_then_autograd(layer, calls):
    """Under vmap alone the op skips functorch's autograd.Function machinery, but only when nothing needs a
    derivative: inputs that require a gradient outside the vmap still get theirs (= torch's own)."""
    xs, w, b, alphas = data(seed=5)
    with torch.no_grad():
        same(torch.func.vmap(lambda x: layer(x, w, b, alphas[0]))(xs), stack([layer(x, w, b, alphas[0]) for x in xs]))
    assert calls == [5]
    grads = []
    for f in (layer, ref):
        x, ww = xs.clone().requires_grad_(), w.clone().requires_grad_()
        y, s = torch.func.vmap(lambda x: f(x, ww, b, alphas[0]))(x)
        ((y ** 2).sum() + s.sum()).backward()
        grads.append((x.grad, ww.grad))
    same(grads[0], grads[1], exact=False)


def test_overhead_benchmark_runs():
    """bench.frameworks_overhead (issue 36 item 5) on a small size: every contestant's value and gradient are
    checked against sin(x) * x before timing; one round."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "bench.frameworks_overhead", "--rounds", "1", "--n", "4096",
                           "--threads", "1"], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("| call |") == 4 and proc.stdout.count("| grad |") == 6  # (split and combined VJP)


def test_vector_math_opt_in(enzcc_bin, tmp_path):
    """cflags=["-fveclib=libmvec", "-fno-math-errno"] (an opt-in: glibc's vector math, accurate to 4 ulp, in
    loops the vectorizer vectorizes): the library calls libmvec's variants in the primal and the gradient (the
    default build does not), and vmap of the op and of its gradient equal torch's own sin and the analytic
    derivative to a few ulp."""
    import subprocess
    src = tmp_path / "vsinx.c"
    src.write_text("#include <math.h>\n#include <stddef.h>\n"
                   "void vsinx(const double *x, size_t n, double *y) {\n"
                   "  for (size_t i = 0; i < n; i++) y[i] = sin(x[i]) * x[i];\n}\n")
    compiler = str(enzcc_bin / "enzcc")
    plain = enzyme(src, "vsinx", compiler=compiler, op_name="enzcc::vsinx_plain")
    F = enzyme(src, "vsinx", compiler=compiler, cflags=["-fveclib=libmvec", "-fno-math-errno"],
               op_name="enzcc::vsinx_libmvec")

    def undefined(lib):
        return subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True).stdout
    assert "_ZGVbN2v_sin" in undefined(F.kernel.library) and "_ZGVbN2v_cos" in undefined(F.kernel.library)
    assert "_ZGV" not in undefined(plain.kernel.library)
    X = torch.linspace(-3.0, 3.0, 8 * 512, dtype=F64).reshape(8, 512)
    with torch.no_grad():
        y = torch.func.vmap(F.apply)(X)
    g = torch.func.vmap(torch.func.grad(lambda x: F.apply(x).sum()))(X)
    assert torch.allclose(y, torch.sin(X) * X, rtol=2e-15, atol=1e-15)
    assert torch.allclose(g, torch.cos(X) * X + torch.sin(X), rtol=2e-15, atol=2e-15)
    assert torch.allclose(y, plain.apply(X.reshape(-1)).reshape(8, 512), rtol=2e-15, atol=1e-15)
