"""Mutable model of LLVM 22 textual IR: parse, transform, print.

Typical use::

    from enzcc.ir import parse_module, IRBuilder, DominatorTree, LoopInfo

    mod = parse_module(text)                 # function bodies stay lazy
    fn = mod.get_function("f")
    for inst in fn.instructions():           # parses the body on first access
        ...
    text = str(mod)                          # LLVM 22 text (llvmlite-parsable)
"""

from . import types
from .block import BasicBlock
from .builder import (
    IRBuilder, const_array, const_float, const_int, const_null, const_struct, const_vector,
    const_zero, poison, undef,
)
from .cfg import (
    DominatorTree, Loop, LoopInfo, PostDominatorTree, post_order, predecessors,
    reverse_post_order, successors,
)
from .datalayout import NVPTX64_LAYOUT, X86_64_LINUX_LAYOUT, DataLayout, StructLayout
from .errors import IRError, IRParseError
from .function import Function
from .instructions import (
    Alloca, AtomicRMW, BinaryOp, Br, Call, Cast, Cmp, CmpXchg, CondBr, DebugRecord,
    ExtractElement, ExtractValue, FCmp, Fence, Freeze, GetElementPtr, ICmp, IndirectBr,
    InsertElement, InsertValue, Instruction, Invoke, LandingPad, Load, Phi, Resume, Ret,
    Select, ShuffleVector, Store, Switch, UnaryOp, Unreachable, VAArg,
)
from .intrinsics import declare_intrinsic, intrinsic_name, mangle_type
from .module import GlobalVariable, Module
from .parser import parse_function_body, parse_module, parse_type
from .printer import SlotTracker, format_function, format_instruction, format_module
from .types import (
    ArrayType, FloatType, FunctionType, IntType, LabelType, MetadataType, NamedStructType,
    PointerType, StructType, TargetExtType, TokenType, Type, VectorType, VoidType, is_floating,
)
from .values import (
    Argument, Constant, ConstantAggregate, ConstantExpr, ConstantFloat, ConstantInt,
    ConstantNone, ConstantNull, ConstantPoison, ConstantSplat, ConstantString, ConstantUndef,
    ConstantZero, GlobalRef, InlineAsm, MetadataValue, OpaqueConstant, Use, Value,
)

__all__ = [
    "types", "BasicBlock", "IRBuilder", "const_array", "const_float", "const_int",
    "const_null", "const_struct", "const_vector", "const_zero", "poison", "undef",
    "DominatorTree", "Loop", "LoopInfo", "PostDominatorTree", "post_order", "predecessors",
    "reverse_post_order", "successors", "NVPTX64_LAYOUT", "X86_64_LINUX_LAYOUT", "DataLayout",
    "StructLayout", "IRError", "IRParseError", "Function", "Alloca", "AtomicRMW", "BinaryOp",
    "Br", "Call", "Cast", "Cmp", "CmpXchg", "CondBr", "DebugRecord", "ExtractElement",
    "ExtractValue", "FCmp", "Fence", "Freeze", "GetElementPtr", "ICmp", "IndirectBr",
    "InsertElement", "InsertValue", "Instruction", "Invoke", "LandingPad", "Load", "Phi",
    "Resume", "Ret", "Select", "ShuffleVector", "Store", "Switch", "UnaryOp", "Unreachable",
    "VAArg", "declare_intrinsic", "intrinsic_name", "mangle_type", "GlobalVariable", "Module",
    "parse_function_body", "parse_module", "parse_type", "SlotTracker", "format_function",
    "format_instruction", "format_module", "ArrayType", "FloatType", "FunctionType", "IntType",
    "LabelType", "MetadataType", "NamedStructType", "PointerType", "StructType",
    "TargetExtType", "TokenType", "Type", "VectorType", "VoidType", "is_floating", "Argument",
    "Constant", "ConstantAggregate", "ConstantExpr", "ConstantFloat", "ConstantInt",
    "ConstantNone", "ConstantNull", "ConstantPoison", "ConstantSplat", "ConstantString",
    "ConstantUndef", "ConstantZero", "GlobalRef", "InlineAsm", "MetadataValue",
    "OpaqueConstant", "Use", "Value",
]
