"""kissfft 131.1.0 (unmodified kiss_fft.c, kiss_fftr.c, in double): the gradient of a weighted power spectrum
of a real FFT equals the analytic one and central differences, reverse and forward mode, with the plan made
inside the differentiated function (radix 4/2, 3/5 and the generic butterfly) and with the plan passed
enzyme_dup and a zeroed shadow plan; passed enzyme_const, the plan's scratch buffer would lose the derivative
and enzcc refuses in one line (tests/libraries/kissfft_driver.c)."""

from __future__ import annotations

import pytest

import libharness

CASES = [f"inside{n}.{mode}" for n in (64, 60, 28) for mode in ("reverse", "forward")] + \
        [f"plan_dup{n}.{mode}" for n in (60, 64) for mode in ("reverse", "forward")]


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_power_spectrum_gradient(library_check, opt):
    v = library_check("kissfft", opt)
    for case in CASES:
        # relative to the gradient's largest entry; central differences with step 1e-6: ~1e-8
        assert v[f"{case}.err_analytic"] <= 1e-12, case
        assert v[f"{case}.err_fd"] <= 1e-6, case


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_const_plan_is_refused(library_build, opt):
    with pytest.raises(libharness.BuildError) as refused:
        library_build("kissfft", opt, "-DCONST_PLAN")
    err = refused.value
    assert err.returncode != 0 and not err.out.exists()
    lines = err.stderr.strip().splitlines()
    assert len(lines) == 1, err.stderr
    assert "in function 'power_plan'" in lines[0]
    assert "(enzyme_const) and read back" in lines[0] and "mismatched activity" in lines[0]
    assert "Traceback" not in err.stderr
