"""The bad-input fuzzer: its classifier and mutators, and a fixed-seed sample that must find no bug."""

from __future__ import annotations

import random

import pytest

from enzcc_testing import need
from tests.fuzz.badinput import (
    C_SEEDS, BUG_CLASSES, Case, bugs, classify, make_cases, mutate_c, mutate_ir, run_case, run_cases,
)


@pytest.mark.parametrize("returncode,stderr,exists,leftovers,expected", [
    (0, "", True, False, "ok"),
    (1, "prog.c:3:1: error: expected ';'\n", False, False, "clean-error"),
    (1, "enzcc: error: no input files\n", False, False, "clean-error"),
    (1, "Traceback (most recent call last):\n  File \"x.py\"\nKeyError: 'x'\n", False, False, "traceback"),
    (70, "enzcc: internal error: KeyError: 'x' (set ENZCC_DEBUG=1 for details)\n", False, False,
     "internal-error"),
    (1, "enzcc: error: internal error while synthesizing the derivative: x\n", False, False, "internal-error"),
    (1, "LLVM ERROR: Cannot select: intrinsic\n", False, False, "llvm-abort"),
    (-6, "python3: Assertion `x' failed.\n", False, False, "llvm-abort"),
    (-11, "", False, False, "signal"),
    (None, "", False, False, "timeout"),
    (1, "prog.c:1:1: error: x\n", True, False, "half-written-output"),
    (1, "", False, True, "half-written-output"),
    (0, "", False, False, "missing-output"),
])
def test_classify(returncode, stderr, exists, leftovers, expected):
    assert classify(returncode, stderr, exists, leftovers) == expected


def test_mutators_are_deterministic_and_change_the_program():
    for src in C_SEEDS.values():
        assert mutate_c(src, random.Random(7)) == mutate_c(src, random.Random(7))
        assert len({mutate_c(src, random.Random(k)) for k in range(20)} - {src}) > 15
    ir = "define double @f(double %0) {\n  %2 = fmul double %0, 2.0\n  ret double %2\n}\n"
    assert len({mutate_ir(ir, random.Random(k)) for k in range(40)} - {ir}) > 20


@need("clang-22")
def test_a_broken_program_is_a_clean_error_and_a_seed_is_ok():
    broken = run_case(Case("broken", ".c", "int main(void) { return x; }\n", ["-c", "prog.c", "-o", "prog.o"]))
    assert broken.kind == "clean-error", broken.stderr
    seed = run_case(Case("seed", ".c", C_SEEDS["transcendental"], ["-O2", "prog.c", "-o", "prog", "-lm"]))
    assert seed.kind == "ok", seed.stderr


@need("clang-22")
def test_fixed_seed_sample_finds_no_bug():
    results = run_cases(make_cases(110, seed=20240601), jobs=2)
    assert {r.kind for r in results} <= {"ok", "clean-error", *BUG_CLASSES}
    found = bugs(results)
    report = "\n".join(f"{r.kind}: enzcc {' '.join(r.case.args)} ({r.case.ident})\n{r.text}\n{r.stderr}"
                       for r in found)
    assert not found, report
