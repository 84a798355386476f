"""The optimization after AD and the code generation of large modules by LLVM's own tools (opt-22, llc-22:
enzcc.backend.llvm_tools): the same objects and assembly as llvmlite makes (LLVM text, -S -emit-llvm, stays
llvmlite's), a correct gradient, the tools really used where they should be and not where they should not, and
llvmlite taking over when a tool fails."""

import math
import os
import stat

import pytest

from enzcc_testing import need

pytestmark = need("clang-22", "opt-22", "llc-22")

#: a differentiated function of straight-line statements (blocks large enough to be split) and a loop
PROGRAM = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
typedef struct { double x, y; } g2;
g2 __enzyme_autodiff(void *, ...);
double f(double x, double y) {
  double a = x, b = y;
%(body)s
  for (int i = 0; i < 20; i++) a = a * 0.9 + 0.01 * sin(b * i);
  return a + 2 * b;
}
int main(int argc, char **argv) {
  double x = atof(argv[1]), y = atof(argv[2]), h = 1e-6;
  g2 g = __enzyme_autodiff((void *)f, x, y);
  printf("%%.17g %%.17g %%.17g %%.17g\n", g.x, g.y, (f(x + h, y) - f(x - h, y)) / (2 * h),
         (f(x, y + h) - f(x, y - h)) / (2 * h));
  return 0;
}
"""

STATEMENTS = ["a += 0.01 * sin(a * b);", "b = 0.99 * b + 0.01 * cos(a);", "a += 0.001 * a * b;",
              "b += 0.01 * tanh(a - b);"]


def program(n: int) -> str:
    return PROGRAM % {"body": "\n".join("  " + STATEMENTS[i % len(STATEMENTS)] for i in range(n))}


def logging_tool(tmp_path, name: str) -> tuple[str, str]:
    """A script standing for ``name`` (opt-22, llc-22) that logs each call and runs the real tool."""
    log = tmp_path / f"{name}.log"
    script = tmp_path / f"{name}-logging"
    script.write_text(f"#!/bin/sh\necho called >> '{log}'\nexec {name} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), str(log)


def outputs(enzcc, src, tag: str, env: dict) -> dict[str, bytes]:
    """The object, the assembly and the LLVM text of ``src``, and the executable's output."""
    made = {}
    for kind, flags in (("o", ["-c"]), ("s", ["-S"]), ("ll", ["-S", "-emit-llvm"]), ("exe", ["-lm"])):
        out = enzcc.cwd / f"{tag}.{kind}"
        enzcc("-O2", "--no-cache", *flags, str(src), "-o", str(out), env=env)
        made[kind] = out.read_bytes() if kind != "exe" else \
            enzcc.run(str(out), "0.3", "-0.2", env=env).stdout.encode()
    return made


@pytest.fixture
def large(enzcc):
    return enzcc.write("large.c", program(600))


def test_large_module_by_the_tools_is_byte_identical_and_its_gradient_right(enzcc, tmp_path, large):
    opt, opt_log = logging_tool(tmp_path, "opt-22")
    llc, llc_log = logging_tool(tmp_path, "llc-22")
    tools = outputs(enzcc, large, "tools", {"ENZCC_OPT": opt, "ENZCC_LLC": llc})
    assert os.path.exists(opt_log) and os.path.exists(llc_log)  # (600 statements: past MIN_BITCODE)
    lite = outputs(enzcc, large, "lite", {"ENZCC_LLVM_TOOLS": "0"})
    assert tools == lite
    gx, gy, fx, fy = map(float, tools["exe"].split())
    assert math.isfinite(gx) and math.isfinite(gy)
    assert gx == pytest.approx(fx, rel=1e-5, abs=1e-8) and gy == pytest.approx(fy, rel=1e-5, abs=1e-8)


def test_small_module_stays_in_llvmlite_unless_asked(enzcc, tmp_path):
    small = enzcc.write("small.c", program(10))
    opt, opt_log = logging_tool(tmp_path, "opt-22")
    enzcc("-O2", "--no-cache", "-c", str(small), "-o", "small.o", env={"ENZCC_OPT": opt})
    assert not os.path.exists(opt_log)
    forced = outputs(enzcc, small, "forced", {"ENZCC_OPT": opt, "ENZCC_LLVM_TOOLS": "1"})
    assert os.path.exists(opt_log)
    assert forced == outputs(enzcc, small, "lite", {"ENZCC_LLVM_TOOLS": "0"})


def test_failing_tools_leave_the_work_to_llvmlite(enzcc, tmp_path, large):
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho 'LLVM ERROR: broken on purpose' >&2\nexit 1\n")
    failing.chmod(failing.stat().st_mode | stat.S_IXUSR)
    broken = outputs(enzcc, large, "broken", {"ENZCC_OPT": str(failing), "ENZCC_LLC": str(failing)})
    missing = outputs(enzcc, large, "missing", {"ENZCC_OPT": "/nonexistent/opt", "ENZCC_LLC": "/nonexistent/llc"})
    assert broken == missing == outputs(enzcc, large, "lite", {"ENZCC_LLVM_TOOLS": "0"})
