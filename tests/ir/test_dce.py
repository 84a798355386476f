"""Text-in / text-out test for removing dead instructions (enzcc.ir.dce)."""

from __future__ import annotations

import textwrap

from ir_helpers import llvm_check
from enzcc.ir import parse_module
from enzcc.ir.dce import remove_dead_instructions

SRC = textwrap.dedent("""
    declare double @g(double)

    define double @f(double %x, ptr %p) {
    entry:
      %a = fadd double %x, 1.000000e+00
      %b = fmul double %a, %a
      %i = bitcast double %b to i64
      %m = and i64 %i, 9223372036854775807
      %l = load double, ptr %p, align 8
      %v = load volatile double, ptr %p, align 8
      %c = call double @g(double %x)
      %k = fsub double %x, 2.000000e+00
      store double %k, ptr %p, align 8
      %r = fadd double %x, 3.000000e+00
      ret double %r
    }
    """).lstrip("\n")


def test_dead_chains_go_and_effects_stay():
    mod = parse_module(SRC)
    fn = mod.get_function("f")
    assert remove_dead_instructions(fn) == 5  # %m, %i, %b, %a (a chain), %l
    text = str(mod)
    for gone in ("%a =", "%b =", "%i =", "%m =", "%l ="):
        assert gone not in text
    for kept in ("load volatile", "call double @g", "%k = fsub", "store double %k", "%r = fadd"):
        assert kept in text
    llvm_check(text)
    assert remove_dead_instructions(fn) == 0
