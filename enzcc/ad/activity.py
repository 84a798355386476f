"""Activity analysis: which values carry derivatives, so no work is spent on the others.

* A *floating-point* value (scalar, vector, or aggregate of floats) is **active** when it is *varied* (depends on
  an active input) and *useful* (influences an active output: the return value, or memory that has a shadow).
* A *pointer* is **active** when it may point into memory that has a shadow: a ``dup`` argument, anything
  derived from one (gep, casts, phi, select), a pointer loaded from shadowed memory, or a local allocation
  that holds floating-point data. Active pointers get shadow pointers.
* Integers never carry derivatives.
"""

from __future__ import annotations

from enzcc.ad.api import DUP, DUPNONEED, OUT, has_float, has_pointer  # noqa: F401  (re-exported)
from enzcc.ad.memory import ALLOCATORS, is_allocation  # noqa: F401  (re-exported)
from enzcc.ad.registry import allocates_through, copied_arguments, hook, passes_arguments
from enzcc.ir import types as T
from enzcc.ir.instructions import (Alloca, AtomicRMW, Call, Cast, ExtractElement, ExtractValue, GetElementPtr, InsertElement,
                                   InsertValue, Instruction, Load, Phi, Select, ShuffleVector, Store)
from enzcc.ir.values import Argument, ConstantNull, ConstantPoison, ConstantUndef, GlobalRef, Value

#: pointer-forwarding instructions
_PTR_FORWARD = ("getelementptr", "bitcast", "addrspacecast", "phi", "select", "freeze")


def runs_program_code(call) -> bool:
    """A call through which other code gets the arguments and may store them: a call that was not inlined
    (:func:`is_user_call`), or one whose rule says so (an OpenMP fork runs the region's function, a
    checkpointed loop its step, BLAS writes its arrays...: :mod:`enzcc.ad.registry`)."""
    return is_user_call(call) or passes_arguments(call)


def returns_shadow(call) -> bool:
    """A call that is not inlined (:func:`is_user_call`) returning a pointer, whose derived functions return the
    pointer's shadow with it (not a function with a registered derivative, which returns none)."""
    if not isinstance(call.type, T.PointerType) or not is_user_call(call):
        return False
    from enzcc.ad.hints import hints_of

    hints = hints_of(call.module)
    name = call.callee_name
    return name not in hints.gradient and name not in hints.derivative and name not in hints.splitderivative


def is_user_call(call) -> bool:
    """A call to a function with a body that was not inlined (a recursive call): differentiated by calling the
    callee's derived functions. (Functions the user gave hints about are not: they were kept on purpose.)"""
    name = call.callee_name
    module = call.module
    if not name or name.startswith("llvm.") or name in ALLOCATORS or module is None:
        return False
    callee = module.functions.get(name)
    if callee is None or callee.is_declaration:
        return False
    from enzcc.ad.hints import hints_of

    from enzcc.ad.prepare import inactive_functions

    hints = hints_of(module)
    return name not in inactive_functions(module) and name not in hints.like and name not in hints.allocators and \
        name not in hints.deallocators  # (those have their own rules)


class Activity:
    """The result of the analysis for one function."""

    def __init__(self, fn, arg_kinds: list[str], active_return: bool, mode: str = "reverse",
                 runtime_activity: bool = False):
        self.fn = fn
        self.mode = mode
        self.runtime_activity = runtime_activity
        """``enzyme_runtime_activity``: shadows are compared with their primal when the derivative runs
        (:mod:`enzcc.ad.runtime_activity`)."""
        self.active_ptrs: set[int] = set()
        self.varied: set[int] = set()
        self.useful: set[int] = set()
        self._keep: list[Value] = []
        self._analyze(arg_kinds, active_return)

    # -- queries ------------------------------------------------------------------------------

    def is_active_ptr(self, v: Value) -> bool:
        return id(v) in self.active_ptrs

    def is_active(self, v: Value) -> bool:
        """An active floating-point value (needs an adjoint / a tangent)."""
        return id(v) in self.varied and id(v) in self.useful

    # -- analysis -----------------------------------------------------------------------------

    def _mark(self, s: set[int], v: Value) -> bool:
        if id(v) in s:
            return False
        s.add(id(v))
        self._keep.append(v)
        return True

    def _analyze(self, arg_kinds: list[str], active_return: bool) -> None:
        fn = self.fn
        insts = list(fn.instructions())
        # 1. active pointers: from dup arguments and float-holding allocations, forwarded to a fixpoint
        for arg, kind in zip(fn.args, arg_kinds):
            if kind in (DUP, DUPNONEED) and isinstance(arg.type, T.PointerType):
                self._mark(self.active_ptrs, arg)
        escaping, candidates = self._float_holding_allocations(insts)
        for a in escaping:
            self._mark(self.active_ptrs, a)
        self.active_globals: list[GlobalRef] = []
        """The globals written by differentiated code (:mod:`enzcc.ad.globals`) this function uses."""
        module = getattr(fn, "module", None)
        written = set()
        if module is not None:
            from enzcc.ad.globals import active_globals

            written = active_globals(module)
        if written:
            from enzcc.ad.globals import used_globals

            for name in sorted(written & used_globals(fn)):
                g = module.global_ref(name)
                self._mark(self.active_ptrs, g)
                self.active_globals.append(g)
        from enzcc.ad.prepare import inactive_functions

        inactive = inactive_functions(fn.module) if getattr(fn, "module", None) is not None else frozenset()
        for arg, kind in zip(fn.args, arg_kinds):
            if has_float(arg.type) and (kind == OUT or (self.mode == "forward" and kind == DUP)):
                self._mark(self.varied, arg)
        # 2. active pointers and varied floats, to a fixpoint; a local allocation that does not escape gets
        # derivatives only once something with derivatives may be written into it
        writers = {id(a): self._writers(a) for a in candidates}
        # a call that is not inlined (a recursive one), given memory or floats with derivatives, may return memory
        # with derivatives: its augmented primal returns the shadow too
        pointer_calls = [i for i in insts if isinstance(i, Call) and returns_shadow(i)]
        while True:
            self._propagate_pointers(insts)
            self._propagate_varied(insts, inactive)
            woken = [a for a in candidates if id(a) not in self.active_ptrs and
                     any(self._writes_derivatives(kind, w) for kind, w in writers[id(a)])]
            woken += [c for c in pointer_calls if id(c) not in self.active_ptrs and
                      (any(id(a) in self.active_ptrs or id(a) in self.varied for a in c.args) or
                       self._lands_in_active(c))]
            if not woken:
                break
            for a in woken:
                self._mark(self.active_ptrs, a)
        from enzcc.ad.atomics import refuse_float_compare_exchange

        refuse_float_compare_exchange(self, insts)  # (before the float rebuilt from its bits is refused)
        self._check_float_bits(insts)
        self._check_integer_pointers(insts)
        self._check_lost_stores(insts, arg_kinds)
        from enzcc.ad.ptrstores import check as check_pointer_stores

        check_pointer_stores(self, insts, is_user_call)  # (a pointer without a shadow kept where one is read back)
        # 3. useful floats: backward from the return value and from stores into shadowed memory (into memory
        # private to the function, only once something useful reads it back)
        from enzcc.ad.memory import base_object

        private = self._private_memory(insts)
        pending: dict[int, list[Value]] = {}
        work: list[Value] = []
        for inst in insts:
            if inst.opcode == "ret" and inst.operands and active_return:
                work.append(inst.operands[0])
            elif isinstance(inst, Store) and id(inst.pointer) in self.active_ptrs and has_float(inst.value.type):
                base = base_object(inst.pointer)
                if id(base) in private:
                    pending.setdefault(id(base), []).append(inst.value)
                else:
                    work.append(inst.value)
            elif isinstance(inst, AtomicRMW) and id(inst.operands[0]) in self.active_ptrs and has_float(inst.type):
                work.append(inst.operands[1])  # (an atomic add into memory with derivatives: :mod:`enzcc.ad.atomics`)
            elif isinstance(inst, Call) and runs_program_code(inst) and \
                    (any(id(a) in self.active_ptrs for a in inst.args) or self.reaches_active_globals(inst) or
                     id(inst) in self.active_ptrs):
                # the callee may store them in that memory, or in the memory it returns
                work += [a for a in inst.args if has_float(a.type)]
        while work:
            v = work.pop()
            if not has_float(v.type) or not self._mark(self.useful, v):
                continue
            if isinstance(v, Load) and pending:
                work += pending.pop(id(base_object(v.pointer)), ())  # (its memory's stores matter now)
            if isinstance(v, Instruction):
                for op in self._float_inputs(v):
                    if id(op) not in self.useful:
                        work.append(op)

    @staticmethod
    def _private_memory(insts: list[Instruction]) -> set[int]:
        """The allocations (``alloca``, ``malloc`` & co.) that only this function's loads and stores reach: every
        pointer into one is used as the address of a load of floats or pointers, of a store, in address
        arithmetic, or freed. What is stored there matters only if a useful value is loaded back: a buffer the
        function writes and frees unread (a dead computation, which may overflow to inf) gives no derivative,
        and no 0 * inf in the reverse sweep."""
        out: set[int] = set()
        for inst in insts:
            if not (isinstance(inst, Alloca) or (isinstance(inst, Call) and is_allocation(inst) and
                                                 inst.callee_name != "realloc")):
                continue
            todo, seen, private = [inst], set(), True
            while todo and private:
                p = todo.pop()
                if id(p) in seen:
                    continue
                seen.add(id(p))
                for use in p.uses:
                    u = use.user
                    if isinstance(u, (GetElementPtr, Cast)) and u.operands[0] is p and \
                            isinstance(u.type, T.PointerType):
                        todo.append(u)
                    elif isinstance(u, Load) and (has_float(u.type) or isinstance(u.type, T.PointerType)):
                        continue
                    elif isinstance(u, Store) and u.pointer is p and u.value is not p:
                        continue
                    elif isinstance(u, Call) and (u.callee_name == "free" or
                                                  (u.callee_name or "").startswith("llvm.lifetime.")):
                        continue
                    else:
                        private = False
                        break
            if private:
                out.add(id(inst))
        return out

    def _propagate_pointers(self, insts: list[Instruction]) -> None:
        """Active pointers forwarded (geps, casts, phis, loads of active memory...) to a fixpoint."""
        changed = True
        while changed:
            changed = False
            for inst in insts:
                if id(inst) in self.active_ptrs:
                    if isinstance(inst, (Phi, Select)) and isinstance(inst.type, T.PointerType):
                        # an allocation merged with memory that has derivatives gets a shadow too (reads
                        # through the merged pointer then see zeros for it)
                        for src in self._ptr_sources(inst):
                            if (isinstance(src, Alloca) or (isinstance(src, Call) and is_allocation(src))) \
                                    and id(src) not in self.active_ptrs:
                                changed |= self._mark(self.active_ptrs, src)
                    continue
                if isinstance(inst, InsertValue) and has_pointer(inst.type):
                    # aggregates carrying pointers (Rust slices, Fortran descriptors) carry their shadows
                    if id(inst.aggregate) in self.active_ptrs or id(inst.value) in self.active_ptrs:
                        changed |= self._mark(self.active_ptrs, inst)
                    continue
                if isinstance(inst, ExtractValue) and has_pointer(inst.type):
                    if id(inst.aggregate) in self.active_ptrs:
                        changed |= self._mark(self.active_ptrs, inst)
                    continue
                if not isinstance(inst.type, T.PointerType):
                    continue
                if inst.opcode in _PTR_FORWARD or (isinstance(inst, (Phi, Select)) and has_pointer(inst.type)):
                    srcs = self._ptr_sources(inst)
                    if any(id(s) in self.active_ptrs for s in srcs):
                        changed |= self._mark(self.active_ptrs, inst)
                elif isinstance(inst, Load) and id(inst.pointer) in self.active_ptrs:
                    changed |= self._mark(self.active_ptrs, inst)
                elif isinstance(inst, Call) and inst.callee_name == "realloc" and id(inst.args[0]) in self.active_ptrs:
                    changed |= self._mark(self.active_ptrs, inst)  # the memory moves: so do its derivatives
                elif isinstance(inst, Call) and (shadowed := hook(inst, "result_is_shadowed")) and \
                        shadowed(self, inst):
                    # (a node of a container with derivatives, a global's shadow in a context: its rule says)
                    changed |= self._mark(self.active_ptrs, inst)

    def _propagate_varied(self, insts: list[Instruction], inactive) -> None:
        """Varied floats: forward from active arguments and loads of shadowed memory, to a fixpoint."""
        changed = True
        while changed:
            changed = False
            for inst in insts:
                if id(inst) in self.varied or not has_float(inst.type):
                    continue
                if isinstance(inst, Load):
                    if id(inst.pointer) in self.active_ptrs:
                        changed |= self._mark(self.varied, inst)
                elif isinstance(inst, AtomicRMW):  # (it returns what memory with derivatives held)
                    if id(inst.operands[0]) in self.active_ptrs or id(inst.operands[1]) in self.varied:
                        changed |= self._mark(self.varied, inst)
                elif isinstance(inst, Call):
                    if inst.callee_name in inactive:
                        continue
                    if any(id(a) in self.varied for a in inst.args) or self._reads_active_memory(inst):
                        changed |= self._mark(self.varied, inst)
                elif any(id(op) in self.varied for op in inst.operands):
                    changed |= self._mark(self.varied, inst)

    def _check_integer_pointers(self, insts: list[Instruction]) -> None:
        """A pointer rebuilt from an integer (``inttoptr``, when no round trip could be folded away, see
        :func:`enzcc.ad.prepare.fold_pointer_round_trips`) that is used to read or write floating-point memory
        is refused: enzcc cannot tell whether it points to memory with derivatives (it would get none)."""
        from enzcc.ad.errors import ad_error
        from enzcc.ir.values import Constant

        for inst in insts:
            if isinstance(inst, Cast) and inst.opcode == "inttoptr" and not isinstance(inst.value, Constant) \
                    and _accesses_floats(inst):
                raise ad_error("a pointer rebuilt from an integer (inttoptr) is used to access floating-point "
                               "memory: enzcc cannot tell whether that memory has derivatives", inst)

    def _check_float_bits(self, insts: list[Instruction]) -> None:
        """Floats that would silently lose their derivative as integer bits, refused: a float rebuilt from
        integer bits that were loaded from memory with derivatives (after shifts, masks, truncations), and such
        bits stored back to memory with derivatives after passing through phis, selects or bit operations. (Plain
        integer moves of whole floats were turned back into floats when the function was prepared, and a load
        stored unchanged is a bit copy the derivative follows.)"""
        from enzcc.ad.errors import ad_error

        for inst in insts:
            if isinstance(inst, Cast) and inst.opcode == "bitcast" and has_float(inst.type) \
                    and not has_float(inst.value.type):
                start, what = inst.value, ("a floating-point value is rebuilt here from integer bits loaded from "
                                           "memory that has derivatives; enzcc cannot follow its derivative")
            elif isinstance(inst, Store) and isinstance(inst.value, Instruction) and \
                    isinstance(inst.value.type, T.IntType) and not isinstance(inst.value, Load) and \
                    id(inst.pointer) in self.active_ptrs and not _integer_field_store(inst):
                start, what = inst.value, ("integer bits loaded from memory that has derivatives are stored here "
                                           "after a phi, select or bit operation; enzcc cannot tell whether they "
                                           "are a float and follow its derivative")
            else:
                continue
            if self._active_bits_load(start, _BIT_MOVES,
                                      lambda load: not (_integer_tbaa(load) or _integer_field(load))):
                raise ad_error(what, inst)

    def _check_lost_stores(self, insts: list[Instruction], arg_kinds: list[str]) -> None:
        """A value with derivatives stored into memory without derivatives loses them. That is what the user
        asked for when the memory is reached from an ``enzyme_const`` argument; anywhere else (memory from a
        call enzcc knows nothing about, a global) it would be a silently wrong derivative: refused."""
        from enzcc.ad.errors import ad_error

        const_args = {id(a) for a, k in zip(self.fn.args, arg_kinds) if k not in (DUP, DUPNONEED)}
        read_back: dict[int, object] | None = None
        for inst in insts:
            if isinstance(inst, AtomicRMW):  # (an atomic add writes like a store)
                value, pointer = inst.operands[1], inst.operands[0]
            elif isinstance(inst, Store):
                value, pointer = inst.value, inst.pointer
            else:
                self._check_const_copy(inst, insts, const_args)
                self._check_const_call(inst, insts, const_args)
                continue
            if not (id(value) in self.varied and has_float(value.type) and id(pointer) not in self.active_ptrs):
                continue
            reached: dict[int, Argument] = {}
            root = self._unknown_root(pointer, const_args, reached=reached)
            if root is None and reached:
                self._refuse_const_read_back(inst, reached, insts, const_args)
            a = self._escaped_allocation(insts) if root is not None and not isinstance(root, Argument) else None
            if a is not None:
                from enzcc.ad.errors import describe_pointer

                raise ad_error(f"a value with derivatives is stored through a pointer taken from "
                               f"{describe_pointer(root)}, which has no shadow and may point to local memory with "
                               f"derivatives ({describe_pointer(a)}, "
                               "whose address was stored where enzcc does not follow it); its derivative would "
                               "be lost", inst)
            if root is not None and read_back is None:
                # memory read again in the function (a float load, a copy from it): there the loss shows
                read_back = {}
                for i in insts:
                    src = i.pointer if isinstance(i, Load) and has_float(i.type) else \
                        (_copy_ends(i) or (None, None))[1]
                    if src is not None and id(src) not in self.active_ptrs:
                        r = self._unknown_root(src, const_args)
                        if r is not None:
                            read_back[id(r)] = r
            if root is not None and id(root) in read_back:
                from enzcc.ad.errors import describe_pointer

                if isinstance(root, GlobalRef):
                    from enzcc.ad.globals import global_roots

                    gv = root.resolve()
                    if not any(g is root for g in global_roots(pointer)):
                        what = f"memory that global @{root.symbol} points to, which has no shadow in enzcc"
                    elif gv is not None and getattr(gv, "is_declaration", False):
                        what = (f"global @{root.symbol}, which is defined in another file (enzcc gives shadows "
                                "only to globals defined in the code it differentiates)")
                    else:
                        what = f"global @{root.symbol}, which has no shadow in enzcc"
                else:
                    what = f"memory from {describe_pointer(root)}, which enzcc cannot give a shadow"
                raise ad_error(f"a value with derivatives is stored into {what}; its derivative would be lost "
                               "(mark the memory enzyme_const if that is intended)", inst)

    def _check_const_copy(self, inst: Instruction, insts: list[Instruction], const_args: set[int]) -> None:
        """A copy (``memcpy``, a call whose rule says it copies) from memory with derivatives into memory reached
        only through ``enzyme_const`` arguments stores values with derivatives there, as a store does: refused
        when that memory is read back (:meth:`_refuse_const_read_back`)."""
        ends = _copy_ends(inst)
        if ends is None:
            return
        dst, src = ends
        if id(src) not in self.active_ptrs or id(dst) in self.active_ptrs:
            return
        reached: dict[int, Argument] = {}
        if self._unknown_root(dst, const_args, reached=reached) is None and reached:
            self._refuse_const_read_back(inst, reached, insts, const_args)

    def _check_const_call(self, inst: Instruction, insts: list[Instruction], const_args: set[int]) -> None:
        """A call that is not inlined, given values or memory with derivatives and a pointer into memory reached
        only through ``enzyme_const`` arguments, stores floats there when its body does
        (:func:`enzcc.ad.paramuse.float_access`): they may carry derivatives, as a store's would (kissfft's
        recursive transform writing into its plan's scratch buffer). Refused when other code of the function
        reads that memory back (:meth:`_refuse_const_read_back`); the callee's own derivative refuses reading it
        back inside the call."""
        if not (isinstance(inst, Call) and is_user_call(inst)):
            return
        if not (any(id(a) in self.varied or id(a) in self.active_ptrs for a in inst.args) or
                self.reaches_active_globals(inst)):
            return
        from enzcc.ad.paramuse import float_access

        callee = inst.module.functions[inst.callee_name]
        for k, a in enumerate(inst.args):
            if not isinstance(a.type, T.PointerType) or id(a) in self.active_ptrs:
                continue
            reached: dict[int, Argument] = {}
            if self._unknown_root(a, const_args, reached=reached) is None and reached and \
                    float_access(callee, k)[1]:
                self._refuse_const_read_back(inst, reached, insts, const_args)

    def _refuse_const_read_back(self, inst: Instruction, reached: dict[int, Argument], insts: list[Instruction],
                                const_args: set[int]) -> None:
        """``inst`` stores a value with derivatives into memory reached only through the ``enzyme_const``
        arguments ``reached``, which have no shadow. A store never read back is an output the user chose not to
        differentiate; but when the function reads that memory again (a plan's scratch buffer), the value read
        has lost its derivative and everything computed from it would silently get a zero: refused, as Enzyme
        refuses it ("mismatched activity"). Conservatively, any float read of memory reached through the same
        argument counts (two of its pointer fields may point to the same buffer)."""
        from enzcc.ad.errors import ad_error

        back = self._const_read_back(insts, const_args)
        for key, arg in reached.items():
            if any(reader is not inst for reader in back.get(key, ())):
                what, who = self.const_parameter_words(arg)
                how = f"by this call to '{inst.callee_name}'" if isinstance(inst, Call) and \
                    is_user_call(inst) else "here"
                ra = " (enzyme_runtime_activity does not help: that memory has no shadow to keep the derivative in)" \
                    if self.runtime_activity else ""
                raise ad_error(f"an active value is stored {how} into memory reached through {what} and read back "
                               f"in the function: its derivative would be lost; pass {who} with enzyme_dup and a "
                               "shadow (a struct holding scratch pointers: a shadow struct whose pointers point to "
                               f"zeroed shadow buffers) (Enzyme: mismatched activity){ra}", inst)

    def const_parameter_words(self, arg: Argument) -> tuple[str, str]:
        """How a message names the ``enzyme_const`` parameter ``arg``: its source name when debug info has it
        (``'p' (enzyme_const, parameter 1)``), and the short form for the advice (``'p'``). The number is the
        position among the primal's parameters (forward mode's function has the shadows between them)."""
        from enzcc.ad.debuginfo import parameter_name

        k = next((i for i, a in enumerate(self.fn.args) if a is arg), arg.index)
        name = parameter_name(self.fn, k)
        what = f"'{name}' (enzyme_const, parameter {k + 1})" if name else f"parameter {k + 1} (enzyme_const)"
        return what, (f"'{name}'" if name else f"parameter {k + 1}")

    def _const_read_back(self, insts: list[Instruction], const_args: set[int]) -> dict[int, list[Instruction]]:
        """The ``enzyme_const`` arguments (by id) through which the function reads floats again, with the
        instructions that read them: a float load, the source of a copy, a call that is not inlined whose body
        loads floats from that memory (:func:`enzcc.ad.paramuse.float_access`), one whose rule says other code
        gets its arguments (:func:`enzcc.ad.registry.passes_arguments`), through a pointer without derivatives."""
        if getattr(self, "_const_back", None) is None:
            from enzcc.ad.paramuse import float_access

            self._const_back: dict[int, list[Instruction]] = {}
            for i in insts:
                srcs: list[Value] = []
                if isinstance(i, Load) and has_float(i.type):
                    srcs = [i.pointer]
                elif _copy_ends(i) is not None:
                    srcs = [_copy_ends(i)[1]]
                elif isinstance(i, Call) and is_user_call(i):
                    callee = i.module.functions[i.callee_name]
                    srcs = [a for k, a in enumerate(i.args)
                            if isinstance(a.type, T.PointerType) and float_access(callee, k)[0]]
                elif isinstance(i, Call) and runs_program_code(i):
                    srcs = [a for a in i.args if isinstance(a.type, T.PointerType)]
                for src in srcs:
                    if id(src) not in self.active_ptrs:
                        reached: dict[int, Argument] = {}
                        self._unknown_root(src, const_args, reached=reached)
                        for key in reached:
                            self._const_back.setdefault(key, []).append(i)
        return self._const_back

    def _escaped_allocation(self, insts: list[Instruction]):
        """An allocation with derivatives whose address is stored into memory that has none (a global holding
        pointers, say), where a pointer loaded back would carry no shadow; None if there is none."""
        if not hasattr(self, "_escaped"):
            self._escaped = None
            for inst in insts:
                if isinstance(inst, Store) and isinstance(inst.value.type, T.PointerType) and \
                        id(inst.value) in self.active_ptrs and id(inst.pointer) not in self.active_ptrs:
                    from enzcc.ad.memory import base_object

                    base = base_object(inst.value)
                    if isinstance(base, Alloca) or (isinstance(base, Call) and is_allocation(base)):
                        self._escaped = base
                        break
        return self._escaped

    def _unknown_root(self, p: Value, const_args: set[int], depth: int = 0, reached: dict | None = None):
        """The first place ``p`` comes from that is neither an ``enzyme_const`` argument nor memory reached
        from one, or None. The ``enzyme_const`` arguments met on the way are put in ``reached`` (by id)."""
        from enzcc.ad.hints import hints_of

        module = getattr(self.fn, "module", None)
        inactive_globals = hints_of(module).inactive_globals if module is not None else frozenset()
        seen: set[int] = set()
        stack = [p]
        while stack:
            v = stack.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            if isinstance(v, Argument):
                if id(v) not in const_args:
                    return v
                if reached is not None:
                    reached[id(v)] = v
            elif isinstance(v, GlobalRef) and v.symbol in inactive_globals:
                continue  # the user said its memory has no derivatives
            elif isinstance(v, (GetElementPtr, Cast)) and v.opcode in ("getelementptr", "bitcast",
                                                                       "addrspacecast"):
                stack.append(v.operands[0])
            elif isinstance(v, (Phi, Select)) or (isinstance(v, Instruction) and v.opcode == "freeze"):
                stack += [op for op in self._ptr_sources(v) if isinstance(op.type, T.PointerType)]
            elif isinstance(v, Load):
                stack.append(v.pointer)  # a pointer kept in memory: where that memory comes from
            elif isinstance(v, Alloca):  # a local that holds pointers: what is put there
                for u in v.uses:
                    user = u.user
                    if isinstance(user, Store) and u.index == 1:
                        stack.append(user.value)
                    elif isinstance(user, Call) and not (user.callee_name or "").startswith("llvm.lifetime"):
                        return user
            elif isinstance(v, (ConstantNull, ConstantPoison, ConstantUndef)):
                continue
            else:
                return v
        return None

    def _ptr_sources(self, inst: Instruction) -> list[Value]:
        if isinstance(inst, Select):
            return [inst.true_value, inst.false_value]
        if isinstance(inst, GetElementPtr):
            return [inst.pointer]
        return list(inst.operands)

    def _float_inputs(self, inst: Instruction) -> list[Value]:
        """Operands through which derivatives flow into ``inst``."""
        if isinstance(inst, Select):
            return [inst.true_value, inst.false_value]
        if isinstance(inst, Call):
            return list(inst.args)
        if isinstance(inst, (ExtractElement, ExtractValue)):
            return [inst.operands[0]]
        if isinstance(inst, InsertElement):
            return [inst.vector, inst.element]
        if isinstance(inst, (InsertValue, ShuffleVector, Phi)):
            return list(inst.operands)
        if isinstance(inst, Cast):
            return [inst.value]
        return list(inst.operands)

    def _reads_active_memory(self, call: Call) -> bool:
        return any(id(a) in self.active_ptrs for a in call.args) or self.reaches_active_globals(call)

    def reaches_active_globals(self, call: Call) -> bool:
        """A call to a function that was not inlined and uses globals with derivatives (or calls one that
        does): derivatives flow through it even without arguments that carry them."""
        module = getattr(self.fn, "module", None)
        info = getattr(module, "enzcc_active_globals", None)
        return info is not None and is_user_call(call) and bool(info.reached_by(call.callee_name))

    def _float_holding_allocations(self, insts: list[Instruction]) -> tuple[list[Instruction], list[Instruction]]:
        """Allocas and heap allocations that may hold derivatives: (those that get a shadow whatever is written
        into them, those that get one only once something with derivatives may be written into them).

        An allocation whose address escapes (stored in other memory, passed to code of the program that was
        not inlined, to BLAS, to a container's node or to ``posix_memalign``) is of the first kind: what reaches
        it there is out of sight; so is heap memory that holds floats (an inner derivative's tape and shadows in
        nested AD are followed that way). A local variable (or heap object without floats) only read and
        written here, with floating-point or pointer types or by
        memcpy, is of the second (:meth:`_writers`): a local ``std::string``, a stream or a constant table
        never gets a shadow, and calls that only see such memory need no derivative rule. An allocation that
        keeps its own address (a small-buffer string or vector) does not escape by that: pointers loaded from
        it count as pointers into it."""
        allocs = [i for i in insts if isinstance(i, Alloca) or
                  (isinstance(i, Call) and is_allocation(i))]
        escaping, candidates = [], []
        self._self_ref: set[int] = set()
        for a in allocs:
            uses = self._alloc_uses(a, follow_loads=False)
            derived = {id(u.user) for u in uses} | {id(a)}
            if any(isinstance(u.user, Store) and u.index == 0 and id(u.user.pointer) in derived for u in uses):
                self._self_ref.add(id(a))
                uses = self._alloc_uses(a, follow_loads=True)
                derived = {id(u.user) for u in uses} | {id(a)}
            holds = escapes = floats = False
            for use in uses:
                u = use.user
                if isinstance(u, (Load,)) and has_float(u.type):
                    holds = floats = True
                elif isinstance(u, Store) and use.index == 1 and (has_float(u.value.type)
                                                                  or isinstance(u.value.type, T.PointerType)):
                    holds = True
                    floats = floats or has_float(u.value.type)
                elif isinstance(u, Store) and use.index == 0:
                    if id(u.pointer) not in derived:
                        # the pointer itself is stored (into an object's field): its later uses, through a load
                        # of that field, are out of sight here, so it gets a shadow in case they read floats
                        escapes = True
                elif isinstance(u, Call) and u.callee_name and (runs_program_code(u)
                                                                 or (u.callee_name == "posix_memalign"
                                                                     and use.index == 1)
                                                                 or allocates_through(u) == use.index - 1):
                    escapes = True
                elif isinstance(u, Call) and ((u.callee_name or "").startswith(("llvm.memcpy", "llvm.memmove"))
                                              or _copies_through(u, use)):
                    holds = floats = True
            if escapes or (floats and not isinstance(a, Alloca)):  # (heap memory with floats: as before)
                escaping.append(a)
            elif holds:
                candidates.append(a)
        return escaping, candidates

    @staticmethod
    def _alloc_uses(a: Instruction, follow_loads: bool) -> list:
        """The uses of ``a`` and of the pointers derived from it (geps, casts, phis, realloc; with
        ``follow_loads``, pointers loaded from it too)."""
        out, seen, stack = [], {id(a)}, [a]
        while stack:
            p = stack.pop()
            for use in p.uses:
                u = use.user
                out.append(use)
                follow = u.opcode in _PTR_FORWARD or (isinstance(u, Call) and u.callee_name == "realloc"
                                                      and use.index == 1) or \
                    (follow_loads and isinstance(u, Load) and isinstance(u.type, T.PointerType))
                if follow and id(u) not in seen:
                    seen.add(id(u))
                    stack.append(u)
        return out

    def _writers(self, a: Instruction) -> list[tuple[str, Instruction]]:
        """What may write into allocation ``a`` (through pointers derived from it): ``store``, ``copy``
        (memcpy/memmove into it), ``call`` (any other call it is passed to), ``other`` (atomics...)."""
        out: list[tuple[str, Instruction]] = []
        for use in self._alloc_uses(a, follow_loads=id(a) in self._self_ref):
            u = use.user
            name = u.callee_name if isinstance(u, Call) else None
            if isinstance(u, Load) or u.opcode in _PTR_FORWARD or (name == "realloc" and use.index == 1):
                continue
            if isinstance(u, Store):
                if use.index == 1:
                    out.append(("store", u))
            elif isinstance(u, Call):
                n = name or ""
                if n.startswith(("llvm.memcpy", "llvm.memmove")) or _copies_through(u, use):
                    if use.index == 1 or _copies_through(u, use) == "destination":
                        out.append(("copy", u))  # (operand 0 is the callee: memcpy's destination is operand 1)
                elif not n.startswith(_NO_WRITE_CALLS) and n not in ("free", "_ZdlPv", "_ZdlPvm", "_ZdaPv"):
                    out.append(("capture" if self._may_capture(u, use.index - 1) else "call", u))
            elif isinstance(u, Instruction) and not isinstance(u, (Cast, GetElementPtr)) and \
                    u.opcode not in ("icmp", "ptrtoint"):
                out.append(("other", u))
        return out

    def _lands_in_active(self, call: Call) -> bool:
        """Whether the pointer a call returns (or one computed from it) is stored into memory with derivatives,
        or merged into a pointer with derivatives: code reading that memory takes it as memory with
        derivatives, so it needs a shadow (a recursive builder of nodes that hold only constants, linked into a
        node that has one), which the call's augmented primal returns. Without it the shadow stored there was
        null."""
        seen, work = {id(call)}, [call]
        while work:
            v = work.pop()
            for use in v.uses:
                u = use.user
                if isinstance(u, Store) and u.value is v and id(u.pointer) in self.active_ptrs:
                    return True
                if u.opcode in _PTR_FORWARD and isinstance(u.type, T.PointerType):
                    if id(u) in self.active_ptrs and isinstance(u, (Phi, Select)):
                        return True
                    if id(u) not in seen:
                        seen.add(id(u))
                        work.append(u)
        return False

    def _writes_derivatives(self, kind: str, inst: Instruction) -> bool:
        """Whether writer ``inst`` (see :meth:`_writers`) may put something with derivatives into memory."""
        if kind == "store":
            v = inst.value
            return id(v) in self.varied or id(v) in self.active_ptrs or self._bits_from_active(v)
        if kind == "copy":
            src = (copied_arguments(inst) or inst.args)[1]
            return id(src) in self.active_ptrs or not self._known_inactive_source(src)
        if kind == "capture":  # code out of sight may keep the address and write through it later
            return True
        if kind == "call":
            from enzcc.ad.prepare import is_inactive_call

            name = inst.callee_name or ""
            if name.startswith(_LIBRARY_PREFIXES) or (name and is_inactive_call(name)):
                return False  # (printing a value with derivatives into a stream puts none there)
            return any(id(x) in self.varied or id(x) in self.active_ptrs for x in inst.args) or \
                self.reaches_active_globals(inst) or bool(getattr(self, "active_globals", None)) and \
                self._opaque(inst)
        return any(id(x) in self.varied or id(x) in self.active_ptrs or self._bits_from_active(x)
                   for x in inst.operands)

    def _may_capture(self, call: Call, k: int) -> bool:
        """Whether a call to code enzcc does not see may keep argument ``k`` (a pointer) beyond the call, where
        later code could write through it: not when the parameter says ``captures(none)`` / ``nocapture``, for
        intrinsics, and for library functions known to keep such pointers only for themselves (C++ strings and
        streams: :data:`_LIBRARY_PREFIXES`) or to carry no derivatives (printf...)."""
        from enzcc.ad.prepare import is_inactive_call

        name = call.callee_name or ""
        if not name:  # through a function pointer: program code only if a function here of that type may be it
            from enzcc.ad.inline import address_taken_functions

            module = getattr(self.fn, "module", None)
            return module is not None and any(not module.functions[n].is_declaration and
                       module.functions[n].function_type == call.function_type
                       for n in address_taken_functions(module))
        if name.startswith("llvm.") or name.startswith(_LIBRARY_PREFIXES) or is_inactive_call(name):
            return False
        attrs = list(call.arg_attrs[k]) if 0 <= k < len(call.arg_attrs) else []
        module = getattr(self.fn, "module", None)
        callee = module.functions.get(name) if module is not None and name else None
        if callee is not None and 0 <= k < len(callee.args):
            attrs += list(getattr(callee.args[k], "attrs", []) or [])
        return not any(a in ("nocapture", "captures(none)") or a.startswith("captures(none") or
                       a == "readnone" for a in attrs)

    def _opaque(self, call: Call) -> bool:
        """A call to code enzcc does not see (a declaration it knows nothing about): it may read the
        program's globals."""
        from enzcc.ad.prepare import is_inactive_call

        module = getattr(self.fn, "module", None)
        name = call.callee_name
        if not name or module is None:
            return True
        callee = module.functions.get(name)
        return (callee is None or callee.is_declaration) and not is_inactive_call(name) and \
            not name.startswith("llvm.")

    def _known_inactive_source(self, p: Value) -> bool:
        """The source of a copy is memory without derivatives: an allocation or global that has none, a
        constant."""
        from enzcc.ad.memory import base_object

        base = base_object(p)
        if id(base) in self.active_ptrs:
            return False
        if isinstance(base, Alloca) or (isinstance(base, Call) and is_allocation(base)):
            return True
        if isinstance(base, GlobalRef):
            gv = base.resolve()
            return gv is not None and getattr(gv, "is_constant", False)
        return False

    def _bits_from_active(self, v: Value) -> bool:
        """An integer that may hold bits loaded from memory with derivatives (through bit operations)."""
        if not isinstance(v, Instruction) or not isinstance(v.type, (T.IntType, T.VectorType)):
            return False
        return self._active_bits_load(v, _BIT_MOVES + ("insertelement", "insertvalue", "add", "sub", "mul"))

    def _active_bits_load(self, start: Value, moves: tuple[str, ...], counts=lambda load: True) -> bool:
        """Whether ``start`` comes, through instructions in ``moves``, from a load of memory with derivatives
        (one that ``counts``)."""
        stack, seen = [start], set()
        while stack:
            x = stack.pop()
            if id(x) in seen or not isinstance(x, Instruction):
                continue
            seen.add(id(x))
            if isinstance(x, Load):
                if id(x.pointer) in self.active_ptrs and counts(x):
                    return True
            elif x.opcode in moves:
                stack += [op for op in x.operands if isinstance(op, Instruction)]
        return False


_BIT_MOVES = ("trunc", "zext", "sext", "lshr", "ashr", "shl", "and", "or", "xor", "phi", "select", "bitcast", "freeze",
              "extractelement", "extractvalue")
"""Instructions that move integer bits along (a float's bits may pass through them)."""

_LIBRARY_PREFIXES = ("_ZNSt7__cxx1112basic_string", "_ZNKSt7__cxx1112basic_string", "_ZNSt7__cxx1118basic_stringstream",
                     "_ZNSt7__cxx1119basic_ostringstream", "_ZNSt7__cxx1119basic_istringstream",
                     "_ZNSt7__cxx1115basic_stringbuf", "_ZNSt14basic_ifstream", "_ZNSt14basic_ofstream",
                     "_ZNSt13basic_fstream", "_ZNSt13basic_filebuf", "_ZNSt15basic_streambuf", "_ZNKSt15basic_streambuf",
                     "_ZNSt8ios_base", "_ZNSt9basic_ios", "_ZNKSt9basic_ios", "_ZNSi", "_ZNSo", "_ZNSdC", "_ZNSdD",
                     "_ZNSt6locale", "_ZNKSt5ctype", "_ZNSt12__basic_file", "_ZNKSt12__basic_file", "_ZNKSt13basic_filebuf",
                     "_ZNKSt14basic_ifstream", "_ZNKSt14basic_ofstream", "_ZSt16__ostream_insert", "_ZStlsI",
                     "_ZStrsI", "_ZSt4endl", "_ZSt5flush", "_ZSt7getline",
                     # std exceptions (they keep a copy of their message)
                     "_ZNSt9exception", "_ZNSt13runtime_error", "_ZNKSt13runtime_error", "_ZNSt11logic_error",
                     "_ZNKSt11logic_error", "_ZNSt12out_of_range", "_ZNSt16invalid_argument", "_ZNSt12length_error",
                     "_ZNSt12domain_error", "_ZNSt14overflow_error", "_ZNSt15underflow_error", "_ZNSt11range_error")
"""C++ strings and streams: a pointer they keep (a stream's buffer, a string's own storage) is used only by the
library itself, which never writes floats with derivatives."""

_NO_WRITE_CALLS = ("llvm.lifetime", "llvm.memset", "llvm.dbg", "llvm.assume", "llvm.invariant",
                   "llvm.experimental.noalias", "llvm.prefetch")
"""Calls that write nothing with derivatives into the memory they are given."""


__all__ = ["Activity", "ALLOCATORS", "has_float", "has_pointer", "is_allocation", "is_user_call",
           "runs_program_code"]


def _accesses_floats(p: Value) -> bool:
    """Whether memory at pointer ``p`` (or derived from it) is read or written with floating-point types."""
    seen, stack = {id(p)}, [p]
    while stack:
        v = stack.pop()
        for use in v.uses:
            u = use.user
            if isinstance(u, Load) and has_float(u.type):
                return True
            if isinstance(u, Store) and use.index == 1 and has_float(u.value.type):
                return True
            if isinstance(u, Call) and ((u.callee_name or "").startswith(("llvm.memcpy", "llvm.memmove")) or
                                        _copies_through(u, use)):
                return True
            if u.opcode in _PTR_FORWARD and id(u) not in seen:
                seen.add(id(u))
                stack.append(u)
    return False


def _copy_ends(inst: Instruction) -> tuple[Value, Value] | None:
    """``(destination, source)`` of a ``memcpy`` / ``memmove`` or of a call whose rule says it copies bytes as they
    do (:func:`enzcc.ad.registry.copied_arguments`), else None."""
    if not isinstance(inst, Call):
        return None
    if (inst.callee_name or "").startswith(("llvm.memcpy", "llvm.memmove")):
        return inst.args[0], inst.args[1]
    copied = copied_arguments(inst)
    return (copied[0], copied[1]) if copied else None


def _copies_through(call: Call, use) -> str | None:
    """``"destination"`` or ``"source"`` when ``use`` is that argument of a call whose rule says it copies bytes
    as ``memcpy`` does (``cudaMemcpy``: :func:`enzcc.ad.registry.copied_arguments`), else None."""
    where = hook(call, "copies")
    if where is None:
        return None
    return "destination" if use.index - 1 == where[0] else "source" if use.index - 1 == where[1] else None


def _integer_tbaa(load) -> bool:
    """The load's TBAA tag says it reads an integer (clang tags ``int`` fields; copies of raw bytes carry no
    tag or ``omnipotent char``)."""
    from enzcc.ad.memory import tbaa_access_type

    name = tbaa_access_type(load)
    return name is not None and name in _TBAA_INTEGERS


def _integer_field(load) -> bool:
    """The load reads an integer field of a struct by its declared type (:func:`enzcc.ad.memory.integer_field`:
    a size read from a GSL matrix at -O0, where clang emits no TBAA), not a float's bits."""
    from enzcc.ad.memory import integer_field

    return integer_field(load.pointer, load.type)


def _integer_field_store(store) -> bool:
    """The store writes an integer field of a struct by its declared type (``r->collisions[k].p1 = ip`` at -O0,
    ``ip`` a phi of an index and an encounter map's entry): what lands there is an integer, whatever bits it
    came from, and its derivative is zero."""
    from enzcc.ad.memory import integer_field

    return integer_field(store.pointer, store.value.type)


_TBAA_INTEGERS = {"int", "long", "long long", "short", "char", "_Bool", "bool", "unsigned int", "unsigned long",
                  "unsigned long long", "unsigned short", "unsigned char", "signed char", "integer(kind=4)",
                  "integer(kind=8)"}
