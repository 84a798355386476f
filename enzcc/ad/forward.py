"""Forward mode: the primal computation with a tangent carried next to every active value.

The derivative function takes each parameter followed, for ``enzyme_dup`` parameters, by its tangent (a
scalar for floats, a shadow pointer for memory) and returns the tangent of the result.
"""

from __future__ import annotations

import enzcc.ad.runtime_activity as runtime_activity
from enzcc.ad.activity import Activity, has_float, is_user_call
from enzcc.ad.atomics import check_atomics, forward_atomic_add
from enzcc.ad.usercalls import call_kinds, check_call_signature, variadic_call_stays
from enzcc.ad.api import DUP, DUPNONEED, DiffCall, is_float
from enzcc.ad.emit import add_values, emit_partial, fail_call_at_run_time, times, zero
from enzcc.ad.errors import ad_error, no_rule_error
from enzcc.ad.inline import unknown_target_message
from enzcc.ad.memory import memory_types_for
from enzcc.ad.hints import hints_of
from enzcc.ad.prepare import finalize, inactive_functions, is_inactive_call, new_derivative_function, prepare
from enzcc.ad.rules import load_rules
from enzcc.ad.registry import rule_for
from enzcc.ad.shadow import Shadows, describe_pointer
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.cfg import reverse_post_order
from enzcc.ir.instructions import (AtomicRMW, BinaryOp, Call, Cast, ExtractElement, ExtractValue, Freeze,
                                   InsertElement, InsertValue, Instruction, Load, Phi, Ret, Select, ShuffleVector, Store,
                                   UnaryOp)
from enzcc.ir.values import Constant, ConstantNull, GlobalRef, InlineAsm, Value


class ForwardMode:
    """Builds the tangent function for one ``__enzyme_fwddiff`` call."""

    def __init__(self, dc: DiffCall, module, body=None, logic=None, return_primal: bool = False,
                 shadow_return: bool = False):
        self.dc = dc
        self.module = module
        self.logic = logic
        """The cache of derived functions (for calls that were not inlined)."""
        self.return_primal = return_primal
        """Return ``{result, tangent}`` (a call inside differentiated code needs both), not the tangent alone."""
        self.shadow_return = shadow_return
        """With ``return_primal``, for a function returning a pointer to memory with derivatives: return
        ``{result, its shadow per lane}`` (a call that is not inlined needs both)."""
        self.split = False
        """Forward split mode cuts this function (:mod:`enzcc.ad.fwdsplit`): calls use registered split-mode
        derivatives (``__enzyme_register_splitderivative_*``)."""
        self.rules = load_rules()
        self.width = dc.width
        """Vector mode (``enzyme_width``): tangents per run, one set of tangent parameters for each."""
        primal = dc.fn
        params, names = [], []
        self.tangent_index: dict[int, list[int]] = {}
        """Parameter index -> positions of its tangent parameters in G (one per lane)."""
        for spec in dc.args:
            params.append(spec.param.type)
            names.append(spec.param.name)
            if spec.kind in (DUP, DUPNONEED):
                self.tangent_index[spec.param.index] = list(range(len(params), len(params) + self.width))
                for lane in range(self.width):
                    params.append(spec.param.type)
                    names.append(f"d{lane if self.width > 1 else ''}_{spec.param.name or spec.param.index}")
        ret = primal.return_type
        if return_primal and (is_float(ret) or shadow_return):
            ret = T.StructType((ret,) * (1 + self.width))  # {result, one tangent (shadow) per lane}
        elif self.width > 1 and is_float(ret):
            ret = T.StructType((ret,) * self.width)
        self.G = new_derivative_function(module, primal, f"fwddiffe_{primal.name}", params, ret, names)
        # the primal's parameters are the non-tangent parameters of G
        tangent_params = {i for ps in self.tangent_index.values() for i in ps}
        self.primal_args = [a for i, a in enumerate(self.G.args) if i not in tangent_params]
        from enzcc.ir.clone import clone_blocks

        vmap: dict = {}
        body = body or primal
        for a, b in zip(body.args, self.primal_args):
            vmap[a] = b
        clone_blocks(body.blocks, self.G, vmap)
        self.kinds = [s.kind for s in dc.args]
        self.tangents: dict[int, Value] = {}
        self._keep: list[Value] = []
        self._emitted: dict[int, Value] = {}
        """Placeholder of a call's tangent (:meth:`_tangent_of_user_call`) -> the tangent, once the call is made."""
        self.lane_calls: dict[int, tuple] = {}
        """Calls made once for all lanes (:meth:`_lane_call`): call -> (emit, what each lane gave)."""
        self.lane_state: dict[int, object] = {}
        """What the first lane worked out about such a call for the others (its activity, a parsed loop)."""

    def build(self):
        G = self.G
        prepare(G)
        # rewrite the kinds in terms of G's primal argument positions
        activity = Activity(_PrimalView(G, self.primal_args), self.kinds, is_float(self.dc.fn.return_type),
                            "forward", self.dc.runtime_activity)
        self.activity = activity
        self.memtypes = memory_types_for(self.dc, G, self.primal_args)
        # the primal instructions, before any tangent code: each lane adds its own tangent code next to them
        primal = [(block, list(block.instructions)) for block in reverse_post_order(G)]
        self.primal_instructions = [i for _, insts in primal for i in insts]
        """The instructions of the primal computation (everything else in G is tangent code): forward split mode
        (:mod:`enzcc.ad.fwdsplit`) cuts G along them."""
        check_atomics(self, self.primal_instructions)
        if runtime_activity.enabled(activity):
            runtime_activity.check_calls(self, self.primal_instructions, f"forward mode of '{self.dc.fn.name}'")
        self.primal_callees = {id(i): i.callee_name for i in self.primal_instructions if isinstance(i, Call)}
        """Each call's callee (a call to a function that is not inlined is replaced by its derivative's)."""
        self.primal_returns = {id(i): (i.operands[0] if i.operands else None)
                               for i in self.primal_instructions if isinstance(i, Ret)}
        """Each ``ret``'s primal result (the tangent replaces it)."""
        self.lane_returns = []
        for lane in range(self.width):
            self.tangents = {}
            arg_shadows = {}
            for spec in self.dc.args:
                if spec.param.index in self.tangent_index:
                    arg = self.primal_args[spec.param.index]
                    t = G.args[self.tangent_index[spec.param.index][lane]]
                    if isinstance(arg.type, T.PointerType):
                        arg_shadows[id(arg)] = t
                    else:
                        self._set(arg, t)
            self.lane = lane
            self.shadows = Shadows(G, activity, arg_shadows, lane)
            self.shadows.build(primal)
            pending: list[tuple[Phi, Phi]] = []
            for block, insts in primal:
                for inst in insts:
                    self._tangent_of_instruction(inst, pending)
            for phi, tphi in pending:
                for v, blk in phi.incoming:
                    tphi.add_incoming(self._t(v), blk)
            if runtime_activity.enabled(activity):  # (after the tangents: a store's tangent tells what is lost)
                runtime_activity.guard_lost_stores(self, self.primal_instructions)
        for inst, (emit, lanes) in list(self.lane_calls.items()):
            emit(lanes)
        if self.lane_returns:  # {result, tangents} (return_primal) or the lanes' tangents (vector mode)
            ret, values = self.lane_returns[0][0], [t for _, t in self.lane_returns]
            if self.return_primal:
                values = [ret.operands[0]] + values
            b = IRBuilder.before(ret)
            agg = IRBuilder.poison(G.return_type)
            for k, t in enumerate(values):
                agg = b.insert_value(agg, t, [k])
            ret.set_operand(0, agg)
        finalize(G)
        return G

    # -----------------------------------------------------------------------------------------

    def _set(self, v: Value, t: Value) -> None:
        self.tangents[id(v)] = t
        self._keep.append(v)

    def _t(self, v: Value) -> Value:
        """Tangent of ``v`` (zero for inactive values)."""
        t = self.tangents.get(id(v))
        if t is not None:
            return t
        return zero(v.type)

    def _active(self, v: Value) -> bool:
        return id(v) in self.tangents or self.activity.is_active(v)

    def _tangent_of_instruction(self, inst: Instruction, pending) -> None:
        act = self.activity
        if isinstance(inst, Ret):
            if self.return_primal:
                if inst.operands and is_float(inst.operands[0].type):
                    self.lane_returns.append((inst, self._t(inst.operands[0])))
                elif self.shadow_return:
                    value = inst.operands[0]
                    if not (act.is_active_ptr(value) or isinstance(value, Constant)):
                        raise ad_error(f"'{self.dc.fn.name}' returns a pointer its caller uses as memory with "
                                       f"derivatives, but here it is {describe_pointer(value)}, which has none", inst)
                    self.lane_returns.append((inst, self.shadows._of_operand(value, inst)))
                elif inst.operands and isinstance(inst.operands[0].type, T.PointerType) and \
                        act.is_active_ptr(inst.operands[0]):
                    raise ad_error("returning a pointer to memory with derivatives from a function that is "
                                   "not inlined (a recursive one) is not supported", inst)
                return
            if self.width > 1:
                if inst.operands and is_float(inst.operands[0].type):
                    self.lane_returns.append((inst, self._t(inst.operands[0])))
                elif inst.operands:
                    inst.set_operand(0, zero(inst.operands[0].type))
                return
            if inst.operands and is_float(inst.operands[0].type):
                t = self._t(inst.operands[0])
                inst.set_operand(0, t)
            elif inst.operands:
                inst.set_operand(0, zero(inst.operands[0].type))
            return
        if isinstance(inst, Load) and isinstance(inst.type, T.IntType) and act.is_active_ptr(inst.pointer) and \
                self.memtypes.bits_type(inst, required=False) is not None:
            # a float copied as an integer: copy its tangent's bits too
            b = IRBuilder.after(inst)
            sp = self.shadows.of(inst.pointer, inst)
            self._set(inst, self._guarded_tangent(b, inst.pointer, sp, b.load(inst.type, sp, align=inst.align)))
            return
        if isinstance(inst, Store):
            if act.is_active_ptr(inst.pointer) and (has_float(inst.value.type) or id(inst.value) in self.tangents
                                                    or self.memtypes.overwrites_float(inst)):
                t, sp = self._t(inst.value), self.shadows.of(inst.pointer, inst)
                if runtime_activity.enabled(act):  # (inactive memory: the primal value again)
                    b = IRBuilder.before(inst)
                    t = runtime_activity.shadow_or_primal(b, runtime_activity.differs(b, inst.pointer, sp), t,
                                                          inst.value)
                if inst.ordering is None:
                    IRBuilder.after(inst).store(t, sp, align=inst.align)
                else:  # (an atomic store: the tangent goes first, so that what a release publishes holds it too)
                    IRBuilder.before(inst).insert(Store(t, sp, inst.align, inst.volatile, inst.ordering,
                                                        inst.syncscope))
            return
        if isinstance(inst, AtomicRMW):
            forward_atomic_add(self, inst)
            return
        if isinstance(inst, Call):
            self._tangent_of_call(inst)
            return
        if not has_float(inst.type) or not act.is_active(inst):
            return
        if isinstance(inst, Phi):
            tphi = Phi(inst.type)
            tphi.insert_after(inst)
            self._set(inst, tphi)
            pending.append((inst, tphi))
            return
        b = IRBuilder.after(inst)
        if isinstance(inst, (BinaryOp, UnaryOp)) and inst.opcode in self.rules.instructions:
            self._rule_tangent(b, self.rules.instructions[inst.opcode], inst.operands, inst)
        elif isinstance(inst, Load):  # (an atomic load's tangent is read after it, as it is ordered)
            sp = self.shadows.of(inst.pointer, inst)
            t = b.insert(Load(inst.type, sp, inst.align, ordering=inst.ordering, syncscope=inst.syncscope))
            self._set(inst, self._guarded_tangent(b, inst.pointer, sp, t))
        elif isinstance(inst, Cast):
            if inst.opcode in ("fpext", "fptrunc", "bitcast") and has_float(inst.value.type):
                self._set(inst, b.cast(inst.opcode, self._t(inst.value), inst.type))
        elif isinstance(inst, Select):
            self._set(inst, b.select(inst.condition, self._t(inst.true_value), self._t(inst.false_value)))
        elif isinstance(inst, Freeze):
            self._set(inst, self._t(inst.value))
        elif isinstance(inst, ExtractValue):
            self._set(inst, b.extract_value(self._t(inst.aggregate), list(inst.indices)))
        elif isinstance(inst, InsertValue):
            self._set(inst, b.insert_value(self._t(inst.aggregate), self._t(inst.value), list(inst.indices)))
        elif isinstance(inst, ExtractElement):
            self._set(inst, b.extract_element(self._t(inst.vector), inst.index_operand))
        elif isinstance(inst, InsertElement):
            self._set(inst, b.insert_element(self._t(inst.vector), self._t(inst.element), inst.index_operand))
        elif isinstance(inst, ShuffleVector):
            self._set(inst, b.shuffle_vector(self._t(inst.operands[0]), self._t(inst.operands[1]), inst.mask))
        else:
            raise ad_error(f"cannot differentiate instruction '{inst.opcode}'", inst)

    def _guarded_tangent(self, b: IRBuilder, p: Value, sp: Value, t: Value) -> Value:
        """The tangent ``t`` loaded through shadow ``sp`` of ``p``; with runtime activity, zero where the shadow is
        the memory itself."""
        if not runtime_activity.enabled(self.activity):
            return t
        return runtime_activity.tangent_or_zero(b, runtime_activity.differs(b, p, sp), t)

    def _rule_tangent(self, b: IRBuilder, rule, operands, inst: Instruction) -> None:
        """tangent(inst) = sum over arguments with tangents of partial * tangent(argument)."""
        env = dict(zip(rule.args, operands), ret=inst)
        total = None
        for name, v in zip(rule.args, operands):
            if name in rule.inactive or id(v) not in self.tangents:
                continue
            term = times(b, emit_partial(b, rule, name, env, inst.type), self._t(v))
            total = term if total is None else add_values(b, total, term)
        if total is not None:
            self._set(inst, total)

    def carries_derivatives(self, inst: Call) -> bool:
        """Whether derivatives flow through ``inst``: it is given a tangent or memory with derivatives, or its
        pointer result has derivatives (it returns its shadow, whatever its arguments)."""
        act = self.activity
        return any(id(a) in self.tangents for a in inst.args) or any(act.is_active_ptr(a) for a in inst.args) or \
            id(inst) in self.shadows.call_shadows

    def _tangent_of_call(self, inst: Call) -> None:
        name = inst.callee_name or ""
        dealloc = hints_of(self.module).deallocators.get(name)
        if dealloc is not None:  # a registered deallocation: the shadow goes with the primal (_releases_shadow)
            j = dealloc[1].index(-1)
            p = inst.args[j] if j < len(inst.args) else None
            if p is not None and self._releases_shadow(p):
                if runtime_activity.enabled(self.activity):  # (the shadow may be the memory itself: twice)
                    raise ad_error(f"enzyme_runtime_activity with the registered deallocation function '{name}' "
                                   "given memory with derivatives is not supported", inst)
                args = list(inst.args)
                args[j] = self.shadows.of(p)
                IRBuilder.after(inst).call(self.module.functions[name], args)
            return
        if name in inactive_functions(self.module):
            return
        rule = rule_for(inst)
        if rule is not None and rule.forward is not None and rule.forward(self, inst):
            return
        if not self.carries_derivatives(inst):
            return
        if self.logic is not None and is_user_call(inst):
            if not variadic_call_stays(inst, self.activity, is_float(inst.type) and self.activity.is_active(inst)):
                self._tangent_of_user_call(inst)
            return
        if is_inactive_call(name):
            return
        if not name and not isinstance(inst.callee, InlineAsm):  # no candidates: stop where derivatives flow
            fail_call_at_run_time(self.module, IRBuilder.before(inst), unknown_target_message(inst))
            return
        raise no_rule_error(inst, name, self.module)

    def _releases_shadow(self, p: Value) -> bool:
        """Whether releasing ``p`` releases its shadow too: as in Enzyme's forward mode, the shadow of any
        pointer with derivatives the primal releases, wherever it was made (here, in a callee, by the caller,
        or read from a node's link: before, only a shadow allocated in this function was released, and the
        others leaked); not a shadow that is no heap memory (null, or the pointer itself where it points to no
        memory)."""
        if not (self.activity.is_active_ptr(p) and self.shadows.has(p)):
            return False
        shadow = self.shadows.of(p)
        return shadow is not p and not isinstance(shadow, (ConstantNull, GlobalRef))

    def _lane_call(self, inst: Call, emit, lane_data) -> None:
        """Vector mode: ``inst`` becomes one call for all lanes. Each lane gives ``lane_data`` (its shadows and
        tangents at ``inst``); ``emit(list of them)`` runs once every lane has."""
        entry = self.lane_calls.setdefault(id(inst), (emit, []))
        entry[1].append(lane_data)

    def _tangent_of_user_call(self, inst: Call) -> None:
        """A call that was not inlined (recursion) becomes a call to the callee's forward derivative, which
        computes the primal result and its tangent (in vector mode, one per lane: one call for all lanes)."""
        callee = self.module.functions[inst.callee_name]
        check_call_signature(inst, self.activity)
        if self.lane == 0:
            self.lane_state[id(inst)] = call_kinds(inst, self.activity, lambda a: id(a) in self.tangents, DUP)
        kinds = self.lane_state[id(inst)]
        lane_args = [self.shadows.of(a, inst) if isinstance(a.type, T.PointerType) else self._t(a)
                     for a, k in zip(inst.args, kinds) if k == DUP]
        placeholder = None
        shadow_return = id(inst) in self.shadows.call_shadows
        if is_float(inst.type):  # this lane's tangent of the result, until the call is made
            placeholder = IRBuilder.after(inst).freeze(IRBuilder.poison(inst.type))
            self._set(inst, placeholder)
        elif shadow_return:  # this lane's shadow of the pointer returned (Shadows made the stand-in)
            placeholder = self.shadows.call_shadows[id(inst)]

        def emit(lanes) -> None:
            F = self.logic.forward_of_call(inst, callee, kinds, width=self.width, shadow_return=shadow_return)
            b = IRBuilder.before(inst)
            args, d = [], 0
            for a, k in zip(inst.args, kinds):
                args.append(a)
                if k == DUP:  # (a tangent that was another such call's placeholder: what replaced it)
                    args += [self._emitted.get(id(lane_args[d]), lane_args[d]) for lane_args, _ in lanes]
                    d += 1
            new = b.call(F, args)
            if is_float(inst.type) or shadow_return:
                primal = b.extract_value(new, [0])
                for lane, (_, ph) in enumerate(lanes):
                    t = b.extract_value(new, [1 + lane])
                    ph.replace_all_uses_with(t)
                    self._emitted[id(ph)] = t
                    self._keep.append(ph)
                    if isinstance(ph, Instruction):
                        ph.erase()
                inst.replace_all_uses_with(primal)
            elif inst.has_uses():
                inst.replace_all_uses_with(new)
            inst.erase()

        self._lane_call(inst, emit, (lane_args, placeholder))


class _PrimalView:
    """The derivative function seen with only its primal parameters (for the activity analysis)."""

    def __init__(self, fn, args):
        self._fn = fn
        self.args = args

    def instructions(self):
        return self._fn.instructions()

    def __getattr__(self, name):
        return getattr(self._fn, name)


__all__ = ["ForwardMode"]
