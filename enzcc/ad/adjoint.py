"""The reverse of each instruction (the role of Enzyme's AdjointGenerator): adjoint slots, and the
derivative of every instruction, store, memory intrinsic and call in one place. :class:`AdjointGenerator` is
mixed into :class:`enzcc.ad.reverse.ReverseMode`, which decides the order and the control flow.
"""

from __future__ import annotations


import enzcc.ad.runtime_activity as runtime_activity
from enzcc.ad.activity import has_float, is_user_call
from enzcc.ad.runtime_activity import no_adjoint
from enzcc.ad.api import CONST, DUP, OUT, is_float
from enzcc.ad.atomics import read_shadow, reverse_atomic_add
from enzcc.ad.emit import add_values, atomic_add, emit_partial, fail_call_at_run_time, splat, times, zero
from enzcc.ad.memory import is_thread_private
from enzcc.ad.threads import ExclusiveSpans, ThreadOwnership, WrittenElements, summed_in_thread
from enzcc.ad.errors import ad_error, no_rule_error
from enzcc.ad.inline import unknown_target_message
from enzcc.ad.hints import hints_of
from enzcc.ad.registry import rule_for
from enzcc.ad.usercalls import call_kinds, check_call_signature, variadic_call_stays
from enzcc.ad.prepare import inactive_functions, is_inactive_call
from enzcc.ir import types as T
from enzcc.ir.block import BasicBlock
from enzcc.ir.builder import IRBuilder
from enzcc.ir.errors import IRError
from enzcc.ir.instructions import (Alloca, AtomicRMW, BinaryOp, Call, Cast, ExtractElement, ExtractValue, FCmp, Freeze,
                                   GetElementPtr, ICmp, InsertElement, InsertValue, Instruction, Load, Select,
                                   ShuffleVector, Store, UnaryOp)
from enzcc.ir.values import (Argument, Constant, ConstantInt, ConstantPoison, ConstantUndef, ConstantZero,
                             InlineAsm, Value)




class AdjointGenerator:
    """Adjoints and per-instruction reverse code of a :class:`enzcc.ad.reverse.ReverseMode`."""

    # -- adjoints -------------------------------------------------------------------------------

    def _slot(self, v: Value, ty: T.Type | None = None) -> Instruction:
        s = self.adjoint_slots.get(id(v))
        if s is None:
            if id(v) in self.taken_in_ssa:
                raise IRError(f"the adjoint of {v.ref()} was taken as an SSA value before a contribution to it "
                              "was made elsewhere")
            ty = ty or v.type
            b = IRBuilder.at_start(self.G.entry_block)
            s = b.alloca(ty, in_entry=True)
            IRBuilder.after(s).store(zero(ty), s)  # zeroed at entry (allocas go first, each with its store)
            self.adjoint_slots[id(v)] = s
            self._keep.append(v)
            running = self.running_adjoints.pop(id(v), None)
            if running is not None:  # the sum so far, from where it was made
                IRBuilder.after(running).store(running, s)
        return s

    def _running(self, b: IRBuilder, v: Value, ty: T.Type | None = None):
        """Whether ``adjoint(v)`` may be kept as an SSA value at ``b``, and its value so far there (None: zero).

        A value whose every use is in its own block, none of them a phi, gets its contributions only from the
        reverse of that block, made before its own reverse (the take): its adjoint needs no stack slot while they
        are all appended to the same block. Anything else (another block, an insertion point inside a block, a
        slot someone asked for) puts the sum so far into a slot (:meth:`_slot`) and goes on with the slot."""
        if id(v) not in self.ssa_adjoint_values or b.anchor is not None or (ty is not None and ty != v.type) or \
                id(v) in self.adjoint_slots:
            return False, None
        running = self.running_adjoints.get(id(v))
        if running is not None and running.parent is not b.block:
            return False, None
        return True, running

    def _add_adjoint(self, b: IRBuilder, v: Value, contribution: Value) -> None:
        """``adjoint(v) += contribution`` (nothing for constants and inactive values)."""
        if isinstance(v, Constant) or not (self.activity.is_active(v) or
                                           (isinstance(v, Argument) and self._is_out_arg(v))):
            return
        if id(v) in self.taken_in_ssa:
            raise IRError(f"a contribution to the adjoint of {v.ref()} was made after it was taken as an SSA value")
        ssa, running = self._running(b, v)
        if ssa and contribution.type == v.type and (running is not None or (
                isinstance(contribution, Instruction) and contribution.parent is b.block)):
            # (the sum lives in the block it was made in: the slot it may need later is filled from there)
            self.running_adjoints[id(v)] = contribution if running is None else add_values(b, running, contribution)
            return
        slot = self._slot(v)
        old = b.load(v.type, slot)
        b.store(add_values(b, old, contribution), slot)

    def _is_out_arg(self, v: Argument) -> bool:
        return v.index < self.nprimal and self.kinds[v.index] == OUT

    def _take_adjoint(self, b: IRBuilder, v: Value, ty: T.Type | None = None) -> Value:
        """Load and reset ``adjoint(v)`` (reset matters in loops)."""
        ty = ty or v.type
        ssa, running = self._running(b, v, ty)
        if ssa:
            self.running_adjoints.pop(id(v), None)
            self.taken_in_ssa.add(id(v))
            return zero(ty) if running is None else running
        slot = self._slot(v, ty)
        d = b.load(ty, slot)
        b.store(zero(ty), slot)
        return d

    def _bits_type(self, v: Value):
        """For an integer loaded from floating-point memory (a float copied as bits): that float type."""
        if isinstance(v, Load) and isinstance(v.type, T.IntType) and self.activity.is_active_ptr(v.pointer):
            into_shadowed = any(isinstance(u.user, Store) and self.activity.is_active_ptr(u.user.pointer)
                                for u in v.uses)
            return self.memtypes.bits_type(v, required=into_shadowed)
        return None

    # -- one instruction ----------------------------------------------------------------------------

    def _reverse_instruction(self, inst: Instruction, block: BasicBlock, b: IRBuilder) -> None:
        act = self.activity
        if isinstance(inst, Store):
            self._reverse_store(inst, block, b)
            return
        if isinstance(inst, Call):
            self._reverse_call(inst, block, b)
            return
        if isinstance(inst, AtomicRMW):  # (the refused ones were refused before: :func:`check_atomics`)
            reverse_atomic_add(self, inst, block, b, self.concurrent)
            return
        bits = self._bits_type(inst)
        if bits is not None:  # the reverse of copying a float as an integer: its adjoint goes back to memory
            d = self._take_adjoint(b, inst, bits)
            self._add_to_memory(b, inst.pointer, self._shadow(inst.pointer, block, b, inst), d, inst.align,
                                block)
            return
        if not act.is_active(inst):
            return
        P = lambda v: self._primal(v, block, b)  # noqa: E731
        if isinstance(inst, (BinaryOp, UnaryOp)) and inst.opcode in self.rules.instructions:
            rule = self.rules.instructions[inst.opcode]
            d = self._take_adjoint(b, inst)
            env = {name: (lambda v=v: P(v)) for name, v in zip(rule.args, inst.operands)}
            env["ret"] = lambda: P(inst)
            for name, v in zip(rule.args, inst.operands):
                if name in rule.inactive or not act.is_active(v) and not self._is_out(v):
                    continue
                partial = emit_partial(b, rule, name, env, inst.type)
                self._add_adjoint(b, v, times(b, partial, d))
        elif isinstance(inst, Load):
            d = self._take_adjoint(b, inst)
            if self.activity.is_active_ptr(inst.pointer):
                self._add_to_memory(b, inst.pointer, self._shadow(inst.pointer, block, b, inst), d, inst.align,
                                    block)
        elif isinstance(inst, Cast):
            d = self._take_adjoint(b, inst)
            if inst.opcode in ("fpext", "fptrunc"):
                self._add_adjoint(b, inst.value, b.cast("fptrunc" if inst.opcode == "fpext" else "fpext", d,
                                                        inst.value.type))
            elif inst.opcode == "bitcast" and has_float(inst.value.type):
                self._add_adjoint(b, inst.value, b.bitcast(d, inst.value.type))
            else:
                raise ad_error(f"cannot differentiate '{inst.opcode}' of a value with derivatives", inst)
        elif isinstance(inst, Select):
            d = self._take_adjoint(b, inst)
            c = P(inst.condition)
            z = zero(inst.type)
            self._add_adjoint(b, inst.true_value, b.select(c, d, z))
            self._add_adjoint(b, inst.false_value, b.select(c, z, d))
        elif isinstance(inst, Freeze):
            self._add_adjoint(b, inst.value, self._take_adjoint(b, inst))
        elif isinstance(inst, ExtractValue):
            d = self._take_adjoint(b, inst)
            agg = inst.aggregate
            self._add_adjoint(b, agg, b.insert_value(zero(agg.type), d, list(inst.indices)))
        elif isinstance(inst, InsertValue):
            d = self._take_adjoint(b, inst)
            self._add_adjoint(b, inst.value, b.extract_value(d, list(inst.indices)))
            self._add_adjoint(b, inst.aggregate, b.insert_value(d, zero(inst.value.type), list(inst.indices)))
        elif isinstance(inst, ExtractElement):
            d = self._take_adjoint(b, inst)
            vec = inst.vector
            self._add_adjoint(b, vec, b.insert_element(zero(vec.type), d, P(inst.index_operand)))
        elif isinstance(inst, InsertElement):
            d = self._take_adjoint(b, inst)
            idx = P(inst.index_operand)
            self._add_adjoint(b, inst.element, b.extract_element(d, idx))
            self._add_adjoint(b, inst.vector, b.insert_element(d, splat(inst.element.type, 0.0), idx))
        elif isinstance(inst, ShuffleVector):
            d = self._take_adjoint(b, inst)
            self._reverse_shuffle(inst, d, b)
        elif isinstance(inst, (FCmp, ICmp, GetElementPtr, Alloca)):
            return
        else:
            raise ad_error(f"cannot differentiate instruction '{inst.opcode}'", inst)

    def _is_out(self, v: Value) -> bool:
        return isinstance(v, Argument) and self._is_out_arg(v)

    @property
    def concurrent(self) -> bool:
        """The reverse code runs in several threads at once, which may add to the same adjoints in memory: in an
        OpenMP parallel region (:attr:`parallel`) or on a GPU, where every thread of a kernel runs it."""
        return self.parallel or self.module.targets_gpu

    def owns(self, p: Value) -> bool:
        """Whether no other thread adds to the shadow of the memory at primal pointer ``p`` while this one does:
        the thread's own stack, or, on a GPU, an element only this thread accesses
        (:class:`enzcc.ad.threads.ThreadOwnership`, worked out from the primal instructions once)."""
        if is_thread_private(p):
            return True
        if not self.module.targets_gpu:
            if not self.parallel:
                return False
            if getattr(self, "_written", None) is None:
                primal = [i for insts in self.orig_insts.values() for i in insts]
                self._written = WrittenElements(self.module, self.activity, primal, self._noalias_params())
            return self._written.owns(p)
        if getattr(self, "_ownership", None) is None:
            primal = [i for insts in self.orig_insts.values() for i in insts]
            self._ownership = ThreadOwnership(self.module, self.activity, primal,
                                              lambda v: self.lane_shadows[0].of(v))
        return self._ownership.owns(p)

    def _add_to_memory(self, b: IRBuilder, p: Value, sp: Value, d: Value, align, block=None) -> None:
        """``*sp += d``, ``sp`` the shadow of primal pointer ``p``: atomically when other threads may add to
        the same memory (:attr:`concurrent`, unless the thread :meth:`owns` it). With runtime activity (``block``:
        the primal block, where ``p`` is read), nothing is added where the shadow is the memory itself."""
        active = self._active_at_run_time(p, sp, block, b)
        if self.concurrent and not self.owns(p):
            if active is None and self._sum_in_thread(b, p, sp, d, align):
                return
            if active is None and block is not None and self._add_where_exclusive(b, p, sp, d, align, block):
                return
            atomic_add(self.module, b, sp, d if active is None else b.select(active, d, no_adjoint(d.type)), align)
            return
        old = b.load(d.type, sp, align=align)
        new = add_values(b, old, d)
        b.store(new if active is None else b.select(active, new, old), sp, align=align)

    def _add_where_exclusive(self, b: IRBuilder, p: Value, sp: Value, d: Value, align, block) -> bool:
        """In an OpenMP parallel function: ``*sp += d`` plainly where no other thread of the team accessed the
        bytes at ``p``, atomically elsewhere (:class:`enzcc.ad.threads.ExclusiveSpans`: each thread's spans of
        memory accessed by plain loads and stores, recorded by the forward code); False where that does not apply."""
        if not self.parallel or self.module.targets_gpu:
            return False
        if getattr(self, "_spans", None) is None:
            primal = [i for insts in self.orig_insts.values() for i in insts]
            self._spans = ExclusiveSpans(self.module, self.activity, primal, self._noalias_params(), self.owns)
        return self._spans.add(self, b, p, sp, d, align, block)

    def _noalias_params(self) -> set[int]:
        """ids of this function's pointer parameters that the function it was copied from declares ``noalias``."""
        params = self.dc.fn.args
        return {id(a) for a in self.G.args if a.index < len(params) and isinstance(a.type, T.PointerType) and
                "noalias" in params[a.index].attrs}

    def _sum_in_thread(self, b: IRBuilder, p: Value, sp: Value, d: Value, align) -> bool:
        """In an OpenMP parallel function: ``*sp += d`` into a slot of the thread's own when the adjoints of
        ``p`` can be summed there (:func:`enzcc.ad.threads.summed_in_thread`: a shared scalar the region only
        reads, such as a coefficient read in every iteration); :meth:`flush_thread_sums` adds the slot to the
        shadow once, atomically, at the end of the reverse code. Instead of one atomic add per iteration."""
        if not self.parallel or self.module.targets_gpu or not isinstance(d.type, T.FloatType) or \
                not isinstance(sp, Argument):
            return False
        sums = self.__dict__.setdefault("_thread_sums", {})
        key = (id(sp), str(d.type))
        if key not in sums:
            primal = {id(i) for insts in self.orig_insts.values() for i in insts}
            sums[key] = None
            if not summed_in_thread(p, id(p) in self._noalias_params(), primal):
                return False
            eb = IRBuilder.at_start(self.G.entry_block)
            slot = eb.alloca(d.type, in_entry=True)
            IRBuilder.after(slot).store(zero(d.type), slot)  # (the thread's frame: its tape, in split mode)
            sums[key] = (slot, sp, d.type, align)
        if sums[key] is None:
            return False
        slot = sums[key][0]
        b.store(b.fadd(b.load(d.type, slot), d), slot)
        return True

    def flush_thread_sums(self, b: IRBuilder) -> None:
        """At the end of the reverse code (``b``): each thread's sums (:meth:`_sum_in_thread`) added to their
        shadows, one atomic add each."""
        for slot, sp, ty, align in filter(None, getattr(self, "_thread_sums", {}).values()):
            atomic_add(self.module, b, sp, b.load(ty, slot), align)

    def _active_at_run_time(self, p: Value, sp: Value, block, b: IRBuilder) -> Value | None:
        """With runtime activity, ``p != sp`` in the reverse sweep (``sp``: the shadow already read there); None
        without it."""
        if block is None or not runtime_activity.enabled(self.activity):
            return None
        return runtime_activity.differs(b, self._primal(p, block, b), sp)

    def _reverse_shuffle(self, inst: ShuffleVector, d: Value, b: IRBuilder) -> None:
        a, c = inst.operands[0], inst.operands[1]
        n = a.type.count
        m = inst.mask
        if isinstance(m, ConstantZero):  # a splat of lane 0
            mask = [0] * inst.type.count
        elif isinstance(m, (ConstantPoison, ConstantUndef)):
            mask = [-1] * inst.type.count
        else:
            mask = [e.value if isinstance(e, ConstantInt) else -1 for e in getattr(m, "elements", [])]
        if not mask:
            raise ad_error("cannot differentiate shufflevector with this mask", inst)
        da, dc = zero(a.type), zero(c.type)
        for j, m in enumerate(mask):
            if m < 0:
                continue
            lane = b.extract_element(d, j)
            if m < n:
                da = b.insert_element(da, b.fadd(b.extract_element(da, m), lane), m)
            else:
                dc = b.insert_element(dc, b.fadd(b.extract_element(dc, m - n), lane), m - n)
        self._add_adjoint(b, a, da)
        self._add_adjoint(b, c, dc)

    def _reverse_store(self, inst: Store, block: BasicBlock, b: IRBuilder) -> None:
        if not self.activity.is_active_ptr(inst.pointer):
            if self.activity.is_active(inst.value):
                pass  # written into memory without derivatives (an enzyme_const buffer): the derivative stops
            return
        ty = inst.value.type
        bits = self._bits_type(inst.value)
        if bits is not None:
            sp = self._shadow(inst.pointer, block, b, inst)
            d = self._take_from_memory(b, inst.pointer, sp, bits, inst.align, block)
            slot = self._slot(inst.value, bits)
            b.store(b.fadd(b.load(bits, slot), d), slot)
            return
        if self.memtypes.overwrites_float(inst):  # the float it overwrites has no derivative any more
            sp = self._shadow(inst.pointer, block, b, inst)
            if runtime_activity.enabled(self.activity):
                self._take_from_memory(b, inst.pointer, sp, ty, inst.align, block)
            else:
                b.store(zero(ty), sp, align=inst.align)
            return
        if not has_float(ty):
            return  # integers and pointers carry no adjoint (pointer shadows were stored going forward)
        sp = self._shadow(inst.pointer, block, b, inst)
        if inst.ordering is not None and isinstance(ty, T.FloatType) and self.concurrent and \
                not self.owns(inst.pointer):
            if runtime_activity.enabled(self.activity):
                raise ad_error("enzyme_runtime_activity with an atomic store in parallel code is not supported", inst)
            # (an atomic store in threads: other threads' reverse code may add to this shadow meanwhile)
            d = read_shadow(b, ty, sp, inst.align, True)
            b.insert(Store(zero(ty), sp, inst.align, ordering="monotonic"))
        else:
            d = self._take_from_memory(b, inst.pointer, sp, ty, inst.align, block)
        self._add_adjoint(b, inst.value, d)

    def _take_from_memory(self, b: IRBuilder, p: Value, sp: Value, ty: T.Type, align, block) -> Value:
        """The adjoint in shadow memory ``sp`` (of primal pointer ``p``), which is zeroed: the reverse of a store.
        With runtime activity, where the shadow is the memory itself, zero, and the memory is left as it is."""
        d = b.load(ty, sp, align=align)
        active = self._active_at_run_time(p, sp, block, b)
        if active is None:
            b.store(zero(ty), sp, align=align)
            return d
        b.store(b.select(active, zero(ty), d), sp, align=align)
        return b.select(active, d, zero(ty))

    def _prepare_user_calls(self) -> None:
        """A call that was not inlined (recursion) through which derivatives flow becomes, in the forward code,
        a call to the callee's augmented primal, which returns the result and a tape; the reverse code calls
        the callee's reverse function with that tape (:meth:`_reverse_user_call`)."""
        self.user_calls: dict[int, tuple] = {}
        self.rule_calls: dict[int, tuple] = {}
        """Calls whose rule augmented them: the rule and what its reverse needs (:mod:`enzcc.ad.registry`)."""
        if self.logic is None:
            return
        act = self.activity
        inactive = inactive_functions(self.module)
        for block in self.blocks:
            insts = self.orig_insts[id(block)]
            for i, inst in enumerate(insts):
                if not isinstance(inst, Call):
                    continue
                rule = rule_for(inst)
                if rule is not None and rule.augment is not None:
                    made = rule.augment(self, inst)
                    if made is not None:  # the rule keeps what its reverse needs (and may replace the call)
                        anchor, entry, kept = made
                        insts[i] = anchor
                        self.rule_calls[id(anchor)] = (rule, entry)
                        self._keep += [anchor, *kept]
                        continue
                if not is_user_call(inst) or inst.callee_name in inactive:
                    continue
                kinds = call_kinds(inst, act, lambda a: act.is_active(a) or self._is_out(a), OUT)
                ret_active = is_float(inst.type) and act.is_active(inst)
                if variadic_call_stays(inst, act, ret_active):
                    continue  # no derivative comes out of it: the primal call stays
                if all(k == CONST for k in kinds) and not ret_active and not act.is_active_ptr(inst) and \
                        not any(act.is_active_ptr(a) or act.is_active(a) for a in inst.args) and \
                        not act.reaches_active_globals(inst):
                    continue  # no derivative flows through it: the primal call stays
                if inst.callee_name in hints_of(self.module).splitderivative:
                    raise ad_error(f"'{inst.callee_name}' has only a forward split mode derivative registered "
                                   "(__enzyme_register_splitderivative_*); register a gradient "
                                   "(__enzyme_register_gradient_*) to differentiate this call in reverse mode", inst)
                check_call_signature(inst, act)
                if self.width > 1 and OUT in kinds:
                    k = kinds.index(OUT)
                    raise ad_error(f"vector mode (enzyme_width) with a call to '{inst.callee_name}' that is not "
                                   f"inlined and takes a float with a derivative by value (argument {k + 1}) is "
                                   "not supported", inst)
                callee = self.module.functions[inst.callee_name]
                nargs = len(inst.args)
                stand_in = self.lane_shadows[0].call_shadows.get(id(inst))
                aug, rev = self.logic.split_of_call(inst, callee, kinds, ret_active, parallel=self.parallel,
                                                    width=self.width, shadow_return=stand_in is not None)
                b = IRBuilder.before(inst)
                args = list(inst.args) + [self.lane_shadows[lane].of(a, inst) for a, k in zip(inst.args, kinds)
                                          if k == DUP for lane in range(self.width)]
                new = b.call(aug, args)
                tape = b.extract_value(new, [0])
                result = None
                if not isinstance(inst.type, T.VoidType):
                    result = b.extract_value(new, [1])
                    inst.replace_all_uses_with(result)
                    if ret_active:
                        act._mark(act.varied, result)
                        act._mark(act.useful, result)
                if stand_in is not None:  # a pointer to memory with derivatives: its shadows come after it
                    act._mark(act.active_ptrs, result)
                    for lane, shadows in enumerate(self.lane_shadows):
                        shadow = b.extract_value(new, [2 + lane])
                        shadows.call_shadows[id(inst)].replace_all_uses_with(shadow)
                        shadows._set(result, shadow)
                inst.erase()
                insts[i] = new
                self.user_calls[id(new)] = ("split", (new, nargs, rev, kinds, tape, result, ret_active))
                self._keep.append(new)

    def note_free(self, call: Call, kind: str) -> Call:
        """Record a call of the reverse code that releases memory (see :data:`SHADOW_FREE`): a reverse function
        that replays its tape (:func:`enzcc.ad.split.replay_variant`) does without it."""
        self.reverse_frees[id(call)] = (call, kind)
        return call

    def _reverse_user_call(self, entry: tuple, block: BasicBlock, b: IRBuilder) -> None:
        call, nargs, rev, kinds, tape, result, ret_active = entry
        if self.lane != self.width - 1:  # vector mode: one reverse call for all lanes, from the last
            return                       # (the call is alone in its block: see _isolate_lane_calls)
        args = [self._primal(a, block, b) for a in call.args]
        if ret_active:
            for lane in range(self.width):
                self._use_lane(lane)
                args.append(self._take_adjoint(b, result))
        args.append(self._primal(tape, block, b))
        r = b.call(rev, args)
        self.note_free(r, NESTED_REVERSE)  # (it frees the callee's tape)
        outs = [a for a, k in zip(call.args[:nargs], kinds) if k == OUT]
        if len(outs) == 1:
            self._add_adjoint(b, outs[0], r)
        else:
            for j, a in enumerate(outs):
                self._add_adjoint(b, a, b.extract_value(r, [j]))

    def _reverse_call(self, inst: Call, block: BasicBlock, b: IRBuilder) -> None:
        user_call = self.user_calls.get(id(inst))
        if user_call is not None:
            self._reverse_user_call(user_call[1], block, b)
            return
        augmented = self.rule_calls.get(id(inst))
        if augmented is not None:
            rule, entry = augmented
            rule.reverse(self, inst, entry, block, b)
            return
        name = inst.callee_name or ""
        if name in inactive_functions(self.module) or \
                name in hints_of(self.module).deallocators:  # (a shadow goes at the reverse of its allocation)
            return
        rule = rule_for(inst)
        if rule is not None and rule.reverse is not None and rule.reverse(self, inst, None, block, b):
            return
        act = self.activity
        active_args = [a for a in inst.args if act.is_active(a) or act.is_active_ptr(a) or self._is_out(a)]
        if not active_args and not act.is_active(inst):
            return  # no derivatives flow through this call
        if is_inactive_call(name) or is_user_call(inst) and \
                variadic_call_stays(inst, act, is_float(inst.type) and act.is_active(inst)):
            return
        if not name and not isinstance(inst.callee, InlineAsm):  # no candidates: the reverse sweep stops here
            fail_call_at_run_time(self.module, b, unknown_target_message(inst))
            return
        raise no_rule_error(inst, name, self.module)


SHADOW_FREE, TAPE_FREE, NESTED_REVERSE = "shadow", "tape", "nested"
"""What the calls of :attr:`AdjointGenerator.reverse_frees` release: shadow memory (its argument), memory only the
derivative uses (the tape's buffer, the primal allocations whose bytes the reverse sweep read again), a callee's
tape (a call to its reverse function)."""

__all__ = ["AdjointGenerator", "NESTED_REVERSE", "SHADOW_FREE", "TAPE_FREE"]
