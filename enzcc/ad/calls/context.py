"""Contexts of global shadows: ``__enzyme_context``, ``__enzyme_shadow``, ``__enzyme_zero_shadows`` and the
``enzyme_context, ctx`` marker.

Without a context, a global that differentiated code writes has one shadow global, zeroed by each
``__enzyme_*`` call (:mod:`enzcc.ad.globals`), and a global it only reads has no derivative. A context holds
shadows the program keeps across calls and reads itself, as codes that keep their state in globals (Fortran's
COMMON blocks) need:

* ``void *ctx = __enzyme_context(width)`` makes a shadow of every mutable global of the program that holds
  floating-point values or pointers, ``width`` of each (one per vector lane). Floats start at zero, integers
  are copies, a pointer into a global points into that global's shadow, a pointer to other memory (the heap)
  gets a zero-filled allocation of that memory's size (``malloc_usable_size``);
* ``__enzyme_shadow(ctx, &g.field, lane)`` is the address of the field's shadow (an address in no global of
  the program stops it with a message);
* ``__enzyme_zero_shadows(ctx)`` zeroes every float of every shadow and heap shadow allocation;
* ``__enzyme_autodiff(f, enzyme_context, ctx, ...)`` (or ``__enzyme_fwddiff``): the globals ``f`` uses, read
  or written, carry derivatives, whose shadows are the context's: copied into the module's shadow globals
  before the call and back after it, instead of being zeroed. The context's width is the call's vector width.

Enzyme's other form, ``__enzyme_shadow(&g.field, width, lane)`` (no context), is the address of the shadow
Enzyme itself keeps of the global for vector width ``width``: in a program that declares it, every
``__enzyme_autodiff`` / ``__enzyme_fwddiff`` without ``enzyme_context`` uses the program's own context of its
width (made on first use, :func:`implicit_context`), so those shadows persist: reverse mode adds the globals'
adjoints to them, forward mode reads the tangents seeded there.

Nested AD: forward mode over code that uses contexts (a gradient taken in a context of its own, differentiated
again in another) gives each context's memory a tangent, a second context (:func:`shadow_of_nested_call`);
each round has shadow globals of its own, so the two never share one.

Not supported, one-line errors: a context with split mode, with a function also differentiated without one
that reaches a global holding pointers, reverse mode over code that uses a context, and derivatives of code
that uses the program's own contexts (the query form).
"""

from __future__ import annotations

from enzcc.ad.api import marker_symbol, mode_of, resolve_function
from enzcc.ad.globals import eligible
from enzcc.ad.registry import (CallRule, GlobalShadowSource, register, register_global_shadow_source,
                               register_lowering, register_prepared_check, register_request_completion)

from enzcc.ad.emit import call_again, fail_at_run_time, internal_function, signed_i64
from enzcc.ad.errors import ad_error
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.function import Function
from enzcc.ir.instructions import Alloca, Call, Load, Store
from enzcc.ir.values import ConstantAggregate, ConstantInt, ConstantNull, GlobalRef, Value

CONTEXT, SHADOW, ZERO = "__enzyme_context", "__enzyme_shadow", "__enzyme_zero_shadows"
MARKER = "enzyme_context"
_CTX_SHADOW = SHADOW + "_enzcc_ctx"
"""enzcc's own name for the context form of ``__enzyme_shadow`` (the program's may be the query form)."""
_NEW_CONTEXT = CONTEXT + "_enzcc_new"
GLOBAL_CONTEXT = CONTEXT + "_enzcc_global"
"""``ctx(width)``: the program's own context of that width, for the query form (a runtime name: nested AD
through it is refused like through any context)."""
_MAX_GLOBAL_WIDTH = 64

_MAX_RUNS = 4096
"""Most runs of floats, integers and pointers per global a context copies field by field."""


def is_runtime(name: str | None) -> bool:
    """A call to the context runtime (defined by :func:`lower`)."""
    name = name or ""
    return name.startswith(ZERO) or name.startswith(CONTEXT) or \
        (name.startswith(SHADOW) and not name.startswith("__enzyme_shadows"))


def nested_context_call(call: Call) -> str | None:
    """For a call to the context runtime inside code that is differentiated again (nested AD): ``"new"``
    (``__enzyme_context``), ``"shadow"`` (the context form of ``__enzyme_shadow``, also enzcc's own) or
    ``"zero"`` (``__enzyme_zero_shadows``). None for other calls, and for the runtime calls whose derivative is
    not supported: those that reach the program's own contexts (the query form)."""
    name = call.callee_name or ""
    if not is_runtime(name) or name.startswith((GLOBAL_CONTEXT, _NEW_CONTEXT)):
        return None
    if name.startswith(ZERO):
        return "zero"
    if name.startswith(CONTEXT):
        return "new"
    if len(call.args) == 3 and all(isinstance(a.type, T.PointerType) for a in call.args[:2]):
        return "shadow"
    return None


def shadow_of_nested_call(shadows, call: Call) -> Value:
    """Forward mode over code that uses contexts: the memory of a context (the shadows of globals an inner
    derivative reads and accumulates into) has a tangent, which is a second context of the same width, made
    next to it: its floats start at zero, like the context's own. ``__enzyme_shadow(ctx, address, lane)`` in it
    is the same query on that second context. Globals holding pointers are refused: a context's copy of a
    pointer would need the pointer's tangent, which is not made."""
    from enzcc.ad.activity import has_pointer
    from enzcc.ad.errors import ad_error

    if nested_context_call(call) == "new":
        module = call.module
        for sym in sorted(module.globals):
            gv = eligible(module, sym)
            if gv is not None and has_pointer(gv.value_type):
                raise ad_error(f"derivatives of code that makes an enzyme_context, in a program whose global "
                               f"'{sym}' holds pointers, are not supported", call)
        return call_again(call, call.args)
    return call_again(call, [shadows.of(call.args[0], call), *call.args[1:]])


def zero_nested_shadows(shadows, call: Call) -> None:
    """``__enzyme_zero_shadows(ctx)`` zeroes the context's floats: the same for its tangent."""
    call_again(call, [shadows.of(call.args[0], call), *call.args[1:]])


def query_form(module) -> Function | None:
    """The program's ``__enzyme_shadow(address, width, lane)`` declaration (the query form), if it has one."""
    for name, fn in module.functions.items():
        if name.startswith(SHADOW) and not name.startswith("__enzyme_shadows") and len(fn.args) == 3 and \
                isinstance(fn.args[0].type, T.PointerType) and isinstance(fn.args[1].type, T.IntType) and \
                fn.is_declaration:
            return fn
    return None


def implicit_context(call: Call, module, width: int) -> Value:
    """Before ``call``: the program's own context of ``width`` (for programs that use the query form); made
    once per call however often the call is parsed."""
    i = call.parent.index_of(call)
    prev = call.parent.instructions[i - 1] if i > 0 else None
    if isinstance(prev, Call) and prev.callee_name == GLOBAL_CONTEXT and isinstance(prev.args[0], ConstantInt) and \
            prev.args[0].value == width:
        return prev
    return IRBuilder.before(call).call(_global_context_fn(module), [ConstantInt(T.i32, width)])


def uses_implicit_contexts(module) -> bool:
    """Whether calls without ``enzyme_context`` use the program's own contexts (it has the query form)."""
    return query_form(module) is not None


def _global_context_fn(module) -> Function:
    fn = module.functions.get(GLOBAL_CONTEXT)
    if fn is not None:
        return fn
    table_ty = T.ArrayType(_MAX_GLOBAL_WIDTH, T.ptr)
    table = module.unique_function_name("__enzcc_global_contexts")
    module.add_global(table, table_ty, ConstantAggregate(table_ty, [ConstantNull(T.ptr)] * _MAX_GLOBAL_WIDTH),
                      linkage="internal")
    make = module.get_or_insert_function(_NEW_CONTEXT, T.FunctionType(T.ptr, (T.i32,)))
    fn = internal_function(module, GLOBAL_CONTEXT, T.ptr, (T.i32,), ["width"])
    (w,) = fn.args
    entry, bad, ok, new, done = (fn.append_block(x) for x in ("entry", "bad", "ok", "new", "done"))
    b = IRBuilder.at_end(entry)
    good = b.and_(b.icmp("sge", w, ConstantInt(T.i32, 1)), b.icmp("sle", w, ConstantInt(T.i32, _MAX_GLOBAL_WIDTH)))
    b.cond_br(good, ok, bad)
    fail_at_run_time(module, IRBuilder.at_end(bad), f"{SHADOW}: the width is not between 1 and {_MAX_GLOBAL_WIDTH}")
    ob = IRBuilder.at_end(ok)
    slot = ob.gep(T.ptr, module.global_ref(table), [ob.sext(ob.sub(w, ConstantInt(T.i32, 1)), T.i64)])
    have = ob.load(T.ptr, slot)
    ob.cond_br(ob.icmp("eq", have, ConstantNull(T.ptr)), new, done)
    nb = IRBuilder.at_end(new)
    made = nb.call(make, [w])
    nb.store(made, slot)
    nb.br(done)
    db = IRBuilder.at_end(done)
    db.ret(db.phi(T.ptr, [(have, ok), (made, new)]))
    return fn


def context_width(v: Value, depth: int = 0) -> int | None:
    """The width a context value was made with, when the code shows it: ``__enzyme_context(N)`` with a
    constant ``N``, directly or through a local variable stored once."""
    if depth > 8:
        return None
    if isinstance(v, Call) and (v.callee_name or "").startswith(CONTEXT) and v.args and \
            isinstance(v.args[0], ConstantInt):
        return v.args[0].value
    if isinstance(v, Load) and isinstance(v.pointer, Alloca):
        stores = [u.user for u in v.pointer.uses if isinstance(u.user, Store) and u.user.pointer is v.pointer]
        if len(stores) == 1:
            return context_width(stores[0].value, depth + 1)
    return None


# -- calls that use a context ---------------------------------------------------------------------------

def copy_in(b: IRBuilder, module, fn_name: str, ctx: Value, width: int) -> list:
    """Before a call differentiating ``fn_name`` with context ``ctx``: the context's shadows of the globals
    it reaches become the module's shadow globals. Returns what :func:`copy_out` needs."""
    from enzcc.ad.globals import declared_shadow, shadow_global

    info = module.enzcc_active_globals
    shadow = _declare_shadow(module)
    dl = module.data_layout
    pairs = []
    for symbol in info.reached_by(fn_name):
        size = ConstantInt(T.i64, dl.alloc_size(module.globals[symbol].value_type))
        if declared_shadow(module, symbol) is not None:
            raise ad_error(f"'{fn_name}' is differentiated with an enzyme_context and reaches '{symbol}', whose "
                           "shadow enzyme_shadow declares: use one or the other")
        if eligible(module, symbol) is None:  # enzcc's own global (an earlier round's shadow): no derivative in
            for lane in range(width):         # the context, zero at entry like any other
                b.memset(shadow_global(module, symbol, lane), 0, size)
            continue
        for lane in range(width):
            theirs = b.call(shadow, [ctx, module.global_ref(symbol), ConstantInt(T.i32, lane)])
            ours = shadow_global(module, symbol, lane)
            b.memcpy(ours, theirs, size)
            pairs.append((ours, theirs, size))
    return pairs


def copy_out(b: IRBuilder, pairs: list) -> None:
    """After the call: the shadow globals back into the context."""
    for ours, theirs, size in pairs:
        b.memcpy(theirs, ours, size)


def _declare_shadow(module) -> Function:
    return module.get_or_insert_function(_CTX_SHADOW, T.FunctionType(T.ptr, (T.ptr, T.ptr, T.i32)))


# -- the runtime ---------------------------------------------------------------------------------------

def lower(module) -> int:
    """Define ``__enzyme_context``, ``__enzyme_shadow`` and ``__enzyme_zero_shadows`` where the program
    calls them (under whatever name the program declared them: any suffix). Returns how many were defined."""
    query = query_form(module)
    if query is not None:  # it asks the program's own context, through the context form
        _declare_shadow(module)
        _global_context_fn(module)
    names = [n for n, f in module.functions.items() if f.is_declaration and is_runtime(n)]
    if not names:
        return 0
    rt = _Runtime(module)
    for name in names:
        fn = module.functions[name]
        fn.linkage = "internal"  # (the program's one layout: AD of a program using contexts waits for the link)
        if fn is query:
            _define_query(module, fn)
        elif name.startswith(CONTEXT):
            rt.define_context(fn)
        elif name.startswith(ZERO):
            rt.define_zero(fn)
        else:
            rt.define_shadow(fn)
    return len(names)


def _define_query(module, fn: Function) -> None:
    """``__enzyme_shadow(address, width, lane)``: the shadow in the program's own context of ``width``."""
    addr, width, lane = fn.args
    b = IRBuilder.at_end(fn.append_block("entry"))

    def i32(v: Value) -> Value:
        return v if v.type == T.i32 else b.trunc(v, T.i32) if v.type.bits > 32 else b.sext(v, T.i32)

    ctx = b.call(_global_context_fn(module), [i32(width)])
    r = b.call(_declare_shadow(module), [ctx, addr, i32(lane)])
    b.ret(r if isinstance(fn.return_type, T.PointerType) else b.ptrtoint(r, fn.return_type))


class _Runtime:
    """The context's layout, for the module's eligible globals ``g_0 .. g_{n-1}``: an array of i64 slots:
    ``[0]`` the width; ``[1 + lane n + i]`` the shadow of ``g_i`` in ``lane``; then, per lane, one heap
    shadow pointer and its size per pointer field of the globals (in field order)."""

    def __init__(self, module):
        self.module = module
        dl = module.data_layout
        self.globals = [gv for name, gv in sorted(module.globals.items()) if eligible(module, name)]
        self.runs = [_runs(dl, gv.value_type, gv.name) for gv in self.globals]
        self.sizes = [dl.alloc_size(gv.value_type) for gv in self.globals]
        self.nptr = sum(1 for runs in self.runs for kind, _, _ in runs if kind == "ptr")
        n = len(self.globals)
        entry = T.StructType((T.ptr, T.i64))
        self.table_type = T.ArrayType(n, entry)
        name = module.unique_function_name("__enzcc_ctx_globals")
        module.add_global(name, self.table_type, ConstantAggregate(self.table_type, [
            ConstantAggregate(entry, [module.global_ref(gv.name), ConstantInt(T.i64, size)])
            for gv, size in zip(self.globals, self.sizes)]), constant=True, linkage="private")
        self.table = module.global_ref(name)
        # every other global and function defined here: pointers into them get no heap shadow
        others = [g for s, g in sorted(module.globals.items()) if g.kind == "global" and not g.is_declaration
                  and g.value_type is not None and g not in self.globals and not s.startswith("llvm.")]
        self.other_type = T.ArrayType(len(others), entry)
        name = module.unique_function_name("__enzcc_ctx_static")
        module.add_global(name, self.other_type, ConstantAggregate(self.other_type, [
            ConstantAggregate(entry, [module.global_ref(g.name),
                                      ConstantInt(T.i64, max(1, dl.alloc_size(g.value_type)))])
            for g in others]), constant=True, linkage="private")
        self.others = module.global_ref(name)
        self.nothers = len(others)
        self._finders: dict[str, Function] = {}

    # slots
    def _slot(self, b: IRBuilder, ctx, index: Value) -> Value:
        return b.gep(T.i64, ctx, [index])

    def _shadow_slot(self, b, ctx, lane, i: int):
        n = ConstantInt(T.i64, len(self.globals))
        return self._slot(b, ctx, b.add(ConstantInt(T.i64, 1 + i), b.mul(lane, n)))

    def _heap_slot(self, b, ctx, width, lane, j: int, size: bool):
        n = len(self.globals)
        base = b.add(ConstantInt(T.i64, 1), b.mul(width, ConstantInt(T.i64, n)))
        k = b.add(b.mul(lane, ConstantInt(T.i64, self.nptr)), ConstantInt(T.i64, j))
        if size:
            k = b.add(k, b.mul(width, ConstantInt(T.i64, self.nptr)))
        return self._slot(b, ctx, b.add(base, k))

    def find(self, table, count: int, tag: str) -> Function:
        """``find(p)``: the index of the table entry whose memory holds ``p``, or -1 (one per table)."""
        if tag in self._finders:
            return self._finders[tag]
        module = self.module
        fn = internal_function(module, f"__enzcc_ctx_find_{tag}", T.i64, (T.ptr,), ["p"])
        (p,) = fn.args
        entry, loop, hit, miss = (fn.append_block(x) for x in ("entry", "loop", "hit", "miss"))
        b = IRBuilder.at_end(entry)
        pi = b.ptrtoint(p, T.i64)
        b.cond_br(b.icmp("eq", ConstantInt(T.i64, count), ConstantInt(T.i64, 0)), miss, loop)
        lb = IRBuilder.at_end(loop)
        i = lb.phi(T.i64, [(ConstantInt(T.i64, 0), entry)])
        ety = T.StructType((T.ptr, T.i64))
        base = lb.ptrtoint(lb.load(T.ptr, lb.gep(ety, table, [i])), T.i64)
        size = lb.load(T.i64, lb.struct_gep(ety, lb.gep(ety, table, [i]), 1))
        inside = lb.and_(lb.icmp("uge", pi, base), lb.icmp("ult", pi, lb.add(base, size)))
        nxt = lb.add(i, ConstantInt(T.i64, 1))
        more = fn.append_block("more")
        lb.cond_br(inside, hit, more)
        mb = IRBuilder.at_end(more)
        mb.cond_br(mb.icmp("eq", nxt, ConstantInt(T.i64, count)), miss, loop)
        i.add_incoming(nxt, more)
        IRBuilder.at_end(hit).ret(i)
        IRBuilder.at_end(miss).ret(ConstantInt(T.i64, -1))
        self._finders[tag] = fn
        return fn

    # __enzyme_context(width)
    def define_context(self, fn: Function) -> None:
        module = self.module
        if not fn.args or not isinstance(fn.args[0].type, T.IntType) or not isinstance(fn.return_type, T.PointerType):
            raise ad_error(f"{fn.name} must be declared as void *{CONTEXT}(int width)")
        calloc = module.get_or_insert_function("calloc", T.FunctionType(T.ptr, (T.i64, T.i64)))
        usable = module.get_or_insert_function("malloc_usable_size", T.FunctionType(T.i64, (T.ptr,)))
        find_g = self.find(self.table, len(self.globals), "global")
        find_o = self.find(self.others, self.nothers, "static")
        n = len(self.globals)
        entry, head, body, done = (fn.append_block(x) for x in ("entry", "lanes", "lane", "done"))
        b = IRBuilder.at_end(entry)
        width = signed_i64(b, fn.args[0])
        slots = b.add(ConstantInt(T.i64, 1), b.mul(width, ConstantInt(T.i64, n + 2 * self.nptr)))
        ctx = b.call(calloc, [slots, ConstantInt(T.i64, 8)])
        b.store(width, ctx)
        b.br(head)
        hb = IRBuilder.at_end(head)
        lane = hb.phi(T.i64, [(ConstantInt(T.i64, 0), entry)])
        hb.cond_br(hb.icmp("slt", lane, width), body, done)
        bb = IRBuilder.at_end(body)
        shadows = []
        for i, size in enumerate(self.sizes):
            s = bb.call(calloc, [ConstantInt(T.i64, 1), ConstantInt(T.i64, max(size, 1))])
            bb.store(s, self._shadow_slot(bb, ctx, lane, i))
            shadows.append(s)
        j = 0
        for i, (gv, runs) in enumerate(zip(self.globals, self.runs)):
            g = module.global_ref(gv.name)
            for kind, off, length in runs:
                src = bb.gep(T.i8, g, [ConstantInt(T.i64, off)])
                dst = bb.gep(T.i8, shadows[i], [ConstantInt(T.i64, off)])
                if kind == "int":
                    bb.memcpy(dst, src, ConstantInt(T.i64, length))
                elif kind == "ptr":
                    bb = self._pointer_field(fn, bb, ctx, width, lane, j, src, dst, shadows, find_g, find_o,
                                             calloc, usable)
                    j += 1
        nxt = bb.add(lane, ConstantInt(T.i64, 1))
        lane.add_incoming(nxt, bb.block)
        bb.br(head)
        IRBuilder.at_end(done).ret(ctx)

    def _pointer_field(self, fn, b, ctx, width, lane, j, src, dst, shadows, find_g, find_o, calloc, usable):
        """The shadow of one pointer field: into a global's shadow, null, or a zeroed heap allocation."""
        v = b.load(T.ptr, src)
        ety = T.StructType((T.ptr, T.i64))
        k = b.call(find_g, [v])
        into, other = fn.append_block("into_global"), fn.append_block("not_global")
        b.cond_br(b.icmp("sge", k, ConstantInt(T.i64, 0)), into, other)
        ib = IRBuilder.at_end(into)
        base = ib.load(T.ptr, ib.gep(ety, self.table, [k]))
        off = ib.sub(ib.ptrtoint(v, T.i64), ib.ptrtoint(base, T.i64))
        n = ConstantInt(T.i64, len(self.globals))
        theirs = ib.load(T.ptr, self._slot(ib, ctx, ib.add(ib.add(k, ConstantInt(T.i64, 1)), ib.mul(lane, n))))
        ib.store(ib.gep(T.i8, theirs, [off]), dst)
        after = fn.append_block("field_done")
        ib.br(after)
        ob = IRBuilder.at_end(other)
        static = ob.call(find_o, [v])
        heap, none = fn.append_block("heap"), fn.append_block("no_shadow")
        ob.cond_br(ob.and_(ob.icmp("ne", v, ConstantNull(T.ptr)), ob.icmp("slt", static, ConstantInt(T.i64, 0))),
                   heap, none)
        hb = IRBuilder.at_end(heap)
        size = hb.call(usable, [v])
        h = hb.call(calloc, [ConstantInt(T.i64, 1), size])
        hb.store(h, dst)
        hb.store(h, self._heap_slot(hb, ctx, width, lane, j, size=False))
        hb.store(size, self._heap_slot(hb, ctx, width, lane, j, size=True))
        hb.br(after)
        IRBuilder.at_end(none).br(after)  # (null, or constant data and functions: no derivative; calloc's null)
        return IRBuilder.at_end(after)

    # __enzyme_shadow(ctx, addr, lane)
    def define_shadow(self, fn: Function) -> None:
        module = self.module
        if len(fn.args) != 3 or not isinstance(fn.args[2].type, T.IntType):
            raise ad_error(f"{fn.name} must be declared as void *{SHADOW}(void *context, void *address, int lane)")
        find_g = self.find(self.table, len(self.globals), "global")
        ctx, addr, lane = fn.args
        entry, bad, ok = (fn.append_block(x) for x in ("entry", "bad", "ok"))
        b = IRBuilder.at_end(entry)
        lane = signed_i64(b, lane)
        k = b.call(find_g, [addr])
        width = b.load(T.i64, ctx)
        good = b.and_(b.icmp("sge", k, ConstantInt(T.i64, 0)),
                      b.and_(b.icmp("sge", lane, ConstantInt(T.i64, 0)), b.icmp("slt", lane, width)))
        b.cond_br(good, ok, bad)
        fail_at_run_time(module, IRBuilder.at_end(bad), f"{SHADOW}: the address is not in a global variable of the "
                                             "program, or the lane is not one of the context's")
        ob = IRBuilder.at_end(ok)
        ety = T.StructType((T.ptr, T.i64))
        base = ob.load(T.ptr, ob.gep(ety, self.table, [k]))
        off = ob.sub(ob.ptrtoint(addr, T.i64), ob.ptrtoint(base, T.i64))
        n = ConstantInt(T.i64, len(self.globals))
        theirs = ob.load(T.ptr, self._slot(ob, ctx, ob.add(ob.add(k, ConstantInt(T.i64, 1)), ob.mul(lane, n))))
        ob.ret(ob.gep(T.i8, theirs, [off]))

    # __enzyme_zero_shadows(ctx)
    def define_zero(self, fn: Function) -> None:
        if len(fn.args) != 1:
            raise ad_error(f"{fn.name} must be declared as void {ZERO}(void *context)")
        (ctx,) = fn.args
        entry, head, body, done = (fn.append_block(x) for x in ("entry", "lanes", "lane", "done"))
        b = IRBuilder.at_end(entry)
        width = b.load(T.i64, ctx)
        b.br(head)
        hb = IRBuilder.at_end(head)
        lane = hb.phi(T.i64, [(ConstantInt(T.i64, 0), entry)])
        hb.cond_br(hb.icmp("slt", lane, width), body, done)
        bb = IRBuilder.at_end(body)
        for i, runs in enumerate(self.runs):
            s = bb.load(T.ptr, self._shadow_slot(bb, ctx, lane, i))
            for kind, off, length in runs:
                if kind == "float":
                    bb.memset(bb.gep(T.i8, s, [ConstantInt(T.i64, off)]), 0, ConstantInt(T.i64, length))
        for j in range(self.nptr):
            h = bb.load(T.ptr, self._heap_slot(bb, ctx, width, lane, j, size=False))
            size = bb.load(T.i64, self._heap_slot(bb, ctx, width, lane, j, size=True))
            bb.memset(h, 0, size)  # (size 0 where there is none)
        nxt = bb.add(lane, ConstantInt(T.i64, 1))
        lane.add_incoming(nxt, bb.block)
        bb.br(head)
        IRBuilder.at_end(done).ret_void()


def _runs(dl, ty, name: str) -> list[tuple[str, int, int]]:
    """``ty``'s bytes as runs (kind, offset, length), kind ``float``, ``int`` or ``ptr`` (one per pointer);
    padding belongs to no run."""
    out: list[list] = []

    def add(kind, off, length):
        if out and out[-1][0] == kind and kind != "ptr" and out[-1][1] + out[-1][2] == off:
            out[-1][2] += length
        else:
            out.append([kind, off, length])
        if len(out) > _MAX_RUNS:
            raise ad_error(f"global '{name}' has too many separate fields for an enzyme_context")

    def walk(t, base):
        if isinstance(t, T.ArrayType):
            step = dl.alloc_size(t.element)
            if _uniform(t.element) and step == dl.store_size(t.element):
                kind = _kind(_scalar(t.element))
                if kind != "ptr":
                    add(kind, base, step * t.count)
                    return
            for i in range(t.count):
                walk(t.element, base + i * step)
        elif isinstance(t, (T.StructType, T.NamedStructType)):
            layout = dl.struct_layout(t)
            for off, elem in zip(layout.offsets, t.elements):
                walk(elem, base + off)
        elif isinstance(t, T.VectorType):
            add(_kind(t.element), base, dl.store_size(t))
        else:
            add(_kind(t), base, dl.store_size(t))

    walk(ty, 0)
    return [tuple(r) for r in out]


def _scalar(t):
    while isinstance(t, (T.ArrayType, T.VectorType)):
        t = t.element
    return t


def _uniform(t) -> bool:
    return isinstance(_scalar(t), (T.FloatType, T.IntType, T.PointerType)) and \
        not isinstance(t, (T.StructType, T.NamedStructType))


def _kind(t) -> str:
    return "float" if isinstance(t, T.FloatType) else "ptr" if isinstance(t, T.PointerType) else "int"



def _complete_request(call, module, mode: str, callee: str, extra: dict) -> None:
    """An ``__enzyme_*`` call's context (``enzyme_context, ctx``, or the program's own when it reads Enzyme's
    shadows of globals) and the width it implies (:func:`enzcc.ad.api.parse_call`)."""
    if "context" in extra:  # the context's width is the call's, where the code shows it
        known = context_width(extra["context"])
        if known is not None and "width" in extra and known != extra["width"]:
            raise ad_error(f"enzyme_width {extra['width']} with a context of width {known} in {callee}", call)
        if known is not None and known < 1:
            raise ad_error(f"a context of width {known} in {callee}", call)
        if known is not None and known > 1:
            if mode not in ("forward", "reverse"):
                raise ad_error(f"vector mode (a context of width {known}) is supported with __enzyme_fwddiff and "
                               f"__enzyme_autodiff, not {callee}", call)
            extra["width"] = known
    width = extra.get("width", 1)
    if "context" not in extra and mode != "size":
        query = query_form(module)
        if query is not None:  # Enzyme's own shadows of globals, which the program reads: its context
            if mode not in ("forward", "reverse"):
                raise ad_error(f"{callee} in a program that reads the shadows of globals with {query.name}(address, "
                               "width, lane): split mode does not keep them (supported with __enzyme_autodiff and "
                               "__enzyme_fwddiff)", call)
            extra["context"] = implicit_context(call, module, width)


def _context_functions(module, calls) -> set[str]:
    """The functions some of ``calls`` differentiate with ``enzyme_context``, or with the program's own context
    (:func:`uses_implicit_contexts`)."""
    implicit = uses_implicit_contexts(module)
    out = set()
    for call in calls:
        if any(marker_symbol(a) == MARKER for a in call.args) or \
                (implicit and mode_of(call.callee_name) in ("forward", "reverse")):
            target = resolve_function(call.args[0]) if call.args else None
            if isinstance(target, GlobalRef):
                out.add(target.symbol)
    return out


def _enter(b: IRBuilder, module, dc):
    return None if dc.context is None else copy_in(b, module, dc.fn.name, dc.context, dc.width)


# -- the call rule ------------------------------------------------------------------------------------------

def _result_is_shadowed(activity, call) -> bool:
    kind = nested_context_call(call)  # a context made here: the shadows of globals an inner derivative uses
    return kind == "new" or (kind == "shadow" and bool(call.args) and activity.is_active_ptr(call.args[0]))


def _shadow(shadows, call) -> Value:
    if shadows.activity.mode != "forward":
        raise ad_error(f"reverse mode over code that calls {call.callee_name} (an enzyme_context) is not "
                       "supported; forward mode over it is", call, fn=shadows.fn)
    return shadow_of_nested_call(shadows, call)


def _forward(mode, call) -> bool:
    # (a context's tangent, and shadows in it, were made with the shadows)
    if nested_context_call(call) == "zero" and mode.activity.is_active_ptr(call.args[0]):
        zero_nested_shadows(mode.shadows, call)
    return True


def _refuse_nested(fn, call, forward: bool) -> None:
    if call.callee_name == GLOBAL_CONTEXT:
        raise ad_error(f"cannot differentiate '{fn.name}': it takes derivatives itself in a program that reads "
                       "Enzyme's shadows of globals (__enzyme_shadow(address, width, lane)), and derivatives of "
                       "that (nested AD) are not supported", call)
    if is_runtime(call.callee_name) and nested_context_call(call) is None:
        raise ad_error(f"cannot differentiate '{fn.name}': it calls {call.callee_name}, and derivatives of code "
                       "that asks the program's own shadows of globals (nested AD) are not supported", call)


register(CallRule("contexts", result_is_shadowed=_result_is_shadowed, shadow=_shadow, forward=_forward),
         match=lambda call: nested_context_call(call) is not None)
register_lowering(50, is_runtime, lower)
register_request_completion(_complete_request)
register_global_shadow_source(GlobalShadowSource(functions=_context_functions, enter=_enter, leave=copy_out))
register_prepared_check(_refuse_nested)

__all__ = ["CONTEXT", "MARKER", "SHADOW", "ZERO", "context_width", "copy_in", "copy_out", "eligible",
           "is_runtime", "lower", "nested_context_call", "shadow_of_nested_call", "zero_nested_shadows"]
