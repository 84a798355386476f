"""GSL 2.8 (the GNU Scientific Library, unmodified sources from Debian's gsl_2.8+dfsg.orig.tar.gz; the 155 files
the driver links, with GSL's own CBLAS): reverse and forward derivatives of gsl_sf_bessel_J0, gsl_sf_gamma and
gsl_sf_erf (their Chebyshev tables, asymptotic and series branches) against the analytic derivatives and central
differences, and of c . A^-1 b through gsl_linalg_LU_decomp (partial pivoting, recursive blocked LU),
gsl_linalg_LU_solve and gsl_blas_ddot with respect to A, b and c (tests/libraries/gsl_driver.c).

An ODE solved by gsl_odeiv2_driver_apply (-DWITH_ODE) is refused in one line: GSL keeps the stepper type, a
pointer to a constant table of functions, in the stepper it allocates, where enzcc cannot tell it from pointers
to memory with derivatives (docs/limitations.md)."""

from __future__ import annotations

import pytest

import libharness

CASES = [f"sf_{f}.{mode}" for f in ("bessel_J0", "gamma", "erf") for mode in ("reverse", "forward")] + \
        ["lu.reverse", "lu.forward"]


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_special_functions_and_lu_gradients(library_check, opt):
    v = library_check("gsl", opt)
    for case in CASES:
        assert v[f"{case}.err_analytic"] <= 1e-12, case  # relative to max(|derivative|, 1e-3); ~1e-15
        if case.endswith("reverse") or case.startswith("lu"):
            assert v[f"{case}.err_fd"] <= 1e-6, case  # central differences, step 1e-6: ~1e-9


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_ode_driver_is_refused_in_one_line(library_build, opt):
    with pytest.raises(libharness.BuildError) as refused:
        library_build("gsl", opt, "-DWITH_ODE")
    err = refused.value
    assert err.returncode != 0 and not err.out.exists()
    lines = err.stderr.strip().splitlines()
    assert len(lines) == 1, err.stderr
    assert "@gsl_odeiv2_step_rk8pd" in lines[0] and "mismatched activity" in lines[0], lines[0]
    assert "Traceback" not in err.stderr
