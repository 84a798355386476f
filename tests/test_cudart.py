"""Host code that is differentiated and calls the CUDA runtime API (enzcc/ad/calls/cudart.py, Enzyme's cudaMemcpy
rules): cudaMalloc, cudaMemcpy in every direction, cudaMemset, cudaFree, their async forms, managed and pinned
memory. The programs run with their CUDA runtime on the CPU (--cuda-host-emulation: device memory starts as NaN
bytes, so a shadow not zeroed shows) and check their gradients against finite differences and analytic values
themselves (tests/cuda/cudart.cu); what is refused says so in one line."""

from __future__ import annotations

import os
import subprocess

import pytest

from enzcc_testing import need
from enzcc.tools import cuda_path

pytestmark = [need("clang-22", "clang++-22"),
              pytest.mark.skipif(cuda_path(required=False) is None, reason="needs the CUDA toolkit")]

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda", "cudart.cu")
CASES = ("roundtrip", "rotate", "overwrite", "twice", "constant", "streamed", "managed", "pinned", "global_staging",
         "staged")

HEADER = """int enzyme_dup, enzyme_const, enzyme_width;
template <typename... T> void __enzyme_autodiff(void *, T...);
template <typename... T> void __enzyme_fwddiff(void *, T...);
"""


@pytest.mark.parametrize("level", ["-O0", "-O2"])
def test_gradients_through_device_memory_match_finite_differences(enzcc, level):
    """Each case of cudart.cu in reverse and forward mode: its gradient against central finite differences (and
    analytic values where simple), the output's adjoint consumed, every tangent written, no CUDA call failed."""
    enzcc(level, "--cuda-host-emulation", PROGRAM, "-o", "cudart", cmd="enzcc++")
    proc = enzcc.run("./cudart", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [f"{c}: ok" for c in CASES], proc.stdout


def test_vector_mode(enzcc):
    """enzyme_width 2: each lane's shadow gets its own device shadow and copies."""
    enzcc.write("v.cu", HEADER + r"""#include <cstdio>
void f(double *x, double *out, int n) {
  double *d;
  cudaMalloc(&d, n * sizeof(double));
  cudaMemcpy(d, x, n * sizeof(double), cudaMemcpyHostToDevice);
  cudaMemcpy(out, d, n * sizeof(double), cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; i++) out[i] = out[i] * out[i] * out[i];
  cudaFree(d);
}
int main() {
  double x[3] = {1, 2, 3}, d1[3] = {0}, d2[3] = {0}, out[3], s1[3] = {1, 1, 1}, s2[3] = {2, 0, -1};
  __enzyme_autodiff((void *)f, enzyme_width, 2, x, d1, d2, out, s1, s2, enzyme_const, 3);
  double v1[3] = {1, 1, 1}, v2[3] = {1, 0, 2}, t1[3], t2[3];
  __enzyme_fwddiff((void *)f, enzyme_width, 2, x, v1, v2, out, t1, t2, enzyme_const, 3);
  for (int i = 0; i < 3; i++) printf("%g %g %g %g\n", d1[i], d2[i], t1[i], t2[i]);
}
""")
    enzcc("-O2", "--cuda-host-emulation", "v.cu", "-o", "v", cmd="enzcc++")
    rows = [[float(v) for v in line.split()] for line in enzcc.run("./v").stdout.splitlines()]
    x, s2, v2 = (1, 2, 3), (2, 0, -1), (1, 0, 2)
    assert rows == [[3 * a * a, 3 * a * a * s, 3 * a * a, 3 * a * a * v] for a, s, v in zip(x, s2, v2)]


REFUSED = {
    "a kernel launch": ("""__global__ void square(double *d, int n) { if (threadIdx.x < n) d[threadIdx.x] *= 2; }
void f(double *x, double *out, int n) {
  double *d;
  cudaMalloc(&d, n * sizeof(double));
  cudaMemcpy(d, x, n * sizeof(double), cudaMemcpyHostToDevice);
  square<<<1, 32>>>(d, n);
  cudaMemcpy(out, d, n * sizeof(double), cudaMemcpyDeviceToHost);
  cudaFree(d);
}
int main() {
  double x[3] = {1, 2, 3}, dx[3] = {0}, out[3], dout[3] = {1, 1, 1};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_dup, out, dout, enzyme_const, 3);
}
""", "a kernel launch (<<<...>>>) in differentiated host code is not supported: differentiate inside the kernel"),
    "an untyped copy": ("""void g(void *a, void *b, unsigned long n) { cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice); }
int main() {
  void *a, *b, *da, *db;
  cudaMalloc(&a, 64), cudaMalloc(&b, 64), cudaMalloc(&da, 64), cudaMalloc(&db, 64);
  __enzyme_autodiff((void *)g, enzyme_dup, a, da, enzyme_dup, b, db, enzyme_const, 64ul);
}
""", "cannot tell whether the memory this cudaMemcpy copies holds floating-point values"),
    "an allocation into a global": ("""double *buf;
void f(double *x, double *out, int n) {
  cudaMalloc(&buf, n * sizeof(double));
  cudaMemcpy(buf, x, n * sizeof(double), cudaMemcpyHostToDevice);
  cudaMemcpy(out, buf, n * sizeof(double), cudaMemcpyDeviceToHost);
  cudaFree(buf);
}
int main() {
  double x[3] = {1, 2, 3}, dx[3] = {0}, out[3], dout[3] = {1, 1, 1};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_dup, out, dout, enzyme_const, 3);
}
""", "cudaMalloc stores the address it allocates into memory without a shadow"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_what_is_refused_says_so_in_one_line(enzcc, what):
    source, message = REFUSED[what]
    enzcc.write("r.cu", HEADER + source)
    proc = enzcc("-O2", "--cuda-host-emulation", "r.cu", "-o", "r", cmd="enzcc++", check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (enzcc.cwd / "r").exists()


@need("ptxas", "fatbinary")
def test_the_gpu_build_compiles(enzcc):
    """The same program for a real GPU (the derivative's runtime calls are CUDA's): it builds, and runs where a
    GPU is."""
    enzcc("-O2", PROGRAM, "-o", "cudart_gpu", cmd="enzcc++")
    assert (enzcc.cwd / "cudart_gpu").exists()
    try:
        gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    except OSError:
        gpu = False
    if gpu:
        assert enzcc.run("./cudart_gpu").stdout.splitlines() == [f"{c}: ok" for c in CASES]
