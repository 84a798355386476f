"""Intrinsic name mangling and declarations.

``declare_intrinsic(module, "llvm.sin", [f64])`` adds (or finds)
``declare double @llvm.sin.f64(double)``.  Signatures of the common math
and memory intrinsics are known; others need an explicit function type.
"""

from __future__ import annotations

from typing import Callable, Sequence

from . import types as T
from .errors import IRError

__all__ = ["mangle_type", "intrinsic_name", "intrinsic_type", "declare_intrinsic",
           "UNARY_FP_INTRINSICS", "BINARY_FP_INTRINSICS"]

_FLOAT_MANGLING = {"half": "f16", "bfloat": "bf16", "float": "f32", "double": "f64",
                   "x86_fp80": "f80", "fp128": "f128", "ppc_fp128": "ppcf128"}


def mangle_type(ty: T.Type) -> str:
    """LLVM's overloaded-intrinsic suffix for a type (``f64``, ``v2f64``, ``p0``, ``i64``)."""
    if isinstance(ty, T.IntType):
        return f"i{ty.bits}"
    if isinstance(ty, T.FloatType):
        return _FLOAT_MANGLING[ty.kind]
    if isinstance(ty, T.PointerType):
        return f"p{ty.addrspace}"
    if isinstance(ty, T.VectorType):
        return ("nx" if ty.scalable else "") + f"v{ty.count}" + mangle_type(ty.element)
    if isinstance(ty, T.ArrayType):
        return f"a{ty.count}" + mangle_type(ty.element)
    if isinstance(ty, T.NamedStructType):
        return "s_" + ty.name
    if isinstance(ty, T.StructType):
        return "sl_" + "".join(mangle_type(e) for e in ty.elements) + "s"
    if isinstance(ty, T.FunctionType):
        inner = mangle_type(ty.ret) + "".join(mangle_type(p) for p in ty.params)
        return "f_" + inner + ("vararg" if ty.varargs else "") + "f"
    if isinstance(ty, T.VoidType):
        return "isVoid"
    if isinstance(ty, T.MetadataType):
        return "Metadata"
    if isinstance(ty, T.X86AMXType):
        return "x86amx"
    raise IRError(f"cannot mangle type {ty}")


def intrinsic_name(base: str, overload_types: Sequence[T.Type] = ()) -> str:
    """``base`` plus ``.suffix`` for each overloaded type."""
    if not base.startswith("llvm."):
        base = "llvm." + base
    return base + "".join("." + mangle_type(t) for t in overload_types)


UNARY_FP_INTRINSICS = frozenset({
    "fabs", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
    "exp", "exp2", "exp10", "log", "log2", "log10", "floor", "ceil", "trunc", "rint",
    "nearbyint", "round", "roundeven", "canonicalize", "arithmetic.fence"})
"""``T (T)`` floating-point intrinsics overloaded on T."""
BINARY_FP_INTRINSICS = frozenset({
    "pow", "minnum", "maxnum", "minimum", "maximum", "minimumnum", "maximumnum",
    "copysign", "atan2"})
"""``T (T, T)`` floating-point intrinsics overloaded on T."""

_SIGNATURES: dict[str, Callable[[Sequence[T.Type]], T.FunctionType]] = {
    "fma": lambda o: T.FunctionType(o[0], (o[0], o[0], o[0])),
    "fmuladd": lambda o: T.FunctionType(o[0], (o[0], o[0], o[0])),
    "powi": lambda o: T.FunctionType(o[0], (o[0], o[1])),
    "ldexp": lambda o: T.FunctionType(o[0], (o[0], o[1])),
    "memset": lambda o: T.FunctionType(T.void, (o[0], T.i8, o[1], T.i1)),
    "memcpy": lambda o: T.FunctionType(T.void, (o[0], o[1], o[2], T.i1)),
    "memmove": lambda o: T.FunctionType(T.void, (o[0], o[1], o[2], T.i1)),
    "lifetime.start": lambda o: T.FunctionType(T.void, (o[0],)),
    "lifetime.end": lambda o: T.FunctionType(T.void, (o[0],)),
    "assume": lambda o: T.FunctionType(T.void, (T.i1,)),
    "trap": lambda o: T.FunctionType(T.void, ()),
    "stacksave": lambda o: T.FunctionType(o[0], ()),
    "stackrestore": lambda o: T.FunctionType(T.void, (o[0],)),
    "abs": lambda o: T.FunctionType(o[0], (o[0], T.i1)),
    "smax": lambda o: T.FunctionType(o[0], (o[0], o[0])),
    "smin": lambda o: T.FunctionType(o[0], (o[0], o[0])),
    "umax": lambda o: T.FunctionType(o[0], (o[0], o[0])),
    "umin": lambda o: T.FunctionType(o[0], (o[0], o[0])),
    "vector.reduce.fadd": lambda o: T.FunctionType(o[0].element, (o[0].element, o[0])),
    "vector.reduce.fmul": lambda o: T.FunctionType(o[0].element, (o[0].element, o[0])),
    "vector.reduce.add": lambda o: T.FunctionType(o[0].element, (o[0],)),
    "vector.reduce.fmax": lambda o: T.FunctionType(o[0].element, (o[0],)),
    "vector.reduce.fmin": lambda o: T.FunctionType(o[0].element, (o[0],)),
}


def intrinsic_type(base: str, overload_types: Sequence[T.Type]) -> T.FunctionType | None:
    """Known signature of intrinsic ``base`` (without ``llvm.``), or None."""
    short = base[5:] if base.startswith("llvm.") else base
    if short in UNARY_FP_INTRINSICS:
        return T.FunctionType(overload_types[0], (overload_types[0],))
    if short in BINARY_FP_INTRINSICS:
        return T.FunctionType(overload_types[0], (overload_types[0], overload_types[0]))
    sig = _SIGNATURES.get(short)
    return sig(overload_types) if sig is not None else None


def declare_intrinsic(module, base: str, overload_types: Sequence[T.Type] = (),
                      function_type: T.FunctionType | None = None):
    """Find or add the declaration of an intrinsic in ``module``; returns the Function."""
    name = intrinsic_name(base, overload_types)
    existing = module.functions.get(name)
    if existing is not None:
        return existing
    if function_type is None:
        function_type = intrinsic_type(base, list(overload_types))
        if function_type is None:
            raise IRError(f"unknown signature for intrinsic {name}; pass function_type")
    return module.get_or_insert_function(name, function_type)
