"""Floating-point constant spelling agrees bit-exactly with LLVM."""

from __future__ import annotations

import math
import re

import pytest

from ir_helpers import llvm_check
from enzcc.ir import ConstantFloat, ConstantInt, types as T
from enzcc.ir.floats import format_float, parse_float_text

VALUES = [0.0, -0.0, 1.0, -2.5, 0.1, 1e-310, 5e-324, 1.7976931348623157e308, 3.0e-5,
          123456.789, math.inf, -math.inf, 2.0 ** -30, 1 / 3]
KINDS = ["double", "float", "half", "bfloat", "x86_fp80", "fp128"]


@pytest.mark.parametrize("kind", KINDS)
def test_float_spelling_is_canonical_llvm(kind):
    """LLVM reads our spelling as the intended bits and (except for subnormal
    doubles, which we print in hex) re-prints it unchanged."""
    lines = [f"@g{i} = global {kind} {format_float(kind, v)}" for i, v in enumerate(VALUES)]
    printed = llvm_check("\n".join(lines))["text"]
    got = dict(re.findall(rf"@(g\d+) = global {kind} (\S+)", printed))
    for i, v in enumerate(VALUES):
        ours = format_float(kind, v)
        assert parse_float_text(got[f"g{i}"]) == parse_float_text(ours), (kind, v)
        if not (kind == "double" and 0 < abs(v) < 2.2250738585072014e-308):
            assert got[f"g{i}"] == ours, (kind, v)


@pytest.mark.parametrize("kind", KINDS)
def test_float_values_decode(kind):
    exact = {"double": VALUES, "float": [0.0, 1.0, -2.5, 2.0 ** -30, math.inf],
             "half": [0.0, 1.0, -2.5, 0.5], "bfloat": [0.0, 1.0, -2.5],
             "x86_fp80": VALUES, "fp128": VALUES}[kind]
    for v in exact:
        back = parse_float_text(format_float(kind, v))
        assert back == v and math.copysign(1, back) == math.copysign(1, v), (kind, v)


def test_known_spellings():
    assert format_float("double", 1.0) == "1.000000e+00"
    assert format_float("double", 0.1) == "1.000000e-01"
    assert format_float("double", 0.1 + 2 ** -56) == "0x3FB999999999999B"
    assert format_float("double", 5e-324) == "0x0000000000000001"
    assert format_float("float", 0.1) == "0x3FB99999A0000000"
    assert format_float("half", 1.0) == "0xH3C00"
    assert format_float("bfloat", 1.0) == "0xR3F80"
    assert format_float("x86_fp80", 1.0) == "0xK3FFF8000000000000000"
    assert format_float("fp128", 1.0) == "0xL00000000000000003FFF000000000000"
    assert ConstantFloat(T.f64, text="0x3FB999999999999A").value == 0.1
    assert math.isnan(ConstantFloat(T.f64, math.nan).value)


def test_int_constants():
    assert ConstantInt(T.i8, 255).signed_value == -1
    assert ConstantInt(T.i8, -1).unsigned_value == 255
    assert ConstantInt(T.i1, 1).ref() == "true"
    assert ConstantInt(T.i64, -5).ref() == "-5"
    assert ConstantInt(T.i32, 2 ** 32 - 1).ref() == "-1"
