"""enzcc_plugins: call C functions compiled by enzcc from Python frameworks, with gradients synthesized by enzcc.

- :func:`enzcc_plugins.load` (framework-independent): compile ``void f(const T *in, size_t n, T *out)`` and
  its gradient into a cached shared library and call it through ctypes.
- ``enzcc_plugins.torch.enzyme(source, name)``: a ``torch.autograd.Function`` (needs PyTorch).
- ``enzcc_plugins.jax.enzyme(source, name)``: a ``jax.custom_vjp`` function (needs JAX).
"""

from .build import EnzccBuildError, Kernel, cache_dir, detect_dtype, load, normalize_dtype

__all__ = ["EnzccBuildError", "Kernel", "cache_dir", "detect_dtype", "load", "normalize_dtype"]
