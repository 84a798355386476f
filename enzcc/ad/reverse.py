"""Reverse mode (combined forward + reverse sweep in one function), on a prepared copy of the function.

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

from dataclasses import dataclass, field

from enzcc.ad.activity import ALLOCATORS, Activity, has_float, is_user_call
from enzcc.ad.api import CONST, DUP, DUPNONEED, OUT, DiffCall, is_float
from enzcc.ad.emit import add_values, emit_partial, splat, times, zero
from enzcc.ad.errors import ad_error
from enzcc.ad.memory import memory_types_for
from enzcc.ad import custom
from enzcc.ad.hints import hints_of, rule_name
from enzcc.ad.prepare import (clone_body, finalize, inactive_functions, new_derivative_function, prepare,
                              return_block)
from enzcc.ad.rules import load_rules
from enzcc.ad.shadow import Shadows, to_i64, usable_size
from enzcc.ad.tape import Tape
from enzcc.ir import types as T
from enzcc.ir.block import BasicBlock
from enzcc.ir.builder import IRBuilder
from enzcc.ir.cfg import DominatorTree, LoopInfo, reverse_post_order
from enzcc.ir.instructions import (Alloca, BinaryOp, Call, Cast, ExtractElement, ExtractValue, FCmp, Freeze,
                                   GetElementPtr, ICmp, InsertElement, InsertValue, Instruction, Invoke, Load, Phi,
                                   Select, ShuffleVector, Store, UnaryOp)
from enzcc.ir.values import Argument, Constant, ConstantInt, Value
from enzcc.ir.values import GlobalRef as GlobalRefType

#: calls that never carry derivatives and are kept in the forward sweep as they are
INACTIVE_CALLS = {"printf", "fprintf", "puts", "putchar", "fputs", "fflush", "abort", "exit", "free", "fwrite",
                  "time", "clock", "rand", "srand", "assert", "__assert_fail", "omp_get_thread_num", "sprintf",
                  "snprintf", "__cxa_guard_acquire", "__cxa_guard_release", "_ZdlPv", "_ZdaPv", "_ZdlPvm"}
#: intrinsics with nothing to do in the reverse sweep
_IGNORED_INTRINSICS = ("llvm.lifetime.", "llvm.assume", "llvm.experimental.noalias.scope.decl", "llvm.dbg.",
                       "llvm.prefetch", "llvm.stacksave", "llvm.stackrestore", "llvm.invariant.", "llvm.trap",
                       "llvm.umax", "llvm.umin", "llvm.smax", "llvm.smin", "llvm.abs", "llvm.ctpop", "llvm.ctlz",
                       "llvm.cttz", "llvm.fshl", "llvm.fshr", "llvm.bswap", "llvm.is.fpclass", "llvm.sadd.",
                       "llvm.uadd.", "llvm.ssub.", "llvm.usub.", "llvm.smul.", "llvm.umul.", "llvm.expect",
                       "llvm.objectsize", "llvm.vscale")


@dataclass
class _Cached:
    """A primal value the reverse sweep reads from a slot."""

    value: Value
    slot: Instruction
    use_blocks: list[BasicBlock] = field(default_factory=list)
    """Primal blocks whose reverse code reads it."""
    loads: list[tuple[Instruction, BasicBlock]] = field(default_factory=list)
    """The reverse sweep's reads of the slot, with the primal block whose reverse code holds each."""


class ReverseMode:
    """Builds the gradient function for one ``__enzyme_autodiff`` call."""

    def __init__(self, dc: DiffCall, module, body=None, logic=None, split: bool = False,
                 active_return: bool | None = None):
        self.dc = dc
        self.module = module
        self.logic = logic
        """The cache of derived functions (for calls that were not inlined)."""
        self.split = split
        """Built to be cut into an augmented primal and a reverse function (:mod:`enzcc.ad.split`): the
        result's adjoint is a parameter, and memory may change between the two (no loads repeated)."""
        self.active_return = is_float(dc.fn.return_type) if active_return is None else active_return
        self.rules = load_rules()
        primal = dc.fn
        shadow_specs = [s for s in dc.args if s.kind in (DUP, DUPNONEED)]
        params = [a.type for a in primal.args] + [T.ptr] * len(shadow_specs)
        names = [a.name for a in primal.args] + [f"d_{s.param.name or s.param.index}" for s in shadow_specs]
        outs = dc.out_args
        if not outs:
            ret = T.void
        elif len(outs) == 1:
            ret = outs[0].param.type
        else:
            ret = T.StructType(tuple(s.param.type for s in outs))
        self.ret_type = ret
        self.d_ret_index = None
        if split and self.active_return:
            self.d_ret_index = len(params)
            params.append(primal.return_type)
            names.append("d_ret")
        self.G = new_derivative_function(module, primal, f"diffe_{primal.name}", params, ret, names)
        clone_body(body or primal, self.G)
        self.nprimal = len(primal.args)
        self.kinds = [s.kind for s in dc.args]
        arg_shadows = {}
        for n, s in enumerate(shadow_specs):
            arg_shadows[id(self.G.args[s.param.index])] = self.G.args[self.nprimal + n]
        self.arg_shadows = arg_shadows
        self.adjoint_slots: dict[int, Instruction] = {}
        self.cached: dict[int, _Cached] = {}
        self._recomputed: dict[tuple, Value] = {}
        """(value, reverse block) -> the value recomputed there (reused within the block)."""
        self._keep: list[Value] = []

    # ---------------------------------------------------------------------------------------------

    def build(self):
        G = self.G
        prepare(G)
        self.ret_block = return_block(G)
        self.activity = Activity(G, self.kinds, self.active_return, "reverse")
        self.memtypes = memory_types_for(self.dc, G, G.args)
        self.dt = DominatorTree(G)
        self.loops = LoopInfo(G, self.dt)
        self.blocks = reverse_post_order(G)
        self.orig_insts = {id(b): list(b.instructions) for b in self.blocks}
        self.orig_preds = {id(b): b.predecessors for b in self.blocks}
        self.always = self._always_executed_blocks()
        # forward code: shadows (emitted next to their primals)
        self.shadows = Shadows(G, self.activity, self.arg_shadows)
        self.shadows.build()
        self.tape = Tape(self.module, G)
        self.memory_is_read_only = not self.split and self._arguments_never_written()
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
        self._seed_and_jump()
        for b in self.blocks:
            self._reverse_block(b)
        self._emit_exit()
        self._emit_caches()
        finalize(G)
        return G

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
        ret.erase()
        b = IRBuilder.at_end(self.ret_block)
        if value is not None and self.active_return and self.activity.is_active(value):
            if self.split:  # the caller's adjoint of the result, at the start of the reverse code
                self._add_adjoint(IRBuilder.at_end(self.rev[id(self.ret_block)]), value,
                                  self.G.args[self.d_ret_index])
            else:
                self._add_adjoint(b, value, splat(value.type, 1.0))
        b.br(self.rev[id(self.ret_block)])

    # -- adjoints -------------------------------------------------------------------------------

    def _slot(self, v: Value, ty: T.Type | None = None) -> Instruction:
        s = self.adjoint_slots.get(id(v))
        if s is None:
            ty = ty or v.type
            b = IRBuilder.at_start(self.G.entry_block)
            s = b.alloca(ty, in_entry=True)
            # zero it right after the allocas
            first = next(i for i in self.G.entry_block.instructions if not isinstance(i, Alloca))
            IRBuilder.before(first).store(zero(ty), s)
            self.adjoint_slots[id(v)] = s
            self._keep.append(v)
        return s

    def _add_adjoint(self, b: IRBuilder, v: Value, contribution: Value) -> None:
        """``adjoint(v) += contribution`` (nothing for constants and inactive values)."""
        if isinstance(v, Constant) or not (self.activity.is_active(v) or
                                           (isinstance(v, Argument) and self._is_out_arg(v))):
            return
        slot = self._slot(v)
        old = b.load(v.type, slot)
        b.store(add_values(b, old, contribution), slot)

    def _is_out_arg(self, v: Argument) -> bool:
        return v.index < self.nprimal and self.kinds[v.index] == OUT

    def _take_adjoint(self, b: IRBuilder, v: Value, ty: T.Type | None = None) -> Value:
        """Load and reset ``adjoint(v)`` (reset matters in loops)."""
        ty = ty or v.type
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

    # -- primal values in the reverse sweep --------------------------------------------------------

    def _primal(self, v: Value, block: BasicBlock, b: IRBuilder, depth: int = 0) -> Value:
        """``v`` as available at the current reverse position (reverse of primal ``block``): used directly,
        recomputed from values that are free to get, or read from its cache."""
        free = self._free(v, block, b, 0)
        if free is not None:
            return free
        if depth < 4 and self._cheap(v) and id(v) not in self.cached:
            # caching one operand instead of v costs the same and the operand is often needed anyway
            ops = [(op, self._free(op, block, b, 1)) for op in v.operands]
            missing = [op for op, f in ops if f is None]
            if len(missing) == 1 and not isinstance(missing[0], BasicBlock) and has_float(missing[0].type):
                c = v.clone()
                for i, (op, f) in enumerate(ops):
                    c.set_operand(i, f if f is not None else self._primal(op, block, b, depth + 1))
                return b.insert(c)
        c = self.cached.get(id(v))
        if c is None:
            slot = IRBuilder.at_start(self.G.entry_block).alloca(v.type, in_entry=True)
            c = self.cached[id(v)] = _Cached(v, slot)
            self._keep.append(v)
        if not any(u is block for u in c.use_blocks):
            c.use_blocks.append(block)
        load = b.load(v.type, c.slot)
        c.loads.append((load, block))
        return load

    #: instructions cheap enough to recompute in the reverse sweep rather than cache
    _RECOMPUTABLE = (BinaryOp, UnaryOp, Cast, ICmp, FCmp, Select, GetElementPtr, ExtractValue, ExtractElement,
                     InsertValue, InsertElement, Freeze)
    _MAX_RECOMPUTE_DEPTH = 6

    def _free(self, v: Value, block: BasicBlock, b: IRBuilder, depth: int) -> Value | None:
        """``v`` in the reverse sweep without any cache, or None: constants and arguments; values of blocks that
        always run outside loops; loop induction variables (from the reverse iteration counter); cheap
        instructions and loads from never-written memory whose operands are themselves free."""
        if not isinstance(v, Instruction):
            return v
        if id(v.parent) in self.always:
            return v
        key = (id(v), id(b.block))
        memo = self._recomputed.get(key)
        if memo is not None:
            return memo
        out = None
        iv = self.induction.get(id(v))
        if iv is not None:
            loop, init, step = iv
            if loop.contains(block) and depth < self._MAX_RECOMPUTE_DEPTH:
                # init and step are defined outside the loop: caching them (once per loop entry) is cheaper
                # than caching the induction variable every iteration
                init_v = self._outer(init, block, b, depth)
                step_v = self._outer(step, block, b, depth)
                if init_v is not None and step_v is not None:
                    k = b.load(T.i64, self.rev_counter[id(loop.header)])
                    k = k if v.type == T.i64 else b.trunc(k, v.type) if v.type.bits < 64 else b.zext(k, v.type)
                    out = b.add(init_v, b.mul(k, step_v))
        elif depth < self._MAX_RECOMPUTE_DEPTH and (
                self._cheap(v) or (isinstance(v, Load) and self._load_recomputable(v))):
            ops = []
            loop = self.loops.loop_for(v.parent)
            for op in v.operands:
                if isinstance(op, BasicBlock):
                    return None
                fo = self._free(op, block, b, depth + 1)
                if fo is None and loop is not None and isinstance(op, Instruction) and not loop.contains(op.parent):
                    fo = self._primal(op, block, b, depth + 1)  # loop-invariant: cached outside the loop
                if fo is None:
                    return None
                ops.append(fo)
            c = v.clone()
            for i, op in enumerate(ops):
                c.set_operand(i, op)
            out = b.insert(c)
        if out is not None:
            self._recomputed[key] = out
        return out

    #: intrinsics as cheap as arithmetic (recomputed like it)
    _CHEAP_INTRINSICS = ("llvm.fmuladd.", "llvm.fma.", "llvm.fabs.", "llvm.copysign.", "llvm.minnum.",
                         "llvm.maxnum.", "llvm.minimum.", "llvm.maximum.")

    def _cheap(self, v: Value) -> bool:
        if isinstance(v, self._RECOMPUTABLE):
            return True
        return isinstance(v, Call) and not isinstance(v, Invoke) and \
            (v.callee_name or "").startswith(self._CHEAP_INTRINSICS)

    def _outer(self, v: Value, block: BasicBlock, b: IRBuilder, depth: int) -> Value:
        """A value defined outside the current loop: free, or cached at its own (outer) level."""
        f = self._free(v, block, b, depth + 1)
        return f if f is not None else self._primal(v, block, b, depth + 1)

    def _load_recomputable(self, load: Load) -> bool:
        """A load can be repeated in the reverse sweep when nothing in the function writes primal memory it
        could read: the function writes no memory reachable from its arguments."""
        from enzcc.ad.memory import base_object

        return not load.volatile and load.ordering is None and self.memory_is_read_only and \
            isinstance(base_object(load.pointer), (Argument, GlobalRefType))

    def _arguments_never_written(self) -> bool:
        """True when the function's writes all go to memory it allocated itself (so argument and global memory
        is the same in the reverse sweep as in the forward one)."""
        from enzcc.ad.memory import base_object

        local = set()
        for inst in self.G.instructions():
            if isinstance(inst, Alloca) or (isinstance(inst, Call) and inst.callee_name in ALLOCATORS):
                local.add(id(inst))
        for inst in self.G.instructions():
            if isinstance(inst, Store):
                if id(base_object(inst.pointer)) not in local:
                    return False
            elif isinstance(inst, Call):
                name = inst.callee_name or ""
                if name.startswith(("llvm.memcpy", "llvm.memmove", "llvm.memset")):
                    if id(base_object(inst.args[0])) not in local:
                        return False
                elif name in ALLOCATORS or name == "free" or name.startswith(_IGNORED_INTRINSICS) or \
                        self.rules.for_call(rule_name(self.module, name)) is not None:
                    continue
                else:
                    return False
            elif inst.opcode in ("atomicrmw", "cmpxchg", "va_arg"):
                return False
        return True

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
        for inst in reversed(insts):
            if inst.is_terminator or isinstance(inst, Phi):
                continue
            self._reverse_instruction(inst, block, b)
        # phi adjoints are handed to the incoming values on the edges
        phi_adjoints = [(phi, self._take_adjoint(b, phi)) for phi in block.phis()
                        if any(phi is i for i in insts) and self.activity.is_active(phi)]
        preds = self.orig_preds[id(block)]
        if block is self.G.entry_block:
            b.br(self.exit_block)
            return
        targets = {id(p): self._edge_block(p, block, phi_adjoints) for p in preds}
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
            self._dispatch(b, [targets[id(p)] for p in preds])

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
        for phi, d in phi_adjoints:
            incoming = phi.incoming_value_for(pred)
            self._add_adjoint(b, incoming, d)
        b.br(self.rev[id(pred)])
        self.edges[(id(pred), id(block))] = eb
        return eb

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
            sp = self._shadow(inst.pointer, block, b, inst)
            b.store(b.fadd(b.load(bits, sp, align=inst.align), d), sp, align=inst.align)
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
                sp = self._shadow(inst.pointer, block, b, inst)
                old = b.load(inst.type, sp, align=inst.align)
                b.store(add_values(b, old, d), sp, align=inst.align)
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

    def _reverse_shuffle(self, inst: ShuffleVector, d: Value, b: IRBuilder) -> None:
        a, c = inst.operands[0], inst.operands[1]
        n = a.type.count
        mask = [e.value if isinstance(e, ConstantInt) else -1 for e in getattr(inst.mask, "elements", [])]
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
                if not isinstance(inst, Call) or not is_user_call(inst) or inst.callee_name in inactive:
                    continue
                if inst.callee_name in hints_of(self.module).gradient:  # the user's own derivative
                    entry = custom.augment_call(self, inst)
                    insts[i] = entry[0]
                    self.user_calls[id(entry[0])] = ("custom", entry)
                    self._keep.append(entry[0])
                    continue
                kinds = tuple(DUP if isinstance(a.type, T.PointerType) and act.is_active_ptr(a) else
                              OUT if is_float(a.type) and (act.is_active(a) or self._is_out(a)) else CONST
                              for a in inst.args)
                ret_active = is_float(inst.type) and act.is_active(inst)
                if act.is_active_ptr(inst):
                    raise ad_error("returning a pointer to memory with derivatives from a function that is not "
                                   "inlined (a recursive one) is not supported", inst)
                if all(k == CONST for k in kinds) and not ret_active:
                    continue  # no derivative flows through it: the primal call stays
                callee = self.module.functions[inst.callee_name]
                nargs = len(inst.args)
                aug, rev = self.logic.split_of_call(inst, callee, kinds, ret_active)
                b = IRBuilder.before(inst)
                args = list(inst.args) + [self.shadows.of(a, inst) for a, k in zip(inst.args, kinds) if k == DUP]
                new = b.call(aug, args)
                tape = b.extract_value(new, [0])
                result = None
                if not isinstance(inst.type, T.VoidType):
                    result = b.extract_value(new, [1])
                    inst.replace_all_uses_with(result)
                    if ret_active:
                        act._mark(act.varied, result)
                        act._mark(act.useful, result)
                inst.erase()
                insts[i] = new
                self.user_calls[id(new)] = ("split", (new, nargs, rev, kinds, tape, result, ret_active))
                self._keep.append(new)

    def _reverse_user_call(self, entry: tuple, block: BasicBlock, b: IRBuilder) -> None:
        call, nargs, rev, kinds, tape, result, ret_active = entry
        args = [self._primal(a, block, b) for a in call.args]
        if ret_active:
            args.append(self._take_adjoint(b, result))
        args.append(self._primal(tape, block, b))
        r = b.call(rev, args)
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
            else:
                self._reverse_user_call(entry, block, b)
            return
        name = inst.callee_name or ""
        act = self.activity
        if name.startswith(_IGNORED_INTRINSICS) or name in inactive_functions(self.module):
            return
        if name.startswith(("llvm.memset",)):
            dest = inst.args[0]
            if act.is_active_ptr(dest):
                b.memset(self._shadow(dest, block, b, inst), 0, self._primal(inst.args[2], block, b))
            return
        if name.startswith(("llvm.memcpy", "llvm.memmove")):
            self._reverse_memcpy(inst, block, b)
            return
        if name in ALLOCATORS or name == "posix_memalign":
            for call, shadow in self.shadows.allocations:
                if call is inst:
                    if name == "realloc":
                        self._reverse_realloc(inst, shadow, block, b)
                    free = self.module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))
                    b.call(free, [self._primal(shadow, block, b)])
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
        if name in INACTIVE_CALLS:
            return
        what = f"'{name}'" if name else "a function pointer"
        raise ad_error(f"no derivative rule for call to {what}", inst)

    def _reverse_realloc(self, inst: Call, shadow: Value, block: BasicBlock, b: IRBuilder) -> None:
        """The adjoints of the bytes ``realloc`` moved go back to the old shadow (kept alive until here)."""
        kind = self.memtypes.reallocated_kind(inst)
        if isinstance(kind, (T.PointerType, T.IntType)):
            return  # shadow pointers were copied going forward; integers and pointers carry no adjoint
        if not isinstance(kind, T.FloatType):
            raise ad_error("cannot tell whether the memory realloc moves holds floating-point values", inst)
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
        kind = self.memtypes.copy_kind(inst)
        if kind is None:
            raise ad_error("cannot tell whether the memory this memcpy copies holds floating-point values "
                           "(nothing in the function or its caller reads or writes it with one type)", inst)
        if isinstance(kind, T.PointerType) or isinstance(kind, T.IntType):
            return  # pointers were copied into the shadow in the forward sweep; integers carry nothing
        n = self._primal(size, block, b)
        ddest = self._shadow(dest, block, b, inst) if act.is_active_ptr(dest) else None
        dsrc = self._shadow(src, block, b, inst) if act.is_active_ptr(src) else None
        if ddest is None:
            return
        helper = self.tape.memcpy_adjoint_helper(kind)
        b.call(helper, [ddest, dsrc if dsrc is not None else ddest, n,
                        ConstantInt(T.i1, int(dsrc is not None))])

    # -- exit -----------------------------------------------------------------------------------

    def _emit_exit(self) -> None:
        b = IRBuilder.at_end(self.exit_block)
        outs = [s for s in self.dc.args if s.kind == OUT]
        vals = []
        for s in outs:
            arg = self.G.args[s.param.index]
            vals.append(b.load(arg.type, self._slot(arg)))
        self.tape.free(b)
        if not outs:
            b.ret_void()
        elif len(outs) == 1:
            b.ret(vals[0])
        else:
            agg = IRBuilder.poison(self.ret_type)
            for i, v in enumerate(vals):
                agg = b.insert_value(agg, v, [i])
            b.ret(agg)

    # -- caches and tape pushes --------------------------------------------------------------------

    def _uncache_recomputable(self) -> None:
        """Once every cache is known: a cheap value computable from values that are cached (or free) anyway is
        recomputed from them where the reverse sweep reads it, instead of taking a tape slot of its own."""
        position = {}
        for block in self.blocks:
            for inst in block.instructions:
                position[id(inst)] = len(position)
        eligible: set[int] = set()

        def from_caches(v: Value, depth: int) -> bool:
            if not isinstance(v, Instruction) or id(v.parent) in self.always:
                return not isinstance(v, BasicBlock)
            if id(v) in self.cached and id(v) not in eligible:
                return True
            if depth > self._MAX_RECOMPUTE_DEPTH or not self._cheap(v) or id(v) in self.induction:
                return False
            return all(from_caches(op, depth + 1) for op in v.operands)

        for c in sorted(self.cached.values(), key=lambda c: position.get(id(c.value), -1)):
            v = c.value
            if id(v) in position and self._cheap(v) and all(from_caches(op, 1) for op in v.operands):
                eligible.add(id(v))

        def rebuild(v: Value, b: IRBuilder, block: BasicBlock, memo: dict) -> Value:
            if not isinstance(v, Instruction) or id(v.parent) in self.always:
                return v
            if id(v) in memo:
                return memo[id(v)]
            oc = self.cached.get(id(v))
            if oc is not None and id(v) not in eligible:
                out = b.load(v.type, oc.slot)
                if not any(u is block for u in oc.use_blocks):
                    oc.use_blocks.append(block)
            else:
                out = v.clone()
                for i, op in enumerate(v.operands):
                    new = rebuild(op, b, block, memo)
                    if new is not op:
                        out.set_operand(i, new)
                b.insert(out)
            memo[id(v)] = out
            return out

        removed = [self.cached[vid] for vid in eligible]
        for c in removed:
            for load, block in c.loads:
                b = IRBuilder.before(load)
                memo: dict = {}
                clone = c.value.clone()
                for i, op in enumerate(c.value.operands):
                    new = rebuild(op, b, block, memo)
                    if new is not op:
                        clone.set_operand(i, new)
                b.insert(clone)
                load.replace_all_uses_with(clone)
                load.erase()
        for vid in eligible:
            del self.cached[vid]

    def _emit_caches(self) -> None:
        self._uncache_recomputable()
        loops = self.loops
        push_sets: dict[int, list[_Cached]] = {}
        for c in self.cached.values():
            v = c.value
            # store the value into its slot where it is defined
            if isinstance(v, Phi):
                anchor = v.parent.first_non_phi
                IRBuilder.before(anchor).store(v, c.slot)
            else:
                IRBuilder.after(v).store(v, c.slot)
            # which loops' iterations must save and restore it
            chain = []
            loop = loops.loop_for(v.parent)
            while loop is not None:
                chain.append(loop)
                loop = loop.parent
            for j, L in enumerate(chain):
                if j == 0 or any(not chain[j - 1].contains(u) for u in c.use_blocks):
                    push_sets.setdefault(id(L.header), []).append(c)
        # forward edge blocks push; reverse edge blocks pop
        for block in self.blocks:
            preds = self.orig_preds[id(block)]
            loop = self.loops.loop_for(block)
            if loop is not None and loop.header is block:
                groups = [[p for p in preds if not loop.contains(p)], [p for p in preds if loop.contains(p)]]
            else:
                groups = [preds]
            for pred in preds:
                group = next(g for g in groups if any(x is pred for x in g))
                ended = self._loops_ended(pred, block)
                # (value in the forward code, type, where the reverse sweep puts it back)
                items: list[tuple] = []
                for L in ended:
                    for c in push_sets.get(id(L.header), []):
                        items.append(("slot", c.value.type, c.slot))
                    if not L.contains(block):  # leaving L: its iteration count starts the reverse count
                        items.append(("counter", T.i64, L))
                if not items and len(group) == 1:
                    continue
                fwd = self._split_edge(pred, block)
                fb = IRBuilder.before(fwd.terminator)
                values = [fb.load(t, where) if kind == "slot" else self.counter[id(where.header)]
                          for kind, t, where in items]
                types = [t for _, t, _ in items]
                if len(group) > 1:
                    values.append(ConstantInt(T.i32, [id(x) for x in group].index(id(pred))))
                    types.append(T.i32)
                self.tape.push_values(fb, values, types)
                if items:
                    eb = self.edges[(id(pred), id(block))]
                    rb = IRBuilder.before(eb.terminator)
                    popped = self.tape.pop_values(rb, types[:len(items)])
                    for (kind, _, where), v in zip(items, popped):
                        rb.store(v, where if kind == "slot" else self.rev_counter[id(where.header)])

    def _loops_ended(self, pred: BasicBlock, block: BasicBlock):
        """Loops whose current iteration ends on the edge ``pred -> block``, innermost first."""
        out = []
        loop = self.loops.loop_for(pred)
        while loop is not None:
            if not loop.contains(block) or loop.header is block:
                out.append(loop)
                if loop.header is block:
                    break
            else:
                break
            loop = loop.parent
        return out

    def _split_edge(self, pred: BasicBlock, block: BasicBlock) -> BasicBlock:
        eb = BasicBlock(f"{pred.name or ''}.to.{block.name or ''}")
        eb.move_after(pred)
        IRBuilder.at_end(eb).br(block)
        term = pred.terminator
        for i, op in enumerate(term.operands):
            if op is block:
                term.set_operand(i, eb)
        for phi in block.phis():
            phi.replace_incoming_block(pred, eb)
        return eb


__all__ = ["ReverseMode", "INACTIVE_CALLS"]
