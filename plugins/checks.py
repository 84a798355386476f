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

__all__ = ["PointerUse", "analyse_pointers", "const_pointers", "declaration_problems"]

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


def analyse_pointers(bitcode: bytes, name: str, source: str = "") -> dict[int, PointerUse]:
    """Per pointer parameter of ``name`` (C position -> :class:`PointerUse`), from its bitcode as the frontend
    made it (optimized here at -O2 first). ``{}`` when the function cannot be analysed (e.g. not found)."""
    import llvmlite.binding as llvm
    from enzcc.backend import llvm as backend
    from enzcc.ir import parse_module

    mod = llvm.parse_bitcode(bitcode)
    tm = backend.target_machine(backend.host_triple(), 2)
    backend.optimize(mod, tm, 2, vectorize=False)
    text = str(mod)
    irmod = parse_module(text)
    fn = irmod.get_function(name)
    if fn is None or fn.is_declaration:
        return {}
    fn.parse()  # (bodies are parsed lazily: the arguments have no users before)
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
