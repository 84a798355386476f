"""``__enzyme_batch(f, enzyme_width, N, args...)``: N evaluations of ``f`` in one call (Enzyme's batch mode).

Each parameter takes N values, one per lane (``enzyme_vector`` may precede them), or ``enzyme_scalar, v``:
the same value in every lane. The result is void, or the N results in order (a struct or array of N, also
returned through a hidden pointer). The lanes are the calls ``f(args of lane k)``, in lane order.
"""

from __future__ import annotations

from enzcc.ad.api import marker_symbol, resolve_function
from enzcc.ad.errors import ad_error
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.values import ConstantInt, GlobalRef

BATCH = "__enzyme_batch"




def replace_batch(call, module) -> None:
    """Replace one ``__enzyme_batch`` call by its N calls."""
    name = "__enzyme_batch"
    args = list(call.args)
    sret = None
    if args and call.arg_attrs and any(a.startswith("sret") for a in call.arg_attrs[0]):
        sret, args = args[0], args[1:]
    target = resolve_function(args[0]) if args else None
    if not isinstance(target, GlobalRef) or target.symbol not in module.functions:
        raise ad_error(f"the first argument of {name} must be a function known at compile time", call)
    fn = module.functions[target.symbol]
    rest = args[1:]
    if len(rest) < 2 or marker_symbol(rest[0]) != "enzyme_width" or not isinstance(rest[1], ConstantInt) or \
            rest[1].value < 1:
        raise ad_error(f"{name} needs enzyme_width, N (a constant) after the function", call)
    width, rest = rest[1].value, rest[2:]
    lanes: list[list] = [[] for _ in range(width)]
    pos = 0
    for param in fn.args:
        m = marker_symbol(rest[pos]) if pos < len(rest) else None
        if m in ("enzyme_scalar", "enzyme_vector"):
            pos += 1
        elif m is not None:
            raise ad_error(f"{m} is not supported with {name} (known: enzyme_scalar, enzyme_vector)", call)
        count = 1 if m == "enzyme_scalar" else width
        values = rest[pos:pos + count]
        if len(values) < count or any(marker_symbol(v) for v in values):
            raise ad_error(f"too few arguments to {name} for '{fn.name}': parameter {param.index + 1} needs "
                           f"{count} value(s)", call)
        pos += count
        for k in range(width):
            v = values[0 if count == 1 else k]
            if v.type != param.type:
                raise ad_error(f"argument for parameter {param.index + 1} of '{fn.name}' has type {v.type}, "
                               f"expected {param.type}", call)
            lanes[k].append(v)
    if pos != len(rest):
        raise ad_error(f"too many arguments to {name} for '{fn.name}'", call)
    b = IRBuilder.before(call)
    results = [b.call(fn, lane) for lane in lanes]
    if isinstance(fn.return_type, T.VoidType):
        if not isinstance(call.type, T.VoidType) and call.has_uses():
            raise ad_error(f"{name} is declared to return {call.type}, but '{fn.name}' returns nothing", call)
    elif sret is not None:
        for k, r in enumerate(results):
            b.store(r, b.gep(fn.return_type, sret, [ConstantInt(T.i64, k)]))
    elif not isinstance(call.type, T.VoidType):
        want = call.type
        slot = b.alloca(T.ArrayType(width, fn.return_type), in_entry=True)
        dl = module.data_layout
        if dl.store_size(want) < dl.store_size(slot.allocated_type):
            raise ad_error(f"{name} is declared to return {want}, too small for {width} results of "
                           f"{fn.return_type}", call)
        for k, r in enumerate(results):
            b.store(r, b.gep(fn.return_type, slot, [ConstantInt(T.i64, k)]))
        call.replace_all_uses_with(b.load(want, slot))
    markers = [a for a in call.args if marker_symbol(a)]
    call.erase()
    for m in markers:
        if not m.has_uses():
            m.erase()


__all__ = ["BATCH", "replace_batch"]
