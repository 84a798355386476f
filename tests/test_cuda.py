"""CUDA sources (``.cu``, ``-x cuda``, ``--lang cuda``): the device side through enzcc's pipeline into PTX and a fat
binary, the host side a native object embedding it, the link with the CUDA runtime. Programs run only where a GPU
is (the host emulation's tests check gradients without one)."""

from __future__ import annotations

import os
import subprocess

import pytest

from enzcc_testing import need
from enzcc.tools import cuda_path

pytestmark = [need("clang-22", "ptxas", "fatbinary"),
              pytest.mark.skipif(cuda_path(required=False) is None, reason="needs the CUDA toolkit")]

SAXPY = r"""
#include <cstdio>
#include "scale.h"
__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = SCALE * a * x[i] + y[i];
}
int main() {
  const int n = 1000;
  float h[n], *x, *y;
  for (int i = 0; i < n; i++) h[i] = i;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
  cudaMemcpy(y, h, sizeof h, cudaMemcpyHostToDevice);
  saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, x, y);
  cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
  printf("%g %g\n", h[1], h[999]);
  return 0;
}
"""

#: Enzyme's CUDA idiom: markers are device variables, a kernel differentiates a __device__ function
GRADIENT = r"""
__device__ int enzyme_dup;
__device__ int enzyme_const;
template <typename... T> __device__ void __enzyme_autodiff(void *, T...);
__device__ void sq(const double *x, double *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * x[i] * 3.0;
}
__global__ void dsq(const double *x, double *dx, double *y, double *dy, int n) {
  __enzyme_autodiff((void *)sq, enzyme_dup, x, dx, enzyme_dup, y, dy, enzyme_const, n);
}
"""


def have_gpu() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    except OSError:
        return False


def test_cu_source_compiles_links_and_runs_where_a_gpu_is(enzcc):
    enzcc.write("k.cu", SAXPY)
    enzcc.write("scale.h", "#define SCALE 1\n")
    enzcc("-O2", "-c", "k.cu", "-o", "k.o", "-MD", cmd="enzcc++")
    obj = (enzcc.cwd / "k.o").read_bytes()
    assert b".nv_fatbin" in obj and b"__cudaRegisterFunction" in obj  # the device code, registered
    assert "scale.h" in (enzcc.cwd / "k.d").read_text()  # dependency files as for C++
    enzcc("-O2", "k.o", "-o", "k", cmd="enzcc++")
    enzcc("-O2", "k.cu", "-o", "k2")  # one step, and through enzcc (not enzcc++): the link is C++'s
    # a .cu on the link line gets the command's -I, -O and GPU architecture
    enzcc.write("inc/scale.h", "#define SCALE 1\n")
    (enzcc.cwd / "scale.h").unlink()
    enzcc("-O2", "-Iinc", "--cuda-gpu-arch=sm_80", "k.cu", "-o", "k3")
    exe = (enzcc.cwd / "k3").read_bytes()
    assert b"-arch sm_80" in exe and b"-arch sm_90" not in exe
    if have_gpu():
        assert enzcc.run("./k").stdout == "3 2997\n"
        assert enzcc.run("./k2").stdout == "3 2997\n"


def test_s_gives_the_device_sides_ptx_and_the_gpu_arch_reaches_the_frontend(enzcc):
    enzcc.write("a.cu", "__global__ void add(double *y, const double *x) { atomicAdd(y, x[threadIdx.x]); }\n")
    # double atomicAdd exists from sm_60: the architecture must reach clang's device compile
    enzcc("-O2", "-S", "--cuda-gpu-arch=sm_80", "a.cu", "-o", "a.ptx")
    ptx = (enzcc.cwd / "a.ptx").read_text()
    assert ".target sm_80" in ptx and ".entry _Z3addPdPKd" in ptx and ".add.f64" in ptx
    enzcc("-O2", "-S", "a.cu")  # default name, default architecture
    assert ".target sm_90" in (enzcc.cwd / "a.ptx").read_text()
    enzcc("-O2", "-S", "-emit-llvm", "a.cu", "-o", "a.ll")
    assert 'target triple = "nvptx64-nvidia-cuda"' in (enzcc.cwd / "a.ll").read_text()


def test_x_cuda_and_lang_cuda(enzcc):
    enzcc.write("k.cc", "__global__ void k(float *y) { y[threadIdx.x] = 1; }\n")
    enzcc("-x", "cuda", "-S", "k.cc", "-o", "x.ptx")
    enzcc("--lang", "cuda", "-S", "k.cc", "-o", "l.ptx")
    for name in ("x.ptx", "l.ptx"):
        assert ".entry _Z1kPf" in (enzcc.cwd / name).read_text()


def test_a_kernel_differentiates_a_device_function_with_device_markers(enzcc):
    enzcc.write("g.cu", GRADIENT)
    enzcc("-O2", "-S", "-emit-llvm", "g.cu", "-o", "g.ll")
    text = (enzcc.cwd / "g.ll").read_text()
    assert "__enzyme_autodiff" not in text
    kernel = text[text.index("@_Z3dsqPKdPdS1_S1_i("):]
    kernel = kernel[:kernel.index("\n}\n")]
    # d(3x^2)/dx = 6x: dy * 3 * x, doubled, added into dx; dy zeroed
    assert "3.000000e+00" in kernel and "fadd" in kernel and "store double 0.000000e+00" in kernel
    enzcc("-O2", "-c", "g.cu", "-o", "g.o")  # and ptxas, fatbinary, the host side


def test_errors_are_one_line_with_the_location_and_leave_nothing_behind(enzcc, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    enzcc.write("bad.cu", "__global__ void k(float *y) {\n  y[0] = undeclared;\n}\n")
    proc = enzcc("-c", "bad.cu", "-o", "bad.o", check=False, env=env)
    assert proc.returncode != 0 and "bad.cu:2:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (enzcc.cwd / "bad.o").exists() and not list(tmp.iterdir())
    enzcc.write("k.cu", "__global__ void k(float *y) { y[0] = 1; }\n")
    for flags, message in ((["--cuda-host-only"], "builds both sides"),
                           (["--cuda-gpu-arch=sm_80", "--cuda-gpu-arch=sm_90"], "one GPU architecture"),
                           (["--cuda-gpu-arch=gfx90a"], "NVIDIA GPUs")):
        proc = enzcc("-c", *flags, "k.cu", "-o", "k.o", check=False, env=env)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
        assert not (enzcc.cwd / "k.o").exists() and not list(tmp.iterdir())


def test_cuda_path_names_the_toolkit(enzcc):
    enzcc.write("k.cu", "__global__ void k(float *y) { y[0] = 1; }\n")
    enzcc("-S", f"--cuda-path={cuda_path()}", "k.cu", "-o", "k.ptx")
    proc = enzcc("-S", "--cuda-path=/nonexistent", "k.cu", "-o", "k2.ptx", check=False)
    assert proc.returncode != 0 and "/nonexistent" in proc.stderr and "Traceback" not in proc.stderr
    assert os.path.exists(enzcc.cwd / "k.ptx") and not os.path.exists(enzcc.cwd / "k2.ptx")


def test_cuda_gpu_arch_reaches_a_c_kernels_frontend(enzcc):
    """C for NVPTX: the SM's builtins (sm_60's double atomic add) need the architecture in clang's compile."""
    enzcc.write("at.c", "__attribute__((nvptx_kernel)) void add(double *y, const double *x) {\n"
                        "  __nvvm_atom_add_gen_d(y, x[__nvvm_read_ptx_sreg_tid_x()]);\n}\n")
    enzcc("--target=nvptx64-nvidia-cuda", "--cuda-gpu-arch=sm_80", "-O2", "-S", "at.c", "-o", "at.ptx")
    ptx = (enzcc.cwd / "at.ptx").read_text()
    assert ".target sm_80" in ptx and "atom.global.add.f64" in ptx


def test_one_command_builds_a_cu_program_whose_kernel_gradients_match_finite_differences(enzcc):
    """The GPU issue's program: a kernel differentiates a __device__ function with a loop (a device tape), libdevice
    math, shared memory with a barrier, several threads reading one input and an atomicAdd, in reverse and forward
    mode; built with one enzcc++ command, its kernels run on the CPU (--cuda-host-emulation: no GPU here) in each
    thread order, and the program compares its gradients with finite differences itself."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda", "gradient.cu")
    enzcc("-O2", "--cuda-host-emulation", src, "-o", "g", cmd="enzcc++")
    for order in ("forward", "reverse", "shuffle:1", "shuffle:2"):
        out = enzcc.run("./g", env={"ENZCC_CUDA_HOST_ORDER": order}).stdout
        assert out.endswith("ok\n") and "WRONG" not in out, (order, out)
    # -c, then the link: the same program from an object
    enzcc("-O2", "--cuda-host-emulation", "-c", src, "-o", "g.o", cmd="enzcc++")
    enzcc("--cuda-host-emulation", "g.o", "-o", "g2", cmd="enzcc++")
    assert enzcc.run("./g2").stdout.endswith("ok\n")
    if have_gpu():  # the same source for the GPU
        enzcc("-O2", src, "-o", "g_gpu", cmd="enzcc++")
        assert enzcc.run("./g_gpu").stdout.endswith("ok\n")


@pytest.mark.parametrize("level", ["-O0", "-O2"])
def test_split_mode_in_a_kernel(enzcc, level):
    """__enzyme_augmentfwd / __enzyme_reverse in device code: the tape in the device heap, the reverse's run-time
    check (a tape serves one reverse call) as device printf and a trap, which ptxas accepts (write and abort are
    not there on a GPU); the gradient checked on the CPU."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda", "split.cu")
    enzcc(level, "-S", src, "-o", "split.ptx")  # (enzcc runs ptxas on it)
    ptx = (enzcc.cwd / "split.ptx").read_text()
    assert "write" not in ptx and "abort" not in ptx
    if level == "-O0":
        assert "trap;" in ptx and "vprintf" in ptx
    enzcc(level, "--cuda-host-emulation", src, "-o", "split", cmd="enzcc++")
    assert enzcc.run("./split").stdout.endswith("ok\n")


def test_other_gpus_are_refused_in_one_line(enzcc):
    """AMD GPUs' barriers, LDS memory and address spaces have no rules: differentiating such code is refused,
    never a derivative that misses a barrier."""
    enzcc.write("amd.c", "extern int enzyme_dup;\nvoid __enzyme_autodiff(void*, ...);\n"
                         "void f(double *x, double *y) {\n  int t = __builtin_amdgcn_workitem_id_x();\n"
                         "  y[t] = x[t] * x[t];\n  __builtin_amdgcn_s_barrier();\n  y[t] += x[(t + 1) % 64];\n}\n"
                         "__attribute__((amdgpu_kernel)) void df(double *x, double *dx, double *y, double *dy) {\n"
                         "  __enzyme_autodiff((void*)f, enzyme_dup, x, dx, enzyme_dup, y, dy);\n}\n")
    proc = enzcc("--target=amdgcn-amd-amdhsa", "-march=gfx90a", "-O2", "-S", "amd.c", "-o", "amd.s", check=False)
    assert proc.returncode != 0 and "NVIDIA GPUs" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (enzcc.cwd / "amd.s").exists()


def test_gpu_derivatives_compute_math_again_rather_than_tape_it(enzcc):
    """In GPU code a tape is device memory every thread fills: the N-body gradient's loop (its values are loads of
    read-only memory and math on them: rsqrt, products) is computed again in the reverse sweep, with no tape (no
    device malloc); the same code on the CPU keeps its tape choices."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "gpu", "nbody.cu")
    enzcc("-O3", "-S", src, "-o", "nbody.ptx")
    ptx = (enzcc.cwd / "nbody.ptx").read_text()
    gradient = ptx[ptx.index(".entry _Z8gradient"):]
    assert "malloc" not in gradient and "rsqrt" in gradient


def test_host_code_differentiated_beside_a_gpu_architecture(enzcc):
    """Host code that calls __enzyme_autodiff (cudart.cu: cudaMemcpy with shadows) is rebuilt at the link for the
    host's CPU (-march), never for the GPU architecture of --cuda-gpu-arch ('unknown target CPU sm_80')."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda", "cudart.cu")
    enzcc("-O2", "--cuda-gpu-arch=sm_80", src, "-o", "c", cmd="enzcc++")
    enzcc("-O2", "--cuda-gpu-arch=sm_80", "-march=x86-64-v2", src, "-o", "c2", cmd="enzcc++")
