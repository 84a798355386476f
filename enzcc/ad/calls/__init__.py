"""The call families: each module registers the rules of its functions with :mod:`enzcc.ad.registry` when it is
imported. The engine never imports them; :mod:`enzcc.ad` imports this package once, which registers them all.

To add a family: write a module here that makes its :class:`enzcc.ad.registry.CallRule` objects and registers
them, and import it below (and name it in :data:`FAMILIES`) (``enzcc/ad/README.md`` has a worked example).
"""

from __future__ import annotations

# (imported in this order: a name belongs to one family; matchers are asked in the order they registered)
from enzcc.ad.calls import custom  # noqa: F401  the user's registered derivatives: first
from enzcc.ad.calls import libc, memfns, libm, libdevice, complex, blas, mirror  # noqa: F401
from enzcc.ad.calls import openmp, checkpoint, fixed_point, outline, iters, typehints, context  # noqa: F401
from enzcc.ad.calls import nvvm, nvvm_atomics, cudart, mpi  # noqa: F401

#: the families, in the order they register
FAMILIES = ("custom", "libc", "memfns", "libm", "libdevice", "complex", "blas", "mirror", "openmp", "checkpoint",
            "fixed_point", "outline", "iters", "typehints", "context", "nvvm", "nvvm_atomics",
            "cudart", "mpi")

__all__ = ["FAMILIES"]
