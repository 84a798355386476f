"""JAX integration: a C function compiled by enzcc as a ``jax.custom_vjp`` function.

    from enzcc_plugins.jax import enzyme
    f = enzyme("f.c", "f")            # void f(const float *in, size_t n, float *out)
    y = f(x)                          # runs the compiled C through jax.pure_callback (also under jit/vmap)
    g = jax.grad(lambda x: f(x).sum())(x)   # the backward pass calls the enzcc gradient

Arrays of the C function's element type (float32 for ``float``; float64 for ``double``, which needs
``jax_enable_x64``) of any shape are flattened into ``in`` with ``n = x.size``; the result has ``x``'s shape
when the output length is the default ``n``, else it is 1-D of ``out_size(n)``. Python scalars and lists
are converted to the C type; arrays of another dtype are an error. Only reverse mode is defined
(``jax.grad``, ``jax.vjp``); ``jax.jvp`` is not (custom_vjp).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .build import EnzccBuildError, load

__all__ = ["enzyme", "EnzccBuildError"]


def enzyme(source, name: str, dtype=None, *, out_size: int | Callable[[int], int] | None = None,
           cflags: Sequence[str] = (), compiler: str | None = None, cache=None,
           vmap_method: str = "sequential") -> Callable:
    """Compile ``name`` from the C file ``source`` (and its gradient) with enzcc and return ``f(x)``, a JAX
    function with a custom VJP whose forward and backward run the compiled code via ``jax.pure_callback``.

    Arguments as for :func:`enzcc_plugins.load` (dtype, out_size, cflags, compiler, cache); vmap_method is
    passed to ``jax.pure_callback`` (default 'sequential': ``jax.vmap`` loops over the batch). Raises
    :class:`EnzccBuildError` (with enzcc's one-line error) when compilation fails.
    """
    kernel = load(source, name, dtype, out_size=out_size, cflags=cflags, compiler=compiler, cache=cache)
    np_dtype = np.dtype(kernel.typecode)

    def out_shape(shape):
        return tuple(shape) if kernel.same_shape else (kernel.out_size(math.prod(shape)),)

    def host_forward(x):
        a = np.ascontiguousarray(x, dtype=np_dtype)
        out = np.empty(kernel.out_size(a.size), dtype=np_dtype)
        if a.size or out.size:
            kernel.forward_ptr(a.ctypes.data, a.size, out.ctypes.data)
        return out.reshape(out_shape(a.shape))

    def host_backward(x, g):
        a = np.ascontiguousarray(x, dtype=np_dtype)
        m = kernel.out_size(a.size)
        dout = np.array(g, dtype=np_dtype, copy=True, order="C").reshape(-1)  # consumed by the gradient
        if dout.size != m:
            raise ValueError(f"{name}: cotangent has {dout.size} elements, expected {m}")
        din = np.zeros(a.size, dtype=np_dtype)
        scratch = np.empty(m, dtype=np_dtype)
        if a.size or m:
            kernel.backward_ptr(a.ctypes.data, din.ctypes.data, a.size, scratch.ctypes.data, dout.ctypes.data)
        return din.reshape(a.shape)

    def call_forward(x):
        return jax.pure_callback(host_forward, jax.ShapeDtypeStruct(out_shape(x.shape), np_dtype), x,
                                 vmap_method=vmap_method)

    @jax.custom_vjp
    def core(x):
        return call_forward(x)

    def core_fwd(x):
        return call_forward(x), x

    def core_bwd(x, g):
        return (jax.pure_callback(host_backward, jax.ShapeDtypeStruct(x.shape, np_dtype), x, g,
                                  vmap_method=vmap_method),)

    core.defvjp(core_fwd, core_bwd)

    def f(x):
        if np_dtype == np.float64 and jax.dtypes.canonicalize_dtype(np.float64) != np.float64:
            raise TypeError(f"{name} takes double (float64), which JAX truncates to float32 unless 64-bit "
                            f"types are enabled: jax.config.update('jax_enable_x64', True) or "
                            f"'with jax.enable_x64(True):'")
        if isinstance(x, (jax.Array, np.ndarray, np.generic)):
            if x.dtype != np_dtype:
                raise TypeError(f"{name}: input has dtype {x.dtype}, but the C function takes "
                                f"{'float' if np_dtype == np.float32 else 'double'} ({np_dtype}); convert it "
                                f"with .astype(jnp.{np_dtype}) or build the function for the other type")
            x = jnp.asarray(x)
        else:
            x = jnp.asarray(x, dtype=np_dtype)  # Python numbers and lists
        return core(x)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"{name} from {kernel.source} ({kernel.dtype}), compiled by enzcc; custom VJP by enzcc."
    f.kernel = kernel
    return f
