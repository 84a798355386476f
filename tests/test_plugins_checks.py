"""enzcc_plugins: declarations checked against the code (plugins/checks.py), the checked mode (plugins/guard.py),
one op per source and declaration in a process (build.memoised), rebuilds that follow included headers, and
builds that say what they do (issue 36, items 1 and 3).

The framework-independent parts need no framework (the NumPy level of load_kernel); the PyTorch ones skip
without PyTorch. Every library goes to a private cache directory.
"""

from __future__ import annotations

import logging
import os
import textwrap
import time

import pytest

from enzcc_testing import plugins_importable

plugins_importable()

np = pytest.importorskip("numpy")

from enzcc_plugins import CheckedCallError, In, Int, Out, PrototypeError, ShapeError, load_kernel  # noqa: E402
from enzcc_plugins import build as B  # noqa: E402

SOURCE = r"""
#include <math.h>
#include <stddef.h>
/* the three mistakes of issue 36 and their correct twins */
void scale_into(double *x, long n, double *y) {        /* writes its input: x is not an In */
  for (long i = 0; i < n; i++) { y[i] = 2 * x[i]; x[i] = 3.81; }
}
void energy(const double *a, long n, double *E) {      /* a is const: never an Out */
  double s = 0;
  for (long i = 0; i < n; i++) s += a[i] * a[i];
  E[0] = s;
}
void accumulate(const double *x, long n, double *y) {  /* y[i] += ...: reads y before writing it */
  for (long i = 0; i < n; i++) y[i] += sin(x[i]);
}
void forgets(const double *x, long n, double *y) {     /* never writes y */
  (void)x; (void)n; (void)y;
}
void ck_softmax(const double *in, long n, double *out) {  /* reads out, but after writing it */
  double m = in[0], s = 0;
  for (long i = 1; i < n; i++) m = fmax(m, in[i]);
  for (long i = 0; i < n; i++) { out[i] = exp(in[i] - m); s += out[i]; }
  for (long i = 0; i < n; i++) out[i] /= s;
}
void runsum0(const double *in, long n, double *out) {  /* out[0] = 0, then out[i + 1] = out[i] + in[i] */
  out[0] = 0;
  for (long i = 0; i < n; i++) out[i + 1] = out[i] + in[i];
}
__attribute__((noinline)) static void clobber(double *v, long n) { for (long i = 0; i < n; i++) v[i] = 3.81; }
void hidden_write(double *x, long n, double *y) {      /* writes x through a call: no static verdict */
  for (long i = 0; i < n; i++) y[i] = x[i] * x[i];
  clobber(x, n);
}
void ck_overrun(const double *x, long n, double *y) {     /* writes n + x[0] elements: no static bound */
  for (long i = 0; i < n + (long)x[0]; i++) y[i] = x[i % n] * x[i % n];
}
void ck_overrun2(const double *x, long n, double *y) {    /* the same (ops are named by the function) */
  for (long i = 0; i < n + (long)x[0]; i++) y[i] = x[i % n] * x[i % n];
}
void plus_two(const double *x, long n, double *y) {    /* writes n + 2 elements: bound by Int n */
  for (long i = 0; i < n + 2; i++) y[i] = x[0];
}
void ck_square(const double *x, long n, double *y) {      /* writes y[0 .. n - 1]: a loop bound by Int n */
  for (long i = 0; i < n; i++) y[i] = x[i] * x[i];
}
void shifted(const double *x, int n, double *y) {      /* writes y[0 .. n]: int n, index i + 1 */
  y[0] = 0;
  for (int i = 0; i < n; i++) y[i + 1] = y[i] + x[i];
}
void when_positive(const double *x, long n, double *y) {  /* writes only when x[0] > 0: no static verdict */
  if (x[0] > 0)
    for (long i = 0; i < n; i++) y[i] = 1;
}
"""


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("checks")
    path = d / "kernels.c"
    path.write_text(SOURCE)
    return path


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("checks-cache")


def decl(x="in", y="out", y_shape=("n",)):
    mk = {"in": lambda name, s: In(name, shape=s), "out": lambda name, s: Out(name, shape=s)}
    return [mk[x]("x", ("n",)), Int("n"), mk[y]("y", y_shape)]


def fd_gradient(f, x, seed, h=1e-6):
    """Central differences of sum(f(x) * seed)."""
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (np.sum(f(x + e) * seed) - np.sum(f(x - e) * seed)) / (2 * h)
    return g


# --- declarations checked against the code ---------------------------------------------------------------


def test_in_the_code_writes_is_an_error(src, cache):
    # issue 36: the caller's tensor was overwritten silently (123.0 became 3.81)
    with pytest.raises(PrototypeError) as e:
        load_kernel(src, "scale_into", decl(), cache=cache)
    msg = str(e.value)
    assert "'x'" in msg and "declared In" in msg and "writes it" in msg and "kernels.c:6" in msg, msg
    assert "\n" not in msg


def test_const_pointer_declared_out_is_an_error(src, cache):
    # issue 36: the function read uninitialised memory (E = inf)
    with pytest.raises(PrototypeError) as e:
        load_kernel(src, "energy", [Out("a", shape=("n",)), Int("n"), Out("E", shape=(1,))], cache=cache)
    msg = str(e.value)
    assert "'a'" in msg and "const double *" in msg and "declared Out" in msg, msg


def test_out_read_before_written_is_an_error(src, cache):
    with pytest.raises(PrototypeError) as e:
        load_kernel(src, "accumulate", decl(), cache=cache)
    msg = str(e.value)
    assert "'y'" in msg and "reads it before writing it" in msg and "kernels.c:14" in msg, msg


def test_out_never_written_is_an_error(src, cache):
    with pytest.raises(PrototypeError, match=r"'y'.*never writes it"):
        load_kernel(src, "forgets", decl(), cache=cache)


def test_correct_declarations_load_and_differentiate(src, cache):
    x = np.array([0.3, -1.2, 2.0, 0.7])
    k = load_kernel(src, "energy", [In("a", shape=("n",)), Int("n"), Out("E", shape=(1,))], cache=cache)
    assert k(x)[0] == pytest.approx(np.sum(x * x))
    (g,) = k.vjp([x], [np.ones(1)])
    np.testing.assert_allclose(g, 2 * x, rtol=1e-12)  # analytic
    np.testing.assert_allclose(g, fd_gradient(lambda v: k(v), x, np.ones(1)), rtol=1e-6)

    sm = load_kernel(src, "ck_softmax", decl(), cache=cache)  # reads out after writing it: fine
    e = np.exp(x - x.max())
    np.testing.assert_allclose(sm(x), e / e.sum(), rtol=1e-12)
    seed = np.array([1.0, -2.0, 0.5, 3.0])
    (g,) = sm.vjp([x], [seed])
    s = e / e.sum()
    np.testing.assert_allclose(g, s * (seed - np.dot(s, seed)), rtol=1e-10)
    np.testing.assert_allclose(g, fd_gradient(sm, x, seed), rtol=1e-6, atol=1e-9)

    rs = load_kernel(src, "runsum0", decl(y_shape=lambda n: (n + 1,)), cache=cache)  # out[0] written first
    np.testing.assert_allclose(rs(x), np.concatenate([[0], np.cumsum(x)]), rtol=1e-12)


def test_unknown_use_is_trusted(src, cache):
    # the write goes through a call the analysis does not follow: no static verdict, the declaration loads
    k = load_kernel(src, "hidden_write", decl(), cache=cache)
    assert k.params[0].kind == "in"


def test_access_analysis_reports_what_the_code_does(src, cache):
    k = load_kernel(src, "ck_softmax", decl(), cache=cache)
    from enzcc_plugins import checks
    obj_uses = _uses(src, "ck_softmax")
    assert obj_uses[0].describe() == "only reads it" and obj_uses[2].describe() == "reads and writes it"
    assert not obj_uses[2].read_first_at and k is not None
    uses = _uses(src, "forgets")
    assert uses[2].describe() == "does not touch it"
    assert not _uses(src, "hidden_write")[0].known
    assert checks.declaration_problems([], {}, set(), "f") == []


def _uses(src, name):
    from enzcc_plugins import checks
    from enzcc.backend import embed
    import subprocess
    import sys
    obj = src.with_suffix(f".{name}.o")
    subprocess.run([sys.executable, "-m", "enzcc", "-O2", "-g", "-fPIC", "-c", str(src), "-o", str(obj)], check=True,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rec = next(iter(embed.unpack_records(embed.elf_section(obj.read_bytes(), embed.SECTION), str(obj))))
    return checks.analyse_pointers(rec.bitcode, name, str(src))


def test_extent_written_is_compared_with_the_output_shape(src, cache):
    # issue 36: an Out shape smaller than what the code writes (malloc_consolidate(), exit 134): the loop bound is
    # Int n, so the call is refused before it runs
    small = [In("x", shape=("n",)), Int("n"), Out("y", shape=lambda n: (n - 1,))]
    k = load_kernel(src, "ck_square", small, cache=cache)
    with pytest.raises(ShapeError, match=r"writes 4 elements of 'y' \(at kernels.c:\d+, for n = 4\), but its declared "
                                         r"shape \(3,\) holds 3"):
        k(np.ones(4))
    with pytest.raises(ShapeError, match=r"writes 1 element of 'y'.*\(0,\) holds 0"):
        k(np.ones(1))
    good = load_kernel(src, "ck_square", [In("x", shape=("n",)), Int("n"), Out("y", shape=("n",))], cache=cache)
    np.testing.assert_allclose(good(np.array([1.0, -2.0, 3.0])), [1.0, 4.0, 9.0])
    k = load_kernel(src, "shifted", [In("x", shape=("n",)), Int("n"), Out("y", shape=("n",))], cache=cache)
    with pytest.raises(ShapeError, match=r"writes 4 elements of 'y'"):
        k(np.ones(3))
    ok = load_kernel(src, "shifted", [In("x", shape=("n",)), Int("n"), Out("y", shape=lambda n: (n + 1,))],
                     cache=cache)
    np.testing.assert_allclose(ok(np.array([1.0, 2.0, 3.0])), [0, 1, 3, 6])
    k = load_kernel(src, "plus_two", [In("x", shape=("n",)), Int("n"), Out("y", shape=("n",))], cache=cache)
    with pytest.raises(ShapeError, match=r"writes 5 elements of 'y'.*for n = 3"):
        k(np.ones(3))
    # a write that depends on the data: no verdict before the call (the checked mode would catch it)
    k = load_kernel(src, "when_positive", small, cache=cache)
    assert k(-np.ones(3)).shape == (2,)


# --- the checked mode ------------------------------------------------------------------------------------


def test_checked_mode_turns_an_overrun_into_an_exception(src, cache):
    # issue 36: an Out shape smaller than what the code writes: malloc_consolidate(), exit 134
    k = load_kernel(src, "ck_overrun", decl(), cache=cache, checked=True)
    x = np.array([2.5, 1.5, 3.0])  # (long)x[0] = 2: five elements written
    with pytest.raises(CheckedCallError, match=r"past the end of output 'y' \(shape \(3,\), float64\): at byte 24, "
                                               r"element 3"):
        k(x)
    with pytest.raises(CheckedCallError, match="'y'"):
        k.vjp([x], [np.ones(3)])
    with pytest.raises(CheckedCallError, match="'y'"):
        k.jvp([x], [np.ones(3)])
    # the declaration that fits: the same values as unchecked, gradient = analytic and finite differences
    good = [In("x", shape=("n",)), Int("n"), Out("y", shape=lambda n: (n + 2,))]
    kc = load_kernel(src, "ck_overrun", good, cache=cache, checked=True)
    ku = load_kernel(src, "ck_overrun", good, cache=cache, checked=False)
    assert kc.checked and not ku.checked
    np.testing.assert_array_equal(kc(x), ku(x))
    np.testing.assert_allclose(kc(x), np.array([6.25, 2.25, 9.0, 6.25, 2.25]))
    seed = np.array([1.0, -1.0, 2.0, 0.5, 3.0])
    (g,) = kc.vjp([x], [seed])
    np.testing.assert_allclose(g, 2 * x * np.array([1.5, 2.0, 2.0]))
    np.testing.assert_allclose(g, fd_gradient(ku, x, seed), rtol=1e-6)


def test_checked_mode_catches_a_write_into_an_input(src, cache, monkeypatch):
    monkeypatch.setenv("ENZCC_CHECKED", "1")  # the environment variable turns it on
    k = load_kernel(src, "hidden_write", decl(), cache=cache)
    assert k.checked
    x = np.array([123.0, 2.0])
    with pytest.raises(CheckedCallError, match=r"wrote into input 'x'.*read-only"):
        k(x)
    assert x[0] == 123.0  # the caller's array is untouched


# --- rebuilds follow included headers; builds say what they do ------------------------------------------


def test_header_change_rebuilds(tmp_path, caplog):
    (tmp_path / "k.h").write_text("#define K 2.0\n")
    src = tmp_path / "g.c"
    src.write_text('#include "k.h"\nvoid g(const double *x, long n, double *y) {\n'
                   '  for (long i = 0; i < n; i++) y[i] = K * x[i];\n}\n')
    cache = tmp_path / "cache"
    d = [In("x", shape=("n",)), Int("n"), Out("y", shape=("n",))]
    x = np.array([1.0, 3.0])
    with caplog.at_level(logging.INFO, logger="enzcc"):
        k = load_kernel(src, "g", d, cache=cache)
    assert any("compiling g from g.c" in r.getMessage() and "done in" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(k(x), 2 * x)
    assert [os.path.basename(p) for p, _ in k.dependencies] == ["k.h"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="enzcc"):
        k = load_kernel(src, "g", d, cache=cache)  # a cache hit: silent
    assert not [r for r in caplog.records if r.name == "enzcc"]
    np.testing.assert_allclose(k(x), 2 * x)
    (tmp_path / "k.h").write_text("#define K 5.0\n")
    with caplog.at_level(logging.INFO, logger="enzcc"):
        k = load_kernel(src, "g", d, cache=cache)
    assert any("compiling g" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(k(x), 5 * x)
    (g,) = k.vjp([x], [np.ones(2)])
    np.testing.assert_allclose(g, [5.0, 5.0])


# --- one op per source, function, declaration and options ---------------------------------------------------


def test_memo_identity_and_header_change(tmp_path):
    (tmp_path / "k.h").write_text("#define K 2.0\n")
    src = tmp_path / "g.c"
    src.write_text('#include "k.h"\nvoid g(const double *x, long n, double *y) {\n'
                   '  for (long i = 0; i < n; i++) y[i] = K * x[i];\n}\n')
    made = []

    @B.memoise_ops("test-framework")
    def enzyme(source, name, params=None, *, cache=None):
        made.append(load_kernel(source, name, params, cache=cache))
        return object()

    def declaration(scale=1):
        return [In("x", shape=("n",)), Int("n"), Out("y", shape=lambda n: (n * scale,))]

    cache = tmp_path / "cache"
    a = enzyme(str(src), "g", declaration(), cache=cache)
    assert enzyme(str(src), "g", declaration(), cache=cache) is a  # fresh lists and lambdas, same content
    assert enzyme(src, "g", params=declaration(), cache=cache) is a  # a Path, by keyword
    assert enzyme(str(src), "g", declaration(2), cache=cache) is not a  # another declaration
    assert len(made) == 2
    for _ in range(300):
        assert enzyme(str(src), "g", declaration(), cache=cache) is a
    assert len(made) == 2
    time.sleep(2 * B._RESTAT_S)
    (tmp_path / "k.h").write_text("#define K 7.0\n")
    time.sleep(2 * B._RESTAT_S)
    b = enzyme(str(src), "g", declaration(), cache=cache)
    assert b is not a and len(made) == 3
    np.testing.assert_allclose(made[-1](np.ones(2)), [7.0, 7.0])
    src.write_text(src.read_text().replace("K * x[i]", "K * x[i] + 1"))
    time.sleep(2 * B._RESTAT_S)
    c = enzyme(str(src), "g", declaration(), cache=cache)
    assert c is not b
    np.testing.assert_allclose(made[-1](np.ones(2)), [8.0, 8.0])


def test_torch_enzyme_is_memoised(src, cache):
    pytest.importorskip("torch")
    from enzcc_plugins.torch import enzyme
    d = [In("x", shape=("n",)), Int("n"), Out("y", shape=lambda n: (n,))]
    F = enzyme(src, "ck_softmax", d, cache=cache)
    assert enzyme(str(src), "ck_softmax", list(d), cache=cache) is F
    import torch
    x = torch.tensor([0.1, 0.5, -0.3], dtype=torch.float64, requires_grad=True)
    for _ in range(50):  # the paper's line in a loop
        y = enzyme(str(src), "ck_softmax", [In("x", shape=("n",)), Int("n"), Out("y", shape=lambda n: (n,))],
                   cache=cache).apply(x)
    np.testing.assert_allclose(y.detach().numpy(), torch.softmax(x, 0).detach().numpy(), rtol=1e-12)


def test_torch_checked_mode(src, cache, monkeypatch):
    torch = pytest.importorskip("torch")
    from enzcc_plugins.torch import enzyme
    d = [In("x", shape=("n",)), Int("n"), Out("y", shape=("n",))]  # writes n + (long)x[0] elements
    monkeypatch.setenv("ENZCC_CHECKED", "1")
    F = enzyme(src, "ck_overrun", d, cache=cache)
    x = torch.tensor([2.5, 1.5, 3.0], dtype=torch.float64, requires_grad=True)
    with pytest.raises(CheckedCallError, match=r"past the end of output 'y' \(shape \(3,\), float64\)"):
        F.apply(x)
    good = enzyme(src, "ck_overrun2", [In("x", shape=("n",)), Int("n"), Out("y", shape=lambda n: (n + 2,))],
                  cache=cache)
    y = good.apply(x)
    y.backward(torch.ones(5, dtype=torch.float64))
    np.testing.assert_allclose(y.detach().numpy(), [6.25, 2.25, 9.0, 6.25, 2.25])
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy() * np.array([2.0, 2.0, 1.0]))
    monkeypatch.delenv("ENZCC_CHECKED")
    S = enzyme(src, "ck_square", [In("x", shape=("n",)), Int("n"), Out("y", shape=lambda n: (n - 1,))], cache=cache)
    with pytest.raises(ShapeError, match=r"writes 3 elements of 'y'"):  # refused before the call, unchecked too
        S.apply(x)


def _checked_case(src, cache, monkeypatch, enzyme, tag):
    """The three kernels of a framework's checked-mode test: ck_overrun declared too small and hidden_write (a
    write into its input through a call), both checked; ck_overrun declared as it writes, checked and not."""
    d = [In("x", shape=("n",)), Int("n"), Out("y", shape=("n",))]  # writes n + (long)x[0] elements
    fits = [In("x", shape=("n",)), Int("n"), Out("y", shape=lambda n: (n + 2,))]
    monkeypatch.setenv("ENZCC_CHECKED", "1")
    small = enzyme(src, "ck_overrun", d, cache=cache, op_name=f"enzcc::ck_overrun_{tag}_small")
    writes = enzyme(src, "hidden_write", decl(), cache=cache, op_name=f"enzcc::hidden_write_{tag}")
    good = enzyme(src, "ck_overrun", fits, cache=cache, op_name=f"enzcc::ck_overrun_{tag}_checked")
    monkeypatch.delenv("ENZCC_CHECKED")
    plain = enzyme(src, "ck_overrun", fits, cache=cache, op_name=f"enzcc::ck_overrun_{tag}_plain")
    return small, writes, good, plain


OVERRUN = r"ck_overrun: the function wrote past the end of output 'y' \(shape \(3,\), float64\): at byte 24, element 3"


def test_jax_checked_mode(src, cache, monkeypatch):
    """JAX (the XLA FFI handler's checked target): an overrun of an output, eagerly, under jit, through the
    gradient and in each item of a vmap, and a write into an input are errors naming the parameter and element;
    the declaration that fits gives the unchecked values exactly and the analytic gradient."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from enzcc_plugins.jax import enzyme
    small, writes, good, plain = _checked_case(src, cache, monkeypatch, enzyme, "jax")
    assert small.kernel.checked and good.kernel.checked and not plain.kernel.checked
    x = jnp.array([2.5, 1.5, 3.0])  # (long)x[0] = 2: five elements written
    for f in (small, jax.jit(small)):
        with pytest.raises(jax.errors.JaxRuntimeError, match=OVERRUN):
            jax.block_until_ready(f(x))
    with pytest.raises(jax.errors.JaxRuntimeError, match="past the end of .*'y'"):
        jax.block_until_ready(jax.grad(lambda v: small(v).sum())(x))
    xs = jnp.stack([jnp.array([0.5, 1.5, 3.0]), x])  # item 0 writes 3 elements, item 1 five
    with pytest.raises(jax.errors.JaxRuntimeError, match=OVERRUN):
        jax.block_until_ready(jax.vmap(small)(xs))
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"hidden_write: the function wrote into input 'x'.*"
                                                        r"read-only"):
        jax.block_until_ready(writes(jnp.array([123.0, 2.0])))
    np.testing.assert_array_equal(good(x), plain(x))
    np.testing.assert_allclose(good(x), [6.25, 2.25, 9.0, 6.25, 2.25])
    g = jax.grad(lambda v: (good(v) * jnp.arange(1.0, 6.0)).sum())(x)
    np.testing.assert_allclose(g, 2 * np.asarray(x) * np.array([1 + 4, 2 + 5, 3]))
    np.testing.assert_array_equal(jax.vmap(good)(xs[1:]), plain(x)[None])


def test_tf_checked_mode(src, cache, monkeypatch):
    """TensorFlow (the EnzccCall op's checked section): an overrun of an output, eagerly, in a tf.function and
    in an item of a tf.vectorized_map, and a write into an input are InvalidArgumentErrors naming the parameter
    and element; the declaration that fits gives the unchecked values exactly and the analytic gradient."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    from enzcc_plugins.tensorflow import enzyme
    small, writes, good, plain = _checked_case(src, cache, monkeypatch, enzyme, "tf")
    x = tf.constant([2.5, 1.5, 3.0], tf.float64)
    for f in (small, tf.function(small)):
        with pytest.raises(tf.errors.InvalidArgumentError, match=OVERRUN):
            f(x)
    xs = tf.constant([[0.5, 1.5, 3.0], [2.5, 1.5, 3.0]], tf.float64)  # item 0 writes 3 elements, item 1 five
    with pytest.raises(tf.errors.InvalidArgumentError, match=OVERRUN):
        tf.vectorized_map(small, xs)  # (one batched op: each item checked)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"hidden_write: the function wrote into input 'x'.*"
                                                             r"read-only"):
        writes(tf.constant([123.0, 2.0], tf.float64))
    np.testing.assert_array_equal(good(x).numpy(), plain(x).numpy())
    np.testing.assert_allclose(good(x).numpy(), [6.25, 2.25, 9.0, 6.25, 2.25])
    w = tf.range(1.0, 6.0, dtype=tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        s = tf.reduce_sum(good(x) * w)
    np.testing.assert_allclose(tape.gradient(s, x).numpy(), 2 * x.numpy() * np.array([1 + 4, 2 + 5, 3]))
