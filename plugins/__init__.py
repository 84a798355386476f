"""enzcc_plugins: call functions compiled by enzcc from Python frameworks, with derivatives synthesized by enzcc.

- :func:`enzcc_plugins.load_kernel` (framework-independent): declare a C, C++, Fortran or Rust function's
  parameters (:func:`In`, :func:`Out`, :func:`Scalar`, :func:`Int`), compile it with its derivatives into a
  cached shared library (entry points of plugins/ABI.md) and call it from NumPy.
- :func:`enzcc_plugins.load`: the seed's one-array ``void f(const T *in, size_t n, T *out)`` through ctypes.
- ``enzcc_plugins.torch.enzyme(source, name, ...)``: a PyTorch custom op (needs PyTorch).
- ``enzcc_plugins.jax.enzyme(source, name, ...)``: a JAX function (needs JAX).
- ``enzcc_plugins.tensorflow.enzyme(...)``: a TensorFlow custom op (needs TensorFlow).
"""

from .build import (ArraySpec, CheckedCallError, CompiledKernel, EnzccBuildError, In, Int, Kernel, Out, Plan,
                    PrototypeError, Scalar, SecondOrderError, ShapeError, cache_dir, detect_dtype, load, load_kernel,
                    normalize_dtype)

__all__ = ["ArraySpec", "CheckedCallError", "CompiledKernel", "EnzccBuildError", "In", "Int", "Kernel", "Out", "Plan",
           "PrototypeError", "Scalar", "SecondOrderError", "ShapeError", "cache_dir", "detect_dtype", "load", "load_kernel",
           "normalize_dtype"]
