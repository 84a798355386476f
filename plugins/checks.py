"""What a compiled function does with each pointer parameter, read from its optimized LLVM IR, so that a
declaration (``In`` / ``Out``) can be checked against the code before anything is called.

The plugin build compiles the user's source alone to bitcode (to read the prototype); this module optimizes
that bitcode as enzcc -O2 does (scalar loops: the vectorizers' runtime checks would only blur the picture)
and follows each pointer parameter through the function with enzcc's IR model (``enzcc.ir``). For every
parameter it reports, per :class:`PointerUse`, whether the code reads it, writes it, and a read that no
write of that parameter can precede (the first access of an element is then a read: an ``Out`` holding
garbage). The analysis is conservative: a pointer that escapes (passed to a call, stored into memory,
returned, turned into an integer that comes back as a pointer) is *unknown*, and an unknown parameter is
never the subject of an error. Only facts the IR proves are reported; the checks built on them
(:func:`declaration_problems`) refuse a declaration only when the code contradicts it on some path.

It also reads, from the debug information, which parameters the source declares ``const T *``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PointerUse", "analyse_pointers", "const_pointers", "declaration_problems", "write_extents",
           "written_bytes"]

#: intrinsics that neither read nor write the memory they are given (markers, hints)
_INERT = ("llvm.lifetime.", "llvm.assume", "llvm.prefetch", "llvm.dbg.", "llvm.invariant.", "llvm.experimental.noalias",
          "llvm.sideeffect", "llvm.pseudoprobe")
_MEM_WRITE = ("llvm.memset.",)                                    # argument 0 written
_MEM_COPY = ("llvm.memcpy.", "llvm.memmove.", "llvm.memcpy.inline.", "llvm.memset.inline.")  # 0 written, 1 read


@dataclass
class PointerUse:
    """What the function does with one pointer parameter. ``known`` False: the pointer escapes (a call, a
    store of the pointer itself, ...), and nothing else here may be relied on."""

    index: int
    known: bool = True
    reads: bool = False
    writes: bool = False        # some instruction writes memory based only on this pointer
    may_write: bool = False     # some instruction may write it (e.g. through a phi of it and another pointer)
    write_at: str = ""          # where the first write found is (file:line)
    read_first_at: str = ""     # a read that no write of this parameter can precede (file:line), or ""

    def describe(self) -> str:
        """What the code does, in words: reads only, writes only, reads and writes, does not touch it."""
        if not self.known:
            return "passes it on (unknown use)"
        w = self.writes or self.may_write
        return {(True, True): "reads and writes it", (True, False): "only reads it",
                (False, True): "only writes it", (False, False): "does not touch it"}[(self.reads, w)]


_optimized_cache: dict = {}


def optimized_function(bitcode: bytes, name: str):
    """(``name`` in enzcc's IR model, the module's text) after LLVM's -O2 pipeline without the vectorizers, or
    (None, text) when the module does not define it. The last result is kept (both analyses use it)."""
    key = (hash(bitcode), name)
    if key in _optimized_cache:
        return _optimized_cache[key]
    import llvmlite.binding as llvm
    from enzcc.backend import llvm as backend
    from enzcc.ir import parse_module

    mod = llvm.parse_bitcode(bitcode)
    for f in mod.functions:  # (a copy for the analysis: the rest of the file, internal and unused, goes early)
        if not f.is_declaration and f.name != name:
            f.linkage = "internal"
    backend.optimize(mod, backend.target_machine(backend.host_triple(), 2), 2, vectorize=False)
    text = str(mod)
    try:
        fn = parse_module(text).get_function(name)
    except KeyError:  # (a static function nothing keeps: optimized away)
        fn = None
    if fn is not None and not fn.is_declaration:
        fn.parse()  # (bodies are parsed lazily: the arguments have no users before)
    else:
        fn = None
    _optimized_cache.clear()
    _optimized_cache[key] = (fn, text)
    return fn, text


def analyse_pointers(bitcode: bytes, name: str, source: str = "") -> dict[int, PointerUse]:
    """Per pointer parameter of ``name`` (C position -> :class:`PointerUse`), from its bitcode as the frontend
    made it (optimized here at -O2 first). ``{}`` when the function cannot be analysed (e.g. not found)."""
    fn, text = optimized_function(bitcode, name)
    if fn is None:
        return {}
    locations = _locations(text, source)
    escapes_all = " inttoptr " in text  # an integer made into a pointer may be any parameter
    out = {}
    for arg in fn.args:
        if str(arg.type) != "ptr":
            continue
        use = _follow(fn, arg, locations)
        if escapes_all:
            use.known = False
        out[arg.index] = use
    return out


def _locations(module_text: str, source: str) -> dict[str, str]:
    """``!N`` of each DILocation -> ``file:line`` (the source's name for the file)."""
    locs = {}
    name = source.rsplit("/", 1)[-1] if source else "line"
    for m in re.finditer(r"^(!\d+) = !DILocation\(line: (\d+)", module_text, re.M):
        locs[m.group(1)] = f"{name}:{m.group(2)}"
    return locs


def _where(inst, locations) -> str:
    dbg = inst.get_metadata("dbg")
    return locations.get(dbg.strip(), "") if dbg else ""


def _derived(arg):
    """(values that may hold an address based on ``arg``, the subset that can hold no other address)."""
    from enzcc.ir import Cast, GetElementPtr, Phi, Select
    may, order, stack = {id(arg): arg}, [arg], [arg]
    while stack:
        v = stack.pop()
        for u in v.users:
            through = (isinstance(u, GetElementPtr) and u.pointer is v) or isinstance(u, (Phi, Select)) or \
                (isinstance(u, Cast) and u.opcode in ("bitcast", "addrspacecast"))
            if isinstance(u, Select) and u.operands[0] is v:
                through = False  # the condition, not an address
            if through and id(u) not in may:
                may[id(u)] = u
                order.append(u)
                stack.append(u)
    pure = dict(may)
    changed = True
    while changed:  # a phi or select is pure when every address it can hold is
        changed = False
        for v in order:
            if id(v) not in pure:
                continue
            if isinstance(v, Phi):
                ins = v.operands
            elif isinstance(v, Select):
                ins = v.operands[1:]
            elif isinstance(v, GetElementPtr):
                ins = [v.pointer]
            elif isinstance(v, Cast):
                ins = [v.operands[0]]
            else:
                continue
            if any(id(x) not in pure for x in ins):
                del pure[id(v)]
                changed = True
    return may, pure


def _follow(fn, arg, locations) -> PointerUse:
    """Classify every use of an address based on ``arg``: loads, stores, memory intrinsics; anything else
    makes the parameter unknown."""
    from enzcc.ir import Call, Cast, Cmp, GetElementPtr, Load, Phi, Select, Store
    use = PointerUse(arg.index)
    may, pure = _derived(arg)
    reads, writes = [], []  # (instruction, pure)
    for v in may.values():
        for u in v.users:
            if isinstance(u, Load) and u.pointer is v:
                reads.append((u, id(v) in pure))
            elif isinstance(u, Store):
                if u.value is v:
                    use.known = False  # the address itself stored: it escapes
                if u.pointer is v:
                    writes.append((u, id(v) in pure))
            elif isinstance(u, (GetElementPtr, Phi, Select, Cmp)):
                continue
            elif isinstance(u, Cast):
                if u.opcode not in ("bitcast", "addrspacecast", "ptrtoint"):
                    use.known = False
            elif isinstance(u, Call) and not type(u).__name__ == "Invoke":
                callee = u.callee_name or ""
                if callee.startswith(_INERT):
                    continue
                idx = [i for i, a in enumerate(u.args) if a is v]
                if callee.startswith(_MEM_COPY) or callee.startswith(_MEM_WRITE):
                    for i in idx:
                        if i == 0:
                            writes.append((u, id(v) in pure))
                        elif i == 1 and callee.startswith(("llvm.memcpy.", "llvm.memmove.")):
                            reads.append((u, id(v) in pure))
                        else:
                            use.known = False
                    if not idx:
                        use.known = False
                else:
                    use.known = False
            else:
                use.known = False
    use.reads = bool(reads)
    sure_writes = [w for w, p in writes if p]
    use.writes = bool(sure_writes)
    use.may_write = bool(writes)
    if sure_writes:
        use.write_at = _where(sure_writes[0], locations) or "?"
    if use.known:
        write_insts = [w for w, _ in writes]
        for r, p in reads:
            if p and not _write_can_precede(fn, r, write_insts):
                use.read_first_at = _where(r, locations) or "?"
                break
    return use


def _write_can_precede(fn, read, writes) -> bool:
    """Whether one of ``writes`` can run before the first run of ``read``: earlier in its block, or in a
    block on a path from the entry to the read's block that does not pass through that block."""
    block = read.parent
    insts = list(block)
    pos = insts.index(read)
    write_ids = {id(w) for w in writes}
    if any(id(i) in write_ids for i in insts[:pos]):
        return True
    if block is fn.entry_block:
        return False
    forward = _reach([fn.entry_block], lambda b: b.successors, block)
    backward = _reach(list(block.predecessors), lambda b: b.predecessors, block)
    before = {id(b) for b in forward} & {id(b) for b in backward}
    return any(id(w.parent) in before for w in writes)


def _reach(roots, step, avoid) -> list:
    """Blocks reachable from ``roots`` through ``step`` without entering ``avoid``."""
    seen, out, stack = set(), [], [b for b in roots if b is not avoid]
    while stack:
        b = stack.pop()
        if id(b) in seen:
            continue
        seen.add(id(b))
        out.append(b)
        stack.extend(n for n in step(b) if n is not avoid and id(n) not in seen)
    return out


def const_pointers(module_text: str, function_text: str, nargs: int) -> set[int]:
    """The parameters (C positions) whose debug type is a pointer to ``const`` (``const T *``)."""
    define = next((ln for ln in function_text.splitlines() if ln.startswith("define")), "")
    m = re.search(r"!dbg !(\d+)", define)
    if not m:
        return set()
    meta = {int(k): v for k, v in re.findall(r"^!(\d+) = (?:distinct )?(.*)$", module_text, re.M)}

    def ref(text: str, key: str):
        f = re.search(key + r": !(\d+)", text)
        return int(f.group(1)) if f else None

    st = meta.get(ref(meta.get(int(m.group(1)), ""), "type") or -1, "")
    lst = meta.get(ref(st, "types") or -1, "")
    entries = [e.strip() for e in lst.strip()[2:-1].split(",")] if lst.startswith("!{") else []
    if len(entries) != nargs + 1:
        return set()
    out = set()
    for i, e in enumerate(entries[1:]):
        text, depth = meta.get(int(e[1:]), "") if e.startswith("!") else "", 0
        while "DW_TAG_typedef" in text and depth < 20:  # typedef double *vec: look through it
            text, depth = meta.get(ref(text, "baseType") or -1, ""), depth + 1
        if "DW_TAG_pointer_type" not in text:
            continue
        base = meta.get(ref(text, "baseType") or -1, "")
        if "DW_TAG_const_type" in base:
            out.add(i)
    return out


def declaration_problems(params, uses: dict[int, PointerUse], consts: set[int], fname: str) -> list[str]:
    """The contradictions between a declaration (``Param``s with ``kind`` "in"/"out") and the code, one
    message each: an In the code writes, an Out declared ``const`` in C, an Out read before it is written,
    an Out the code never writes."""
    problems = []
    for p in params:
        where = f"{fname}: parameter {p.index + 1} {p.name!r} is declared {p.describe()}"
        u = uses.get(p.index)
        if p.kind == "out" and p.index in consts:
            problems.append(f"{where}, but the function takes it as const {_c_type(p)} *: it reads it, never "
                            f"writes it (declare it In)")
            continue
        if u is None or not u.known:
            continue
        if p.kind == "in" and u.writes:
            problems.append(f"{where}, but the function writes it (at {u.write_at}): the caller's array would be "
                            f"overwritten (declare it Out, or copy it in the C code)")
        elif p.kind == "out" and u.read_first_at:
            problems.append(f"{where}, but the function reads it before writing it (at {u.read_first_at}): "
                            f"an output starts uninitialised (declare it In, or write it before reading)")
        elif p.kind == "out" and not (u.writes or u.may_write):
            problems.append(f"{where}, but the function never writes it ({u.describe()}): the output would be "
                            f"uninitialised memory")
    return problems


def _c_type(p) -> str:
    return {"float32": "float", "float64": "double"}.get(p.dtype or "", "T")


# --- the extent the code surely writes ---------------------------------------------------------------------------
#
# A fact says: when the guards hold for the call's integer arguments, the function writes the byte
# ``index * elem + store - 1`` of the parameter (so the array must have at least ``index * elem + store`` bytes).
# Expressions over the integer parameters are JSON lists: ["c", v] a constant, ["a", i] parameter i,
# ["add", e, f], ["sext", e, bits] / ["zext", e, bits] (widened from a bits-wide value). A guard is
# [predicate, bits, lhs, rhs, want]: the icmp must come out ``want`` for the store to be reached.

_SIZES = {"double": 8, "float": 4, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "half": 2, "ptr": 8}


def write_extents(bitcode: bytes, name: str, source: str = "") -> dict[int, list[dict]]:
    """Per pointer parameter (C position), the writes the code surely makes (see above): a store at a
    constant index in the entry block, and the last store of a counted loop (``for (i = a; i < N; i++)
    p[i + c] = ...``, the store in the loop's only exiting block, reached from the entry through branches on
    integer parameters only). Empty for a function that calls anything (a call may not return)."""
    from enzcc.ir import Call, DominatorTree

    fn, text = optimized_function(bitcode, name)
    if fn is None:
        return {}
    if any(isinstance(i, Call) and not (i.callee_name or "").startswith("llvm.") for i in fn.instructions()):
        return {}
    locations = _locations(text, source)
    dt = DominatorTree(fn)
    out: dict[int, list[dict]] = {}
    for arg in fn.args:
        if str(arg.type) != "ptr":
            continue
        facts = [f for f in (_store_fact(fn, dt, arg, s, locations) for s in _pure_stores(arg)) if f]
        if facts:
            out[arg.index] = facts
    return out


def _pure_stores(arg):
    from enzcc.ir import Store
    _, pure = _derived(arg)
    return [u for v in pure.values() for u in v.users if isinstance(u, Store) and u.pointer is v]


def _store_fact(fn, dt, arg, store, locations) -> dict | None:
    """The fact of one store through ``arg`` (address ``gep T, arg, idx`` or ``arg`` itself), or None."""
    from enzcc.ir import GetElementPtr
    size = _SIZES.get(str(store.value.type))
    addr = store.pointer
    if size is None:
        return None
    if addr is arg:
        elem, idx = size, None
    elif isinstance(addr, GetElementPtr) and addr.pointer is arg and len(addr.indices) == 1:
        elem, idx = _SIZES.get(str(addr.source_type)), addr.indices[0]
        if elem is None:
            return None
    else:
        return None
    block = store.parent
    at = _where(store, locations)
    if idx is None or _const(idx) is not None:
        if block is not fn.entry_block:
            return None
        return {"index": ["c", 0 if idx is None else _const(idx)], "elem": elem, "store": size, "guards": [],
                "at": at}
    loop = _counted_loop(block, idx)
    if loop is None:
        return None
    header, last = loop
    guards = _guards(fn, dt, header, arg.parent)
    if guards is None:
        return None
    return {"index": last, "elem": elem, "store": size, "guards": guards, "at": at}


def _const(v):
    from enzcc.ir import ConstantInt
    return v.signed_value if isinstance(v, ConstantInt) else None


def _counted_loop(block, idx):
    """(header, the last index as an expression) when ``idx`` is ``iv + c`` of a loop whose only exiting block
    is ``block``, which ends ``br (icmp eq iv + 1, N), exit, header`` (or ne / ult / slt, continuing; or the
    same test of ``iv`` itself), ``iv`` counting up by one from a constant."""
    from enzcc.ir import BinaryOp, Cast, CondBr, ICmp, Phi
    offset = 0
    if isinstance(idx, BinaryOp) and idx.opcode == "add" and _const(idx.rhs) is not None:
        idx, offset = idx.lhs, _const(idx.rhs)
    if not isinstance(idx, Phi) or len(idx.incoming) != 2:
        return None
    header = idx.parent
    term = block.terminator
    if not isinstance(term, CondBr) or not isinstance(term.condition, ICmp):
        return None
    cmp = term.condition
    tested, bound = cmp.lhs, cmp.rhs
    nxt = [v for v, b in idx.incoming if b is block]
    if len(nxt) != 1 or not (isinstance(nxt[0], BinaryOp) and nxt[0].opcode == "add" and nxt[0].lhs is idx
                             and _const(nxt[0].rhs) == 1):
        return None
    if tested is nxt[0]:
        step = -1   # the loop runs while iv + 1 != N: the last iv is N - 1
    elif tested is idx:
        step = 0    # while iv != N (the test after the body): the last iv is N
    else:
        return None
    start = None
    for v, b in idx.incoming:
        if b is not block:
            start = _const(v)
    if start is None:
        return None
    continuing = {"eq": False, "ne": True, "ult": True, "slt": True}.get(cmp.predicate)
    if continuing is None or (term.true_dest is header) != continuing or \
            (term.false_dest is header) == continuing:
        return None
    loop_blocks = _loop_blocks(header, block)
    if loop_blocks is None:
        return None
    for b in loop_blocks:  # the only way out is block's exit edge
        if b is not block and any(id(s) not in {id(x) for x in loop_blocks} for s in b.successors):
            return None
    n = _expr(bound)
    if n is None:
        return None
    return header, ["add", n, ["c", offset + step]]


def _loop_blocks(header, latch):
    """The blocks of the natural loop of the back edge latch -> header (None when header does not reach it)."""
    blocks, stack = {id(header): header}, [latch]
    while stack:
        b = stack.pop()
        if id(b) in blocks:
            continue
        blocks[id(b)] = b
        stack.extend(b.predecessors)
    return list(blocks.values()) if latch in blocks.values() else None


def _expr(v):
    """An expression over the integer parameters (see above), or None."""
    from enzcc.ir import Argument, BinaryOp, Cast
    c = _const(v)
    if c is not None:
        return ["c", c]
    if isinstance(v, Argument):
        return ["a", v.index]
    if isinstance(v, Cast) and v.opcode in ("sext", "zext"):
        inner = _expr(v.operands[0])
        bits = getattr(v.operands[0].type, "bits", None)
        return None if inner is None or bits is None else [v.opcode, inner, bits]
    if isinstance(v, BinaryOp) and v.opcode == "add":
        a, b = _expr(v.lhs), _expr(v.rhs)
        return None if a is None or b is None else ["add", a, b]
    return None


def _guards(fn, dt, header, _fn) -> list | None:
    """The conditions under which the entry reaches ``header``: for each conditional branch on the dominator
    chain whose one successor leads on (dominates the header), [pred, bits, lhs, rhs, want]; None when one is
    not an icmp of integer-parameter expressions, or a switch, or the chain has a loop of its own."""
    from enzcc.ir import CondBr, ICmp
    chain, b = [], dt.idom(header)
    while b is not None:
        chain.append(b)
        b = dt.idom(b)
    chain_ids = {id(d) for d in chain}
    forward = _reach([fn.entry_block], lambda b: b.successors, header)
    backward = _reach(list(header.predecessors), lambda b: b.predecessors, header)
    before = {id(b) for b in backward}
    for b in forward:  # every branch on the way is one of the chain's (else the way depends on more)
        if id(b) in before and id(b) not in chain_ids and len(set(map(id, b.successors))) > 1:
            return None
    guards = []
    for d in chain:
        term = d.terminator
        succs = list(dict.fromkeys(term.successors)) if term is not None else []
        if len(succs) <= 1:
            continue
        if not isinstance(term, CondBr):
            return None
        on = [s for s in (term.true_dest, term.false_dest) if dt.dominates(s, header)]
        if len(on) != 1:
            return None  # both ways go on, through blocks the chain does not hold
        cmp = term.condition
        if not isinstance(cmp, ICmp):
            return None
        lhs, rhs = _expr(cmp.lhs), _expr(cmp.rhs)
        bits = getattr(cmp.lhs.type, "bits", None)
        if lhs is None or rhs is None or bits is None:
            return None
        guards.append([cmp.predicate, bits, lhs, rhs, on[0] is term.true_dest])
    return guards


def evaluate(expr, ints: dict[int, int]):
    """An expression's value for the integer arguments (C position -> value), or None when it cannot tell
    (a widened value outside its width)."""
    op = expr[0]
    if op == "c":
        return expr[1]
    if op == "a":
        return ints.get(expr[1])
    if op == "add":
        a, b = evaluate(expr[1], ints), evaluate(expr[2], ints)
        return None if a is None or b is None else a + b
    v = evaluate(expr[1], ints)
    if v is None:
        return None
    bits = expr[2]
    if op == "sext":
        return v if -(1 << (bits - 1)) <= v < (1 << (bits - 1)) else None
    return v if 0 <= v < (1 << bits) else None  # zext


def _holds(guard, ints) -> bool | None:
    pred, bits, lhs, rhs, want = guard
    a, b = evaluate(lhs, ints), evaluate(rhs, ints)
    if a is None or b is None:
        return None
    if pred.startswith("u"):
        a, b = a % (1 << bits), b % (1 << bits)
    got = {"eq": a == b, "ne": a != b, "slt": a < b, "sle": a <= b, "sgt": a > b, "sge": a >= b,
           "ult": a < b, "ule": a <= b, "ugt": a > b, "uge": a >= b}.get(pred)
    return None if got is None else got == want


def written_bytes(facts: list[dict], ints: dict[int, int]) -> tuple[int, str] | None:
    """The largest number of bytes the code surely writes into one parameter for these integer arguments, and
    where (file:line); None when no fact applies."""
    best = None
    for f in facts:
        if not all(_holds(g, ints) for g in f["guards"]):
            continue
        last = evaluate(f["index"], ints)
        if last is None or last < 0:
            continue
        n = last * f["elem"] + f["store"]
        if best is None or n > best[0]:
            best = (n, f["at"])
    return best
