"""The TensorFlow integration (enzcc_plugins.tensorflow): the EnzccCall custom op and its derivative rules.

Skipped when TensorFlow is not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh installs tensorflow-cpu).
Derivatives are checked in float64 against analytic values and central finite differences. The op library
and the kernels are built with this checkout's enzcc into the normal plugin cache, so a second run only loads
them.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from enzcc_testing import plugins_importable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow", reason="TensorFlow not installed (ENZCC_WITH_FRAMEWORKS=1 scripts/setup.sh)")
np = pytest.importorskip("numpy")

plugins_importable()

from enzcc_plugins import (EnzccBuildError, In, Int, Out, PrototypeError, Scalar, SecondOrderError,  # noqa: E402
                           ShapeError)
import enzcc_plugins.tensorflow as etf  # noqa: E402
from enzcc_plugins.tensorflow import EnzccOp, enzyme  # noqa: E402

# --- sources ---------------------------------------------------------------------------------------------------

# y[i] = alpha * tanh(sum_j A[i,j] x[j])   (m),   r = sum_j w[j] x[j]^3   (0-d);   w takes no gradient
MV = r"""
#include <math.h>
#ifndef REAL
#define REAL double
#endif
void mv(const REAL *A, const REAL *x, const REAL *w, REAL alpha, int m, long n, REAL *y, REAL *r) {
  REAL acc = 0;
  for (int i = 0; i < m; i++) {
    REAL s = 0;
    for (long j = 0; j < n; j++) s += A[i * n + j] * x[j];
    y[i] = alpha * tanh(s);
  }
  for (long j = 0; j < n; j++) acc += w[j] * x[j] * x[j] * x[j];
  *r = acc;
}
"""

# the seed's signature: out[i] = in[i]^2 sin(in[i])
SEED = r"""
#include <math.h>
#include <stddef.h>
void sq(const double *in, size_t n, double *out) {
  for (size_t i = 0; i < n; i++) out[i] = in[i] * in[i] * sin(in[i]);
}
void sqf(const float *in, size_t n, float *out) {
  for (size_t i = 0; i < n; i++) out[i] = in[i] * in[i] * sinf(in[i]);
}
"""

# a free integer argument: y = k * x^2
SCALE = r"""
void scale(const double *x, int n, int k, double *y) {
  for (int i = 0; i < n; i++) y[i] = k * x[i] * x[i];
}
"""

# C++ (extern "C"), with a template inside: y = exp(x) * c
CXX = r"""
#include <cmath>
#include <cstddef>
template <class T> static T body(T x, T c) { return std::exp(x) * c; }
extern "C" void expc(const double *x, double c, std::size_t n, double *y) {
  for (std::size_t i = 0; i < n; i++) y[i] = body(x[i], c);
}
"""

# Fortran bind(c): an explicit-shape array and a value scalar, y = a * x^2
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

# Rust extern "C": y = x^3
RUST = """
#[no_mangle]
pub extern "C" fn rcube(x: *const f64, n: usize, y: *mut f64) {
    for i in 0..n {
        unsafe { let v = *x.add(i); *y.add(i) = v * v * v; }
    }
}
"""


def mv_params():
    return [In("A", shape=("m", "n")), In("x", shape=("n",)), In("w", shape=("n",), const=True), Scalar("alpha"),
            Int("m"), Int("n"), Out("y", shape=("m",)), Out("r", shape=())]


@pytest.fixture(scope="session")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("tf-src")
    for name, text in {"mv.c": MV, "seed.c": SEED, "scale.c": SCALE, "expc.cc": CXX, "sc.f90": FORTRAN,
                       "cube.rs": RUST}.items():
        (d / name).write_text(text)
    return d


@pytest.fixture(scope="session")
def mv(compiler, src) -> EnzccOp:
    return enzyme(src / "mv.c", "mv", mv_params(), compiler=compiler)


@pytest.fixture(scope="session")
def mvf(compiler, src) -> EnzccOp:
    return enzyme(src / "mv.c", "mv", mv_params(), dtype="float32", cflags=["-DREAL=float"], compiler=compiler,
                  op_name="mv_float32")  # (another library than mv's: another stable name)


# --- references ----------------------------------------------------------------------------------------------


def mv_ref(A, x, w, alpha):
    return alpha * np.tanh(A @ x), np.sum(w * x ** 3)


def mv_loss_ref(A, x, w, alpha, cy, cr):
    y, r = mv_ref(A, x, w, alpha)
    return float(np.sum(cy * y) + cr * r)


def mv_grad_ref(A, x, w, alpha, cy, cr):
    """Analytic gradient of sum(cy * y) + cr * r with respect to A, x and alpha."""
    s = A @ x
    t = np.tanh(s)
    ds = cy * alpha * (1 - t ** 2)
    return np.outer(ds, x), A.T @ ds + cr * 3 * w * x ** 2, float(np.sum(cy * t))


def fd(fun, x, eps=1e-6):
    """Central finite differences of a scalar function of one array."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (fun(x + e) - fun(x - e)) / (2 * eps)
    return g


def data(m=3, n=4, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(m, n)) * 0.5, rng.normal(size=n), rng.uniform(0.5, 1.5, size=n), 1.3,
            rng.normal(size=m), 0.7)


def assert_close(a, b, rtol=1e-9, atol=1e-11):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# --- the seed call -------------------------------------------------------------------------------------------


def test_seed_call_from_the_issue(compiler, src):
    """enzyme(inp, filename=..., function=...) as a TensorFlow op: value and gradient, float64 and float32."""
    for fn, dtype, tol in (("sq", tf.float64, 1e-12), ("sqf", tf.float32, 1e-5)):
        x = tf.constant([[0.5, -1.25], [2.0, 0.1]], dtype)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = enzyme(x, filename=str(src / "seed.c"), function=fn, compiler=compiler)
        assert y.shape == x.shape and y.dtype == dtype
        xn = x.numpy().astype(np.float64)
        assert_close(y, xn ** 2 * np.sin(xn), rtol=tol, atol=tol)
        g = tape.gradient(y, x)
        assert_close(g, 2 * xn * np.sin(xn) + xn ** 2 * np.cos(xn), rtol=tol, atol=tol)


def test_seed_call_type_mismatch_is_a_load_error(compiler, src):
    x = tf.constant([1.0, 2.0], tf.float32)
    with pytest.raises(PrototypeError, match="float"):
        enzyme(x, filename=str(src / "seed.c"), function="sq", compiler=compiler)  # sq takes double


# --- several inputs and outputs -------------------------------------------------------------------------------


def test_values_of_several_outputs(mv):
    A, x, w, alpha, _, _ = data()
    y, r = mv(A, x, w, alpha)  # NumPy arrays and a Python float are accepted
    assert y.shape == (3,) and r.shape == () and y.dtype == tf.float64
    ry, rr = mv_ref(A, x, w, alpha)
    assert_close(y, ry)
    assert_close(r, rr)
    y2, r2 = mv(x=tf.constant(x), A=tf.constant(A), w=w, alpha=tf.constant(alpha, tf.float64))  # by name
    assert_close(y2, ry)
    assert_close(r2, rr)


def test_gradient_tape_eager_analytic_and_finite_differences(mv):
    A, x, w, alpha, cy, cr = data()
    tA, tx, tw, ta = (tf.constant(v, tf.float64) for v in (A, x, w, alpha))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([tA, tx, ta])
        y, r = mv(tA, tx, tw, ta)
        loss = tf.reduce_sum(y * cy) + cr * r
    gA, gx, ga = tape.gradient(loss, [tA, tx, ta])
    eA, ex, ea = mv_grad_ref(A, x, w, alpha, cy, cr)
    assert_close(gA, eA)
    assert_close(gx, ex)
    assert_close(ga, ea)
    assert_close(gA, fd(lambda v: mv_loss_ref(v, x, w, alpha, cy, cr), A), rtol=1e-6, atol=1e-8)
    assert_close(gx, fd(lambda v: mv_loss_ref(A, v, w, alpha, cy, cr), x), rtol=1e-6, atol=1e-8)
    assert_close(ga, fd(lambda v: mv_loss_ref(A, x, w, float(v), cy, cr), alpha), rtol=1e-6, atol=1e-8)
    # one output only: the other's cotangent is zero
    assert_close(tape.gradient(r, tx), 3 * w * x ** 2)


def test_a_gradient_into_a_const_input_is_an_error(mv):
    """w is const: watched directly, or computed from a watched tensor, its gradient would be left out."""
    A, x, w, alpha, _, _ = data()
    tA, tx, tw, ta = (tf.constant(v, tf.float64) for v in (A, x, w, alpha))
    for watch_w in (True, False):
        with tf.GradientTape() as tape:
            tape.watch([tx, tw] if watch_w else [tx])
            w2 = tw if watch_w else tw + 0 * tx  # depends on x when not watched itself
            y, r = mv(tA, tx, w2, ta)
            loss = tf.reduce_sum(y) + r
        with pytest.raises(ValueError, match="'w', which is declared const=True"):
            tape.gradient(loss, [tx, tw] if watch_w else [tx])
    with tf.GradientTape() as tape:  # w stopped: fine
        tape.watch(tx)
        y, r = mv(tA, tx, tf.stop_gradient(0 * tx + tw), ta)
        loss = tf.reduce_sum(y) + r
    assert tape.gradient(loss, tx) is not None


def test_tf_function_gradient_and_retrace(mv):
    @tf.function
    def step(A, x, w, alpha, cy, cr):
        with tf.GradientTape() as tape:
            tape.watch([A, x, alpha])
            y, r = mv(A, x, w, alpha)
            loss = tf.reduce_sum(y * cy) + cr * r
        return (loss, *tape.gradient(loss, [A, x, alpha]))

    for m, n in ((3, 4), (5, 2)):  # a new shape retraces with a new op
        A, x, w, alpha, cy, cr = data(m, n, seed=m)
        loss, gA, gx, ga = step(*(tf.constant(v, tf.float64) for v in (A, x, w, alpha, cy, cr)))
        assert_close(loss, mv_loss_ref(A, x, w, alpha, cy, cr))
        for got, want in zip((gA, gx, ga), mv_grad_ref(A, x, w, alpha, cy, cr)):
            assert_close(got, want)


def test_jacobian_and_vectorized_map(mv):
    """tape.jacobian (pfor falls back to a loop over the op) and tf.vectorized_map."""
    A, x, w, alpha, _, _ = data()
    tx = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(tx)
        y, _ = mv(A, tx, w, alpha)
    J = tape.jacobian(y, tx)
    assert_close(J, (alpha * (1 - np.tanh(A @ x) ** 2))[:, None] * A)
    xs = np.stack([x, 2 * x, -x])
    ys = tf.vectorized_map(lambda r: mv(A, r, w, alpha)[0], tf.constant(xs))
    assert_close(ys, np.stack([mv_ref(A, r, w, alpha)[0] for r in xs]))


def test_variables_train(mv):
    """tf.Variable inputs: gradients reach the variables; a few steps of gradient descent reduce the loss."""
    A, x, w, _, _, _ = data()
    target = tf.constant([0.3, -0.2, 0.5], tf.float64)
    vA, valpha = tf.Variable(A), tf.Variable(1.0, dtype=tf.float64)
    opt_losses = []
    for _ in range(30):
        with tf.GradientTape() as tape:
            y, _ = mv(vA, x, w, valpha)
            loss = tf.reduce_sum((y - target) ** 2)
        gA, ga = tape.gradient(loss, [vA, valpha])
        vA.assign_sub(0.2 * gA)
        valpha.assign_sub(0.2 * ga)
        opt_losses.append(float(loss))
    assert opt_losses[-1] < 0.05 * opt_losses[0]


def test_float32(mvf):
    A, x, w, alpha, cy, cr = data()
    t = [tf.constant(v, tf.float32) for v in (A, x, w, alpha)]
    with tf.GradientTape() as tape:
        tape.watch(t)
        y, r = mvf(*t)
        loss = tf.reduce_sum(y * cy.astype(np.float32)) + np.float32(cr) * r
    assert y.dtype == tf.float32
    grads = tape.gradient(loss, [t[0], t[1], t[3]])
    for got, want in zip(grads, mv_grad_ref(A, x, w, alpha, cy, cr)):
        assert_close(got, want, rtol=2e-5, atol=2e-6)


def test_cpp_source(compiler, src):
    op = enzyme(src / "expc.cc", "expc", [In("x"), Scalar("c"), Int("n", lambda x: x.size),
                                          Out("y", shape=lambda x: x.shape)], compiler=compiler)
    x, c = tf.constant([[0.1, -0.4, 1.2]], tf.float64), tf.constant(0.75, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch([x, c])
        y = op(x, c)
    assert y.shape == (1, 3)
    gx, gc = tape.gradient(y, [x, c])
    assert_close(y, np.exp(x.numpy()) * 0.75)
    assert_close(gx, np.exp(x.numpy()) * 0.75)
    assert_close(gc, np.exp(x.numpy()).sum())


def test_fortran_source(compiler, src):
    if not (shutil.which("flang-22") or shutil.which("flang")):
        pytest.skip("no flang-22/flang: Fortran sources cannot be compiled here")
    op = enzyme(src / "sc.f90", "scale_sq", [In("x", shape=("n",)), Int("n"), Scalar("a"), Out("y", shape=("n",))],
                compiler=compiler)
    x, a = tf.constant(np.linspace(-1, 2, 5)), tf.constant(3.0, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch([x, a])
        y = op(x, a)
    gx, ga = tape.gradient(y, [x, a])
    assert_close(y, 3 * x.numpy() ** 2)
    assert_close(gx, 6 * x.numpy())
    assert_close(ga, np.sum(x.numpy() ** 2))
    with tf.autodiff.ForwardAccumulator(a, tf.constant(1.0, tf.float64)) as acc:
        y = op(x, a)
    assert_close(acc.jvp(y), x.numpy() ** 2)


def test_rust_source(compiler, src):
    if not shutil.which("rustc"):
        pytest.skip("no rustc: Rust sources cannot be compiled here")
    op = enzyme(src / "cube.rs", "rcube", [In("x"), Int("n", lambda x: x.size), Out("y", shape=lambda x: x.shape)],
                compiler=compiler)
    m = tf.constant(np.linspace(-1, 2, 6).reshape(3, 2))
    with tf.GradientTape() as tape:
        tape.watch(m)
        y = op(m)
    assert y.shape == (3, 2)
    assert_close(y, m.numpy() ** 3)
    assert_close(tape.gradient(y, m), 3 * m.numpy() ** 2)


# --- forward mode and second order -----------------------------------------------------------------------------


def test_forward_accumulator_jvp(mv):
    A, x, w, alpha, _, _ = data()
    rng = np.random.default_rng(7)
    dA, dx, da = rng.normal(size=A.shape), rng.normal(size=x.shape), 0.4
    primals = [tf.constant(v, tf.float64) for v in (A, x, alpha)]
    tangents = [tf.constant(v, tf.float64) for v in (dA, dx, da)]

    def outputs(h):
        y, r = mv_ref(A + h * dA, x + h * dx, w, alpha + h * da)
        return np.concatenate([y, [r]])

    want = (outputs(1e-6) - outputs(-1e-6)) / 2e-6

    def run():
        with tf.autodiff.ForwardAccumulator(primals, tangents) as acc:
            y, r = mv(primals[0], primals[1], w, primals[2])
        return acc.jvp(y), acc.jvp(r)

    for fn in (run, tf.function(run)):
        jy, jr = fn()
        assert_close(np.concatenate([jy.numpy(), [jr.numpy()]]), want, rtol=1e-6, atol=1e-8)


def test_forward_mode_refuses_a_tangent_on_a_const_input(mv):
    A, x, w, alpha, _, _ = data()
    tw = tf.constant(w)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"argument \\?'w\\?' is declared const"):
        with tf.autodiff.ForwardAccumulator(tw, tf.ones_like(tw)) as acc:
            y, _ = mv(A, x, tw, alpha)
        acc.jvp(y)


def second_order(fn):
    """Skips (with enzcc's reason) where the forward-over-reverse entry point cannot be built."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except SecondOrderError as e:  # enzcc cannot build the forward-over-reverse entry point here
            pytest.skip(f"no second-order entry point: {str(e).splitlines()[0]}")
    return wrapper


@second_order
def test_hessian_vector_products_three_ways(mv):
    """Forward over reverse, reverse over reverse and reverse over forward agree with finite differences of
    the gradient."""
    A, x, w, alpha, cy, cr = data()
    tA, tx = tf.constant(A), tf.constant(x)
    v = tf.constant(np.random.default_rng(3).normal(size=x.shape))

    def loss(x):
        y, r = mv(tA, x, w, alpha)
        return tf.reduce_sum(y * cy) + cr * r * r  # r*r: the seed of r depends on x

    def grad_np(xv):
        xt = tf.constant(xv)
        with tf.GradientTape() as t:
            t.watch(xt)
            lv = loss(xt)
        return t.gradient(lv, xt).numpy()

    want = (grad_np(x + 1e-5 * v.numpy()) - grad_np(x - 1e-5 * v.numpy())) / 2e-5

    with tf.autodiff.ForwardAccumulator(tx, v) as acc:  # forward over reverse
        with tf.GradientTape() as t:
            t.watch(tx)
            lv = loss(tx)
        g = t.gradient(lv, tx)
    assert_close(acc.jvp(g), want, rtol=1e-6, atol=1e-8)

    with tf.GradientTape() as t2:  # reverse over reverse
        t2.watch(tx)
        with tf.GradientTape() as t1:
            t1.watch(tx)
            lv = loss(tx)
        gv = tf.reduce_sum(t1.gradient(lv, tx) * v)
    assert_close(t2.gradient(gv, tx), want, rtol=1e-6, atol=1e-8)

    with tf.GradientTape() as t2:  # reverse over forward
        t2.watch(tx)
        with tf.autodiff.ForwardAccumulator(tx, v) as acc:
            lv = loss(tx)
        jv = acc.jvp(lv)
    assert_close(t2.gradient(jv, tx), want, rtol=1e-6, atol=1e-8)


@second_order
def test_second_order_inside_tf_function_and_for_a_scalar(mv):
    A, x, w, alpha, cy, cr = data()

    @tf.function
    def d2_alpha(a):
        with tf.GradientTape() as t2:
            t2.watch(a)
            with tf.GradientTape() as t1:
                t1.watch(a)
                y, r = mv(A, x, w, a)
                lv = tf.reduce_sum(y * cy) * a  # d/da = sum(cy t) a + sum(cy y) -> d2/da2 = 2 sum(cy t)
            g = t1.gradient(lv, a)
        return t2.gradient(g, a)

    assert_close(d2_alpha(tf.constant(alpha, tf.float64)), 2 * np.sum(cy * np.tanh(A @ x)))


@second_order
def test_third_order_and_forward_over_forward_are_clear_errors(compiler, src):
    sq = enzyme(src / "seed.c", "sq", compiler=compiler)
    x = tf.constant([0.3, 0.5], tf.float64)
    with tf.GradientTape() as t3:
        t3.watch(x)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = sq(x)
            g = t1.gradient(y, x)
        h = t2.gradient(g, x)  # the second derivative works
    xn = x.numpy()
    assert_close(h, 2 * np.sin(xn) + 4 * xn * np.cos(xn) - xn ** 2 * np.sin(xn))
    with pytest.raises(NotImplementedError, match="third derivative, or forward over forward"):
        t3.gradient(h, x)
    with pytest.raises(NotImplementedError, match="third derivative, or forward over forward"):
        with tf.autodiff.ForwardAccumulator(x, tf.ones_like(x)) as a2:
            with tf.autodiff.ForwardAccumulator(x, tf.ones_like(x)) as a1:
                y = sq(x)
            j = a1.jvp(y)
        a2.jvp(j)


# --- errors ----------------------------------------------------------------------------------------------------


def test_errors_name_the_argument(mv, compiler, src):
    A, x, w, alpha, _, _ = data()
    with pytest.raises(TypeError, match=r"argument 'x' has dtype float32.*double"):
        mv(A, tf.constant(x, tf.float32), w, alpha)
    with pytest.raises(TypeError, match=r"argument 'A' has dtype float32"):
        mv(A.astype(np.float32), x, w, alpha)
    with pytest.raises(ShapeError, match=r"'x'"):
        mv(A, x[:3], w, alpha)
    with pytest.raises(ShapeError, match=r"'w'"):
        mv(A, x, w[:2], alpha)
    with pytest.raises(ShapeError, match=r"'A'.*rank 2"):
        mv(A.reshape(-1), x, w, alpha)
    with pytest.raises((ValueError, ShapeError), match=r"'alpha'.*scalar"):
        mv(A, x, w, [1.0, 2.0])
    with pytest.raises(TypeError, match=r"argument 'x' cannot be converted"):
        mv(A, "text", w, alpha)
    with pytest.raises(TypeError, match=r"missing argument 'alpha'"):
        mv(A, x, w)

    sig = [tf.TensorSpec([3, None], tf.float64), tf.TensorSpec([4], tf.float64)]

    @tf.function(input_signature=sig)
    def unknown(A, x):
        return mv(A, x, w, alpha)[0]

    with pytest.raises(ValueError, match=r"argument 'A' has shape \(3, None\).*static shapes"):
        unknown(tf.constant(A), tf.constant(x))

    scale = enzyme(src / "scale.c", "scale", [In("x", shape=("n",)), Int("n"), Int("k"), Out("y", shape=("n",))],
                   compiler=compiler)
    assert_close(scale(tf.constant([1.0, 2.0], tf.float64), 3), [3.0, 12.0])
    with pytest.raises(TypeError, match=r"argument 'k' is an integer parameter"):
        scale(tf.constant([1.0, 2.0], tf.float64), tf.constant(3))


def test_build_errors(compiler, tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("void f(const double *in, unsigned long n, double *out) { out[0] = in[0] +; }\n")
    with pytest.raises(EnzccBuildError, match=r"bad\.c:1.*error"):
        enzyme(tf.constant([1.0], tf.float64), filename=str(bad), function="f", compiler=compiler)
    good = tmp_path / "good.c"
    good.write_text("void g(const double *x, double s, int n, double *y) { for (int i = 0; i < n; i++) "
                    "y[i] = s * x[i]; }\n")
    with pytest.raises(PrototypeError, match=r"'s'"):  # s is a double, declared as an array
        enzyme(good, "g", [In("x"), In("s"), Int("n"), Out("y", shape=(1,))], compiler=compiler)
    with pytest.raises(FileNotFoundError, match="missing.c"):
        enzyme(tf.constant([1.0]), filename=str(tmp_path / "missing.c"), function="f", compiler=compiler)


def test_gpu_tensor_is_an_error(mv):
    gpus = tf.config.list_logical_devices("GPU")
    if not gpus:
        pytest.skip("no GPU visible to TensorFlow (tensorflow-cpu): the check cannot be exercised here")
    A, x, w, alpha, _, _ = data()
    with tf.device(gpus[0].name):
        gx = tf.identity(tf.constant(x))
    with pytest.raises(RuntimeError, match=r"argument 'x' is on .*GPU.*CPU only"):
        mv(A, gx, w, alpha)


def test_the_native_op_checks_its_inputs(mv):
    """The C++ op itself refuses what the Python checks would have caught: an input of another shape than the
    op was made for, a kernel or entry point not loaded in this process, a malformed spec; an error each, no
    crash."""
    A, x, w, alpha, _, _ = data()
    mv(A, x, w, alpha)
    variant = next(iter(mv._variants.values()))
    op_in, attrs = variant.attrs("primal")
    ins = [tf.constant(A), tf.constant(x), tf.constant(w), tf.constant(alpha, tf.float64)]
    call = etf._ops().enzcc_call
    ys = call(ins, **attrs)
    assert_close(ys[0], mv_ref(A, x, w, alpha)[0])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"argument 'x' has shape \[3\].*made for shape \[4\]"):
        call([ins[0], tf.constant(x[:3]), ins[2], ins[3]], **attrs)
    fields = attrs["spec"].split()
    assert fields[:3] == ["enzcc2", "enzcc::mv", "primal"], fields[:3]
    unknown = dict(attrs, spec=" ".join([fields[0], "other::mv"] + fields[2:]))
    with pytest.raises(tf.errors.FailedPreconditionError, match=r"enzcc op other::mv \(entry point primal\) is "
                                                               r"not loaded in this process.*load_library"):
        call(ins, **unknown)
    no_entry = dict(attrs, spec=" ".join(fields[:2] + ["no_such_entry"] + fields[3:]))
    with pytest.raises(tf.errors.FailedPreconditionError, match="is not loaded"):
        call(ins, **no_entry)
    with pytest.raises(tf.errors.InvalidArgumentError, match="malformed spec"):
        call(ins, **dict(attrs, spec=" ".join(fields[:-1])))
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad layout entry"):
        layout_at = 7 + sum(2 + len(s) for _, _, s in op_in) + 1 + sum(1 + len(s) for s in ([3], [])) + 1
        bad = list(fields)
        bad[layout_at + 1] = "9"  # the first entry's input index out of range
        call(ins, **dict(attrs, spec=" ".join(bad)))


def test_op_library_is_built_once_into_the_cache(tmp_path):
    """Two processes that need the op library at the same time: one builds it (under a lock, renamed into
    place), the other waits and loads the same file; a third finds it and builds nothing."""
    env = dict(os.environ, ENZCC_PLUGINS_CACHE=str(tmp_path / "cache"), TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([str(p) for p in sys.path if p]))
    code = ("import time, enzcc_plugins.tensorflow as e; t = time.time(); p = e.op_library(); e._ops(); "
            "print(p, round(time.time() - t, 3))")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    paths = {o.split()[0] for o, _ in outs}
    assert len(paths) == 1
    files = sorted(f.name for f in (tmp_path / "cache").iterdir())
    assert files == [Path(paths.pop()).name], files  # no temporary directory or lock left behind
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert float(again.stdout.split()[1]) < 5  # loaded, not compiled


def test_vectorized_map_is_one_batched_op(mv):
    """tf.vectorized_map of the op is one EnzccCall over the batch (its pfor rule; no while loop), the items
    that vary stacked and the others shared: values = single calls exactly; per-example gradients inside the
    map and the gradient through the map from outside (summed for shared inputs) = the analytic ones; forward
    mode over the batched op is a clear error."""
    A, x, w, alpha, cy, cr = data()
    xs = np.stack([x, 2 * x, -x, 0.5 * x])
    As = np.stack([A, 2 * A, -A, A + 1])
    single = [mv(As[i], xs[i], w, alpha) for i in range(4)]
    run = tf.function(lambda As, xs: tf.vectorized_map(lambda a: mv(a[0], a[1], w, alpha), (As, xs)),
                      autograph=False)
    ys, rs = run(tf.constant(As), tf.constant(xs))
    np.testing.assert_array_equal(ys.numpy(), np.stack([y.numpy() for y, _ in single]))
    np.testing.assert_array_equal(rs.numpy(), np.stack([r.numpy() for _, r in single]))
    graph = run.get_concrete_function(tf.constant(As), tf.constant(xs)).graph.as_graph_def()
    ops = [n.op for n in graph.node] + [n.op for f in graph.library.function for n in f.node_def]
    assert not [o for o in ops if "While" in o]
    keys = [n.attr["key"].s.decode() for n in graph.node if n.op == "EnzccCall"]
    assert any(k.endswith("|primal|4:1100") for k in keys), keys  # A, x batched; w, alpha shared

    def per_example(a, r):
        with tf.GradientTape() as t:
            t.watch([a, r])
            y, s = mv(a, r, w, alpha)
            loss = tf.reduce_sum(y * cy) + cr * s
        return t.gradient(loss, [a, r])
    gA, gx = tf.vectorized_map(lambda p: per_example(p[0], p[1]), (tf.constant(As), tf.constant(xs)))
    for i in range(4):
        wA, wx, _ = mv_grad_ref(As[i], xs[i], w, alpha, cy, cr)
        assert_close(gA[i], wA)
        assert_close(gx[i], wx)

    tA, txs, ta = tf.constant(A), tf.constant(xs), tf.constant(alpha, tf.float64)
    with tf.GradientTape() as t:  # A and alpha shared by the items: their gradients are sums
        t.watch([tA, txs, ta])
        ys, rs = tf.vectorized_map(lambda r: mv(tA, r, w, ta), txs)
        loss = tf.reduce_sum(ys * cy) + cr * tf.reduce_sum(rs)
    gA, gx, ga = t.gradient(loss, [tA, txs, ta])
    refs = [mv_grad_ref(A, r, w, alpha, cy, cr) for r in xs]
    assert_close(gA, sum(g[0] for g in refs))
    assert_close(gx, np.stack([g[1] for g in refs]))
    assert_close(ga, sum(g[2] for g in refs))
    assert_close(gx[1], fd(lambda r: mv_loss_ref(A, r, w, alpha, cy, cr), xs[1]), rtol=1e-6, atol=1e-8)

    with pytest.raises(NotImplementedError, match="vectorized_map"):
        with tf.autodiff.ForwardAccumulator(txs, tf.ones_like(txs)):
            tf.vectorized_map(lambda r: mv(tA, r, w, ta)[0], txs)
