"""Compile small programs with enzcc and compare their gradients with finite differences."""

from __future__ import annotations

import re

PRELUDE = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern int enzyme_dup, enzyme_dupnoneed, enzyme_const, enzyme_out;
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
/* prints "name value" lines that the tests parse */
static void report(const char *name, double v) { printf("%s %.17g\n", name, v); }
"""


def call_tree_source(depth: int, top: int) -> list[str]:
    """C lines of a binary call tree: ``levelD`` (``top <= D < depth``) calls ``level(D+1)`` twice, the leaf
    ``level{depth}`` steps a pair of bodies (``struct body { double x, v; }``); ``noinline`` keeps the tree in
    LLVM, so enzcc's inlining budgets decide how much of it one derivative takes in."""
    lines = ["struct body { double x, v; };",
             f"__attribute__((noinline)) void level{depth}(struct body *b, int k) {{"
             " b[k & 1].v -= 0.01 * sin(b[(k + 1) & 1].x - b[k & 1].x); b[k & 1].x += 0.01 * b[k & 1].v; }"]
    for d in range(depth - 1, top - 1, -1):
        lines.append(f"__attribute__((noinline)) void level{d}(struct body *b, int k) {{ if (b[0].x > 1e6) return;"
                     f" level{d + 1}(b, 2 * k); level{d + 1}(b, 2 * k + 1); }}")
    return lines


def build_and_run(runner, source: str, opt: str = "-O2", extra=(), name: str = "t") -> dict[str, float]:
    runner.write(f"{name}.c", PRELUDE + source)
    runner(opt, f"{name}.c", "-lm", "-o", name, *extra)
    out = runner.run(f"./{name}").stdout
    values = {}
    for line in out.splitlines():
        m = re.fullmatch(r"(\S+) (\S+)", line.strip())
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def assert_close(values: dict[str, float], prefix_a: str, prefix_b: str, rel=1e-6, abs_=1e-7):
    """Every ``prefix_a.K`` matches ``prefix_b.K``."""
    keys = [k[len(prefix_a):] for k in values if k.startswith(prefix_a)]
    assert keys, f"no values named {prefix_a}*: {values}"
    for k in keys:
        a, b = values[prefix_a + k], values[prefix_b + k]
        assert abs(a - b) <= abs_ + rel * max(abs(a), abs(b)), f"{prefix_a}{k}={a} vs {prefix_b}{k}={b}"
