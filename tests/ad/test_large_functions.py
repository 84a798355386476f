"""Generated straight-line code (the kind unrolled solvers and symbolic tools produce): the adjoint slots kept
in one block become SSA values (enzcc.ad.promote), and past a threshold the forward values the reverse sweep
reads go through memory (enzcc.ad.spill). Gradients against central differences, with and without spilling."""

import random

import pytest

from adharness import assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

OPS = ["{d} += 0.1 * sin({a} * {b});", "{d} = 0.95 * {d} + 0.1 * cos({a});", "{d} += 0.05 * tanh({a} - {b});",
       "{d} += 0.02 * {a} * {b};", "{d} += 0.1 * exp(-{a} * {a});", "{d} += 0.05 * sqrt(1.0 + {b} * {b});"]


def generated(n: int, seed: int = 7) -> str:
    r = random.Random(seed)
    body = []
    for _ in range(n):
        d, a, b = (r.choice("abc") for _ in range(3))
        body.append("  " + r.choice(OPS).format(d=d, a=a, b=b))
    return ("typedef struct { double x, y, z; } g3;\ng3 __enzyme_autodiff_g3(void *, ...);\n"
            "double f(double x, double y, double z) {\n  double a = x, b = y, c = z;\n" + "\n".join(body) +
            "\n  return a + 2 * b + 3 * c;\n}\n"
            "int main(void) {\n  double p[3] = {0.3, -0.2, 0.5};\n"
            "  g3 g = __enzyme_autodiff_g3((void *)f, p[0], p[1], p[2]);\n"
            "  report(\"ad0\", g.x); report(\"ad1\", g.y); report(\"ad2\", g.z);\n"
            "  for (int i = 0; i < 3; i++) {\n    double h = 1e-6, q[3] = {p[0], p[1], p[2]}, r[3] = {p[0], p[1], p[2]};\n"
            "    q[i] += h; r[i] -= h;\n"
            "    printf(\"fd%d %.17g\\n\", i, (f(q[0], q[1], q[2]) - f(r[0], r[1], r[2])) / (2 * h));\n  }\n"
            "  return 0;\n}\n")


@pytest.mark.parametrize("spill", [False, True])
@pytest.mark.parametrize("opt", ["-O1", "-O2"])
def test_long_straight_line_function(enzcc, monkeypatch, opt, spill):
    if spill:
        monkeypatch.setenv("ENZCC_SPILL_THRESHOLD", "20")
    v = build_and_run(enzcc, generated(400), opt)
    assert_close(v, "ad", "fd", rel=1e-6, abs_=1e-8)
    assert any(abs(v[f"ad{i}"]) > 1e-3 for i in range(3))


def test_spilling_does_not_change_the_gradient(enzcc, monkeypatch):
    src = generated(300, seed=3)
    plain = build_and_run(enzcc, src, "-O2", name="plain")
    monkeypatch.setenv("ENZCC_SPILL_THRESHOLD", "10")
    spilled = build_and_run(enzcc, src, "-O2", name="spilled")
    assert [plain[f"ad{i}"] for i in range(3)] == [spilled[f"ad{i}"] for i in range(3)]
