"""enzcc_plugins.jax through XLA's FFI: declarations with several inputs and outputs of different shapes, const
inputs, scalars and integers; reverse (grad/vjp), forward (jvp/jacfwd), forward-over-reverse (hessian),
forward-over-forward and reverse-over-forward
derivatives checked against JAX's own derivatives of the same function written in jax.numpy and against finite
differences (float64); jit; vmap; each error of issue 15 item 4; the framework benchmark's quick mode.

Skipped when JAX is not installed (scripts/setup.sh installs it with ENZCC_WITH_FRAMEWORKS=1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from enzcc_testing import ROOT, plugins_importable

jax = pytest.importorskip("jax", reason="JAX not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh)")
jnp = jax.numpy
np = pytest.importorskip("numpy")
from jax.test_util import check_grads  # noqa: E402

plugins_importable()

from enzcc_plugins import EnzccBuildError, PrototypeError, ShapeError  # noqa: E402
from enzcc_plugins.jax import In, Int, Out, Scalar, enzyme  # noqa: E402

# a dense layer and a sum of squares: inputs of different shapes, a const weight, a scalar, three integers,
# two outputs of different shapes (the second 0-d)
LAYER = r"""
#include <math.h>
/* y = alpha * tanh(x @ w + b), s = sum(x^2) */
void layer(const REAL *x, const REAL *w, const REAL *b, REAL alpha, int n, int k, int m, REAL *y, REAL *s) {
  REAL t = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      REAL a = b[j];
      for (int l = 0; l < k; l++) a += x[i * k + l] * w[l * m + j];
      y[i * m + j] = alpha * tanh(a);
    }
  for (int i = 0; i < n * k; i++) t += x[i] * x[i];
  *s = t;
}
"""

# a free integer (a call argument), a scale that takes no gradient, an output whose shape is computed
POLY = r"""
#include <stddef.h>
/* out[i] = sum_{p<deg} c[p] * x[i]^(p+1) * scale */
void poly(const double *x, size_t n, const double *c, long deg, double scale, double *out) {
  for (size_t i = 0; i < n; i++) {
    double acc = 0, xp = x[i];
    for (long p = 0; p < deg; p++) { acc += c[p] * xp; xp *= x[i]; }
    out[i] = acc * scale;
  }
}
"""

FORTRAN = """
subroutine scale_sq(x, n, a, y) bind(c, name="scale_sq")
  use iso_c_binding
  integer(c_int), value :: n
  real(c_double), intent(in) :: x(n)
  real(c_double), value :: a
  real(c_double), intent(out) :: y(n)
  y = a * x * x
end subroutine
"""

RUST = """
#[no_mangle]
pub extern "C" fn rcube(x: *const f64, n: usize, y: *mut f64) {
    for i in 0..n {
        unsafe { let v = *x.add(i); *y.add(i) = v * v * v; }
    }
}
"""

CXX = r"""
#include <cmath>
#include <cstddef>
template <class T> static T sq(T v) { return v * v; }
extern "C" void cxx_norm(const double *x, std::size_t n, double *out) {
  double s = 0;
  for (std::size_t i = 0; i < n; i++) s += sq(std::sin(x[i]));
  out[0] = std::sqrt(s);
}
"""


def layer_decl():
    return [In("x", shape=("n", "k")), In("w", shape=("k", "m"), const=True), In("b", shape=("m",)),
            Scalar("alpha"), Int("n"), Int("k"), Int("m"), Out("y", shape=("n", "m")), Out("s", shape=())]


def layer_ref(x, w, b, alpha):
    return alpha * jnp.tanh(x @ w + b), jnp.sum(x * x)


@pytest.fixture(scope="module", autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("jax-src")
    for name, text in {"layer.c": LAYER, "poly.c": POLY, "norm.cc": CXX, "sc.f90": FORTRAN,
                       "cube.rs": RUST}.items():
        (d / name).write_text(text)
    return d


@pytest.fixture(scope="module")
def layer(src, compiler):
    return enzyme(src / "layer.c", "layer", layer_decl(), "float64", cflags=["-DREAL=double"], compiler=compiler)


@pytest.fixture(scope="module")
def data():
    r = np.random.default_rng(7)
    return (jnp.asarray(r.normal(size=(3, 4))), jnp.asarray(r.normal(size=(4, 2))), jnp.asarray(r.normal(size=2)),
            jnp.float64(0.7))


def loss(fn, w):
    """A scalar of everything the layer returns (both outputs, every input but the const weight)."""
    def L(x, b, alpha):
        y, s = fn(x, w, b, alpha)
        return jnp.sum(jnp.sin(y) * y) + 0.5 * s
    return L


def maxerr(a, b) -> float:
    return max(float(jnp.max(jnp.abs(jnp.asarray(u) - jnp.asarray(v)))) for u, v in
               zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_call_several_outputs_and_jit(layer, data):
    x, w, b, alpha = data
    y, s = layer(x, w, b, alpha)
    y_ref, s_ref = layer_ref(x, w, b, alpha)
    assert y.shape == (3, 2) and s.shape == () and y.dtype == s.dtype == jnp.float64
    assert maxerr((y, s), (y_ref, s_ref)) < 1e-14
    assert maxerr(jax.jit(layer)(x, w, b, alpha), (y, s)) == 0
    assert maxerr(layer(x=x, w=w, b=b, alpha=0.7), (y, s)) < 1e-15  # by name; a Python float scalar
    assert layer.arg_names == ("x", "w", "b", "alpha")
    # another shape: another layout (ints bound from the shapes), same library
    x2 = jnp.ones((5, 4))
    assert maxerr(layer(x2, w, b, alpha), layer_ref(x2, w, b, alpha)) < 1e-14
    # the primal is one XLA custom call of the generic handler
    hlo = jax.jit(layer).lower(x, w, b, alpha).as_text()
    assert hlo.count('custom_call @enzcc_call') == 1 and "pure_callback" not in hlo


def test_reverse_mode_against_jax_and_finite_differences(layer, data):
    x, w, b, alpha = data
    L, L_ref = loss(layer, w), loss(layer_ref, w)
    g = jax.grad(L, argnums=(0, 1, 2))(x, b, alpha)
    assert maxerr(g, jax.grad(L_ref, argnums=(0, 1, 2))(x, b, alpha)) < 1e-13
    assert maxerr(jax.jit(jax.grad(L, argnums=(0, 1, 2)))(x, b, alpha), g) < 1e-15
    assert g[2].shape == () and g[0].shape == x.shape
    # analytic, by hand: d s / d x = 2 x; d y / d alpha = tanh(x @ w + b)
    assert maxerr(jax.grad(lambda x: layer(x, w, b, alpha)[1])(x), 2 * x) < 1e-14
    assert maxerr(jax.grad(lambda a: jnp.sum(layer(x, w, b, a)[0]))(alpha), jnp.sum(jnp.tanh(x @ w + b))) < 1e-13
    # a cotangent for each output separately, through jax.vjp
    (y, s), vjp = jax.vjp(lambda x, b, a: layer(x, w, b, a), x, b, alpha)
    (_, _), vjp_ref = jax.vjp(lambda x, b, a: layer_ref(x, w, b, a), x, b, alpha)
    ct = (jnp.arange(6.0).reshape(3, 2) - 2, jnp.float64(-1.5))
    assert maxerr(vjp(ct), vjp_ref(ct)) < 1e-13
    check_grads(L, (x, b, alpha), order=1, modes=["rev"], eps=1e-6)


def test_cotangents_are_not_consumed(src, compiler):
    """The vjp entry zeroes the seeds it is given: the caller's cotangents must survive, also when one array is
    the cotangent of two outputs and is used again afterwards (XLA copies what the aliasing would clobber)."""
    (src / "two.c").write_text("#include <math.h>\nvoid two(const double *x, int n, double *a, double *b) {\n"
                               "  for (int i = 0; i < n; i++) { a[i] = sin(x[i]); b[i] = x[i] * x[i]; } }\n")
    f = enzyme(src / "two.c", "two", [In("x", shape=("n",)), Int("n"), Out("a", shape=("n",)),
                                      Out("b", shape=("n",))], compiler=compiler)
    x, c = jnp.linspace(-1, 1, 4), jnp.arange(4.0)
    want = jnp.cos(x) * c + 2 * x * c

    @jax.jit
    def g(x, c):
        return jax.vjp(f, x)[1]((c, c))[0], c * 1.0

    got, c_after = g(x, c)
    assert maxerr(got, want) < 1e-15 and maxerr(c_after, jnp.arange(4.0)) == 0
    assert maxerr(jax.vjp(f, x)[1]((c, c))[0], want) < 1e-15  # eager
    assert maxerr(c, jnp.arange(4.0)) == 0


def test_forward_mode_jvp_jacfwd(layer, data):
    x, w, b, alpha = data
    f = lambda x, b, a: layer(x, w, b, a)  # noqa: E731
    f_ref = lambda x, b, a: layer_ref(x, w, b, a)  # noqa: E731
    tx, tb, ta = jnp.cos(x), jnp.array([0.5, -1.0]), jnp.float64(0.25)
    out, tan = jax.jvp(f, (x, b, alpha), (tx, tb, ta))
    out_ref, tan_ref = jax.jvp(f_ref, (x, b, alpha), (tx, tb, ta))
    assert maxerr(out, out_ref) < 1e-14 and maxerr(tan, tan_ref) < 1e-13
    assert maxerr(jax.jit(lambda *a: jax.jvp(f, a[:3], a[3:]))(x, b, alpha, tx, tb, ta), (out, tan)) < 1e-15
    # only some inputs with tangents (the others symbolically zero)
    _, tan_x = jax.jvp(lambda x: f(x, b, alpha), (x,), (tx,))
    assert maxerr(tan_x, jax.jvp(lambda x: f_ref(x, b, alpha), (x,), (tx,))[1]) < 1e-13
    # forward and reverse Jacobians agree
    J_fwd = jax.jacfwd(lambda x: f(x, b, alpha)[0])(x)
    J_rev = jax.jacrev(lambda x: f(x, b, alpha)[0])(x)
    assert J_fwd.shape == (3, 2, 3, 4) and maxerr(J_fwd, J_rev) < 1e-13
    check_grads(loss(layer, w), (x, b, alpha), order=1, modes=["fwd"], eps=1e-6)


def test_second_order_forward_over_reverse(layer, data):
    x, w, b, alpha = data
    L, L_ref = loss(layer, w), loss(layer_ref, w)
    H = jax.hessian(L, argnums=(0, 1, 2))(x, b, alpha)
    assert maxerr(H, jax.hessian(L_ref, argnums=(0, 1, 2))(x, b, alpha)) < 1e-12
    # Hessian-vector product: jvp of grad
    v = jnp.sin(x)
    hvp = jax.jvp(jax.grad(L), (x, b, alpha), (v, jnp.zeros(2), jnp.float64(0)))[1]
    assert maxerr(hvp, jax.jvp(jax.grad(L_ref), (x, b, alpha), (v, jnp.zeros(2), jnp.float64(0)))[1]) < 1e-12
    # reverse over reverse
    HH = jax.jacrev(jax.grad(L, argnums=(0, 1, 2)), argnums=(0, 1, 2))(x, b, alpha)
    assert maxerr(HH, H) < 1e-12
    check_grads(L, (x, b, alpha), order=2, modes=["rev"], eps=1e-4, atol=1e-5, rtol=1e-5)
    # third derivatives are not available: a clear error
    with pytest.raises(NotImplementedError, match="is not available"):
        jax.jacfwd(jax.hessian(L))(x, b, alpha)


def test_second_order_forward_over_forward_and_reverse_over_forward(layer, data):
    """The JVP of the forward-mode derivative (the ``_jvp_jvp`` entry) and its transpose."""
    x, w, b, alpha = data
    L, L_ref = loss(layer, w), loss(layer_ref, w)
    # forward over forward: the Hessian from jacfwd of jacfwd (vmapped), under jit too
    H = jax.hessian(L_ref, argnums=(0, 1, 2))(x, b, alpha)
    HF = jax.jacfwd(jax.jacfwd(L, argnums=(0, 1, 2)), argnums=(0, 1, 2))(x, b, alpha)
    assert maxerr(HF, H) < 1e-12
    assert maxerr(jax.jit(jax.jacfwd(jax.jacfwd(L)))(x, b, alpha), H[0][0]) < 1e-12
    # jvp of jvp with directions for every input and for every tangent (the J u part), outputs of both kinds
    f = lambda x, b, a: layer(x, w, b, a)  # noqa: E731
    f_ref = lambda x, b, a: layer_ref(x, w, b, a)  # noqa: E731
    t = (jnp.cos(x), jnp.array([0.5, -1.0]), jnp.float64(0.25))
    s = (jnp.sin(2 * x), jnp.array([-0.3, 0.7]), jnp.float64(-1.5))
    u = (x * x, jnp.array([1.0, 2.0]), jnp.float64(0.5))

    def jvp_of(fn):
        return lambda p, tt: jax.jvp(fn, p, tt)[1]
    got = jax.jvp(jvp_of(f), ((x, b, alpha), t), (s, u))[1]
    want = jax.jvp(jvp_of(f_ref), ((x, b, alpha), t), (s, u))[1]
    assert maxerr(got, want) < 1e-12 and maxerr(got, jax.tree.map(jnp.zeros_like, want)) > 1e-3
    # reverse over forward: the gradient of a function of the tangent, with respect to the point and the tangent
    def g(fn):
        def G(p, tt):
            ty, ts = jax.jvp(fn, p, tt)[1]
            return jnp.sum(jnp.cos(ty) * ty) + jnp.sum(ts * ts)
        return G
    got = jax.grad(g(f), argnums=(0, 1))((x, b, alpha), t)
    want = jax.grad(g(f_ref), argnums=(0, 1))((x, b, alpha), t)
    assert maxerr(got, want) < 1e-12
    check_grads(lambda x: jax.jvp(lambda x: L(x, b, alpha), (x,), (t[0],))[1], (x,), order=1, modes=["rev"],
                eps=1e-5, atol=1e-6, rtol=1e-6)


def test_vmap(layer, data):
    x, w, b, alpha = data
    xs = jnp.stack([x, 2 * x, x - 1])
    alphas = jnp.array([0.5, 1.0, -2.0])
    # batched x, shared w, b, alpha
    got = jax.vmap(layer, in_axes=(0, None, None, None))(xs, w, b, alpha)
    want = jax.vmap(layer_ref, in_axes=(0, None, None, None))(xs, w, b, alpha)
    assert got[0].shape == (3, 3, 2) and got[1].shape == (3,) and maxerr(got, want) < 1e-14
    # batched along another axis, and a batched scalar
    got = jax.vmap(layer, in_axes=(2, None, None, 0))(jnp.moveaxis(xs, 0, 2), w, b, alphas)
    assert maxerr(got, jax.vmap(layer_ref, in_axes=(0, None, None, 0))(xs, w, b, alphas)) < 1e-14
    # an empty batch
    got = jax.vmap(layer, in_axes=(0, None, None, None))(xs[:0], w, b, alpha)
    assert got[0].shape == (0, 3, 2) and got[1].shape == (0,)
    # one custom call for the whole batch
    hlo = jax.jit(jax.vmap(layer, in_axes=(0, None, None, None))).lower(xs, w, b, alpha).as_text()
    assert hlo.count('custom_call @enzcc_call') == 1
    # nested vmap
    xss = jnp.stack([xs, xs * 0.5])
    got = jax.vmap(jax.vmap(layer, in_axes=(0, None, None, None)), in_axes=(0, None, None, 0))(xss, w, b, alphas[:2])
    want = jax.vmap(jax.vmap(layer_ref, in_axes=(0, None, None, None)), in_axes=(0, None, None, 0))(
        xss, w, b, alphas[:2])
    assert got[0].shape == (2, 3, 3, 2) and maxerr(got, want) < 1e-14
    # per-example gradients, and the gradient of a batched sum with respect to a shared input (summed)
    L, L_ref = loss(layer, w), loss(layer_ref, w)
    per = jax.vmap(jax.grad(L, argnums=(0, 1, 2)), in_axes=(0, None, 0))(xs, b, alphas)
    assert maxerr(per, jax.vmap(jax.grad(L_ref, argnums=(0, 1, 2)), in_axes=(0, None, 0))(xs, b, alphas)) < 1e-13
    tot = jax.grad(lambda b, a: jnp.sum(jax.vmap(L, in_axes=(0, None, None))(xs, b, a)), argnums=(0, 1))(b, alpha)
    tot_ref = jax.grad(lambda b, a: jnp.sum(jax.vmap(L_ref, in_axes=(0, None, None))(xs, b, a)),
                       argnums=(0, 1))(b, alpha)
    assert maxerr(tot, tot_ref) < 1e-12
    # batched jvp and batched Hessians
    ts = jnp.ones_like(xs)
    jv = jax.vmap(lambda x, t: jax.jvp(lambda x: layer(x, w, b, alpha), (x,), (t,))[1])(xs, ts)
    jv_ref = jax.vmap(lambda x, t: jax.jvp(lambda x: layer_ref(x, w, b, alpha), (x,), (t,))[1])(xs, ts)
    assert maxerr(jv, jv_ref) < 1e-13
    Hs = jax.vmap(jax.hessian(L), in_axes=(0, None, None))(xs, b, alpha)
    assert maxerr(Hs, jax.vmap(jax.hessian(L_ref), in_axes=(0, None, None))(xs, b, alpha)) < 1e-12


COUNTED = r"""
long runs; /* how many times an entry point of this library ran the function */
void counted(const double *x, long n, double *y) { runs++; for (long i = 0; i < n; i++) y[i] = x[i] * x[i] * x[i]; }
"""


def test_jacfwd_and_jacrev_through_vector_mode(layer, data, src, compiler):
    """jax.jacfwd and jax.jacrev (jax.vmap of the JVP or VJP over a basis, the primal inputs shared): W = 8, 4,
    2 tangents or cotangents per run of the function through the entry points' vector-mode versions (a third
    library), the rest one by one; a batched primal input keeps the item-by-item loop."""
    import ctypes
    import re

    x, w, b, alpha = data
    f = lambda x, b, a: layer(x, w, b, a)  # noqa: E731
    f_ref = lambda x, b, a: layer_ref(x, w, b, a)  # noqa: E731
    # 12 + 2 + 1 = 15 tangents: 8 + 4 + 2 in vector mode, 1 alone
    J = jax.jacfwd(f, argnums=(0, 1, 2))(x, b, alpha)
    assert maxerr(J, jax.jacfwd(f_ref, argnums=(0, 1, 2))(x, b, alpha)) < 1e-13
    hlo = jax.jit(jax.jacfwd(f, argnums=(0, 1, 2))).lower(x, b, alpha).as_text()
    assert 'ventry = "jvp"' in hlo and 'kernel = "enzcc::layer"' in hlo, hlo
    # 6 + 1 = 7 cotangents (y and s): 4 + 2 in vector mode, 1 alone
    J = jax.jacrev(f, argnums=(0, 1, 2))(x, b, alpha)
    assert maxerr(J, jax.jacrev(f_ref, argnums=(0, 1, 2))(x, b, alpha)) < 1e-13
    hlo = jax.jit(jax.jacrev(f, argnums=(0, 1, 2))).lower(x, b, alpha).as_text()
    assert 'ventry = "vjp"' in hlo, hlo
    xs, ts = jnp.stack([x, 2 * x]), jnp.ones((2,) + x.shape)
    hlo = jax.jit(jax.vmap(lambda x, t: jax.jvp(lambda x: f(x, b, alpha), (x,), (t,))[1])).lower(xs, ts).as_text()
    assert 'ventry = ""' in hlo
    # how many runs: 19 tangents are 8 + 8 + 2 (three runs in the vector library) and 1 (a run in the first,
    # besides jacfwd's run of the primal for the outputs); one run per tangent would be 19 in the first
    (src / "counted.c").write_text(COUNTED)
    g = enzyme(src / "counted.c", "counted", [In("x"), Int("n", value=lambda x: x.size),
                                             Out("y", shape=lambda x: x.shape)], compiler=compiler)
    v = jnp.linspace(0.5, 2.0, 19)
    g(v)  # (the primal: one run in the first library)
    first = ctypes.c_long.in_dll(ctypes.CDLL(str(g.kernel.library)), "runs")
    before = first.value
    Jg = jax.jacfwd(g)(v)
    vector = ctypes.c_long.in_dll(ctypes.CDLL(str(g.kernel.vector("jvp")[1])), "runs")
    assert maxerr(Jg, jnp.diag(3 * v * v)) < 1e-12
    assert (vector.value, first.value - before) == (3, 2)
    # and reverse: 19 cotangents, the same runs (jacrev's primal, then 8 + 8 + 2 and 1)
    Jg = jax.jacrev(g)(v)
    assert maxerr(Jg, jnp.diag(3 * v * v)) < 1e-12
    assert (vector.value, first.value - before) == (6, 4)


def test_hessian_through_vector_mode(layer, data, src, compiler):
    """jax.hessian of a scalar function (jax.jacfwd of jax.jacrev: a vmap over tangent directions of one
    gradient, the inputs and the seed shared): W = 8, 4, 2 directions per run of forward over reverse through
    NAME_enzcc_vjp_jvp's vector-mode versions (a fourth library), the rest one by one. Seeds that differ from
    direction to direction (the Hessian of a function with several results) keep the item-by-item loop."""
    import ctypes
    import re

    x, w, b, alpha = data
    L, L_ref = loss(layer, w), loss(layer_ref, w)
    H = jax.jit(jax.hessian(L, argnums=(0, 1, 2)))(x, b, alpha)  # 15 directions: 8 + 4 + 2, 1 alone
    assert maxerr(H, jax.hessian(L_ref, argnums=(0, 1, 2))(x, b, alpha)) < 1e-12
    hlo = jax.jit(jax.hessian(L, argnums=(0, 1, 2))).lower(x, b, alpha).as_text()
    assert 'ventry = "vjp_jvp"' in hlo, hlo
    f = lambda x: layer(x, w, b, alpha)[0]  # noqa: E731
    HJ = jax.jacfwd(jax.jacrev(f))(x)  # 6 results: each direction's seeds differ
    assert maxerr(HJ, jax.jacfwd(jax.jacrev(lambda x: layer_ref(x, w, b, alpha)[0]))(x)) < 1e-12
    hlo = jax.jit(jax.jacfwd(jax.jacrev(f))).lower(x).as_text()
    assert 'vjp_jvp-vec' not in hlo
    # how many runs: 19 directions are 8 + 8 + 2 (three runs in the fourth library) and 1 (a run in the
    # second-order library); jax.hessian's primal and gradient run in the first
    (src / "counted.c").write_text(COUNTED)
    g = enzyme(src / "counted.c", "counted", [In("x"), Int("n", value=lambda x: x.size),
                                             Out("y", shape=lambda x: x.shape)], compiler=compiler)
    v = jnp.linspace(0.5, 2.0, 19)
    Hg = jax.hessian(lambda v: jnp.sum(g(v) ** 2))(v)  # sum x^6: 30 x^4 on the diagonal
    assert maxerr(Hg, jnp.diag(30 * v ** 4)) < 1e-11
    vector = ctypes.c_long.in_dll(ctypes.CDLL(str(g.kernel.vector("vjp_jvp")[1])), "runs")
    second = ctypes.c_long.in_dll(ctypes.CDLL(str(g.kernel.second_order_library)), "runs")
    assert (vector.value, second.value) == (3, 1)

def test_const_input_and_free_integer(src, compiler):
    p = enzyme(src / "poly.c", "poly", [In("x"), Int("n", value=lambda x: x.size), In("c", const=False),
                                        Int("deg"), Scalar("scale", const=True), Out("out", shape=lambda x: x.shape)],
               compiler=compiler)
    assert p.arg_names == ("x", "c", "deg", "scale")
    x = jnp.linspace(-1, 1, 6).reshape(2, 3)
    c = jnp.array([1.0, -0.5, 0.25, 2.0])

    def ref(x, c, deg, scale):
        return scale * sum(c[q] * x ** (q + 1) for q in range(deg))

    for deg in (1, 3):
        assert maxerr(p(x, c, deg, 2.0), ref(x, c, deg, 2.0)) < 1e-14
    assert maxerr(jax.jit(p, static_argnums=2)(x, c, 3, 2.0), ref(x, c, 3, 2.0)) < 1e-14
    g = jax.grad(lambda x, c: jnp.sum(p(x, c, 3, 2.0) ** 2), argnums=(0, 1))(x, c)
    g_ref = jax.grad(lambda x, c: jnp.sum(ref(x, c, 3, 2.0) ** 2), argnums=(0, 1))(x, c)
    assert maxerr(g, g_ref) < 1e-13
    # the const scalar: a derivative flowing into it is refused, naming it; stop_gradient says it is constant
    with pytest.raises(ValueError, match="'scale' is declared const"):
        jax.grad(lambda s: jnp.sum(p(x, c, 3, s)))(2.0)
    assert jax.grad(lambda s: jnp.sum(p(x, c, 3, jax.lax.stop_gradient(s)) * s))(2.0) == pytest.approx(
        float(jnp.sum(ref(x, c, 3, 2.0))), rel=1e-13)
    # the free integer must be static under jit
    with pytest.raises(TypeError, match="'deg' is an integer parameter and must be a static Python int"):
        jax.jit(p)(x, c, 3, 2.0)


def test_fortran(src, compiler):
    """Fortran bind(c) (a value scalar, an explicit-shape array) through the same handler."""
    import shutil
    if not (shutil.which("flang-22") or shutil.which("flang")):
        pytest.skip("no flang")
    x = jnp.linspace(-1, 2, 5)
    f = enzyme(src / "sc.f90", "scale_sq", [In("x", shape=("n",)), Int("n"), Scalar("a"), Out("y", shape=("n",))],
               compiler=compiler)
    assert maxerr(f(x, 3.0), 3 * x * x) < 1e-15
    assert maxerr(jax.grad(lambda x, a: jnp.sum(f(x, a)), argnums=(0, 1))(x, 3.0), (6 * x, jnp.sum(x * x))) < 1e-14
    assert maxerr(jax.jvp(lambda a: f(x, a), (3.0,), (1.0,))[1], x * x) < 1e-15


def test_rust(src, compiler):
    """Rust extern "C" through the same handler; a 2-D input flattened by the declaration."""
    import shutil
    if not shutil.which("rustc"):
        pytest.skip("no rustc")
    m = jnp.linspace(-1, 2, 5).reshape(5, 1)
    r = enzyme(src / "cube.rs", "rcube", [In("x"), Int("n", value=lambda x: x.size),
                                          Out("y", shape=lambda x: x.shape)], compiler=compiler)
    assert r(m).shape == (5, 1) and maxerr(r(m), m ** 3) < 1e-15
    assert maxerr(jax.grad(lambda m: jnp.sum(r(m)))(m), 3 * m * m) < 1e-14


def test_float32_cxx_and_the_seed_form(src, compiler):
    f32 = enzyme(src / "layer.c", "layer", layer_decl(), "float32", cflags=["-DREAL=float"], compiler=compiler,
                 op_name="layer_float32")  # (another library than layer's: another stable name)
    r = np.random.default_rng(3)
    x, w, b = (jnp.asarray(r.normal(size=s), jnp.float32) for s in ((2, 3), (3, 4), (4,)))
    y, s = f32(x, w, b, jnp.float32(1.5))
    assert y.dtype == jnp.float32 and maxerr((y, s), layer_ref(x, w, b, 1.5)) < 1e-5
    g = jax.grad(lambda x: jnp.sum(f32(x, w, b, jnp.float32(1.5))[0]))(x)
    assert g.dtype == jnp.float32
    assert maxerr(g, jax.grad(lambda x: jnp.sum(layer_ref(x, w, b, 1.5)[0]))(x)) < 1e-5

    norm = enzyme(src / "norm.cc", "cxx_norm", [In("x"), Int("n", value=lambda x: x.size), Out("out", shape=(1,))],
                  compiler=compiler)
    v = jnp.linspace(0.1, 2, 7)
    ref = lambda v: jnp.sqrt(jnp.sum(jnp.sin(v) ** 2))  # noqa: E731
    assert norm(v)[0] == pytest.approx(float(ref(v)), rel=1e-14)
    assert maxerr(jax.grad(lambda v: norm(v)[0])(v), jax.grad(ref)(v)) < 1e-14
    assert maxerr(jax.jvp(lambda v: norm(v)[0], (v,), (jnp.ones(7),))[1], jax.jvp(ref, (v,), (jnp.ones(7),))[1]) \
        < 1e-14

    # the seed's one-array form: enzyme(source, name[, dtype]), any shape flattened, out_size
    (src / "sq.c").write_text("#include <stddef.h>\nvoid sq(const double *in, size_t n, double *out) {\n"
                              "  for (size_t i = 0; i < n; i++) out[i] = in[i] * in[i] * in[i]; }\n"
                              "void total(const double *in, int n, double *out) {\n"
                              "  out[0] = 0; for (int i = 0; i < n; i++) out[0] += in[i]; }\n")
    cube = enzyme(src / "sq.c", "sq", "double", compiler=compiler)
    m = jnp.arange(6.0).reshape(2, 3)
    assert cube(m).shape == (2, 3) and maxerr(cube(m), m ** 3) == 0
    assert maxerr(jax.grad(lambda m: jnp.sum(cube(m)))(m), 3 * m ** 2) < 1e-14
    assert maxerr(jax.jvp(cube, (m,), (jnp.ones_like(m),))[1], 3 * m ** 2) < 1e-14
    total = enzyme(src / "sq.c", "total", out_size=1, compiler=compiler)
    assert total(m).shape == (1,) and float(total(m)[0]) == 15.0
    assert cube(jnp.zeros((0,))).shape == (0,)  # nothing to compute: no call


def test_errors(layer, data, src, compiler, tmp_path):
    x, w, b, alpha = data
    with pytest.raises(TypeError, match=r"argument 'x' has dtype float32.*takes double"):
        layer(x.astype(jnp.float32), w, b, alpha)
    with pytest.raises(TypeError, match="argument 'b' has dtype int"):
        layer(x, w, jnp.array([1, 2]), alpha)
    with pytest.raises(ShapeError, match="'w'"):
        layer(x, jnp.ones((5, 2)), b, alpha)  # k disagrees with x
    with pytest.raises(ShapeError, match="'x'"):
        layer(jnp.ones(12), w, b, alpha)  # wrong rank
    with pytest.raises(ValueError, match="'alpha' is a scalar"):
        layer(x, w, b, jnp.ones(2))
    y1, _ = layer(x, w, b, jnp.full((1,), alpha))  # a size-1 scalar is taken, as in PyTorch and TensorFlow
    assert jnp.allclose(y1, layer(x, w, b, alpha)[0], rtol=1e-15)
    ga = jax.grad(lambda a: layer(x, w, b, a)[0].sum())(jnp.full((1,), alpha))
    assert ga.shape == (1,) and jnp.allclose(ga[0], jax.grad(lambda a: layer(x, w, b, a)[0].sum())(alpha))
    with pytest.raises(TypeError, match="'b'"):
        layer(x, w, "nope", alpha)
    with pytest.raises(TypeError, match="missing|'alpha'"):
        layer(x, w, b)
    with jax.enable_x64(False):
        with pytest.raises(TypeError, match="'x' is double.*jax_enable_x64"):
            layer(np.ones((3, 4), np.float32), w, b, alpha)
    # the const weight takes no gradient: asking for one is an error naming it, not zeros
    with pytest.raises(ValueError, match="'w' is declared const"):
        jax.grad(lambda w: jnp.sum(layer(x, w, b, alpha)[0]))(w)
    # placed on another platform (lowering for CUDA needs no GPU): one clear error
    with pytest.raises(ValueError, match="runs on the CPU only"):
        jax.jit(layer).trace(x, w, b, alpha).lower(lowering_platforms=("cuda",))
    gpus = [d for d in jax.devices() if d.platform != "cpu"] if jax.default_backend() != "cpu" else []
    if gpus:
        with pytest.raises(ValueError, match="argument 'x' is on"):
            layer(jax.device_put(x, gpus[0]), w, b, alpha)
    # the handler finds entry points by the kernel's stable name, registered when the library is loaded: a name
    # not loaded in this process (a jax.export from another one) is an error naming it, never a stale address
    call = jax.ffi.ffi_call("enzcc_call", jax.ShapeDtypeStruct((1,), jnp.float64))
    attrs = dict(arrays=np.int64(1), slot_kind=np.zeros(9, np.int64), slot_index=np.zeros(9, np.int64),
                 ints=np.zeros(9, np.int64), zero=np.zeros(0, np.int64), batch=np.int64(1),
                 batched=np.zeros(1, np.int64), scratch=np.zeros(0, np.int64), ventry="")
    for kernel, entry in [("enzcc::nothing", "primal"), ("enzcc::layer", "no_such_entry")]:
        with pytest.raises(Exception, match=f"enzcc op {kernel} \\(entry point {entry}\\) is not loaded"):
            call(jnp.ones(1), kernel=kernel, entry=entry, **attrs).block_until_ready()
    # vector-mode versions are looked up the same way
    vattrs = {**attrs, "arrays": np.int64(2), "slot_kind": np.zeros(18, np.int64),
              "slot_index": np.zeros(18, np.int64), "ventry": "nope"}
    with pytest.raises(Exception, match=r"entry point nope_v2\) is not loaded"):
        call(jnp.ones(1), kernel="enzcc::layer", entry="jvp", **vattrs).block_until_ready()
    # a source that does not compile; a declaration that does not match the prototype
    bad = tmp_path / "bad.c"
    bad.write_text("void broken(const double *x, int n, double *y) { y[0] = x[0] +; }\n")
    with pytest.raises(EnzccBuildError, match="error"):
        enzyme(bad, "broken", [In("x"), Int("n", value=lambda x: x.size), Out("y", shape=(1,))], compiler=compiler)
    with pytest.raises(PrototypeError, match="alpha"):
        enzyme(src / "layer.c", "layer", [p if p.name != "alpha" else In("alpha") for p in layer_decl()],
               "float64", cflags=["-DREAL=double"], compiler=compiler)
    with pytest.raises(TypeError, match="out_size is for the one-array form"):
        enzyme(src / "layer.c", "layer", layer_decl(), out_size=3, compiler=compiler)


def test_handler_is_cached(tmp_path):
    """The handler library is compiled once per jaxlib and source into the plugin cache, by atomic rename."""
    env = dict(os.environ, ENZCC_PLUGINS_CACHE=str(tmp_path / "cache"))
    code = ("import enzcc_plugins.jax as j; p = j.handler_library(); j.register_handler(); "
            "print(p, p.stat().st_mtime_ns)")
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout == runs[1].stdout  # the second process reused the first one's build
    path = runs[0].stdout.split()[0]
    assert path.startswith(str(tmp_path / "cache" / "jax-ffi")) and f"jaxlib{jax.__version__}" in path
    assert not [p for p in (tmp_path / "cache" / "jax-ffi").iterdir() if p.name.startswith(".build")]


def test_framework_benchmark_quick(tmp_path):
    """bench.frameworks --quick (JAX only): every row measured (the vmap rows too, with the kernel alone over the
    batch's elements), the enzcc and native results checked."""
    out = tmp_path / "frameworks.json"
    proc = subprocess.run([sys.executable, "-m", "bench.frameworks", "--quick", "--only", "jax", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["mode"] == "quick" and "jax" not in result["skipped"]
    rows = result["rows"]
    assert [(r["op"], r["n"]) for r in rows] == [("floor", 16), ("call", 16), ("grad", 16), ("call", 1 << 16),
                                                ("grad", 1 << 16), ("jacfwd", 128), ("jacrev", 128),
                                                ("vmap x16", 256), ("vmap grad x16", 256), ("vmap x1024", 256),
                                                ("vmap grad x1024", 256)]
    for r in rows:
        assert r["enzcc"] > 0 and r["enzcc_cpu"] > 0
        assert (r["native"] is None) == (r["op"] == "floor")
        assert (r["kernel"] is None) == (r["op"] in ("floor", "jacfwd", "jacrev"))
        assert (r["enzyme_jax"] is None) == ("enzyme_jax" in result["skipped"] or
                                             r["op"] not in ("floor", "call", "grad"))
    if "enzyme_jax" not in result["skipped"]:
        assert "jax_large_gradient_within_1.2x" in result["goals"]
    assert "enzcc/EJ" in proc.stdout
