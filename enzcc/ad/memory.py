"""Type analysis for memory: which bytes hold floating-point data.

LLVM IR memory is untyped: ``memcpy`` copies bytes, and optimized code may move a ``double`` through an
``i64``. The reverse sweep must know whether copied bytes are floats (their adjoints move back from the
destination's shadow to the source's) or pointers (the shadow pointers are copied forward) or plain integers.
The type of a memory object is found from how the function accesses it (loads, stores and the pointers derived
from the same base object), and from TBAA type tags that clang and flang attach.
"""

from __future__ import annotations

import re

from enzcc.ir import types as T
from enzcc.ir.instructions import Call, Cast, GetElementPtr, Load, Store
from enzcc.ir.values import Value

_TBAA_FLOATS = {"double": T.FloatType("double"), "float": T.FloatType("float"),
                "long double": T.FloatType("x86_fp80")}


def base_object(p: Value) -> Value:
    """Strip address arithmetic down to the object a pointer points into."""
    seen = 0
    while seen < 64:
        seen += 1
        if isinstance(p, GetElementPtr):
            p = p.pointer
        elif isinstance(p, Cast) and p.opcode in ("bitcast", "addrspacecast"):
            p = p.value
        else:
            return p
    return p


class MemoryTypes:
    """Access-type facts about the memory objects of one function."""

    def __init__(self, fn):
        self.fn = fn
        self._types: dict[int, set] = {}
        for inst in fn.instructions():
            if isinstance(inst, Load):
                self._note(inst.pointer, inst.type)
            elif isinstance(inst, Store):
                self._note(inst.pointer, inst.value.type)

    def _note(self, p: Value, ty: T.Type) -> None:
        self._types.setdefault(id(base_object(p)), set()).add(_scalar_kind(ty))

    def kinds(self, p: Value) -> set:
        return self._types.get(id(base_object(p)), set())

    def reallocated_kind(self, call: Call):
        """What the memory ``realloc`` moves holds: the one float type, ``T.ptr`` or an IntType found on
        the old and the new pointer and everything they flow through (phis, selects, address arithmetic,
        further reallocs), or None when that is unknown or mixed."""
        def forwards(v) -> bool:
            return getattr(v, "opcode", None) in ("phi", "select") or \
                (isinstance(v, Call) and v.callee_name == "realloc")

        seen, stack, kinds = set(), [call], set()
        while stack:
            p = stack.pop()
            if id(p) in seen:
                continue
            seen.add(id(p))
            kinds |= self.kinds(p)  # accesses through address arithmetic count for their base object
            stack += [u.user for u in getattr(p, "uses", []) if forwards(u.user)
                      and (not isinstance(u.user, Call) or u.index == 1)]
            if isinstance(p, Call):
                stack.append(base_object(p.args[0]))
            elif forwards(p):
                stack += [base_object(op) for op in p.operands if isinstance(op.type, T.PointerType)]
        floats = {k for k in kinds if isinstance(k, T.FloatType)}
        if len(floats) == 1 and len(kinds) == 1:
            return floats.pop()
        if kinds and not floats and all(isinstance(k, (T.IntType, T.PointerType)) for k in kinds):
            return T.ptr if T.ptr in kinds else next(iter(kinds))
        return None

    def float_of_width(self, p: Value, access: T.Type):
        """The floating-point type an integer access through ``p`` may really be moving (optimizers copy a
        ``double`` as an ``i64``), or None. Integers in the same object are harmless to treat so: their
        shadow bytes stay zero."""
        if not isinstance(access, T.IntType):
            return None
        for k in self.kinds(p):
            if isinstance(k, T.FloatType) and k.bits == access.bits:
                return k
        return None

    def copy_kind(self, call: Call):
        """What a memcpy/memmove copies: a FloatType, ``T.ptr``, an IntType, or None when unknown."""
        kinds = self.kinds(call.args[0]) | self.kinds(call.args[1])
        floats = {k for k in kinds if isinstance(k, T.FloatType)}
        if len(floats) == 1 and not any(isinstance(k, T.PointerType) for k in kinds):
            return floats.pop()
        if floats:
            return None  # mixed: not supported precisely
        tb = _tbaa_struct_kind(call)
        if tb is not None:
            return tb
        if kinds and all(isinstance(k, T.PointerType) for k in kinds):
            return T.ptr
        if kinds and all(isinstance(k, T.IntType) for k in kinds):
            return kinds.pop()
        return None


def _scalar_kind(ty: T.Type):
    while isinstance(ty, (T.VectorType, T.ArrayType)):
        ty = ty.element
    return ty


def _tbaa_struct_kind(call: Call):
    """From ``!tbaa.struct`` on a memcpy: the single float type all fields have, if any."""
    ref = call.get_metadata("tbaa.struct")
    module = call.module
    if not ref or module is None:
        return None
    node = _md(module, ref)
    if node is None:
        return None
    names = set()
    for tag in re.findall(r"!(\d+)", node):
        names.add(_tbaa_type_name(module, module.metadata.get(int(tag))))
    if len(names) == 1:
        name = names.pop()
        if name in _TBAA_FLOATS:
            return _TBAA_FLOATS[name]
        if name == "any pointer" or (name and name.startswith("p1 ")):
            return T.ptr
    return None


def _md(module, ref: str):
    m = re.fullmatch(r"!(\d+)", ref.strip())
    return module.metadata.get(int(m.group(1))) if m else None


def _tbaa_type_name(module, tag_text: str | None, depth: int = 0) -> str | None:
    """Name of the base type of a TBAA access tag ``!{!base, !access, i64 off}`` or type node."""
    if tag_text is None or depth > 8:
        return None
    m = re.match(r'\s*!\{!"([^"]*)"', tag_text)
    if m:
        return m.group(1)
    refs = re.findall(r"!(\d+)", tag_text)
    if len(refs) >= 2:  # access tag: the access type is the second node
        return _tbaa_type_name(module, module.metadata.get(int(refs[1])), depth + 1)
    return None


__all__ = ["MemoryTypes", "base_object"]
