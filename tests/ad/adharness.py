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


#: ``f`` and ``main`` of a call-tree program (:func:`call_tree_program`)
_TREE_MAIN = r"""
double f(double *x0) {
  struct body b[2] = {{x0[0], 0.0}, {x0[1], 0.1}};
  BODY
  return b[0].x * b[1].x;
}
int main(int argc, char **argv) {
  SETUP
  double x[2] = {0.3, -0.4}, d[2] = {0, 0};
  __enzyme_autodiff((void *)f, enzyme_dup, x, d);
  for (int i = 0; i < 2; i++) {
    double h = 1e-6, s = x[i];
    x[i] = s + h; double up = f(x); x[i] = s - h; double dn = f(x); x[i] = s;
    report(i ? "ad.1" : "ad.0", d[i]);
    report(i ? "fd.1" : "fd.0", (up - dn) / (2 * h));
  }
  return 0;
}
"""


def call_tree_program(depth: int, top: int, body: str, defs: str = "", setup: str = "") -> str:
    """A whole program (after :data:`PRELUDE`) on :func:`call_tree_source`'s tree: ``defs`` (more C
    definitions), ``f(x0)`` running ``body`` on a pair of bodies ``b`` made from ``x0`` and returning
    ``b[0].x * b[1].x``, and ``main`` running ``setup``, then reporting f's gradient (``ad.0``, ``ad.1``) and
    central differences (``fd.0``, ``fd.1``)."""
    return "\n".join([*call_tree_source(depth, top), defs,
                       _TREE_MAIN.replace("BODY", body).replace("SETUP", setup)])


def assert_tree_gradient(out: str, least: float) -> None:
    """The output of a :func:`call_tree_program`: each gradient element larger than ``least`` (a gradient
    that is there) and within 1e-6 of central differences (relative)."""
    v = dict((k, float(x)) for k, x in (line.split() for line in out.splitlines()))
    for i in (0, 1):
        assert abs(v[f"ad.{i}"]) > least  # (a gradient that is there)
        assert abs(v[f"ad.{i}"] - v[f"fd.{i}"]) <= 1e-6 * abs(v[f"fd.{i}"]), v


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
