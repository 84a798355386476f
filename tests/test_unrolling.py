"""LLVM's runtime and partial unrolling: off in the optimization before AD (remainder loops would add control flow
for the reverse sweep), on again in the one after AD on x86, as clang has them at -O2, so the primal functions of
a program that differentiates are unrolled as clang unrolls them. The unroller's options are process-wide, so
the check runs in a process of its own."""

import subprocess
import sys

from enzcc_testing import ROOT, need

pytestmark = need("clang-22")

CHECK = r"""
import sys
sys.path.insert(0, sys.argv[1])
from enzcc.backend import llvm as L

def fmuls(vectorize):
    mod = L.llvm.parse_bitcode(open(sys.argv[2], "rb").read())
    L.optimize(mod, L.target_machine("x86_64-unknown-linux-gnu", 2), 2, vectorize=vectorize)
    return str(mod).count("call double @llvm.fmuladd.f64(")

print(fmuls(True), fmuls(False), fmuls(True), fmuls(False))
"""


def test_runtime_unrolling_off_before_ad_and_on_again_after(tmp_path):
    src = tmp_path / "loop.c"
    # a recurrence the vectorizer leaves alone; clang -O2 unrolls it by its run-time trip count
    src.write_text("double f(const double *x, long n) {\n  double s = 0;\n"
                   "  for (long i = 0; i < n; i++) s = s * x[i] + 1.0;\n  return s;\n}\n")
    bc = tmp_path / "loop.bc"
    subprocess.run(["clang-22", "-O2", "-Xclang", "-disable-llvm-optzns", "-emit-llvm", "-c", str(src), "-o",
                    str(bc), "--target=x86_64-unknown-linux-gnu"], check=True)
    out = subprocess.run([sys.executable, "-c", CHECK, str(ROOT), str(bc)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    clang_default, before_ad, after_ad, before_again = map(int, out.stdout.split())
    assert before_ad == before_again == 1 and clang_default == after_ad > 1
