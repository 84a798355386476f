"""Splitting very large blocks before code generation (enzcc.backend.split_blocks): text in, text out, and the
split code computes what the original did (run by LLVM's JIT)."""

import ctypes
import re

import llvmlite.binding as llvm
import pytest

from enzcc.backend.split_blocks import largest_block, split_large_blocks
from enzcc_testing import jit


def chain(n: int, first: str = "%0") -> list[str]:
    """n instructions, each adding 1 to the previous result."""
    lines, prev = [], first
    for i in range(n):
        lines.append(f"  %v{i} = fadd double {prev}, 1.000000e+00")
        prev = f"%v{i}"
    return lines


def module(body: str) -> str:
    return "\n".join(["define double @f(double %0, i1 %c) {", body, "}", ""])


def compiled(text: str):
    """``f`` of the module, compiled by LLVM's JIT (and the engine, which must outlive the calls)."""
    engine = jit(text)
    return ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_bool)(engine.get_function_address("f")), engine


def test_unnamed_entry_block_split_and_successor_phi_renamed():
    text = module("\n".join(chain(7) + ["  br i1 %c, label %x, label %y", "x:", "  br label %y", "y:",
                                        "  %p = phi double [ %v6, %1 ], [ 0.000000e+00, %x ]", "  ret double %p"]))
    out = split_large_blocks(text, limit=3, piece=2)
    labels = re.findall(r"^(enzcc\.split\.\d+):", out, re.M)
    assert labels == ["enzcc.split.1", "enzcc.split.2", "enzcc.split.3"]
    assert "phi double [ %v6, %enzcc.split.3 ], [ 0.000000e+00, %x ]" in out
    assert largest_block(out) == 4  # (the last piece: the assume that takes its address, two instructions, ret)
    f, engine = compiled(out)
    g, engine0 = compiled(text)
    for x, c in ((0.5, True), (2.0, False)):
        assert f(x, c) == g(x, c)


def test_named_blocks_allocas_stay_first_and_nothing_small_is_split():
    body = ["entry:", "  %s = alloca double, align 8", "  store double %0, ptr %s, align 8",
            "  %l = load double, ptr %s, align 8"] + chain(6, "%l") + [
        "  br i1 %c, label %loop, label %out", "loop:", "  %w = fadd double %v5, 2.000000e+00",
        "  br label %out", "out:", "  %p = phi double [ %v5, %entry ], [ %w, %loop ]", "  ret double %p"]
    text = module("\n".join(body))
    out = split_large_blocks(text, limit=4, piece=3)
    assert "[ %v5, %enzcc.split." in out and "[ %w, %loop ]" in out
    entry = out.split("enzcc.split.1:")[0]
    assert "alloca" in entry and "alloca" not in out.split("enzcc.split.1:")[1]
    assert "loop:\n  %w" in out  # (a small block is left as it is)
    f, engine = compiled(out)
    g, engine0 = compiled(text)
    assert f(1.5, True) == g(1.5, True) == 1.5 + 6 + 2 and f(1.5, False) == g(1.5, False)
    assert split_large_blocks(text, limit=100) is None


def test_no_cut_between_musttail_call_and_ret_and_blockaddress_functions_kept():
    text = "\n".join([
        "declare double @g(double, i1)",
        "define double @f(double %0, i1 %c) {", *chain(5), "  %r = musttail call double @g(double %v4, i1 %c)",
        "  ret double %r", "}",
        "define ptr @h() {", "entry:", *[f"  %a{i} = add i32 {i}, 1" for i in range(6)], "  br label %b", "b:",
        "  ret ptr blockaddress(@h, %b)", "}", ""])
    out = split_large_blocks(text, limit=2, piece=5)
    assert "musttail call double @g(double %v4, i1 %c)\n  ret double %r" in out
    assert len(re.findall(r"^enzcc\.split\.\d+:", out, re.M)) == 1  # (one cut, in @f: none in @h)
    llvm.parse_assembly(out).verify()


@pytest.mark.parametrize("n", [2500])
def test_large_block_limits(n):
    text = module("\n".join(chain(n) + ["  ret double %v" + str(n - 1)]))
    out = split_large_blocks(text)
    assert largest_block(text) == n + 1 and largest_block(out) <= 252
    f, engine = compiled(out)
    assert f(0.0, False) == float(n)


def test_pieces_stay_apart_in_code_generation():
    """Each piece but the first takes its own address, so that CodeGenPrepare does not merge the pieces into one
    block again (in which the two-address pass took time quadratic in the uses of each constant)."""
    text = module("\n".join(chain(1200) + ["  ret double %v1199"]))
    out = split_large_blocks(text)
    pieces = re.findall(r"^(enzcc\.split\.\d+):", out, re.M)
    assert len(pieces) == 4
    for label in pieces:
        assert f'{label}:\n  call void @llvm.assume(i1 true) [ "ignore"(ptr blockaddress(@f, %{label})) ]' in out
    assert out.count("declare void @llvm.assume(i1 noundef)") == 1
    llvm.parse_assembly(out).verify()
    again = split_large_blocks(out, limit=100, piece=150)  # (a module that declares llvm.assume already)
    assert again.count("declare void @llvm.assume(i1 noundef)") == 1
    llvm.parse_assembly(again).verify()
    f, engine = compiled(out)
    assert f(0.0, False) == 1200.0
