"""Which primal values the reverse sweep reads, and how (the role of Enzyme's GradientUtils/CacheUtility):
used directly when their block always runs outside loops, recomputed when cheap (arithmetic, casts, address
computations, loads of memory nothing writes, induction variables from the reverse iteration counter), or
cached: a stack slot written where the value is defined, pushed on the tape at the end of each loop iteration
and popped back when the reverse sweep starts that iteration. One place decides; :class:`CacheUtility` is
mixed into :class:`enzcc.ad.reverse.ReverseMode`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import enzcc.ad.shadow_reuse as shadow_reuse
from enzcc.ad.activity import ALLOCATORS, has_float, is_allocation
from enzcc.ad.adjoint import TAPE_FREE
from enzcc.ad.registry import hook
from enzcc.ad.tape import slot_size
from enzcc.ir import types as T
from enzcc.ir.block import BasicBlock
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import (Alloca, BinaryOp, Call, Cast, ExtractElement, ExtractValue, FCmp, Freeze,
                                   GetElementPtr, ICmp, InsertElement, InsertValue, Instruction, Invoke, Load,
                                   Phi, Select, Store, UnaryOp)
from enzcc.ir.values import Argument, ConstantInt, Value
from enzcc.ir.values import GlobalRef as GlobalRefType



#: calls that write no memory the function reads (besides allocators): releases, and the size query that
#: zeroes a shadow allocation over its usable size (enzcc.ad.shadow.zero_heap_shadow)
_NOT_WRITING = ("free", "malloc_usable_size", shadow_reuse.TAKE, shadow_reuse.RELEASE)


@dataclass
class _Cached:
    """A primal value the reverse sweep reads from a slot."""

    value: Value
    slot: Instruction
    use_blocks: list[BasicBlock] = field(default_factory=list)
    """Primal blocks whose reverse code reads it."""
    loads: list[tuple[Instruction, BasicBlock]] = field(default_factory=list)
    """The reverse sweep's reads of the slot, with the primal block whose reverse code holds each."""



class CacheUtility:
    """Cache-or-recompute decisions and the tape pushes of a :class:`enzcc.ad.reverse.ReverseMode`."""

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
            # (an address is rebuilt from its cached index: addresses into several arrays share one index,
            # which may also be narrower than a pointer)
            if len(missing) == 1 and not isinstance(missing[0], BasicBlock) and \
                    (has_float(missing[0].type) or
                     isinstance(v, GetElementPtr) and isinstance(missing[0].type, T.IntType)):
                c = v.clone()
                for i, (op, f) in enumerate(ops):
                    c.set_operand(i, f if f is not None else self._primal(op, block, b, depth + 1))
                return b.insert(c)
        paired = self._sincos_partner(v, block, b)
        if paired is not None:
            return paired
        c = self.cached.get(id(v)) or self._new_cache(v)
        if not any(u is block for u in c.use_blocks):
            c.use_blocks.append(block)
        load = b.load(v.type, c.slot)
        c.loads.append((load, block))
        return load

    def _sincos_partner(self, v: Value, block: BasicBlock, b: IRBuilder) -> Value | None:
        """``sin(x)`` (``cos(x)``) with a derivative: recomputed from ``x`` (free, or cached in its place: as many
        bytes) rather than cached. Its derivative computes ``cos(x)`` (``sin(x)``) in the reverse sweep anyway,
        and code generation makes the two one ``sincos`` call, which costs little more than either; the forward
        sweep's call is then removed when only the derivative used it (an output that need not be computed)."""
        if not isinstance(v, Call) or isinstance(v, Invoke) or id(v) in self.cached or \
                not (v.callee_name or "").startswith(("llvm.sin.", "llvm.cos.")) or \
                not self.activity.is_active(v):
            return None
        x = self._free(v.args[0], block, b, 1)
        if x is None:  # (its argument is cached instead: as many bytes)
            x = self._primal(v.args[0], block, b, 1)
        return b.call_intrinsic(v.callee_name.rsplit(".", 1)[0], [x], flags=v.fast_math_flags)

    #: instructions cheap enough to recompute in the reverse sweep rather than cache
    _RECOMPUTABLE = (BinaryOp, UnaryOp, Cast, ICmp, FCmp, Select, GetElementPtr, ExtractValue, ExtractElement,
                     InsertValue, InsertElement, Freeze)
    _MAX_RECOMPUTE_DEPTH = 6
    #: in GPU code, where a tape is device memory each thread fills, longer chains are computed again
    _MAX_RECOMPUTE_DEPTH_GPU = 12

    @property
    def _recompute_depth(self) -> int:
        return self._MAX_RECOMPUTE_DEPTH_GPU if self.module.targets_gpu else self._MAX_RECOMPUTE_DEPTH

    def _free(self, v: Value, block: BasicBlock, b: IRBuilder | None, depth: int) -> Value | None:
        """``v`` in the reverse sweep without any cache, or None: constants and arguments; values of blocks that
        always run outside loops; loop induction variables (from the reverse iteration counter); cheap
        instructions and loads from never-written memory whose operands are themselves free. With ``b`` None,
        only asks: emits nothing and returns ``v`` or None."""
        if not isinstance(v, Instruction):
            return v
        if id(v.parent) in self.always:
            return v
        key = (id(v), id(b.block) if b is not None else None)
        memo = self._recomputed.get(key) if b is not None else None
        if memo is not None:
            return memo
        out = None
        iv = self.induction.get(id(v))
        if iv is not None:
            loop, init, step = iv
            if loop.contains(block) and depth < self._recompute_depth:
                if b is None:
                    return v
                # init and step are defined outside the loop: caching them (once per loop entry) is cheaper
                # than caching the induction variable every iteration
                init_v = self._outer(init, block, b, depth)
                step_v = self._outer(step, block, b, depth)
                if init_v is not None and step_v is not None:
                    k = b.load(T.i64, self.rev_counter[id(loop.header)])
                    k = k if v.type == T.i64 else b.trunc(k, v.type) if v.type.bits < 64 else b.zext(k, v.type)
                    out = b.add(init_v, b.mul(k, step_v))
        elif depth < self._recompute_depth and (
                self._cheap(v) or (isinstance(v, Load) and self._load_recomputable(v))):
            ops = []
            loop = self.loops.loop_for(v.parent)
            for op in v.operands:
                if isinstance(op, BasicBlock):
                    return None
                fo = self._free(op, block, b, depth + 1)
                if fo is None and loop is not None and isinstance(op, Instruction) and not loop.contains(op.parent):
                    # loop-invariant: cached outside the loop
                    fo = op if b is None else self._primal(op, block, b, depth + 1)
                if fo is None:
                    return None
                ops.append(fo)
            if b is None:
                return v
            c = v.clone()
            for i, op in enumerate(ops):
                c.set_operand(i, op)
            out = b.insert(c)
        if out is not None:
            self._recomputed[key] = out
        return out

    #: intrinsics as cheap as arithmetic (recomputed like it)
    _CHEAP_INTRINSICS = ("llvm.fmuladd.", "llvm.fma.", "llvm.fabs.", "llvm.copysign.", "llvm.minnum.",
                         "llvm.maxnum.", "llvm.minimum.", "llvm.maximum.",
                         "llvm.smax.", "llvm.smin.", "llvm.umax.", "llvm.umin.", "llvm.abs.",
                         "llvm.cttz.", "llvm.ctlz.", "llvm.ctpop.")

    def _cheap(self, v: Value) -> bool:
        if isinstance(v, self._RECOMPUTABLE):
            return True
        if not isinstance(v, Call) or isinstance(v, Invoke):
            return False
        if (v.callee_name or "").startswith(self._CHEAP_INTRINSICS):
            return True
        # in GPU code a tape is device memory every thread fills: math is computed again instead (rule: pure)
        return self.module.targets_gpu and bool(hook(v, "pure")) and \
            not any(isinstance(a.type, T.PointerType) for a in v.args)

    def _outer(self, v: Value, block: BasicBlock, b: IRBuilder, depth: int) -> Value:
        """A value defined outside the current loop: free, or cached at its own (outer) level."""
        f = self._free(v, block, b, depth + 1)
        return f if f is not None else self._primal(v, block, b, depth + 1)

    def _load_recomputable(self, load: Load) -> bool:
        """A load can be repeated in the reverse sweep when nothing in the function writes primal memory it
        could read: it reads an argument's or a global's memory, and every write of the function goes to
        memory the function allocated itself, or to other memory that cannot be the same (another global;
        anything, when either pointer is a ``noalias`` (``restrict``) argument). Not in split mode: the caller
        may write the memory between the two halves."""
        from enzcc.ad.memory import base_object

        if load.volatile or load.ordering is not None:
            return False
        base = base_object(load.pointer)
        if isinstance(base, Call) and id(base) in self._reloadable_allocations():
            return self._not_written_after(load, base)  # (no other code can reach its bytes)
        if self.written_bases is None or not isinstance(base, (Argument, GlobalRefType)):
            return False
        for w in self.written_bases:
            if w is base:
                return False
            distinct_globals = isinstance(base, GlobalRefType) and isinstance(w, GlobalRefType) and \
                base.symbol != w.symbol
            if not (distinct_globals or self._noalias(base) or self._noalias(w)):
                return False
        return True

    #: allocation functions whose memory can be read again in the reverse sweep (their ``free`` waits for it)
    _RELOAD_ALLOCATORS = ("malloc", "calloc", "_Znwm", "_Znam")
    #: address arithmetic on a reloadable allocation's pointers (its other users: loads, stores to it,
    #: comparisons, ``free`` and the memory intrinsics)
    _POINTER_USERS = (GetElementPtr, Cast, Phi, Select)

    def _reloadable_allocations(self) -> dict:
        """Heap allocations of the function (by id -> their ``free`` calls) whose bytes a load can read again
        in the reverse sweep: made once per call (in a block that always runs, outside loops), freed only by
        ``free`` calls in this function, and whose pointers (and the addresses computed from them) go nowhere
        else: loaded from, stored to (not stored as values), ``memset``/``memcpy``/``memmove``, freed. Their
        ``free`` calls move to the end of the reverse sweep (:meth:`_defer_frees`). Not in split mode or in
        OpenMP regions."""
        if self._reloadable is not None:
            return self._reloadable
        self._reloadable = {}
        if self.split or getattr(self, "parallel", False):
            return self._reloadable
        primal = {id(i) for b in self.blocks for i in self.orig_insts[id(b)]}
        for block in self.blocks:
            if id(block) not in self.always:
                continue
            for inst in self.orig_insts[id(block)]:
                if isinstance(inst, Call) and inst.callee_name in self._RELOAD_ALLOCATORS and \
                        not isinstance(inst, Invoke):
                    frees = self._only_accessed(inst, primal)
                    if frees is not None:
                        self._reloadable[id(inst)] = frees
        return self._reloadable

    def _only_accessed(self, alloc: Call, primal: set[int]) -> list | None:
        """The ``free`` calls of ``alloc`` when its pointers are only accessed (see
        :meth:`_reloadable_allocations`), else None. Also notes, for :meth:`_not_written_after`, every
        instruction that writes its bytes. ``primal``: the ids of the primal's instructions (the others are
        enzcc's own: shadows, tape)."""
        frees, writes, seen, work = [], [], {id(alloc)}, [alloc]
        while work:
            p = work.pop()
            for use in p.uses:
                u = use.user
                if id(u) not in primal:
                    continue  # (enzcc's own code: shadows, tape)
                if isinstance(u, Load) and use.index == 0 or isinstance(u, ICmp):
                    continue  # (read, or compared: `if (!t) abort();`)
                if isinstance(u, Store) and use.index == 1:
                    writes.append(u)
                elif isinstance(u, self._POINTER_USERS) and not (isinstance(u, Select) and use.index == 0) and \
                        not (isinstance(u, Cast) and u.opcode not in ("bitcast", "addrspacecast")):
                    if id(u) not in seen:
                        seen.add(id(u))
                        work.append(u)
                elif isinstance(u, Call) and not isinstance(u, Invoke) and u.callee_name == "free":
                    if p is not alloc:
                        return None
                    frees.append(u)
                elif isinstance(u, Call) and (u.callee_name or "").startswith(("llvm.memset", "llvm.memcpy",
                                                                                "llvm.memmove")):
                    if use.index == 1:  # (operand 0 is the callee: the destination is operand 1)
                        writes.append(u)
                    elif not (use.index == 2 and not u.callee_name.startswith("llvm.memset")):
                        return None  # (the size, or a memset's value: it escapes as an integer)
                elif isinstance(u, Call) and (u.callee_name or "").startswith(("llvm.lifetime.", "llvm.dbg.")):
                    continue
                else:
                    return None  # (stored as a value, passed to a call, returned, made an integer: it escapes)
        self._writes_of[id(alloc)] = writes
        return frees

    def _not_written_after(self, load: Load, alloc: Call) -> bool:
        """Nothing writes ``alloc``'s bytes after ``load`` (in the same block after it, or in any block reachable
        from its block): the bytes are still what it read when the reverse sweep runs. Then its ``free`` calls
        wait for the end of the reverse sweep."""
        block = load.parent
        reach = self._reachable.get(id(block))
        if reach is None:
            reach, work = set(), list(block.successors)
            while work:
                b = work.pop()
                if id(b) not in reach:
                    reach.add(id(b))
                    work.extend(b.successors)
            self._reachable[id(block)] = reach
        insts = self.orig_insts[id(block)]
        after = {id(i) for i in insts[insts.index(load) + 1:]} if load in insts else set()
        for w in self._writes_of[id(alloc)]:
            if id(w.parent) in reach or id(w) in after:
                return False
        self._deferred[id(alloc)] = alloc
        return True

    def _defer_frees(self, b: IRBuilder) -> None:
        """The ``free`` calls of allocations whose bytes the reverse sweep reads again leave the forward sweep;
        the memory is freed at the end of the reverse sweep instead (``b``: there; once every cache and
        recomputation is decided)."""
        free = self.module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))
        for key, alloc in self._deferred.items():
            for call in self._reloadable[key]:
                if call.parent is not None:
                    call.erase()
            self.note_free(b.call(free, [alloc]), TAPE_FREE)

    def _noalias(self, v: Value) -> bool:
        """``v`` is a parameter of the function being differentiated that the user's function declares
        ``noalias``."""
        params = self.dc.fn.args
        return isinstance(v, Argument) and v.parent is self.G and v.index < len(params) and \
            "noalias" in params[v.index].attrs

    def _written_bases(self) -> list | None:
        """The objects other than the function's own allocations (arguments, globals) that the function
        writes, or None when some write's object is not known (a pointer loaded from memory, a call that may
        write anything)."""
        from enzcc.ad.memory import base_object

        local = set()
        for inst in self.G.instructions():
            if isinstance(inst, Alloca) or (isinstance(inst, Call) and (is_allocation(inst) or
                                                                       inst.callee_name == shadow_reuse.TAKE)):
                local.add(id(inst))
        out: list = []

        def written(p: Value) -> bool:
            base = base_object(p)
            if id(base) in local:
                return True
            if not isinstance(base, (Argument, GlobalRefType)):
                return False
            if not any(base is w for w in out):
                out.append(base)
            return True

        for inst in self.G.instructions():
            if isinstance(inst, Store):
                if not written(inst.pointer):
                    return None
            elif isinstance(inst, Call):
                name = inst.callee_name or ""
                if name.startswith(("llvm.memcpy", "llvm.memmove", "llvm.memset")):
                    if not written(inst.args[0]):
                        return None
                elif name in ALLOCATORS or name in _NOT_WRITING or hook(inst, "writes_no_memory"):
                    continue
                else:
                    return None
            elif inst.opcode in ("atomicrmw", "cmpxchg"):  # (they write what their first operand points to)
                if not written(inst.operands[0]):
                    return None
            elif inst.opcode == "va_arg":
                return None
        return out

    # -- caches and tape pushes --------------------------------------------------------------------

    def _cache_sources(self, position: dict) -> None:
        """A cut through the data flow, once every cache is known: cached cheap integer values that all come,
        through cheap instructions, from one integer ``s`` that is not cached (a loop's ``len`` phi, from which its
        ``len / 2``, ``n >> ctz(len)`` and ``len / 2 > 0`` are computed) cache ``s`` instead when that takes
        no more tape slots than they do; :meth:`_uncache_recomputable` then recomputes them from it. Besides
        the tape, the reverse sweep then sees how they relate (``len / 2 > 0`` guards the loop that indexes
        ``a`` and ``a + len / 2``), which its optimization needs to tell memory accesses apart.

        ``s`` must be defined in a loop that holds the cached value's block (or outside loops), so that its
        slot holds the same iteration's value wherever the reverse sweep reads the cached one."""
        by_source: dict[int, tuple[Value, list[_Cached]]] = {}

        def sources(v: Value, depth: int, out: dict) -> bool:
            for op in v.operands:
                if isinstance(op, BasicBlock):
                    return False
                if not isinstance(op, Instruction) or id(op.parent) in self.always:
                    continue
                if id(op) in self.induction:
                    return False  # (recomputed from the reverse iteration counter instead)
                if id(op) in self.cached or not self._cheap(op) or depth >= self._recompute_depth:
                    out[id(op)] = op
                elif not sources(op, depth + 1, out):
                    return False
                if len(out) > 1:
                    return False
            return True

        for c in self.cached.values():
            v = c.value
            if id(v) not in position or not self._cheap(v) or id(v) in self.induction or \
                    not isinstance(v.type, T.IntType):
                continue
            found: dict = {}
            if not sources(v, 1, found) or len(found) != 1:
                continue
            (s,) = found.values()
            if id(s) in self.cached or id(s) not in position or not isinstance(s.type, T.IntType):
                continue  # (integers only: a float source would put a value with a derivative on the tape)
            loop = self.loops.loop_for(s.parent)
            if loop is not None and not loop.contains(v.parent):
                continue
            by_source.setdefault(id(s), (s, []))[1].append(c)
        for s, group in by_source.values():
            slots = sum(slot_size(self.module, c.value.type) for c in group)
            if slot_size(self.module, s.type) <= slots:
                self._new_cache(s)

    def _new_cache(self, v: Value) -> _Cached:
        """Cache ``v``: a stack slot of its own, which :meth:`_emit_caches` stores and pushes."""
        slot = IRBuilder.at_start(self.G.entry_block).alloca(v.type, in_entry=True)
        c = self.cached[id(v)] = _Cached(v, slot)
        self._keep.append(v)
        return c

    def _uncache_recomputable(self, position: dict) -> None:
        """Once every cache is known: a cheap value computable from values that are cached (or free) anyway is
        recomputed from them where the reverse sweep reads it, instead of taking a tape slot of its own.
        ``position``: each primal instruction's place in the function."""
        eligible: set[int] = set()

        def from_caches(v: Value, depth: int) -> bool:
            if not isinstance(v, Instruction) or id(v.parent) in self.always:
                return not isinstance(v, BasicBlock)
            if id(v) in self.cached and id(v) not in eligible:
                return True
            if depth > self._recompute_depth or not self._cheap(v) or id(v) in self.induction:
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

        # the reads of the values to recompute, by the block of the reverse code they are in, in their order
        # there: each block recomputes a value (and reads a cached operand) once, the first time it needs it,
        # and later reads in the block use that (a fresh recomputation per read repeated whole expression
        # trees: REBOUND's 1,000-instruction Bulirsch-Stoer step made 108,000 lines of reverse code)
        by_block: dict[int, list] = {}
        for vid in eligible:
            c = self.cached[vid]
            for load, block in c.loads:
                by_block.setdefault(id(load.parent), []).append((load, block, c))
        for reads in by_block.values():
            order = {id(inst): k for k, inst in enumerate(reads[0][0].parent.instructions)}
            reads.sort(key=lambda r: order[id(r[0])])
            memo: dict = {}
            for load, block, c in reads:
                clone = memo.get(id(c.value))
                if clone is None:
                    b = IRBuilder.before(load)
                    clone = c.value.clone()
                    for i, op in enumerate(c.value.operands):
                        new = rebuild(op, b, block, memo)
                        if new is not op:
                            clone.set_operand(i, new)
                    b.insert(clone)
                    memo[id(c.value)] = clone
                load.replace_all_uses_with(clone)
                load.erase()
        for vid in eligible:
            del self.cached[vid]

    def _emit_caches(self) -> None:
        position = {}
        for block in self.blocks:
            for inst in block.instructions:
                position[id(inst)] = len(position)
        self._cache_sources(position)
        self._uncache_recomputable(position)
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
        plans: dict[tuple[int, int], tuple] = {}  # edge -> (pred, block, items, branch index or None)
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
                    if not L.contains(block) and id(L.header) not in self.recounted_loops:
                        # leaving L: its iteration count starts the reverse count
                        items.append(("counter", T.i64, L))
                index = None
                if len(group) > 1 and id(block) not in self.recomputed_branches:
                    index = [id(x) for x in group].index(id(pred))
                if items or index is not None:
                    plans[(id(pred), id(block))] = (pred, block, items, index)
        ahead = self._loops_reserved_ahead(plans)
        for loop, _, _ in ahead.values():
            for pred in self.orig_preds[id(loop.header)]:
                if not loop.contains(pred):
                    plans.setdefault((id(pred), id(loop.header)), (pred, loop.header, [], None))
        for pred, block, items, index in plans.values():
            fwd = pred.split_edge(block, f"{pred.name or ''}.to.{block.name or ''}")
            fb = IRBuilder.before(fwd.terminator)
            values = [fb.load(t, where) if kind == "slot" else self.counter[id(where.header)]
                      for kind, t, where in items]
            types = [t for _, t, _ in items]
            if index is not None:
                values.append(ConstantInt(T.i32, index))
                types.append(T.i32)
            loop = self.loops.loop_for(pred)
            if values:
                self.tape.push_values(fb, values, types, reserved=loop is not None and block is loop.header and
                                      id(block) in ahead)
            if id(block) in ahead and not ahead[id(block)][0].contains(pred):
                self._reserve_ahead(fb, *ahead[id(block)])
            if items:
                eb = self.edges[(id(pred), id(block))]
                rb = IRBuilder.before(eb.terminator)
                popped = self.tape.pop_values(rb, types[:len(items)])
                for (kind, _, where), v in zip(items, popped):
                    rb.store(v, where if kind == "slot" else self.rev_counter[id(where.header)])

    def _loops_reserved_ahead(self, plans: dict) -> dict:
        """Loops whose tape records are made room for at their entry, found before any edge is split (header id
        -> (loop, the record's types, its exit test)): the loop leaves only by its latch's test of an induction
        variable against a bound known when it is entered (:meth:`ReverseMode._exit_test`), so its iteration count
        is known there, and the only record pushed inside it is the one its back edge pushes in each iteration
        (no inner loop or branch pushes)."""
        if not self.tape.can_reserve_ahead:
            return {}
        out = {}
        for loop in self.loops.loops:
            latch = loop.latch
            back = plans.get((id(latch), id(loop.header))) if latch is not None else None
            test = self._exit_test(loop, latch) if back is not None else None
            if test is None:
                continue
            if any(p is not latch and loop.contains(p) and loop.contains(blk) for p, blk, _, _ in plans.values()):
                continue
            types = [t for _, t, _ in back[2]] + ([T.i32] if back[3] is not None else [])
            out[id(loop.header)] = (loop, types, test)
        return out

    def _reserve_ahead(self, b: IRBuilder, loop, types: list, test: tuple) -> None:
        """At an entry edge of ``loop`` (see :meth:`_loops_reserved_ahead`): room for a record of ``types`` per
        iteration."""
        init, step, offset, pred, bound = test
        count = b.add(self._last_iteration(b, init, step, offset, pred, bound), ConstantInt(T.i64, 1))
        self.tape.reserve_ahead(b, count, types)

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


__all__ = ["CacheUtility"]
