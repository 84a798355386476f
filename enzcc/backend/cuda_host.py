"""Host emulation of CUDA device code: the device module enzcc made (LLVM 22 text for ``nvptx64-nvidia-cuda``,
after its optimize -> AD -> optimize pipeline) becomes a host module that runs on the CPU, linked with a small
runtime (``enzcc/runtime/cuda_host.c``) and with the program's host side (``clang++ --cuda-host-only``). CI has no
GPU: this is how the gradients of kernels are tested, and the runtime's scheduler makes GPU bugs (a missing
barrier, shared memory or its shadow in the wrong place or not zeroed) fail deterministically.

Interface:

- :func:`device_to_host(text, host_triple, host_layout) <device_to_host>`: the host module's LLVM text.
  Raises :class:`~enzcc.errors.EnzccError` (one line) for what it cannot convert: inline PTX, an NVVM
  intrinsic or libdevice function it does not know, a call of a function the device module does not define.
- :func:`runtime_source`: the path of the runtime's C source.
- :func:`host_side_args`: the ``clang++-22`` flags that compile a ``.cu`` file's host side for emulation (kernel
  registration needs ``-fcuda-include-gpubinary``; the runtime ignores the embedded file).
- :func:`build_host_emulation(device_ir_texts, host_inputs, output) <build_host_emulation>`: converts, compiles
  and links an executable (host inputs are objects, or ``.cu`` files compiled with :func:`host_side_args`);
  :func:`link_host_emulation` does the same from converted modules.
- For a driver that builds one object per ``.cu`` (``enzcc++ --cuda-host-emulation k.cu -o k``, proposed): the
  device side through the pipeline to LLVM text (instead of PTX), :func:`device_to_host`, :func:`device_object`;
  the host side compiled with :func:`host_side_args` (instead of the real fat binary, any file); the link with
  :func:`runtime_link_inputs` instead of the CUDA runtime library.

What the conversion does (the runtime's side is described in ``cuda_host.c``):

- triple and datalayout replaced; address spaces dropped (``addrspacecast`` becomes a no-op ``bitcast``,
  intrinsic names mangled for ``p1``/``p3``... renamed for ``p0``); the ``ptx_kernel`` calling convention, NVPTX
  attributes and ``nvvm.annotations`` removed; ``syncscope("block")`` and the like made system-wide;
- each device symbol gets the prefix :data:`DEVICE_PREFIX`, so it clashes with nothing of the host side (whose
  launch stubs and ``__host__ __device__`` functions have the same names);
- ``__shared__`` variables (``addrspace(3)``) become offsets into a per-block area that the runtime keeps for each
  emulated thread (``__enzcc_host_shared_base()``); their uses in constant expressions become instructions;
  ``extern __shared__`` arrays (dynamic shared memory) start after the static ones, 16-byte aligned;
- NVVM intrinsics (special registers, barriers, warp operations, scoped atomics, libdevice's math) become calls
  of the runtime's ``__enzcc_nvvm_*`` functions; ``__nv_*`` libdevice functions left declared become host libm
  (``__nv_sin`` -> ``sin``) or the runtime's ``__enzcc_nv_*``; ``vprintf``, ``__assertfail`` and
  ``__nvvm_reflect`` the runtime's, and so do ``malloc``/``free`` (CUDA's heap limit, NaN bytes);
- a trampoline per kernel takes CUDA's ``void **args`` and calls the kernel; a constructor registers each kernel
  by its device name (the host side registers its stub under the same name) and each ``__device__`` /
  ``__constant__`` variable by name (for ``cudaMemcpyToSymbol``).

The runtime reads ``ENZCC_CUDA_HOST_ORDER=forward|reverse|shuffle[:SEED]`` (the order in which the threads of a
phase run), ``ENZCC_CUDA_HOST_MAX_THREADS`` (threads live at once, default 8192) and ``ENZCC_CUDA_HOST_STACK``
(bytes of stack per emulated thread, default 256 KiB).
"""

from __future__ import annotations

import hashlib
import os
import re

from enzcc.errors import EnzccError
from enzcc.ir import IRBuilder, IRError, IRParseError, parse_module
from enzcc.ir import types as T
from enzcc.ir.datalayout import X86_64_LINUX_LAYOUT
from enzcc.ir.module import SYMBOL_REF
from enzcc.ir.instructions import BinaryOp, Call, Cast, GetElementPtr, Instruction, Phi
from enzcc.ir.values import (ConstantAggregate, ConstantExpr, ConstantPoison, ConstantSplat, GlobalRef,
                             InlineAsm)

#: the prefix of every device symbol in the host module
DEVICE_PREFIX = "__enzcc_dev."
HOST_TRIPLE = "x86_64-pc-linux-gnu"
HOST_LAYOUT = X86_64_LINUX_LAYOUT
#: where dynamic shared memory (``extern __shared__``) starts: after the static variables, at this alignment
DYNAMIC_SHARED_ALIGN = 16

_RUNTIME_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime")


def runtime_source() -> str:
    """The path of the runtime's C source (plain C11 with GNU extensions; ``clang-22 -c`` compiles it)."""
    return os.path.join(_RUNTIME_DIR, "cuda_host.c")


# ---------------------------------------------------------------------------------------------------------------
# What device code may call, and what it becomes
# ---------------------------------------------------------------------------------------------------------------

def _nvvm_intrinsics() -> frozenset[str]:
    """The NVVM intrinsics the runtime implements, by name without ``llvm.nvvm.`` (a pointer type's mangling,
    ``.p0``/``.p1``..., written ``.p``). Each is the runtime's ``__enzcc_nvvm_`` + the name with ``_`` for ``.``."""
    names = ["read.ptx.sreg." + r for r in (
        *(f"{k}.{d}" for k in ("tid", "ntid", "ctaid", "nctaid") for d in "xyz"),
        "warpsize", "laneid", "warpid", "nwarpid", "smid", "nsmid", "clock", "clock64", "globaltimer", "gridid",
        *(f"lanemask.{k}" for k in ("eq", "le", "lt", "ge", "gt")))]
    names += ["barrier.cta.sync.aligned.all", "barrier.cta.sync.all", "barrier.cta.sync.aligned.count",
              "barrier.cta.sync.count", "barrier0", "bar.sync", "barrier.sync", "barrier.sync.cnt",
              "barrier.cta.red.popc.aligned.all", "barrier.cta.red.and.aligned.all",
              "barrier.cta.red.or.aligned.all", "barrier0.popc", "barrier0.and", "barrier0.or",
              "membar.cta", "membar.gl", "membar.sys", "activemask", "bar.warp.sync",
              *(f"shfl.sync.{m}.{t}" for m in ("idx", "up", "down", "bfly") for t in ("i32", "f32")),
              *(f"vote.{k}.sync" for k in ("all", "any", "uni", "ballot")),
              *(f"isspacep.{k}" for k in ("shared", "local", "const", "global"))]
    for scope in ("cta", "sys"):
        names += [f"atomic.add.gen.f.{scope}.{t}.p" for t in ("f32", "f64")]
        names += [f"atomic.{op}.gen.i.{scope}.{t}.p" for op in ("add", "exch", "max", "min", "and", "or", "xor",
                                                                "cas") for t in ("i32", "i64")]
        names += [f"atomic.{op}.gen.ui.{scope}.{t}.p" for op in ("max", "min") for t in ("i32", "i64")]
        names += [f"atomic.{op}.gen.i.{scope}.i32.p" for op in ("inc", "dec")]
    for rm in ("rn", "rz", "rm", "rp"):
        for op in ("add", "mul", "div", "fma", "rcp", "sqrt"):
            names += [f"{op}.{rm}.d", f"{op}.{rm}.f", f"{op}.{rm}.ftz.f"]
        names += [f"{c}.{rm}" for c in ("d2i", "d2ui", "d2ll", "d2ull", "i2f", "ui2f", "ll2f", "ull2f", "i2d",
                                        "ui2d", "ll2d", "ull2d", "d2f")]
        names += [f"{c}.{rm}{ftz}" for c in ("f2i", "f2ui", "f2ll", "f2ull") for ftz in ("", ".ftz")]
        names.append(f"d2f.{rm}.ftz")
    names += ["sqrt.f", "sqrt.d", "sqrt.approx.f", "sqrt.approx.ftz.f", "rsqrt.approx.f", "rsqrt.approx.ftz.f",
              "rsqrt.approx.d", "rsqrt.approx.ftz.d", "rcp.approx.ftz.d", "rcp.approx.ftz.f", "div.approx.f",
              "div.approx.ftz.f", "div.full", "div.full.ftz", "ex2.approx.f32", "ex2.approx.ftz.f32",
              "ex2.approx.f", "ex2.approx.ftz.f", "ex2.approx.d", "lg2.approx.f", "lg2.approx.ftz.f",
              "lg2.approx.d", "sin.approx.f", "sin.approx.ftz.f", "cos.approx.f", "cos.approx.ftz.f",
              "fabs.f32", "fabs.ftz.f32", "fabs.f64", "fabs.f", "fabs.ftz.f", "fabs.d",
              "f2h.rn", "f2h.rn.ftz", "d2i.hi", "d2i.lo", "lohi.i2d",
              "mulhi.i", "mulhi.ui", "mulhi.ll", "mulhi.ull", "mul24.i", "mul24.ui", "sad.i", "sad.ui", "prmt"]
    for op in ("fmin", "fmax", "trunc", "round", "floor", "ceil", "saturate"):
        names += [f"{op}.f", f"{op}.ftz.f", f"{op}.d"]
    return frozenset(names)


NVVM_INTRINSICS = _nvvm_intrinsics()

#: intrinsics that synchronize threads: ``convergent`` (the host compiler must not make them depend on more
#: control flow) and no memory attributes (other threads run inside them)
SYNCHRONIZING = ("barrier", "bar.", "shfl.", "vote.", "activemask")

#: libdevice functions (``__nv_X``) that are host libm's ``X`` (with an ``f`` suffix for float: ``__nv_sinf``)
LIBM = frozenset("""acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2 exp10
    expm1 fabs fdim floor fma fmax fmin fmod frexp hypot ilogb j0 j1 jn ldexp lgamma llrint llround log log10 log1p
    log2 logb lrint lround modf nan nearbyint nextafter pow remainder remquo rint round scalbn sin sincos sinh sqrt
    tan tanh tgamma trunc y0 y1 yn""".split())
LIBM_NAMES = LIBM | {n + "f" for n in LIBM}
#: ``__nv_fast_X`` (``__sinf``, ``__expf``...): host libm's precise function
FAST_LIBM = frozenset("sinf cosf tanf expf exp10f logf log2f log10f powf".split())


def _nv_runtime() -> frozenset[str]:
    """libdevice functions the runtime implements as ``__enzcc_nv_X``."""
    names = """rsqrt rsqrtf rcbrt rcbrtf sinpi sinpif cospi cospif sincospi sincospif normcdf normcdff erfcx erfcxf
        powi powif saturatef fast_fdividef fdividef fast_sincosf isinfd isnand isfinited signbitd isinff isnanf
        finitef signbitf hiloint2double longlong_as_double double_as_longlong int_as_float float_as_int
        uint_as_float float_as_uint half2float popc popcll clz clzll ffs ffsll brev brevll mulhi umulhi mul64hi
        umul64hi mul24 umul24 sad usad hadd uhadd rhadd urhadd byte_perm min umin llmin ullmin max umax llmax ullmax
        abs llabs int2double_rn uint2double_rn double2hiint double2loint float2half_rn""".split()
    for rm in ("rn", "rz", "rd", "ru"):
        names += [f"{op}_{rm}" for op in (
            "dadd", "dsub", "dmul", "ddiv", "drcp", "dsqrt", "fma", "fadd", "fsub", "fmul", "fdiv", "frcp", "fsqrt",
            "fmaf", "float2int", "float2uint", "float2ll", "float2ull", "double2int", "double2uint", "double2ll",
            "double2ull", "int2float", "uint2float", "ll2float", "ull2float", "ll2double", "ull2double",
            "double2float")]
    return frozenset(names)


NV_RUNTIME = _nv_runtime()

#: functions device code may call that the host's C library provides as they are
HOST_KEPT = frozenset(["memcpy", "memmove", "memset"])
#: the runtime's stand-ins for functions of CUDA's device runtime (malloc: within CUDA's heap limit)
RUNTIME_CALLS = {"vprintf": "__enzcc_host_vprintf", "__assertfail": "__enzcc_host_assertfail",
                 "__nvvm_reflect": "__enzcc_host_nvvm_reflect", "malloc": "__enzcc_host_malloc",
                 "free": "__enzcc_host_free"}

_POINTER_MANGLING = re.compile(r"\.(v\d+)?p\d+(?=\.|$)")


def nvvm_runtime_name(intrinsic: str) -> str | None:
    """The runtime function an NVVM intrinsic (``llvm.nvvm.X``) becomes, or None when the runtime lacks it."""
    key = _POINTER_MANGLING.sub(lambda m: "." + (m.group(1) or "") + "p", intrinsic[len("llvm.nvvm."):])
    return "__enzcc_nvvm_" + key.replace(".", "_") if key in NVVM_INTRINSICS else None


def host_callee(name: str) -> str | None:
    """What a call of the declared device function ``name`` becomes on the host: a runtime function, a libm
    function, the same name (kept), or None when host emulation does not know it."""
    if name.startswith("llvm.nvvm."):
        return nvvm_runtime_name(name)
    if name.startswith("llvm."):
        return name
    if name in HOST_KEPT:
        return name
    if name in RUNTIME_CALLS:
        return RUNTIME_CALLS[name]
    if name.startswith("__nv_"):
        base = name[len("__nv_"):]
        if base in NV_RUNTIME:
            return "__enzcc_nv_" + base
        if base in LIBM_NAMES:
            return base
        if base.startswith("fast_") and base[len("fast_"):] in FAST_LIBM:
            return base[len("fast_"):]
    return None


def _is_synchronizing(runtime_name: str) -> bool:
    if not runtime_name.startswith("__enzcc_nvvm_"):
        return False
    return runtime_name[len("__enzcc_nvvm_"):].replace("_", ".").startswith(SYNCHRONIZING)


# ---------------------------------------------------------------------------------------------------------------
# Inline PTX: libdevice's few snippets (and the like in CUDA's headers), each a function of the same type
# ---------------------------------------------------------------------------------------------------------------

def _asm_key(text: str, constraints: str) -> tuple[str, str]:
    """An inline assembly's text without its whitespace (its layout differs between versions), and its
    constraints."""
    return re.sub(r"\s+", "", text), constraints


_WIDE = r"""{
    .reg .u32 r0, r1, r2, r3, a0, a1, a2, a3, b0, b1, b2, b3;
    mov.b64 {a0,a1}, $2;
    mov.b64 {a2,a3}, $3;
    mov.b64 {b0,b1}, $4;
    mov.b64 {b2,b3}, $5;
    OP.cc.u32 r0, a0, b0;
    OPc.cc.u32 r1, a1, b1;
    OPc.cc.u32 r2, a2, b2;
    OPc.u32 r3, a3, b3;
    mov.b64 $0, {r0,r1};
    mov.b64 $1, {r2,r3};
}"""
_MAD_WIDE = r"""{
    .reg .u32 r0, r1, r2, r3, alo, ahi, blo, bhi, clo, chi;
    mov.b64 {alo,ahi}, $2;
    mov.b64 {blo,bhi}, $3;
    mov.b64 {clo,chi}, $4;
    mad.lo.cc.u32 r0, alo, blo, clo;
    madc.hi.cc.u32 r1, alo, blo, chi;
    madc.hi.u32 r2, alo, bhi, 0;
    mad.lo.cc.u32 r1, alo, bhi, r1;
    madc.hi.cc.u32 r2, ahi, blo, r2;
    madc.hi.u32 r3, ahi, bhi, 0;
    mad.lo.cc.u32 r1, ahi, blo, r1;
    madc.lo.cc.u32 r2, ahi, bhi, r2;
    addc.u32 r3, r3, 0;
    mov.b64 $0, {r0,r1};
    mov.b64 $1, {r2,r3};
}"""
_MUL_WIDE = r"""{
    .reg .u32 r0, r1, r2, r3, alo, ahi, blo, bhi;
    mov.b64 {alo,ahi}, $2;
    mov.b64 {blo,bhi}, $3;
    mul.lo.u32 r0, alo, blo;
    mul.hi.u32 r1, alo, blo;
    mad.lo.cc.u32 r1, alo, bhi, r1;
    madc.hi.u32 r2, alo, bhi, 0;
    mad.lo.cc.u32 r1, ahi, blo, r1;
    madc.hi.cc.u32 r2, ahi, blo, r2;
    madc.hi.u32 r3, ahi, bhi, 0;
    mad.lo.cc.u32 r2, ahi, bhi, r2;
    addc.u32 r3, r3, 0;
    mov.b64 $0, {r0,r1};
    mov.b64 $1, {r2,r3};
}"""


def _wide_ir(name: str) -> str:
    """The IR body of an inline PTX snippet that works on 128-bit or 64-bit integers in halves."""
    if name in ("add128", "sub128"):
        op = name[:3]
        return (f"define internal {{ i64, i64 }} @__enzcc_ptx.{name}(i64 %a0, i64 %a1, i64 %b0, i64 %b1) {{\n"
                "  %al = zext i64 %a0 to i128\n  %ah = zext i64 %a1 to i128\n  %ahs = shl i128 %ah, 64\n"
                "  %a = or i128 %al, %ahs\n  %bl = zext i64 %b0 to i128\n  %bh = zext i64 %b1 to i128\n"
                f"  %bhs = shl i128 %bh, 64\n  %b = or i128 %bl, %bhs\n  %r = {op} i128 %a, %b\n" + _HALVES_64)
    if name == "mad64":
        return ("define internal { i64, i64 } @__enzcc_ptx.mad64(i64 %x, i64 %y, i64 %z) {\n"
                "  %a = zext i64 %x to i128\n  %b = zext i64 %y to i128\n  %c = zext i64 %z to i128\n"
                "  %p = mul i128 %a, %b\n  %r = add i128 %p, %c\n" + _HALVES_64)
    if name == "mul64":
        return ("define internal { i64, i64 } @__enzcc_ptx.mul64(i64 %x, i64 %y) {\n"
                "  %a = zext i64 %x to i128\n  %b = zext i64 %y to i128\n  %r = mul i128 %a, %b\n" + _HALVES_64)
    if name == "mad32":
        return ("define internal { i32, i32 } @__enzcc_ptx.mad32(i32 %x, i32 %y, i32 %z) {\n"
                "  %a = zext i32 %x to i64\n  %b = zext i32 %y to i64\n  %c = zext i32 %z to i64\n"
                "  %p = mul i64 %a, %b\n  %r = add i64 %p, %c\n  %lo = trunc i64 %r to i32\n  %hs = lshr i64 %r, 32\n"
                "  %hi = trunc i64 %hs to i32\n  %s0 = insertvalue { i32, i32 } poison, i32 %lo, 0\n"
                "  %s1 = insertvalue { i32, i32 } %s0, i32 %hi, 1\n  ret { i32, i32 } %s1\n}")
    raise KeyError(name)


_HALVES_64 = ("  %lo = trunc i128 %r to i64\n  %hs = lshr i128 %r, 64\n  %hi = trunc i128 %hs to i64\n"
              "  %s0 = insertvalue { i64, i64 } poison, i64 %lo, 0\n  %s1 = insertvalue { i64, i64 } %s0, i64 %hi, 1\n"
              "  ret { i64, i64 } %s1\n}")


def _inline_ptx() -> dict[tuple[str, str], str]:
    """Known inline PTX -> the function that does the same: ``__enzcc_ptx_*`` in the runtime, or
    ``__enzcc_ptx.*`` defined in the host module (:func:`_wide_ir`)."""
    table = {
        _asm_key("bfind.shiftamt.u32 $0, $1;", "=r,r"): "__enzcc_ptx_bfind_shiftamt_u32",
        _asm_key("rcp.approx.ftz.f32 $0,$1;", "=f,f"): "__enzcc_nvvm_rcp_approx_ftz_f",
        _asm_key("rsqrt.approx.ftz.f64 $0, $1;", "=d,d"): "__enzcc_nvvm_rsqrt_approx_ftz_d",
        _asm_key("{ .reg .pred __$$temp3;\n  setp.equ.f64 __$$temp3, $1, $2;\n  selp.f64 $0, $3, $4, __$$temp3;}",
                 "=d,d,d,d,d"): "__enzcc_ptx_setp_equ_selp_f64",
        _asm_key(_WIDE.replace("OP", "add"), "=l,=l,l,l,l,l"): "__enzcc_ptx.add128",
        _asm_key(_WIDE.replace("OP", "sub"), "=l,=l,l,l,l,l"): "__enzcc_ptx.sub128",
        _asm_key(_MAD_WIDE, "=l,=l,l,l,l"): "__enzcc_ptx.mad64",
        _asm_key(_MUL_WIDE, "=l,=l,l,l"): "__enzcc_ptx.mul64",
        _asm_key("{\n mad.lo.cc.u32 $0, $2, $3, $4;\n madc.hi.u32 $1, $2, $3, 0;\n}", "=r,=r,r,r,r"):
            "__enzcc_ptx.mad32",
    }
    for rm in ("rn", "rz", "rm", "rp"):
        table[_asm_key(f"sub.{rm}.f64 $0, $1, $2;", "=d,d,d")] = f"__enzcc_ptx_sub_{rm}_f64"
        table[_asm_key(f"sub.{rm}.f32 $0, $1, $2;", "=f,f,f")] = f"__enzcc_ptx_sub_{rm}_f32"
        table[_asm_key(f"sub.{rm}.ftz.f32 $0, $1, $2;", "=f,f,f")] = f"__enzcc_ptx_sub_{rm}_ftz_f32"
    return table


INLINE_PTX = _inline_ptx()
_ASM_SPELLING = re.compile(r'^asm\s+(?:(?:sideeffect|alignstack|inteldialect|unwind)\s+)*"([^"]*)",\s*"([^"]*)"$')


def inline_ptx_function(asm_text: str) -> str | None:
    """The function an inline assembly callee (``asm "..." , "..."`` as LLVM prints it) becomes, or None."""
    m = _ASM_SPELLING.match(asm_text.strip())
    if not m:
        return None
    decode = lambda s: re.sub(r"\\([0-9A-Fa-f]{2})", lambda e: chr(int(e.group(1), 16)), s)  # noqa: E731
    return INLINE_PTX.get(_asm_key(decode(m.group(1)), decode(m.group(2))))


# ---------------------------------------------------------------------------------------------------------------
# The conversion
# ---------------------------------------------------------------------------------------------------------------

def device_to_host(text: str, host_triple: str = HOST_TRIPLE, host_layout: str = HOST_LAYOUT) -> str:
    """The host module (LLVM 22 text for ``host_triple``) that runs the device module ``text`` on the CPU with the
    runtime of :func:`runtime_source`. Raises :class:`EnzccError` for what host emulation cannot run."""
    return _Converter(text).convert(host_triple, host_layout)


class _Kernel:
    """A kernel: its device name and parameters (types and attributes, as its trampoline passes them)."""

    def __init__(self, name: str, params: list[T.Type], attrs: list[list[str]]):
        self.name, self.params, self.attrs = name, params, attrs


class _Converter:
    """One device module's conversion: edits in the IR model (calls, shared memory, kernels), then the printed
    text's (address spaces, symbol names), then the trampolines and the registration."""

    def __init__(self, text: str):
        try:
            self.mod = parse_module(text)
            self.mod.parse_all()
        except (IRParseError, IRError) as exc:
            raise EnzccError(f"host emulation: cannot read the device module: {str(exc).splitlines()[0]}") from None
        triple = self.mod.triple or ""
        if not triple.startswith("nvptx"):
            raise EnzccError(f"host emulation converts NVPTX device modules, not '{triple or 'no triple'}'")
        self.kernels: list[_Kernel] = []
        self.shared: dict[str, int] = {}  # __shared__ variable -> offset in the block's area
        self.shared_end: dict[str, int] = {}  # static __shared__ variable -> the offset after it
        self.shared_static = 0  # where dynamic shared memory starts
        self.shared_align = DYNAMIC_SHARED_ALIGN  # the block area's alignment
        self.fn_shared: dict[str, set[str]] = {}  # function -> the __shared__ variables it names
        self.fn_callees: dict[str, set[str]] = {}  # function -> the functions it calls directly
        self.address_taken = False  # a function called indirectly, or whose address is taken
        self.renamed: set[str] = set()  # device symbols that get DEVICE_PREFIX
        self.variables: list[tuple[str, int, bool]] = []  # registered: name, size, constant
        self.created: set[str] = set()  # declarations of host functions made here
        self.ir_helpers: set[str] = set()  # functions defined in the host module's text (inline PTX)
        self.text = text

    def convert(self, host_triple: str, host_layout: str) -> str:
        self._check_pointer_sizes()
        self._layout_shared()
        for fn in list(self.mod.definitions()):
            self._convert_body(fn)
        self._map_declarations()
        self._collect_kernels()
        self._collect_variables()
        self._drop_shared_globals()
        self._clean_module_level()
        self.mod.triple = host_triple
        self.mod.datalayout = host_layout
        text = self._rewrite_text(str(self.mod) + "\n" + self._registration_text())
        self._verify(text)
        return text

    # -- checks ----------------------------------------------------------------------------------------------

    def _check_pointer_sizes(self) -> None:
        """The host has 64-bit pointers everywhere: a device module with 32-bit pointers in an address space it
        uses (``-nvptx-short-ptr``) cannot simply drop its address spaces."""
        layout = self.mod.data_layout
        used = {int(n) for n in re.findall(r"addrspace\((\d+)\)", self.text)}
        for space in sorted(used):
            if layout.pointer_size(space) != 8:
                raise EnzccError(f"host emulation needs 64-bit pointers; the device module's address space {space} "
                                 "has 32-bit ones (compile without -nvptx-short-ptr)")

    # -- shared memory ---------------------------------------------------------------------------------------

    def _layout_shared(self) -> None:
        """Gives each ``__shared__`` variable its offset in the block's area; ``extern __shared__`` arrays all
        start where the static variables end (CUDA's dynamic shared memory)."""
        layout = self.mod.data_layout
        dynamic = []
        offset = 0
        for gv in self.mod.globals.values():
            if gv.addrspace != 3 or gv.kind != "global":
                continue
            if gv.is_declaration:
                dynamic.append(gv.name)
                continue
            init = gv.text.split("=", 1)[1]
            if not re.search(r"\b(undef|poison)\b", init):
                raise EnzccError(f"__shared__ variable '{gv.name}' has an initializer; CUDA does not initialize "
                                 "shared memory")
            align = int(m.group(1)) if (m := re.search(r",\s*align\s+(\d+)", gv.text)) else \
                layout.abi_alignment(gv.value_type)
            offset = (offset + align - 1) // align * align
            self.shared[gv.name] = offset
            offset += layout.alloc_size(gv.value_type)
            self.shared_end[gv.name] = offset
            self.shared_align = max(self.shared_align, align)
        self.shared_static = (offset + DYNAMIC_SHARED_ALIGN - 1) // DYNAMIC_SHARED_ALIGN * DYNAMIC_SHARED_ALIGN
        for name in dynamic:
            self.shared[name] = self.shared_static

    def _drop_shared_globals(self) -> None:
        """The ``__shared__`` globals go (their uses are offsets now); the ``llvm.used`` lists forget them."""
        for name in self.shared:
            ref = self.mod.global_ref(name)
            for record in ref.debug_users:
                record.replace_value(ref, ConstantPoison(ref.type))
            del self.mod.globals[name]
        for gv in list(self.mod.globals.values()):
            mentioned = set(gv.initializer_symbols()) & set(self.shared)
            if not mentioned:
                continue
            if gv.name in ("llvm.used", "llvm.compiler.used"):
                self._drop_from_used_list(gv, mentioned)
            else:
                raise EnzccError(f"global '{gv.name}' holds the address of __shared__ variable "
                                 f"'{sorted(mentioned)[0]}', which differs per block")

    def _drop_from_used_list(self, gv, names: set[str]) -> None:
        body_start = gv.text.index("[", gv.text.index("]"))
        body_end = _matching_bracket(gv.text, body_start)
        entries = [e for e in _split_top_level(gv.text[body_start + 1:body_end])
                   if not {m.group(1) or m.group(2) for m in SYMBOL_REF.finditer(e)} & names]
        if not entries:
            del self.mod.globals[gv.name]
            return
        gv.text = (re.sub(r"\[\d+ x ptr\]", f"[{len(entries)} x ptr]", gv.text[:body_start], count=1)
                   + "[" + ", ".join(entries) + "]" + gv.text[body_end + 1:])

    def _shared_value(self, fn, cache: dict, name: str):
        """The address of ``__shared__`` variable ``name`` in ``fn``: computed once at its entry from the
        runtime's per-thread base of the block's area."""
        if name not in cache:
            entry = fn.entry_block
            if "" not in cache:
                base_fn = self._declare("__enzcc_host_shared_base", T.FunctionType(T.ptr, []))
                base_fn.fn_attrs = ["nounwind", "willreturn", "memory(none)"]
                cache[""] = IRBuilder.at_start(entry).call(base_fn, [], name="__enzcc.shared")
            b = IRBuilder.after(cache[""])
            cache[name] = b.gep(T.i8, cache[""], [self.shared[name]], name=f"__enzcc.shared.{name}", inbounds=True)
        return cache[name]

    def _materialize(self, value, b, fn, cache: dict):
        """``value`` (an operand) with each ``__shared__`` variable in it replaced by its address: constant
        expressions around one become instructions at ``b``."""
        if isinstance(value, GlobalRef):
            return self._shared_value(fn, cache, value.symbol) if value.symbol in self.shared else value
        if isinstance(value, ConstantExpr):
            if not self._mentions_shared(value):
                return value
            ops = [self._materialize(op, b, fn, cache) for op in value.operands]
            if value.opcode == "addrspacecast":
                return ops[0]
            if value.opcode == "getelementptr":
                flags = [f for f in value.flags if not f.startswith("inrange")]
                return b.insert(GetElementPtr(value.source_type, ops[0], ops[1:], flags=flags))
            if value.opcode in ConstantExpr.CASTS:
                return b.insert(Cast(value.opcode, ops[0], value.type, flags=value.flags))
            try:
                return b.insert(BinaryOp(value.opcode, ops[0], ops[1], flags=value.flags))
            except IRError:
                pass
        if self._mentions_shared(value):
            raise EnzccError(f"function '{fn.name}': a constant of this form uses a __shared__ variable, which host "
                             f"emulation cannot turn into instructions: {value.ref()}")
        return value

    def _declare(self, name: str, function_type: T.FunctionType):
        """A declaration of host function ``name`` (the runtime's, libm's)."""
        self.created.add(name)
        return self.mod.get_or_insert_function(name, function_type)

    def _mentions_shared(self, value) -> bool:
        if isinstance(value, GlobalRef):
            return value.symbol in self.shared
        if isinstance(value, ConstantExpr):
            return any(self._mentions_shared(op) for op in value.operands)
        if isinstance(value, ConstantAggregate):
            return any(self._mentions_shared(op) for op in value.elements)
        if isinstance(value, ConstantSplat):
            return self._mentions_shared(value.element)
        return False

    # -- function bodies -------------------------------------------------------------------------------------

    def _convert_body(self, fn) -> None:
        """Shared memory uses become addresses in the block's area; calls become host calls."""
        cache: dict = {}
        self.fn_callees[fn.name] = callees = set()
        for block in list(fn.blocks):
            for inst in list(block.instructions):
                self._note_references(inst, callees)
                if self.shared:
                    for i, op in enumerate(inst.operands):
                        if not self._mentions_shared(op):
                            continue
                        if isinstance(inst, Phi):
                            at = IRBuilder.before(inst.incoming_blocks[i].instructions[-1])
                        else:
                            at = IRBuilder.before(inst)
                        inst.set_operand(i, self._materialize(op, at, fn, cache))
                if isinstance(inst, Call):
                    self._convert_call(fn, inst)
        if self.shared:
            _dedupe_phi_entries(fn)
        self.fn_shared[fn.name] = {name for name in cache if name}

    def _note_references(self, inst: Instruction, callees: set[str]) -> None:
        """The functions ``inst`` calls, and whether it calls indirectly or takes a function's address (then
        every kernel may reach every function)."""
        first = 0
        if isinstance(inst, Call):
            first = 1
            if isinstance(inst.callee, GlobalRef):
                callees.add(inst.callee.symbol)
            elif not isinstance(inst.callee, InlineAsm):
                self.address_taken = True
        for op in inst.operands[first:]:
            if any(s in self.mod.functions for s in _symbols(op)):
                self.address_taken = True

    def _kernel_shared_bytes(self, kernel: str) -> int:
        """The bytes of the block's area that ``kernel`` uses before dynamic shared memory: up to the end of the
        last __shared__ variable it reaches (all of the static ones when functions are called indirectly), or up
        to the dynamic memory when it reaches an ``extern __shared__`` array. The area ends at a guard page, so
        an access past its variables faults."""
        if self.address_taken or any(s in self.mod.functions for gv in self.mod.globals.values()
                                      if gv.name not in ("llvm.used", "llvm.compiler.used")
                                      for s in gv.initializer_symbols()):
            return self.shared_static
        seen, todo, end = set(), [kernel], 0
        while todo:
            fn = todo.pop()
            if fn in seen:
                continue
            seen.add(fn)
            todo.extend(self.fn_callees.get(fn, ()))
            for name in self.fn_shared.get(fn, ()):
                end = max(end, self.shared_end.get(name, self.shared_static))
        return (end + self.shared_align - 1) // self.shared_align * self.shared_align

    def _convert_call(self, fn, call: Call) -> None:
        callee = call.callee
        if isinstance(callee, InlineAsm):
            host = inline_ptx_function(callee.text)
            if host is None:
                snippet = " ".join(callee.text.split())[:70]
                raise EnzccError(f"function '{fn.name}': inline PTX assembly that host emulation does not know "
                                 f"({snippet})")
            self._call_host(call, host)
            if host.startswith("__enzcc_ptx."):
                self.ir_helpers.add(host)
            return
        if not isinstance(callee, GlobalRef):
            return  # an indirect call: its target is converted with the rest
        if call.cconv in ("ptx_kernel", "ptx_device"):
            call.cconv = None
        target = self.mod.functions.get(callee.symbol)
        if target is None or not target.is_declaration or target.name in self.created:
            return
        name = target.name
        host = host_callee(name)
        if host is None:
            what = ("NVVM intrinsic" if name.startswith("llvm.nvvm.") else
                    "libdevice function" if name.startswith("__nv_") else "function")
            raise EnzccError(f"function '{fn.name}' calls {what} '{name}', which host emulation does not support"
                             + ("" if what != "function" else " (it is not defined in the device module)"))
        if host == name:
            return
        self._call_host(call, host, name, fn.name)

    def _call_host(self, call: Call, host: str, name: str | None = None, caller: str | None = None) -> None:
        """``call`` calls host function ``host`` instead (of device function ``name``)."""
        decl = self.mod.functions.get(host)
        if decl is None:
            decl = self._declare(host, call.function_type)
            decl.fn_attrs = ["convergent", "nounwind"] if _is_synchronizing(host) else ["nounwind"]
        self.created.add(host)
        if decl.function_type != call.function_type:
            raise EnzccError(f"function '{caller}' calls '{name}' with type {call.function_type}, but the host's "
                             f"'{host}' has type {decl.function_type}")
        call.set_operand(0, decl.ref)
        call.fn_attrs = []
        for i, param in enumerate(call.function_type.params):
            if isinstance(param, T.IntType) and param.bits < 32 and "zeroext" not in call.arg_attrs[i]:
                call.arg_attrs[i] = [a for a in call.arg_attrs[i] if a != "signext"] + ["zeroext"]

    def _map_declarations(self) -> None:
        """Declarations no call uses any more go; those left are host functions or intrinsics, or unknown."""
        used_in_globals = {s for gv in self.mod.globals.values() for s in gv.initializer_symbols()}
        for fn in list(self.mod.functions.values()):
            if not fn.is_declaration:
                continue
            used = self.mod.global_ref(fn.name).has_uses() or fn.name in used_in_globals
            if fn.name in self.created or host_callee(fn.name) == fn.name:
                continue
            if not used:
                self.mod.remove_function(fn.name)
                continue
            raise EnzccError(f"the device module takes the address of '{fn.name}', which is not defined in it and "
                             "which host emulation cannot provide")

    # -- kernels and variables -------------------------------------------------------------------------------

    def _collect_kernels(self) -> None:
        for fn in self.mod.functions.values():
            if fn.is_declaration or fn.name.startswith("llvm."):
                continue
            self.renamed.add(fn.name)
            if fn.cconv == "ptx_kernel":
                self.kernels.append(_Kernel(fn.name, list(fn.function_type.params), [list(a.attrs) for a in fn.args]))
            if fn.cconv in ("ptx_kernel", "ptx_device"):
                fn.cconv = None
            fn.fn_attrs = [a for a in fn.fn_attrs if not _nvptx_attribute(a)]

    def _collect_variables(self) -> None:
        """Device variables get the prefix; those the host side can name (``__device__``, ``__constant__``: not
        private ones, not string literals) are registered."""
        layout = self.mod.data_layout
        used = {s for gv in self.mod.globals.values() for s in gv.initializer_symbols()}
        used |= {gv.name for gv in self.mod.globals.values() if self.mod.global_ref(gv.name).has_uses()}
        unused = []
        for gv in self.mod.globals.values():
            if gv.name.startswith("llvm.") or gv.name in self.shared:
                continue
            self.renamed.add(gv.name)
            if gv.kind != "global":
                continue
            if gv.is_declaration:
                if gv.name in used:
                    raise EnzccError(f"device variable '{gv.name}' is declared but not defined in the device "
                                     "module (separate compilation is not supported by host emulation)")
                unused.append(gv.name)
                continue
            if gv.linkage in ("private",) or gv.addrspace not in (0, 1, 4):
                continue
            if gv.is_constant and (gv.addrspace == 4 or "externally_initialized" in gv.text.split("=", 1)[1]):
                # __constant__ memory: the host writes it (cudaMemcpyToSymbol), so it is no read-only data here
                head, rest = gv.text.split("=", 1)
                gv.text = head + "=" + re.sub(r"\bconstant\b", "global", rest, count=1)
            self.variables.append((gv.name, layout.alloc_size(gv.value_type), gv.addrspace == 4 or gv.is_constant))
        for name in unused:  # (threadIdx & co. at -O0: declared, never used)
            del self.mod.globals[name]

    # -- module level ----------------------------------------------------------------------------------------

    def _clean_module_level(self) -> None:
        self.mod.named_metadata = [m for m in self.mod.named_metadata
                                   if not m.startswith(("!nvvm.annotations", "!nvvmir.version"))]
        for k, text in self.mod.attribute_groups.items():
            self.mod.attribute_groups[k] = " ".join(_strip_nvptx_attributes(text))
        self.mod.comdats = []
        if "llvm.global_ctors" in self.mod.globals or "llvm.global_dtors" in self.mod.globals:
            raise EnzccError("the device module has global constructors or destructors, which host emulation "
                             "does not run")

    def _registration_text(self) -> str:
        """The kernels' trampolines and the constructor that registers kernels and variables with the runtime."""
        tag = hashlib.sha1("\0".join(k.name for k in self.kernels).encode()
                           + "\0".join(v[0] for v in self.variables).encode()).hexdigest()[:12]
        lines, calls = [], []
        for i, k in enumerate(self.kernels):
            lines.append(_c_string(f"__enzcc_host_kname.{i}", k.name))
            lines.append(_trampoline_text(f"__enzcc_host_tramp.{i}", k))
            calls.append(f"  call void @__enzcc_host_register_kernel(ptr @__enzcc_host_kname.{i}, "
                         f"ptr @__enzcc_host_tramp.{i}, i64 {self._kernel_shared_bytes(k.name)}, "
                         f"i64 {self.shared_align})")
        for i, (name, size, constant) in enumerate(self.variables):
            lines.append(_c_string(f"__enzcc_host_vname.{i}", name))
            calls.append(f"  call void @__enzcc_host_register_var(ptr @__enzcc_host_vname.{i}, "
                         f"ptr @{T.quote_name(name)}, i64 {size}, i32 {int(constant)})")
        ctor = f"__enzcc_host_register.{tag}"
        lines.append(f"define internal void @{ctor}() {{\n" + "".join(c + "\n" for c in calls) + "  ret void\n}")
        lines.append("@llvm.global_ctors = appending global [1 x { i32, ptr, ptr }] "
                     f"[{{ i32, ptr, ptr }} {{ i32 65535, ptr @{ctor}, ptr null }}]")
        lines += [_wide_ir(name[len("__enzcc_ptx."):]) for name in sorted(self.ir_helpers)]
        lines.append("declare void @__enzcc_host_register_kernel(ptr, ptr, i64, i64) nounwind")
        lines.append("declare void @__enzcc_host_register_var(ptr, ptr, i64, i32) nounwind")
        return "\n".join(lines) + "\n"

    # -- text ------------------------------------------------------------------------------------------------

    def _rewrite_text(self, text: str) -> str:
        """Address spaces dropped, device symbols prefixed, intrinsic names mangled for ``p0``, syncscopes
        made system-wide, duplicate declarations dropped."""
        spelled = {T.quote_name(n): T.quote_name(DEVICE_PREFIX + n) for n in self.renamed}
        out, declared = [], set()
        helpers = {T.quote_name(n) for n in self.ir_helpers}
        for line in text.split("\n"):
            segments = _segments(line)
            pieces = []
            for i, (kind, seg) in enumerate(segments):
                if kind == "code":
                    seg = _rewrite_code(seg, spelled)
                    if seg.endswith("syncscope(") and i + 1 < len(segments) and segments[i + 1][0] == "str" \
                            and segments[i + 1][1] != '"singlethread"':
                        seg = seg[:-len("syncscope(")].rstrip()
                        segments[i + 1] = ("drop", "")
                        if i + 2 < len(segments) and segments[i + 2][1].startswith(")"):
                            segments[i + 2] = ("code", segments[i + 2][1][1:])
                elif kind == "qsym":
                    seg = "@" + spelled.get(seg[1:], seg[1:])
                elif kind == "drop":
                    continue
                pieces.append(seg)
            line = "".join(pieces).rstrip()
            if line.startswith("declare "):
                m = re.search(r"@([-\w.$]+|\"[^\"]*\")\(", line)
                if m and (m.group(1) in declared or m.group(1) in helpers):
                    continue
                if m:
                    declared.add(m.group(1))
            if line.startswith("$") and "= comdat" in line:
                continue
            out.append(line)
        return "\n".join(out) + "\n"

    def _verify(self, text: str) -> None:
        import llvmlite.binding as llvm

        try:
            llvm.parse_assembly(text).verify()
        except RuntimeError as exc:
            lines = [ln for ln in str(exc).splitlines() if ln.strip()]
            raise EnzccError("internal error: the host emulation module does not verify: "
                             + (lines[0] if lines else "(no message)")) from None


# ---------------------------------------------------------------------------------------------------------------
# Text helpers
# ---------------------------------------------------------------------------------------------------------------

def _segments(line: str) -> list[tuple[str, str]]:
    """A line of LLVM text as (kind, text): ``code``, ``str`` (a quoted string, which holds no ``"``),
    ``qsym`` (``@"quoted name"``); comments are left out."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(line)
    while i < n:
        q, c = line.find('"', i), line.find(";", i)
        if c != -1 and (q == -1 or c < q):
            if c > i:
                out.append(("code", line[i:c]))
            break
        if q == -1:
            out.append(("code", line[i:]))
            break
        end = line.find('"', q + 1)
        if end == -1:
            raise EnzccError("host emulation: unterminated string in the device module's text")
        if q > 0 and line[q - 1] == "@":
            if q - 1 > i:
                out.append(("code", line[i:q - 1]))
            out.append(("qsym", line[q - 1:end + 1]))
        else:
            if q > i:
                out.append(("code", line[i:q]))
            out.append(("str", line[q:end + 1]))
        i = end + 1
    return out


_SYMBOL = re.compile(r"@([-\w.$]+)")
_ADDRSPACE = re.compile(r"(,\s*|\s+)addrspace\(\d+\)")
_COMDAT = re.compile(r",?\s*\bcomdat(\(\$[-\w.$]+\))?")


def _rewrite_code(code: str, spelled: dict[str, str]) -> str:
    code = _ADDRSPACE.sub("", code)
    code = re.sub(r"\baddrspacecast\b", "bitcast", code)
    code = _COMDAT.sub("", code)

    def symbol(m: re.Match) -> str:
        name = m.group(1)
        if name.startswith("llvm."):
            return "@" + _POINTER_MANGLING.sub(lambda p: "." + (p.group(1) or "") + "p0", name)
        return "@" + spelled.get(name, name)

    return _SYMBOL.sub(symbol, code)


_NVPTX_KEYS = ("\"target-cpu\"", "\"target-features\"", "\"nvvm.", "\"uniform-work-group-size\"")


def _nvptx_attribute(attr: str) -> bool:
    return attr.startswith(_NVPTX_KEYS)


def _strip_nvptx_attributes(text: str) -> list[str]:
    """The attributes of a group, without the NVPTX-only ones (``"key"="value"`` pairs may hold spaces)."""
    out = []
    for m in re.finditer(r'"[^"]*"(?:="[^"]*")?|[^\s"]+(?:\([^)]*\))?', text):
        if not _nvptx_attribute(m.group(0)):
            out.append(m.group(0))
    return out


def _symbols(value) -> set[str]:
    """The global symbols named in an operand (constant expressions and aggregates included)."""
    if isinstance(value, GlobalRef):
        return {value.symbol}
    if isinstance(value, ConstantExpr):
        return set().union(*(_symbols(op) for op in value.operands))
    if isinstance(value, ConstantAggregate):
        return set().union(*(_symbols(op) for op in value.elements))
    if isinstance(value, ConstantSplat):
        return _symbols(value.element)
    return set()


def _matching_bracket(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "[({<":
            depth += 1
        elif text[i] in "])}>":
            depth -= 1
            if depth == 0:
                return i
    raise EnzccError("host emulation: unbalanced brackets in a global's initializer")


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[({<":
            depth += 1
        elif ch in "])}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def _c_string(name: str, value: str) -> str:
    data = value.encode() + b"\0"
    body = "".join(chr(b) if 0x20 <= b < 0x7f and b not in (0x22, 0x5c) else f"\\{b:02X}" for b in data)
    return f"@{name} = private unnamed_addr constant [{len(data)} x i8] c\"{body}\""


def _trampoline_text(name: str, k: _Kernel) -> str:
    """``void name(void **args)``: loads each argument through ``args[i]`` (byval ones are passed as the
    pointer) and calls the kernel."""
    body, args = [], []
    for i, (ty, attrs) in enumerate(zip(k.params, k.attrs)):
        body.append(f"  %p{i} = getelementptr inbounds ptr, ptr %args, i64 {i}")
        body.append(f"  %a{i} = load ptr, ptr %p{i}, align 8")
        byval = [a for a in attrs if a.startswith(("byval(", "byref("))]
        if byval:
            align = [a for a in attrs if re.fullmatch(r"align \d+", a)]
            args.append(f"{ty} {' '.join(byval + align)} %a{i}")
        else:
            body.append(f"  %v{i} = load {ty}, ptr %a{i}, align 1")
            args.append(f"{ty} %v{i}")
    body.append(f"  call void @{T.quote_name(k.name)}({', '.join(args)})")
    return f"define internal void @{name}(ptr %args) {{\n" + "\n".join(body) + "\n  ret void\n}"


def _dedupe_phi_entries(fn) -> None:
    """A phi with several entries for one block (a switch's edges) must have one value for them: the first
    materialized address is used for all."""
    for block in fn.blocks:
        for inst in block.instructions:
            if not isinstance(inst, Phi):
                break
            seen: dict[int, object] = {}
            for i, blk in enumerate(inst.incoming_blocks):
                if id(blk) in seen and inst.operands[i] is not seen[id(blk)] and isinstance(inst.operands[i],
                                                                                             Instruction):
                    inst.set_operand(i, seen[id(blk)])
                seen.setdefault(id(blk), inst.operands[i])


# ---------------------------------------------------------------------------------------------------------------
# Building an emulated program
# ---------------------------------------------------------------------------------------------------------------

def host_side_args(cuda_path: str, gpubinary: str, sdk_version: str = "12.8") -> list[str]:
    """``clang++-22`` flags that compile a ``.cu`` file's host side for host emulation: CUDA mode, host side
    only, and a GPU binary to embed (any file: clang registers kernels only when it has one; the runtime ignores
    it). ``sdk_version``: clang-22 takes an unknown toolkit (CUDA 13) for CUDA 9.1's launch API without it."""
    stubs = os.path.join(os.path.dirname(_RUNTIME_DIR), "include", "cuda")  # headers CUDA 13 lacks
    return ["-x", "cuda", f"--cuda-path={cuda_path}", "--cuda-host-only", "-Wno-unknown-cuda-version",
            "-idirafter", stubs, "-Xclang", "-fcuda-include-gpubinary", "-Xclang", gpubinary,
            "-Xclang", f"-target-sdk-version={sdk_version}"]


def compile_runtime(workdir: str, clang: str | None = None) -> str:
    """The runtime's object file, compiled into ``workdir`` once per version of the source."""
    from enzcc.tools import find_tool, run

    with open(runtime_source(), "rb") as fh:
        digest = hashlib.sha1(fh.read()).hexdigest()[:16]
    os.makedirs(workdir, exist_ok=True)
    obj = os.path.join(workdir, f"enzcc_cuda_host_{digest}.o")
    if not os.path.exists(obj):
        tmp = obj + f".{os.getpid()}.tmp"
        run([clang or find_tool("clang"), "-std=gnu11", "-O1", "-fPIC", "-c", runtime_source(), "-o", tmp],
            capture=True, tool="clang")
        os.replace(tmp, obj)
    return obj


def build_host_emulation(device_ir_texts: list[str] | str, host_inputs: list[str], output: str, *,
                         workdir: str, cuda_path: str | None = None, opt_level: int = 0,
                         link_args: list[str] = (), runtime_dir: str | None = None) -> str:
    """Links an executable that runs the program on the CPU: each device module (LLVM text, as enzcc's pipeline
    made it) converted by :func:`device_to_host`, the runtime, and the host inputs (object files, or ``.cu``
    sources whose host side is compiled here). Returns ``output``."""
    texts = [device_ir_texts] if isinstance(device_ir_texts, str) else list(device_ir_texts)
    return link_host_emulation([device_to_host(t) for t in texts], host_inputs, output, workdir=workdir,
                               cuda_path=cuda_path, opt_level=opt_level, link_args=link_args,
                               runtime_dir=runtime_dir)


def link_host_emulation(host_ir_texts: list[str], host_inputs: list[str], output: str, *, workdir: str,
                        cuda_path: str | None = None, opt_level: int = 0, link_args: list[str] = (),
                        runtime_dir: str | None = None) -> str:
    """:func:`build_host_emulation` from device modules already converted (``host_ir_texts``), each compiled at
    ``-O{opt_level}`` (0 by default: the host compiler then keeps the device code as enzcc made it). The
    runtime's object is kept in ``runtime_dir`` (default ``workdir``) for the next build."""
    from enzcc.tools import cuda_path as find_cuda, find_tool, run

    os.makedirs(workdir, exist_ok=True)
    objects = [device_object(text, os.path.join(workdir, f"device{i}.host.o"), opt_level)
               for i, text in enumerate(host_ir_texts)]
    dummy = os.path.join(workdir, "host-emulation.gpubin")
    with open(dummy, "w") as fh:
        fh.write("enzcc host emulation: the kernels run from the converted device module\n")
    for i, src in enumerate(host_inputs):
        if src.endswith(".cu"):
            obj = os.path.join(workdir, f"host{i}.o")
            run([find_tool("clang++"), *host_side_args(find_cuda(cuda_path), dummy), "-O1", "-c", src, "-o", obj],
                capture=True, tool="clang++")
            objects.append(obj)
        else:
            objects.append(src)
    run([find_tool("clang++"), *objects, *runtime_link_inputs(runtime_dir or workdir), "-o", output, *link_args],
        capture=True, tool="clang++")
    return output


def device_object(host_text: str, obj: str, opt_level: int = 0) -> str:
    """Compiles a converted device module (:func:`device_to_host`'s text) to the object ``obj`` (its LLVM text
    kept beside it, ``.ll``), at ``-O{opt_level}``: 0 keeps the device code as enzcc made it."""
    from enzcc.tools import find_tool, run

    ll = os.path.splitext(obj)[0] + ".ll"
    with open(ll, "w") as fh:
        fh.write(host_text)
    run([find_tool("clang"), f"-O{opt_level}", "-Wno-override-module", "-c", ll, "-o", obj], capture=True,
        tool="clang")
    return obj


def runtime_link_inputs(workdir: str) -> list[str]:
    """What a program linked for host emulation needs besides its objects: the runtime (compiled into
    ``workdir`` once per version) and libm. It takes the place of the CUDA runtime library (no -lcudart)."""
    return [compile_runtime(workdir), "-lm"]
