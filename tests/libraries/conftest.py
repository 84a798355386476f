"""Fixtures for the real-library tests: each library's driver built once per session and -O level."""

from __future__ import annotations

import pytest

import libharness
import sources


@pytest.fixture(scope="session")
def library_build(tmp_path_factory):
    """``library_build(name, opt, *extra)``: the executable of library ``name``'s driver built by enzcc at
    ``opt`` (cached for the session; a refusal raises libharness.BuildError, cached too). Skips when the
    library's source cannot be had."""
    out_dir = tmp_path_factory.mktemp("libraries")
    env = {"ENZCC_CACHE_DIR": str(tmp_path_factory.mktemp("libraries-cache"))}
    built: dict[tuple, object] = {}

    def build(name: str, opt: str, *extra: str):
        key = (name, opt, extra)
        if key not in built:
            src = sources.source_dir(name)
            try:
                built[key] = libharness.build(libharness.LIBRARIES[name], src, opt, out_dir, extra, env)
            except libharness.BuildError as e:
                built[key] = e
        result = built[key]
        if isinstance(result, libharness.BuildError):
            raise result
        return result

    return build


@pytest.fixture(scope="session")
def library_check(library_build):
    """``library_check(name, opt, *extra)``: the values printed by library ``name``'s driver in check mode."""
    def check(name: str, opt: str, *extra: str) -> dict[str, float]:
        exe = library_build(name, opt, *extra)
        return libharness.run(exe, *libharness.check_args(libharness.LIBRARIES[name], sources.source_dir(name)))
    return check
