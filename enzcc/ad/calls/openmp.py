"""OpenMP parallel regions in reverse mode.

clang outlines the body of ``#pragma omp parallel`` into a function and calls
``__kmpc_fork_call(loc, n, outlined, captured...)``, which runs ``outlined(&gtid, &btid, captured...)`` in every
thread of the team. In reverse mode:

* the forward sweep forks the outlined function's *augmented primal* instead (through a small wrapper): each
  thread runs its share of the primal and leaves its tape in a per-thread slot of a block the caller allocates;
* the reverse sweep forks the outlined function's *reverse* (through another wrapper), with the same number of
  threads: each thread takes its own tape back. Worksharing loops with a static schedule give every thread the
  same iterations in both forks; a wrapper stops the program with a message if the team's size differs;
* inside the outlined function (and what it calls), the reverse code runs in several threads at once: adjoints
  added to memory that is not the thread's own are added atomically (``atomicrmw fadd``), and the
  synchronisation of the primal is mirrored: a barrier stays a barrier, a critical section's end becomes its
  start and its start its end, so what the primal did under a lock its reverse does under the same lock;
* what a thread owns is worked out by :mod:`enzcc.ad.threads`: its stack, elements it writes, shared scalars it
  only reads (summed in the thread), and the bytes of arrays no other thread accessed: each thread's augmented
  primal records the span of addresses it accessed, ``aug_wrap`` keeps it in the tape block, ``rev_wrap``
  gives each thread the bytes outside the other threads' spans (:class:`enzcc.ad.threads.ExclusiveSpans`),
  where its reverse adds plainly (a stencil's reads of its own rows; atomically at its share's borders).

A ``reduction(op: x)`` clause is differentiated as what it computes: in the copy a derivative is made from,
each thread combines its copy into ``x`` under the clause's lock, like a critical section
(:func:`reductions_as_critical`).

What is not handled is a one-line error: in reverse mode, loops with a dynamic or guided schedule (a thread's
iterations differ from one fork to the next) and critical sections (or reductions) that do more than add to a
shared value (their reverse would depend on the order the threads entered them); a float captured by value
in a way :func:`capture_floats_by_reference` does not recognise; vector mode.
"""

from __future__ import annotations

from enzcc.ad.api import CONST, DUP
from enzcc.ad.registry import (CallRule, register, register_called_arguments, register_called_function,
                               register_copy_preparation, register_module_preparation)
from enzcc.ad.memory import is_thread_private
from enzcc.ad.emit import fail_at_run_time, internal_function, signed_i64
from enzcc.ad.errors import ad_error
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import Call, Cast
from enzcc.ir.values import ConstantInt, ConstantNull, Value

#: runtime calls whose order the reverse code mirrors: name -> the call emitted at its place in the reverse sweep
MIRRORED = {"__kmpc_barrier": "__kmpc_barrier", "__kmpc_critical": "__kmpc_end_critical",
            "__kmpc_end_critical": "__kmpc_critical"}

#: the OpenMP runtime's bookkeeping (thread numbers, loop bounds of a thread, barriers, critical, single and
#: master sections): it moves integers only; the derivative code of a parallel region runs in the same threads,
#: inside the same sections (``__kmpc_fork_call`` itself, and the reverse of barriers and critical sections,
#: below, which also turns reductions into critical sections)
INACTIVE_PREFIXES = ("__kmpc_for_static_init_", "__kmpc_for_static_fini", "__kmpc_global_thread_num",
                     "__kmpc_barrier", "__kmpc_critical", "__kmpc_end_critical", "__kmpc_dispatch_init_",
                     "__kmpc_dispatch_next_", "__kmpc_dispatch_fini_", "__kmpc_push_num_threads",
                     "__kmpc_single", "__kmpc_end_single", "__kmpc_master", "__kmpc_end_master",
                     "__kmpc_masked", "__kmpc_end_masked", "omp_get_num_threads", "omp_get_max_threads")

#: runtime calls that hand a thread iterations that may differ between the forward and the reverse fork
_DYNAMIC = ("__kmpc_dispatch_init_", "__kmpc_dispatch_next_", "__kmpc_dispatch_fini_")

#: the runtime calls of a reduction clause
_REDUCE = ("__kmpc_reduce", "__kmpc_end_reduce")

_HEADER = 16
"""The caller's tape block: ``{i64 capacity, i64 team size}``, then one tape pointer per thread."""


def forked_function_name(inst) -> str | None:
    """The outlined function a ``__kmpc_fork_call`` ``inst`` runs in each thread (None for any other
    instruction, or when it is not a known function). Asked of every instruction: the imports come after the
    test that answers for all but fork calls."""
    if not isinstance(inst, Call) or inst.callee_name != "__kmpc_fork_call" or len(inst.args) < 3:
        return None
    from enzcc.ad.api import resolve_function
    from enzcc.ir.values import GlobalRef

    ref = resolve_function(inst.args[2])
    return ref.symbol if isinstance(ref, GlobalRef) else None


def forked_arguments(inst) -> list | None:
    """For a ``__kmpc_fork_call``: each captured value with the index of the outlined function's parameter it
    becomes (after the two thread ids); None for any other instruction."""
    if forked_function_name(inst) is None:
        return None
    return [(a, k + 2) for k, a in enumerate(inst.args[3:])]


def outlined_function(module, inst: Call, logic=None):
    """The function ``__kmpc_fork_call`` ``inst`` runs in each thread (checked: defined here, and no float
    captured by value); with ``logic``, the copy derivatives are made from (:func:`capture_floats_by_reference`
    may have changed its parameters)."""
    from enzcc.ad.api import resolve_function
    from enzcc.ir.values import GlobalRef

    _, _, task, *captured = inst.args
    ref = resolve_function(task)
    fn = module.functions.get(ref.symbol) if isinstance(ref, GlobalRef) else None
    if fn is None or fn.is_declaration or len(fn.args) != len(captured) + 2:
        raise ad_error("an OpenMP parallel region whose outlined function is not defined here", inst)
    if logic is not None:
        fn = logic.body_of(fn)
    for a, p in zip(captured, fn.args[2:]):
        if not isinstance(a.type, T.PointerType) and (from_float(a) or carries_float(p)):
            raise ad_error(f"an OpenMP parallel region captures a floating-point value by value (argument "
                           f"{p.index + 1} of '{fn.name}', e.g. firstprivate): not supported; share it "
                           "instead", inst)
    return fn


def region(mode, inst: Call):
    """For fork ``inst`` in derivative ``mode``: the region's function (the copy derivatives are made from) and
    the activity of its parameters (the thread ids, then each captured value: ``dup`` for pointers to memory
    with derivatives). Vector mode is refused."""
    if mode.width > 1:
        raise ad_error("vector mode (enzyme_width) with an OpenMP parallel region is not supported", inst)
    fn = outlined_function(mode.module, inst, mode.logic)
    kinds = (CONST, CONST) + tuple(DUP if isinstance(a.type, T.PointerType) and mode.activity.is_active_ptr(a) and
                                   not _holds_only_constant_pointers(mode, a) else CONST
                                   for a in inst.args[3:])
    return fn, kinds


def _holds_only_constant_pointers(mode, slot: Value) -> bool:
    """Whether captured ``slot`` is a local that holds only pointers without derivatives (clang captures a
    shared pointer variable by reference: ``&target`` of an ``enzyme_const`` argument) and that every region it
    is captured by only reads (its parameter there only loaded). Such a local gets a shadow in the forking
    function, since it escapes to the fork, but that shadow holds a null pointer: passed as ``dup``, the region
    would take the pointer it loads as having derivatives and add adjoints through the null shadow (a segfault
    in the reverse sweep). It is passed as a constant instead: what the region loads from it has none."""
    from enzcc.ir.instructions import Alloca, Load, Store

    if not isinstance(slot, Alloca):
        return False
    stored = False
    for use in slot.uses:
        u = use.user
        if isinstance(u, Store) and use.index == 1:
            if not isinstance(u.value.type, T.PointerType) or mode.activity.is_active_ptr(u.value):
                return False
            stored = True
        elif isinstance(u, Call) and (u.callee_name or "").startswith("llvm.lifetime."):
            continue
        elif isinstance(u, Call) and forked_function_name(u) is not None:
            fn = outlined_function(mode.module, u, mode.logic)
            k = use.index - 2  # (operand 0 is the callee; arguments 0-2 are loc, count, function)
            if not 2 <= k < len(fn.args) or not fn.args[k].uses or \
                    not all(isinstance(x.user, Load) and x.index == 0 for x in fn.args[k].uses):
                return False
        elif not (isinstance(u, Load) and use.index == 0):
            return False
    return stored


def check_body(module, fn, reverse: bool) -> None:
    """Refuse what enzcc does not differentiate in a parallel region's function ``fn`` (and what it calls):
    a reduction left as the runtime's (the threads' copies combined out of sight: :func:`reductions_as_critical`
    rewrites them in the copies derivatives are made from), and in reverse mode iterations handed out at run
    time (which the reverse sweep cannot replay) and critical sections whose reverse depends on the order."""
    seen, stack = set(), [fn]
    while stack:
        f = stack.pop()
        if f.name in seen or f.is_declaration:
            continue
        seen.add(f.name)
        for i in f.instructions():
            if not isinstance(i, Call):
                continue
            name = i.callee_name or ""
            if name.startswith(_REDUCE):
                raise ad_error("an OpenMP reduction clause (reduction(op: x)) is not supported with derivatives; "
                               "accumulate into a shared variable in a critical section instead", i)
            if reverse and name.startswith(_DYNAMIC):
                raise ad_error("reverse mode through an OpenMP loop with a dynamic, guided or runtime schedule "
                               "is not supported (a thread's iterations are not the same in the reverse "
                               "sweep); use schedule(static)", i)
            if reverse and name == "__kmpc_critical":
                _check_critical_section(i)
            callee = module.functions.get(name)
            if callee is not None:
                stack.append(callee)


def _check_critical_section(start: Call) -> None:
    """In reverse mode the threads run the reverse of a critical section in another order than they ran it:
    right for additions to shared values (``x = x + e``, with ``e`` not read from ``x``: the adjoint of ``x``
    passes through unchanged), wrong for anything else that reads a value the section writes (``x = x * e``).
    Such a section is refused."""
    from enzcc.ad.memory import base_object
    from enzcc.ir.instructions import BinaryOp, Load, Store

    insts, seen, work = [], set(), [(start.parent, start.parent.index_of(start) + 1)]
    while work:  # the instructions from the start of the section to its ends
        block, k = work.pop()
        for inst in block.instructions[k:]:
            if isinstance(inst, Call) and inst.callee_name == "__kmpc_end_critical":
                break
            insts.append(inst)
        else:
            for succ in block.successors:
                if id(succ) not in seen:
                    seen.add(id(succ))
                    work.append((succ, 0))
    shared_stores = [i for i in insts if isinstance(i, Store) and isinstance(i.value.type, T.FloatType) and
                     not is_thread_private(i.pointer)]
    # (a shared value the region writes anywhere, read in the section, is read at an order-dependent moment)
    written = {id(base_object(i.pointer)) for i in start.function.instructions() if isinstance(i, Store) and
               isinstance(i.value.type, T.FloatType) and not is_thread_private(i.pointer)}
    accumulations = set()
    for load in insts:
        if not (isinstance(load, Load) and isinstance(load.type, T.FloatType) and
                id(base_object(load.pointer)) in written):
            continue
        def only_user(v):  # the single user of v, through float conversions (a float sum kept in double)
            while True:
                users = [u.user for u in v.uses]
                if len(users) != 1:
                    return v, None
                if isinstance(users[0], Cast) and users[0].opcode in ("fpext", "fptrunc"):
                    v = users[0]
                    continue
                return v, users[0]

        value, op = only_user(load)
        ok = isinstance(op, BinaryOp) and sum(1 for x in op.operands if x is value) == 1 and \
            (op.opcode == "fadd" or (op.opcode == "fsub" and op.operands[0] is value))
        if ok:
            _, store = only_user(op)
            ok = isinstance(store, Store) and store.pointer is load.pointer
        if not ok:
            raise ad_error(_ORDER_DEPENDENT, load)
        accumulations.add(id(store))
    for store in shared_stores:  # (x = e: the last thread's e is the one with the derivative)
        if id(store) not in accumulations:
            raise ad_error(_ORDER_DEPENDENT, store)


_ORDER_DEPENDENT = ("reverse mode through an OpenMP critical section (or a reduction clause) that does more than add "
                    "to a shared value (x = x + e) is not supported: its reverse would depend on the order the "
                    "threads entered it")


def reductions_as_critical(fn) -> None:
    """A ``reduction(op: x)`` clause ends each thread's share with ``r = __kmpc_reduce[_nowait](...)`` and a
    switch on ``r``: 1 = combine this thread's copy into ``x`` (up to ``__kmpc_end_reduce[_nowait]``), 2 = combine
    it atomically, 0 = the runtime did it through the clause's combiner, out of sight. In a copy a derivative
    is made from, every thread combines its copy itself under the clause's lock: the call becomes
    ``__kmpc_critical`` with ``r = 1``, its end ``__kmpc_end_critical`` (and the barrier of a reduction that waits),
    so the reverse of the combination runs under the same lock, as for a critical section."""
    from enzcc.ir.instructions import Br, Switch

    module = fn.module
    calls = [i for i in fn.instructions() if isinstance(i, Call) and (i.callee_name or "").startswith(_REDUCE)]
    for call in calls:
        name = call.callee_name
        b = IRBuilder.before(call)
        if name in ("__kmpc_reduce", "__kmpc_reduce_nowait"):
            loc, gtid, lock = call.args[0], call.args[1], call.args[6]
            b.call(_decl(module, "__kmpc_critical", T.void, (T.ptr, T.i32, T.ptr)), [loc, gtid, lock])
            one = ConstantInt(call.type, 1)
            for use in list(call.uses):
                user = use.user
                if isinstance(user, Switch) and user.condition is call:
                    target = next((blk for v, blk in user.cases if isinstance(v, ConstantInt) and v.value == 1),
                                  user.default)
                    IRBuilder.before(user).insert(Br(target))
                    for succ in dict.fromkeys(user.successors):
                        if succ is not target:
                            for phi in succ.phis():
                                while user.parent in phi.incoming_blocks:
                                    phi.remove_incoming(phi.incoming_blocks.index(user.parent))
                    user.erase()
            call.replace_all_uses_with(one)
        elif name in ("__kmpc_end_reduce", "__kmpc_end_reduce_nowait"):
            loc, gtid, lock = call.args
            b.call(_decl(module, "__kmpc_end_critical", T.void, (T.ptr, T.i32, T.ptr)), [loc, gtid, lock])
            if name == "__kmpc_end_reduce":
                b.call(_decl(module, "__kmpc_barrier", T.void, (T.ptr, T.i32)), [loc, gtid])
        else:
            continue
        call.erase()


def capture_floats_by_reference(module, prepared: dict[str, str]) -> None:
    """clang passes a floating-point value captured by value (``firstprivate(x)`` of a ``double``) to a parallel
    region's function as an integer holding its bits, which carries no derivative. In the copies derivatives
    are made from (``prepared``: function -> its copy), such a value is passed by reference instead: the
    forking function stores it into a local of its own and passes the local's address, the region's function
    reads the bits from there. Each thread still makes its own copy; the derivative now flows through the
    local, whose shadow the threads' adjoints are added to."""
    from enzcc.ir.instructions import Load
    from enzcc.ir.values import Argument

    copies = {copy: orig for orig, copy in prepared.items()}
    for copy in list(copies):
        caller = module.functions[copy]
        for call in [i for i in caller.instructions() if forked_function_name(i) in prepared]:
            region = module.functions[prepared[forked_function_name(call)]]
            region.blocks  # (parse its body now, before a parameter changes)
            captured = call.args[3:]
            if len(region.args) != len(captured) + 2:
                continue  # (refused later, with the message)
            for k, (a, p) in enumerate(zip(captured, region.args[2:])):
                if isinstance(a.type, T.PointerType) or not (from_float(a) or carries_float(p)):
                    continue
                if isinstance(a, Cast) and a.opcode == "bitcast" and isinstance(a.value.type, T.FloatType):
                    value = a.value
                elif isinstance(a, Load) and from_float(a):
                    value = None
                else:
                    continue  # (refused later: a float captured by value)
                b = IRBuilder.at_start(caller.entry_block)
                slot = b.alloca(a.type if value is None else value.type, in_entry=True)
                sb = IRBuilder.before(call)
                sb.store(a if value is None else value, slot)
                call.set_arg(3 + k, slot)
                # the region's function: the parameter becomes the local's address, read once at entry
                ref = Argument(T.ptr, p.name, parent=region, index=p.index)
                region.args[p.index] = ref
                region.function_type = T.FunctionType(region.return_type,
                                                      tuple(x.type for x in region.args), region.function_type.varargs)
                bits = IRBuilder.at_start(region.entry_block).load(p.type, ref)
                p.replace_all_uses_with(bits)


# -- the forward sweep ---------------------------------------------------------------------------------

def augment_fork(mode, inst: Call):
    """Replace ``__kmpc_fork_call`` ``inst`` of reverse mode ``mode``'s forward code by a fork of the outlined
    function's augmented primal. Returns the entry :func:`reverse_fork` takes, or None when no derivative
    flows through the region."""
    module = mode.module
    loc, _, _, *captured = inst.args
    fn, kinds = region(mode, inst)
    info = getattr(module, "enzcc_active_globals", None)
    if all(k == CONST for k in kinds) and not (info is not None and info.reached_by(fn.name)):
        return None
    check_body(module, fn, reverse=True)
    _mark_private_captures(fn, inst)
    aug, rev = mode.logic.split_of_call(inst, fn, kinds, False, args=[ConstantNull(T.ptr)] * 2 + captured,
                                        parallel=True)
    spans = _recorded_spans(mode.logic, aug, rev)
    aug_wrap, rev_wrap = _wrappers(module, fn, aug, rev, captured, kinds, spans)
    shadows = [mode.shadows.of(a, inst) for a, k in zip(captured, kinds[2:]) if k == DUP]
    b = IRBuilder.before(inst)
    pushed = _pushed_threads(inst)
    cap = signed_i64(b, pushed.args[2]) if pushed is not None else \
        signed_i64(b, b.call(_decl(module, "omp_get_max_threads", T.i32, ()), []))
    per_thread = 8 + (16 * len(spans.groups) if spans is not None else 0)  # (a tape, its spans)
    bytes_ = b.add(b.mul(cap, ConstantInt(T.i64, per_thread)), ConstantInt(T.i64, _HEADER))
    tapes = b.call(_decl(module, "malloc", T.ptr, (T.i64,)), [bytes_])
    b.store(cap, tapes)
    args = [tapes, *captured, *shadows]
    new = b.call(inst.callee, [loc, ConstantInt(T.i32, len(args)), module.global_ref(aug_wrap.name), *args])
    inst.erase()
    return new, loc, captured, kinds, tapes, pushed, rev_wrap


def _recorded_spans(logic, aug, rev):
    """The exclusive spans (:class:`enzcc.ad.threads.ExclusiveSpans`) of the region's reverse function ``rev``
    when its reverse code adds plainly inside them and its augmented primal ``aug`` records them (once per pair:
    several forks of one region share it); None otherwise (then no wrapper sets the token, and the reverse adds
    atomically everywhere)."""
    from enzcc.ad.threads import record_spans

    maker = logic.split_makers.get(logic.pair_keys.get(rev.name))
    spans = getattr(maker, "_spans", None)
    if spans is None or spans.token is None:
        return None
    if spans.recorded is None:
        spans.recorded = record_spans(aug, spans.groups)
    return spans if spans.recorded else None


def _mark_private_captures(fn, inst: Call) -> None:
    """A captured local of the forking function whose address goes nowhere but to forks (each once) and its
    own loads and stores (a shared variable captured by reference: ``s`` of ``a[i] * s``), and which the region
    only reads, is reached, in the region, only through its parameter: the parameter of ``fn`` (the copy derivatives are made from) is marked
    ``noalias``, which lets the reverse code sum the adjoints of a shared scalar the region only reads in each
    thread and add them once (:func:`enzcc.ad.threads.summed_in_thread`) instead of atomically at each read.
    The copy's forks are all clones of the same forking function: checked on this one."""
    from enzcc.ir.instructions import Alloca, Load, Store

    for k, a in enumerate(inst.args[3:]):
        if k + 2 >= len(fn.args) or not isinstance(a, Alloca) or "noalias" in fn.args[k + 2].attrs:
            continue
        if not all(isinstance(u.user, Load) and u.index == 0 for u in fn.args[k + 2].uses):
            continue  # (only a variable the region only reads: nobody writes it while the region runs)
        private = True
        for use in a.uses:
            u = use.user
            if isinstance(u, Load) and use.index == 0 or isinstance(u, Store) and use.index == 1 and u.value is not a:
                continue
            if isinstance(u, Call) and ((u.callee_name or "").startswith("llvm.lifetime.") or
                                        (forked_function_name(u) is not None and
                                         sum(1 for x in u.args if x is a) == 1)):
                continue
            private = False
            break
        if private:
            fn.args[k + 2].attrs.append("noalias")


def _pushed_threads(inst: Call):
    """The ``__kmpc_push_num_threads`` call right before fork ``inst`` (``num_threads(n)``), if any."""
    prev = inst.prev
    while prev is not None and isinstance(prev, Cast):
        prev = prev.prev
    if isinstance(prev, Call) and prev.callee_name == "__kmpc_push_num_threads":
        return prev
    return None


# -- the reverse sweep --------------------------------------------------------------------------------

def reverse_fork(mode, entry, block, b: IRBuilder) -> None:
    """At the reverse position of a fork (:func:`augment_fork`): fork the outlined function's reverse with the
    same captured values, their shadows and the threads' tapes, then free the tape block."""
    new, loc, captured, kinds, tapes, pushed, rev_wrap = entry
    module = mode.module
    shadows = [mode._shadow(a, block, b, new) for a, k in zip(captured, kinds[2:]) if k == DUP]
    prim = [mode._primal(a, block, b) for a in captured]
    t = mode._primal(tapes, block, b)
    if pushed is not None:
        gtid = b.call(_decl(module, "__kmpc_global_thread_num", T.i32, (T.ptr,)), [loc])
        b.call(pushed.callee, [loc, gtid, mode._primal(pushed.args[2], block, b)])
    args = [t, *prim, *shadows]
    b.call(new.callee, [loc, ConstantInt(T.i32, len(args)), module.global_ref(rev_wrap.name), *args])
    b.call(_decl(module, "free", T.void, (T.ptr,)), [t])


def mirror(mode, inst: Call, b: IRBuilder) -> None:
    """The reverse of a barrier or of the start/end of a critical section in a parallel region
    (:data:`MIRRORED`), for the current thread."""
    module = mode.module
    name = MIRRORED[inst.callee_name]
    loc = inst.args[0]
    gtid = b.call(_decl(module, "__kmpc_global_thread_num", T.i32, (T.ptr,)), [loc])
    if name == "__kmpc_barrier":
        b.call(_decl(module, name, T.void, (T.ptr, T.i32)), [loc, gtid])
    else:
        b.call(_decl(module, name, T.void, (T.ptr, T.i32, T.ptr)), [loc, gtid, inst.args[2]])


# -- wrappers ---------------------------------------------------------------------------------------------

def _wrappers(module, fn, aug, rev, captured, kinds, spans=None):
    """``aug_wrap(gtid, btid, tapes, captured..., shadows...)`` runs the augmented primal and keeps its tape in
    the thread's slot; ``rev_wrap`` (same parameters) runs the reverse with that tape. With ``spans`` (the
    reverse adds plainly inside each thread's exclusive spans), ``aug_wrap`` copies the spans the thread recorded
    into the tape block (after the tapes), and ``rev_wrap`` gives the reverse its exclusive spans and token
    (:data:`enzcc.ad.threads.SPANS`)."""
    ndup = sum(1 for k in kinds if k == DUP)
    params = (T.ptr, T.ptr, T.ptr) + tuple(a.type for a in captured) + (T.ptr,) * ndup
    names = ["gtid", "btid", "tapes"] + [f"c{k}" for k in range(len(captured))] + [f"d{k}" for k in range(ndup)]
    aug_wrap = internal_function(module, f"__enzcc_omp_augmented_{fn.name}", T.void, params, names)
    rev_wrap = internal_function(module, f"__enzcc_omp_reverse_{fn.name}", T.void, params, names)
    tid_fn = _decl(module, "omp_get_thread_num", T.i32, ())
    nth_fn = _decl(module, "omp_get_num_threads", T.i32, ())

    # augmented: {tape} = aug(gtid, btid, captured..., shadows...); tapes[tid] = tape
    gtid, btid, tapes, *rest = aug_wrap.args
    entry, bad, ok = (aug_wrap.append_block(n) for n in ("entry", "bad", "ok"))
    b = IRBuilder.at_end(entry)
    tid = signed_i64(b, b.call(tid_fn, []))
    nth = signed_i64(b, b.call(nth_fn, []))
    cap = b.load(T.i64, tapes)
    b.cond_br(b.icmp("ugt", nth, cap), bad, ok)
    fail_at_run_time(module, IRBuilder.at_end(bad), "an OpenMP parallel region ran with more threads than "
                                         "omp_get_max_threads() said")
    b = IRBuilder.at_end(ok)
    r = b.call(aug, [gtid, btid, *rest])
    if spans is not None:
        _keep_spans(module, b, tapes, cap, tid, len(spans.groups))
    b.store(nth, b.gep(T.i64, tapes, [ConstantInt(T.i64, 1)]))  # every thread stores the same value
    b.store(b.extract_value(r, [0]), b.gep(T.ptr, tapes, [b.add(tid, ConstantInt(T.i64, _HEADER // 8))]))
    b.ret_void()

    # reverse: rev(gtid, btid, captured..., shadows..., tapes[tid])
    gtid, btid, tapes, *rest = rev_wrap.args
    entry, bad, ok = (rev_wrap.append_block(n) for n in ("entry", "bad", "ok"))
    b = IRBuilder.at_end(entry)
    tid = signed_i64(b, b.call(tid_fn, []))
    nth = signed_i64(b, b.call(nth_fn, []))
    was = b.load(T.i64, b.gep(T.i64, tapes, [ConstantInt(T.i64, 1)]))
    b.cond_br(b.icmp("ne", nth, was), bad, ok)
    fail_at_run_time(module, IRBuilder.at_end(bad), "the reverse of an OpenMP parallel region ran with a different "
                                         "number of threads than its forward run")
    b = IRBuilder.at_end(ok)
    tape = b.load(T.ptr, b.gep(T.ptr, tapes, [b.add(tid, ConstantInt(T.i64, _HEADER // 8))]))
    if spans is not None:
        _give_spans(module, b, tapes, nth, tid, spans)
    b.call(rev, [gtid, btid, *rest, tape])
    b.ret_void()
    return aug_wrap, rev_wrap


def _span_area(b: IRBuilder, tapes: Value, cap: Value) -> Value:
    """Where the threads' spans start in the tape block: after the header and the ``cap`` tape pointers."""
    return b.gep(T.i8, tapes, [b.add(b.mul(cap, ConstantInt(T.i64, 8)), ConstantInt(T.i64, _HEADER))])


def _keep_spans(module, b: IRBuilder, tapes: Value, cap: Value, tid: Value, groups: int) -> None:
    """After the augmented primal, in its thread: the spans it recorded, copied into the thread's place."""
    from enzcc.ad.threads import spans_global

    mine = b.gep(T.i8, _span_area(b, tapes, cap), [b.mul(tid, ConstantInt(T.i64, 16 * groups))])
    b.memcpy(mine, b.gep(T.i64, spans_global(module), [ConstantInt(T.i64, 1)]), 16 * groups)


def _give_spans(module, b: IRBuilder, tapes: Value, nth: Value, tid: Value, spans) -> None:
    """Before the reverse, in its thread: each group's exclusive span (from every thread's recorded spans) and
    the reverse function's token, into :data:`enzcc.ad.threads.SPANS`."""
    from enzcc.ad.threads import exclusive_span_function, spans_global

    tls = spans_global(module)
    area = _span_area(b, tapes, b.load(T.i64, tapes))
    span = exclusive_span_function(module)
    groups = ConstantInt(T.i64, len(spans.groups))
    for k in range(len(spans.groups)):
        b.call(span, [area, nth, tid, groups, ConstantInt(T.i64, k),
                      b.gep(T.i64, tls, [ConstantInt(T.i64, 1 + 2 * k)])])
    b.store(b.ptrtoint(module.global_ref(spans.token), T.i64), tls)


def _decl(module, name: str, ret, params):
    """The runtime function ``name``; as the program declared it, if it did (``int omp_get_max_threads();`` in
    C is variadic: the calls here pass what the runtime takes either way)."""
    existing = module.functions.get(name)
    if existing is not None and existing.return_type == ret and \
            existing.function_type.params == tuple(params)[:len(existing.function_type.params)]:
        return existing
    return module.get_or_insert_function(name, T.FunctionType(ret, tuple(params)))


# -- floats captured by value ---------------------------------------------------------------------------

def _memory_users(base: Value, cls) -> list:
    """The loads or stores (``cls``) of ``base``'s memory, directly or through one address computation."""
    from enzcc.ad.memory import base_object

    users = [u.user for u in getattr(base, "uses", [])]
    users += [x.user for w in users for x in getattr(w, "uses", [])]
    return [w for w in users if isinstance(w, cls) and base_object(w.pointer) is base]


def from_float(v: Value, depth: int = 0) -> bool:
    """``v`` (an integer) holds a float's bits: through casts, or loaded from memory a float was stored into
    (how clang passes a floating-point ``firstprivate`` variable to an OpenMP parallel region)."""
    from enzcc.ad.activity import has_float
    from enzcc.ad.memory import base_object
    from enzcc.ir.instructions import Load, Store

    if has_float(v.type):
        return True
    if depth > 8:
        return False
    if isinstance(v, Cast):
        return from_float(v.value, depth + 1)
    if isinstance(v, Load):
        return any(has_float(w.value.type) for w in _memory_users(base_object(v.pointer), Store))
    return False


def carries_float(param: Value) -> bool:
    """``param`` (an integer) carries a float's bits: it reaches a float through casts, or through memory it is
    stored into and read back from (clang's by-value OpenMP captures, at -O0 and after optimization)."""
    from enzcc.ad.activity import has_float
    from enzcc.ad.memory import base_object
    from enzcc.ir.instructions import Load, Store

    seen, stack = set(), [param]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if has_float(v.type):
            return True
        for u in v.uses:
            user = u.user
            if isinstance(user, Cast):
                stack.append(user)
            elif isinstance(user, Store) and user.value is v:
                stack += _memory_users(base_object(user.pointer), Load)
    return False


# -- forward mode ---------------------------------------------------------------------------------------

def forward_fork(mode, inst: Call) -> None:
    """OpenMP's ``__kmpc_fork_call(loc, n, outlined, captured...)`` runs ``outlined(&gtid, &btid,
    captured...)`` in every thread of a parallel region. It forks the outlined function's forward derivative
    instead, each captured pointer to memory with derivatives followed by its shadow: the tangent code runs
    in the same threads and loop chunks as the primal it belongs to."""
    loc, _, _, *captured = inst.args
    fn, kinds = region(mode, inst)
    check_body(mode.module, fn, reverse=False)
    F = mode.logic.forward_of_call(inst, fn, kinds, [ConstantNull(T.ptr), ConstantNull(T.ptr), *captured])
    args = []
    for a, k in zip(captured, kinds[2:]):
        args.append(a)
        if k == DUP:
            args.append(mode.shadows.of(a, inst))
    IRBuilder.before(inst).call(mode.module.functions[inst.callee_name],
                                [loc, ConstantInt(T.i32, len(args)), mode.module.global_ref(F.name), *args])
    inst.erase()


# -- the call rules -----------------------------------------------------------------------------------------

def _fork_forward(mode, inst: Call) -> bool:
    from enzcc.ir.values import GlobalRef

    if len(inst.args) > 2 and isinstance(inst.args[2], GlobalRef) and \
            any(m in inst.args[2].symbol for m in ("__enzcc_omp_augmented_", "__enzcc_omp_reverse_")):
        # (its tape slots and adjoints were taken as carrying no tangent: the result was zeros)
        raise ad_error("forward mode over the reverse mode of an OpenMP parallel region (a Hessian-vector "
                       "product of a gradient whose function has a parallel region) is not supported", inst)
    if not mode.carries_derivatives(inst):
        return True
    if mode.logic is None:
        return False
    forward_fork(mode, inst)
    return True


def _fork_augment(mode, inst: Call):
    if mode.logic is None:
        return None
    entry = augment_fork(mode, inst)
    return None if entry is None else (entry[0], entry, [entry[4]])


def _fork_reverse(mode, inst: Call, entry, block, b: IRBuilder) -> bool:
    if entry is None:
        return False
    reverse_fork(mode, entry, block, b)
    return True


def _mirrored_reverse(mode, inst: Call, entry, block, b: IRBuilder) -> bool:
    if mode.parallel:
        mirror(mode, inst, b)
    return True


register(CallRule("openmp", passes_arguments=True, forward=_fork_forward, augment=_fork_augment,
                  reverse=_fork_reverse), names=("__kmpc_fork_call",))
register(CallRule("openmp", inactive=True, reverse=_mirrored_reverse), names=tuple(MIRRORED))
register(CallRule("openmp", inactive=True), prefixes=INACTIVE_PREFIXES)
register_called_function(forked_function_name)
register_called_arguments(forked_arguments)
register_copy_preparation(-10, reductions_as_critical)
register_module_preparation(0, lambda module, prepared: capture_floats_by_reference(module, prepared))

__all__ = ["INACTIVE_PREFIXES", "MIRRORED", "augment_fork", "check_body", "forked_function_name", "forward_fork",
           "mirror", "outlined_function", "region", "reverse_fork"]
