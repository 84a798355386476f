"""Floats packed into a wider integer (SROA's form of a small struct of floats): the web of packed integers
is split into one integer per field, which becomes a float again, so the derivative follows each field."""

import ctypes

import pytest

from enzcc.ad import differentiate_text
from enzcc.ad.errors import ADError
from enzcc.ad.memory import MemoryTypes
from enzcc.ad.packed import split_packed_floats
from enzcc.ir.parser import parse_module
from enzcc_testing import jit
from tests.ad.test_transform_ir import HEADER

# {float lo; float hi;} kept in an i64: built with zext/shl/or, one field replaced through an `and` mask in a
# branch, merged in a phi, taken apart with trunc and lshr
PACKED = """
define float @f(ptr %x, i32 %n) {
entry:
  %a = load float, ptr %x, align 4
  %p1 = getelementptr i8, ptr %x, i64 4
  %b = load float, ptr %p1, align 4
  %ai = bitcast float %a to i32
  %bi = bitcast float %b to i32
  %lo = zext i32 %ai to i64
  %hz = zext i32 %bi to i64
  %hi = shl i64 %hz, 32
  %pk = or i64 %hi, %lo
  %c = icmp sgt i32 %n, 0
  br i1 %c, label %square, label %join
square:
  %m = and i64 %pk, -4294967296
  %sq = fmul float %a, %a
  %sqi = bitcast float %sq to i32
  %sqz = zext i32 %sqi to i64
  %pk2 = or i64 %m, %sqz
  br label %join
join:
  %v = phi i64 [ %pk, %entry ], [ %pk2, %square ]
  %l = trunc i64 %v to i32
  %h1 = lshr i64 %v, 32
  %h = trunc i64 %h1 to i32
  %lf = bitcast i32 %l to float
  %hf = bitcast i32 %h to float
  %r = fmul float %lf, %hf
  ret float %r
}
define void @grad(ptr %x, ptr %dx, i32 %n) {
  call void (ptr, ...) @__enzyme_autodiff(ptr @f, ptr %x, ptr %dx, i32 %n)
  ret void
}
"""

# two floats copied as one i64 through a phi (memcpy of 8 bytes, promoted out of a loop)
COPY = """
define void @cp(ptr %x, ptr %out, i32 %n) {
entry:
  %c = icmp sgt i32 %n, 0
  br i1 %c, label %ld, label %join
ld:
  %w = load i64, ptr %x, align 4
  br label %join
join:
  %v = phi i64 [ %w, %ld ], [ 0, %entry ]
  store i64 %v, ptr %out, align 4
  %o = load float, ptr %out, align 4
  %o2 = fmul float %o, %o
  %q = getelementptr i8, ptr %out, i64 8
  store float %o2, ptr %q, align 4
  ret void
}
define void @grad(ptr %x, ptr %dx, ptr %out, ptr %dout, i32 %n) {
  call void (ptr, ...) @__enzyme_autodiff(ptr @cp, ptr %x, ptr %dx, ptr %out, ptr %dout, i32 %n)
  ret void
}
"""

# the same with a select against a constant pair of floats (2.0f, 2.0f) written as one i64
COPY_SELECT = COPY.replace("""  br i1 %c, label %ld, label %join
ld:
  %w = load i64, ptr %x, align 4
  br label %join
join:
  %v = phi i64 [ %w, %ld ], [ 0, %entry ]""", """  %w = load i64, ptr %x, align 4
  %v = select i1 %c, i64 %w, i64 4611686019501129728""")


def _split(text: str, name: str):
    fn = parse_module(HEADER + text).get_function(name).parse()
    return fn, split_packed_floats(fn, MemoryTypes(fn))


def test_packed_web_is_split_into_fields():
    fn, changed = _split(PACKED, "f")
    assert changed
    ops = {i.opcode for i in fn.instructions()}
    assert not {"shl", "lshr", "trunc", "zext", "and"} & ops
    assert all(str(i.type) != "i64" for i in fn.instructions() if i.opcode in ("phi", "or"))


@pytest.mark.parametrize("n", [0, 1])
def test_gradient_through_packed_fields(n):
    out, _ = differentiate_text(HEADER + PACKED)
    engine = jit(out)  # keeps the code alive
    grad = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
        engine.get_function_address("grad"))
    a, b = 1.5, -0.75
    x = (ctypes.c_float * 2)(a, b)
    dx = (ctypes.c_float * 2)(0.0, 0.0)
    grad(ctypes.addressof(x), ctypes.addressof(dx), n)
    expect = (2 * a * b, a * a) if n > 0 else (b, a)  # r = a*a*b, or r = a*b
    assert list(dx) == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize("n", [0, 1])
@pytest.mark.parametrize("text", [COPY, COPY_SELECT], ids=["phi", "select"])
def test_floats_copied_as_one_integer_through_a_phi(n, text):
    fn, changed = _split(text, "cp")
    assert changed
    out, _ = differentiate_text(HEADER + text)
    engine = jit(out)
    grad = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4, ctypes.c_int32)(engine.get_function_address("grad"))
    x = (ctypes.c_float * 2)(1.5, 2.5)
    dx = (ctypes.c_float * 2)(0.0, 0.0)
    o = (ctypes.c_float * 3)(0.0, 0.0, 0.0)
    do = (ctypes.c_float * 3)(1.0, 2.0, 3.0)
    grad(*(ctypes.addressof(v) for v in (x, dx, o, do)), n)
    if n > 0:  # out = (x0, x1, x0^2)
        assert list(o) == pytest.approx([1.5, 2.5, 2.25])
        assert list(dx) == pytest.approx([1.0 + 3.0 * 2 * 1.5, 2.0])
    else:
        assert list(dx) == [0.0, 0.0]
        if text is COPY_SELECT:
            assert list(o) == [2.0, 2.0, 4.0]


def test_integer_webs_without_floats_are_left_alone():
    fn, changed = _split("""
define i32 @hi_lo(ptr %p) {
  %w = load i64, ptr %p, align 8
  %h1 = lshr i64 %w, 32
  %h = trunc i64 %h1 to i32
  %l = trunc i64 %w to i32
  %s = add i32 %h, %l
  ret i32 %s
}
""", "hi_lo")
    assert not changed


def test_mask_inside_a_field_is_not_split_and_is_refused():
    text = """
define float @f(ptr %x) {
  %w = load i64, ptr %x, align 4
  %m = and i64 %w, 4294901760
  %l = trunc i64 %m to i32
  %lf = bitcast i32 %l to float
  %a = load float, ptr %x, align 4
  %r = fmul float %lf, %a
  ret float %r
}
define void @grad(ptr %x, ptr %dx) {
  call void (ptr, ...) @__enzyme_autodiff(ptr @f, ptr %x, ptr %dx)
  ret void
}
"""
    _, changed = _split(text, "f")
    assert not changed
    with pytest.raises(ADError, match="rebuilt here from integer bits"):
        differentiate_text(HEADER + text)


def test_integer_bits_stored_after_arithmetic_are_refused():
    text = """
define void @f(ptr %x, ptr %out) {
  %a = load float, ptr %x, align 4
  %w = load i32, ptr %x, align 4
  %m = xor i32 %w, -2147483648
  store i32 %m, ptr %out, align 4
  %o = load float, ptr %out, align 4
  %r = fmul float %o, %a
  store float %r, ptr %x, align 4
  ret void
}
define void @grad(ptr %x, ptr %dx, ptr %out, ptr %dout) {
  call void (ptr, ...) @__enzyme_autodiff(ptr @f, ptr %x, ptr %dx, ptr %out, ptr %dout)
  ret void
}
"""
    with pytest.raises(ADError, match="integer bits loaded from memory that has derivatives are stored here"):
        differentiate_text(HEADER + text)


# two floats packed with zext/shl/or straight into a store (no load, phi or select of the packed integer)
PACKED_STORE = """
define void @pk(ptr %x, ptr %out) {
  %a = load float, ptr %x, align 4
  %p1 = getelementptr i8, ptr %x, i64 4
  %b = load float, ptr %p1, align 4
  %a2 = fmul float %a, %a
  %ai = bitcast float %a2 to i32
  %bi = bitcast float %b to i32
  %lo = zext i32 %ai to i64
  %hz = zext i32 %bi to i64
  %hi = shl i64 %hz, 32
  %pk = or disjoint i64 %hi, %lo
  store i64 %pk, ptr %out, align 4
  %o = load float, ptr %out, align 4
  ret void
}
define void @grad(ptr %x, ptr %dx, ptr %out, ptr %dout) {
  call void (ptr, ...) @__enzyme_autodiff(ptr @pk, ptr %x, ptr %dx, ptr %out, ptr %dout)
  ret void
}
"""


def test_packed_integer_stored_directly():
    fn, changed = _split(PACKED_STORE, "pk")
    assert changed
    out, _ = differentiate_text(HEADER + PACKED_STORE)
    engine = jit(out)
    grad = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4)(engine.get_function_address("grad"))
    x = (ctypes.c_float * 2)(1.5, 2.5)
    dx = (ctypes.c_float * 2)(0.0, 0.0)
    o = (ctypes.c_float * 2)(0.0, 0.0)
    do = (ctypes.c_float * 2)(1.0, 2.0)
    grad(*(ctypes.addressof(v) for v in (x, dx, o, do)))
    assert list(o) == [2.25, 2.5]
    assert list(dx) == pytest.approx([2 * 1.5 * 1.0, 2.0])
