"""liblbfgs 1.10 (unmodified lib/lbfgs.c): L-BFGS on the extended Rosenbrock function (n = 100) with the
gradient from __enzyme_autodiff equals the hand-written gradient, the same iterations and minimum; the
gradient agrees with central differences (tests/libraries/lbfgs_driver.c)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_lbfgs_rosenbrock(library_check, opt):
    v = library_check("liblbfgs", opt)
    assert v["point.rel_err_hand"] <= 1e-14  # the same arithmetic as the hand-written gradient
    assert v["point.rel_err_fd"] <= 1e-6  # central differences with step 1e-6: truncation ~1e-8
    assert v["run.max_abs_diff_hand"] <= 1e-12  # at every point L-BFGS asked for
    assert v["hand.status"] == v["enzcc.status"] == 0  # LBFGS_SUCCESS
    assert v["enzcc.iterations"] == v["hand.iterations"] > 10
    assert v["enzcc.fx"] == pytest.approx(v["hand.fx"], rel=1e-9, abs=1e-20)
    assert v["enzcc.fx"] < 1e-10 and v["enzcc.x0"] == pytest.approx(1.0, abs=1e-6)
