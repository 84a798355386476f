"""PyTorch integration: a C function compiled by enzcc as a ``torch.autograd.Function``.

    from enzcc_plugins.torch import enzyme
    F = enzyme("f.c", "f")            # void f(const float *in, size_t n, float *out)
    y = F.apply(x)                    # f in compiled C; y.backward() runs the enzcc gradient

Inputs are CPU tensors of the C function's element type (float32 for ``float``, float64 for ``double``) of
any shape; they are flattened (made contiguous if needed) into ``in`` with ``n = x.numel()``. The result has
``x``'s shape when the output length is the default ``n``, else it is 1-D of ``out_size(n)``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch.autograd.function import once_differentiable

from .build import EnzccBuildError, Kernel, load

__all__ = ["enzyme", "EnzccBuildError"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _check(kernel: Kernel, t, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{kernel.name}: {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise RuntimeError(f"{kernel.name}: {what} is on {t.device}, but the enzcc-compiled code runs on the "
                           f"CPU only; move it with .cpu()")
    want = _DTYPES[kernel.dtype]
    if t.dtype != want:
        raise TypeError(f"{kernel.name}: {what} has dtype {t.dtype}, but the C function takes "
                        f"{'float' if want == torch.float32 else 'double'} ({want}); convert it with "
                        f".to({want}) or build the function for the other type")
    if t.is_sparse or t.layout != torch.strided:
        raise TypeError(f"{kernel.name}: {what} must be a dense (strided) tensor, got layout {t.layout}")


def enzyme(source, name: str, dtype=None, *, out_size: int | Callable[[int], int] | None = None,
           cflags: Sequence[str] = (), compiler: str | None = None, cache=None) -> type[torch.autograd.Function]:
    """Compile ``name`` from the C file ``source`` (and its gradient) with enzcc and return a
    ``torch.autograd.Function`` subclass; call it with ``.apply(x)``.

    Arguments as for :func:`enzcc_plugins.load`: dtype ('float32'/'float64', torch dtypes work; default:
    the C declaration's type), out_size (int or callable ``n -> int``; default n), cflags, compiler, cache.
    Raises :class:`EnzccBuildError` (with enzcc's one-line error) when compilation fails.
    """
    kernel = load(source, name, dtype, out_size=out_size, cflags=cflags, compiler=compiler, cache=cache)
    tdtype = _DTYPES[kernel.dtype]

    def forward(ctx, x):
        _check(kernel, x, "the input")
        xc = x.detach().contiguous()
        n = xc.numel()
        m = kernel.out_size(n)
        out = torch.empty(m, dtype=tdtype)
        if n or m:
            kernel.forward_ptr(xc.data_ptr(), n, out.data_ptr())
        ctx.save_for_backward(x)
        ctx.in_shape = x.shape
        ctx.out_shape = x.shape if kernel.same_shape else (m,)
        return out.reshape(ctx.out_shape)

    @once_differentiable
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        xc = x.detach().contiguous()
        _check(kernel, grad_out, "the output gradient")
        n = xc.numel()
        m = kernel.out_size(n)
        if grad_out.numel() != m:
            raise RuntimeError(f"{name}: output gradient has {grad_out.numel()} elements, expected {m}")
        # the seed buffer is consumed (zeroed) by the gradient: always pass a private contiguous copy
        dout = grad_out.detach().reshape(-1).clone(memory_format=torch.contiguous_format)
        din = torch.zeros(n, dtype=tdtype)
        scratch = torch.empty(m, dtype=tdtype)
        if n or m:
            kernel.backward_ptr(xc.data_ptr(), din.data_ptr(), n, scratch.data_ptr(), dout.data_ptr())
        return din.reshape(ctx.in_shape)

    cls = type(f"Enzyme_{name}", (torch.autograd.Function,), {
        "forward": staticmethod(forward),
        "backward": staticmethod(backward),
        "kernel": kernel,
        "__doc__": f"{name} from {kernel.source} ({kernel.dtype}), compiled by enzcc; gradient by enzcc.",
        "__module__": __name__,
    })
    cls.__qualname__ = cls.__name__
    return cls
