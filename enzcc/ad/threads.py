"""Which memory a thread of GPU code owns, so that the adjoints it adds there need no atomic adds.

Every thread of a kernel runs the derivative at once, so an adjoint added to memory (``*shadow += d``, the
reverse of a load) is an atomic add unless no other thread can add to the same bytes. Two threads' adds collide
only where both read the same bytes in the primal (a write there by one of them, unless a barrier orders it,
would be a data race of the primal itself; barriers are mirrored in the reverse sweep). :class:`ThreadOwnership`
proves that no other thread reads an element, for:

* **the thread's stack**: an ``alloca`` (:func:`enzcc.ad.memory.is_thread_private`);
* **element ``i`` of an array**, ``root + S*i + c`` with ``0 <= c`` and ``c + size <= S`` (so each access stays in
  its ``S``-byte element), where ``root`` is an argument or a global and ``i`` is the thread's **global index**
  ``ctaid.x * ntid.x + tid.x`` (in 32 or 64 bits, its operands in any order, widened by ``zext``/``sext``);
  distinct threads have distinct ``i``, hence distinct elements;
* **element ``tid.x`` of shared memory** (an ``addrspace(3)`` global): each block has its own copy of it, and the
  threads of a block have distinct ``tid.x``;

and only when, besides:

* every access to ``root`` in the function (load, store, atomic; any other use of its address: none) is of that
  form with the same element size ``S`` and the same index, so that no ``x[i-1]``, ``x[0]`` or ``x[2*i]`` reads
  another thread's element;
* no other memory whose shadow may overlap ``root``'s (another argument, noalias or not: C's ``restrict`` allows
  two pointers that are only read to overlap; memory reached through a loaded pointer; not another global, nor,
  for an argument, a shared array, whose shadow is enzcc's own) is read with derivatives in the function (stores
  there are fine: by the race argument above);
* nothing in the module reads a y or z coordinate or size (``tid.y``, ``ctaid.z``, ``ntid.y``...): in a 2-D
  launch threads of different rows share their x index.

What it assumes: a kernel that reads no y or z coordinate is launched with one-dimensional blocks and grid (its
threads that differ only in y or z would otherwise do the same work), and a 32-bit index does not wrap (fewer
than 2^32 threads along x). Anything else, and every other GPU target than NVPTX: atomic adds.
"""

from __future__ import annotations

from enzcc.ad.memory import base_object, is_thread_private
from enzcc.ad.registry import hook
from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import (Alloca, AtomicRMW, BinaryOp, Call, Cast, CmpXchg, GetElementPtr, ICmp,
                                   Instruction, Load, Ret, Store)
from enzcc.ir.values import Argument, ConstantExpr, ConstantInt, GlobalRef, Value

SREG = "llvm.nvvm.read.ptx.sreg."
"""NVPTX's special registers: ``tid`` (the thread in its block), ``ntid`` (the block's size), ``ctaid`` (the
block in the grid), ``nctaid`` (the grid's size), each ``.x``, ``.y`` or ``.z``."""

_OTHER_AXES = tuple(f"{SREG}{r}.{a}" for r in ("tid", "ntid", "ctaid", "nctaid") for a in ("y", "z"))

GLOBAL, BLOCK = "global", "block"
"""Index kinds: the thread's index in the whole launch, in its block."""

SHARED = 3
"""NVPTX's address space of shared (block) memory."""


class ThreadOwnership:
    """The elements of memory each thread of one function owns (see the module's docstring)."""

    def __init__(self, module, activity, primal: list[Instruction], shadow_of):
        self.module = module
        self.activity = activity
        self.shadow_of = shadow_of
        """Primal pointer -> its shadow (a shared array's must be one per block too)."""
        self.dl = module.data_layout
        self._owned: dict[object, bool] = {}
        """Root key -> whether its elements are owned by their threads."""
        self._accesses: list[tuple[Instruction, Value]] = []
        """Every (instruction, address) of the primal that touches memory (calls: each pointer argument)."""
        self._enabled = (module.triple or "").startswith("nvptx") and not reads_other_axes(module)
        if self._enabled:
            self._collect(primal)

    def owns(self, p: Value) -> bool:
        """Whether no other thread reads (and so adds adjoints to) the bytes at ``p``."""
        if is_thread_private(p):
            return True
        if not self._enabled:
            return False
        root = _root(p)
        key = _root_key(root)
        if key is None:
            return False
        if key not in self._owned:
            self._owned[key] = self._prove(root, key)
        return self._owned[key]

    # -- the proof -------------------------------------------------------------------------------------

    def _collect(self, primal: list[Instruction]) -> None:
        self._accesses = memory_accesses(primal)
        self._primal = {id(i) for i in primal}

    def _prove(self, root: Value, key) -> bool:
        shared = isinstance(root, GlobalRef) and _addrspace(root) == SHARED
        form = None
        for inst, p in self._accesses:
            other = _root(p)
            if _root_key(other) == key:
                element = self._element(inst, p)
                if element is None or (element[1] == BLOCK and not shared) or element != (form or element):
                    return False
                form = element
            elif _may_overlap(root, other) and self._adds_adjoints(inst, p):
                return False
        if form is not None and form[1] == BLOCK and not _in_shared_memory(self.shadow_of(root)):
            return False  # (a shadow that is not one per block, as the primal is)
        return form is not None and self._only_accessed(root)

    def _element(self, inst: Instruction, p: Value):
        """(element size, index kind, index key) when the access of ``inst`` at ``p`` stays inside element ``i`` of
        its root (``root + S*i + c``, ``0 <= c``, ``c + size <= S``), ``i`` a thread index; None otherwise."""
        if isinstance(inst, Call):
            return None
        size = self.dl.store_size(inst.type if isinstance(inst, Load) else inst.operands[0].type
                                  if isinstance(inst, Store) else inst.operands[1].type)
        walk = _walk(p, self.dl)
        if walk is None:
            return None
        stride, index, offset = walk
        kind = thread_index(index)
        if kind is None or offset < 0 or offset + size > stride:
            return None
        return stride, kind[0], kind[1]

    def _adds_adjoints(self, inst: Instruction, p: Value) -> bool:
        """Whether the reverse of ``inst`` may add to the shadow of the memory at ``p``: anything but a write (a
        store; an atomic add, whose reverse reads the shadow; a compare-and-exchange, of integers), a load of a
        pointer and a load of memory without a shadow."""
        act = self.activity
        if (isinstance(inst, Store) and p is inst.pointer) or (isinstance(inst, (AtomicRMW, CmpXchg)) and
                                                                p is inst.operands[0]):
            return False
        if isinstance(inst, Load) and isinstance(inst.type, T.PointerType):
            return False
        return act.is_active_ptr(p) or not isinstance(inst, Load)

    def _only_accessed(self, root: Value) -> bool:
        """Whether the addresses computed from ``root`` (in the primal) are only accessed (their address stored
        nowhere, passed to no call, merged into no phi or select): then :attr:`_accesses` are all its accesses."""
        stack, seen = [root], set()
        while stack:
            v = stack.pop()
            for use in v.uses:
                u = use.user
                if id(u) in seen or (isinstance(u, Instruction) and id(u) not in self._primal):
                    continue
                seen.add(id(u))
                if isinstance(u, (GetElementPtr, Cast, ConstantExpr)) and u.opcode in ("getelementptr", "bitcast",
                                                                                      "addrspacecast"):
                    stack.append(u)
                elif isinstance(u, (Load, ICmp)) or (isinstance(u, Store) and use.index == 1) or \
                        (isinstance(u, (AtomicRMW, CmpXchg)) and use.index == 0):
                    continue
                else:
                    return False
        return True


class WrittenElements:
    """The elements of memory a thread of an OpenMP parallel function owns because it writes them (a
    ``parallel for`` updating ``a[i]`` from ``a[i]``).

    Without synchronisation in the function (no barrier, critical section, reduction: calls whose rule mirrors
    them in the reverse sweep), an element one thread writes is accessed by no other thread during the region:
    that would be a data race of the primal. So where every access of an array in the function is a plain
    (not atomic) load or store of element ``root + S*i + c`` for one and the same index value ``i``, and each
    load shares its block with a store of that element (so the thread that reads it writes it too, in the same
    iteration), no other thread reads the element, and the adjoints added to it need no atomic add. The array is
    an argument, a global, or a pointer loaded from a ``noalias`` parameter that the function only reads (a
    pointer variable captured by reference: every load of it gives the same pointer); other memory read with
    derivatives must not overlap it (a ``noalias`` parameter, the thread's stack and distinct globals do not).
    Read-only arrays (a stencil's neighbours, a loss's inputs) are not proven here: they keep atomic adds."""

    def __init__(self, module, activity, primal: list[Instruction], noalias: set[int]):
        self.dl = module.data_layout
        self.activity = activity
        self.noalias = noalias
        """ids of the function's ``noalias`` pointer parameters."""
        self._owned: dict[object, bool] = {}
        self._primal = {id(i) for i in primal}
        self._accesses = memory_accesses(primal)
        self._enabled = not any(isinstance(inst, Call) and hook(inst, "inactive") and hook(inst, "reverse") is not None
                                for inst in primal)  # (synchronisation: a barrier, a critical section)

    def owns(self, p: Value) -> bool:
        if not self._enabled:
            return False
        root = _root(p)
        key = self._key(root)
        if key is None:
            return False
        if key not in self._owned:
            self._owned[key] = self._prove(key)
        return self._owned[key]

    def _key(self, root: Value):
        if isinstance(root, Load) and isinstance(root.pointer, Argument) and id(root.pointer) in self.noalias and \
                not root.volatile and root.ordering is None and \
                all(isinstance(u.user, Load) for u in root.pointer.uses if id(u.user) in self._primal):
            return ("slot", id(root.pointer))
        return _root_key(root)

    def _prove(self, key) -> bool:
        form, loads, stores = None, [], []
        roots = []
        for inst, p in self._accesses:
            other = _root(p)
            if self._key(other) == key:
                if not isinstance(inst, (Load, Store)) or inst.ordering is not None or \
                        (isinstance(inst, Store) and p is not inst.pointer):
                    return False
                element = self._element(inst, p)
                if element is None or element != (form or element):
                    return False
                form = element
                (loads if isinstance(inst, Load) else stores).append(inst)
                roots.append(other)
            elif self._may_overlap(key, other) and _adds_adjoints(self.activity, inst, p):
                return False
        if form is None or not stores:
            return False
        if not all(any(s.parent is ld.parent for s in stores) for ld in loads):
            return False
        return all(_only_accessed(r, self._primal) for r in {id(r): r for r in roots}.values())

    def _element(self, inst, p: Value):
        size = self.dl.store_size(inst.type if isinstance(inst, Load) else inst.operands[0].type)
        walk = _walk(p, self.dl)
        if walk is None:
            return None
        stride, index, offset = walk
        if offset < 0 or offset + size > stride:
            return None
        return stride, _value_key(index)

    def _may_overlap(self, key, other: Value) -> bool:
        if isinstance(other, Alloca) or (isinstance(other, Argument) and id(other) in self.noalias):
            return False
        if key[0] == "global" and isinstance(other, GlobalRef):
            return key[1] == other.symbol
        return True


SPANS = "__enzcc_thread_spans"
"""A thread-local ``[1 + 2 * MAX_GROUPS x i64]``: ``[0]`` the token of the reverse function the rest is for (set by the
code that forks it, cleared by that function), then one (low, high) pair of byte addresses per group of
:class:`ExclusiveSpans`: in the augmented primal, the bytes the thread read; in the reverse, those no other
thread read."""

MAX_GROUPS = 16


class ExclusiveSpans:
    """The adjoints an OpenMP parallel function's reverse code adds to memory it reads (a stencil's neighbours
    ``src[k - n]``, ``src[k + 1]``; a loss's inputs; ``b[i] += ...`` where another array may be ``b``), added
    plainly where no other thread of the team accessed the same bytes, atomically elsewhere.

    Static partitioning gives each thread a contiguous share of the iterations, so the bytes each thread reads
    of an array are mostly its own and only its share's borders are shared. Instead of proving that from the
    index arithmetic, the augmented primal *records* it: for each **group** (the memory reached from one root: a
    pointer argument, a global, or a pointer variable captured by reference, accessed only by plain loads and
    stores), each thread keeps the lowest and highest byte address it loaded or stored (:func:`record_spans`),
    and the code that forks the reverse gives each thread the bytes around its own that no other thread's span
    (of any group) holds (:func:`exclusive_span_function`). In the reverse, ``*shadow += d`` at primal address
    ``a`` is a plain add when ``[a, a + size)`` lies there, an atomic add otherwise. Any index form works (2-D
    rows, indirect indices); a schedule with several chunks per thread gives mostly atomic adds (its spans
    overlap), which is still right.

    Why it is right: the reverse code of a thread adds only where its forward code loaded (its tape comes from
    the same thread, with the same iterations), and every access of the groups' roots is recorded, so no other
    thread's reverse adds to those bytes through a group (nor reads and clears an adjoint there: the reverse of
    its store). Through other memory neither: a group is kept only when every other access whose reverse may
    add to memory (a load of another root, a call's pointer, an atomic) is in a kept group too, or provably
    elsewhere (the thread's stack, a ``noalias`` parameter, another global, memory the thread owns:
    :class:`WrittenElements`), and the function calls no code of the program that could reach the memory unseen
    (a function not inlined, a call through a pointer). Stores of other threads there through other pointers
    would be data races of the primal unless a barrier orders them, and the reverse mirrors the barrier. The
    spans reach the reverse only through the token of :data:`SPANS`: a reverse function not forked by code that
    computed them (a direct call, a nested region, a recursion) reads no token and adds atomically
    everywhere."""

    def __init__(self, module, activity, primal: list[Instruction], noalias: set[int], owned):
        self.module = module
        self.activity = activity
        self.noalias = noalias
        self._primal = {id(i) for i in primal}
        self.groups: list = [] if getattr(module, "enzcc_chunked_tape", False) or \
            any(_reaches_memory_unseen(module, i) for i in primal) else self._choose(primal, owned)
        """The stable keys of the groups (:func:`span_key`), in the order of their pairs in :data:`SPANS`."""
        self.token: str | None = None
        """The global whose address is this function's token, once a plain add was emitted."""
        self.recorded: bool | None = None
        """Whether the augmented primal records the spans (:func:`record_spans`); None: not tried yet."""
        self._bounds: list | None = None

    def _choose(self, primal: list[Instruction], owned) -> list:
        """The groups: roots only loaded from and stored to, with a load whose reverse adds an adjoint (and is not
        the thread's own memory: ``owned``), and no access whose reverse may add to their memory outside the kept
        groups."""
        only_loads: dict = {}
        roots: dict = {}
        adders: list = []
        for inst, p in memory_accesses(primal):
            root = _root(p)
            if isinstance(root, Alloca) or is_thread_private(p):
                continue
            key = span_key(root, self._primal)
            if key is not None and not (key[0] == "argument" and id(root) in self.noalias):
                only_loads[key] = only_loads.get(key, True) and _plain_access(inst, p)
                roots.setdefault(key, {})[id(root)] = root
            if _adds_adjoints(self.activity, inst, p) and not owned(p):
                adders.append((key, root))
        groups = {k for k, ok in only_loads.items() if ok and any(a == k for a, _ in adders) and
                  all(_only_accessed(r, self._primal) for r in roots[k].values())}
        while True:
            foreign = [r for k, r in adders if k not in groups]
            drop = {g for g in groups if any(self._may_overlap(g, r) for r in foreign)}
            if not drop:
                break
            groups -= drop
        return sorted(groups) if len(groups) <= MAX_GROUPS else []

    def _may_overlap(self, key, other: Value) -> bool:
        if isinstance(other, Argument) and id(other) in self.noalias:
            return False
        if key[0] == "global" and isinstance(other, GlobalRef):
            return key[1] == other.symbol
        return True

    def add(self, mode, b, p: Value, sp: Value, d: Value, align, block) -> bool:
        """``*sp += d`` (``sp``: the shadow of primal address ``p``, read in primal ``block``), plain where the
        thread's exclusive span holds it; False (nothing emitted) when ``p`` is in no group."""
        key = span_key(_root(p), self._primal)
        if key not in self.groups or not isinstance(d.type, T.FloatType):
            return False
        low, high = self._spans(mode)[self.groups.index(key)]
        addr = b.ptrtoint(mode._primal(p, block, b), T.i64)
        last = b.add(addr, ConstantInt(T.i64, self.module.data_layout.store_size(d.type) - 1))
        inside = b.and_(b.icmp("uge", addr, low), b.icmp("ule", last, high))
        b.call(_add_where_exclusive_function(self.module, d.type, align), [sp, d, inside])
        return True

    def _spans(self, mode) -> list:
        """Each group's (low, high) in this thread, read once at the start of the reverse sweep (the reverse of
        the return block, ``mode.rev``): the pairs of :data:`SPANS` when its token is this function's, else
        an empty span. The token is cleared, so that nothing this function calls reads it as its own."""
        if self._bounds is None:
            module = self.module
            self.token = module.unique_function_name("__enzcc_span_token")
            module.add_global(self.token, T.i8, ConstantInt(T.i8, 0), constant=True)
            tls = spans_global(module)
            b = IRBuilder.at_start(mode.rev[id(mode.ret_block)])
            mine = b.icmp("eq", b.load(T.i64, tls), b.ptrtoint(module.global_ref(self.token), T.i64))
            b.store(ConstantInt(T.i64, 0), tls)
            self._bounds = []
            for k in range(len(self.groups)):
                low = b.load(T.i64, b.gep(T.i64, tls, [ConstantInt(T.i64, 1 + 2 * k)]))
                high = b.load(T.i64, b.gep(T.i64, tls, [ConstantInt(T.i64, 2 + 2 * k)]))
                self._bounds.append((b.select(mine, low, ConstantInt(T.i64, -1)),
                                     b.select(mine, high, ConstantInt(T.i64, 0))))
        return self._bounds


def _reaches_memory_unseen(module, inst: Instruction) -> bool:
    """Whether ``inst`` calls code that may reach memory with derivatives other than through its pointer
    arguments: a function of the program left as a call (it may read a global, or an array through a global
    pointer), or a call through a pointer. Library functions reach only what they are given; runtime calls
    without derivatives (the OpenMP runtime's) none."""
    if not isinstance(inst, Call) or hook(inst, "inactive"):
        return False
    name = inst.callee_name
    if name is None:
        return True
    fn = module.functions.get(name)
    return fn is not None and not fn.is_declaration


def span_key(root: Value, primal: set[int]):
    """A root's key that holds in every function derived from the same primal (parameters by position): a
    pointer argument, a global, or a pointer loaded from a parameter that is only loaded from (a pointer variable
    captured by reference); None for anything else."""
    if isinstance(root, Argument):
        return ("argument", root.index)
    if isinstance(root, GlobalRef):
        return ("global", root.symbol)
    if isinstance(root, Load) and isinstance(root.pointer, Argument) and not root.volatile and \
            root.ordering is None and all(isinstance(u.user, Load) for u in root.pointer.uses
                                          if not isinstance(u.user, Instruction) or id(u.user) in primal):
        return ("slot", root.pointer.index)
    return None


def spans_global(module) -> GlobalRef:
    """:data:`SPANS`, defined on first use."""
    if SPANS not in module.globals:
        module.add_global(SPANS, T.ArrayType(1 + 2 * MAX_GROUPS, T.i64), linkage="internal thread_local",
                          align=8)
    return module.global_ref(SPANS)


def _add_where_exclusive_function(module, ty: T.Type, align):
    """``add(ptr p, ty d, i1 own)``: ``*p += d``, plainly when ``own``, atomically otherwise (inlined)."""
    from enzcc.ad.emit import atomic_add, internal_function

    name = f"__enzcc_add_where_exclusive.{ty}.{align or 0}"
    if name in module.functions:
        return module.functions[name]
    f = internal_function(module, name, T.void, (T.ptr, ty, T.i1), ["p", "d", "own"])
    f.fn_attrs.append("alwaysinline")
    p, d, own = f.args
    entry, plain, shared = (f.append_block(n) for n in ("entry", "plain", "shared"))
    IRBuilder.at_end(entry).cond_br(own, plain, shared)
    b = IRBuilder.at_end(plain)
    b.store(b.fadd(b.load(ty, p, align=align), d), p, align=align)
    b.ret_void()
    b = IRBuilder.at_end(shared)
    atomic_add(module, b, p, d, align)
    b.ret_void()
    return f


def record_spans(fn, groups: list) -> bool:
    """In augmented primal ``fn``: each group's lowest and highest byte address loaded or stored, written into
    :data:`SPANS` before each return. Loads at constant offsets from one address in one block are recorded
    once (a stencil's ``src[k - 1]``, ``src[k]``, ``src[k + 1]``). Returns False, changing nothing, when an
    access of a group's memory is not a plain load or store (then its spans would not cover it)."""
    insts = list(fn.instructions())
    ids = {id(i) for i in insts}
    dl = fn.module.data_layout
    sites: dict = {}  # (group, block, base) -> [first load, lowest offset, highest offset + size - 1]
    for inst, p in memory_accesses(insts):
        key = span_key(_root(p), ids)
        if key not in groups:
            continue
        if not _plain_access(inst, p):
            return False
        base, off = _constant_offset(p, dl)
        site = sites.setdefault((groups.index(key), id(inst.parent), id(base)), [inst, base, off, off])
        site[2] = min(site[2], off)
        site[3] = max(site[3], off + dl.store_size(inst.type if isinstance(inst, Load) else inst.value.type) - 1)
    if not sites:
        return False
    b = IRBuilder.before(fn.entry_block.instructions[0])
    slots = [(b.alloca(T.i64), b.alloca(T.i64)) for _ in groups]
    for low, high in slots:
        b.store(ConstantInt(T.i64, -1), low)
        b.store(ConstantInt(T.i64, 0), high)
    for (k, _, _), (first, base, lo, hi) in sites.items():
        b = IRBuilder.before(first)
        a = b.ptrtoint(base, T.i64)
        for slot, edge, pred in ((slots[k][0], lo, "ult"), (slots[k][1], hi, "ugt")):
            x = b.add(a, ConstantInt(T.i64, edge)) if edge else a
            old = b.load(T.i64, slot)
            b.store(b.select(b.icmp(pred, x, old), x, old), slot)
    tls = spans_global(fn.module)
    for ret in [i for i in fn.instructions() if isinstance(i, Ret)]:
        b = IRBuilder.before(ret)
        for k, (low, high) in enumerate(slots):
            b.store(b.load(T.i64, low), b.gep(T.i64, tls, [ConstantInt(T.i64, 1 + 2 * k)]))
            b.store(b.load(T.i64, high), b.gep(T.i64, tls, [ConstantInt(T.i64, 2 + 2 * k)]))
    return True


def _plain_access(inst: Instruction, p: Value) -> bool:
    """Whether ``inst`` reads or writes memory at ``p`` with a plain (not atomic, not volatile) load or store."""
    return isinstance(inst, (Load, Store)) and p is inst.pointer and inst.ordering is None and not inst.volatile


def _constant_offset(p: Value, dl) -> tuple[Value, int]:
    """(base, bytes) with ``p = base + bytes`` through ``getelementptr`` of constant indices."""
    off = 0
    while isinstance(p, GetElementPtr) and all(isinstance(i, ConstantInt) for i in p.indices):
        ty, first, *rest = p.source_type, *p.indices
        step = first.value * dl.alloc_size(ty)
        for i in rest:
            if isinstance(ty, (T.StructType, T.NamedStructType)):
                step += dl.field_offset(ty, i.value)
                ty = ty.elements[i.value]
            elif isinstance(ty, (T.ArrayType, T.VectorType)):
                ty = ty.element
                step += i.value * dl.alloc_size(ty)
            else:
                return p, off
        off += step
        p = p.pointer
    return p, off


def exclusive_span_function(module):
    """``span(ptr area, i64 threads, i64 me, i64 groups, i64 k, ptr out)``: ``area`` holds each thread's
    (low, high) per group, as the augmented primals recorded them (thread-major); ``out`` gets the widest span
    around thread ``me``'s low address of group ``k`` that holds no byte of another thread's spans (of any
    group): above the highest end of the spans that start at or below it, below the lowest start of those that
    start above it (whatever the spans are, a byte there is in none of them)."""
    from enzcc.ad.emit import internal_function

    name = "__enzcc_exclusive_span"
    if name in module.functions:
        return module.functions[name]
    f = internal_function(module, name, T.void, (T.ptr, T.i64, T.i64, T.i64, T.i64, T.ptr),
                          ["area", "threads", "me", "groups", "k", "out"])
    area, threads, me, groups, k, out = f.args
    entry, head, body, done = (f.append_block(n) for n in ("entry", "head", "body", "done"))
    one = ConstantInt(T.i64, 1)
    b = IRBuilder.at_end(entry)
    mine = b.load(T.i64, b.gep(T.i64, area, [b.mul(b.add(b.mul(me, groups), k), ConstantInt(T.i64, 2))]))
    total = b.mul(threads, groups)
    b.br(head)
    b = IRBuilder.at_end(head)
    i = b.phi(T.i64, [(ConstantInt(T.i64, 0), entry)])
    low = b.phi(T.i64, [(ConstantInt(T.i64, 0), entry)])
    high = b.phi(T.i64, [(ConstantInt(T.i64, -1), entry)])
    b.cond_br(b.icmp("uge", i, total), done, body)
    b = IRBuilder.at_end(body)
    at = b.gep(T.i64, area, [b.mul(i, ConstantInt(T.i64, 2))])
    start, end = b.load(T.i64, at), b.load(T.i64, b.gep(T.i64, at, [one]))
    other = b.icmp("ne", b.udiv(i, groups), me)
    below = b.icmp("ule", start, mine)
    after_end = b.add(end, one)
    raise_low = b.and_(b.and_(other, below), b.icmp("ugt", after_end, low))
    before_start = b.sub(start, one)
    lower_high = b.and_(b.and_(other, b.xor(below, ConstantInt(T.i1, 1))), b.icmp("ult", before_start, high))
    new_low = b.select(raise_low, after_end, low)
    new_high = b.select(lower_high, before_start, high)
    nxt = b.add(i, one)
    b.br(head)
    i.add_incoming(nxt, body)
    low.add_incoming(new_low, body)
    high.add_incoming(new_high, body)
    b = IRBuilder.at_end(done)
    b.store(low, out)
    b.store(high, b.gep(T.i64, out, [one]))
    b.ret_void()
    return f


def memory_accesses(primal: list[Instruction]) -> list[tuple[Instruction, Value]]:
    """Every (instruction, address) of ``primal`` that touches memory: loads, stores, atomics, and each pointer
    argument of a call."""
    out: list[tuple[Instruction, Value]] = []
    for inst in primal:
        if isinstance(inst, (Load, Store)):
            out.append((inst, inst.pointer))
        elif isinstance(inst, (AtomicRMW, CmpXchg)):
            out.append((inst, inst.operands[0]))
        elif isinstance(inst, Call):
            out += [(inst, a) for a in inst.args if isinstance(a.type, T.PointerType)]
    return out


def _address_users(root: Value, primal: set[int]):
    """The users (instructions of the primal, ``primal``: their ids; any other value) of ``root`` and of the
    addresses computed from it (``getelementptr``, ``bitcast``, ``addrspacecast``: followed, not given), each
    once, as ``(use, user)``."""
    stack, seen = [root], set()
    while stack:
        v = stack.pop()
        for use in v.uses:
            u = use.user
            if id(u) in seen or (isinstance(u, Instruction) and id(u) not in primal):
                continue
            seen.add(id(u))
            if isinstance(u, (GetElementPtr, Cast)) and use.index == 0 and \
                    u.opcode in ("getelementptr", "bitcast", "addrspacecast"):
                stack.append(u)
            else:
                yield use, u


def _value_key(v: Value, depth: int = 0):
    """What tells equal index values apart from others: the value itself, or the same widening (``sext``,
    ``zext``) or arithmetic with a constant of equal values (unoptimized code computes ``(long)i`` again at each
    access)."""
    if depth < 8 and isinstance(v, Cast) and v.opcode in ("sext", "zext"):
        return (v.opcode, v.type.bits, _value_key(v.value, depth + 1))
    if depth < 8 and isinstance(v, BinaryOp) and v.opcode in ("add", "mul", "sub", "shl") and \
            isinstance(v.operands[1], ConstantInt):
        return (v.opcode, v.type.bits, _value_key(v.operands[0], depth + 1), v.operands[1].value)
    return id(v)


def _adds_adjoints(act, inst: Instruction, p: Value) -> bool:
    """As :meth:`ThreadOwnership._adds_adjoints`: whether the reverse of ``inst`` may add to the shadow at
    ``p``."""
    if (isinstance(inst, Store) and p is inst.pointer) or (isinstance(inst, (AtomicRMW, CmpXchg)) and
                                                            p is inst.operands[0]):
        return False
    if isinstance(inst, Load) and isinstance(inst.type, T.PointerType):
        return False
    if isinstance(inst, Call) and hook(inst, "inactive"):
        return False  # (the runtime's bookkeeping: loop bounds, thread numbers)
    return act.is_active_ptr(p) or not isinstance(inst, Load)


def _only_accessed(root: Value, primal: set[int]) -> bool:
    """Whether the addresses computed from ``root`` in the primal are only loaded from or stored to."""
    return all(isinstance(u, (Load, ICmp)) or (isinstance(u, Store) and use.index == 1)
               for use, u in _address_users(root, primal))


def summed_in_thread(p: Value, noalias: bool, primal_ids: set[int]) -> bool:
    """Whether the adjoints a parallel function's reverse code adds to the shadow of ``p`` can be summed in the
    thread (a private slot) and added to the shadow once, atomically, at the end of its reverse code: ``p`` is a
    ``noalias`` parameter (``noalias``: the function it was copied from says so) (a shared variable captured by reference, which no other pointer of the function
    reaches: :mod:`enzcc.ad.calls.openmp` says so where it can prove it) and the primal (``primal_ids``: its
    instructions) only reads its memory, never writes it nor passes its address on. Then no reverse code reads
    that shadow before the region ends: every thread's share of it is only ever added to it, in any order."""
    if not (isinstance(p, Argument) and isinstance(p.type, T.PointerType) and noalias):
        return False
    # (anything else is a write, an atomic, an address stored, passed to a call, merged by a phi...)
    return all(isinstance(u, (Load, ICmp)) or
               (isinstance(u, Call) and (u.callee_name or "").startswith("llvm.lifetime."))
               for _, u in _address_users(p, primal_ids))


def reads_other_axes(module) -> bool:
    """Whether code of the program in ``module`` reads a y or z coordinate or size of the launch. The functions
    enzcc made itself (``__enzcc_*``: the zeroing of shared shadows by all the block's threads) do not count;
    a body not parsed yet is searched as text (parsing every libdevice function would cost more)."""
    names = [n for n in _OTHER_AXES if n in module.functions]
    if not names:
        return False
    for fn in module.functions.values():
        if fn.is_declaration or fn.name.startswith("__enzcc"):
            continue
        if not fn.is_parsed:
            text = getattr(fn, "_body_text", "") or ""
            if any(f"@{n}(" in text for n in names):
                return True
        elif any(isinstance(i, Call) and i.callee_name in names for i in fn.instructions()):
            return True
    return False


def thread_index(v: Value):
    """(kind, key) when ``v`` is a thread's index, widened or not: ``GLOBAL`` for ``ctaid.x * ntid.x + tid.x``,
    ``BLOCK`` for ``tid.x``; ``key`` tells equal values apart from others (the same widening of the same width).
    None for anything else."""
    widen = []
    while isinstance(v, Cast) and v.opcode in ("zext", "sext"):
        widen.append((v.opcode, v.type.bits))
        v = v.value
    if not isinstance(v.type, T.IntType):
        return None
    key = (tuple(widen), v.type.bits)
    if _sreg(v) == "tid.x":
        return BLOCK, key
    if isinstance(v, BinaryOp) and v.opcode == "add":
        a, b = (_unwiden(x) for x in v.operands)
        for t, m in ((a, b), (b, a)):
            if _sreg(t) == "tid.x" and isinstance(m, BinaryOp) and m.opcode == "mul" and \
                    {_sreg(_unwiden(x)) for x in m.operands} == {"ctaid.x", "ntid.x"}:
                return GLOBAL, key
    return None


def _unwiden(v: Value) -> Value:
    while isinstance(v, Cast) and v.opcode in ("zext", "sext"):
        v = v.value
    return v


def _sreg(v: Value) -> str | None:
    name = v.callee_name if isinstance(v, Call) else None
    return name[len(SREG):] if name and name.startswith(SREG) else None


def _walk(p: Value, dl):
    """(stride, index, constant byte offset) of address ``p`` = root + stride * index + offset through
    ``getelementptr`` and casts, with exactly one index that is not a constant; None otherwise."""
    offset, variable = 0, None
    while True:
        if isinstance(p, (Cast, ConstantExpr)) and p.opcode in ("bitcast", "addrspacecast"):
            p = p.operands[0]
            continue
        if isinstance(p, ConstantExpr) and p.opcode == "getelementptr":
            return None  # (a constant offset enzcc does not add up here)
        if not isinstance(p, GetElementPtr):
            break
        ty = p.source_type
        first, *rest = p.indices
        for n, i in enumerate([first] + rest):
            if n:
                if isinstance(ty, (T.StructType, T.NamedStructType)) and isinstance(i, ConstantInt):
                    offset += dl.field_offset(ty, i.value)
                    ty = ty.elements[i.value]
                    continue
                if not isinstance(ty, (T.ArrayType, T.VectorType)):
                    return None
                ty = ty.element
            if isinstance(i, ConstantInt):
                offset += i.value * dl.alloc_size(ty)
            elif variable is None:
                variable = (dl.alloc_size(ty), i)
            else:
                return None
        p = p.pointer
    if variable is None:
        return None
    return variable[0], variable[1], offset


def _root(p: Value) -> Value:
    """The object ``p`` points into, through address arithmetic and casts (constant expressions too)."""
    for _ in range(64):
        q = base_object(p)
        if isinstance(q, ConstantExpr) and q.opcode in ("getelementptr", "bitcast", "addrspacecast"):
            p = q.operands[0]
            continue
        return q
    return p


def _root_key(root: Value):
    """What identifies a root: an argument, a global by its name; None for anything else (a pointer loaded from
    memory, merged by a phi, returned by a call...)."""
    if isinstance(root, Argument):
        return ("argument", id(root))
    if isinstance(root, GlobalRef):
        return ("global", root.symbol)
    return None


def _addrspace(g: GlobalRef) -> int:
    target = g.resolve()
    return getattr(target, "addrspace", 0) or 0


def _in_shared_memory(p: Value) -> bool:
    root = _root(p)
    return isinstance(root, GlobalRef) and _addrspace(root) == SHARED


def _may_overlap(root: Value, other: Value) -> bool:
    """Whether memory reached from ``other`` may overlap ``root``'s: not when they are two different globals or
    one is the thread's own stack."""
    if isinstance(other, Alloca) or isinstance(root, Alloca):
        return False
    if isinstance(root, GlobalRef) and isinstance(other, GlobalRef):
        return root.symbol == other.symbol
    # (a shared array's shadow is enzcc's own, one per block: no pointer of the program reaches it)
    return not any(isinstance(r, GlobalRef) and _addrspace(r) == SHARED for r in (root, other))


__all__ = ["BLOCK", "GLOBAL", "MAX_GROUPS", "SPANS", "SREG", "ExclusiveSpans", "ThreadOwnership", "WrittenElements",
           "exclusive_span_function", "record_spans", "span_key", "spans_global", "summed_in_thread", "thread_index"]
