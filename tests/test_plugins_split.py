"""Split-mode gradients in PyTorch (issue 36 item 5; plugins/tape.py, plugins/ABI.md 'Split mode'): a forward
that autograd records keeps enzcc's tape (``NAME_enzcc_augfwd``), its backward runs ``NAME_enzcc_rev`` on it, so
the function runs once per forward and backward. Checked here: gradients against torch's own autograd of the
same formula and central differences, at a size where the function does real work; how many times the C
function runs (a counter in the source); no tape left over 300 iterations (the live-tape counter and the
process's RSS), with and without a backward; backward twice, never, and with create_graph.
Skipped when PyTorch is not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh installs it).
"""

from __future__ import annotations

import ctypes
import gc

import pytest

from enzcc_testing import plugins_importable

torch = pytest.importorskip("torch", reason="PyTorch not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh)")

plugins_importable()

from enzcc_plugins import In, Int, Out, Scalar, load_kernel, tape  # noqa: E402
from enzcc_plugins.torch import enzyme  # noqa: E402

F64 = torch.float64

# y[i] = 8 steps of z <- sin(z) x[i] w + z / 2 from z = x[i]; s = sum y^2. The reverse pass needs every step's
# z: the combined VJP runs the steps again, the split reverse reads them from the tape. `calls` counts runs.
SOURCE = r"""
#include <math.h>
#include <stddef.h>
long calls = 0;
void iter(const double *x, size_t n, double w, double *y, double *s) {
  calls++;
  double acc = 0;
  for (size_t i = 0; i < n; i++) {
    double z = x[i];
    for (int k = 0; k < 8; k++) z = sin(z) * x[i] * w + 0.5 * z;
    y[i] = z;
    acc += z * z;
  }
  *s = acc;
}
"""

DECL = [In("x"), Int("n", lambda x: x.size), Scalar("w"), Out("y", shape=lambda x: x.shape), Out("s", shape=())]
N = 20_000


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    path = tmp_path_factory.mktemp("split-src") / "iter.c"
    path.write_text(SOURCE)
    return path


@pytest.fixture(scope="module")
def op(src, compiler):
    F = enzyme(src, "iter", DECL, compiler=compiler)
    assert F.kernel.split() is not None, "enzcc could not build the split-mode library"
    return F


def reference(x, w):
    z = x
    for _ in range(8):
        z = torch.sin(z) * x * w + 0.5 * z
    return z, (z * z).sum()


def data(n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, dtype=F64, generator=g) * 2 - 1).requires_grad_(True)
    return x, torch.tensor(0.8, dtype=F64, requires_grad=True)


def counter(F):
    """The C function's run count over the library the plain calls use and the split-mode one."""
    libs = [F.kernel.library, F.kernel._split_library()]
    return lambda: sum(ctypes.c_long.in_dll(ctypes.CDLL(str(p)), "calls").value for p in libs)


def test_split_gradients_match_autograd_and_differences(op):
    x, w = data()
    y, s = op(x, w)
    assert type(y.grad_fn).__name__ == "SplitPrimalBackward"
    yr, sr = reference(x, w)
    assert torch.allclose(y, yr, rtol=1e-14, atol=1e-15) and torch.allclose(s, sr, rtol=1e-13)
    gy = torch.randn(N, dtype=F64, generator=torch.Generator().manual_seed(3))
    got = torch.autograd.grad((y * gy).sum() + 0.3 * s, (x, w))
    want = torch.autograd.grad((yr * gy).sum() + 0.3 * sr, (x, w))
    for u, v in zip(got, want):
        assert torch.allclose(u, v, rtol=1e-11, atol=1e-13)
    # central differences of L = sum(y gy) + 0.3 s in w and in a few elements of x
    def loss(xv, wv):
        with torch.no_grad():
            yv, sv = op(xv, wv)
            return float((yv * gy).sum() + 0.3 * sv)
    h = 1e-6
    xd, wd = x.detach(), w.detach()
    fd_w = (loss(xd, wd + h) - loss(xd, wd - h)) / (2 * h)
    assert abs(fd_w - float(got[1])) <= 1e-6 * max(1.0, abs(fd_w))
    for i in (0, 17, N - 1):
        e = torch.zeros(N, dtype=F64)
        e[i] = h
        fd = (loss(xd + e, wd) - loss(xd - e, wd)) / (2 * h)
        assert abs(fd - float(got[0][i])) <= 1e-6 * max(1.0, abs(fd))


def test_split_runs_the_function_once_per_forward_and_backward(op, monkeypatch):
    calls = counter(op)
    x, w = data(seed=1)
    for _ in range(2):
        before = calls()
        y, s = op(x, w)
        torch.autograd.grad(s + y.sum(), (x, w))
        assert calls() - before == 1
    # the combined VJP (ENZCC_PLUGINS_SPLIT=0) runs it twice: the count tells the paths apart
    monkeypatch.setenv("ENZCC_PLUGINS_SPLIT", "0")
    before = calls()
    y, s = op(x, w)
    assert type(y.grad_fn).__name__ != "SplitPrimalBackward"
    g0 = torch.autograd.grad(s, (x, w))
    assert calls() - before == 2
    monkeypatch.delenv("ENZCC_PLUGINS_SPLIT")
    y, s = op(x, w)
    g1 = torch.autograd.grad(s, (x, w))
    for u, v in zip(g0, g1):
        assert torch.allclose(u, v, rtol=1e-13, atol=1e-15)


def test_split_backward_twice_never_and_create_graph(op):
    x, w = data(n=300, seed=2)
    live = tape.live_tapes()
    yr, sr = reference(x, w)
    want = torch.autograd.grad(sr, (x, w))
    # twice on one graph: the second one takes the combined VJP from the saved inputs (the tape is spent)
    y, s = op(x, w)
    assert tape.live_tapes() == live + 1
    for _ in range(2):
        got = torch.autograd.grad(s, (x, w), retain_graph=True)
        assert tape.live_tapes() == live
        for u, v in zip(got, want):
            assert torch.allclose(u, v, rtol=1e-12, atol=1e-14)
    del y, s
    # never: dropping the graph frees the tape
    y, s = op(x, w)
    assert tape.live_tapes() == live + 1
    del y, s
    gc.collect()
    assert tape.live_tapes() == live
    # create_graph: the differentiable VJP; the second derivative = torch's own
    y, s = op(x, w)
    (gx,) = torch.autograd.grad(s, x, create_graph=True)
    (hx,) = torch.autograd.grad(gx.sum(), x)
    (gr,) = torch.autograd.grad(reference(x, w)[1], x, create_graph=True)
    (hr,) = torch.autograd.grad(gr.sum(), x)
    assert torch.allclose(gx, gr, rtol=1e-12) and torch.allclose(hx, hr, rtol=1e-10, atol=1e-12)
    del y, s, gx
    gc.collect()
    assert tape.live_tapes() == live


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_split_no_leak_over_300_iterations(op, monkeypatch):
    """Each tape holds the 8 steps of 20,000 elements (1.3 MB): 300 leaked ones would be about 380 MB. (Every
    forward keeps a tape here, also in a run without backward: SPLIT_DROPS raised.)"""
    import enzcc_plugins.torch as ept
    monkeypatch.setattr(ept, "SPLIT_DROPS", 10**9)
    x, w = data(n=20_000, seed=4)
    live = tape.live_tapes()
    for backward in (True, False):
        for i in range(310):
            if i == 10:
                gc.collect()
                start = _rss_mb()
            y, s = op(x, w)
            if backward:
                torch.autograd.grad(s, (x, w))
            del y, s
        gc.collect()
        assert tape.live_tapes() == live
        assert _rss_mb() - start < 100, f"RSS grew by {_rss_mb() - start:.0f} MB over 300 iterations"


def test_split_reverse_reads_no_primal_array(src, compiler):
    """What the split path relies on (plugins/ABI.md): NAME_enzcc_rev finds on the tape every primal value it
    needs, so the primal arrays it is given may hold anything (the frameworks pass scratch outputs)."""
    np = pytest.importorskip("numpy")
    k = load_kernel(src, "iter", DECL, compiler=compiler)
    augfwd, rev = k.split()
    n = 1000
    x = np.linspace(-1, 1, n)
    y, s, w, nn = np.empty(n), np.empty(1), np.array([0.8]), np.array([n], dtype=np.int64)
    gx, gw, gy, gs = np.zeros(n), np.zeros(1), np.ones(n), np.array([0.5])
    P = ctypes.c_void_p * 5
    a = P(x.ctypes.data, nn.ctypes.data, w.ctypes.data, y.ctypes.data, s.ctypes.data)
    d = P(gx.ctypes.data, None, gw.ctypes.data, gy.ctypes.data, gs.ctypes.data)
    t = augfwd(a, d)
    x2, y2 = x.copy(), y.copy()
    x[:], y[:], w[:] = np.nan, np.nan, np.nan
    rev(a, d, t)
    want = torch.autograd.grad(*(lambda xt, wt: ((lambda r: r[0].sum() + 0.5 * r[1])(reference(xt, wt)),
                                                 (xt, wt)))(torch.tensor(x2, requires_grad=True),
                                                            torch.tensor(0.8, dtype=F64, requires_grad=True)))
    assert np.allclose(y2, reference(torch.tensor(x2), torch.tensor(0.8, dtype=F64))[0].numpy(), rtol=1e-14)
    assert np.allclose(gx, want[0].numpy(), rtol=1e-12, atol=1e-14) and np.isclose(gw[0], float(want[1]), rtol=1e-12)
    assert not gy.any() and gs[0] == 0  # the seeds are consumed


def test_split_library_is_shipped(op, tmp_path):
    """save_library ships the split-mode library; a directory without it gives the combined VJP (split() is
    None), never a build."""
    from enzcc_plugins import ship
    manifest = op.save_library(tmp_path / "ops", second_order=False)
    assert list((tmp_path / "ops").glob("iter-*-split.json"))
    _, k, _ = ship.load(manifest, DECL)
    assert k.split() is not None
    for f in (tmp_path / "ops").glob("iter-*-split*"):
        f.unlink()
    _, k2, _ = ship.load(manifest, DECL)
    assert k2.split() is None


def test_split_refused_keeps_the_combined_vjp(src, compiler, monkeypatch):
    """A kernel whose split-mode library enzcc cannot build: split() is None (asked once, not rebuilt on every
    forward) and the gradient comes from the combined VJP, still right."""
    from enzcc_plugins import CompiledKernel, EnzccBuildError
    asked = []

    def refuse(self):
        asked.append(1)
        raise EnzccBuildError("enzcc: split mode refused (test)")
    monkeypatch.setattr(CompiledKernel, "_split_library", refuse)
    F = enzyme(src, "iter", DECL, compiler=compiler, cflags=["-DENZCC_SPLIT_REFUSED_TEST"], op_name="iter_refused")
    x, w = data(n=500, seed=5)
    for _ in range(2):
        y, s = F(x, w)
        assert type(y.grad_fn).__name__ != "SplitPrimalBackward"
        got = torch.autograd.grad(s, (x, w))
        want = torch.autograd.grad(reference(x, w)[1], (x, w))
        for u, v in zip(got, want):
            assert torch.allclose(u, v, rtol=1e-12, atol=1e-14)
    assert len(asked) == 1


def test_split_stops_in_a_run_without_backward(op):
    """Forwards whose graphs are dropped (evaluation without no_grad) pay a reverse pass each to free their
    tapes: after SPLIT_DROPS of them in a row the op runs the plain forward, until a backward comes again."""
    import enzcc_plugins.torch as ept
    calls = counter(op)
    x, w = data(n=2000, seed=6)
    y, s = op(x, w)
    torch.autograd.grad(s, (x, w))  # (a backward: the count starts from 0)
    kinds = []
    for _ in range(ept.SPLIT_DROPS + 2):
        y, s = op(x, w)
        kinds.append(type(y.grad_fn).__name__)
        del y, s
        gc.collect()
    assert kinds == ["SplitPrimalBackward"] * ept.SPLIT_DROPS + ["PrimalBackward"] * 2
    before = calls()
    y, s = op(x, w)
    got = torch.autograd.grad(s, (x, w))  # the plain forward and the combined VJP: two runs
    assert calls() - before == 2
    want = torch.autograd.grad(reference(x, w)[1], (x, w))
    for u, v in zip(got, want):
        assert torch.allclose(u, v, rtol=1e-12, atol=1e-14)
    y, s = op(x, w)  # a backward came: tapes again
    assert type(y.grad_fn).__name__ == "SplitPrimalBackward"
    torch.autograd.grad(s, (x, w))
