"""The inlining budgets are chosen once per differentiation request (``enzcc.ad.prepare.large_request``): the
function an ``__enzyme_*`` call names, with every call inlined, is past ``LARGE_PROGRAM`` instructions (REBOUND:
1.3 million; Eigen's LU solve at -O0: 40,000), so every function derived for it gets the large program's budgets,
also a callee whose own expansion is mid-size. Decided per derived function, such a callee (REBOUND's many
callees under 30,000) kept the former limits and inlined up to 12,000 instructions per call: 15 minutes and
5.4 GB for REBOUND. Gradients against central differences; structure from the symbols of the program."""

import subprocess

from adharness import PRELUDE, assert_tree_gradient, call_tree_program
from enzcc_testing import need

pytestmark = need("clang-22", "nm")

DEPTH = 16  # level0 with every call inlined: 2**16 leaves, past LARGE_PROGRAM
# level7 expands to about 13,000 instructions: past the former per-callee limit (12,000), so a function
# derived on its own, and under LARGE_EXPANSION (30,000), so the former per-function decision gave it the
# former limits, with which its derivative took in level8 and everything below it whole


def _source() -> str:
    return call_tree_program(DEPTH, 0, "level0(b, 0);")


def test_mid_size_callee_of_a_large_request_gets_the_large_budgets(enzcc):
    enzcc.write("tree.c", PRELUDE + _source())
    enzcc("-O2", "tree.c", "-lm", "-o", "tree", env={"ENZCC_AD_LARGE_EXPANSION": ""})  # (the default)
    assert_tree_gradient(enzcc.run("./tree").stdout, 1.0)
    symbols = subprocess.run(["nm", str(enzcc.cwd / "tree")], capture_output=True, text=True).stdout
    # level7's derivative inlines callees of up to 1,000 instructions (level11 and below), 1,500 in all: level10
    # is a derived function of its own (decided per function, level7's derivative took in level8 and everything
    # below it whole, and no derived function below level7 existed; LLVM inlines the small derived functions of
    # level8 and level9 into their callers)
    assert "augmented_level10" in symbols, symbols
