"""The GPU benchmarks' programs (bench/gpu/*.cu, `make bench-gpu`), at small sizes with their kernels run on the
CPU (--cuda-host-emulation): each checks its gradient kernel against central differences and says ok. On a GPU,
`make bench-gpu` runs the same programs at full size."""

from __future__ import annotations

import json

import pytest

from enzcc_testing import ROOT, need
from enzcc.tools import cuda_path

pytestmark = [need("clang-22"), pytest.mark.skipif(cuda_path(required=False) is None, reason="needs the CUDA toolkit")]

SIZES = {"stencil": "48", "nbody": "96", "reduce": "3000"}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_gpu_benchmark_gradients_are_right(enzcc, name):
    enzcc("-O2", "--cuda-host-emulation", str(ROOT / "bench" / "gpu" / f"{name}.cu"), "-o", name, cmd="enzcc++")
    for order in ("forward", "reverse"):
        out = enzcc.run(f"./{name}", SIZES[name], env={"ENZCC_CUDA_HOST_ORDER": order}).stdout
        row = json.loads(out.strip().splitlines()[-1])
        assert row["ok"] and row["check_rel_err"] < 1e-6, (order, row)
