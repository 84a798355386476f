"""Shadow heap memory handed from one gradient call to the next.

In reverse mode the shadow of a ``malloc``/``new`` is allocated next to it and freed at the reverse of the
allocation, at the end of the call. A gradient called again and again (an optimizer's loop) then allocates and
frees the same blocks every call, and glibc gives the memory at the top of its heap back to the kernel
whenever more than its trim threshold (128 KiB) is free there: the next call faults every page in again
(``bench/fft``: two 64 KB work arrays and their shadows, 10,255 page faults in a run against 527 when the
memory stays). As with the tape (:mod:`enzcc.ad.tape`), each allocation site keeps the shadow its last call
freed (up to the tape's :data:`~enzcc.ad.tape.KEEP_LIMIT` bytes) in a global of its own, taken and given back
with ``atomicrmw xchg``, and the next call's shadow there reuses it when it is large enough (zero-filled
again, as any shadow).

Only where the module allows tape reuse (``module.enzcc_reuse_tape``: not for derivatives that a later round
differentiates again, not on GPUs), and only in reverse mode.
"""

from __future__ import annotations

from enzcc.ad.tape import keep_or_free
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.function import Function
from enzcc.ir.values import ConstantNull, Value

SPARE = "__enzcc_shadow_spare"
TAKE = "__enzcc_shadow_take"
"""The helper that allocates shadow memory (as ``malloc`` does, for the analyses of the derivative)."""
RELEASE = "__enzcc_shadow_release"
"""The helper that gives it back (as ``free`` does)."""


def reusing(module, mode: str) -> bool:
    """Whether shadows of heap allocations are kept for the next call."""
    return mode != "forward" and bool(getattr(module, "enzcc_reuse_tape", False))


def take(b: IRBuilder, module, size: Value) -> tuple[Value, Value]:
    """Heap memory for a shadow of ``size`` bytes (not zeroed) at a new allocation site: (pointer, the site's
    spare global, which :func:`release` gives the memory back to)."""
    k = 0
    while f"{SPARE}.{k}" in module.globals:
        k += 1
    module.add_global(f"{SPARE}.{k}", T.ptr, ConstantNull(T.ptr), align=8)
    spare = module.global_ref(f"{SPARE}.{k}")
    return b.call(_take_fn(module), [spare, size]), spare


def release(b: IRBuilder, module, spare: Value, p: Value):
    """Give shadow memory ``p`` back to its site's ``spare`` (what was there is freed), or free it. Returns the
    call."""
    return b.call(_release_fn(module), [spare, p])


def _helper(module, name: str, ftype: T.FunctionType, body) -> Function:
    fn = module.functions.get(name)
    if fn is None:
        fn = Function(name, ftype)
        fn.linkage = "internal"
        module.add_function(fn)
        body(fn)
    return fn


def _libc(module):
    return (module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,))),
            module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,))),
            module.get_or_insert_function("malloc_usable_size", T.FunctionType(T.i64, (T.ptr,))))


def _take_fn(module) -> Function:
    """``take(spare, n)``: the spare when it holds at least n bytes, else new memory (a spare too small is
    freed)."""
    def body(fn):
        spare, n = fn.args
        malloc, free, usable = _libc(module)
        entry, check, drop, fresh, reuse = (fn.append_block(x) for x in ("entry", "check", "drop", "fresh", "reuse"))
        b = IRBuilder.at_end(entry)
        p = b.atomic_rmw("xchg", spare, ConstantNull(T.ptr), "acq_rel", align=8)
        b.cond_br(b.icmp("eq", p, ConstantNull(T.ptr)), fresh, check)
        c = IRBuilder.at_end(check)
        c.cond_br(c.icmp("uge", c.call(usable, [p]), n), reuse, drop)
        d = IRBuilder.at_end(drop)
        d.call(free, [p])
        d.br(fresh)
        f = IRBuilder.at_end(fresh)
        f.ret(f.call(malloc, [n]))
        IRBuilder.at_end(reuse).ret(p)
    fn = _helper(module, TAKE, T.FunctionType(T.ptr, (T.ptr, T.i64)), body)
    # like malloc's: the memory is no other pointer's (the spare global was emptied); kept a call so that the
    # optimizer knows shadows alias neither each other nor the primal memory
    fn.ret_attrs = ["noalias"]
    fn.fn_attrs = ["noinline"]
    return fn


def _release_fn(module) -> Function:
    """``release(spare, p)``: p becomes the spare (the one there is freed), or is freed when it is larger than
    the tape's limit (:func:`enzcc.ad.tape.keep_or_free`)."""
    def body(fn):
        spare, p = fn.args
        _, free, usable = _libc(module)
        b = IRBuilder.at_end(fn.append_block("entry"))
        keep_or_free(fn, b, spare, p, b.call(usable, [p]), free)
    fn = _helper(module, RELEASE, T.FunctionType(T.void, (T.ptr, T.ptr)), body)
    # like free's: the memory goes back to the allocator (take hands it out again as new memory, noalias), the
    # caller keeps no use of it. Kept a call, so that the store into the spare global does not count as the
    # shadow escaping: then the optimizer knows a shadow aliases no pointer it loads or is given (the reverse
    # sweep's accumulations into it can be reordered past reads of the primal's arrays, and vectorized).
    fn.args[1].attrs = ["captures(none)"]
    fn.fn_attrs = ["noinline"]
    return fn
