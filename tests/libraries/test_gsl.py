"""GSL 2.8 (the GNU Scientific Library, unmodified sources from Debian's gsl_2.8+dfsg.orig.tar.gz; the 155 files
the driver links, with GSL's own CBLAS): reverse and forward derivatives of gsl_sf_bessel_J0, gsl_sf_gamma and
gsl_sf_erf (their Chebyshev tables, asymptotic and series branches) against the analytic derivatives and central
differences, and of c . A^-1 b through gsl_linalg_LU_decomp (partial pivoting, recursive blocked LU),
gsl_linalg_LU_solve and gsl_blas_ddot with respect to A, b and c (tests/libraries/gsl_driver.c).

An ODE solved by gsl_odeiv2_driver_apply (-DWITH_ODE: rk8pd and rkf45, the system's function pointer and
params in a struct, adaptive steps) with respect to the stiffness passed through params and the initial state:
with enzyme_runtime_activity at -O2 the gradient equals the analytic one of the exact solution to the solver's
tolerance and central differences. Without the marker it is refused in one line: GSL keeps the stepper type (a
pointer to a constant table of functions) in the stepper it allocates, and enzcc cannot tell the fields read
back from it from pointers into memory with derivatives (the message suggests the marker); at -O0 with the
marker, the copy between two of the evolver's arrays is refused (no access in the function types them)."""

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


def test_ode_driver_without_runtime_activity_is_refused_in_one_line(library_build):
    with pytest.raises(libharness.BuildError) as refused:
        library_build("gsl", "-O2", "-DWITH_ODE")
    err = refused.value
    assert err.returncode != 0 and not err.out.exists()
    lines = err.stderr.strip().splitlines()
    assert len(lines) == 1, err.stderr
    assert "@gsl_odeiv2_step_rk8pd" in lines[0] and "mismatched activity" in lines[0], lines[0]
    assert "Traceback" not in err.stderr


ODE_CASES = [f"ode_{stepper}.{mode}" for stepper in ("rk8pd", "rkf45") for mode in ("reverse", "forward")]
RUNTIME_ACTIVITY = "-DODE_MARKERS=enzyme_runtime_activity,"


def test_ode_driver_with_runtime_activity(library_check):
    v = library_check("gsl", "-O2", "-DWITH_ODE", RUNTIME_ACTIVITY)
    for case in ODE_CASES:
        assert v[f"{case}.err_analytic"] <= 1e-9, case  # the solver's own error, tolerances 1e-11: ~1e-12..1e-10
        assert v[f"{case}.err_fd"] <= 1e-7, case  # central differences, step 1e-5: ~5e-10
    for case in CASES:  # (the rest of the driver, with the ODE in the same program)
        assert v[f"{case}.err_analytic"] <= 1e-12, case


def test_ode_driver_at_O0_with_runtime_activity_is_refused_in_one_line(library_build):
    with pytest.raises(libharness.BuildError) as refused:
        library_build("gsl", "-O0", "-DWITH_ODE", RUNTIME_ACTIVITY)
    lines = refused.value.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot tell whether the memory this memcpy copies" in lines[0], lines
    assert not refused.value.out.exists()
