"""cminpack 1.3.6 (unmodified sources): the Jacobians of MINPACK's eighteen least-squares test problems
(examples/ssqfcn.c) by enzcc, forward and reverse mode, equal the hand-written ones (examples/ssqjac.c) over the
53 cases of examples/testdata/ssq.data and agree with central differences; lmder1 with enzcc's Jacobian
converges wherever it does with the hand-written one. The library's own enorm (rescaled sums for components
near overflow and underflow) is differentiated too, against x / |x| in each regime
(tests/libraries/cminpack_driver.c)."""

from __future__ import annotations

import collections

import pytest


def _cases(v: dict[str, float]) -> dict[str, dict[str, float]]:
    cases = collections.defaultdict(dict)
    for key, value in v.items():
        case, _, name = key.partition(".")
        if case.startswith("case"):
            cases[case][name] = value
    return cases


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_lmder_jacobians(library_check, opt):
    v = library_check("cminpack", opt)
    assert v["enorm.err"] <= 1e-14  # reverse and forward, mid, giant (1e160), dwarf (1e-160) and mixed scales
    assert v["all.cases"] == 53
    # entries relative to the largest of their column (a column's entries share a scale)
    assert v["all.err_fwd"] <= 1e-12
    assert v["all.err_rev"] <= 1e-12
    assert v["all.err_fd"] <= 1e-5  # central differences, step 1e-6 relative; the worst case is ~2e-6
    converged = range(1, 5)  # lmder1's info 1-4: a solution by one of its tests
    for name, c in _cases(v).items():
        if c["hand_info"] in converged:
            assert c["enzcc_info"] in converged, (name, c)
            # where lmder1 reaches a minimum (norms above 1e-8), both Jacobians lead to the same one
            assert c["enzcc_fnorm"] == pytest.approx(c["hand_fnorm"], rel=1e-6, abs=1e-8), (name, c)
    # most cases follow the same path (evaluations and exit code); a few ill-conditioned ones (Watson n=12,
    # the maxfev case of problem 9) diverge from rounding alone
    assert v["all.same_path"] >= 45
