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


# -- warp shuffles ---------------------------------------------------------------------------------------------

def simulate_reverse(mode: str, b: int, c: int, d: list[float], members: int = 0xFFFFFFFF) -> list[float]:
    """What the reverse of ``shfl.sync.MODE(b, c)`` that the nvvm family emits adds to each lane's adjoint, on
    Python numbers: its plan's masks, one shuffle from the inverse lane or a butterfly sum per segment."""
    from enzcc.ad.calls.nvvm import _shuffle_plan

    plan = _shuffle_plan(mode, b, c)
    assert plan is not None, (mode, b, c)
    out = [d[j] if plan[1] >> j & 1 else 0.0 for j in range(32)]
    if plan[0] == "one":
        _, _, other, inverse = plan
        for j in range(32):
            src = inverse(j) & 31
            if other >> j & 1 and members >> src & 1:
                out[j] += d[src]
        return out
    _, _, movers, sources, width = plan
    total = [d[j] if movers >> j & 1 else 0.0 for j in range(32)]
    off = width // 2
    while off:
        total = [total[j] + total[j ^ off] for j in range(32)]
        off //= 2
    return [out[j] + (total[j] if sources >> j & 1 else 0.0) for j in range(32)]


CLAMPS = {"up": [0, 16 << 8, 24 << 8, 30 << 8], "down": [31, (16 << 8) | 31, (24 << 8) | 31, (28 << 8) | 31, 7],
          "bfly": [31, (16 << 8) | 31, (24 << 8) | 31, 15], "idx": [31, (16 << 8) | 31, (24 << 8) | 31, (30 << 8) | 31]}


@pytest.mark.parametrize("mode", ["up", "down", "bfly", "idx"])
def test_shuffle_adjoint_is_the_transpose_of_the_shuffle(mode):
    """For lane offsets 0..31 and the clamps CUDA's __shfl_*_sync passes (widths 32, 16, 8...) and a few others:
    the adjoint the reverse adds is the transpose of the data movement that PTX's rules give (every lane's
    adjoint goes back to the lane it read)."""
    from enzcc.ad.calls.nvvm import shuffle_sources

    d = [float(1 << j % 20) + j / 64 for j in range(32)]
    for c in CLAMPS[mode]:
        for b in range(32):
            src = shuffle_sources(mode, b, c)
            want = [0.0] * 32
            for lane in range(32):
                want[src[lane]] += d[lane]
            assert simulate_reverse(mode, b, c, d) == pytest.approx(want), (mode, b, c)


def test_shuffle_sources_follow_ptx():
    from enzcc.ad.calls.nvvm import shuffle_sources

    assert shuffle_sources("down", 1, 31)[:3] == [1, 2, 3] and shuffle_sources("down", 1, 31)[31] == 31
    assert shuffle_sources("up", 2, 0)[:3] == [0, 1, 0] and shuffle_sources("up", 2, 24 << 8)[8:11] == [8, 9, 8]
    assert shuffle_sources("bfly", 16, 31)[3] == 19 and shuffle_sources("bfly", 16, (16 << 8) | 31)[3] == 3
    assert shuffle_sources("idx", 3, (24 << 8) | 31)[8:16] == [11] * 8


def shuffle_kernel(ty: str, body: str) -> str:
    return f"""
__device__ void f(const {ty} *x, {ty} *out) {{
  {ty} v = x[threadIdx.x] * x[threadIdx.x];
  {body}
  out[threadIdx.x] = v;
}}
__global__ void grad(const {ty} *x, {ty} *dx, {ty} *out, {ty} *dout) {{
  __enzyme_autodiff((void *)f, x, dx, out, dout);
}}
__global__ void tang(const {ty} *x, {ty} *dx, {ty} *out, {ty} *dout) {{
  __enzyme_fwddiff((void *)f, x, dx, out, dout);
}}
"""


@pytest.mark.parametrize("ty", ["float", "double"])
def test_warp_reduction_differentiates_with_shuffles_outside_branches(enzcc, ty):
    """A warp's sum by __shfl_down_sync (a double: two 32-bit shuffles of its halves) then a broadcast: the
    gradient's adjoints come back by shuffles (idx: from the lane that read; a butterfly for the broadcast),
    every one executed by the whole warp (none moved into a branch); the tangent is the shuffles of tangents."""
    ptx = ptx_of(enzcc, shuffle_kernel(ty, """
  for (int k = 16; k > 0; k >>= 1) v += __shfl_down_sync(0xffffffffu, v, k);
  v = __shfl_sync(0xffffffffu, v, 0);"""))
    halves = 2 if ty == "double" else 1
    grad, tang = kernel(ptx, "grad"), kernel(ptx, "tang")
    shuffles = [x for x in grad if "shfl.sync" in x]
    assert sum("shfl.sync.idx" in x for x in shuffles) >= 5 * halves  # the five levels' adjoints back
    assert sum("shfl.sync.bfly" in x for x in shuffles) == 5 * halves  # the broadcast's sum over the warp
    assert not any(re.match(r"\s*@%p\d+ bra", x) for x in grad), "a branch in the gradient: shuffles may diverge"
    assert sum("shfl.sync.down" in x for x in tang) == 2 * 5 * halves  # the values' and the tangents'


@pytest.mark.parametrize("ty", ["float", "double"])
def test_warp_shuffle_with_a_lane_known_only_at_run_time(enzcc, ty):
    """A lane offset computed at run time: each lane gathers the adjoints of the lanes that read it (a loop over the
    warp's lanes, shuffling each one's adjoint and source lane), made once per type."""
    ptx = ptx_of(enzcc, shuffle_kernel(ty, "v += __shfl_down_sync(0xffffffffu, v, (int)(x[0] > 0.0) + 1);"))
    gather = [x for x in ptx.splitlines() if re.match(r"\.func .*__enzcc_shfl_gather", x)] or \
        [x for x in kernel(ptx, "grad") if "shfl.sync.idx" in x]
    assert gather


def source_lane_function(kind: str):
    """:func:`enzcc.ad.calls.nvvm._source_lane` as a host function ``src(lane, b, c)`` (the lane id an argument)."""
    from enzcc.ad.calls.nvvm import _source_lane
    from enzcc.ir import IRBuilder, parse_module
    from enzcc.ir import types as T
    from enzcc.ir.function import Function

    module = parse_module("")
    fn = Function("src", T.FunctionType(T.i32, (T.i32, T.i32, T.i32)), ["lane", "b", "c"])
    module.add_function(fn)
    b = IRBuilder.at_end(fn.append_block("entry"))
    b.ret(_source_lane(b, kind, fn.args[1], fn.args[2]))
    text = re.sub(r"call i32 @llvm\.nvvm\.read\.ptx\.sreg\.laneid\(\)", "add i32 %lane, 0", str(module))
    return re.sub(r"declare i32 @llvm\.nvvm\.read\.ptx\.sreg\.laneid\(\)\n", "", text)


@pytest.mark.parametrize("kind", ["up", "down", "bfly", "idx"])
def test_source_lane_at_run_time_follows_ptx(kind):
    import ctypes

    from enzcc.ad.calls.nvvm import shuffle_sources
    from enzcc_testing import jit

    engine = jit(source_lane_function(kind))
    src = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)(
        engine.get_function_address("src"))
    for c in CLAMPS[kind] + [0x1f1f, (8 << 8) | 5]:
        for b in (0, 1, 2, 5, 16, 31, 37):
            assert [src(lane, b, c) for lane in range(32)] == shuffle_sources(kind, b, c), (kind, b, c)


def test_warp_shuffle_and_vote_of_integers_are_inactive(enzcc):
    ptx_of(enzcc, r"""
__device__ void f(const double *x, double *out) {
  int t = threadIdx.x;
  int n = __shfl_down_sync(0xffffffffu, t, 1) + (int)(__ballot_sync(0xffffffffu, x[t] > 0.0) & 3u);
  if (__all_sync(0xffffffffu, n >= 0)) out[t] = x[t] * n;
}
""" + KERNEL)


def test_device_global_written_by_differentiated_code_refused(enzcc):
    """A __device__ array is one for the whole device: each thread's call would zero its shadow while other
    threads use it (before, every thread memset it: a race)."""
    err = refused(enzcc, r"""
__device__ double g[64];
__device__ void f(const double *x, double *out) {
  int t = threadIdx.x;
  g[t] = x[t] * x[t];
  out[t] = g[t] * 2.0;
}
""" + KERNEL)
    assert "'g'" in err and "whole device" in err


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


def test_thread_indices_need_no_rule_fences_refused_in_reverse_mode(enzcc):
    body = r"""
__device__ void f(const double *x, double *out) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x + threadIdx.y * gridDim.x + warpSize;
  double v = x[i] * x[i];
  FENCE
  out[i] = v;
}
"""
    ptx_of(enzcc, body.replace("FENCE", "") + KERNEL)
    fence = "__threadfence(); __threadfence_block();"
    ptx_of(enzcc, body.replace("FENCE", fence) + KERNEL.replace("__enzyme_autodiff", "__enzyme_fwddiff"))
    err = refused(enzcc, body.replace("FENCE", fence) + KERNEL)
    assert "memory fence" in err and "llvm.nvvm.membar" in err
