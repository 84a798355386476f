"""Types, type parsing, and DataLayout checked against LLVM (via llvmlite)."""

from __future__ import annotations

import llvmlite.binding as llvm
import pytest

from enzcc.ir import (
    NVPTX64_LAYOUT, X86_64_LINUX_LAYOUT, DataLayout, Module, parse_module, parse_type,
    types as T,
)
from enzcc.ir.intrinsics import intrinsic_name, mangle_type

SPELLINGS = [
    "i1", "i7", "i128", "half", "bfloat", "float", "double", "x86_fp80", "fp128", "ppc_fp128",
    "ptr", "ptr addrspace(3)", "void", "label", "metadata", "token", "[4 x i32]",
    "[2 x [3 x double]]", "<4 x float>", "<vscale x 2 x double>", "<2 x ptr>", "{}",
    "{ i32, ptr }", "<{ i8, i32 }>", "{ { double, double }, [2 x <2 x i64>] }",
    'target("spirv.Image", void, 1)',
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_type_print_roundtrip(spelling):
    assert str(parse_type(spelling)) == spelling


def test_type_equality_and_queries():
    assert T.IntType(32) == T.i32 and hash(T.IntType(32)) == hash(T.i32)
    assert T.StructType([T.i32, T.f64]) == T.StructType((T.i32, T.f64))
    assert T.StructType((T.i32,), packed=True) != T.StructType((T.i32,))
    assert T.VectorType(4, T.f32) != T.VectorType(4, T.f32, scalable=True)
    assert T.f64.is_floating and not T.i64.is_floating
    assert T.is_floating(T.VectorType(2, T.f64)) and not T.is_floating(T.ptr)
    assert T.VectorType(2, T.f64).scalar_type == T.f64
    assert T.FunctionType(T.i32, (T.ptr,), varargs=True).__str__() == "i32 (ptr, ...)"
    with pytest.raises(ValueError):
        T.FloatType("quad")
    a, b = T.NamedStructType("s"), T.NamedStructType("s", T.StructType((T.i8,)))
    assert a == b and len({a, b}) == 1
    assert str(T.NamedStructType("a b")) == '%"a b"'
    assert T.NamedStructType("a b").definition() == '%"a b" = type opaque'


def test_named_types_in_module():
    mod = parse_module("%b = type { %a, ptr }\n%a = type { i32, [2 x %c] }\n%c = type opaque\n")
    a, b, c = (mod.named_types[n] for n in "abc")
    assert b.elements == (a, T.ptr)
    assert a.elements[1] == T.ArrayType(2, c) and c.is_opaque
    assert parse_type("{ %a, %b }", mod) == T.StructType((a, b))
    new = mod.add_named_type("d", T.StructType((T.f64, a)))
    assert "%d = type { double, %a }" in str(mod)
    assert new.body.elements[1] is a


def test_mangling():
    assert mangle_type(T.f64) == "f64"
    assert mangle_type(T.VectorType(2, T.f64)) == "v2f64"
    assert mangle_type(T.VectorType(4, T.f32, True)) == "nxv4f32"
    assert mangle_type(T.PointerType(1)) == "p1"
    assert intrinsic_name("llvm.memcpy", [T.ptr, T.ptr, T.i64]) == "llvm.memcpy.p0.p0.i64"
    assert intrinsic_name("sin", [T.f32]) == "llvm.sin.f32"


LAYOUT_TYPES = [
    "i1", "i8", "i16", "i24", "i32", "i48", "i64", "i128", "i200", "half", "bfloat", "float",
    "double", "x86_fp80", "fp128", "ptr", "ptr addrspace(3)", "ptr addrspace(270)",
    "[3 x i16]", "<3 x float>", "<4 x double>", "<8 x i1>", "<2 x i64>", "<16 x i8>",
    "{ i8, double }", "{ i8, x86_fp80, <3 x float> }", "<{ i8, double }>",
    "{ i32, { i8, i64 }, [3 x i8] }", "{ double, float, [4 x i32] }", "{ i8, i128 }",
    "{ [0 x i32], i8 }", "{}", "{ ptr addrspace(3), i8 }", "%S", "{ %S, i8 }",
]


@pytest.mark.parametrize("layout", [X86_64_LINUX_LAYOUT, NVPTX64_LAYOUT, ""],
                         ids=["x86_64", "nvptx64", "default"])
def test_datalayout_matches_llvm(layout):
    decls = "\n".join(f"@g{i} = external global {t}" for i, t in enumerate(LAYOUT_TYPES))
    header = "%S = type { i16, double, [2 x i8] }\n"
    text = header + decls
    lmod = llvm.parse_assembly(f'target datalayout = "{layout}"\n' + text, llvm.create_context())
    td = llvm.create_target_data(layout)
    ours = DataLayout.parse(layout)
    mod = parse_module(header)
    for i, spelling in enumerate(LAYOUT_TYPES):
        lty = lmod.get_global_variable(f"g{i}").global_value_type
        ty = parse_type(spelling, mod)
        assert ours.alloc_size(ty) == td.get_abi_size(lty), spelling
        assert ours.abi_alignment(ty) == td.get_abi_alignment(lty), spelling
        if isinstance(ty, (T.StructType, T.NamedStructType)):
            for k in range(len(ty.elements)):
                assert ours.field_offset(ty, k) == td.get_element_offset(lty, k), (spelling, k)


def test_datalayout_helpers():
    dl = DataLayout.parse(X86_64_LINUX_LAYOUT)
    s = T.StructType((T.f64, T.f32, T.ArrayType(4, T.i32)))
    layout = dl.struct_layout(s)
    assert layout.offsets == [0, 8, 12] and layout.size == 32 and layout.alignment == 8
    assert layout.element_containing_offset(13) == 2
    assert dl.store_size(T.x86_fp80) == 10 and dl.alloc_size(T.x86_fp80) == 16
    assert dl.pointer_size(270) == 4 and dl.pointer_size() == 8
    assert dl.scalar_leaves(s) == [(0, T.f64), (8, T.f32), (12, T.i32), (16, T.i32),
                                   (20, T.i32), (24, T.i32)]
    assert dl.scalar_leaves(T.VectorType(2, T.f32)) == [(0, T.f32), (4, T.f32)]
    assert Module(datalayout=NVPTX64_LAYOUT).data_layout.abi_alignment(T.i128) == 16
