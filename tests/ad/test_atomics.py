"""Atomics (:mod:`enzcc.ad.atomics`, :mod:`enzcc.ad.threads`): ``atomicrmw fadd``/``fsub`` in the primal get
their derivative in reverse, forward, split and vector mode (C11 ``__atomic_*``, ``#pragma omp atomic``, float
and double, a local target, atomic loads and stores), against analytic values and central differences; what has
no derivative is one line (a used result, exchange, max, compare-and-exchange loops); integer atomics on data
without derivatives stay as they are. GPU code (no GPU here: the PTX text): an adjoint added to memory other
threads may add to is an atomic add, one added to the thread's own element is not, and ``atomicAdd`` has a
derivative; ``ptxas`` accepts every kernel."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

# Each function f(x, y) reads x[NX] and updates y[NY]. For L = sum w_k y_k (final), the reverse gradient (seed
# dy = w) is compared with central differences of L in every x_j and every initial y_k; forward mode's tangent
# of L along (vx, vy) with the directional difference; split mode (augmented primal, then reverse) and vector
# mode (width 2: lane 1 seeded with 2 w) with the same differences.
PROGRAM = r"""
extern int enzyme_width;
void *__enzyme_augmentfwd_v(void *, ...);
void __enzyme_reverse_v(void *, ...);
void __enzyme_autodiff_v(void *, ...);
void __enzyme_fwddiff_v(void *, ...);
#define NX 3
#define NY 3

static long calls;  /* an integer counter: atomics on data without derivatives stay as they are */

void acc(double *x, double *y) {
  for (int i = 0; i < NX; i++) __atomic_fetch_add(y, x[i] * x[i], __ATOMIC_RELAXED);
  __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
}
/* fsub (seq_cst) into y[0], an atomic add into a local whose value is used after, a compare-only use of the
   value an add returns */
void mixed(double *x, double *y) {
  double s = 0;
  for (int i = 0; i < NX; i++) {
    __atomic_fetch_sub(&y[0], sin(x[i]) * y[2], __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&s, x[i] * (i + 1), __ATOMIC_RELAXED);
  }
  double old = __atomic_fetch_add(&y[1], s * s, __ATOMIC_ACQ_REL);
  if (old > 1e6) y[2] = 0;
}
/* atomic stores and loads of doubles (moved as integers by clang) */
void store_load(double *x, double *y) {
  double v = x[0] * x[1], r;
  __atomic_load(&y[1], &r, __ATOMIC_ACQUIRE);
  __atomic_store(&y[0], &v, __ATOMIC_RELEASE);
  y[2] = r * v + x[2];
}
/* floats */
void flt(float *x, float *y) {
  for (int i = 0; i < NX; i++) __atomic_fetch_add(&y[i % 2], x[i] * x[i] * x[i], __ATOMIC_RELAXED);
}
static void flt_d(double *x, double *y) {  /* flt seen in doubles (for the differences) */
  float xf[NX], yf[NY];
  for (int i = 0; i < NX; i++) xf[i] = (float)x[i];
  for (int i = 0; i < NY; i++) yf[i] = (float)y[i];
  flt(xf, yf);
  for (int i = 0; i < NY; i++) y[i] = yf[i];
}

static const double X0[NX] = {1, 2, 3}, Y0[NY] = {0.5, -0.25, 0.75}, W[NY] = {1, 0.5, -2};
static const double VX[NX] = {0.3, -0.2, 0.1}, VY[NY] = {0.05, 0.4, -0.3};

static double loss(void (*f)(double *, double *), const double *dir, int j, double h) {
  double x[NX], y[NY], l = 0;
  for (int i = 0; i < NX; i++) x[i] = X0[i] + h * (dir ? dir[i] : i == j);
  for (int i = 0; i < NY; i++) y[i] = Y0[i] + h * (dir ? dir[NX + i] : NX + i == j);
  f(x, y);
  for (int i = 0; i < NY; i++) l += W[i] * y[i];
  return l;
}

static void differences(const char *name, void (*f)(double *, double *), double h) {
  char k[48];
  double dir[NX + NY];
  for (int j = 0; j < NX + NY; j++) {
    snprintf(k, sizeof k, "fd.%s.%d", name, j);
    report(k, (loss(f, 0, j, h) - loss(f, 0, j, -h)) / (2 * h));
  }
  for (int i = 0; i < NX; i++) dir[i] = VX[i];
  for (int i = 0; i < NY; i++) dir[NX + i] = VY[i];
  snprintf(k, sizeof k, "fdd.%s", name);
  report(k, (loss(f, dir, 0, h) - loss(f, dir, 0, -h)) / (2 * h));
}

static void grads(const char *mode, const char *name, const double *dx, const double *dy, double scale) {
  char k[48];
  for (int j = 0; j < NX + NY; j++) {
    snprintf(k, sizeof k, "%s.%s.%d", mode, name, j);
    report(k, (j < NX ? dx[j] : dy[j - NX]) / scale);
  }
}

#define CHECK(T, f)                                                                              \
  do {                                                                                          \
    T x[NX], y[NY], dx[NX], dy[NY], dx2[NX], dy2[NY];                                           \
    double gx[NX], gy[NY], t = 0;                                                               \
    for (int i = 0; i < NX; i++) { x[i] = X0[i]; dx[i] = 0; dx2[i] = 0; }                         \
    for (int i = 0; i < NY; i++) { y[i] = Y0[i]; dy[i] = W[i]; dy2[i] = 2 * W[i]; }               \
    __enzyme_autodiff((void *)f, x, dx, y, dy);                                                 \
    for (int i = 0; i < NX; i++) gx[i] = dx[i];                                                 \
    for (int i = 0; i < NY; i++) gy[i] = dy[i];                                                 \
    grads("rev", #f, gx, gy, 1);                                                                \
    for (int i = 0; i < NX; i++) { x[i] = X0[i]; dx[i] = VX[i]; }                                 \
    for (int i = 0; i < NY; i++) { y[i] = Y0[i]; dy[i] = VY[i]; }                                 \
    __enzyme_fwddiff((void *)f, x, dx, y, dy);                                                  \
    for (int i = 0; i < NY; i++) t += W[i] * dy[i];                                             \
    report("fwd." #f, t);                                                                       \
    for (int i = 0; i < NX; i++) { x[i] = X0[i]; dx[i] = 0; }                                     \
    for (int i = 0; i < NY; i++) { y[i] = Y0[i]; dy[i] = W[i]; }                                  \
    void *tape = __enzyme_augmentfwd_v((void *)f, x, dx, y, dy);                                \
    __enzyme_reverse_v((void *)f, x, dx, y, dy, tape);                                          \
    for (int i = 0; i < NX; i++) gx[i] = dx[i];                                                 \
    for (int i = 0; i < NY; i++) gy[i] = dy[i];                                                 \
    grads("split", #f, gx, gy, 1);                                                              \
    for (int i = 0; i < NX; i++) { x[i] = X0[i]; dx[i] = 0; }                                     \
    for (int i = 0; i < NY; i++) { y[i] = Y0[i]; dy[i] = W[i]; }                                  \
    __enzyme_autodiff_v((void *)f, enzyme_width, 2, x, dx, dx2, y, dy, dy2);                    \
    for (int i = 0; i < NX; i++) gx[i] = dx2[i];                                                \
    for (int i = 0; i < NY; i++) gy[i] = dy2[i];                                                \
    grads("vec", #f, gx, gy, 2);                                                                \
  } while (0)

int main(void) {
  CHECK(double, acc);
  report("calls", calls);
  CHECK(double, mixed);
  CHECK(double, store_load);
  CHECK(float, flt);
  differences("acc", acc, 1e-6);
  differences("mixed", mixed, 1e-6);
  differences("store_load", store_load, 1e-6);
  differences("flt", flt_d, 1e-2);
  /* the example of the issue: dx = 2 4 6 */
  double x[3] = {1, 2, 3}, dx[3] = {0}, y = 0, dy = 1, tx[3] = {1, 0, 0}, ty = 0;
  __enzyme_autodiff((void *)acc, x, dx, &y, &dy);
  report("ex.dx0", dx[0]); report("ex.dx1", dx[1]); report("ex.dx2", dx[2]);
  __enzyme_fwddiff((void *)acc, x, tx, &y, &ty);
  report("ex.ty", ty);
  return 0;
}
"""


def _compare(v: dict, prefix: str, floats: bool, rel: float, abs_: float) -> None:
    """Each ``prefix.name.j`` against ``fd.name.j`` (the float function's, or the others)."""
    for key in [k for k in v if k.startswith(f"{prefix}.") and k.startswith(f"{prefix}.flt.") == floats]:
        name, j = key.split(".")[1:]
        want = v[f"fd.{name}.{j}"]
        assert abs(v[key] - want) <= abs_ + rel * abs(want), f"{key}={v[key]} vs fd {want}"


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_atomic_adds_in_every_mode(enzcc, opt):
    v = build_and_run(enzcc, PROGRAM, opt, extra=("-w",))
    assert (v["ex.dx0"], v["ex.dx1"], v["ex.dx2"], v["ex.ty"]) == (2, 4, 6, 2)
    for mode in ("rev", "split", "vec"):
        _compare(v, mode, False, 1e-6, 1e-8)
        _compare(v, mode, True, 2e-3, 1e-4)
    for name in ("acc", "mixed", "store_load"):
        assert abs(v[f"fwd.{name}"] - v[f"fdd.{name}"]) <= 1e-8 + 1e-6 * abs(v[f"fdd.{name}"]), name
    assert abs(v["fwd.flt"] - v["fdd.flt"]) <= 1e-4 + 2e-3 * abs(v["fdd.flt"])
    # analytic: acc's dx = 2 x w0 (dy unchanged: an add keeps the adjoint)
    assert [v[f"rev.acc.{j}"] for j in range(6)] == [2, 4, 6, 1, 0.5, -2]
    assert v["calls"] == 4  # (the primal's counter: once in each derivative that runs the primal, not in a reverse)


OPENMP = r"""
#include <omp.h>
/* #pragma omp atomic updates of shared doubles from a parallel loop (fadd and fsub) */
void f(double *x, double *y, int n) {
  #pragma omp parallel for
  for (int i = 0; i < n; i++) {
    double v = x[i] * x[i] * (i + 1);
    #pragma omp atomic
    y[0] += v;
    #pragma omp atomic
    y[1] -= sin(x[i]);
  }
}
int main(void) {
  enum { N = 64 };
  double x[N], dx[N], y[2] = {0.5, 0.25}, dy[2] = {1.0, -3.0}, tx[N], ty[2] = {0.1, 0.2};
  for (int i = 0; i < N; i++) { x[i] = 0.01 * i - 0.2; dx[i] = 0; tx[i] = 0.001 * (i % 7) - 0.002; }
  __enzyme_autodiff((void *)f, x, dx, y, dy, N);
  double fwd = 0, want_fwd = 0.1 + 0.2;
  for (int i = 0; i < N; i++) {
    char k[16];
    snprintf(k, 16, "ad.x%d", i); report(k, dx[i]);
    snprintf(k, 16, "an.x%d", i); report(k, 2 * x[i] * (i + 1) * 1.0 + 3.0 * cos(x[i]));
    want_fwd += (2 * x[i] * (i + 1) - cos(x[i])) * tx[i];
  }
  report("ad.y0", dy[0]); report("an.y0", 1.0); report("ad.y1", dy[1]); report("an.y1", -3.0);
  y[0] = 0.5; y[1] = 0.25;
  __enzyme_fwddiff((void *)f, x, tx, y, ty, N);
  report("ad.fwd", ty[0] + ty[1]); report("an.fwd", want_fwd);
  return 0;
}
"""


def test_openmp_atomic_updates(enzcc):
    v = build_and_run(enzcc, OPENMP, "-O2", extra=("-fopenmp", "-w"))
    assert_close(v, "ad.", "an.", rel=1e-12, abs_=1e-12)
    for threads in ("1", "4"):
        out = enzcc.run("./t", env={"OMP_NUM_THREADS": threads}).stdout
        w = {k: float(x) for k, x in (line.split() for line in out.splitlines())}
        assert_close(w, "ad.", "an.", rel=1e-12, abs_=1e-12)


FORWARD_SPLIT = r"""
void *__enzyme_augmentfwd(void *, ...);
double __enzyme_fwdsplit(void *, ...);
void f(double *x, double *y) { for (int i = 0; i < 3; i++) __atomic_fetch_sub(y, x[i] * x[i], __ATOMIC_RELAXED); }
int main(void) {
  double x[3] = {1, 2, 3}, y = 0.5, tx[3] = {1, 0.5, 0.25}, ty = 0.1;
  void *t = __enzyme_augmentfwd((void *)f, x, (double *)0, &y, (double *)0);
  report("y", y);
  __enzyme_fwdsplit((void *)f, x, tx, &y, &ty, t);
  report("ty", ty);
  return 0;
}
"""


def test_forward_split_mode(enzcc):
    v = build_and_run(enzcc, FORWARD_SPLIT, "-O2", extra=("-w",))
    assert v == pytest.approx({"y": 0.5 - 14, "ty": 0.1 - (2 * 1 * 1 + 2 * 2 * 0.5 + 2 * 3 * 0.25)}, rel=1e-14)


# a record with an integer counter and a double: an atomic increment of the counter, in memory with derivatives,
# is no float's bits (not refused); the double's atomic add has its derivative
RECORD = r"""
typedef struct { double v; long n; } rec;
void f(double *x, rec *r) {
  __atomic_fetch_add(&r->n, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&r->v, x[0] * x[1], __ATOMIC_RELAXED);
}
int main(void) {
  double x[2] = {3, 5}, dx[2] = {0}, t[2] = {1, 2};
  rec r = {1, 0}, dr = {1, 0}, tr = {0, 0};
  __enzyme_autodiff((void *)f, x, dx, &r, &dr);
  report("dx0", dx[0]); report("dx1", dx[1]); report("n", r.n); report("dv", dr.v);
  __enzyme_fwddiff((void *)f, x, t, &r, &tr);
  report("tv", tr.v); report("tn", tr.n);
  return 0;
}
"""


def test_integer_atomics_in_memory_with_derivatives(enzcc):
    v = build_and_run(enzcc, RECORD, "-O2")
    assert v == {"dx0": 5, "dx1": 3, "n": 1, "dv": 1, "tv": 5 + 2 * 3, "tn": 0}


REFUSALS = {
    "used": ("double f(double *x, double *y) { double o = __atomic_fetch_add(y, x[0], __ATOMIC_RELAXED); "
             "return o * x[1]; }", "the value an atomic add returns"),
    "xchg": ("void f(double *x, double *y) { double v = x[0] * x[1], old; "
             "__atomic_exchange(y, &v, &old, __ATOMIC_RELAXED); }", "atomicrmw xchg"),
    "fmax": ("void f(double *x, double *y) { __atomic_fetch_max(y, x[0], __ATOMIC_RELAXED); }", "atomicrmw fmax"),
    "cas": ("void f(double *x, double *y) { _Atomic double *a = (_Atomic double *)y; *a += x[0] * x[1]; }",
            "compare-and-exchange"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
@pytest.mark.parametrize("mode", ["__enzyme_autodiff", "__enzyme_fwddiff"])
def test_refusals(enzcc, case, mode):
    body, message = REFUSALS[case]
    src = PRELUDE + body + (f"\nint main(void) {{ double x[2] = {{1, 2}}, d[2] = {{0}}, y = 1, dy = 1; "
                            f"{mode}((void *)f, x, d, &y, &dy); return 0; }}\n")
    enzcc.write("r.c", src)
    r = enzcc("-O2", "-w", "r.c", "-lm", "-o", "r", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and message in r.stderr and "in function 'f'" in r.stderr, r.stderr
    assert not (enzcc.cwd / "r").exists()


def test_std_atomic_fetch_add_is_refused(enzcc):
    """libstdc++'s std::atomic<double>::fetch_add is a compare-and-exchange loop, not an atomicrmw fadd."""
    enzcc.write("a.cpp", r"""
#include <atomic>
extern int enzyme_dup;
void __enzyme_autodiff(void *, ...);
void f(double *x, std::atomic<double> *y) { y->fetch_add(x[0] * x[1], std::memory_order_relaxed); }
int main() {
  double x[2] = {1, 2}, dx[2] = {0};
  std::atomic<double> y{0}, dy{1};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_dup, &y, &dy);
}
""")
    r = enzcc("-O2", "-std=c++20", "a.cpp", "-o", "a", check=False, cmd="enzcc++")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "compare-and-exchange" in r.stderr, r.stderr


# -- GPU code (PTX text: no GPU here) ---------------------------------------------------------------------

CUDA = r"""
__device__ int enzyme_dup;
__device__ int enzyme_const;
extern __device__ void __enzyme_autodiff(void *, ...);
extern __device__ void __enzyme_fwddiff(void *, ...);
#define I (blockIdx.x * blockDim.x + threadIdx.x)

__device__ void square(double *x, double *y, int n) { int i = I; if (i < n) y[i] = x[i] * x[i]; }
__device__ void stencil(double *x, double *y, int n) { int i = I; if (i > 0 && i < n - 1) y[i] = x[i - 1] * x[i + 1]; }
__device__ void scaled(double *x, double *w, double *y, int n) { int i = I; if (i < n) y[i] = x[i] * w[0]; }
__device__ void records(double *x, double *y, int n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;   /* 64-bit index; fields of the thread's record */
  struct P { double a, b; } *p = (struct P *)x;
  if (i < n) y[i] = p[i].a * p[i].b;
}
__device__ void shared(double *x, double *y) {
  __shared__ double s[256];
  s[threadIdx.x] = x[I];
  __syncthreads();
  y[I] = s[threadIdx.x] * s[threadIdx.x];
}
__device__ void sum(double *x, double *s, int n) { int i = I; if (i < n) atomicAdd(s, x[i] * x[i]); }
__device__ void sum_block(double *x, double *s, int n) { int i = I; if (i < n) atomicAdd_block(s, x[i] * x[i]); }

#define KERNEL2(f) __global__ void k_##f(double *x, double *dx, double *y, double *dy, int n) { \
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_dup, y, dy, n); }
KERNEL2(square)
KERNEL2(stencil)
KERNEL2(records)
KERNEL2(sum)
__global__ void k_scaled(double *x, double *dx, double *w, double *dw, double *y, double *dy, int n) {
  __enzyme_autodiff((void *)scaled, enzyme_dup, x, dx, enzyme_dup, w, dw, enzyme_dup, y, dy, n); }
__global__ void k_scaled_const(double *x, double *dx, double *w, double *y, double *dy, int n) {
  __enzyme_autodiff((void *)scaled, enzyme_dup, x, dx, enzyme_const, w, enzyme_dup, y, dy, n); }
__global__ void k_shared(double *x, double *dx, double *y, double *dy) {
  __enzyme_autodiff((void *)shared, enzyme_dup, x, dx, enzyme_dup, y, dy); }
__global__ void f_sum(double *x, double *dx, double *s, double *ds, int n) {
  __enzyme_fwddiff((void *)sum, enzyme_dup, x, dx, enzyme_dup, s, ds, n); }
__global__ void f_sum_block(double *x, double *dx, double *s, double *ds, int n) {
  __enzyme_fwddiff((void *)sum_block, enzyme_dup, x, dx, enzyme_dup, s, ds, n); }
"""

CUDA_PATH = Path("/usr/local/cuda-13.0")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def device(tmp_path_factory, enzcc_bin):
    """The CUDA kernels above through enzcc: {kernel name: its PTX body}, the module after AD as text, the PTX
    file."""
    d = tmp_path_factory.mktemp("cuda")
    _device_bitcode(d, CUDA)
    for extra, out in (((), "k.ptx"), (("-emit-llvm",), "k.ll")):
        proc = _enzcc_ptx(d, enzcc_bin, *extra, out=out)
        assert proc.returncode == 0, proc.stderr
    ptx = (d / "k.ptx").read_text()
    kernels, name = {}, None
    for line in ptx.splitlines():
        if line.startswith(".visible .entry"):
            name = line.split()[2].split("(")[0]
            kernels[name] = ""
        elif name:
            kernels[name] += line + "\n"
    return kernels, (d / "k.ll").read_text(), d / "k.ptx"


def _kernel(device, short: str) -> str:
    kernels = device[0]
    (name,) = [k for k in kernels if k.startswith(f"_Z{len(short)}{short}P")]
    return kernels[name]


def _atomic_adds(ptx: str) -> int:
    import re

    return len(re.findall(r"\b(?:atom|red)(?:\.[a-z]+)*\.add\.f64", ptx))


def test_gpu_adjoints_atomic_unless_the_thread_owns_the_element(device):
    assert _atomic_adds(_kernel(device, "k_square")) == 0            # dx[i] += ...: the thread's own element
    assert _atomic_adds(_kernel(device, "k_records")) == 0           # p[i].a, p[i].b: its own record
    assert _atomic_adds(_kernel(device, "k_shared")) == 0            # s[tid.x] in its block, then x[i]
    assert _atomic_adds(_kernel(device, "k_stencil")) == 2           # x[i-1], x[i+1]: other threads' elements
    assert _atomic_adds(_kernel(device, "k_scaled")) == 2            # w[0] read by all; w may overlap x
    assert _atomic_adds(_kernel(device, "k_scaled_const")) == 0      # w without derivatives


def test_gpu_atomic_add_in_the_primal(device):
    module = device[1]
    # reverse: the primal's atomic add, the adjoint reads the sum's shadow atomically, dx[i] is the thread's own
    rev = _kernel(device, "k_sum")
    assert _atomic_adds(rev) == 1 and "ld.relaxed" in rev
    # forward: the tangent is added atomically too, next to the primal's add
    assert _atomic_adds(_kernel(device, "f_sum")) == 2
    # atomicAdd_block: both adds keep the block's scope
    fwd = module.split("define dso_local ptx_kernel void @_Z11f_sum_block", 1)[1].split("\n}\n", 1)[0]
    assert fwd.count('atomicrmw fadd ptr') == 2 and fwd.count('syncscope("block") monotonic') == 2


@pytest.mark.skipif(not shutil.which("ptxas"), reason="needs ptxas")
def test_ptxas_accepts_the_kernels(device):
    r = subprocess.run(["ptxas", "-arch=sm_90", str(device[2]), "-o", "/dev/null"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _device_bitcode(d: Path, source: str) -> None:
    """``source`` (CUDA): its device side's bitcode, ``d/k.bc``, as clang makes it for enzcc."""
    if not shutil.which("clang++-22") or not (CUDA_PATH / "include").is_dir():
        pytest.skip("needs clang++-22 and the CUDA toolkit")
    (d / "k.cu").write_text(source)
    subprocess.run(["clang++-22", "-x", "cuda", f"--cuda-path={CUDA_PATH}", "--cuda-gpu-arch=sm_90",
                    "-Wno-unknown-cuda-version", "-idirafter", str(ROOT / "enzcc" / "include" / "cuda"),
                    "--cuda-device-only", "-nocudalib", "-emit-llvm", "-c", "-O2", "-Xclang", "-disable-llvm-passes",
                    "k.cu", "-o", "k.bc"], cwd=d, check=True, capture_output=True)


def _enzcc_ptx(d: Path, enzcc_bin: Path, *extra: str, out: str = "k.ptx"):
    """``d/k.bc`` through enzcc to PTX (``extra`` flags, such as ``-emit-llvm``, to ``out``): the CompletedProcess
    (text output)."""
    env = {**os.environ, "PATH": f"{enzcc_bin}{os.pathsep}{os.environ.get('PATH', '')}",
           "ENZCC_CACHE_DIR": str(d / "cache")}
    return subprocess.run(["enzcc", "--target=nvptx64-nvidia-cuda", "-march=sm_90", "-O2", "-S", *extra, "k.bc",
                           "-o", out], cwd=d, env=env, capture_output=True, text=True)


def _cuda_to_ptx(d: Path, enzcc_bin: Path, source: str):
    """``source`` (CUDA) through clang and enzcc to PTX: the CompletedProcess of enzcc (text output)."""
    _device_bitcode(d, source)
    return _enzcc_ptx(d, enzcc_bin)


HEAD = CUDA.split("#define I", 1)[0] + "#define I (blockIdx.x * blockDim.x + threadIdx.x)\n"


def test_gpu_two_dimensional_launch_adds_atomically(tmp_path, enzcc_bin):
    """In a 2-D launch the rows share their x index: x[col], read by every row, needs atomic adds (the module
    reads blockIdx.y, so no element is taken as a thread's own)."""
    r = _cuda_to_ptx(tmp_path, enzcc_bin, HEAD + r"""
__device__ void rows(double *x, double *y, int n) { int col = I, row = blockIdx.y; if (col < n) y[row * n + col] = x[col] * x[col]; }
__global__ void k_rows(double *x, double *dx, double *y, double *dy, int n) {
  __enzyme_autodiff((void *)rows, enzyme_dup, x, dx, enzyme_dup, y, dy, n); }
""")
    assert r.returncode == 0, r.stderr
    assert _atomic_adds((tmp_path / "k.ptx").read_text()) == 1


def test_gpu_synchronizing_atomic_load_is_refused_in_reverse_mode(tmp_path, enzcc_bin):
    r = _cuda_to_ptx(tmp_path, enzcc_bin, HEAD + r"""
__device__ void get(double *x, double *y) { double v; __atomic_load(&x[0], &v, __ATOMIC_ACQUIRE); y[I] = v * v; }
__global__ void k_get(double *x, double *dx, double *y, double *dy) {
  __enzyme_autodiff((void *)get, enzyme_dup, x, dx, enzyme_dup, y, dy); }
""")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "an atomic load (acquire)" in r.stderr, r.stderr
