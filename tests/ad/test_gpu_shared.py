"""Kernel derivatives with ``__shared__`` memory and barriers, and the NVVM intrinsics family
(``enzcc/ad/calls/nvvm.py``), checked on the PTX enzcc makes for ``sm_90`` (no GPU needed): the shadow of a shared
array lives in shared memory, the block's threads zero it together and wait at a barrier before using it, the
reverse sweep mirrors each barrier of the primal, ptxas accepts the code; and the one-line refusals."""

from __future__ import annotations

import re
import subprocess

import pytest

from enzcc_testing import need
from enzcc.ad.rules import load_rules
from enzcc.tools import cuda_path

pytestmark = [need("clang-22", "ptxas"),
              pytest.mark.skipif(cuda_path(required=False) is None, reason="needs the CUDA toolkit")]

API = r"""
extern "C" __device__ void __enzyme_autodiff(void *, ...);
extern "C" __device__ void __enzyme_fwddiff(void *, ...);
"""

#: a block's sum of squares: load into shared memory, barrier, tree reduction with a barrier per level (unrolled:
#: a fixed block size, so the derivative keeps no tape), thread 0 writes the block's sum
REDUCTION = r"""
#define N 64
__device__ void blocksum(const double *x, double *out) {
  __shared__ double s[N];
  int t = threadIdx.x;
  double v = x[blockIdx.x * N + t];
  s[t] = v * v;
  __syncthreads();
#pragma unroll
  for (int k = N / 2; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
__global__ void primal(const double *x, double *out) { blocksum(x, out); }
"""
PRIMAL_BARRIERS = 7  # one after the load, one per level of 64 -> 1

GRAD = r"""
__global__ void grad(const double *x, double *dx, double *out, double *dout) {
  __enzyme_autodiff((void *)blocksum, x, dx, out, dout);
}
"""
TANGENT = r"""
__global__ void tang(const double *x, double *dx, double *out, double *dout) {
  __enzyme_fwddiff((void *)blocksum, x, dx, out, dout);
}
"""

BARRIER = re.compile(r"^\s*(bar\.sync|barrier\.sync)\b")


def ptx_of(enzcc, source: str, *extra: str) -> str:
    """The PTX enzcc makes of a CUDA source for sm_90 (checked with ptxas here too)."""
    enzcc.write("k.cu", API + source)
    enzcc("-O2", "--cuda-gpu-arch=sm_90", "-S", "k.cu", "-o", "k.ptx", *extra)
    proc = subprocess.run(["ptxas", "-arch=sm_90", "k.ptx", "-o", "/dev/null"], cwd=enzcc.cwd, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    return (enzcc.cwd / "k.ptx").read_text()


def kernel(ptx: str, name: str) -> list[str]:
    """The lines of the body of kernel ``name`` (its mangled name contains ``name``)."""
    m = re.search(r"\.entry (\w*" + name + r"\w*)\(", ptx)
    assert m, f"no kernel {name}"
    body = ptx[m.end():]
    return body[:body.index("\n}")].splitlines()


def barriers(lines: list[str]) -> int:
    return sum(1 for x in lines if BARRIER.match(x))


def shadow_declaration(ptx: str) -> str:
    decls = [x for x in ptx.splitlines() if "__enzcc_shadow" in x and re.match(r"\s*\.(shared|global)\b", x)]
    assert len(decls) == 1, decls
    return decls[0]


def check_zeroing_then_barrier(lines: list[str]) -> None:
    """The first store into shared memory is the shadow's zeroing (a loop, ``st.shared... 0``); after the loop, a
    barrier comes before any other shared memory access."""
    first = next(i for i, x in enumerate(lines) if re.search(r"\bst\.shared\.\w+\s+\[[^\]]+\],\s*0;", x))
    assert not any(re.search(r"\b(ld|st)\.shared", x) for x in lines[:first]), "a shared access before the zeroing"
    back = next(i for i in range(first, len(lines)) if re.search(r"\bbra\b", lines[i]))  # the loop's back edge
    nxt = next(i for i in range(back + 1, len(lines)) if re.search(r"\b(ld|st)\.shared", lines[i]))
    assert any(BARRIER.match(x) for x in lines[back + 1:nxt]), "no barrier between the zeroing and the first use"
    assert any(BARRIER.match(x) for x in lines[:first]), "no barrier before the zeroing (an earlier call's readers)"


def test_reverse_mode_shadow_in_shared_memory_and_barriers_mirrored(enzcc):
    ptx = ptx_of(enzcc, REDUCTION + GRAD)
    assert shadow_declaration(ptx).lstrip().startswith(".shared"), shadow_declaration(ptx)
    assert barriers(kernel(ptx, "primal")) == PRIMAL_BARRIERS
    grad = kernel(ptx, "grad")
    # the forward sweep's barriers, one mirrored in the reverse sweep for each, and the two around the zeroing
    assert barriers(grad) == 2 * PRIMAL_BARRIERS + 2
    check_zeroing_then_barrier(grad)
    # the reverse sweep adds adjoints into the shadow in shared memory, not in global memory
    assert any(re.search(r"\b(st|atom|red)\.shared.*__enzcc_shadow", x) for x in grad)


def test_forward_mode_tangent_in_shared_memory(enzcc):
    ptx = ptx_of(enzcc, REDUCTION + TANGENT)
    assert shadow_declaration(ptx).lstrip().startswith(".shared"), shadow_declaration(ptx)
    tang = kernel(ptx, "tang")
    assert barriers(tang) == PRIMAL_BARRIERS + 2  # the primal's, and the two around the zeroing
    check_zeroing_then_barrier(tang)
    stores = [x for x in tang if re.search(r"\bst\.shared\.", x) and not re.search(r",\s*0;", x)]
    assert len(stores) >= 2 * 2, stores  # the first level's value and tangent at least, both in shared memory


def test_barrier_in_a_loop_is_mirrored_in_the_reverse_loop(enzcc):
    """A tree reduction over the block's size (a loop): the reverse loop holds a barrier too (on the module after
    AD: its tape is device heap memory)."""
    enzcc.write("k.cu", API + REDUCTION.replace("#pragma unroll", "#pragma nounroll").replace(
        "k = N / 2", "k = blockDim.x / 2") + GRAD)
    enzcc("-O2", "--cuda-gpu-arch=sm_90", "-S", "-emit-llvm", "k.cu", "-o", "k.ll")
    ir = (enzcc.cwd / "k.ll").read_text()
    grad = ir[ir.index("@_Z4grad"):]
    grad = grad[:grad.index("\n}\n")]
    assert "addrspace(3) global" in ir.split("@__enzcc_shadow", 1)[1].split("\n", 1)[0]
    assert grad.count("call void @llvm.nvvm.barrier.cta.sync.aligned.all") == 2 + 2 + 2  # primal, reverse, zeroing


def test_two_shared_arrays_one_zeroing_between_the_same_two_barriers(enzcc):
    src = r"""
__device__ void f(const double *x, double *out) {
  __shared__ double a[32];
  __shared__ float b[32];
  int t = threadIdx.x;
  a[t] = x[t] * x[t];
  b[t] = (float)x[t];
  __syncthreads();
  if (t == 0) out[0] = a[31] * b[30];
}
__global__ void grad(const double *x, double *dx, double *out, double *dout) {
  __enzyme_autodiff((void *)f, x, dx, out, dout);
}
"""
    ptx = ptx_of(enzcc, src)
    decls = [x for x in ptx.splitlines() if "__enzcc_shadow" in x and x.lstrip().startswith(".")]
    assert len(decls) == 2 and all(x.lstrip().startswith(".shared") for x in decls), decls
    assert barriers(kernel(ptx, "grad")) == 2 * 1 + 2


def test_nvvm_float_intrinsics_differentiate_to_valid_ptx(enzcc):
    """NVVM's rounding-mode and approximate arithmetic in the differentiated code: both modes make code ptxas
    accepts, the derivative of the approximate sine calls the approximate cosine (llvm.cos.f32 has no code on
    NVPTX)."""
    src = r"""
__device__ void f(const double *x, double *out) {
  double a = x[0], b = x[1], c = x[2];
  double r = __nvvm_mul_rn_d(a, c) + __nvvm_add_rn_d(a, b) + __nvvm_rsqrt_approx_d(b) + __nvvm_fma_rn_d(a, b, c);
  float fa = (float)a;
  float g = __nvvm_sin_approx_f(fa) + __nvvm_ex2_approx_f(fa) + __nvvm_lg2_approx_f(fa + 2.0f) + __nvvm_d2f_rn(b);
  out[0] = r + g;
}
__global__ void grad(const double *x, double *dx, double *out, double *dout) {
  __enzyme_autodiff((void *)f, x, dx, out, dout);
}
__global__ void tang(const double *x, double *dx, double *out, double *dout) {
  __enzyme_fwddiff((void *)f, x, dx, out, dout);
}
"""
    ptx = ptx_of(enzcc, src)
    assert any("cos.approx.f32" in x for x in kernel(ptx, "grad"))
    assert any("cos.approx.f32" in x for x in kernel(ptx, "tang"))


def test_nvvm_spellings_take_the_rules_of_their_functions():
    table = load_rules()
    for name, rule in {"llvm.nvvm.fma.rn.d": "fma", "llvm.nvvm.fma.rz.ftz.f": "fma", "llvm.nvvm.mul.rn.d": "fmul",
                       "llvm.nvvm.add.rm.f": "fadd", "llvm.nvvm.div.approx.ftz.f": "fdiv",
                       "llvm.nvvm.sqrt.rn.d": "sqrt", "llvm.nvvm.rsqrt.approx.d": "rsqrt", "llvm.nvvm.rcp.rn.d": "rcp",
                       "llvm.nvvm.fabs.ftz.f32": "fabs", "llvm.nvvm.fmin.d": "fmin", "llvm.nvvm.fmax.ftz.f": "fmax",
                       "llvm.nvvm.ex2.approx.ftz.f32": "exp2", "llvm.nvvm.lg2.approx.d": "log2",
                       "llvm.nvvm.saturate.f": "saturate", "llvm.nvvm.floor.d": "floor"}.items():
        assert table.for_call(name) is not None and table.for_call(name).name == rule, name
    # (the saturated and relu variants compute something else: no rule)
    assert table.for_call("llvm.nvvm.fma.rn.sat.f") is None and table.for_call("llvm.nvvm.fma.rn.relu.bf16") is None


# -- refusals: one line, no traceback ---------------------------------------------------------------------

def refused(enzcc, source: str) -> str:
    enzcc.write("k.cu", API + source)
    proc = enzcc("-O2", "--cuda-gpu-arch=sm_90", "-S", "k.cu", "-o", "k.ptx", check=False)
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


KERNEL = r"""
__global__ void grad(const double *x, double *dx, double *out, double *dout) {
  __enzyme_autodiff((void *)f, x, dx, out, dout);
}
"""


def test_dynamic_shared_memory_refused(enzcc):
    err = refused(enzcc, r"""
__device__ void f(const double *x, double *out) {
  extern __shared__ double s[];
  int t = threadIdx.x;
  s[t] = x[t] * x[t];
  __syncthreads();
  if (t == 0) out[0] = s[0] + s[1];
}
""" + KERNEL)
    assert "dynamic shared memory" in err and "'s'" in err


@pytest.mark.parametrize("ty", ["float", "double"])
def test_warp_shuffle_of_a_value_with_derivatives_refused(enzcc, ty):
    """A float is shuffled as it is, a double as two 32-bit halves of its bits: both refused (the halves lost
    the derivative silently before)."""
    err = refused(enzcc, f"""
__device__ void f(const {ty} *x, {ty} *out) {{
  {ty} v = x[threadIdx.x] * x[threadIdx.x];
  for (int k = 16; k > 0; k >>= 1) v += __shfl_down_sync(0xffffffffu, v, k);
  if (threadIdx.x == 0) out[0] = v;
}}
__global__ void grad(const {ty} *x, {ty} *dx, {ty} *out, {ty} *dout) {{
  __enzyme_autodiff((void *)f, x, dx, out, dout);
}}
""")
    assert "llvm.nvvm.shfl.sync.down" in err and "warp shuffle" in err


def test_warp_shuffle_and_vote_of_integers_are_inactive(enzcc):
    ptx_of(enzcc, r"""
__device__ void f(const double *x, double *out) {
  int t = threadIdx.x;
  int n = __shfl_down_sync(0xffffffffu, t, 1) + (int)(__ballot_sync(0xffffffffu, x[t] > 0.0) & 3u);
  if (__all_sync(0xffffffffu, n >= 0)) out[t] = x[t] * n;
}
""" + KERNEL)


def test_bits_of_a_double_refused(enzcc):
    err = refused(enzcc, r"""
__device__ void f(const double *x, double *out) {
  double v = x[0] * x[0];
  out[0] = __nvvm_lohi_i2d(__nvvm_d2i_lo(v), __nvvm_d2i_hi(v));
}
""" + KERNEL)
    assert ("llvm.nvvm.d2i." in err or "llvm.nvvm.lohi.i2d" in err) and "bits" in err


def test_other_nvvm_calls_on_values_with_derivatives_refused_by_name(enzcc):
    err = refused(enzcc, r"""
__device__ void f(const double *x, double *out) {
  out[0] = __nvvm_ldu_d(x) * 2.0;
}
""" + KERNEL)
    assert "llvm.nvvm.ldu" in err


def test_thread_indices_and_fences_need_no_rule(enzcc):
    ptx_of(enzcc, r"""
__device__ void f(const double *x, double *out) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x + threadIdx.y * gridDim.x + warpSize;
  double v = x[i] * x[i];
  __threadfence();
  __threadfence_block();
  out[i] = v;
}
""" + KERNEL)
