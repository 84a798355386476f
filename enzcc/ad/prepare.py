"""Preparing a copy of the function to differentiate: clone into the derivative's signature, inline user calls,
one return block, no debug intrinsics; and checks that the control flow can be reversed."""

from __future__ import annotations

import struct
import re

from enzcc.ad.reducible import make_reducible
from enzcc.ir.clone import clone_blocks

from enzcc.ad.errors import ad_error
from enzcc.ad.globals import expand_global_addresses
from enzcc.ad.inline import inline_all
from enzcc.ad.registry import is_inactive
from enzcc.ad.rules import load_rules
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.cfg import DominatorTree, reverse_post_order
from enzcc.ir.function import Function
from enzcc.ir.instructions import BinaryOp, Call, Cast, Instruction, Invoke, Load, Phi, Ret, Select, Store
from enzcc.ir.values import ConstantFloat, ConstantInt, ConstantPoison, ConstantUndef

#: attributes of the primal function that do not hold for its derivative
_DROP_ATTR_PREFIXES = ("memory(", "readnone", "readonly", "writeonly", "nofree", "nosync", "argmemonly",
                       "speculatable", "willreturn", "norecurse", "nounwind", "optnone", "noinline",
                       "alwaysinline", "mustprogress", "allockind", "allocsize", "\"enzyme")

_STRIP_METADATA = ("dbg", "llvm.loop", "alias.scope", "noalias", "heapallocsite", "enzcc.inlined_from")


def derivative_attributes(module, primal: Function) -> list[str]:
    """Function attributes for a derivative: the primal's target attributes, none of its memory claims."""
    attrs: list[str] = []
    for a in primal.fn_attrs:
        if a.startswith("#"):
            text = module.attribute_groups.get(int(a[1:]), "")
            kept = [t for t in _split_attrs(text) if not t.startswith(_DROP_ATTR_PREFIXES)]
            if kept:
                attrs.append(module.add_attribute_group(" ".join(kept)))
        elif not a.startswith(_DROP_ATTR_PREFIXES):
            attrs.append(a)
    return attrs


def _split_attrs(text: str) -> list[str]:
    """Split attribute-group text on spaces outside quotes and parentheses."""
    out, cur, depth, quoted = [], "", 0, False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        if ch == " " and not quoted and depth == 0:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def new_derivative_function(module, primal: Function, name: str, params: list[T.Type], ret: T.Type,
                            arg_names: list[str | None]) -> Function:
    seen: set[str] = set()
    unique = []
    for n in arg_names:  # shadows are named d_<primal>: a primal already named d_0 (nested AD) must not clash
        if n is not None:
            base, k = n, 1
            while n in seen or n.isdigit():
                n, k = f"{base}.{k}", k + 1
            seen.add(n)
        unique.append(n)
    fn = Function(module.unique_function_name(name), T.FunctionType(ret, tuple(params)), unique)
    fn.linkage = "internal"
    fn.fn_attrs = derivative_attributes(module, primal)
    fn.primal_name = getattr(primal, "primal_name", primal.name)
    """The user's function this one derives from (named in error messages)."""
    module.add_function(fn)
    return fn


def clone_body(primal: Function, target: Function) -> dict:
    """Copy ``primal``'s body into ``target`` whose first parameters correspond to ``primal``'s."""
    vmap: dict = {}
    for a, b in zip(primal.args, target.args):
        vmap[a] = b
    clone_blocks(primal.blocks, target, vmap)
    return vmap


#: libm functions whose LLVM intrinsic computes the same value without setting ``errno``
_ERRNO_MATH = frozenset(("sin", "cos", "tan", "exp", "exp2", "exp10", "log", "log2", "log10", "pow", "sqrt",
                         "sinh", "cosh", "tanh", "asin", "acos", "atan", "atan2"))


def _math_calls_as_intrinsics(fn: Function, keep) -> None:
    """In derivative code, calls of libm functions (``sin``, ``sinf``...) become their intrinsics
    (``llvm.sin.f64``): the same values, without the ``errno`` side effect that keeps LLVM from removing a call
    whose value only the caller needed (an output the derivative need not compute), or from computing
    ``sin(x)`` and ``cos(x)`` in one ``sincos`` call. (GPU code keeps its calls, which libdevice resolves.)"""
    module = fn.module
    if module is None or module.targets_gpu:
        return
    rules = load_rules()
    for inst in list(fn.instructions()):
        name = inst.callee_name if isinstance(inst, Call) else None
        if not name or name in keep or type(inst) is not Call:
            continue
        rule = rules.by_c_name.get(name)
        if rule is None or rule.name not in _ERRNO_MATH or not rule.intrinsic:
            continue
        ty = inst.type  # (double or float: not the long double variants)
        if ty not in (T.f64, T.f32) or any(a.type != ty for a in inst.args) or len(inst.args) != len(rule.args):
            continue
        b = IRBuilder.before(inst)
        new = b.call_intrinsic(rule.intrinsic, list(inst.args), flags=inst.fast_math_flags)
        inst.replace_all_uses_with(new)
        inst.erase()


def prepare(fn: Function) -> None:
    """Inline user calls, drop debug intrinsics and metadata that would not survive the transform, and give
    the function a single return block."""
    from enzcc.ad.hints import hints_of

    keep = hints_of(fn.module).protected()
    policy = inline_policy(fn)
    budget = _cut_calls_past_budget(fn, keep, policy)
    inline_all(fn, lambda callee: callee.name not in keep and should_inline(callee, policy),
               budget.admit if budget is not None else None)
    _mark_size_cut_calls(fn, keep, policy)
    _math_calls_as_intrinsics(fn, keep)
    for inst in list(fn.instructions()):
        for rec in inst.debug_records:
            rec.detach()
        inst.debug_records = []
        if isinstance(inst, Call) and (inst.callee_name or "").startswith(("llvm.dbg.", "llvm.lifetime.")):
            inst.erase()
    # unreachable blocks would confuse the analyses: drop them
    reachable = {id(b) for b in reverse_post_order(fn)}
    dead = [b for b in fn.blocks if id(b) not in reachable]
    for b in dead:
        for inst in list(b.instructions):
            for use in list(inst.uses):
                use.user.set_operand(use.index, IRBuilder.poison(inst.type))
        for succ in b.successors:
            for phi in succ.phis():
                while b in phi.incoming_blocks:
                    phi.remove_incoming(phi.incoming_blocks.index(b))
        if b.terminator is not None:
            b.terminator.erase()
    for b in dead:
        b.erase()
    rets = [b for b in fn.blocks if isinstance(b.terminator, Ret)]
    if not rets:
        raise ad_error(f"'{getattr(fn, 'primal_name', fn.name)}' never returns", fn=fn)
    if len(rets) > 1:
        unified = fn.append_block("ret.unified")
        b = IRBuilder.at_end(unified)
        phi = None
        value = rets[0].terminator.operands[0] if rets[0].terminator.operands else None
        if value is not None:  # (the primal's result: a derivative made from its body may return another type)
            phi = b.phi(value.type)
        for r in rets:
            term = r.terminator
            if phi is not None:
                phi.add_incoming(term.operands[0], r)
            term.erase()
            IRBuilder.at_end(r).br(unified)
        b.ret(phi) if phi is not None else b.ret_void()
    lower_writing_calls(fn)
    expand_global_addresses(fn)
    fold_pointer_round_trips(fn)
    fold_sign_bit_operations(fn)
    retype_pointer_bits(fn)
    retype_float_bits(fn)
    make_reducible(fn)
    check_reducible(fn)


def _lane_bits(c, width: int) -> list[int] | None:
    """The bit pattern of each lane of an integer (vector) constant, or of a bitcast of a double constant; None
    when it is not such a constant."""
    from enzcc.ir.values import ConstantExpr

    if isinstance(c, Cast) and c.opcode == "bitcast" or isinstance(c, ConstantExpr) and c.opcode == "bitcast":
        src = c.value if isinstance(c, Cast) else c.operands[0]
        elem = src.type.element if isinstance(src.type, T.VectorType) else src.type
        if not (isinstance(elem, T.FloatType) and elem.kind == "double" and width == 64):
            return None
        lanes = _lanes(src)
        if lanes is None or not all(isinstance(x, ConstantFloat) for x in lanes):
            return None
        out = []
        for x in lanes:
            t = x.text
            if t.lower().startswith("0x") and len(t) == 18:
                out.append(int(t[2:], 16))
            else:
                v = x.value
                if v is None:
                    return None
                out.append(struct.unpack("<Q", struct.pack("<d", v))[0])
        return out
    lanes = _lanes(c)
    if lanes is None or not all(isinstance(x, ConstantInt) for x in lanes):
        return None
    return [x.value & ((1 << width) - 1) for x in lanes]


def _lanes(c):
    from enzcc.ir.values import ConstantAggregate, ConstantSplat

    if isinstance(c, ConstantSplat):
        return [c.element] * c.type.count
    if isinstance(c, ConstantAggregate):
        return list(c.elements)
    if isinstance(c, (ConstantInt, ConstantFloat)):
        return [c]
    return None


def fold_sign_bit_operations(fn: Function) -> None:
    """Floats changed through their bits with the sign-bit masks (SSE's ``andpd`` with ``0x7FF..F`` as Eigen's
    ``pabs`` does, ``xorpd`` with the sign bit for a negation, ``orpd`` for minus the absolute value) become
    ``llvm.fabs`` / ``fneg``, whose derivatives are known: ``bitcast (and (bitcast x), 0x7FF..F)`` -> ``fabs x``,
    ``bitcast (xor (bitcast x), 0x800..0)`` -> ``fneg x``, ``bitcast (or (bitcast x), 0x800..0)`` ->
    ``fneg (fabs x)``."""
    for inst in list(fn.instructions()):
        if not (isinstance(inst, Cast) and inst.opcode == "bitcast") or inst.parent is None:
            continue
        fty = inst.type
        elem = fty.element if isinstance(fty, T.VectorType) else fty
        op = inst.value
        if not isinstance(elem, T.FloatType) or elem.kind not in ("double", "float") or \
                not isinstance(op, BinaryOp) or op.opcode not in ("and", "xor", "or"):
            continue
        width = 64 if elem.kind == "double" else 32
        sign, rest = 1 << (width - 1), (1 << (width - 1)) - 1
        for bits_v, mask_v in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            mask = _lane_bits(mask_v, width)
            if mask is None or not isinstance(bits_v, Cast) or bits_v.opcode != "bitcast" or \
                    bits_v.value.type != fty:
                continue
            want = {"and": rest, "xor": sign, "or": sign}[op.opcode]
            if any(m != want for m in mask):
                continue
            x = bits_v.value
            b = IRBuilder.before(inst)
            if op.opcode == "xor":
                r = b.fneg(x)
            else:
                r = b.call_intrinsic("llvm.fabs", [x], overload_types=[fty])
                if op.opcode == "or":
                    r = b.fneg(r)
            inst.replace_all_uses_with(r)
            inst.erase()
            break


def fold_pointer_round_trips(fn: Function) -> None:
    """A pointer that travels as an integer and back (C++ libraries store addresses in integer fields; after
    inlining and SROA, ``inttoptr (ptrtoint p)``, possibly plus an offset) is the pointer again, so that
    activity analysis sees where it points: ``inttoptr (ptrtoint p)`` -> ``p``, ``inttoptr (add (ptrtoint p),
    x)`` -> ``getelementptr i8, p, x``."""
    for inst in list(fn.instructions()):
        if not (isinstance(inst, Cast) and inst.opcode == "inttoptr") or inst.parent is None:
            continue
        v, offset = inst.value, None
        if isinstance(v, BinaryOp) and v.opcode == "add":
            for a, other in ((v.lhs, v.rhs), (v.rhs, v.lhs)):
                if isinstance(a, Cast) and a.opcode == "ptrtoint":
                    v, offset = a, other
                    break
        if not (isinstance(v, Cast) and v.opcode == "ptrtoint" and v.value.type == inst.type):
            continue
        p = v.value
        if offset is not None:
            p = IRBuilder.before(inst).gep(T.i8, p, [offset])
        inst.replace_all_uses_with(p)
        inst.erase()


#: LLVM's intrinsics for C functions that write through a pointer (they return both results) -> the rule
_AGGREGATE_INTRINSICS = {"llvm.modf.": "modf", "llvm.frexp.": "frexp"}
#: the types a rule's ``writes`` may name (besides ``ret``)
_WRITTEN_TYPES = {"i32": T.i32}
#: input functions that write a number read from outside through a pointer: (argument, type); the value has no
#: derivative (``std::cin >> x``: ``std::istream::operator>>(double &)``)
INPUT_CALLS = {"_ZNSirsERd": (1, T.f64), "_ZNSirsERf": (1, T.f32), "_ZNSirsERe": (1, T.x86_fp80),
               "_ZNSi10_M_extractIdEERSiRT_": (1, T.f64), "_ZNSi10_M_extractIfEERSiRT_": (1, T.f32),
               "_ZNSi10_M_extractIeEERSiRT_": (1, T.x86_fp80),
               "_ZNSt13basic_istreamIwSt11char_traitsIwEErsERd": (1, T.f64),
               "_ZNSt13basic_istreamIwSt11char_traitsIwEErsERf": (1, T.f32)}


def lower_writing_calls(fn: Function) -> None:
    """Math functions that also write through a pointer (``frexp``, ``modf``: rules with ``writes``), and input
    functions (:data:`INPUT_CALLS`), write into a local instead, which is then copied to the pointer by an
    ordinary load and store: the value written carries no derivative, and the store gives the pointer's memory a
    zero derivative as any store would.
    ``llvm.modf`` / ``llvm.frexp`` (which return both results) become such calls."""
    from enzcc.ad.emit import c_function_for

    rules = load_rules()
    for call in [i for i in fn.instructions() if isinstance(i, Call) and i.callee_name]:
        name = call.callee_name
        stem = next((r for p, r in _AGGREGATE_INTRINSICS.items() if name.startswith(p)), None)
        if stem is not None:
            if not isinstance(call.type, T.StructType) or not isinstance(call.type.elements[0], T.FloatType):
                continue  # a vector version: left to the "no derivative rule" error
            ret_ty, out_ty = call.type.elements
            b = IRBuilder.before(call)
            slot = b.alloca(out_ty, in_entry=True)
            r = b.call(c_function_for(fn.module, rules.functions[stem], ret_ty, [ret_ty, T.ptr]), [call.args[0], slot])
            agg = b.insert_value(b.insert_value(IRBuilder.poison(call.type), r, [0]), b.load(out_ty, slot), [1])
            call.replace_all_uses_with(agg)
            call.erase()
            continue
        rule = rules.by_c_name.get(name)
        if rule is not None and rule.writes:
            writes = [(rule.args.index(arg), call.type if what == "ret" else _WRITTEN_TYPES[what])
                      for arg, what in rule.writes.items()]
        elif name in INPUT_CALLS:
            writes = [INPUT_CALLS[name]]
        else:
            continue
        b = IRBuilder.after(call)
        if call.tail in ("tail", "musttail"):
            call.tail = None  # (``tail`` promises the callee touches no local of the caller: now it does)
        for i, ty in writes:
            target = call.args[i]
            slot = IRBuilder.before(call).alloca(ty, in_entry=True)
            call.set_arg(i, slot)
            b.store(b.load(ty, slot), target)


#: ``--ad-inline=auto`` inlines callees of at most this many instructions (and any callee returning a pointer
#: or passing aggregates of pointers or floats: their shadows and derivatives exist only inlined)
INLINE_THRESHOLD = 1500
#: ... and whose body, with the calls in it that are inlined in turn, has at most this many instructions. A
#: library whose small functions call each other many times over (REBOUND's integrators: kepler solvers called
#: from correctors called from each integrator's steps) expands exponentially when everything is inlined
#: (millions of instructions); a callee past this size is differentiated once, as a function of its own, and
#: called through its derived functions, as Enzyme does for every call. The cut falls as deep as it can: the
#: callees inside are inlined when their own expansion fits, so code that runs often stays inlined.
MAX_EXPANDED_SIZE = 12000
#: A function prepared for differentiation whose expansion under the limits above is larger than this is a
#: large program's: it is prepared with the tighter budgets below (policy :data:`LARGE`). Smaller ones keep
#: the limits above, with which a callee sees its caller's memory (C++ containers and Eigen at -O0, whose
#: copies are typed only by what the caller does with the memory). (Under the limits above REBOUND's
#: integrator steps expand to 34,000-90,000 instructions; the largest in enzcc's tests, tinyexpr's te_eval,
#: to 27,000 and Eigen's LU solve at -O0 to 20,000.) ``ENZCC_AD_LARGE_EXPANSION`` sets another value (the
#: tests of the large budgets use 0).
LARGE_EXPANSION = 30000
LARGE = "auto-large"
#: A differentiation request (the function an ``__enzyme_*`` call names) that with every call to a user function
#: inlined would be larger than this is a large program's: every function derived for it is prepared with the
#: large program's budgets (:func:`large_request`). (REBOUND's leapfrog steps: past 1.3 million; the largest
#: elsewhere in enzcc's tests, Eigen's LU solve at -O0, 40,000; tinyexpr's, kissfft's, cminpack's and
#: liblbfgs's under 7,000.) ``ENZCC_AD_LARGE_EXPANSION`` sets this one too (0: the large budgets everywhere).
LARGE_PROGRAM = 200000


def _large_expansion(default: int = LARGE_EXPANSION) -> int:
    import os

    value = os.environ.get("ENZCC_AD_LARGE_EXPANSION", "")
    return int(value) if value.isdigit() else default


def large_request(fn: Function) -> bool:
    """Whether a differentiation request whose entry is ``fn`` (the function an ``__enzyme_*`` call names) is a
    large program's: ``fn`` with every call to a user function inlined (recursion aside) would be past
    :data:`LARGE_PROGRAM` instructions. Every function derived for such a request is then prepared with
    the large program's budgets (:func:`inline_policy`), not only those whose own expansion under the former
    limits is past it: REBOUND's steps call many callees under 30,000 each, which the former limits made into
    derivatives of up to 12,000 inlined instructions per call (15 minutes and 5.4 GB). A small request keeps
    the former limits all the way down, with which C++ library code at -O0 stays inlined into the caller that
    types its memory."""
    if getattr(fn.module, "enzcc_inline", "auto") != "auto":
        return False
    return expanded_size(fn, "all") > _large_expansion(LARGE_PROGRAM)


def inline_policy(fn: Function) -> str:
    """The inlining policy ``fn`` (a private copy being prepared) is prepared with: the module's
    (``--ad-inline``); with ``auto``, :data:`LARGE` where its function belongs to a large request (its primal's
    name in ``module.enzcc_large``, which :func:`enzcc.ad._differentiate_text` fills from
    :func:`large_request` and hands down to the callees a large function's derivative calls) or where its own
    expansion under the former limits is past :data:`LARGE_EXPANSION`. A function is prepared once per
    round (the derived functions of every request share its copy), so the policy is recorded by name."""
    module = fn.module
    policy = getattr(module, "enzcc_inline", "auto")
    if policy != "auto":
        return policy
    large = module.__dict__.setdefault("enzcc_large", set())
    name = getattr(fn, "primal_name", fn.name)
    if name in large or expanded_size(fn, "auto") > _large_expansion():
        large.add(name)
        return LARGE  # (budgets that keep a large program's derivatives a few times its own size)
    return policy


#: In a large program (:data:`LARGE_EXPANSION`) a callee is inlined only if its expansion is at most this many
#: instructions (REBOUND's steps derived 212,000 primal instructions in 143 s and 3.7 GB of the engine at
#: 12,000; at 2,000 with :data:`MAX_BODY_SIZE` 3,000, 97,000 prepared instructions, 542,000 derived ones and a
#: build of 116 s and 1.5 GB; at 1,000 and 1,500, 57,000 prepared, a build of 44 s and 1.0 GB, and a reverse
#: sweep no slower: the code inlined into several callers was what grew).
MAX_EXPANDED_SIZE_LARGE = 1000
#: In a large program a function differentiated as a function of its own (the function asked for, or a callee
#: past :data:`MAX_EXPANDED_SIZE_LARGE`) inlines its calls only up to this many instructions in all, the
#: smallest expansions first; the larger calls stay calls to derived functions of their own. Without this
#: bound such a function took in every callee that fits the budget on its own, however many there were
#: (REBOUND's corrector calling seven 8,000-instruction operators: 78,000 instructions in one derivative,
#: 487,000 in all for one leapfrog step, past 8 GB and 10 minutes); with it the derivatives of a program are
#: at most a few times its own size.
MAX_BODY_SIZE = 1500


def should_inline(callee: Function, policy: str) -> bool:
    """Whether a call to ``callee`` inside code being differentiated is inlined; one that is not calls the
    callee's derived functions (:mod:`enzcc.ad.logic`). enzcc's own runtime helpers (the tape's, in a
    derivative differentiated again) always are."""
    if callee.is_varargs:
        return False  # (its va_start needs a variadic function around it: the call stays, see usercalls)
    if policy == "all" or callee.name.startswith("__enzcc_"):
        return True
    if policy == "none":
        return False
    if _must_inline(callee):
        return True
    limit = MAX_EXPANDED_SIZE_LARGE if policy == LARGE else MAX_EXPANDED_SIZE
    return _own_size(callee) <= INLINE_THRESHOLD and expanded_size(callee, policy) <= limit


def _must_inline(callee: Function) -> bool:
    """A callee returning a pointer or passing aggregates of pointers or floats: its shadows and derivatives
    exist only inlined (:func:`enzcc.ad.usercalls.needs_inlining`), whatever its size."""
    from enzcc.ad.usercalls import needs_inlining

    return isinstance(callee.return_type, T.PointerType) or needs_inlining(callee.return_type) or \
        any(needs_inlining(t) for t in callee.function_type.params)


class _Budget:
    """What is left of :data:`MAX_BODY_SIZE` for the function being prepared, for the calls a call through a
    function pointer becomes (one per candidate target: REBOUND's ODE right-hand sides, each inlined at every
    call of ``ode->derivatives``), which no expanded size counted."""

    def __init__(self, policy: str, size: int):
        self.policy, self.size = policy, size

    def admit(self, call: Call, callee: Function) -> bool:
        """Whether the call is inlined; one that is not gets :data:`enzcc.ad.usercalls.SIZE_CUT_CALL`."""
        from enzcc.ad.usercalls import SIZE_CUT_CALL

        n = expanded_size(callee, self.policy)
        if _must_inline(callee) or callee.name.startswith("__enzcc_") or self.size + n <= MAX_BODY_SIZE:
            self.size += n
            return True
        if SIZE_CUT_CALL not in call.fn_attrs:
            call.fn_attrs.append(SIZE_CUT_CALL)
        return False


def _cut_calls_past_budget(fn: Function, keep, policy: str) -> "_Budget | None":
    """Tag the calls of ``fn`` (a function differentiated on its own, before inlining) whose expansion does not
    fit :data:`MAX_BODY_SIZE` with the others with :data:`enzcc.ad.usercalls.SIZE_CUT_CALL`: they stay calls
    (the inliner skips them). The smallest expansions are taken first, so many small helpers stay inlined and
    the few large ones go; each callee's own calls are then inlined whole (its expansion was counted). Returns
    what is left of the budget, for the calls through function pointers (None: no budget)."""
    from enzcc.ad.inline import is_kept_recursive
    from enzcc.ad.usercalls import SIZE_CUT_CALL

    if policy != LARGE:
        return None
    module = fn.module
    size, candidates = 0, []
    for inst in fn.instructions():
        size += 1
        callee = module.functions.get(inst.callee_name) if isinstance(inst, Call) and inst.callee_name else None
        if callee is None or callee.is_declaration or callee.name in keep or is_kept_recursive(inst) or \
                callee.name == getattr(fn, "primal_name", None) or not should_inline(callee, policy):
            continue
        if _must_inline(callee) or callee.name.startswith("__enzcc_"):
            size += expanded_size(callee, policy)
        else:
            candidates.append((expanded_size(callee, policy), len(candidates), inst))
    for n, _, inst in sorted(candidates, key=lambda c: c[:2]):
        if size + n <= MAX_BODY_SIZE:
            size += n
        elif SIZE_CUT_CALL not in inst.fn_attrs:
            inst.fn_attrs.append(SIZE_CUT_CALL)
    return _Budget(policy, size)


def _mark_size_cut_calls(fn: Function, keep, policy: str) -> None:
    """Tag the calls that stay calls because their callee is too large to inline (``--ad-inline=auto``) with
    :data:`enzcc.ad.usercalls.SIZE_CUT_CALL`: a refused derivative of such a callee stops the program where
    the call is reached, instead of refusing the whole program for code a run may never enter."""
    from enzcc.ad.inline import is_kept_recursive
    from enzcc.ad.usercalls import SIZE_CUT_CALL

    if policy not in ("auto", LARGE):
        return
    module = fn.module
    for inst in fn.instructions():
        callee = module.functions.get(inst.callee_name) if isinstance(inst, Call) and inst.callee_name else None
        if callee is not None and SIZE_CUT_CALL not in inst.fn_attrs and not callee.is_declaration and \
                not callee.is_varargs and callee.name not in keep and not is_kept_recursive(inst) and \
                not should_inline(callee, policy):  # (the tag first: a tagged call's callee need not be sized)
            inst.fn_attrs.append(SIZE_CUT_CALL)


def _own_size(fn: Function) -> int:
    """The instructions of ``fn``'s body, counted up to just past :data:`INLINE_THRESHOLD` (asked again for
    every call while inlining: counted once per module)."""
    cache = fn.module.__dict__.setdefault("_enzcc_small", {}) if fn.module is not None else {}
    n = cache.get(fn.name)
    if n is None:
        n = 0
        for _ in fn.instructions():
            n += 1
            if n > INLINE_THRESHOLD:
                break
        cache[fn.name] = n
    return n


def expanded_size(fn: Function, policy: str) -> int:
    """The instructions of ``fn`` once the calls in it that :func:`should_inline` inlines are inlined, and
    theirs in turn (a call left as a call counts as one; a call back into a function being expanded, which
    stays a recursive call, as none). Counted once per module and policy."""
    module = fn.module
    if module is None:
        return 0
    memo = module.__dict__.setdefault("_enzcc_expanded", {}).setdefault(policy, {})
    if fn.name in memo:
        return memo[fn.name] or 0  # (None: being expanded, a recursive call)
    from enzcc.ad.hints import hints_of

    keep = hints_of(module).protected()
    memo[fn.name] = None
    n = 0
    for inst in fn.instructions():
        n += 1
        callee = module.functions.get(inst.callee_name) if isinstance(inst, Call) and inst.callee_name else None
        if callee is not None and not callee.is_declaration and callee.name not in keep and \
                memo.get(callee.name, 0) is not None and should_inline(callee, policy):
            n += expanded_size(callee, policy)
        if n > 100 * MAX_EXPANDED_SIZE:
            break  # (far past any limit: the rest need not be counted)
    memo[fn.name] = n
    return n


def retype_pointer_bits(fn: Function) -> None:
    """Optimizers move a pointer as an integer of its width too: ``store i64 (ptrtoint ptr %p)`` (a
    ``std::unique_ptr`` put into a vector's storage), and a ``load i64`` that clang's TBAA tags as a pointer
    (``p1 T``, ``any pointer``) and that is only stored again (the storage moved when the vector grows) or
    turned back with ``inttoptr``, or that reads memory holding nothing but pointers (a table of pointers whose
    entries are swapped with ``memcpy``). As integers they carried no shadow, and memory reached through them
    lost its derivatives without a message (or, swapped, took the wrong ones); as pointers again their
    shadows travel with them."""
    from enzcc.ad.memory import MemoryTypes, tbaa_access_type

    memtypes = MemoryTypes(fn)

    def holds_a_pointer(inst) -> bool:
        name = tbaa_access_type(inst) or ""
        return name == "any pointer" or re.fullmatch(r"p\d+ .+", name) is not None or \
            memtypes.access_kinds(inst.pointer) == {T.ptr}

    def store_ptr(store, value):
        new = IRBuilder.before(store).store(value, store.pointer, align=store.align)
        new.metadata = list(store.metadata)
        store.erase()

    for inst in list(fn.instructions()):
        if inst.parent is None:
            continue
        if isinstance(inst, Store) and not inst.volatile and inst.ordering is None and \
                isinstance(inst.value, Cast) and inst.value.opcode == "ptrtoint" and \
                inst.value.value.type == T.ptr and inst.value.type == T.i64:
            cast = inst.value
            store_ptr(inst, cast.value)
            if not cast.has_uses():
                cast.erase()
        elif isinstance(inst, Load) and inst.type == T.i64 and not inst.volatile and inst.ordering is None and \
                inst.has_uses() and holds_a_pointer(inst) and \
                all((isinstance(u.user, Store) and u.index == 0 and not u.user.volatile and u.user.ordering is None) or
                    (isinstance(u.user, Cast) and u.user.opcode == "inttoptr" and u.user.type == T.ptr)
                    for u in inst.uses):
            load = IRBuilder.before(inst).load(T.ptr, inst.pointer, align=inst.align)
            load.metadata = list(inst.metadata)
            for use in list(inst.uses):
                user = use.user
                if isinstance(user, Store):
                    store_ptr(user, load)
                else:
                    user.replace_all_uses_with(load)
                    user.erase()
            inst.erase()


def retype_float_bits(fn: Function) -> None:
    """Optimizers move a float as an integer of its width: ``load i64`` from a ``double``, a phi of such
    integers, ``bitcast double %d to i64`` before a store, ``bitcast i64 %i to double`` where it is used.
    A web of integers connected only by loads, stores, phis, selects and bitcasts, in which a bitcast or the
    memory it is loaded from or stored to shows that the bits are a float, becomes that float again, so the
    derivative follows it like any other. Floats packed into a wider integer are first split out of it
    (:mod:`enzcc.ad.packed`)."""
    from enzcc.ad.memory import MemoryTypes
    from enzcc.ad.packed import split_packed_floats

    memtypes = MemoryTypes(fn)
    if split_packed_floats(fn, memtypes):
        memtypes = MemoryTypes(fn)
    done: set[int] = set()
    for inst in list(fn.instructions()):
        if id(inst) in done or inst.parent is None or not isinstance(inst.type, T.IntType) or \
                not isinstance(inst, (Load, Phi, Select, Cast)):
            continue
        web = _float_bits_web(inst, memtypes)
        done.update(id(v) for v in (web[0] if web else [inst]))
        if web:
            _retype_web(*web)


def _float_bits_web(start, memtypes):
    """(members, float type) of the integer web around ``start`` when it is a float moved as bits (a bitcast
    says so, or memory it is loaded from or stored to holds floats of its width), else None."""

    def note(p, ty):
        k = memtypes.float_of_width(p, ty)
        if isinstance(k, T.FloatType):
            fty.add(k)
    members, stack, fty = [], [start], set()
    seen = {id(start)}

    def visit(v):
        if id(v) not in seen:
            seen.add(id(v))
            stack.append(v)
    while stack:
        v = stack.pop()
        if isinstance(v, Cast) and v.opcode == "bitcast" and isinstance(v.value.type, T.FloatType):
            fty.add(v.value.type)
        elif isinstance(v, Phi):
            for x, _ in v.incoming:
                if isinstance(x, Instruction):
                    visit(x)
                elif not isinstance(x, (ConstantInt, ConstantUndef, ConstantPoison)):
                    return None
        elif isinstance(v, Select):
            for x in (v.true_value, v.false_value):
                if isinstance(x, Instruction):
                    visit(x)
                elif not isinstance(x, (ConstantInt, ConstantUndef, ConstantPoison)):
                    return None
        elif isinstance(v, Load) and not v.volatile:  # (an atomic load of a double's bits too: it stays atomic)
            note(v.pointer, v.type)
        else:
            return None
        members.append(v)
        for u in v.uses:
            user = u.user
            if isinstance(user, Store) and u.index == 0 and not user.volatile:
                note(user.pointer, v.type)
                continue
            if isinstance(user, Cast) and user.opcode == "bitcast" and isinstance(user.type, T.FloatType):
                fty.add(user.type)
                continue
            if isinstance(user, Phi) or (isinstance(user, Select) and u.index > 0):
                visit(user)
                continue
            return None
    if len(fty) != 1:
        return None
    ty = fty.pop()
    if any(ty.bits != m.type.bits for m in members):
        return None
    return members, ty


def _float_of_bits(c, ty: T.FloatType):
    """The float constant with the bits of integer constant ``c`` (undef/poison: zero)."""
    if not isinstance(c, ConstantInt) or c.value == 0:
        return IRBuilder.const_zero(ty)
    if ty.bits == 64:
        return ConstantFloat(ty, text=f"0x{c.value & 0xFFFFFFFFFFFFFFFF:016X}")
    if ty.bits == 32:
        return ConstantFloat(ty, struct.unpack("<f", struct.pack("<I", c.value & 0xFFFFFFFF))[0])
    raise ad_error(f"cannot turn the integer constant {c.value} into a {ty} it stands for")


def _retype_web(members, ty) -> None:
    new = {}
    for m in members:
        if isinstance(m, Cast):
            new[id(m)] = m.value
        elif isinstance(m, Load):
            f = Load(ty, m.pointer, align=m.align, ordering=m.ordering, syncscope=m.syncscope)
            f.insert_before(m)
            new[id(m)] = f
        elif isinstance(m, Phi):
            f = Phi(ty)
            f.insert_before(m)
            new[id(m)] = f
        else:
            f = Select(m.condition, ConstantPoison(ty), ConstantPoison(ty))  # operands set below
            f.insert_before(m)
            new[id(m)] = f
    for m in members:
        f = new[id(m)]
        if isinstance(m, Phi):
            for x, blk in m.incoming:
                f.add_incoming(new[id(x)] if id(x) in new else _float_of_bits(x, ty), blk)
        elif isinstance(m, Select):
            for i, x in ((1, m.true_value), (2, m.false_value)):
                f.set_operand(i, new[id(x)] if id(x) in new else _float_of_bits(x, ty))
        for u in list(m.uses):
            user = u.user
            if isinstance(user, Store):
                user.set_operand(0, f)
            elif isinstance(user, Cast) and user.opcode == "bitcast" and isinstance(user.type, T.FloatType):
                user.replace_all_uses_with(f)
                user.erase()
    for m in members:
        m.drop_all_references()
    for m in members:
        m.erase()

def is_inactive_call(name: str) -> bool:
    """Calls that never carry derivatives: those a call rule says so of (output, time, exit, the OpenMP runtime's
    bookkeeping, hints...: :mod:`enzcc.ad.registry`), and those whose effect on memory was made an ordinary store
    when the function was prepared (input: :data:`INPUT_CALLS`)."""
    return is_inactive(name) or name in INPUT_CALLS


def inactive_functions(module) -> frozenset:
    """Functions the user declared to never carry derivatives (``__enzyme_inactivefn``, the ``enzyme_inactive``
    attribute: :mod:`enzcc.ad.hints`), and functions that end the program (:func:`program_ending_functions`).
    Calls to them are kept as they are in the forward sweep and contribute nothing."""
    from enzcc.ad.hints import hints_of

    return hints_of(module).inactive | program_ending_functions(module)


#: functions declared ``noreturn`` that do not end the program: control goes on elsewhere (a caller's handler)
_RESUMING_CALLS = ("longjmp", "_longjmp", "siglongjmp", "__longjmp_chk", "__cxa_throw", "__cxa_rethrow",
                   "_Unwind_Resume", "__cxa_bad_cast", "__cxa_bad_typeid", "__cxa_throw_bad_array_new_length",
                   "_ZSt9terminatev")
_RET_TEXT = re.compile(r"^\s*(?:ret|resume|invoke|indirectbr|callbr)\b|=\s*(?:invoke|callbr)\b", re.M)


def program_ending_functions(module) -> frozenset:
    """Defined functions that never return because every path through them ends the program: a call to a
    declared function after which the compiler put ``unreachable`` (``exit``, ``abort``, ``__assert_fail``: not
    ``longjmp`` or a C++ ``throw``, which go on elsewhere), or to another such function; or a loop that never
    ends. A call to one (an error path: ``if (bad) { fprintf(stderr, ...); exit(1); }`` in a helper that is
    not inlined) never reaches the reverse sweep: it stays the primal's call, as ``exit`` itself does. Made
    once per module."""
    found = module.__dict__.get("_enzcc_program_ending")
    if found is not None:
        return found
    candidates = {}
    for fn in module.functions.values():
        if fn.is_declaration or fn.name.startswith("__enzcc_"):
            continue
        if not fn.is_parsed and _RET_TEXT.search(fn._body_text):
            continue  # (a return, or an exception that may leave it: the body need not be parsed)
        ends = _ending_calls(fn)
        if ends is not None:
            candidates[fn.name] = ends
    changed = True
    while changed:  # (a candidate calling another that turns out to return is no candidate)
        changed = False
        for name, callees in list(candidates.items()):
            if any(c not in candidates and _may_return(module, c) for c in callees):
                del candidates[name]
                changed = True
    found = module.__dict__["_enzcc_program_ending"] = frozenset(candidates)
    return found


def _ending_calls(fn) -> set[str] | None:
    """The callees after which ``fn``'s paths end in ``unreachable``, when it has no other way out (no
    ``ret``, no exception leaving it); else None."""
    from enzcc.ir.instructions import Br, CondBr, Switch, Unreachable

    callees: set[str] = set()
    for block in fn.blocks:
        term = block.terminator
        if isinstance(term, (Br, CondBr, Switch)):
            continue
        if not isinstance(term, Unreachable) or len(block.instructions) < 2:
            return None
        call = block.instructions[-2]
        if not isinstance(call, Call) or not call.callee_name or isinstance(call, Invoke):
            return None
        callees.add(call.callee_name)
    return callees


def _may_return(module, name: str) -> bool:
    """Whether a call to ``name`` (not a candidate of :func:`program_ending_functions`) may return."""
    callee = module.functions.get(name)
    return callee is None or not callee.is_declaration or name in _RESUMING_CALLS or name.startswith("llvm.") \
        and name != "llvm.trap"


def finalize(fn: Function) -> None:
    """Drop metadata that refers to the primal's debug scopes or loops (kept until now for error messages)."""
    for inst in fn.instructions():
        for kind in _STRIP_METADATA:
            inst.set_metadata(kind, None)


def return_block(fn: Function):
    return next(b for b in fn.blocks if isinstance(b.terminator, Ret))


def check_reducible(fn: Function) -> None:
    """Reverse mode reverses loops through their natural-loop structure: irreducible cycles are refused."""
    dt = DominatorTree(fn)
    order = {id(b): i for i, b in enumerate(dt.rpo)}
    for b in dt.rpo:
        for s in b.successors:
            if order.get(id(s), -1) <= order[id(b)] and not dt.dominates(s, b):
                raise ad_error("irreducible control flow cannot be differentiated", b.terminator, fn=fn)


__all__ = ["prepare", "finalize", "new_derivative_function", "clone_body", "return_block"]
