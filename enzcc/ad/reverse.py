"""Reverse mode (combined forward + reverse sweep in one function), on a prepared copy of the function.

This module lays out the function and its control flow; the reverse of each instruction is in
:mod:`enzcc.ad.adjoint` (AdjointGenerator), what is cached, recomputed or pushed on the tape in
:mod:`enzcc.ad.cache` (CacheUtility), and the cache of derived functions that calls use in
:mod:`enzcc.ad.logic`.

Layout of the derivative function ``G``:

* the forward code: the primal body, with shadow computations for active pointers, caching of the primal
  values the reverse sweep needs, and *edge blocks* that push loop-iteration data and control-flow choices
  on a tape;
* the reverse code: one block ``rev.B`` per primal block ``B`` (its instructions' adjoints in reverse order),
  and one block per CFG edge ``P -> B`` that propagates phi adjoints, pops the tape and continues in
  ``rev.P``; the entry's reverse block jumps to the exit that returns the derivatives of ``enzyme_out``
  arguments.

Caching: a value needed in the reverse sweep whose block always executes and is in no loop is used directly
(SSA dominance holds). Any other value gets a stack slot written where it is defined; values defined inside
a loop are pushed on the tape when each iteration ends and popped back into the slot when the reverse sweep
starts that iteration, so loops of unknown trip count are reversed exactly. The tape is a growable buffer
freed before returning.
"""

from __future__ import annotations


from enzcc.ad.activity import Activity, is_user_call
from enzcc.ad.api import DUP, DUPNONEED, OUT, DiffCall, is_float
from enzcc.ad.emit import counted_loop_function, splat
from enzcc.ad.memory import memory_types_for
from enzcc.ad.prepare import clone_body, finalize, new_derivative_function, prepare, return_block
from enzcc.ad.promote import promote_single_block_slots
from enzcc.ad.rules import load_rules
from enzcc.ad.errors import ad_error
import enzcc.ad.runtime_activity as runtime_activity
from enzcc.ad.shadow import Shadows, describe_pointer, to_i64
from enzcc.ad.spill import spill_crossing_values
from enzcc.ad.tape import SPLIT_FIRST, Tape
from enzcc.ir import types as T
from enzcc.ir.block import BasicBlock
from enzcc.ir.builder import IRBuilder
from enzcc.ir.cfg import DominatorTree, LoopInfo, reverse_post_order
from enzcc.ir.instructions import BinaryOp, Call, CondBr, GetElementPtr, ICmp, Instruction, Phi, Store
from enzcc.ir.values import Constant, ConstantInt, ConstantNull, Value
from enzcc.ad.adjoint import TAPE_FREE, AdjointGenerator
from enzcc.ad.atomics import check_atomics
from enzcc.ad.registry import rule_for
from enzcc.ad.cache import CacheUtility, _Cached


def _reversed_once(call: Call) -> bool:
    """Vector mode: the call's reverse is made once for all lanes (its rule says so)."""
    rule = rule_for(call)
    return rule is not None and rule.reverse_once_for_lanes


class ReverseMode(AdjointGenerator, CacheUtility):
    """Builds the gradient function for one ``__enzyme_autodiff`` call."""

    def __init__(self, dc: DiffCall, module, body=None, logic=None, split: bool = False,
                 active_return: bool | None = None, parallel: bool = False):
        self.dc = dc
        self.module = module
        self.logic = logic
        """The cache of derived functions (for calls that were not inlined)."""
        self.parallel = parallel
        """The reverse code runs in the threads of an OpenMP parallel region (:mod:`enzcc.ad.calls.openmp`): adjoints
        go to shared memory with atomic adds, barriers and critical sections are mirrored."""
        self.split = split
        self.shadow_return = False
        """Split: the augmented primal returns the shadow of the pointer the function returns, after it (set by
        :func:`enzcc.ad.split.make_split`)."""
        """Built to be cut into an augmented primal and a reverse function (:mod:`enzcc.ad.split`): the
        result's adjoint is a parameter, and memory may change between the two (no loads repeated)."""
        self.active_return = is_float(dc.fn.return_type) if active_return is None else active_return
        self.rules = load_rules()
        primal = dc.fn
        self.width = dc.width
        """Vector mode (``enzyme_width``): adjoints per run, one set of shadow parameters for each."""
        shadow_specs = [s for s in dc.args if s.kind in (DUP, DUPNONEED)]
        params = [a.type for a in primal.args] + [T.ptr] * (len(shadow_specs) * self.width)
        names = [a.name for a in primal.args] + [f"d{lane if self.width > 1 else ''}_{s.param.name or s.param.index}"
                                                 for s in shadow_specs for lane in range(self.width)]
        self.return_primal = dc.primal_return and not split and not isinstance(primal.return_type, T.VoidType)
        """``enzyme_primal_return``: the result comes back first, before the derivatives."""
        results = ([primal.return_type] if self.return_primal else []) + [s.param.type for s in dc.out_args]
        if not results:
            ret = T.void
        elif len(results) == 1:
            ret = results[0]
        else:
            ret = T.StructType(tuple(results))
        self.ret_type = ret
        self.d_ret_index = None
        if split and self.active_return:  # (vector mode: one per lane)
            self.d_ret_index = len(params)
            params += [primal.return_type] * self.width
            names += [f"d_ret{lane}" if self.width > 1 else "d_ret" for lane in range(self.width)]
        self.G = new_derivative_function(module, primal, f"diffe_{primal.name}", params, ret, names)
        clone_body(body or primal, self.G)
        self.nprimal = len(primal.args)
        self.kinds = [s.kind for s in dc.args]
        self.lane_arg_shadows = [{id(self.G.args[s.param.index]): self.G.args[self.nprimal + n * self.width + lane]
                                  for n, s in enumerate(shadow_specs)} for lane in range(self.width)]
        """Per lane: primal argument -> its shadow parameter."""
        self.lane_slots: list[dict[int, Instruction]] = [{} for _ in range(self.width)]
        """Per lane: value -> the stack slot of its adjoint."""
        self.lane_running: list[dict[int, Instruction]] = [{} for _ in range(self.width)]
        """Per lane: value -> its adjoint so far, kept as an SSA value (:meth:`AdjointGenerator._running`)."""
        self.lane_taken: list[set[int]] = [set() for _ in range(self.width)]
        """Per lane: the values whose adjoint was taken as an SSA value."""
        self.ssa_adjoint_values: set[int] = set()
        """Values whose adjoint may be kept as an SSA value: each use of theirs is in their block, none a phi."""
        self.arg_shadows = self.lane_arg_shadows[0]
        self.adjoint_slots: dict[int, Instruction] = self.lane_slots[0]
        self.running_adjoints = self.lane_running[0]
        self.taken_in_ssa = self.lane_taken[0]
        self.cached: dict[int, _Cached] = {}
        self.recounted_loops: set[int] = set()
        """Loop headers whose iteration count the reverse sweep computes (none pushed on the tape)."""
        self.recomputed_branches: set[int] = set()
        """Blocks whose reverse branches on a recomputed condition (no predecessor index on the tape)."""
        self._recomputed: dict[tuple, Value] = {}
        """(value, reverse block) -> the value recomputed there (reused within the block)."""
        self._reloadable: dict | None = None
        """Allocations whose bytes the reverse sweep may read again -> their free calls (see
        :meth:`_reloadable_allocations`); None until asked."""
        self._writes_of: dict[int, list] = {}
        """Allocation -> the instructions that write its bytes."""
        self._reachable: dict[int, set] = {}
        """Block -> the blocks reachable from it (for :meth:`_not_written_after`)."""
        self._deferred: dict[int, Value] = {}
        """Allocations the reverse sweep reads again: their free calls wait for its end."""
        self._keep: list[Value] = []
        self.reverse_frees: dict[int, tuple[Call, str]] = {}
        """Calls of the reverse code that release memory, by id -> (call, what: see
        :data:`enzcc.ad.adjoint.SHADOW_FREE`)."""

    # ---------------------------------------------------------------------------------------------

    def build(self):
        G = self.G
        prepare(G)
        if self.width > 1:
            self._isolate_lane_calls()
        self.ret_block = return_block(G)
        self.activity = Activity(G, self.kinds, self.active_return, "reverse", self.dc.runtime_activity)
        self.memtypes = memory_types_for(self.dc, G, G.args)
        check_atomics(self, list(G.instructions()), self.concurrent)
        if runtime_activity.enabled(self.activity):
            runtime_activity.check_calls(self, list(G.instructions()), f"the derivative of '{self.dc.fn.name}'")
        self.dt = DominatorTree(G)
        self.loops = LoopInfo(G, self.dt)
        self.blocks = reverse_post_order(G)
        self.orig_insts = {id(b): list(b.instructions) for b in self.blocks}
        self.orig_preds = {id(b): b.predecessors for b in self.blocks}
        self.always = self._always_executed_blocks()
        # forward code: shadows (emitted next to their primals), one set per lane
        primal = [(b, list(b.instructions)) for b in reverse_post_order(G)]
        self.lane_shadows = []
        for lane in range(self.width):
            shadows = Shadows(G, self.activity, self.lane_arg_shadows[lane], lane)
            shadows.build(primal)
            self.lane_shadows.append(shadows)
        self._use_lane(0)
        self._copy_pointer_shadows(primal)
        if runtime_activity.enabled(self.activity):  # (each lane's shadows)
            for lane in range(self.width):
                self._use_lane(lane)
                runtime_activity.guard_lost_stores(self, [i for _, insts in primal for i in insts])
            self._use_lane(0)
        self.tape = Tape(self.module, G, SPLIT_FIRST if self.split else None)
        self.written_bases = None if self.split else self._written_bases()
        """Argument and global memory the function writes (:meth:`_written_bases`); None: unknown."""
        self._prepare_user_calls()
        self._add_loop_counters()
        # reverse code
        self.rev = {}
        for b in self.blocks:
            self.rev[id(b)] = BasicBlock(f"rev.{b.name}" if b.name else None)
        for b in reversed(self.blocks):
            self.rev[id(b)].parent = None
            self.rev[id(b)].move_after(G.blocks[-1])
        self.exit_block = BasicBlock("rev.exit")
        self.exit_block.move_after(G.blocks[-1])
        self.edges: dict[tuple[int, int], BasicBlock] = {}
        self.ssa_adjoint_values = {id(i) for b in self.blocks for i in self.orig_insts[id(b)]
                                   if not isinstance(i, Phi) and
                                   all(u.user.parent is b and not isinstance(u.user, Phi) for u in i.uses)}
        self._seed_and_jump()
        for b in self.blocks:
            self._reverse_block(b)
        self._emit_exit()
        self._emit_caches()
        self._drop_unneeded_outputs()
        self.flush_thread_sums(IRBuilder.before(self.exit_block.terminator))
        self._defer_frees(IRBuilder.before(self.exit_block.terminator))
        self.tape.finish(self if self.split else None)
        promote_single_block_slots(G, [s for slots in self.lane_slots for s in slots.values()])
        if not self.split:
            spill_crossing_values(G, self.blocks, [b for b in self.blocks if self.loops.loop_for(b) is None],
                                  self.exit_block)
        finalize(G)
        return G

    def _drop_unneeded_outputs(self) -> None:
        """``enzyme_dupnoneed``: the primal values stored into that argument's memory need not be computed. Its
        stores are removed (the values then computed only for them go too) when the argument is ``noalias``
        (``restrict``: no other pointer reads that memory) and the function only stores through it, never reads
        it back or passes it on. The reverse sweep, built before, took each store's adjoint from the shadow."""
        for spec in self.dc.args:
            if spec.kind != DUPNONEED or not isinstance(spec.param.type, T.PointerType) or \
                    "noalias" not in spec.param.attrs:
                continue
            stores, todo, only_stored = [], [self.G.args[spec.param.index]], True
            while todo and only_stored:
                p = todo.pop()
                for use in p.uses:
                    u = use.user
                    if isinstance(u, GetElementPtr) and use.index == 0:
                        todo.append(u)
                    elif isinstance(u, Store) and use.index == 1:
                        stores.append(u)
                    else:
                        only_stored = False
                        break
            if only_stored:
                for st in stores:
                    st.erase()

    def _copy_pointer_shadows(self, primal) -> None:
        """A memcpy/memmove of memory that holds pointers (and integers), not floats, copies the shadow memory
        too in the forward sweep, so the copy's pointer slots hold the shadows of the pointers copied (float
        memory is not copied forward: its adjoint flows back in the reverse sweep)."""
        for _, insts in primal:
            for inst in insts:
                name = inst.callee_name if isinstance(inst, Call) else None
                if not (name or "").startswith(("llvm.memcpy", "llvm.memmove")):
                    continue
                dest, src = inst.args[0], inst.args[1]
                if not self.activity.is_active_ptr(dest):
                    continue
                kind = self.memtypes.copy_kind(inst)
                fields = self.memtypes.copy_fields(inst) if kind is None else None
                ra = runtime_activity.enabled(self.activity)
                if fields is not None:  # a record of floats and pointers: its pointer fields' shadows
                    b = IRBuilder.after(inst)
                    for shadows in self.lane_shadows:
                        for at, k in fields:
                            if isinstance(k, T.PointerType):
                                off = [ConstantInt(T.i64, at)]
                                p = b.load(T.ptr, b.gep(T.i8, shadows.of(src, inst), off)) \
                                    if self.activity.is_active_ptr(src) else \
                                    b.load(T.ptr, b.gep(T.i8, dest, off)) if ra else ConstantNull(T.ptr)
                                slot = b.gep(T.i8, shadows.of(dest, inst), off)
                                if ra:  # (inactive memory: the pointer the copy put there)
                                    p = runtime_activity.shadow_or_primal(
                                        b, runtime_activity.differs(b, dest, shadows.of(dest, inst)), p,
                                        b.load(T.ptr, b.gep(T.i8, dest, off)))
                                b.store(p, slot)
                    continue
                records = self.memtypes.copied_records(inst) if kind is None and not ra else None
                if records is not None:  # an array of such records: the pointer fields' shadows, record by record
                    self._copy_record_pointer_shadows(inst, records)
                    continue
                if not isinstance(kind, T.PointerType):
                    continue
                b = IRBuilder.after(inst)
                for shadows in self.lane_shadows:
                    n = inst.args[2]
                    if ra:  # (inactive memory: nothing copied into it)
                        n = runtime_activity.count_or_zero(b, runtime_activity.differs(b, dest, shadows.of(dest, inst)),
                                                           n)
                    if self.activity.is_active_ptr(src):
                        b.call(inst.callee, [shadows.of(dest, inst), shadows.of(src, inst), n, inst.args[3]])
                    elif ra:  # (pointers without derivatives: their own shadows, as the copy put them there)
                        b.call(inst.callee, [shadows.of(dest, inst), dest, n, inst.args[3]])
                    else:
                        b.memset(shadows.of(dest, inst), 0, n)

    def _copy_record_pointer_shadows(self, inst, records) -> None:
        """The forward sweep of a memcpy of an array of records (:meth:`MemoryTypes.copied_records`): each
        record's pointer fields in the destination's shadow get the source's shadow pointers (null where the
        source has no shadow); the float fields are left to the reverse sweep."""
        stride, fields = records
        dest, src = inst.args[0], inst.args[1]
        b = IRBuilder.after(inst)
        count = b.udiv(to_i64(b, inst.args[2]), ConstantInt(T.i64, stride))
        helper = _strided_pointer_copy(self.module)
        for shadows in self.lane_shadows:
            dsrc = shadows.of(src, inst) if self.activity.is_active_ptr(src) else ConstantNull(T.ptr)
            for at, k in fields:
                if isinstance(k, T.PointerType):
                    off = [ConstantInt(T.i64, at)]
                    b.call(helper, [b.gep(T.i8, shadows.of(dest, inst), off),
                                    b.gep(T.i8, dsrc, off) if not isinstance(dsrc, ConstantNull) else dsrc,
                                    ConstantInt(T.i64, stride), count])

    def _isolate_lane_calls(self) -> None:
        """Vector mode: each call whose reverse is made once for all lanes (a call that is not inlined, a
        checkpointed loop) gets a block of its own. The reverse code of a block is made lane after lane; alone
        in its block, the call's reverse (made with the last lane) comes after every lane's reverse of what
        follows it and before every lane's reverse of what precedes it."""
        for block in list(self.G.blocks):
            for inst in list(block.instructions):
                if isinstance(inst, Call) and (is_user_call(inst) or _reversed_once(inst)):
                    if inst is not inst.parent.instructions[0]:
                        inst.parent.split_before(inst)
                    nxt = inst.next
                    inst.parent.split_before(nxt)

    def _use_lane(self, lane: int) -> None:
        """Vector mode: the shadows and adjoints that follow are lane ``lane``'s."""
        self.lane = lane
        self.shadows = self.lane_shadows[lane]
        self.arg_shadows = self.lane_arg_shadows[lane]
        self.adjoint_slots = self.lane_slots[lane]
        self.running_adjoints = self.lane_running[lane]
        self.taken_in_ssa = self.lane_taken[lane]

    # -- structure ------------------------------------------------------------------------------

    def _always_executed_blocks(self) -> set[int]:
        """Blocks that dominate the return block and are in no loop: their values are available everywhere in
        the reverse sweep."""
        out = set()
        for b in self.blocks:
            if self.dt.dominates(b, self.ret_block) and self.loops.loop_for(b) is None:
                out.add(id(b))
        return out

    def _seed_and_jump(self) -> None:
        ret = self.ret_block.terminator
        value = ret.operands[0] if ret.operands else None
        self.primal_return_value = value
        if self.shadow_return:  # (split: the augmented primal returns the result's shadow too)
            if not (self.activity.is_active_ptr(value) or isinstance(value, Constant)):
                raise ad_error(f"'{self.dc.fn.name}' returns a pointer its caller uses as memory with derivatives, "
                               f"but here it is {describe_pointer(value)}, which has none", ret)
            self.primal_return_shadows = [shadows._of_operand(value, ret) for shadows in self.lane_shadows]
        ret.erase()
        b = IRBuilder.at_end(self.ret_block)
        if value is not None and self.active_return and self.activity.is_active(value):
            if self.split:  # the caller's adjoint of the result, at the start of the reverse code
                for lane in range(self.width):
                    self._use_lane(lane)
                    self._add_adjoint(IRBuilder.at_end(self.rev[id(self.ret_block)]), value,
                                      self.G.args[self.d_ret_index + lane])
                self._use_lane(0)
            else:
                for lane in range(self.width):  # (vector mode: every lane's result adjoint is 1)
                    self._use_lane(lane)
                    self._add_adjoint(b, value, splat(value.type, 1.0))
                self._use_lane(0)
        b.br(self.rev[id(self.ret_block)])

    # -- loops ------------------------------------------------------------------------------------

    def _add_loop_counters(self) -> None:
        """Every loop gets an iteration counter (forward) and a reverse counter slot: the reverse sweep counts
        iterations down instead of recording each back edge, and recomputes induction variables from it."""
        self.counter: dict[int, Instruction] = {}
        self.rev_counter: dict[int, Instruction] = {}
        self.induction: dict[int, tuple] = {}
        for loop in self.loops.loops:
            h = loop.header
            preds = self.orig_preds[id(h)]
            phi = Phi(T.i64)
            h.insert(0, phi)
            nxt = BinaryOp("add", phi, ConstantInt(T.i64, 1))
            nxt.insert_after(h.phis()[-1])
            for p in preds:
                phi.add_incoming(nxt if loop.contains(p) else ConstantInt(T.i64, 0), p)
            self.counter[id(h)] = phi
            self.rev_counter[id(h)] = IRBuilder.at_start(self.G.entry_block).alloca(T.i64, in_entry=True)
            for hp in self.orig_insts[id(h)]:
                if isinstance(hp, Phi) and isinstance(hp.type, T.IntType):
                    iv = self._affine(hp, loop, preds)
                    if iv is not None:
                        self.induction[id(hp)] = (loop,) + iv
                        self._keep.append(hp)

    #: predicate p' with (a p b) == (b p' a), and the negated predicate
    _SWAPPED = {"eq": "eq", "ne": "ne", "slt": "sgt", "sgt": "slt", "ult": "ugt", "ugt": "ult",
                "sle": "sge", "sge": "sle", "ule": "uge", "uge": "ule"}
    _NEGATED = {"eq": "ne", "ne": "eq", "slt": "sge", "sge": "slt", "sgt": "sle", "sle": "sgt",
                "ult": "uge", "uge": "ult", "ugt": "ule", "ule": "ugt"}

    def _edge_dominates(self, d: BasicBlock, s: BasicBlock, p: BasicBlock) -> bool:
        """Every path to ``p`` takes the edge ``d -> s``: ``s`` dominates ``p`` and is entered only from ``d``
        or from blocks it dominates itself (its loop's back edges)."""
        return self.dt.dominates(s, p) and \
            all(q is d or self.dt.dominates(s, q) for q in self.orig_preds[id(s)])

    def _exit_test(self, loop, latch: BasicBlock):
        """``(init, step, offset, pred, bound)`` when ``loop`` leaves only by ``latch``'s test of an induction
        variable (step 1 or -1) against a bound defined outside the loop: the loop goes on while
        ``init + offset * step + k * step`` (in its iteration ``k``) ``pred`` ``bound``; else None."""
        term = latch.terminator
        exits = loop.exit_edges
        if len(exits) != 1 or exits[0][0] is not latch or loop.latches != [latch] or \
                not isinstance(term, CondBr) or not isinstance(term.condition, ICmp):
            return None
        cmp = term.condition
        pred, lhs, rhs = cmp.predicate, cmp.lhs, cmp.rhs
        found = self._counted_operand(loop, lhs)
        if found is None:
            found, pred, lhs, rhs = self._counted_operand(loop, rhs), self._SWAPPED[pred], rhs, lhs
        if found is None:
            return None
        init, step, offset = found
        if not loop.contains(term.true_dest):  # the test says when to leave: negate it
            pred = self._NEGATED[pred]
        up = step.signed_value == 1
        if not ((pred == "ne" and step.signed_value in (1, -1)) or (pred in ("slt", "ult") and up) or
                (pred in ("sgt", "ugt") and step.signed_value == -1)):
            return None
        if isinstance(rhs, Instruction) and loop.contains(rhs.parent):
            return None
        return init, step, offset, pred, rhs

    @staticmethod
    def _last_iteration(b: IRBuilder, init: Value, step: ConstantInt, offset: int, pred: str,
                        bound: Value) -> Value:
        """The number (from 0, as an i64) of the last iteration of a loop whose exit test (see :meth:`_exit_test`)
        is ``init + offset * step`` ``pred`` ``bound`` in its iteration 0."""
        first = b.add(init, step) if offset else init
        last = b.sub(bound, first) if step.signed_value == 1 else b.sub(first, bound)
        last = last if first.type == T.i64 else b.zext(last, T.i64)
        if pred != "ne":  # a loop entered past its bound runs once (its test is at the end)
            last = b.select(b.icmp(pred, first, bound), last, ConstantInt(T.i64, 0))
        return last

    def _recount_loop(self, loop, latch: BasicBlock, exit_block: BasicBlock, edge: BasicBlock) -> None:
        """When ``loop`` leaves only by its latch's test of an induction variable (step 1 or -1) against a
        bound that the reverse sweep can recompute, the reverse edge block ``edge`` computes the last
        iteration's number from the bound instead of popping the iteration count the forward sweep would push
        (Enzyme's loop limits computed at loop entry)."""
        test = self._exit_test(loop, latch)
        if test is None:
            return
        init, step, offset, pred, rhs = test
        if not self._invariant(init, exit_block) or not self._invariant(rhs, exit_block):
            return
        b = IRBuilder.before(edge.terminator)
        last = self._last_iteration(b, self._outer(init, exit_block, b, 0), step, offset, pred,
                                    self._outer(rhs, exit_block, b, 0))
        b.store(last, self.rev_counter[id(loop.header)])
        self.recounted_loops.add(id(loop.header))

    def _invariant(self, v: Value, block: BasicBlock) -> bool:
        """``v`` is free in the reverse of ``block``, or defined outside the loop that holds ``block``: caching
        it once per iteration of its own loop costs less than a tape record in every iteration of that one."""
        if self._free(v, block, None, 0) is not None:
            return True
        loop = self.loops.loop_for(block)
        return isinstance(v, Instruction) and loop is not None and not loop.contains(v.parent)

    def _counted_operand(self, loop, v: Value):
        """(init, constant step, 0 or 1) when ``v`` is an induction variable of ``loop`` (0) or its value
        for the next iteration (1)."""
        for phi in loop.header.phis():
            iv = self.induction.get(id(phi))
            if iv is None or iv[0] is not loop or not isinstance(iv[2], ConstantInt):
                continue
            if v is phi:
                return iv[1], iv[2], 0
            if v is phi.incoming_value_for(loop.latches[0]):  # phi + step (see _affine)
                return iv[1], iv[2], 1
        return None

    def _affine(self, phi: Phi, loop, preds):
        """(init, step) when ``phi`` is ``init`` on entry and ``phi + step`` on every back edge."""
        init = step = None
        for v, p in phi.incoming:
            if loop.contains(p):
                if not (isinstance(v, BinaryOp) and v.opcode == "add" and phi in v.operands):
                    return None
                other = v.rhs if v.lhs is phi else v.lhs
                if isinstance(other, Instruction) and loop.contains(other.parent):
                    return None
                if step is not None and step is not other:
                    return None
                step = other
            else:
                if init is not None and init is not v:
                    return None
                init = v
        if init is None or step is None:
            return None
        return init, step

    def _shadow(self, p: Value, block: BasicBlock, b: IRBuilder, user: Instruction) -> Value:
        return self._primal(self.shadows.of(p, user), block, b)

    # -- one block ----------------------------------------------------------------------------------

    def _reverse_block(self, block: BasicBlock) -> None:
        rb = self.rev[id(block)]
        b = IRBuilder.at_end(rb)
        insts = self.orig_insts[id(block)]
        phi_adjoints = []
        for lane in range(self.width):
            self._use_lane(lane)
            for inst in reversed(insts):
                if inst.is_terminator or isinstance(inst, Phi):
                    continue
                self._reverse_instruction(inst, block, b)
            # phi adjoints are handed to the incoming values on the edges
            phi_adjoints += [(lane, phi, self._take_adjoint(b, phi)) for phi in block.phis()
                             if any(phi is i for i in insts) and self.activity.is_active(phi)]
        self._use_lane(0)
        preds = self.orig_preds[id(block)]
        if block is self.G.entry_block:
            b.br(self.exit_block)
            return
        targets = {id(p): self._edge_block(p, block, phi_adjoints) for p in preds}
        for p in preds:
            ended = self._loops_ended(p, block)
            if len(ended) == 1 and not ended[0].contains(block):
                self._recount_loop(ended[0], p, block, targets[id(p)])
        loop = self.loops.loop_for(block)
        if loop is not None and loop.header is block:
            # the reverse of a loop header: more iterations to undo, or back out of the loop
            outside = [p for p in preds if not loop.contains(p)]
            latches = [p for p in preds if loop.contains(p)]
            slot = self.rev_counter[id(block)]
            k = b.load(T.i64, slot)
            out_b, back_b = BasicBlock(), BasicBlock()
            back_b.move_after(rb)
            out_b.move_after(rb)
            b.cond_br(b.icmp("eq", k, ConstantInt(T.i64, 0)), out_b, back_b)
            bb = IRBuilder.at_end(back_b)
            bb.store(bb.sub(k, ConstantInt(T.i64, 1)), slot)
            self._dispatch(bb, [targets[id(p)] for p in latches])
            self._dispatch(IRBuilder.at_end(out_b), [targets[id(p)] for p in outside])
        else:
            branch = self._recomputable_branch(block, preds)
            if branch is not None:
                cond, on_true, on_false = branch
                b.cond_br(self._outer(cond, block, b, 0), targets[id(on_true)], targets[id(on_false)])
                self.recomputed_branches.add(id(block))
            else:
                self._dispatch(b, [targets[id(p)] for p in preds])

    def _recomputable_branch(self, block: BasicBlock, preds: list[BasicBlock]):
        """(condition, predecessor on true, predecessor on false) when which of ``block``'s two predecessors
        ran is decided by the conditional branch of its immediate dominator in the same loop iteration, and
        that condition can be recomputed in the reverse sweep (from induction variables, arguments...) or
        cached outside the loop: then the reverse sweep branches on it instead of reading the predecessor's
        index from the tape."""
        if len(preds) != 2:
            return None
        d = self.dt.idom(block)
        term = d.terminator if d is not None else None
        if not isinstance(term, CondBr) or term.true_dest is term.false_dest or \
                self.loops.loop_for(d) is not self.loops.loop_for(block):
            return None
        sides = []
        for p in preds:
            if p is d:
                side = [s is block for s in term.successors]
            else:  # p is reached only through one edge out of d
                side = [s is not block and self._edge_dominates(d, s, p) for s in term.successors]
            if side.count(True) != 1:
                return None
            sides.append(side.index(True))
        if sorted(sides) != [0, 1] or not self._invariant(term.condition, block):
            return None
        return term.condition, preds[sides.index(0)], preds[sides.index(1)]

    def _dispatch(self, b: IRBuilder, targets: list[BasicBlock]) -> None:
        """Branch to the one target, or to the one whose index the forward sweep recorded."""
        if len(targets) == 1:
            b.br(targets[0])
        else:
            idx = self.tape.pop_value(b, T.i32)
            b.switch(idx, targets[0], [(ConstantInt(T.i32, i), t) for i, t in enumerate(targets)][1:])

    def _edge_block(self, pred: BasicBlock, block: BasicBlock, phi_adjoints) -> BasicBlock:
        eb = BasicBlock(f"rev.{pred.name or ''}.{block.name or ''}")
        eb.move_after(self.rev[id(block)])
        b = IRBuilder.at_end(eb)
        for lane, phi, d in phi_adjoints:
            self._use_lane(lane)
            self._add_adjoint(b, phi.incoming_value_for(pred), d)
        self._use_lane(0)
        b.br(self.rev[id(pred)])
        self.edges[(id(pred), id(block))] = eb
        return eb

    # -- exit -----------------------------------------------------------------------------------

    def _emit_exit(self) -> None:
        b = IRBuilder.at_end(self.exit_block)
        outs = [s for s in self.dc.args if s.kind == OUT]
        vals = [self.primal_return_value] if self.return_primal else []
        for s in outs:
            arg = self.G.args[s.param.index]
            vals.append(b.load(arg.type, self._slot(arg)))
        self.tape.free(b)
        for call in self.tape._frees:
            self.note_free(call, TAPE_FREE)
        if not vals:
            b.ret_void()
        elif len(vals) == 1:
            b.ret(vals[0])
        else:
            agg = IRBuilder.poison(self.ret_type)
            for i, v in enumerate(vals):
                agg = b.insert_value(agg, v, [i])
            b.ret(agg)


__all__ = ["ReverseMode"]


def _strided_pointer_copy(module):
    """``helper(dst, src, stride, count)``: for each of ``count`` records ``stride`` bytes apart, the pointer at
    the start of each ``src`` record (null when ``src`` is null) into the ``dst`` record."""
    def step(lb, args, i):
        dst, src, stride = args
        at = lb.mul(i, stride)
        has_src = lb.icmp("ne", src, ConstantNull(T.ptr))
        p = lb.select(has_src, lb.load(T.ptr, lb.select(has_src, lb.gep(T.i8, src, [at]), dst)), ConstantNull(T.ptr))
        lb.store(p, lb.gep(T.i8, dst, [at]))
    return counted_loop_function(module, "__enzcc_record_pointer_copy", (T.ptr, T.ptr, T.i64), step)
