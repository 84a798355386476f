"""CUDA sources through clang-22's CUDA mode: a device side (one GPU architecture, LLVM bitcode for
``nvptx64-nvidia-cuda``, which enzcc's pipeline differentiates and turns into PTX) and a host side (a native
object that embeds the device side's fat binary and registers its kernels, as clang and nvcc make it).

The driver runs the steps (:meth:`enzcc.driver.Driver.compile_cuda_source`): :meth:`CudaFrontend.device_bitcode`,
the pipeline, :func:`fat_binary`, :meth:`CudaFrontend.compile_host`."""

from __future__ import annotations

import os

from enzcc.errors import EnzccError
from enzcc.frontends.base import CompileRequest, Frontend
from enzcc.frontends.clang import ATTRIBUTE_DEFINES, INCLUDE_DIR, dependency_args
from enzcc.tools import cuda_path, find_tool, run

#: the GPU architecture when the command line names none (clang's own default, sm_52, has no double atomicAdd)
DEFAULT_ARCH = "sm_90"
DEVICE_TRIPLE = "nvptx64-nvidia-cuda"
#: headers clang's CUDA wrapper includes that the CUDA 13 toolkit lacks (searched after the user's)
CUDA_STUB_DIR = os.path.join(INCLUDE_DIR, "cuda")
#: flags that choose one side of the compile: enzcc always builds both (the device side through its pipeline)
ONE_SIDE_FLAGS = ("--cuda-device-only", "--cuda-host-only", "--offload-device-only", "--offload-host-only",
                  "--cuda-compile-host-device", "-fgpu-rdc", "-fcuda-rdc")


def given_cuda_path(args: list[str]) -> str | None:
    """The value of the user's ``--cuda-path=DIR``, if any."""
    for a in args:
        if a.startswith("--cuda-path="):
            return a[len("--cuda-path="):]
    return None


def arch_of(req: CompileRequest) -> str:
    """The one GPU architecture of this compile (``--cuda-gpu-arch=``/``--offload-arch=``)."""
    arch = req.cpu or DEFAULT_ARCH
    if not arch.startswith("sm_"):
        raise EnzccError(f"--cuda-gpu-arch={arch}: enzcc builds CUDA for NVIDIA GPUs (sm_XY)", req.src)
    return arch


#: the newest CUDA version clang-22 knows (it warns about newer toolkits and treats them as this one)
CLANG_KNOWN_CUDA = (12, 9)


def sdk_version(toolkit: str) -> str:
    """The toolkit's CUDA version as clang's ``-target-sdk-version`` spells it, at most the newest clang knows.
    clang passes it itself only when it links libdevice; the device side is compiled with ``-nocudalib`` (the
    pipeline links libdevice after AD), and without the version clang takes ``k<<<...>>>`` for the launch API
    of CUDA 9.1 (``cudaConfigureCall``), which CUDA 13's headers no longer declare."""
    version = CLANG_KNOWN_CUDA
    try:
        with open(os.path.join(toolkit, "include", "cuda.h"), encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("#define CUDA_VERSION "):
                    n = int(line.split()[2])
                    version = min((n // 1000, n % 1000 // 10), CLANG_KNOWN_CUDA)
                    break
    except (OSError, ValueError, IndexError):
        pass
    return f"{version[0]}.{version[1]}"


class CudaFrontend(Frontend):
    langs = ("cuda",)

    @staticmethod
    def common_args(req: CompileRequest) -> list[str]:
        """What both sides' compiles share: CUDA mode, the toolkit, the architecture, the user's flags."""
        toolkit = cuda_path(given_cuda_path(req.compile_args))
        user = [a for a in req.compile_args if not a.startswith("--cuda-path=")]
        for a in user:
            if a in ONE_SIDE_FLAGS:
                raise EnzccError(f"{a}: enzcc builds both sides of a CUDA source (the device side through its AD "
                                 "pipeline); use -S for the device side's PTX", req.src)
        return ["-x", "cuda", f"--cuda-path={toolkit}", f"--cuda-gpu-arch={arch_of(req)}",
                "-Wno-unknown-cuda-version", *ATTRIBUTE_DEFINES, *user, *req.lang_args,
                "-idirafter", INCLUDE_DIR, "-idirafter", CUDA_STUB_DIR]

    def device_bitcode(self, req: CompileRequest, dependencies: bool = False) -> bytes:
        """The device side's LLVM bitcode, unoptimized but optimizable. libdevice is not linked in: math
        stays ``__nv_*`` calls, which the AD stage differentiates by rule; the pipeline links libdevice after
        AD."""
        out = req.tmp(".device.bc")
        toolkit = cuda_path(given_cuda_path(req.compile_args))
        cmd = [find_tool("clang++"), *self.common_args(req), "--cuda-device-only", "-nocudalib",
               "-Xclang", f"-target-sdk-version={sdk_version(toolkit)}",
               *(dependency_args(req) if dependencies else []), f"-O{min(req.level, 3)}"]
        cmd += ["-Xclang", "-disable-O0-optnone"] if req.level == 0 else ["-Xclang", "-disable-llvm-passes"]
        cmd += ["-Qunused-arguments", "-c", "-emit-llvm", req.src, "-o", out]
        run(cmd, capture=not req.show_diagnostics, tool="clang")
        with open(out, "rb") as fh:
            return fh.read()

    def bitcode(self, req: CompileRequest) -> bytes:
        return self.device_bitcode(req)

    def host_args(self, req: CompileRequest, gpubinary: str) -> list[str]:
        """The clang++ command, up to its input and output, that compiles the host side with the GPU binary
        ``gpubinary`` embedded and its kernels registered (for host emulation, any file: the kernels are
        registered by name and the file is ignored)."""
        return [find_tool("clang++"), *self.common_args(req), "--cuda-host-only", "-Xclang",
                "-fcuda-include-gpubinary", "-Xclang", gpubinary, *([req.opt_flag] if req.opt_flag else [])]

    def compile_host(self, req: CompileRequest, fatbin: str) -> bytes:
        """The host side's native object at ``req.out_obj``, with the device side's fat binary ``fatbin``
        embedded and its kernels registered; returns the host side's bitcode as it was before optimization
        (carried in the object, as for C++, for AD of host code at the link)."""
        from enzcc.backend.embed import elf_section

        cmd = [*self.host_args(req, fatbin), *dependency_args(req)]
        if req.level == 0:
            cmd += ["-Xclang", "-disable-O0-optnone"]
        cmd += ["-Xclang", "-fembed-bitcode=all", "-c", req.src, "-o", req.out_obj]
        run(cmd, tool="clang")
        with open(req.out_obj, "rb") as fh:
            data = elf_section(fh.read(), ".llvmbc")
        if not data:
            raise EnzccError(f"clang put no bitcode into the host object for {req.src}", req.src)
        return data

    def codegen(self, req: CompileRequest, bitcode: bytes) -> None:
        raise EnzccError("internal error: a CUDA source's object is made by the driver's CUDA steps", req.src)


def assemble_ptx(ptxas: str, ptx_path: str, arch: str, out: str, where: str) -> None:
    """``ptxas -arch=arch ptx_path -o out``: PTX enzcc made that ptxas rejects is a one-line error at ``where``."""
    proc = run([ptxas, f"-arch={arch}", ptx_path, "-o", out], check=False, capture=True, tool="ptxas")
    if proc.returncode != 0:
        msg = ((proc.stderr or b"") + (proc.stdout or b"")).decode(errors="replace").strip().splitlines()
        raise EnzccError(f"ptxas rejected the generated PTX: {msg[0] if msg else proc.returncode}", where)


def fat_binary(ptx: bytes, arch: str, workdir: str, stem: str, where: str) -> str:
    """A fat binary (``fatbinary --create``) holding the device code for ``arch`` as machine code (ptxas) and as
    PTX (so newer GPUs can compile it at load time, as nvcc's default does). Returns its path."""
    ptx_path = os.path.join(workdir, f"{stem}.ptx")
    cubin = os.path.join(workdir, f"{stem}.cubin")
    out = os.path.join(workdir, f"{stem}.fatbin")
    with open(ptx_path, "wb") as fh:
        fh.write(ptx)
    sm = arch[len("sm_"):]
    assemble_ptx(find_tool("ptxas"), ptx_path, arch, cubin, where)
    run([find_tool("fatbinary"), "-64", "--create", out, f"--image3=kind=elf,sm={sm},file={cubin}",
         f"--image3=kind=ptx,sm={sm},file={ptx_path}"], tool="fatbinary")
    return out


def cuda_link_libraries(given_path: str | None) -> list[str]:
    """What a program with CUDA host code links: the CUDA runtime, static as nvcc links it by default (the
    executable then needs only the driver, ``libcuda.so``, at run time)."""
    lib = os.path.join(cuda_path(given_path), "lib64")
    return [f"-L{lib}", "-lcudart_static", "-ldl", "-lrt", "-lpthread"]
