"""IRBuilder: create instructions at an insertion point.

Example::

    b = IRBuilder.after(inst)
    y = b.fmul(inst, 2.0, name="twice")          # Python numbers become constants
    b.call_intrinsic("llvm.sin", [y])            # declares llvm.sin.f64 on demand

The insertion point is a block plus an anchor instruction (insert before it,
or at the block end); consecutive calls emit instructions in program order.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from . import types as T
from .block import BasicBlock
from .errors import IRError
from .function import Function
from .instructions import (
    Alloca, AtomicRMW, BinaryOp, Br, Call, Cast, CondBr, ExtractElement, ExtractValue,
    FCmp, Fence, Freeze, GetElementPtr, ICmp, InsertElement, InsertValue, Instruction,
    Invoke, Load, Phi, Resume, Ret, Select, ShuffleVector, Store, Switch, UnaryOp,
    Unreachable,
)
from .intrinsics import declare_intrinsic, intrinsic_type
from .values import (
    ConstantAggregate, ConstantFloat, ConstantInt, ConstantNull, ConstantPoison,
    ConstantUndef, ConstantZero, GlobalRef, Value,
)

__all__ = ["IRBuilder", "const_int", "const_float", "const_null", "const_zero", "undef",
           "poison", "const_vector", "const_array", "const_struct"]


# ---------------------------------------------------------------------------
# Constant helpers
# ---------------------------------------------------------------------------

def const_int(ty: T.Type, value: int) -> ConstantInt:
    """Integer constant (for ``i1`` use 0/1 or True/False)."""
    return ConstantInt(ty, int(value))


def const_float(ty: T.Type, value: float) -> ConstantFloat:
    """Floating constant of any float type (exactly printed)."""
    return ConstantFloat(ty, float(value))


def const_null(ty: T.Type = T.ptr) -> ConstantNull:
    """``null`` pointer."""
    return ConstantNull(ty)


def const_zero(ty: T.Type) -> Value:
    """Zero of any type (``0``, ``0.0``, ``null`` or ``zeroinitializer``)."""
    if isinstance(ty, T.IntType):
        return ConstantInt(ty, 0)
    if isinstance(ty, T.FloatType):
        return ConstantFloat(ty, 0.0)
    if isinstance(ty, T.PointerType):
        return ConstantNull(ty)
    return ConstantZero(ty)


def undef(ty: T.Type) -> ConstantUndef:
    """``undef`` of a type."""
    return ConstantUndef(ty)


def poison(ty: T.Type) -> ConstantPoison:
    """``poison`` of a type."""
    return ConstantPoison(ty)


def const_vector(elements: Sequence[Value]) -> ConstantAggregate:
    """``<T a, T b, ...>`` from scalar constants."""
    return ConstantAggregate(T.VectorType(len(elements), elements[0].type), elements)


def const_array(element_type: T.Type, elements: Sequence[Value]) -> ConstantAggregate:
    """``[T a, T b, ...]``."""
    return ConstantAggregate(T.ArrayType(len(elements), element_type), elements)


def const_struct(elements: Sequence[Value], packed: bool = False,
                 ty: T.Type | None = None) -> ConstantAggregate:
    """``{ T a, U b }`` (literal struct type unless ``ty`` is given)."""
    ty = ty or T.StructType(tuple(e.type for e in elements), packed)
    return ConstantAggregate(ty, elements)


def _coerce(value, ty: T.Type) -> Value:
    """Turn Python numbers into constants of ``ty``; pass Values through."""
    if isinstance(value, Value):
        return value
    if isinstance(value, bool) or isinstance(value, int):
        if ty.scalar_type.is_floating:
            return ConstantFloat(ty, float(value))
        return ConstantInt(ty, int(value))
    if isinstance(value, float):
        return ConstantFloat(ty, value)
    raise IRError(f"cannot use {value!r} as an operand of type {ty}")


def _type_of(*values) -> T.Type:
    for v in values:
        if isinstance(v, Value):
            return v.type
    raise IRError("cannot infer the operand type: pass at least one Value")


class IRBuilder:
    """Creates instructions at an insertion point.

    The insertion point is a block plus an *anchor*: new instructions go right
    before the anchor instruction (or at the end of the block when the anchor
    is None), so the point stays valid while other code edits the block.
    """

    def __init__(self, block: BasicBlock | None = None, anchor: Instruction | None = None):
        self.block: BasicBlock | None = block
        """Block receiving new instructions."""
        self.anchor: Instruction | None = anchor
        """Instruction before which new instructions are inserted (None = block end)."""
        self.debug_loc: str | None = None
        """If set (e.g. ``"!42"``), attached as ``!dbg`` to each new instruction."""
        self.default_flags: list[str] = []
        """Fast-math flags added to new floating-point operations."""

    # -- positioning ------------------------------------------------------------
    @classmethod
    def at_end(cls, block: BasicBlock) -> "IRBuilder":
        """Builder appending to ``block``."""
        return cls(block)

    @classmethod
    def at_start(cls, block: BasicBlock) -> "IRBuilder":
        """Builder inserting after the phis of ``block``."""
        b = cls()
        b.position_at_start(block)
        return b

    @classmethod
    def before(cls, inst: Instruction) -> "IRBuilder":
        """Builder inserting before ``inst``."""
        b = cls()
        b.position_before(inst)
        return b

    @classmethod
    def after(cls, inst: Instruction) -> "IRBuilder":
        """Builder inserting after ``inst``."""
        b = cls()
        b.position_after(inst)
        return b

    def position_at_end(self, block: BasicBlock) -> None:
        """Append subsequent instructions to ``block``."""
        self.block, self.anchor = block, None

    def position_at_start(self, block: BasicBlock) -> None:
        """Insert after the leading phis of ``block``."""
        self.block, self.anchor = block, block.first_non_phi

    def position_before(self, inst: Instruction) -> None:
        """Insert before ``inst``."""
        if inst.parent is None:
            raise IRError("instruction is not in a block")
        self.block, self.anchor = inst.parent, inst

    def position_after(self, inst: Instruction) -> None:
        """Insert after ``inst`` (after all phis if ``inst`` is a phi)."""
        if inst.parent is None:
            raise IRError("instruction is not in a block")
        if isinstance(inst, Phi):
            self.position_at_start(inst.parent)
        else:
            self.block, self.anchor = inst.parent, inst.next

    @property
    def function(self) -> Function | None:
        """Function of the insertion block."""
        return self.block.parent if self.block is not None else None

    @property
    def module(self):
        """Module of the insertion block."""
        fn = self.function
        return fn.module if fn is not None else None

    def insert(self, inst: Instruction, name: str | None = None) -> Instruction:
        """Insert a detached instruction at the insertion point and advance."""
        if self.block is None:
            raise IRError("builder has no insertion point")
        if name is not None:
            inst.name = name
        if self.debug_loc is not None and inst.get_metadata("dbg") is None:
            inst.set_metadata("dbg", self.debug_loc)
        if self.anchor is None:
            self.block.append(inst)
        else:
            if self.anchor.parent is not self.block:
                raise IRError("the builder's anchor instruction left its block")
            self.block.insert(self.anchor.index, inst)
        return inst

    # -- arithmetic -------------------------------------------------------------
    def binop(self, opcode: str, a, b, name: str | None = None,
              flags: Iterable[str] = ()) -> Instruction:
        """Any binary operator; Python numbers are converted to the other operand's type."""
        ty = _type_of(a, b)
        flags = list(flags)
        if opcode.startswith("f") and not flags:
            flags = list(self.default_flags)
        return self.insert(BinaryOp(opcode, _coerce(a, ty), _coerce(b, ty), flags=flags), name)

    def fadd(self, a, b, name=None, flags=()):
        """``fadd``."""
        return self.binop("fadd", a, b, name, flags)

    def fsub(self, a, b, name=None, flags=()):
        """``fsub``."""
        return self.binop("fsub", a, b, name, flags)

    def fmul(self, a, b, name=None, flags=()):
        """``fmul``."""
        return self.binop("fmul", a, b, name, flags)

    def fdiv(self, a, b, name=None, flags=()):
        """``fdiv``."""
        return self.binop("fdiv", a, b, name, flags)

    def frem(self, a, b, name=None, flags=()):
        """``frem``."""
        return self.binop("frem", a, b, name, flags)

    def fneg(self, a: Value, name=None, flags=()):
        """``fneg``."""
        flags = list(flags) or list(self.default_flags)
        return self.insert(UnaryOp("fneg", a, flags=flags), name)

    def add(self, a, b, name=None, flags=()):
        """``add``."""
        return self.binop("add", a, b, name, flags)

    def sub(self, a, b, name=None, flags=()):
        """``sub``."""
        return self.binop("sub", a, b, name, flags)

    def mul(self, a, b, name=None, flags=()):
        """``mul``."""
        return self.binop("mul", a, b, name, flags)

    def sdiv(self, a, b, name=None, flags=()):
        """``sdiv``."""
        return self.binop("sdiv", a, b, name, flags)

    def udiv(self, a, b, name=None, flags=()):
        """``udiv``."""
        return self.binop("udiv", a, b, name, flags)

    def srem(self, a, b, name=None, flags=()):
        """``srem``."""
        return self.binop("srem", a, b, name, flags)

    def urem(self, a, b, name=None, flags=()):
        """``urem``."""
        return self.binop("urem", a, b, name, flags)

    def shl(self, a, b, name=None, flags=()):
        """``shl``."""
        return self.binop("shl", a, b, name, flags)

    def lshr(self, a, b, name=None, flags=()):
        """``lshr``."""
        return self.binop("lshr", a, b, name, flags)

    def ashr(self, a, b, name=None, flags=()):
        """``ashr``."""
        return self.binop("ashr", a, b, name, flags)

    def and_(self, a, b, name=None):
        """``and``."""
        return self.binop("and", a, b, name)

    def or_(self, a, b, name=None, flags=()):
        """``or``."""
        return self.binop("or", a, b, name, flags)

    def xor(self, a, b, name=None):
        """``xor``."""
        return self.binop("xor", a, b, name)

    # -- comparisons / select -----------------------------------------------------
    def icmp(self, predicate: str, a, b, name=None, flags=()):
        """``icmp <pred>``."""
        ty = _type_of(a, b)
        return self.insert(ICmp(predicate, _coerce(a, ty), _coerce(b, ty), flags=flags), name)

    def fcmp(self, predicate: str, a, b, name=None, flags=()):
        """``fcmp <pred>``."""
        ty = _type_of(a, b)
        return self.insert(FCmp(predicate, _coerce(a, ty), _coerce(b, ty), flags=flags), name)

    def select(self, cond: Value, a, b, name=None, flags=()):
        """``select``."""
        ty = _type_of(a, b)
        return self.insert(Select(cond, _coerce(a, ty), _coerce(b, ty), flags=flags), name)

    def freeze(self, v: Value, name=None):
        """``freeze``."""
        return self.insert(Freeze(v), name)

    def phi(self, ty: T.Type, incoming: Iterable[tuple[Value, BasicBlock]] = (), name=None,
            flags=()) -> Phi:
        """``phi`` (always placed among the leading phis of the block)."""
        phi = Phi(ty, incoming, flags=flags)
        if name is not None:
            phi.name = name
        if self.debug_loc is not None:
            phi.set_metadata("dbg", self.debug_loc)
        blk = self.block
        if blk is None:
            raise IRError("builder has no insertion point")
        blk.insert(len(blk.phis()), phi)
        return phi

    # -- terminators ------------------------------------------------------------
    def br(self, dest: BasicBlock) -> Instruction:
        """``br label %dest``."""
        return self.insert(Br(dest))

    def cond_br(self, cond: Value, true_dest: BasicBlock, false_dest: BasicBlock) -> Instruction:
        """``br i1 %c, label %t, label %f``."""
        return self.insert(CondBr(cond, true_dest, false_dest))

    def switch(self, value: Value, default: BasicBlock,
               cases: Iterable[tuple[int | Value, BasicBlock]] = ()) -> Switch:
        """``switch``; integer case values are converted to the switch type."""
        sw = Switch(value, default, [(_coerce(c, value.type), b) for c, b in cases])
        return self.insert(sw)

    def ret(self, value: Value | None = None) -> Instruction:
        """``ret`` (``ret void`` without a value)."""
        return self.insert(Ret(value))

    def ret_void(self) -> Instruction:
        """``ret void``."""
        return self.insert(Ret())

    def unreachable(self) -> Instruction:
        """``unreachable``."""
        return self.insert(Unreachable())

    def resume(self, value: Value) -> Instruction:
        """``resume``."""
        return self.insert(Resume(value))

    # -- memory -----------------------------------------------------------------
    def alloca(self, ty: T.Type, count: Value | int | None = None, align: int | None = None,
               name=None, in_entry: bool = False) -> Instruction:
        """``alloca``; with ``in_entry=True`` it goes to the top of the entry block."""
        if isinstance(count, int):
            count = ConstantInt(T.i64, count)
        inst = Alloca(ty, count, align)
        if in_entry:
            entry = self.function.entry_block
            pos = len(entry.phis())
            if isinstance(count, Instruction):  # a computed count: after the other allocas, as it always went
                while pos < len(entry.instructions) and isinstance(entry.instructions[pos], Alloca):
                    pos += 1
            if name is not None:
                inst.name = name
            entry.insert(pos, inst)
            return inst
        return self.insert(inst, name)

    def load(self, ty: T.Type, pointer: Value, align: int | None = None, name=None,
             volatile: bool = False) -> Instruction:
        """``load``."""
        return self.insert(Load(ty, pointer, align, volatile), name)

    def store(self, value: Value, pointer: Value, align: int | None = None,
              volatile: bool = False) -> Instruction:
        """``store``."""
        return self.insert(Store(value, pointer, align, volatile))

    def gep(self, source_type: T.Type, pointer: Value, indices: Sequence[Value | int],
            name=None, inbounds: bool = False, flags: Iterable[str] = ()) -> Instruction:
        """``getelementptr``; integer indices become ``i64`` (``i32`` inside structs)."""
        idx_values = []
        ty = source_type
        for pos, i in enumerate(indices):
            if isinstance(i, Value):
                idx_values.append(i)
            else:
                in_struct = pos > 0 and isinstance(ty, (T.StructType, T.NamedStructType))
                idx_values.append(ConstantInt(T.i32 if in_struct else T.i64, i))
            if pos > 0:
                if isinstance(ty, (T.StructType, T.NamedStructType)):
                    ty = ty.elements[idx_values[-1].value]
                elif isinstance(ty, (T.ArrayType, T.VectorType)):
                    ty = ty.element
        flags = (["inbounds"] if inbounds else []) + list(flags)
        return self.insert(GetElementPtr(source_type, pointer, idx_values, flags=flags), name)

    def struct_gep(self, struct_type: T.Type, pointer: Value, field: int, name=None) -> Instruction:
        """``getelementptr inbounds %S, ptr %p, i32 0, i32 field``."""
        return self.gep(struct_type, pointer, [ConstantInt(T.i32, 0), ConstantInt(T.i32, field)],
                        name, inbounds=True)

    def fence(self, ordering: str = "seq_cst") -> Instruction:
        """``fence``."""
        return self.insert(Fence(ordering))

    def atomic_rmw(self, operation: str, pointer: Value, value: Value,
                   ordering: str = "monotonic", align: int | None = None, name=None):
        """``atomicrmw`` (e.g. ``fadd`` for accumulating adjoints)."""
        return self.insert(AtomicRMW(operation, pointer, value, ordering, align), name)

    # -- casts ------------------------------------------------------------------
    def cast(self, opcode: str, value: Value, ty: T.Type, name=None, flags=()) -> Instruction:
        """Any cast opcode."""
        return self.insert(Cast(opcode, value, ty, flags=flags), name)

    def trunc(self, v, ty, name=None):
        """``trunc``."""
        return self.cast("trunc", v, ty, name)

    def zext(self, v, ty, name=None):
        """``zext``."""
        return self.cast("zext", v, ty, name)

    def sext(self, v, ty, name=None):
        """``sext``."""
        return self.cast("sext", v, ty, name)

    def fptrunc(self, v, ty, name=None):
        """``fptrunc``."""
        return self.cast("fptrunc", v, ty, name)

    def fpext(self, v, ty, name=None):
        """``fpext``."""
        return self.cast("fpext", v, ty, name)

    def fptosi(self, v, ty, name=None):
        """``fptosi``."""
        return self.cast("fptosi", v, ty, name)

    def fptoui(self, v, ty, name=None):
        """``fptoui``."""
        return self.cast("fptoui", v, ty, name)

    def sitofp(self, v, ty, name=None):
        """``sitofp``."""
        return self.cast("sitofp", v, ty, name)

    def uitofp(self, v, ty, name=None):
        """``uitofp``."""
        return self.cast("uitofp", v, ty, name)

    def ptrtoint(self, v, ty, name=None):
        """``ptrtoint``."""
        return self.cast("ptrtoint", v, ty, name)

    def inttoptr(self, v, ty=T.ptr, name=None):
        """``inttoptr``."""
        return self.cast("inttoptr", v, ty, name)

    def bitcast(self, v, ty, name=None):
        """``bitcast``."""
        return self.cast("bitcast", v, ty, name)

    def addrspacecast(self, v, ty, name=None):
        """``addrspacecast``."""
        return self.cast("addrspacecast", v, ty, name)

    # -- aggregates / vectors ---------------------------------------------------
    def extract_value(self, agg: Value, indices: int | Sequence[int], name=None):
        """``extractvalue``."""
        if isinstance(indices, int):
            indices = [indices]
        return self.insert(ExtractValue(agg, indices), name)

    def insert_value(self, agg: Value, value: Value, indices: int | Sequence[int], name=None):
        """``insertvalue``."""
        if isinstance(indices, int):
            indices = [indices]
        return self.insert(InsertValue(agg, value, indices), name)

    def extract_element(self, vec: Value, index: Value | int, name=None):
        """``extractelement`` (integer index -> ``i64``)."""
        return self.insert(ExtractElement(vec, _coerce(index, T.i64)), name)

    def insert_element(self, vec: Value, elem: Value, index: Value | int, name=None):
        """``insertelement`` (integer index -> ``i64``)."""
        return self.insert(InsertElement(vec, elem, _coerce(index, T.i64)), name)

    def shuffle_vector(self, a: Value, b: Value, mask: Sequence[int] | Value, name=None):
        """``shufflevector``; ``mask`` may be a list of ints (-1 = poison)."""
        if not isinstance(mask, Value):
            elems = [ConstantPoison(T.i32) if m < 0 else ConstantInt(T.i32, m) for m in mask]
            mask = ConstantAggregate(T.VectorType(len(elems), T.i32), elems)
        return self.insert(ShuffleVector(a, b, mask), name)

    # -- calls ------------------------------------------------------------------
    def call(self, callee: Function | str | Value, args: Sequence = (), name=None,
             function_type: T.FunctionType | None = None, tail: str | None = None,
             flags: Iterable[str] = (), fn_attrs: Iterable[str] = (),
             arg_attrs: Sequence[Sequence[str]] | None = None) -> Call:
        """Call a function given as :class:`Function`, its name, or a pointer value."""
        if isinstance(callee, str):
            if self.module is None:
                raise IRError("builder is not inside a module")
            callee = self.module.get_function(callee)
        if isinstance(callee, Function):
            function_type = function_type or callee.function_type
            callee_value: Value = callee.ref if callee.module else GlobalRef(callee.name)
        else:
            callee_value = callee
            if function_type is None:
                target = callee.resolve() if isinstance(callee, GlobalRef) else None
                if isinstance(target, Function):
                    function_type = target.function_type
                else:
                    raise IRError("indirect calls need an explicit function_type")
        params = function_type.params
        args = [_coerce(a, params[i]) if i < len(params) else a for i, a in enumerate(args)]
        if len(args) < len(params) or (len(args) > len(params) and not function_type.varargs):
            raise IRError(f"call expects {len(params)} arguments, got {len(args)}")
        for i, (a, p) in enumerate(zip(args, params)):
            if a.type != p and p != T.metadata:
                raise IRError(f"argument {i} has type {a.type}, expected {p}")
        inst = Call(callee_value, args, function_type, tail=tail, flags=flags,
                    fn_attrs=fn_attrs, arg_attrs=arg_attrs)
        return self.insert(inst, name)

    def invoke(self, callee: Function | str | Value, args: Sequence[Value],
               normal_dest: BasicBlock, unwind_dest: BasicBlock, name=None,
               function_type: T.FunctionType | None = None) -> Invoke:
        """``invoke`` (terminator)."""
        if isinstance(callee, str):
            callee = self.module.get_function(callee)
        if isinstance(callee, Function):
            function_type = function_type or callee.function_type
            callee = callee.ref
        if function_type is None:
            raise IRError("invoke of a pointer needs function_type")
        return self.insert(Invoke(callee, list(args), function_type, normal_dest, unwind_dest),
                           name)

    def call_intrinsic(self, base: str, args: Sequence, overload_types: Sequence[T.Type] | None = None,
                       function_type: T.FunctionType | None = None, name=None,
                       flags: Iterable[str] = ()) -> Call:
        """Call intrinsic ``base`` (``"llvm.sin"``), declaring it in the module on demand.

        Overload types default to the type of the first argument (right for
        the math intrinsics).  Memory intrinsics take
        ``overload_types=[ptr, i64]`` (memset) or ``[ptr, ptr, i64]`` (memcpy).
        """
        if self.module is None:
            raise IRError("builder is not inside a module")
        if overload_types is None:
            overload_types = [_type_of(*args)]
        if function_type is None:
            function_type = intrinsic_type(base, list(overload_types))
        fn = declare_intrinsic(self.module, base, overload_types, function_type)
        flags = list(flags)
        if not flags and fn.function_type.ret.is_fp_or_fp_vector:
            flags = list(self.default_flags)
        return self.call(fn, args, name=name, flags=flags)

    def memset(self, dest: Value, value: Value | int, size: Value | int,
               volatile: bool = False) -> Call:
        """``llvm.memset.p0.i64(dest, i8 value, i64 size, i1 volatile)``."""
        size = _coerce(size, T.i64)
        return self.call_intrinsic("llvm.memset", [dest, _coerce(value, T.i8), size,
                                                   ConstantInt(T.i1, int(volatile))],
                                   overload_types=[dest.type, size.type])

    def memcpy(self, dest: Value, src: Value, size: Value | int, volatile: bool = False) -> Call:
        """``llvm.memcpy.p0.p0.i64(dest, src, i64 size, i1 volatile)``."""
        size = _coerce(size, T.i64)
        return self.call_intrinsic("llvm.memcpy", [dest, src, size,
                                                   ConstantInt(T.i1, int(volatile))],
                                   overload_types=[dest.type, src.type, size.type])

    # -- constants ----------------------------------------------------------------
    const_int = staticmethod(const_int)
    const_float = staticmethod(const_float)
    const_null = staticmethod(const_null)
    const_zero = staticmethod(const_zero)
    undef = staticmethod(undef)
    poison = staticmethod(poison)
