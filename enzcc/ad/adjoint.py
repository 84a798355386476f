"""The reverse of each instruction (the role of Enzyme's AdjointGenerator): adjoint slots, and the
derivative of every instruction, store, memory intrinsic and call in one place. :class:`AdjointGenerator` is
mixed into :class:`enzcc.ad.reverse.ReverseMode`, which decides the order and the control flow.
"""

from __future__ import annotations


from enzcc.ad.activity import has_float, is_allocation, is_user_call
from enzcc.ad.api import CONST, DUP, OUT, is_float
from enzcc.ad.emit import add_values, emit_partial, splat, times, zero
from enzcc.ad.errors import ad_error, no_rule_error
from enzcc.ad import blas, checkpoint, custom, fixed_point, mirror, openmp, shadow_reuse
from enzcc.ad.checkpoint import is_checkpoint
from enzcc.ad.fixed_point import is_fixed_point
from enzcc.ad import complex as complex_
from enzcc.ad.hints import hints_of, rule_name
from enzcc.ad.iters import is_iter
from enzcc.ad.typehints import is_hint
from enzcc.ad.logic import call_kinds, check_call_signature
from enzcc.ad.prepare import INPUT_CALLS, inactive_functions
from enzcc.ad.shadow import to_i64, usable_size
from enzcc.ir import types as T
from enzcc.ir.block import BasicBlock
from enzcc.ir.builder import IRBuilder
from enzcc.ir.errors import IRError
from enzcc.ir.instructions import (Alloca, BinaryOp, Call, Cast, ExtractElement, ExtractValue, FCmp, Freeze,
                                   GetElementPtr, ICmp, InsertElement, InsertValue, Instruction, Load, Select,
                                   ShuffleVector, Store, UnaryOp)
from enzcc.ir.values import (Argument, Constant, ConstantInt, ConstantNull, ConstantPoison, ConstantUndef, ConstantZero,
                             Value)




#: calls that never carry derivatives and are kept in the forward sweep as they are
INACTIVE_CALLS = {"printf", "fprintf", "puts", "putchar", "fputs", "fflush", "abort", "exit", "free", "fwrite",
                  "time", "clock", "rand", "srand", "assert", "__assert_fail", "omp_get_thread_num", "sprintf",
                  "snprintf", "__cxa_guard_acquire", "__cxa_guard_release", "_ZdlPv", "_ZdaPv", "_ZdlPvm",
                  "malloc_usable_size", "strlen", "strnlen", "strcmp", "strncmp", "memcmp", "bcmp",
                  "_ZSt11_Hash_bytesPKvmm", "_ZSt15_Fnv_hash_bytesPKvmm"}
#: const member functions of std::string (size, data, compare, find...): they read characters only
STRING_QUERY_PREFIXES = ("_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE",
                         # its other members (constructors, assignment, append, destructor) too: they move
                         # characters, never floats, even where the string is a field of memory with derivatives
                         # (a map's key in its node); the shadow's copy of the string is never used as one
                         "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE")
#: C++ output streams (std::ostream members, std::operator<< for text, std::endl): they only print
OUTPUT_STREAM_PREFIXES = ("_ZNSo", "_ZStlsISt11char_traitsIcE", "_ZSt16__ostream_insertIcSt11char_traitsIcE",
                          "_ZSt4endlIcSt11char_traitsIcE", "_ZSt5flushIcSt11char_traitsIcE",
                          # wide streams (std::wcout)
                          "_ZNSt13basic_ostreamIwSt11char_traitsIwEE", "_ZStlsIwSt11char_traitsIwEE",
                          "_ZStlsISt11char_traitsIwEE", "_ZSt16__ostream_insertIwSt11char_traitsIwEE",
                          "_ZSt4endlIwSt11char_traitsIwEE", "_ZSt5flushIwSt11char_traitsIwEE")


#: the OpenMP runtime's bookkeeping (thread numbers, loop bounds of a thread, barriers, critical, single and
#: master sections): it moves integers only; the derivative code of a parallel region runs in the same threads,
#: inside the same sections (``__kmpc_fork_call`` itself, and the reverse of barriers and critical sections:
#: :mod:`enzcc.ad.openmp`, which also turns reductions into critical sections)
OPENMP_INACTIVE_PREFIXES = ("__kmpc_for_static_init_", "__kmpc_for_static_fini", "__kmpc_global_thread_num",
                            "__kmpc_barrier", "__kmpc_critical", "__kmpc_end_critical", "__kmpc_dispatch_init_",
                            "__kmpc_dispatch_next_", "__kmpc_dispatch_fini_", "__kmpc_push_num_threads",
                            "__kmpc_single", "__kmpc_end_single", "__kmpc_master", "__kmpc_end_master",
                            "__kmpc_masked", "__kmpc_end_masked", "omp_get_num_threads", "omp_get_max_threads")


def is_inactive_call(name: str) -> bool:
    """Library calls that never carry derivatives (output, time, exit...), or whose effect on memory was made
    an ordinary store when the function was prepared (input: :data:`enzcc.ad.prepare.INPUT_CALLS`), or whose
    work on shadows is done in the forward code (:mod:`enzcc.ad.mirror`)."""
    return name in INACTIVE_CALLS or name.startswith(OUTPUT_STREAM_PREFIXES + STRING_QUERY_PREFIXES) or \
        name in INPUT_CALLS or \
        name.startswith(mirror.INACTIVE_PREFIXES) or mirror.is_mirrored(name) or \
        name.startswith(OPENMP_INACTIVE_PREFIXES) or is_iter(name) or is_hint(name)


#: loops with a reverse mode of their own: (is a call to one, the module with its ``augment``, ``kept_values``
#: and ``reverse``)
_LOOP_APIS = ((is_fixed_point, fixed_point), (is_checkpoint, checkpoint))

#: intrinsics with nothing to do in the reverse sweep
_IGNORED_INTRINSICS = ("llvm.lifetime.", "llvm.assume", "llvm.experimental.noalias.scope.decl", "llvm.dbg.",
                       "llvm.prefetch", "llvm.stacksave", "llvm.stackrestore", "llvm.invariant.", "llvm.trap",
                       "llvm.umax", "llvm.umin", "llvm.smax", "llvm.smin", "llvm.abs", "llvm.ctpop", "llvm.ctlz",
                       "llvm.cttz", "llvm.fshl", "llvm.fshr", "llvm.bswap", "llvm.is.fpclass", "llvm.sadd.",
                       "llvm.uadd.", "llvm.ssub.", "llvm.usub.", "llvm.smul.", "llvm.umul.", "llvm.expect",
                       "llvm.objectsize", "llvm.vscale")



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
        bits = self._bits_type(inst)
        if bits is not None:  # the reverse of copying a float as an integer: its adjoint goes back to memory
            d = self._take_adjoint(b, inst, bits)
            self._add_to_memory(b, inst.pointer, self._shadow(inst.pointer, block, b, inst), d, inst.align)
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
                self._add_to_memory(b, inst.pointer, self._shadow(inst.pointer, block, b, inst), d, inst.align)
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

    def _add_to_memory(self, b: IRBuilder, p: Value, sp: Value, d: Value, align) -> None:
        """``*sp += d``, ``sp`` the shadow of primal pointer ``p``: atomically when other threads may add to
        the same memory (an OpenMP parallel region, unless ``p`` is on the thread's own stack)."""
        if self.parallel and not openmp.is_private(self, p):
            openmp.atomic_add(self, b, sp, d, align)
            return
        b.store(add_values(b, b.load(d.type, sp, align=align), d), sp, align=align)

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
            d = b.load(bits, sp, align=inst.align)
            b.store(zero(bits), sp, align=inst.align)
            slot = self._slot(inst.value, bits)
            b.store(b.fadd(b.load(bits, slot), d), slot)
            return
        if self.memtypes.overwrites_float(inst):  # the float it overwrites has no derivative any more
            b.store(zero(ty), self._shadow(inst.pointer, block, b, inst), align=inst.align)
            return
        if not has_float(ty):
            return  # integers and pointers carry no adjoint (pointer shadows were stored going forward)
        sp = self._shadow(inst.pointer, block, b, inst)
        d = b.load(ty, sp, align=inst.align)
        b.store(zero(ty), sp, align=inst.align)
        self._add_adjoint(b, inst.value, d)

    def _prepare_user_calls(self) -> None:
        """A call that was not inlined (recursion) through which derivatives flow becomes, in the forward code,
        a call to the callee's augmented primal, which returns the result and a tape; the reverse code calls
        the callee's reverse function with that tape (:meth:`_reverse_user_call`)."""
        self.user_calls: dict[int, tuple] = {}
        if self.logic is None:
            return
        act = self.activity
        inactive = inactive_functions(self.module)
        for block in self.blocks:
            insts = self.orig_insts[id(block)]
            for i, inst in enumerate(insts):
                api = next((m for is_api, m in _LOOP_APIS if is_api(inst.callee_name)), None) \
                    if isinstance(inst, Call) else None
                if api is not None:  # the call's module makes its forward code and, later, its reverse
                    anchor, entry = api.augment(self, inst)
                    insts[i] = anchor
                    self.user_calls[id(anchor)] = ("loop", (api, entry))
                    self._keep.append(anchor)
                    if entry is not None:
                        self._keep += api.kept_values(entry)
                    continue
                if isinstance(inst, Call) and inst.callee_name == "__kmpc_fork_call":
                    entry = openmp.augment_fork(self, inst)
                    if entry is not None:
                        insts[i] = entry[0]
                        self.user_calls[id(entry[0])] = ("fork", entry)
                        self._keep += [entry[0], entry[4]]
                    continue
                if not isinstance(inst, Call) or not is_user_call(inst) or inst.callee_name in inactive:
                    continue
                if self.width > 1 and inst.callee_name in hints_of(self.module).gradient and \
                        (any(act.is_active_ptr(a) or act.is_active(a) for a in inst.args) or act.is_active(inst)):
                    raise ad_error(f"vector mode (enzyme_width) with a call to '{inst.callee_name}', which has a "
                                   "registered gradient (it takes one adjoint), is not supported", inst)
                if inst.callee_name in hints_of(self.module).gradient:  # the user's own derivative
                    entry = custom.augment_call(self, inst)
                    insts[i] = entry[0]
                    self.user_calls[id(entry[0])] = ("custom", entry)
                    self._keep.append(entry[0])
                    continue
                kinds = call_kinds(inst, act, lambda a: act.is_active(a) or self._is_out(a), OUT)
                ret_active = is_float(inst.type) and act.is_active(inst)
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

    def _prepare_blas_calls(self) -> None:
        """BLAS calls through which derivatives flow: the arrays their reverse reads are copied at the call
        (:mod:`enzcc.ad.blas`)."""
        self.blas_copies: dict[int, dict] = {}
        act = self.activity
        for block in self.blocks:
            for inst in self.orig_insts[id(block)]:
                if isinstance(inst, Call) and blas.routine(inst.callee_name) and \
                        (any(act.is_active_ptr(a) or act.is_active(a) for a in inst.args) or act.is_active(inst)):
                    if self.parallel:
                        raise ad_error(f"reverse mode through BLAS ('{inst.callee_name}') in an OpenMP parallel "
                                       "region is not supported", inst)
                    self.blas_copies[id(inst)] = blas.prepare_reverse(self, inst)

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
            kind, entry = user_call
            if kind == "custom":
                custom.reverse_call(self, entry, block, b)
            elif kind == "fork":
                openmp.reverse_fork(self, entry, block, b)
            elif kind == "loop":
                api, loop_entry = entry
                if loop_entry is not None:
                    api.reverse(self, loop_entry, block, b)
            else:
                self._reverse_user_call(entry, block, b)
            return
        name = inst.callee_name or ""
        if self.parallel and name in openmp.MIRRORED:
            openmp.mirror(self, inst, b)
            return
        act = self.activity
        if id(inst) in self.blas_copies:
            blas.reverse(self, inst, self.blas_copies[id(inst)], block, b)
            return
        if complex_.handles(inst):
            complex_.reverse(self, inst, block, b)
            return
        if name.startswith(_IGNORED_INTRINSICS) or name in inactive_functions(self.module) or \
                name in hints_of(self.module).deallocators:  # (a shadow goes at the reverse of its allocation)
            return
        if name.startswith(("llvm.memset",)):
            dest = inst.args[0]
            if act.is_active_ptr(dest):
                b.memset(self._shadow(dest, block, b, inst), 0, self._primal(inst.args[2], block, b))
            return
        if name.startswith(("llvm.memcpy", "llvm.memmove")):
            self._reverse_memcpy(inst, block, b)
            return
        if is_allocation(inst) or name == "posix_memalign":
            for call, shadow in self.shadows.allocations:
                if call is inst:
                    if name == "realloc":
                        self._reverse_realloc(inst, shadow, block, b)
                    if name in hints_of(self.module).allocators:  # its own deallocation function
                        _, dealloc, sources = hints_of(self.module).allocators[name]
                        b.call(self.module.functions[dealloc],
                               [self._primal(shadow if k < 0 else inst.args[k], block, b) for k in sources])
                        continue
                    spare = self.shadows.spares.get(id(shadow))
                    if spare is not None:  # (kept for the next call: enzcc.ad.shadow_reuse)
                        self.note_free(shadow_reuse.release(b, self.module, spare,
                                                            self._primal(shadow, block, b)), SHADOW_FREE)
                        continue
                    free = self.module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))
                    self.note_free(b.call(free, [self._primal(shadow, block, b)]), SHADOW_FREE)
            return
        if name.startswith("llvm.vector.reduce.fadd"):
            if act.is_active(inst):
                d = self._take_adjoint(b, inst)
                start, vec = inst.args
                self._add_adjoint(b, start, d)
                v = b.insert_element(zero(vec.type), d, 0)
                self._add_adjoint(b, vec, b.shuffle_vector(v, zero(vec.type), [0] * vec.type.count))
            return
        rule = self.rules.for_call(rule_name(self.module, name)) if name else None
        if rule is not None:
            if not act.is_active(inst):
                return  # e.g. its result reaches no output: nothing flows back
            d = self._take_adjoint(b, inst)
            P = lambda v: self._primal(v, block, b)  # noqa: E731
            env = {n: (lambda v=v: P(v)) for n, v in zip(rule.args, inst.args)}
            env["ret"] = lambda: P(inst)
            for n, v in zip(rule.args, inst.args):
                if n in rule.inactive or not (act.is_active(v) or self._is_out(v)):
                    continue
                partial = emit_partial(b, rule, n, env, inst.type)
                self._add_adjoint(b, v, times(b, partial, d))
            return
        active_args = [a for a in inst.args if act.is_active(a) or act.is_active_ptr(a) or self._is_out(a)]
        if not active_args and not act.is_active(inst):
            return  # no derivatives flow through this call
        if is_inactive_call(name):
            return
        raise no_rule_error(inst, name, self.module)

    def _reverse_realloc(self, inst: Call, shadow: Value, block: BasicBlock, b: IRBuilder) -> None:
        """The adjoints of the bytes ``realloc`` moved go back to the old shadow (kept alive until here)."""
        kind = self.memtypes.reallocated_kind(inst)
        if isinstance(kind, (T.PointerType, T.IntType)):
            return  # shadow pointers were copied going forward; integers and pointers carry no adjoint
        if kind == "bytes":
            # records of floats, integers and pointers in memory only this function allocated: the old
            # shadow's float slots still hold the zeros the forward sweep left there, its pointer slots the
            # shadow pointers copied going forward, so the new shadow's bytes are exactly what the old
            # shadow must hold now (adjoints, and the same pointers)
            old = self.shadows.shadow_or_null(inst.args[0])
            if isinstance(old, Constant):
                return
            old = self._primal(old, block, b)
            n = b.call_intrinsic("llvm.umin", [usable_size(b, self.module, old),
                                               to_i64(b, self._primal(inst.args[1], block, b))], [T.i64])
            b.call_intrinsic("llvm.memmove", [old, self._primal(shadow, block, b), n, ConstantInt(T.i1, 0)],
                             [T.ptr, T.ptr, T.i64])
            return
        if not isinstance(kind, T.FloatType):
            raise ad_error("cannot tell whether the memory realloc moves holds floating-point values", inst)
        if self.parallel:
            raise ad_error("reverse mode through realloc in an OpenMP parallel region is not supported", inst)
        old = self.shadows.shadow_or_null(inst.args[0])
        if isinstance(old, Constant):
            return  # the old memory had no derivatives (or was null): nothing to give back
        old = self._primal(old, block, b)
        n = b.call_intrinsic("llvm.umin", [usable_size(b, self.module, old),
                                           to_i64(b, self._primal(inst.args[1], block, b))], [T.i64])
        b.call(self.tape.memcpy_adjoint_helper(kind), [self._primal(shadow, block, b), old, n,
                                                        ConstantInt(T.i1, 1)])

    def _reverse_memcpy(self, inst: Call, block: BasicBlock, b: IRBuilder) -> None:
        dest, src, size = inst.args[0], inst.args[1], inst.args[2]
        act = self.activity
        if not act.is_active_ptr(dest) and not act.is_active_ptr(src):
            return
        if isinstance(dest, ConstantNull):
            return  # a copy into null (a path the optimizer left that would crash first): no adjoint
        kind = self.memtypes.copy_kind(inst)
        if kind is None and not act.is_active_ptr(src):
            # bytes without derivatives overwrite memory with them: whatever they are, the copy's shadow is zero
            # (the forward sweep zeroed it too), and so is the adjoint of what they overwrote
            b.memset(self._shadow(dest, block, b, inst), 0, self._primal(size, block, b))
            return
        if kind is None:
            fields = self.memtypes.copy_fields(inst)
            if fields is None:
                raise ad_error("cannot tell whether the memory this memcpy copies holds floating-point values "
                               "(nothing in the function or its caller reads or writes it with one type, or it "
                               "mixes them with pointers or integers at offsets enzcc cannot follow)", inst)
            if act.is_active_ptr(dest):  # each float field's adjoint goes back to the source's
                ddest = self._shadow(dest, block, b, inst)
                dsrc = self._shadow(src, block, b, inst)
                for at, k in fields:
                    if isinstance(k, T.FloatType):
                        pd, ps = b.gep(T.i8, ddest, [ConstantInt(T.i64, at)]), b.gep(T.i8, dsrc, [ConstantInt(T.i64, at)])
                        d = b.load(k, pd)
                        b.store(IRBuilder.const_zero(k), pd)
                        b.store(b.fadd(b.load(k, ps), d, flags=("nsz",)), ps)
            return
        if isinstance(kind, T.PointerType) or isinstance(kind, T.IntType):
            return  # pointers were copied into the shadow in the forward sweep; integers carry nothing
        n = self._primal(size, block, b)
        ddest = self._shadow(dest, block, b, inst) if act.is_active_ptr(dest) else None
        dsrc = self._shadow(src, block, b, inst) if act.is_active_ptr(src) else None
        if ddest is None:
            return
        if not isinstance(kind, T.FloatType) and self.parallel:
            raise ad_error(f"the reverse of a memcpy of {kind} in an OpenMP parallel region is not supported", inst)
        helper = self.tape.memcpy_adjoint_helper(kind, atomic=self.parallel and not openmp.is_private(self, src))
        b.call(helper, [ddest, dsrc if dsrc is not None else ddest, n,
                        ConstantInt(T.i1, int(dsrc is not None))])


SHADOW_FREE, TAPE_FREE, NESTED_REVERSE = "shadow", "tape", "nested"
"""What the calls of :attr:`AdjointGenerator.reverse_frees` release: shadow memory (its argument), memory only the
derivative uses (the tape's buffer, the primal allocations whose bytes the reverse sweep read again), a callee's
tape (a call to its reverse function)."""

__all__ = ["AdjointGenerator", "INACTIVE_CALLS", "NESTED_REVERSE", "SHADOW_FREE", "TAPE_FREE", "is_inactive_call"]
