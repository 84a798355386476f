"""Splitting integers that pack several floats into one.

SROA keeps a small struct of floats (``struct {float a, b;}``) in one ``i64``: fields are put in with
``zext``/``shl``/``or``, replaced with ``and`` masks, taken out with ``lshr``/``trunc``, and the whole integer
travels through phis, selects, loads and stores. The derivative cannot follow a float through such bit
operations. This pass rewrites the web of packed integers as one web per field (``n`` integers of the field's
width, here two ``i32``), after which each field is a float moved as bits, which
:func:`enzcc.ad.prepare.retype_float_bits` turns back into a float. Little-endian targets only.
"""

from __future__ import annotations

from math import gcd

from enzcc.ir import types as T
from enzcc.ir.builder import IRBuilder
from enzcc.ir.instructions import BinaryOp, Cast, Instruction, Load, Phi, Select, Store
from enzcc.ir.values import ConstantInt, ConstantPoison, ConstantUndef

_SHIFTS = ("shl", "lshr")


class _Web:
    """The packed integers connected to one value, and how they are read and written."""

    def __init__(self, width: int):
        self.width = width
        """Bits of the packed integer (64 or 128)."""
        self.nodes: list[Instruction] = []
        """Loads, phis, selects and bit operations producing packed integers, in discovery order."""
        self.truncs: list[Cast] = []
        """``trunc`` of a packed integer to one field: reads field 0 of its operand."""
        self.stores: list[Store] = []
        """Stores of a packed integer: one store per field."""
        self.field_bits: set[int] = set()
        """Widths of the fields, from truncs and zexts (must come out as one)."""
        self.float_evidence = False
        """A field is seen as a float: bitcast to or from one, or memory holding floats of the field's width."""


def _is_simple(inst) -> bool:
    return not getattr(inst, "volatile", False) and getattr(inst, "ordering", None) is None


def _collect(start: Instruction, memtypes) -> _Web | None:
    web = _Web(start.type.bits)
    seen = {id(start)}
    stack = [start]

    def visit(v) -> bool:
        if isinstance(v, (ConstantInt, ConstantUndef, ConstantPoison)):
            return True
        if not isinstance(v, Instruction) or v.type != start.type:
            return False
        if id(v) not in seen:
            seen.add(id(v))
            stack.append(v)
        return True

    while stack:
        v = stack.pop()
        if isinstance(v, Load) and _is_simple(v):
            pass
        elif isinstance(v, Phi):
            if not all(visit(x) for x, _ in v.incoming):
                return None
        elif isinstance(v, Select):
            if not (visit(v.true_value) and visit(v.false_value)):
                return None
        elif isinstance(v, BinaryOp) and v.opcode == "or":
            if not (visit(v.lhs) and visit(v.rhs)):
                return None
        elif isinstance(v, BinaryOp) and v.opcode in _SHIFTS + ("and",) and isinstance(v.rhs, ConstantInt):
            if not visit(v.lhs):
                return None
        elif isinstance(v, Cast) and v.opcode == "zext" and isinstance(v.value.type, T.IntType):
            web.field_bits.add(v.value.type.bits)
            src = v.value
            if (isinstance(src, Cast) and src.opcode == "bitcast" and isinstance(src.value.type, T.FloatType)) \
                    or (isinstance(src, Load) and memtypes.float_of_width(src.pointer, src.type) is not None):
                web.float_evidence = True
        else:
            return None
        web.nodes.append(v)
        for use in v.uses:
            user = use.user
            if isinstance(user, Cast) and user.opcode == "trunc" and isinstance(user.type, T.IntType):
                web.truncs.append(user)
                web.field_bits.add(user.type.bits)
                if any((isinstance(u.user, Cast) and u.user.opcode == "bitcast"
                        and isinstance(u.user.type, T.FloatType))
                       or (isinstance(u.user, Store) and u.index == 0
                           and memtypes.float_of_width(u.user.pointer, user.type) is not None)
                       for u in user.uses):
                    web.float_evidence = True
            elif isinstance(user, Store) and use.index == 0 and _is_simple(user):
                web.stores.append(user)
            elif isinstance(user, (Phi, BinaryOp)) and (not isinstance(user, BinaryOp) or user.opcode == "or"
                                                       or use.index == 0):
                if not visit(user):
                    return None
            elif isinstance(user, Select) and use.index > 0:
                visit(user)
            else:
                return None
    for m in [n for n in web.nodes if isinstance(n, Load)] + web.stores:
        kind = memtypes.float_of_width(m.pointer, T.IntType(web.width))
        if isinstance(kind, T.VectorType) and (not web.field_bits or kind.element.bits in web.field_bits):
            web.field_bits.add(kind.element.bits)  # floats copied as one integer (memcpy of two floats)
            web.float_evidence = True
    if len(web.field_bits) != 1:
        return None
    k = next(iter(web.field_bits))
    if k % 8 or web.width % k or web.width == k:
        return None
    for v in web.nodes:
        if isinstance(v, BinaryOp) and v.opcode in _SHIFTS and v.rhs.unsigned_value % k:
            return None
        if isinstance(v, BinaryOp) and v.opcode == "and" and any(
                (v.rhs.unsigned_value >> (j * k)) & ((1 << k) - 1) not in (0, (1 << k) - 1)
                for j in range(web.width // k)):
            return None  # a mask that keeps part of a field
    return web if web.float_evidence else None


def _piece_align(align: int | None, offset: int) -> int | None:
    return align if align is None or offset == 0 else gcd(align, offset)


def _split(web: _Web) -> None:
    k = next(iter(web.field_bits))
    n = web.width // k
    field = T.IntType(k)
    zero = ConstantInt(field, 0)
    pieces: dict[int, list] = {}

    def const_pieces(c) -> list:
        if isinstance(c, ConstantInt):
            return [ConstantInt(field, (c.unsigned_value >> (j * k)) & ((1 << k) - 1)) for j in range(n)]
        return [ConstantPoison(field)] * n

    for v in web.nodes:  # placeholders for values that may be used before they are defined
        if isinstance(v, Phi):
            pieces[id(v)] = [IRBuilder.before(v).phi(field) for _ in range(n)]
        elif isinstance(v, Select):
            pieces[id(v)] = [IRBuilder.before(v).select(v.condition, ConstantPoison(field), ConstantPoison(field))
                             for _ in range(n)]
        elif isinstance(v, Load):
            b = IRBuilder.before(v)
            pieces[id(v)] = [b.load(field, b.gep(T.i8, v.pointer, [ConstantInt(T.i64, j * k // 8)])
                                    if j else v.pointer, align=_piece_align(v.align, j * k // 8))
                             for j in range(n)]

    def of(v) -> list:
        if not isinstance(v, Instruction):
            return const_pieces(v)
        got = pieces.get(id(v))
        if got is not None:
            return got
        b = IRBuilder.before(v)
        if isinstance(v, Cast):  # zext of one field
            got = [v.value] + [zero] * (n - 1)
        elif v.opcode == "or":
            got = []
            for x, y in zip(of(v.lhs), of(v.rhs)):
                got.append(y if _is_zero(x) else x if _is_zero(y) else b.or_(x, y))
        elif v.opcode == "and":
            mask = v.rhs.unsigned_value
            got = [x if (mask >> (j * k)) & 1 else zero for j, x in enumerate(of(v.lhs))]
        else:
            s = min(v.rhs.unsigned_value // k, n)
            src = of(v.lhs)
            got = [zero] * s + src[:n - s] if v.opcode == "shl" else src[s:] + [zero] * s
        pieces[id(v)] = got
        return got

    for v in web.nodes:
        got = of(v)
        if isinstance(v, Phi):
            for x, blk in v.incoming:
                for j, p in enumerate(of(x)):
                    got[j].add_incoming(p, blk)
        elif isinstance(v, Select):
            for j, (t, f) in enumerate(zip(of(v.true_value), of(v.false_value))):
                got[j].set_operand(1, t)
                got[j].set_operand(2, f)
    for t in web.truncs:
        t.replace_all_uses_with(of(t.value)[0])
        t.erase()
    for s in web.stores:
        b = IRBuilder.before(s)
        for j, p in enumerate(of(s.value)):
            ptr = b.gep(T.i8, s.pointer, [ConstantInt(T.i64, j * k // 8)]) if j else s.pointer
            b.store(p, ptr, align=_piece_align(s.align, j * k // 8))
        s.erase()
    for v in web.nodes:
        v.drop_all_references()
    for v in web.nodes:
        v.erase()


def _is_zero(v) -> bool:
    return isinstance(v, ConstantInt) and v.value == 0


def split_packed_floats(fn, memtypes) -> bool:
    """Split every web of integers that packs floats (see the module docstring). True when one was split."""
    if fn.module.data_layout.big_endian:
        return False
    done: set[int] = set()
    changed = False
    for inst in list(fn.instructions()):
        if id(inst) in done or inst.parent is None or not isinstance(inst.type, T.IntType) or \
                inst.type.bits not in (64, 128) or not (isinstance(inst, (Load, Phi, Select)) or
                                                        (isinstance(inst, BinaryOp) and inst.opcode == "or")):
            continue
        web = _collect(inst, memtypes)
        if web is None:
            done.add(id(inst))
            continue
        done.update(id(v) for v in web.nodes)
        _split(web)
        changed = True
    return changed


__all__ = ["split_packed_floats"]
