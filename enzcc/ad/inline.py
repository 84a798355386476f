"""Inlining every call to a user function inside the code being differentiated.

Combined-mode reverse AD then sees one function body: values of callees are cached like any other. A
recursive call cannot be inlined: it stays a call, and the derivative calls the callee's derived functions
(:mod:`enzcc.ad.logic`).
"""

from __future__ import annotations
import re

from enzcc.ir.block import BasicBlock
from enzcc.ir.builder import IRBuilder
from enzcc.ir.clone import clone_blocks
from enzcc.ad.memory import ALLOCATORS
from enzcc.ad.debuginfo import INLINED_FROM
from enzcc.ad.emit import fail_at_run_time
from enzcc.ad.errors import ad_error
from enzcc.ad.globals import used_globals
from enzcc.ad.registry import rule_for
from enzcc.ad.usercalls import (DISPATCHED_CALL, MAX_INLINED_AGGREGATE_TARGETS, SIZE_CUT_CALL, has_call_attribute,
                                needs_inlining)
from enzcc.ad.memory import base_object, byte_offset
from enzcc.ir import types as T
from enzcc.ir.instructions import Alloca, Br, Call, Cast, GetElementPtr, Invoke, Load, Phi, Ret, Select, Store
from enzcc.ir.module import SYMBOL_REF
from enzcc.ir.values import ConstantExpr, ConstantInt, GlobalRef, InlineAsm, Value

MAX_INLINED_CALLS = 20000
#: string attribute marking a call that recursion keeps from being inlined (it survives LLVM's passes on the
#: prepared copy, and no later inlining takes the call again)
RECURSIVE_CALL = '"enzcc-recursive-call"'


def inline_all(fn, is_user_function, admit_dispatched=None) -> None:
    """Inline, repeatedly, every call in ``fn`` whose callee satisfies ``is_user_function(callee_fn)``.

    A work list in program order: each inlined body's calls are taken next (so a constructor is inlined
    before the virtual calls after it, whose targets its stores reveal); ``invoke``s become calls and calls
    through known function pointers are devirtualized as they are reached, never by rescanning the function.
    ``admit_dispatched(call, callee)``, when given, also decides each call a devirtualized call became (what
    the callee's expanded size did not count: the caller's size budget, :mod:`enzcc.ad.prepare`)."""
    module = fn.module
    count = 0
    dispatched: set[int] = set()
    # (call instruction -> chain of function names it was inlined through)
    chain: dict[int, tuple[str, ...]] = {}
    work = [i for i in fn.instructions() if isinstance(i, Call)]
    work.reverse()
    while work:
        call = work.pop()
        if call.parent is None:
            continue
        through = chain.get(id(call), (getattr(fn, "primal_name", fn.name),))
        if isinstance(call, Invoke):
            call = invoke_to_call(call)
        if call.callee_name is None and not isinstance(call.callee, InlineAsm):
            direct = devirtualize_call(call)
            for c in reversed(direct):
                chain[id(c)] = through
                dispatched.add(id(c))
                work.append(c)
            continue
        if not _inlinable(call, module, is_user_function):
            continue
        callee = module.functions[call.callee_name]
        if admit_dispatched is not None and id(call) in dispatched and callee.name not in through and \
                not admit_dispatched(call, callee):
            continue
        if callee.name in through:
            # recursion: the call stays, and is differentiated as a call to the callee's derivative
            call.fn_attrs.append(RECURSIVE_CALL)
            continue
        count += 1
        if count > MAX_INLINED_CALLS:
            raise ad_error("too many calls to inline while preparing the derivative", call)
        new_calls = inline_call(call, callee)
        for c in reversed(new_calls):
            chain[id(c)] = through + (callee.name,)
            work.append(c)


def invoke_to_call(inst: Invoke) -> Call:
    """Replace one ``invoke`` with a ``call`` and a branch to its normal destination (the unwind edge goes)."""
    normal, unwind = inst.normal_dest, inst.unwind_dest
    call = Call(inst.callee, list(inst.args), inst.function_type, flags=inst.flags, arg_attrs=inst.arg_attrs,
                cconv=inst.cconv, ret_attrs=inst.ret_attrs, fn_attrs=inst.fn_attrs)
    call.metadata = list(inst.metadata)
    call.insert_before(inst)
    if inst.has_uses():
        inst.replace_all_uses_with(call)
    block = inst.parent
    for phi in unwind.phis():
        while block in phi.incoming_blocks:
            phi.remove_incoming(phi.incoming_blocks.index(block))
    inst.erase()
    block.append(Br(normal))
    return call


def devirtualize_call(call) -> list:
    """An indirect call whose target is one of a few functions known at compile time (a constant table of
    function pointers, a select or phi of functions, a C++ object's vtable) becomes a chain of comparisons and
    direct calls, which are then inlined and differentiated like any other (too many candidates: not inlined,
    see :class:`Dispatched`). Returns the direct calls (none when the targets are not known: the call stays)."""
    module = call.module
    targets = possible_targets(call.operands[0], module, function_type=call.function_type)
    if targets is None:
        targets = _vtable_slot_targets(call.operands[0], module, call.function_type)
    if targets is None:
        targets = _address_taken_of_type(module, call.function_type, lambda name: _has_derivative_rule(call, name))
    if not targets or any(module.functions[t].function_type != call.function_type for t in targets):
        return []
    dispatched = isinstance(targets, Dispatched)
    block = call.parent
    after = block.split_before(call)
    block.terminator.erase()
    results, test = [], block
    inexact = isinstance(targets, Inexact)
    for k, name in enumerate(targets):
        ref = module.global_ref(name)
        direct = BasicBlock(f"{block.name or 'devirt'}.{name}")
        direct.move_after(test if k == 0 else results[-1][1])
        compared = k < len(targets) - 1 or inexact  # (else the pointer can hold nothing else)
        if compared:
            nxt = BasicBlock()
            IRBuilder.at_end(test).cond_br(IRBuilder.at_end(test).icmp("eq", call.operands[0], ref), direct, nxt)
        else:
            IRBuilder.at_end(test).br(direct)  # the pointer can hold nothing else
        c = call.clone()
        c.set_operand(0, ref)
        if dispatched and not module.functions[name].is_declaration:
            c.fn_attrs += [RECURSIVE_CALL, DISPATCHED_CALL]  # (too many to inline: through its derived functions)
        direct.append(c)
        direct.append(Br(after))
        results.append((c, direct))
        if compared:
            nxt.move_after(direct)
            test = nxt
    if dispatched:  # none of them: a function enzcc never saw (a shared library's), whose derivative it has not
        fail_at_run_time(module, IRBuilder.at_end(test), unknown_target_message(call))
    elif inexact:  # none of them: the program's own assumptions are broken, stop it
        tb = IRBuilder.at_end(test)
        tb.call(module.get_or_insert_function("llvm.trap", T.FunctionType(T.void, ())), [])
        tb.unreachable()
    if call.has_uses():
        phi = Phi(call.type, results)
        after.insert(0, phi)
        call.replace_all_uses_with(phi)
    call.erase()
    return [c for c, _ in results]


def possible_targets(v, module, depth: int = 0, function_type=None) -> list[str] | None:
    """The functions a function pointer can hold, when they are known: a function, a select or phi of known
    ones, or a load from a constant global whose initializer names only functions with bodies. Given the
    ``function_type`` of a call through the pointer, a table's other entries (a C++ vtable's type info,
    functions of other types) are left out: the call could not reach them without undefined behaviour."""
    if depth > 8:
        return None
    if isinstance(v, GlobalRef):
        f = module.functions.get(v.symbol)
        return [v.symbol] if f is not None and not f.is_declaration else None
    if isinstance(v, (Select, Phi)):
        out: list[str] = []
        for op in _merged(v):
            sub = possible_targets(op, module, depth + 1, function_type)
            if sub is None:
                return None
            out += [t for t in sub if t not in out]
        return out
    if isinstance(v, Load) and not v.volatile:
        base = base_object(v.pointer)
        bases = [base]
        inexact = False
        if isinstance(base, (Phi, Select)):  # a phi of vtable slots (the vtable pointers known per path)
            bases = [_global_of(x) for x in _merged(base)]
        elif isinstance(base, Load):  # a C++ object's vtable pointer, stored by its (inlined) constructor(s)
            stored = _stored_before(base)
            if stored is None:
                stored, inexact = _vtables_stored(base), True
            bases = [_global_of(x) for x in (stored or [None])]
        names: list[str] = []
        for base in bases:
            gv = module.globals.get(base.symbol) if isinstance(base, GlobalRef) else None
            if gv is None or not gv.is_constant:
                return None
            names += [n for n in gv.initializer_symbols() if n not in names]
        if function_type is not None:
            names = [n for n in names if n in module.functions and module.functions[n].function_type == function_type]
        if names and all(n in module.functions and not module.functions[n].is_declaration for n in names):
            return Inexact(names) if inexact else names
    return None


#: the most functions an indirect call whose targets are unknown is compared against and inlined (with more, each
#: is called through its derived functions: :class:`Dispatched`)
MAX_UNKNOWN_TARGETS = 8


def _dispatchable(function_type) -> bool:
    """Whether calls of this type can go through the callee's derived functions (:class:`Dispatched`): no
    parameter or result that only inlining handles (:func:`enzcc.ad.usercalls.needs_inlining`)."""
    return not any(needs_inlining(t) for t in (function_type.ret, *function_type.params))


def _unknown_targets(names: list[str], function_type) -> "Inexact":
    """Candidates of a call through an unknown pointer: compared and inlined when few (or when the derived
    functions cannot pass the call's arguments or result, up to :data:`MAX_INLINED_AGGREGATE_TARGETS`),
    else dispatched to their derived functions."""
    if len(names) <= MAX_UNKNOWN_TARGETS or \
            (len(names) <= MAX_INLINED_AGGREGATE_TARGETS and not _dispatchable(function_type)):
        return Inexact(names)
    return Dispatched(names)

def _vtable_slot_targets(callee: Value, module, function_type) -> "Inexact | None":
    """For a virtual call on an object nothing here pins down (``p->f()``, ``delete p``: a function pointer
    loaded at a constant offset from the object's vtable pointer): the functions of the call's type at that
    slot of every C++ vtable in the module (each array of a vtable group counts from its address point, the
    entry after its type info). A hierarchy has many functions of one type (two destructors per class), but
    few at one slot. Functions of the type whose address is taken outside the vtables are candidates too (the
    pointer may come from a table of hooks instead). An object whose vtable is not in the module matches none,
    and the program traps. None when the slot is not known or holds none, or there are more than
    :data:`MAX_UNKNOWN_TARGETS`."""
    dl = module.data_layout
    if not isinstance(callee, Load) or dl is None:
        return None
    vptr, off = byte_offset(callee.pointer, dl)
    if not isinstance(vptr, Load) or off is None or off % 8:
        return None
    taken = address_taken_functions(module)  # (every vtable entry among them)
    names: list[str] = []
    for gv in module.globals.values():
        if not (gv.name or "").startswith("_ZTV") or not gv.is_constant or "=" not in gv.text:
            continue
        for body in _VTABLE_ARRAY.findall(gv.text.split("=", 1)[1]):
            entries = [e.strip() for e in _top_level_split(body)]
            rtti = next((i for i, e in enumerate(entries) if e.startswith("ptr @_ZTI")), None)
            if rtti is None:
                return None  # (no type info to find the address point by)
            k = rtti + 1 + off // 8
            m = SYMBOL_REF.fullmatch(entries[k][4:]) if k < len(entries) and entries[k].startswith("ptr @") else None
            name = m and (m.group(1) or m.group(2))
            if name in taken and name not in names and module.functions[name].function_type == function_type:
                names.append(name)
    if not names:
        return None
    # (the pointer may not be a vtable's entry after all, but a field of a table of hooks: what such a table can
    # hold is taken somewhere outside the vtables)
    names += sorted(n for n in address_taken_functions(module, outside_vtables=True)
                    if n not in names and module.functions[n].function_type == function_type)
    return Inexact(names) if len(names) <= MAX_UNKNOWN_TARGETS else None


_VTABLE_ARRAY = re.compile(r"\[\d+ x ptr\] \[([^\[\]]*)\]")
"""The entries of each array of a vtable group's initializer."""


def _top_level_split(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses (constant expressions have their own)."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def _address_taken_of_type(module, function_type, has_rule=None) -> "Inexact | None":
    """For a call through a pointer that nothing here pins down (an object or ``std::function`` passed in by
    the caller): every function defined in the module, allocator (``malloc``...) or deallocator (``free``...)
    whose address is taken somewhere (a global's initializer such as a vtable or a table of allocation
    functions, or a value operand in any function, not only the callee of a direct call) and whose type is the
    call's. A program calls only such functions through a pointer of that type, unless the pointer comes from
    outside the module: then none matches and the program traps, instead of taking a derivative of the wrong
    function. Declarations whose address is taken and that ``has_rule`` (a derivative rule: ``sin`` in an
    expression evaluator's table of functions) are candidates too: the direct call gets the rule. More than
    :data:`MAX_UNKNOWN_TARGETS`: :class:`Dispatched` (not inlined). None when there are none."""
    taken = address_taken_functions(module)
    names = sorted(n for n in taken if module.functions[n].function_type == function_type)
    if has_rule is not None:
        names += sorted(n for n in address_taken_functions(module, declarations=True)
                        if module.functions[n].function_type == function_type and n not in names and has_rule(n))
    if not names:
        return None
    return _unknown_targets(names, function_type)


def _has_derivative_rule(call, name: str) -> bool:
    """Whether a direct call to the declaration ``name`` in place of the indirect ``call`` has a derivative
    rule of pure math (libm's: no memory read or written), asked of the registry with such a call."""
    probe = call.clone()
    probe.set_operand(0, call.module.global_ref(name))
    probe.insert_before(call)
    try:
        rule = rule_for(probe)
    finally:
        probe.erase()
    return rule is not None and not rule.inactive and rule.pure and \
        rule.forward is not None and rule.reverse is not None


def unknown_target_message(call) -> str:
    """The message of a program stopped at a call through a function pointer to a function enzcc never saw
    (from a shared library), whose derivative it does not know: none of the candidates of the call, or no
    function of its type has its address taken in the program (tinyexpr's calls of arities it has no
    function of, on paths the program never takes)."""
    fn = call.function
    return (f"a call through a function pointer in '{getattr(fn, 'primal_name', None) or fn.name}' reached a "
            "function that is not known at compile time (none of the functions of its type whose address the "
            "program takes: a function from a shared library?): its derivative is unknown")


def address_taken_functions(module, outside_vtables: bool = False, declarations: bool = False) -> set[str]:
    """The functions defined in the module, and allocators and deallocators, whose address is taken somewhere
    (a global's initializer such as a vtable, or a value operand in any function, not only a direct call's
    callee); with ``outside_vtables``, somewhere other than a C++ vtable; with ``declarations``, the other
    declarations (library functions) whose address is taken. Made once per module."""
    found = module.__dict__.get("_enzcc_address_taken")
    if found is None:
        in_vtables, other = set(), set()
        for gv in module.globals.values():
            (in_vtables if (gv.name or "").startswith("_ZTV") else other).update(gv.initializer_symbols())
        for fn in module.functions.values():
            if fn.is_declaration:
                continue
            if fn.is_parsed:
                other |= used_globals(fn, skip_callees=True)
            else:  # a reference not followed by "(" is not a direct call's callee
                text = fn._body_text
                other.update(m.group(1) or m.group(2) for m in SYMBOL_REF.finditer(text)
                             if not text[m.end():m.end() + 8].lstrip().startswith("("))

        def functions(names):
            return {n for n in names if n in module.functions and
                    (not module.functions[n].is_declaration or n in ALLOCATORS or n in _KEEP_TYPE) and
                    not n.startswith(("__enzcc_", "llvm."))}
        library = {n for n in in_vtables | other if n in module.functions and module.functions[n].is_declaration
                   and not n.startswith(("__enzcc_", "llvm."))}
        found = module.__dict__["_enzcc_address_taken"] = (functions(in_vtables | other), functions(other),
                                                           library - functions(in_vtables | other))
    return found[2] if declarations else found[1] if outside_vtables else found[0]


class Inexact(list):
    """Targets that include every function the pointer can hold, and maybe more: a call that matches none of
    them traps instead of assuming the last."""


class Dispatched(Inexact):
    """Inexact targets too many to inline at each call (more than :data:`MAX_UNKNOWN_TARGETS`): the call
    compares the pointer with each and calls the one it holds without inlining it, so the derivative calls
    that function's derived functions (forward derivative; augmented primal and reverse, each call with its
    own tape, as recursive calls do). A pointer to none of them stops the program with a message."""


#: calls that may receive a fresh object without changing its type (its vtable pointer)
_KEEP_TYPE = ("free", "_ZdlPv", "_ZdlPvm", "_ZdaPv", "_ZdaPvm")


def _vtables_stored(vptr: Load) -> list | None:
    """A vtable pointer read from a fresh object (a stack slot or heap allocation, or a phi or select of such)
    at offset 0, where no single store reaches the read (a call lies between): every vtable address stored at
    offset 0 of those objects anywhere in the function. A C++ object's type changes only when one is
    constructed there, and all its stores are in this function as long as the object is passed only to calls
    through a pointer (its virtual functions), to ``free`` / ``delete``, and never stored as a value; else None."""
    dl = vptr.module.data_layout
    base, off = byte_offset(vptr.pointer, dl)
    if off != 0 or base is None:
        return None
    objects, stack = [], [base]
    while stack:
        o = stack.pop()
        if isinstance(o, (Phi, Select)):
            stack += _merged(o)
        elif _is_object(o):
            if not any(o is x for x in objects):
                objects.append(o)
        else:
            return None
    out = []
    for obj in objects:
        found = False
        derived, seen = [obj], {id(obj)}
        while derived:
            p = derived.pop()
            for use in p.uses:
                u = use.user
                if isinstance(u, (GetElementPtr, Phi, Select, Cast)):
                    if id(u) not in seen:
                        seen.add(id(u))
                        derived.append(u)
                elif isinstance(u, Store):
                    if use.index == 0:
                        return None  # the address escapes into memory
                    if byte_offset(u.pointer, dl)[1] == 0 and isinstance(u.value.type, T.PointerType):
                        if _global_of(u.value) is None:
                            return None
                        out.append(u.value)
                        found = True
                elif isinstance(u, Call) and u.callee_name is not None and u.callee_name not in _KEEP_TYPE and \
                        not _only_marks(u):
                    return None  # a direct call may construct another object there
        if not found:
            return None
    return out


def _merged(v) -> list:
    """The values a phi or select chooses between."""
    return [v.true_value, v.false_value] if isinstance(v, Select) else [x for x, _ in v.incoming]


def _only_marks(call: Call) -> bool:
    """A call that changes no memory (lifetime and debug markers)."""
    return (call.callee_name or "").startswith(("llvm.lifetime", "llvm.dbg"))


def _global_of(v):
    """The global a constant address points into (through constant ``getelementptr``), else None."""
    while isinstance(v, ConstantExpr) and v.opcode == "getelementptr":
        v = v.operands[0]
    return v if isinstance(v, GlobalRef) else None


def _is_object(v) -> bool:
    """A local object: a stack slot or fresh heap memory (``malloc``, ``new``...)."""
    from enzcc.ad.memory import is_allocation

    return isinstance(v, Alloca) or (isinstance(v, Call) and is_allocation(v))


def _stored_before(load: Load) -> list | None:
    """The values ``load`` can read from a local object (a stack slot, fresh heap memory, or a phi or select of
    such objects): for each object, the last store to the address, found walking back through chains of
    single predecessors with nothing between that can change it (no call, no store that may overlap); else
    None."""
    dl = load.module.data_layout
    base, off = byte_offset(load.pointer, dl)
    if base is None:
        return None
    size = dl.store_size(load.type)
    if _is_object(base):
        v = _last_store(base, off, size, load, load.parent, load.index, dl)
        return None if v is None else [v]
    if isinstance(base, Phi) and base.parent is load.parent and \
            all(_is_object(o) for o, _ in base.incoming):
        objects = [o for o, _ in base.incoming]
        if not _untouched(objects, load.parent, load.index, dl):
            return None
        out = []
        for obj, pred in base.incoming:
            v = _last_store(obj, off, size, load, pred, len(pred.instructions), dl)
            if v is None:
                return None
            out.append(v)
        return out
    return None


def _untouched(objects: list, block, end: int, dl) -> bool:
    """Nothing in ``block`` before position ``end`` can write into ``objects``."""
    for inst in block.instructions[:end]:
        if isinstance(inst, Store):
            b, _ = byte_offset(inst.pointer, dl)
            if b is None or any(b is o for o in objects) or not (isinstance(b, GlobalRef) or _is_object(b)):
                return False
        elif isinstance(inst, Call) and not _only_marks(inst):
            return False
    return True


def _last_store(base, off: int, size: int, load: Load, block, end: int, dl):
    """The value of the last store of ``load``'s type at ``off`` in ``base`` before (``block``, ``end``)."""
    for _ in range(256):
        for inst in reversed(block.instructions[:end]):
            if isinstance(inst, Store):
                b, o = byte_offset(inst.pointer, dl)
                if b is base:
                    if o == off and inst.value.type == load.type:
                        return inst.value
                    if o is None or (o < off + size and off < o + dl.store_size(inst.value.type)):
                        return None
                elif not (isinstance(b, GlobalRef) or _is_object(b)):
                    return None  # through a pointer that may point into the object
            elif inst is base:
                return None  # the object's creation: nothing stored yet
            elif isinstance(inst, Call) and not _only_marks(inst):
                return None
        preds = block.predecessors
        if len(preds) != 1:
            return None
        block = preds[0]
        end = len(block.instructions)
    return None


def _mark_inlined_from(blocks, callee) -> None:
    """Tag the calls copied from ``callee`` that have no debug location with its name (:data:`INLINED_FROM`),
    so that an error about one names the function it is written in, not the one it was inlined into."""
    module = callee.module
    tags = module.__dict__.setdefault("_enzcc_inlined_tags", {})
    for b in blocks:
        for inst in b.instructions:
            if isinstance(inst, Call) and inst.get_metadata("dbg") is None and \
                    inst.get_metadata(INLINED_FROM) is None and not (inst.callee_name or "").startswith("llvm."):
                tag = tags.get(callee.name)
                if tag is None:
                    name = callee.name.replace("\\", "\\5C").replace('"', "\\22")
                    tag = tags[callee.name] = module.add_metadata(f'!{{!"{name}"}}')
                inst.set_metadata(INLINED_FROM, tag)


def is_kept_recursive(call: Call) -> bool:
    """The call was kept from inlining because it recurses (:data:`RECURSIVE_CALL`, written directly or,
    after LLVM printed the module, in an attribute group)."""
    return has_call_attribute(call, RECURSIVE_CALL)


def _inlinable(call: Call, module, is_user_function) -> bool:
    if is_kept_recursive(call) or SIZE_CUT_CALL in call.fn_attrs:
        return False  # (a call the size budget of the function being prepared left: enzcc.ad.prepare)
    name = call.callee_name
    if not name or name not in module.functions:
        return False
    callee = module.functions[name]
    if callee.is_declaration:
        return False
    rule = rule_for(call)
    return not (rule is not None and rule.replaces_body) and is_user_function(callee)


def inline_call(call: Call, callee) -> list[Call]:
    """Replace ``call`` by a copy of ``callee``'s body. Returns the calls inside the copy."""
    caller = call.function
    block = call.parent
    after = block.split_before(call)
    vmap: dict = {}
    for formal, actual in zip(callee.args, call.args):
        vmap[formal] = actual
    new_blocks = clone_blocks(callee.blocks, caller, vmap, after=block, suffix=".i")
    _mark_inlined_from(new_blocks, callee)
    # enter the copy instead of the continuation
    block.terminator.erase()
    block.append(Br(new_blocks[0]))
    # returns go to the continuation
    results = []
    for nb in new_blocks:
        term = nb.terminator
        if isinstance(term, Ret):
            if term.operands:
                results.append((term.operands[0], nb))
            term.erase()
            nb.append(Br(after))
    if call.has_uses():
        if len(results) == 1:
            call.replace_all_uses_with(results[0][0])
        else:
            phi = Phi(call.type, results)
            after.insert(0, phi)
            call.replace_all_uses_with(phi)
    call.erase()
    # static allocas of the callee belong in the caller's entry block (not re-executed in loops)
    entry = caller.entry_block
    first = entry.first_non_phi
    for nb in new_blocks:
        for inst in list(nb.instructions):
            if isinstance(inst, Alloca) and (inst.num_elements is None or isinstance(inst.num_elements, ConstantInt)):
                inst.move_before(first)
    return [i for nb in new_blocks for i in nb.instructions if isinstance(i, Call)]
