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
from enzcc.ir.instructions import (Alloca, AtomicRMW, BinaryOp, Call, Cast, CmpXchg, GetElementPtr, ICmp,
                                   Instruction, Load, Store)
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


__all__ = ["BLOCK", "GLOBAL", "SREG", "ThreadOwnership", "WrittenElements", "summed_in_thread", "thread_index"]
