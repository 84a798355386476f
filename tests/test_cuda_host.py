"""Host emulation of CUDA device code (enzcc/backend/cuda_host.py, enzcc/runtime/cuda_host.c): programs of
tests/cuda/host_*.cu, their device side through enzcc's pipeline (optimize, AD, optimize, libdevice) to LLVM text,
converted to a host module and linked with the runtime and the host side, run on the CPU in each thread order.

The emulation must expose GPU bugs deterministically: a missing barrier, a block's scratch in global memory, shared
memory read before it is written, a divergent barrier, a warp operation that lanes never reach. The same holds
for the derivatives enzcc makes: mutants of a correct gradient kernel (its reverse barrier dropped, its shared
shadow not zeroed, its shared shadow in global memory) give wrong gradients, while the kernel itself is checked
against analytic values and finite differences."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from enzcc_testing import ROOT, have, need
from enzcc.backend import cuda_host
from enzcc.backend.cuda_host import device_to_host, host_callee, link_host_emulation, nvvm_runtime_name
from enzcc.errors import EnzccError
from enzcc.tools import cuda_path

CUDA = cuda_path(required=False)
PROGRAMS = Path(__file__).resolve().parent / "cuda"
ORDERS = ("forward", "reverse", "shuffle:1", "shuffle:2")

needs_cuda = pytest.mark.skipif(CUDA is None or not have("clang++-22"), reason="needs clang++-22 and the CUDA toolkit")


def device_ir(src: Path, workdir: Path) -> str:
    """The device side of ``src`` as enzcc's pipeline leaves it (``-S -emit-llvm``)."""
    bc, ll = workdir / (src.stem + ".device.bc"), workdir / (src.stem + ".device.ll")
    subprocess.run(["clang++-22", "-x", "cuda", f"--cuda-path={CUDA}", "--cuda-gpu-arch=sm_90",
                    "-Wno-unknown-cuda-version", "-Xclang", "-target-sdk-version=12.8",
                    "-idirafter", str(ROOT / "enzcc" / "include" / "cuda"), "--cuda-device-only", "-nocudalib",
                    "-emit-llvm", "-c", "-O2", "-Xclang", "-disable-llvm-passes", str(src), "-o", str(bc)],
                   check=True, capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "enzcc", "--target=nvptx64-nvidia-cuda", "-march=sm_90", "-O2",
                           "-S", "-emit-llvm", str(bc), "-o", str(ll)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return ll.read_text()


class Program:
    """A host_*.cu program: its device module (as enzcc made it), and executables linked from it."""

    def __init__(self, name: str, workdir: Path, runtime_dir: Path):
        self.src = PROGRAMS / f"{name}.cu"
        self.workdir = workdir
        self.runtime_dir = runtime_dir
        self.device = device_ir(self.src, workdir)
        self.host_obj = None

    def link(self, host_text: str, name: str) -> Path:
        exe = self.workdir / name
        inputs = [self.host_obj] if self.host_obj else [str(self.src)]
        link_host_emulation([host_text], inputs, str(exe), workdir=str(self.workdir / name) + ".d",
                            cuda_path=CUDA, runtime_dir=str(self.runtime_dir))
        if not self.host_obj:  # the host side once, reused by the mutants
            self.host_obj = str(self.workdir / (name + ".d") / "host0.o")
        return exe

    def build(self, name: str = "exe") -> Path:
        return self.link(device_to_host(self.device), name)


def run(exe: Path, order: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ENZCC_CUDA_HOST_ORDER": order}
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture(scope="module")
def runtime_dir(tmp_path_factory) -> Path:
    """Where the runtime's object is compiled, once for all programs."""
    return tmp_path_factory.mktemp("runtime")


@pytest.fixture(scope="module")
def programs(tmp_path_factory, runtime_dir):
    cache: dict[str, Program] = {}

    def get(name: str) -> Program:
        if name not in cache:
            cache[name] = Program(name, tmp_path_factory.mktemp(name), runtime_dir)
        return cache[name]
    return get


# ---------------------------------------------------------------------------------------------------------------
# Programs that are right: the same values in every order
# ---------------------------------------------------------------------------------------------------------------

@needs_cuda
@pytest.mark.parametrize("name", ["host_basics", "host_grad", "host_math"])
def test_correct_program_in_every_order(programs, name):
    """saxpy, __device__/__constant__ variables, shared-memory block sums with barriers, atomics over several
    blocks, dynamic shared memory in a 2-D grid, warp shuffles and votes (host_basics); gradients of a
    __device__ function per thread, of a shared-memory stencil (reverse and forward mode, finite differences)
    and of a block sum (host_grad); libdevice's math against libm (host_math)."""
    exe = programs(name).build()
    for order in ORDERS:
        proc = run(exe, order)
        assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (order, proc.stdout, proc.stderr)


GRADIENT_CASES = ("heat", "sharedacc", "rotate", "twod", "shared_read", "tree", "twice", "matmul", "ragged")


@needs_cuda
def test_gradient_cases_in_every_order(programs):
    """host_grad_cases.cu: each case's reverse and forward derivative against finite differences."""
    exe = programs("host_grad_cases").build()
    for order in ORDERS[:3]:
        proc = run(exe, order)
        assert proc.returncode == 0, (order, proc.stdout, proc.stderr)
        assert proc.stdout.split("\n")[:-1] == [f"{case}: ok" for case in GRADIENT_CASES], proc.stdout


# ---------------------------------------------------------------------------------------------------------------
# Programs with GPU bugs: wrong in at least one order, or an error
# ---------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def races(programs):
    if CUDA is None or not have("clang++-22"):
        pytest.skip("needs clang++-22 and the CUDA toolkit")
    return programs("host_races").build()


@pytest.mark.parametrize("scenario, wrong_in", [
    ("no_barrier", {"forward"}),  # thread 0 adds s[32] before thread 32 stored it: NaN
    ("global_scratch", set(ORDERS)),  # all blocks interleave phase by phase on the one scratch
    ("unzeroed", set(ORDERS)),  # shared memory starts as NaN
])
def test_race_gives_a_wrong_result(races, scenario, wrong_in):
    failed = set()
    for order in ORDERS:
        proc = run(races, order, scenario)
        assert proc.returncode in (0, 1), proc.stderr
        if proc.returncode == 1:
            assert "expected" in proc.stdout
            failed.add(order)
    assert wrong_in <= failed, (scenario, failed)


def test_divergent_barrier_is_an_error(races):
    for order in ORDERS:
        proc = run(races, order, "divergent")
        assert proc.returncode == 1
        assert "enzcc-cuda-host: error: divergent __syncthreads" in proc.stderr
        assert "never reaches (it exited)" in proc.stderr


def test_warp_operation_that_lanes_never_reach_is_an_error(races):
    proc = run(races, "forward", "warp_deadlock")
    assert proc.returncode == 1
    assert re.search(r"waits at __shfl_sync \(mask 0xffffffff\) for lanes that never reach it", proc.stderr)


@pytest.mark.parametrize("scenario, message", [
    ("shared_overflow", r"an access past the end of the block's shared memory at address 0x[0-9a-f]+ in kernel "
                        r"_Z15shared_overflowPKdPd, block \(0,0,0\), thread \(63,0,0\)"),
    ("stack_overflow", r"a stack overflow \(raise ENZCC_CUDA_HOST_STACK\) at address 0x[0-9a-f]+ in kernel "
                       r"_Z14stack_overflowPKdPdi, block \(0,0,0\), thread \(0,0,0\)"),
    ("bad_pointer", r"an invalid memory access at address 0x10 in kernel _Z11bad_pointerPd, block \(0,0,0\), "
                    r"thread \(0,0,0\)"),
])
def test_faults_name_the_kernel_block_and_thread(races, scenario, message):
    proc = run(races, "forward", scenario)
    assert proc.returncode == 1
    assert re.fullmatch("enzcc-cuda-host: error: " + message + "\n", proc.stderr), proc.stderr


def test_device_malloc_has_cudas_heap_limit(races):
    proc = run(races, "forward", "heap_limit")
    assert proc.returncode == 0
    assert proc.stdout == "small 1 big 0\nlimit 33554432: small 1 big 1\n"


def test_runtime_api_checks_device_pointers(races):
    proc = run(races, "forward", "api_errors")
    assert proc.returncode == 0
    assert proc.stdout == ("1 1 17 13 1 0 invalid argument\n"  # the last error, as cudaGetLastError reports it
                           "1 0 0 sm_90 warp 32\n")  # 64 KiB of dynamic shared memory: refused, opt-in, accepted
    assert "launch of _Z14dynamic_sharedPd failed: too much shared memory" in proc.stderr


def test_device_printf_and_assert(races):
    proc = run(races, "reverse", "printf")
    assert proc.returncode == 0
    assert proc.stdout == "block 1 thread 1: n=42 x=2.500 str c    -7|3   |ff\n"
    proc = run(races, "reverse", "assert")
    assert proc.returncode != 0
    assert re.search(r"host_races\.cu:\d+: void fails\(int\): block: \[0,0,0\], thread: \[3,0,0\] "
                     r"Assertion `n < threadIdx.x \+ 100` failed", proc.stderr)


def test_bad_order_is_an_error(races):
    proc = run(races, "sideways", "printf")
    assert proc.returncode == 1
    assert "ENZCC_CUDA_HOST_ORDER=sideways: expected forward, reverse or shuffle[:SEED]" in proc.stderr


# ---------------------------------------------------------------------------------------------------------------
# Mutants of a correct gradient kernel: the bugs a kernel derivative can have, which the harness must catch
# ---------------------------------------------------------------------------------------------------------------

def _function(text: str, name: str) -> tuple[int, int]:
    m = re.search(r"^define [^\n]*@" + re.escape(name) + r"\(.*\{\n", text, re.M)
    assert m, name
    return m.start(), text.index("\n}\n", m.end())


def _in_function(text: str, name: str, edit) -> str:
    a, b = _function(text, name)
    return text[:a] + edit(text[a:b]) + text[b:]


def _drop_last_barrier(body: str) -> str:
    lines = body.split("\n")
    del lines[max(i for i, line in enumerate(lines) if "@llvm.nvvm.barrier" in line)]
    return "\n".join(lines)


def _drop_zeroing(body: str) -> str:
    out = re.sub(r"^\s*store i64 0, ptr addrspace\(3\) %\S+, align \d+\n", "", body, flags=re.M)
    assert out != body, "the shadow's zeroing loop was not found"
    return out


STENCIL_GRAD = "_Z12stencil_gradPKdPdS1_S1_i"


def _shadow_in_global_memory(host: str) -> str:
    """The host module with the stencil's shared shadow in one global array (what a shadow of a __shared__
    variable placed in global memory amounts to: all blocks share it)."""
    out = re.sub(r"(%__enzcc\.shared\.__enzcc_shadow\._ZZ7stencil[-\w.$]*) = getelementptr inbounds i8, "
                 r"ptr %__enzcc\.shared, i64 \d+", r"\1 = getelementptr inbounds i8, ptr @mutant.shadow, i64 0", host)
    assert out != host, "the stencil's shadow was not found"
    return out + "@mutant.shadow = internal global [64 x double] zeroinitializer, align 16\n"


MUTANTS = {
    "reverse barrier dropped": lambda dev: device_to_host(_in_function(dev, STENCIL_GRAD, _drop_last_barrier)),
    "shared shadow not zeroed": lambda dev: device_to_host(_in_function(dev, STENCIL_GRAD, _drop_zeroing)),
    "shared shadow in global memory": lambda dev: _shadow_in_global_memory(device_to_host(dev)),
}


@needs_cuda
@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_gradient_mutant_is_caught(programs, mutant):
    prog = programs("host_grad")
    if prog.host_obj is None:
        prog.build()
    exe = prog.link(MUTANTS[mutant](prog.device), "mutant_" + re.sub(r"\W", "_", mutant))
    for order in ("forward", "reverse"):
        proc = run(exe, order)
        assert proc.returncode == 1, (order, proc.stdout, proc.stderr)
        assert re.search(r"^stencil dx\[\d+\]: \S+, expected", proc.stdout, re.M), proc.stdout
        assert "square dx" not in proc.stdout and "blocksum dx" not in proc.stdout


# ---------------------------------------------------------------------------------------------------------------
# The converter on small modules: what it makes, and its one-line refusals
# ---------------------------------------------------------------------------------------------------------------

HEAD = ('target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"\n'
        'target triple = "nvptx64-nvidia-cuda"\n')


def convert(body: str) -> str:
    return device_to_host(HEAD + body)


def test_shared_variables_become_offsets_in_the_block_area():
    text = convert("""
@a = internal addrspace(3) global [3 x double] undef, align 8
@b = internal addrspace(3) global i32 undef, align 4
@dyn = external addrspace(3) global [0 x float], align 4
@llvm.used = appending global [2 x ptr] [ptr addrspacecast (ptr addrspace(3) @a to ptr), ptr @k], section "llvm.metadata"
define ptx_kernel void @k(ptr %out, i1 %c) {
entry:
  %v = load i32, ptr addrspace(3) @b, align 4
  %p = getelementptr inbounds i8, ptr addrspacecast (ptr addrspace(3) @a to ptr), i64 8
  %f = load float, ptr addrspacecast (ptr addrspace(3) @dyn to ptr), align 4
  br i1 %c, label %x, label %y
x:
  br label %y
y:
  %q = phi ptr [ getelementptr (i8, ptr addrspacecast (ptr addrspace(3) @a to ptr), i64 16), %x ], [ %p, %entry ]
  store ptr %q, ptr %out
  ret void
}
""")
    assert "addrspace" not in text and "@a " not in text and "@dyn" not in text
    assert re.search(r"%__enzcc\.shared = call ptr @__enzcc_host_shared_base\(\)", text)
    assert "%__enzcc.shared.a = getelementptr inbounds i8, ptr %__enzcc.shared, i64 0" in text
    assert "%__enzcc.shared.b = getelementptr inbounds i8, ptr %__enzcc.shared, i64 24" in text
    # dynamic shared memory after the static variables (28 bytes), 16-byte aligned
    assert "%__enzcc.shared.dyn = getelementptr inbounds i8, ptr %__enzcc.shared, i64 32" in text
    assert "i64 32, i64 16)" in text  # the kernel's area (up to its dynamic memory) and alignment, registered
    assert '[1 x ptr] [ptr @__enzcc_dev.k]' in text  # llvm.used forgets the shared variable
    # the phi's constant expression became an instruction in its predecessor
    x_block = text[text.index("\nx:"):text.index("\ny:")]
    assert "getelementptr i8, ptr %__enzcc.shared.a, i64 16" in x_block


def test_symbols_prefixed_kernels_registered_intrinsics_mapped():
    text = convert("""
@g = addrspace(1) externally_initialized global double 0.0, align 8
@c = addrspace(4) externally_initialized constant [2 x float] zeroinitializer, align 4
%struct.S = type { double, i32 }
define ptx_kernel void @_Z1kPd(ptr %p, ptr byval(%struct.S) align 8 %s, i32 %n) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  %x = load double, ptr addrspace(1) @g
  %y = call double @__nv_sin(double %x)
  %z = call double @__nv_rsqrt(double %y)
  %w = call float @llvm.nvvm.fma.rn.ftz.f(float 1.0, float 2.0, float 3.0)
  %o = atomicrmw fadd ptr %p, double %z syncscope("block") monotonic, align 8
  ret void
}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32) convergent
declare double @__nv_sin(double)
declare double @__nv_rsqrt(double)
declare float @llvm.nvvm.fma.rn.ftz.f(float, float, float)
""")
    assert "define void @__enzcc_dev._Z1kPd(" in text and "ptx_kernel" not in text
    assert "@__enzcc_dev.g = externally_initialized global double" in text
    assert "@__enzcc_dev.c = externally_initialized global [2 x float]" in text  # host-writable __constant__
    assert "call i32 @__enzcc_nvvm_read_ptx_sreg_tid_x()" in text
    assert "declare void @__enzcc_nvvm_barrier_cta_sync_aligned_all(i32) convergent nounwind" in text
    assert "call double @sin(double" in text and "call double @__enzcc_nv_rsqrt(double" in text
    assert "@__enzcc_nvvm_fma_rn_ftz_f(" in text
    assert 'syncscope' not in text and "atomicrmw fadd ptr %p, double %z monotonic" in text
    # the trampoline passes the byval struct as the pointer CUDA's args array holds
    assert "call void @__enzcc_dev._Z1kPd(ptr %v0, ptr byval(%struct.S) align 8 %a1, i32 %v2)" in text
    assert 'c"_Z1kPd\\00"' in text and 'c"g\\00"' in text and 'c"c\\00"' in text


def test_address_spaces_dropped_everywhere():
    """Local allocas, intrinsics mangled for p1/p3/p5 (renamed for p0, declared once), casts, syncscopes."""
    text = convert("""
@s = internal addrspace(3) global [4 x double] undef, align 8
define void @f(ptr addrspace(1) %g) {
  %a = alloca [4 x double], align 8, addrspace(5)
  call void @llvm.lifetime.start.p5(ptr addrspace(5) %a)
  call void @llvm.memcpy.p3.p1.i64(ptr addrspace(3) @s, ptr addrspace(1) %g, i64 32, i1 false)
  call void @llvm.memcpy.p5.p3.i64(ptr addrspace(5) %a, ptr addrspace(3) @s, i64 32, i1 false)
  call void @llvm.lifetime.end.p5(ptr addrspace(5) %a)
  %c = addrspacecast ptr addrspace(1) %g to ptr
  %f = atomicrmw add ptr %c, i32 1 syncscope("device") acq_rel, align 4
  fence syncscope("block") seq_cst
  fence syncscope("singlethread") seq_cst
  ret void
}
declare void @llvm.lifetime.start.p5(ptr addrspace(5))
declare void @llvm.lifetime.end.p5(ptr addrspace(5))
declare void @llvm.memcpy.p3.p1.i64(ptr addrspace(3), ptr addrspace(1), i64, i1)
declare void @llvm.memcpy.p5.p3.i64(ptr addrspace(5), ptr addrspace(3), i64, i1)
""")
    assert "addrspace" not in text
    assert "%a = alloca [4 x double], align 8\n" in text
    assert "call void @llvm.memcpy.p0.p0.i64(ptr %__enzcc.shared.s, ptr %g, i64 32, i1 false)" in text
    assert text.count("declare void @llvm.memcpy.p0.p0.i64(") == 1
    assert "%c = bitcast ptr %g to ptr" in text
    assert "atomicrmw add ptr %c, i32 1 acq_rel" in text and "fence seq_cst" in text
    assert 'fence syncscope("singlethread") seq_cst' in text


def test_32_bit_pointers_refused():
    with pytest.raises(EnzccError, match="address space 3 has 32-bit ones"):
        device_to_host('target datalayout = "e-p3:32:32-i64:64"\ntarget triple = "nvptx64-nvidia-cuda"\n'
                       "@s = internal addrspace(3) global i32 undef\n")


@pytest.mark.parametrize("body, message", [
    ("declare void @llvm.nvvm.cp.async.wait.all()\ndefine void @f() {\n  call void @llvm.nvvm.cp.async.wait.all()\n"
     "  ret void\n}", "function 'f' calls NVVM intrinsic 'llvm.nvvm.cp.async.wait.all', which host emulation does "
                      "not support"),
    ("declare double @__nv_cyl_bessel_i0(double)\ndefine double @f(double %x) {\n"
     "  %y = call double @__nv_cyl_bessel_i0(double %x)\n  ret double %y\n}",
     "calls libdevice function '__nv_cyl_bessel_i0'"),
    ("declare void @other()\ndefine void @f() {\n  call void @other()\n  ret void\n}",
     "function 'f' calls function 'other', which host emulation does not support (it is not defined in the "
     "device module)"),
    ("define i32 @f(i32 %x) {\n  %y = call i32 asm \"brev.b32 $0, $1;\", \"=r,r\"(i32 %x)\n  ret i32 %y\n}",
     "function 'f': inline PTX assembly that host emulation does not know (asm \"brev.b32 $0, $1;\""),
    ("@s = internal addrspace(3) global i32 7\ndefine void @f() {\n  ret void\n}",
     "__shared__ variable 's' has an initializer"),
    ("@s = internal addrspace(3) global i32 undef\n@t = global ptr addrspacecast (ptr addrspace(3) @s to ptr)\n",
     "global 't' holds the address of __shared__ variable 's'"),
    ("@x = external addrspace(1) global double\ndefine double @f() {\n  %v = load double, ptr addrspace(1) @x\n"
     "  ret double %v\n}",
     "device variable 'x' is declared but not defined"),
])
def test_conversion_refuses_in_one_line(body, message):
    with pytest.raises(EnzccError) as exc:
        convert(body)
    assert message in exc.value.message
    assert "\n" not in exc.value.message


@pytest.mark.skipif(CUDA is None, reason="needs the CUDA toolkit")
def test_all_of_libdevice_converts():
    """Every NVVM intrinsic and inline PTX snippet of libdevice's functions is known to the converter (the
    pipeline links the ones a program calls); host_math runs a sample of them."""
    import llvmlite.binding as llvm

    with open(os.path.join(CUDA, "nvvm", "libdevice", "libdevice.10.bc"), "rb") as fh:
        text = str(llvm.parse_bitcode(fh.read()))
    host = device_to_host(text)
    assert "@llvm.nvvm." not in host and " asm " not in host
    assert host.count("\ndefine ") >= 350


def test_only_nvptx_modules():
    with pytest.raises(EnzccError, match="converts NVPTX device modules, not 'x86_64-pc-linux-gnu'"):
        device_to_host('target triple = "x86_64-pc-linux-gnu"\n')


def test_callee_mapping():
    assert host_callee("__nv_sinf") == "sinf" and host_callee("__nv_fast_expf") == "expf"
    assert host_callee("__nv_dadd_rz") == "__enzcc_nv_dadd_rz" and host_callee("__nv_popcll") == "__enzcc_nv_popcll"
    assert host_callee("malloc") == "__enzcc_host_malloc" and host_callee("llvm.fma.f64") == "llvm.fma.f64"
    assert host_callee("realloc") is None  # (NVPTX has none)
    assert host_callee("vprintf") == "__enzcc_host_vprintf" and host_callee("puts") is None
    assert nvvm_runtime_name("llvm.nvvm.atomic.add.gen.f.cta.f64.p3") == "__enzcc_nvvm_atomic_add_gen_f_cta_f64_p"
    assert nvvm_runtime_name("llvm.nvvm.ld.gen.i") is None


@need("clang-22", "llvm-nm-22")
def test_runtime_defines_every_mapped_function(runtime_dir):
    """Each name the converter may call is defined by the runtime (an unknown one would only fail at link time)."""
    obj = cuda_host.compile_runtime(str(runtime_dir))
    nm = subprocess.run(["llvm-nm-22", "--defined-only", "-j", obj], capture_output=True, text=True, check=True)
    defined = set(nm.stdout.split())
    wanted = {"__enzcc_nvvm_" + n.replace(".", "_") for n in cuda_host.NVVM_INTRINSICS}
    wanted |= {"__enzcc_nv_" + n for n in cuda_host.NV_RUNTIME}
    wanted |= set(cuda_host.RUNTIME_CALLS.values())
    wanted |= {v for v in cuda_host.INLINE_PTX.values() if not v.startswith("__enzcc_ptx.")}
    wanted |= {"__enzcc_host_shared_base", "__enzcc_host_register_kernel", "__enzcc_host_register_var",
               "cudaLaunchKernel", "__cudaPushCallConfiguration", "__cudaPopCallConfiguration",
               "__cudaRegisterFunction", "__cudaRegisterVar", "__cudaRegisterFatBinary", "cudaMemcpyToSymbol"}
    assert not wanted - defined, sorted(wanted - defined)[:20]
