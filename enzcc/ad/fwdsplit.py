"""Forward split mode: ``__enzyme_fwdsplit``, the tangent of a function whose primal already ran.

``__enzyme_augmentfwd(f, ...)`` runs ``f`` and returns a tape; ``__enzyme_fwdsplit(f, args, tangents..., tape)``
later computes ``f``'s tangent from that tape. It never runs the primal again: no primal memory is read or
written (the primal pointers may be null, as Enzyme allows), and with ``enzyme_nofree`` one tape serves any
number of tangent directions. As in Enzyme, it is given the other arguments again (and may be given a null tape
when the tangent needs no primal value but the arguments).

Both halves are cut from ``f``'s forward derivative (:class:`enzcc.ad.forward.ForwardMode`), which interleaves
the primal computation with tangent code:

* the augmented primal ``augmented_fwd_f(args, shadows[, buffer]) -> {tape, result}`` keeps the primal
  instructions. Right where it computes it, it writes on the tape each value the tangent code uses (or a branch
  condition): a value computed at most once per call into a slot of the tape's fixed part, a value computed in
  a loop at the end of its growing part, in the order the values are computed;
* ``fwdsplit_f(args, tangents, tape) -> tangent`` keeps the tangent code and the control flow. Each such value
  is read back where it was computed (the growing part through a cursor, in the same order), or computed again
  when it is pure arithmetic (or a math function) on arguments, constants and values read back; every other
  primal instruction goes. So the tape holds what only the primal run can give: loaded values, phis, results
  of calls with side effects.

A call to a function with a registered split derivative (``__enzyme_register_splitderivative_*``,
:func:`enzcc.ad.calls.custom.split_forward_call`) becomes a call to its augmented primal in the first half, whose
result (with its own tape) is kept on the tape like any call's, and a call to its tangent in the second.

The tape is ``{i64 tag, {ptr, i64 used, i64 capacity} growing part, fixed slots...}``. The tag names the
function and the arguments' activity: the tangent half aborts with a message when it is handed a tape that the
augmented primal of forward split mode did not write (``__enzyme_augmentfwd`` compiled where no
``__enzyme_fwdsplit`` of the function was seen writes the tape ``__enzyme_reverse`` reads).
"""

from __future__ import annotations

import zlib

from enzcc.ad.api import CONST, DUP, ArgSpec, DiffCall
from enzcc.ad.emit import fail_at_run_time
from enzcc.ad.errors import ad_error
from enzcc.ad.hints import hints_of
from enzcc.ad.prepare import derivative_attributes
from enzcc.ad.tape import STATE, reserve_helper, slot_size, store_state
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.clone import clone_blocks
from enzcc.ir.function import Function
from enzcc.ad.rules import load_rules
from enzcc.ir.instructions import (Alloca, BinaryOp, Call, Cast, Cmp, ExtractElement, ExtractValue, Freeze,
                                   GetElementPtr, InsertElement, InsertValue, Instruction, Invoke, Phi, Ret, Select,
                                   ShuffleVector, UnaryOp)
from enzcc.ir.values import ConstantInt, ConstantNull

TAG, GROWING = 0, 1
"""Fields of the tape before its fixed slots."""

_PURE = (BinaryOp, UnaryOp, Cast, Cmp, Select, Freeze, GetElementPtr, ExtractValue, InsertValue, ExtractElement,
         InsertElement, ShuffleVector)
"""Instructions the tangent half computes again instead of reading them from the tape."""


def activity_key(dc: DiffCall) -> tuple[str, ...]:
    """The arguments' activity as forward split mode sees it: ``active`` (``enzyme_dup``, ``enzyme_dupnoneed``,
    ``enzyme_out``, an active float) or ``const``. ``__enzyme_augmentfwd`` spells an active float
    ``enzyme_out`` and ``__enzyme_fwdsplit`` passes it with its tangent: the same tape serves both."""
    return tuple("const" if s.kind == CONST else "active" for s in dc.args)


class ForwardSplit:
    """The two halves of ``fn``'s forward derivative for one argument activity, and their variants."""

    def __init__(self, logic, dc: DiffCall, key: tuple[str, ...]):
        from enzcc.ad.forward import ForwardMode

        module = logic.module
        if getattr(module, "enzcc_chunked_tape", False):
            raise ad_error(f"{dc.call.callee_name} in code that is differentiated again (nested AD) is not "
                           "supported", dc.call)
        self.module, self.fn, self.key = module, dc.fn, key
        specs = [ArgSpec(s.param, CONST if k == "const" else DUP, s.primal) for s, k in zip(dc.args, key)]
        hints = hints_of(module)
        # a function with a registered split derivative: split a call to it, which uses that derivative
        body = logic.wrapper(dc.fn) if dc.fn.name in hints.splitderivative else logic.body_of(dc.fn)
        maker = ForwardMode(DiffCall(dc.call, "forward", dc.fn, specs), module, body, logic=logic)
        maker.split = True
        G = self.G = maker.G
        logic.scratch.append(G.name)  # (the halves are cut from it; it goes when the module is done)
        maker.build()
        self.tangent_params = {id(G.args[i]) for ps in maker.tangent_index.values() for i in ps}
        self.primal_returns = maker.primal_returns
        primal = maker.primal_instructions
        present = {id(i) for i in G.instructions()}
        for inst in primal:
            if id(inst) not in present:
                self._check_call(dc, maker.primal_callees.get(id(inst)), inst, True)
                raise ad_error(f"{dc.call.callee_name}: the derivative of this instruction replaces it (a registered "
                               f"derivative?), so the tangent of '{dc.fn.name}' cannot be split from its primal",
                               inst, fn=G)
        self.primal = {id(i) for i in primal}
        self._check(dc)
        self._lay_out()
        self.variants: dict = {}

    # -- what can be split --------------------------------------------------------------------------

    def _check(self, dc: DiffCall) -> None:
        what = dc.call.callee_name
        for inst in self.G.instructions():
            if isinstance(inst, Invoke):
                raise ad_error(f"{what}: an invoke (a call that may throw) in '{self.fn.name}' is not supported in "
                               "forward split mode", inst, fn=self.G)
            if isinstance(inst, Call) and id(inst) not in self.primal:  # (a primal call left as it was carries no
                self._check_call(dc, inst.callee_name, inst, False)       # derivative: the tangent half drops it)

    def _check_call(self, dc: DiffCall, name: str | None, inst, primal: bool) -> None:
        """A call (to ``name``) that forward split mode cannot cut: one that is not inlined, or tangent code that
        calls a derived function (which runs primal code again)."""
        what = dc.call.callee_name
        split = hints_of(self.module).splitderivative
        if name in split or (primal and name in {a for a, _ in split.values()}) or \
                (not primal and name in {t for _, t in split.values()}):
            return  # a function with a registered split derivative (left in the augmented primal: inactive), or
            # one of its halves
        if name is not None:
            callee = self.module.functions.get(name)
            defined = callee is not None and not callee.is_declaration
            if primal and defined:
                raise ad_error(f"{what}: '{self.fn.name}' calls '{name}', which is not inlined; forward "
                               "split mode needs every call inlined (try --ad-inline=all; recursion is not "
                               "supported)", inst, fn=self.G)
            if not primal and defined and not name.startswith("__enzcc_"):
                raise ad_error(f"{what}: the tangent of '{self.fn.name}' calls '{name}', which runs "
                               "primal code again; that is not supported in forward split mode", inst, fn=self.G)

    def _lay_out(self) -> None:
        """Which primal values the tangent code needs, and where each goes on the tape."""
        G, primal = self.G, self.primal
        cyclic = _blocks_in_cycles(G)
        self.needed = []
        """(value, its block, slot index or None for the growing part), in order. (The arguments are not: as in
        Enzyme, ``__enzyme_fwdsplit`` is given them again.)"""
        fixed: list[T.Type] = []

        def slot(ty):
            fixed.append(ty)
            return len(fixed) - 1

        # what the tangent half keeps besides its own code: the control flow, and the primal values it needs,
        # recomputed when that is pure arithmetic on what it has (arguments, constants, values read back), read
        # back from the tape otherwise (loads, phis, calls)
        rules = load_rules()

        def pure(i) -> bool:
            if isinstance(i, _PURE):
                return True
            return isinstance(i, Call) and not isinstance(i, Invoke) and not isinstance(i.type, T.VoidType) and \
                rules.for_call(i.callee_name or "") is not None and \
                not any(isinstance(a.type, T.PointerType) for a in i.args)

        self.recomputed: set[int] = set()
        taped: set[int] = set()
        work = [op for inst in G.instructions()
                if id(inst) not in primal or (inst is inst.parent.terminator and not isinstance(inst, Ret))
                for op in inst.operands]
        while work:
            v = work.pop()
            if not isinstance(v, Instruction) or id(v) not in primal or id(v) in self.recomputed or id(v) in taped:
                continue
            if pure(v):
                self.recomputed.add(id(v))
                work += v.operands
            else:
                taped.add(id(v))
        for block in G.blocks:
            for inst in block.instructions:
                if id(inst) not in taped:
                    continue
                if isinstance(inst, Alloca):
                    raise ad_error("internal error: the tangent code uses a primal stack slot (forward split mode)",
                                   inst, fn=G)
                self.needed.append((inst, block, None if id(block) in cyclic else slot(inst.type)))
        self.frame_type = T.StructType((T.i64, STATE) + tuple(fixed))
        self.size = self.module.data_layout.alloc_size(self.frame_type)
        self.tag = zlib.crc32(repr(("fwdsplit", self.fn.name, self.key)).encode()) | (0x5EC7 << 48)

    # -- the halves ---------------------------------------------------------------------------------

    def augmented(self, buffer: bool) -> Function:
        """``(args, shadows of pointers[, buffer]) -> {tape, result}`` (``{tape}`` for a void function), the tape
        in ``buffer`` when given, else on the heap."""
        got = self.variants.get(("augmented", buffer))
        if got is not None:
            return got
        G, module = self.G, self.module
        primal_args = [a for a in G.args if id(a) not in self.tangent_params]
        n_shadows = sum(1 for a, k in zip(primal_args, self.key) if k != "const" and isinstance(a.type, T.PointerType))
        params = [a.type for a in primal_args] + [T.ptr] * n_shadows + ([T.ptr] if buffer else [])
        result = () if isinstance(self.fn.return_type, T.VoidType) else (self.fn.return_type,)
        A = self._function(f"augmented_fwd_{self.fn.name}{'_inbuffer' if buffer else ''}",
                           T.FunctionType(T.StructType((T.ptr,) + result), tuple(params)))
        vmap = dict(zip(primal_args, A.args))
        for a in G.args:
            if id(a) in self.tangent_params:
                vmap[a] = IRBuilder.poison(a.type)
        clone_blocks(G.blocks, A, vmap)
        primal = {id(vmap[i]) for i in G.instructions() if id(i) in self.primal}
        for inst in A.instructions():  # (every return is the primal's)
            if id(inst) not in primal and isinstance(inst, Ret):
                raise ad_error("internal error: a return outside the primal code (forward split mode)", inst, fn=A)
        for g_ret, value in ((i, self.primal_returns[id(i)]) for i in G.instructions() if id(i) in self.primal_returns):
            r = vmap[g_ret]
            if value is not None:
                r.set_operand(0, vmap.get(value, value))
        _erase_all(A, lambda i: id(i) not in primal, "tangent", self.fn.name)
        # the tape: the caller's buffer or a heap block; its tag and an empty growing part first
        entry = A.entry_block
        b = IRBuilder.before(next(i for i in entry.instructions if not isinstance(i, Alloca)))
        if buffer:
            frame = A.args[-1]
        else:
            malloc = module.get_or_insert_function("malloc", T.FunctionType(T.ptr, (T.i64,)))
            frame = b.call(malloc, [ConstantInt(T.i64, self.size)])
        b.store(ConstantInt(T.i64, self.tag), b.struct_gep(self.frame_type, frame, TAG))
        state = b.struct_gep(self.frame_type, frame, GROWING)
        store_state(b, state, ConstantNull(T.ptr), ConstantInt(T.i64, 0))
        anchors = _first_non_phis(A)
        for value, block, slot in self.needed:
            v = vmap[value]
            at = _where(v, anchors)
            if slot is not None:
                at.store(v, at.struct_gep(self.frame_type, frame, 2 + slot))
            else:
                at.store(v, at.call(reserve_helper(module), [state, ConstantInt(T.i64, slot_size(module, v.type))]))
        for inst in list(A.instructions()):
            if isinstance(inst, Ret):
                rb = IRBuilder.before(inst)
                out = rb.insert_value(IRBuilder.poison(A.return_type), frame, [0])
                if result:
                    out = rb.insert_value(out, inst.operands[0], [1])
                inst.set_operand(0, out) if inst.operands else _replace_ret(inst, out)
        self.variants[("augmented", buffer)] = A
        return A

    def tangent(self, buffer: bool, nofree: bool) -> Function:
        """``(args and tangents as for __enzyme_fwddiff, tape) -> tangent``. It frees the tape's growing part
        (and, without ``buffer``, the tape) unless ``nofree``."""
        got = self.variants.get(("tangent", buffer, nofree))
        if got is not None:
            return got
        G, module = self.G, self.module
        name = f"fwdsplit_{self.fn.name}{'_inbuffer' if buffer else ''}{'_nofree' if nofree else ''}"
        D = self._function(name, T.FunctionType(G.return_type, tuple(a.type for a in G.args) + (T.ptr,)))
        vmap = dict(zip(G.args, D.args))
        frame = D.args[-1]
        check = D.append_block("tape")
        clone_blocks(G.blocks, D, vmap)
        primal = {id(vmap[i]) for i in G.instructions() if id(i) in self.primal}
        body = vmap[G.entry_block]
        # a null tape is accepted when the tangent needs nothing from it (as in Enzyme); any other tape must carry
        # the tag of this function and activity
        b = IRBuilder.at_end(check)  # (the first block: the entry)
        cursor = b.alloca(T.i64)
        b.store(ConstantInt(T.i64, 0), cursor)
        given, null, wrong, good, start = (D.append_block(n) for n in ("given", "null", "wrong_tape", "read",
                                                                        "start"))
        b.cond_br(b.icmp("eq", frame, ConstantNull(T.ptr)), null, given)
        n = IRBuilder.at_end(null)
        if self.needed:
            fail_at_run_time(module, n, f"__enzyme_fwdsplit of '{self.fn.name}' needs the tape its "
                                        "__enzyme_augmentfwd wrote, and was given a null pointer")
        else:
            n.br(start)
        gv = IRBuilder.at_end(given)
        tag = gv.load(T.i64, gv.struct_gep(self.frame_type, frame, TAG))
        gv.cond_br(gv.icmp("ne", tag, ConstantInt(T.i64, self.tag)), wrong, good)
        fail_at_run_time(module, IRBuilder.at_end(wrong),
                         f"the tape given to __enzyme_fwdsplit of '{self.fn.name}' was not written by its "
                         "__enzyme_augmentfwd in forward split mode (the same function and argument activity, "
                         "compiled where the __enzyme_fwdsplit call is seen)")
        g = IRBuilder.at_end(good)
        loaded = g.load(T.ptr, g.struct_gep(self.frame_type, frame, GROWING))
        g.br(start)
        st = IRBuilder.at_end(start)
        growing = st.phi(T.ptr, [(loaded, good)] + ([] if self.needed else [(ConstantNull(T.ptr), null)]))
        st.br(body)
        anchors = _first_non_phis(D)
        for value, block, slot in self.needed:
            v = vmap[value]
            at = _where(v, anchors)
            if slot is not None:
                got = at.load(v.type, at.struct_gep(self.frame_type, frame, 2 + slot))
            else:
                here = at.load(T.i64, cursor)
                got = at.load(v.type, at.gep(T.i8, growing, [here]))
                at.store(at.add(here, ConstantInt(T.i64, slot_size(module, v.type))), cursor)
            v.replace_all_uses_with(got)
        # the tangent code's stack slots go to the new entry block (where LLVM expects them)
        for inst in [i for i in body.instructions if isinstance(i, Alloca) and id(i) not in primal]:
            inst.move_before(check.instructions[0])
        kept = {id(vmap[i]) for i in G.instructions() if id(i) in self.recomputed}
        _erase_all(D, lambda i: id(i) in primal and i is not i.parent.terminator and id(i) not in kept, "primal",
                   self.fn.name)
        free = module.get_or_insert_function("free", T.FunctionType(T.void, (T.ptr,)))
        for inst in list(D.instructions()):
            if isinstance(inst, Ret) and not nofree:
                rb = IRBuilder.before(inst)
                rb.call(free, [growing])  # (null for a null tape)
                if not buffer:
                    rb.call(free, [frame])
        self.variants[("tangent", buffer, nofree)] = D
        return D

    def _function(self, name: str, ftype: T.FunctionType) -> Function:
        fn = Function(self.module.unique_function_name(name), ftype)
        fn.linkage = "internal"
        fn.fn_attrs = derivative_attributes(self.module, self.fn)
        fn.primal_name = getattr(self.fn, "primal_name", self.fn.name)
        self.module.add_function(fn)
        return fn


def _erase_all(fn: Function, doomed, what: str, name: str) -> None:
    """Erase the instructions ``doomed`` picks; none of their values may be used by one that stays."""
    gone = [i for i in fn.instructions() if doomed(i)]
    ids = {id(i) for i in gone}
    for inst in gone:
        for u in inst.uses:
            if id(u.user) not in ids:
                raise ad_error(f"internal error: the {what} code of '{name}' cannot be separated (forward split "
                               "mode)", u.user, fn=fn)
    for inst in gone:
        if not isinstance(inst.type, T.VoidType):
            inst.replace_all_uses_with(IRBuilder.poison(inst.type))
    for inst in reversed(gone):
        inst.erase()


def _first_non_phis(fn: Function) -> dict[int, object]:
    """Block -> its first instruction that is not a phi, before anything is inserted (values read or written
    for a block's phis go before it, in the phis' order)."""
    return {id(b): b.first_non_phi for b in fn.blocks}


def _where(v, anchors) -> IRBuilder:
    """Where the tape is written or read for the value ``v``: right after it (after the phis for a phi)."""
    return IRBuilder.before(anchors[id(v.parent)]) if isinstance(v, Phi) else IRBuilder.after(v)


def _replace_ret(ret: Ret, value) -> None:
    IRBuilder.before(ret).ret(value)
    ret.erase()


def _blocks_in_cycles(fn: Function) -> set[int]:
    """The blocks that can be reached again from themselves (strongly connected components, as
    :mod:`enzcc.ad.reducible` finds them)."""
    from enzcc.ad.reducible import _components

    out: set[int] = set()
    for comp in _components(fn.blocks, {id(b) for b in fn.blocks}, set()):
        if len(comp) > 1 or comp[0] in comp[0].successors:
            out.update(id(b) for b in comp)
    return out


__all__ = ["ForwardSplit", "activity_key"]
