"""The size of what the engine makes for a program whose functions are differentiated as functions of their own
(REBOUND: 95 functions, 28,000 instructions, reached from one leapfrog step through switches over integrators).

- A function differentiated on its own inlines its calls only up to ``enzcc.ad.prepare.MAX_BODY_SIZE``
  instructions in all: before, it took in every callee that fit the inlining budget alone, however many calls
  there were (REBOUND's corrector: seven 8,000-instruction operators in one derivative; 210,000 instructions for
  one step, then more than 8 GB and ten minutes).
- The frame a split derivative keeps between its augmented primal and its reverse function gets a named type
  when it is large: written out literally in each getelementptr, a frame of thousands of fields made a
  derivative 170 MB of text.

Gradients against central differences; structure from the symbols and the LLVM text of the program."""

import os
import re
import subprocess

from adharness import PRELUDE, assert_tree_gradient, call_tree_program
from enzcc_testing import need

pytestmark = need("clang-22", "nm")

#: the large program's budgets (enzcc.ad.prepare.LARGE) for this small program
LARGE = {"ENZCC_AD_LARGE_EXPANSION": "0"}
DEPTH = 8  # level3 expands to about 820 instructions: it is inlined (MAX_EXPANDED_SIZE_LARGE, 1,000), and one
# fits MAX_BODY_SIZE (1,500) where two do not


def _source() -> str:
    """levelD calls level(D+1) twice (noinline: LLVM keeps the tree); the leaves step a pair of bodies. ``top``
    calls level3 four times: too large to inline itself, so it is differentiated on its own."""
    return call_tree_program(DEPTH, 3, "top(b);", defs=r"""
__attribute__((noinline)) void top(struct body *b) {
  level3(b, 0); b[0].v *= 0.99; level3(b, 1); b[1].v *= 0.99; level3(b, 2); b[0].v *= 0.99; level3(b, 3);
}""")


def _derivative_text(enzcc) -> str:
    """The module right after AD (before LLVM inlines the small derived functions again)."""
    from enzcc.ad import differentiate_text

    enzcc.write("tree.c", PRELUDE + _source())
    subprocess.run(["clang-22", "-O2", "-fno-unroll-loops", "-fno-vectorize", "-fno-slp-vectorize", "-emit-llvm",
                    "-S", "tree.c", "-o", "tree.ll"], cwd=enzcc.cwd, check=True)
    saved = os.environ.get("ENZCC_AD_LARGE_EXPANSION")
    os.environ.update(LARGE)
    try:
        text, count = differentiate_text((enzcc.cwd / "tree.ll").read_text())
    finally:
        if saved is None:
            del os.environ["ENZCC_AD_LARGE_EXPANSION"]
        else:
            os.environ["ENZCC_AD_LARGE_EXPANSION"] = saved
    assert count == 1
    return text


def test_body_budget_cuts_repeated_calls(enzcc):
    enzcc.write("tree.c", PRELUDE + _source())
    enzcc("-O2", "tree.c", "-lm", "-o", "tree", env=LARGE)
    assert_tree_gradient(enzcc.run("./tree").stdout, 0.1)
    defined = set(re.findall(r"^define [^@]*@([\w.]+)\(", _derivative_text(enzcc), re.M))
    # top is differentiated on its own (too large to inline); inside it, one level3 is inlined and the other
    # three calls go through level3's own derived functions (before: all four inlined, no augmented_level3)
    assert {"augmented_top", "augmented_level3", "reverse_level3"} <= defined, sorted(defined)


def test_large_frame_has_a_named_type(enzcc):
    lines = _derivative_text(enzcc).splitlines()
    named = [line for line in lines if line.startswith("%enzcc.frame.top")]
    assert named and len(named[0]) > 200, named  # (a frame of many fields: top's values its reverse reads)
    # each getelementptr into the frame names the type instead of spelling out its fields
    assert max(len(line) for line in lines if " = getelementptr" in line) < 200, \
        max((line for line in lines if " = getelementptr" in line), key=len)[:300]
