"""Shadow pointers: for every active pointer, a pointer to the memory holding its derivatives.

Shadows are computed in the forward code next to their primal: arguments come from the caller (``enzyme_dup``),
``getelementptr``/casts/``select``/``phi`` mirror the primal on shadows, pointers loaded from shadowed memory
are loaded from the shadow memory, and allocations get zero-filled shadow allocations.
"""

from __future__ import annotations

import enzcc.ad.shadow_reuse as shadow_reuse
from enzcc.ad.activity import ALLOCATORS, Activity, has_pointer, is_allocation, returns_shadow
from enzcc.ad.errors import ad_error, describe_pointer  # noqa: F401  (re-exported)
from enzcc.ad.ptrstores import null_based as _null_based
from enzcc.ad.registry import hook
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.cfg import reverse_post_order
from enzcc.ir.instructions import (Alloca, Call, Cast, ExtractValue, Freeze, GetElementPtr, InsertValue, Instruction,
                                   Load, Phi, Select, Store)
from enzcc.ir.values import ConstantInt, ConstantNull, ConstantPoison, ConstantUndef, GlobalRef, Placeholder, Value


class Shadows:
    """Shadow values of one function's active pointers."""

    def __init__(self, fn, activity: Activity, arg_shadows: dict[int, Value], lane: int = 0):
        from enzcc.ad.globals import shadow_global

        self.fn = fn
        self.activity = activity
        self.lane = lane
        """Vector mode: the lane these shadows are for."""
        self._map: dict[int, Value] = dict(arg_shadows)
        self._keep: list[Value] = []
        for g in activity.active_globals:  # a global written by differentiated code: its shadow global
            self._set(g, shadow_global(fn.module, g.symbol, lane))
        self.allocations: list[tuple[Instruction, Value]] = []
        """(primal allocation call, shadow) for heap allocations in the function."""
        self.call_shadows: dict[int, Placeholder] = {}
        """Call that is not inlined (by id) -> the stand-in for the shadow of the pointer it returns, until the
        call to its augmented primal, which returns that shadow, is made."""
        self.spares: dict[int, Value] = {}
        """Shadow (by id) -> the spare global its memory goes back to at the end (:mod:`enzcc.ad.shadow_reuse`),
        for those that are released rather than freed."""

    def has(self, v: Value) -> bool:
        return id(v) in self._map

    def of(self, v: Value, user: Instruction | None = None) -> Value:
        s = self._map.get(id(v))
        if s is not None:
            return s
        if isinstance(v, (ConstantNull, ConstantPoison, ConstantUndef)):
            return v
        raise ad_error(f"no shadow for {describe_pointer(v)}: it is not derived from "
                       "an enzyme_dup argument or an allocation in the differentiated code", user, fn=self.fn)

    def _set(self, v: Value, s: Value) -> None:
        self._map[id(v)] = s
        self._keep.append(v)

    def build(self, primal: list | None = None) -> None:
        """Emit the shadow computations into the forward code; ``primal``: the instructions to give shadows, as
        (block, instructions) in reverse post-order (vector mode: the primal's, without other lanes' code)."""
        dl = self.fn.module.data_layout
        pending_phis: list[tuple[Phi, Phi]] = []
        if primal is None:
            primal = [(block, list(block.instructions)) for block in reverse_post_order(self.fn)]
        for block, insts in primal:
            for inst in insts:
                if not self.activity.is_active_ptr(inst) or self.has(inst):
                    if isinstance(inst, Store) and self.activity.is_active_ptr(inst.pointer) and \
                            isinstance(inst.value.type, T.PointerType):
                        self._store_pointer(inst)
                    elif isinstance(inst, Call) and inst.callee_name == "posix_memalign" and \
                            self.activity.is_active_ptr(inst.args[0]):
                        self._shadow_posix_memalign(inst)
                    elif isinstance(inst, Call) and not self.has(inst) and (mirror := hook(inst, "mirror")):
                        mirror(self, inst)  # (a container's nodes linked: the shadow nodes too)
                    continue
                if isinstance(inst, Phi):
                    sp = Phi(inst.type)
                    sp.insert_after(inst)
                    self._set(inst, sp)
                    pending_phis.append((inst, sp))
                elif isinstance(inst, GetElementPtr):
                    g = GetElementPtr(inst.source_type, self.of(inst.pointer, inst), inst.indices, flags=inst.flags)
                    g.insert_after(inst)
                    self._set(inst, g)
                elif isinstance(inst, Cast) and inst.opcode in ("bitcast", "addrspacecast"):
                    self._set(inst, IRBuilder.after(inst).cast(inst.opcode, self.of(inst.value, inst), inst.type))
                elif isinstance(inst, Freeze):
                    self._set(inst, self.of(inst.value, inst))
                elif isinstance(inst, Select):
                    s = IRBuilder.after(inst).select(inst.condition, self._of_operand(inst.true_value, inst),
                                                     self._of_operand(inst.false_value, inst))
                    self._set(inst, s)
                elif isinstance(inst, Load):
                    s = IRBuilder.after(inst).load(inst.type, self.of(inst.pointer, inst), align=inst.align)
                    self._set(inst, s)
                elif isinstance(inst, Alloca):
                    b = IRBuilder.after(inst)
                    s = b.alloca(inst.allocated_type, inst.num_elements, align=inst.align)
                    size = dl.alloc_size(inst.allocated_type)
                    count = inst.num_elements
                    nbytes = ConstantInt(T.i64, size) if count is None else \
                        b.mul(to_i64(b, count), ConstantInt(T.i64, size))
                    b.memset(s, 0, nbytes)
                    self._set(inst, s)
                elif isinstance(inst, InsertValue):
                    base = self._map.get(id(inst.aggregate))
                    if base is None:
                        base = inst.aggregate if not isinstance(inst.aggregate, Instruction) else \
                            ConstantUndef(inst.type)
                    member = inst.value
                    if has_pointer(member.type):
                        own = member if self.activity.runtime_activity else ConstantNull(member.type)
                        member = self._map.get(id(member)) or own \
                            if isinstance(member.type, T.PointerType) else self._map.get(id(member), member)
                    self._set(inst, IRBuilder.after(inst).insert_value(base, member, list(inst.indices)))
                elif isinstance(inst, ExtractValue):
                    self._set(inst, IRBuilder.after(inst).extract_value(self.of(inst.aggregate, inst),
                                                                        list(inst.indices)))
                elif isinstance(inst, Call) and is_allocation(inst):
                    self._set(inst, self._shadow_allocation(inst))
                elif isinstance(inst, Call) and (make_shadow := hook(inst, "shadow")):
                    self._set(inst, make_shadow(self, inst))  # (its rule makes it)
                elif isinstance(inst, Call) and returns_shadow(inst):
                    # its augmented primal (forward derivative) returns the shadow, one per lane: it takes this
                    # stand-in's place (see AdjointGenerator._prepare_user_calls, ForwardMode._tangent_of_user_call)
                    stand_in = Placeholder(inst.type)
                    self.call_shadows[id(inst)] = stand_in
                    self._set(inst, stand_in)
                else:
                    raise ad_error(f"cannot compute the shadow of pointer produced by '{inst.opcode}'", inst,
                                   fn=self.fn)
        for phi, sp in pending_phis:
            for v, blk in phi.incoming:
                sp.add_incoming(self._of_operand(v, phi), blk)

    def _of_operand(self, v: Value, user: Instruction) -> Value:
        if self.has(v) or isinstance(v, (ConstantNull, ConstantPoison, ConstantUndef)):
            return self.of(v, user)
        zero = self._zero_shadow_of_constant(v)
        if zero is not None:
            return zero
        if _null_based(v):
            return v  # an offset from null (a std::vector's end when it is empty) points to no memory
        if isinstance(v, GlobalRef) and v.symbol in self.fn.module.functions:
            return v  # a function (a default for a function pointer read from memory): its own shadow, as the
            # pointers to code that memory with derivatives holds are (calls through them compare with candidates)

        from enzcc.ad.activity import is_user_call
        from enzcc.ad.usercalls import not_inlined_error

        if isinstance(v, Call) and is_user_call(v):
            raise not_inlined_error(v, f"returns {v.type}")
        if self.activity.runtime_activity:
            return v  # (runtime activity: its own shadow, inactive where it is the one chosen)
        raise ad_error(f"a {user.opcode} mixes memory with derivatives and {describe_pointer(v)}, which has no "
                       "shadow memory (such as a constant table or a buffer never used for floating-point data)",
                       user, fn=self.fn)

    def _zero_shadow_of_constant(self, v: Value):
        """A constant global without pointers (a table of numbers, or a global that differentiated code only
        reads) merged with memory that has derivatives: its derivative is zero. Forward mode reads its shadow: a zero-filled constant of the same type. Reverse
        mode adds adjoints into the shadow of what it read: a zero-filled global that only ever receives them
        (nothing reads it for a result, as the table cannot be written)."""
        from enzcc.ad.activity import has_pointer
        from enzcc.ir.values import GlobalRef

        if not isinstance(v, GlobalRef):
            return None
        from enzcc.ad.globals import active_globals

        module = self.fn.module
        gv = module.globals.get(v.symbol)
        # (a mutable global that differentiated code never writes is as constant as a table, for the derivative)
        if gv is None or not (gv.is_constant or v.symbol not in active_globals(module)) or gv.value_type is None \
                or gv.is_declaration or has_pointer(gv.value_type):
            return None
        forward = self.activity.mode == "forward"
        name = f"__enzcc_{'zero' if forward else 'sink'}_shadow.{v.symbol}"
        if name not in module.globals:
            module.add_global(name, gv.value_type, constant=forward, align=16)
        return module.global_ref(name)

    def _store_pointer(self, store: Store) -> None:
        """Storing a pointer into shadowed memory stores its shadow into the shadow memory."""
        val = store.value
        shadow_val = self._map.get(id(val))
        if shadow_val is None:
            # a pointer without derivatives: its shadow slot holds null (runtime activity: the pointer itself, its
            # own shadow, so that what is read through it later is inactive rather than a null shadow)
            shadow_val = val if self.activity.runtime_activity else ConstantNull(val.type)
        dest = self.of(store.pointer, store)
        b = IRBuilder.after(store)
        if self.activity.runtime_activity:  # (the primal pointer again where the memory is inactive)
            from enzcc.ad.runtime_activity import differs, shadow_or_primal

            shadow_val = shadow_or_primal(b, differs(b, store.pointer, dest), shadow_val, val)
        b.store(shadow_val, dest, align=store.align)

    def _shadow_allocation(self, call: Call) -> Value:
        """A zero-filled shadow allocation of the same size, always from the C heap (it is released with
        ``free``, also when the primal came from C++ ``new``)."""
        name = call.callee_name
        b = IRBuilder.after(call)
        module = self.fn.module
        if name == "calloc":
            s = b.call(module.get_or_insert_function("calloc", T.FunctionType(T.ptr, (T.i64, T.i64))),
                       list(call.args))
        elif name == "realloc":
            return self._shadow_realloc(call, b)
        elif name not in ALLOCATORS:  # registered with __enzyme_allocation_like: the same call again
            from enzcc.ad.hints import hints_of

            size_index = hints_of(module).allocators[name][0]
            s = b.call(module.functions[name], list(call.args))
            b.memset(s, 0, to_i64(b, call.args[size_index]))
        elif name == "aligned_alloc":
            s = b.call(module.get_or_insert_function(name, call.function_type), list(call.args))
            zero_heap_shadow(b, module, s, to_i64(b, call.args[1]))
        else:
            size = to_i64(b, call.args[0])
            if shadow_reuse.reusing(module, self.activity.mode):  # (memory the last call freed, if large enough)
                s, spare = shadow_reuse.take(b, module, size)
                self.spares[id(s)] = spare
            else:
                s = b.call(module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,))), [size])
            zero_heap_shadow(b, module, s, size)
        self.allocations.append((call, s))
        return s

    def _shadow_posix_memalign(self, call: Call) -> None:
        """``posix_memalign(&p, align, n)``: a zero-filled shadow allocation with the same alignment, whose
        address goes into the shadow of ``p``."""
        module = self.fn.module
        b = IRBuilder.after(call)
        fn = module.get_or_insert_function("posix_memalign", call.function_type)
        b.call(fn, [self.of(call.args[0], call), call.args[1], call.args[2]])
        s = b.load(T.ptr, self.of(call.args[0], call))
        zero_heap_shadow(b, module, s, to_i64(b, call.args[2]))
        self.allocations.append((call, s))

    def _shadow_realloc(self, call: Call, b: IRBuilder) -> Value:
        """``q = realloc(p, n)``: a fresh zero-filled shadow of ``n`` bytes that receives the old shadow's
        bytes (as many as both hold). The old shadow stays alive in reverse mode, whose sweep moves the
        adjoints back into it at the realloc (see :func:`realloc_old_shadow`); forward mode frees it, as the
        primal's memory was."""
        module = self.fn.module
        old = self.shadow_or_null(call.args[0])
        size = to_i64(b, call.args[1])
        s = b.call(module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,))), [size])
        zero_heap_shadow(b, module, s, size)
        live = old
        if self.activity.runtime_activity and not isinstance(old, ConstantNull):
            from enzcc.ad.runtime_activity import differs  # (the old memory itself: released, no derivatives)

            live = b.select(differs(b, call.args[0], old), old, ConstantNull(T.ptr))
        b.memcpy(s, live, b.call_intrinsic("llvm.umin", [usable_size(b, module, live), size], [T.i64]))
        if self.activity.mode == "forward" and any(a is old for _, a in self.allocations):
            b.call(module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,))), [old])
        self.allocations.append((call, s))
        return s

    def shadow_or_null(self, p: Value) -> Value:
        """The shadow of ``p``, or null for a pointer into memory without derivatives."""
        return self._map.get(id(p)) or ConstantNull(T.ptr)


def zero_heap_shadow(b: IRBuilder, module, s: Value, size: Value) -> None:
    """Zero a shadow allocation from the C heap over all the bytes it can hold, not only the ``size``
    requested: a ``realloc`` of the memory copies ``malloc_usable_size`` bytes of the old shadow (the old
    requested size is not known there), and the slack would otherwise bring the heap's leftovers (or a
    reused shadow's old adjoints) in as derivatives of the new elements. (GPU heaps have no
    ``malloc_usable_size``: there the requested size.)"""
    if not module.targets_gpu:
        size = usable_size(b, module, s)
    b.memset(s, 0, size)


def usable_size(b: IRBuilder, module, p: Value) -> Value:
    """Bytes usable at heap pointer ``p`` (0 for null): what a shadow allocation can give back."""
    return b.call(module.get_or_insert_function("malloc_usable_size", T.FunctionType(T.i64, (T.ptr,))), [p])


def to_i64(b: IRBuilder, v: Value) -> Value:
    if v.type == T.i64:
        return v
    return b.zext(v, T.i64) if v.type.bits < 64 else b.trunc(v, T.i64)
