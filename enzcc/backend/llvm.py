"""Thin layer over llvmlite: initialization, reading modules, target machines, optimization, codegen."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import lru_cache

import llvmlite.binding as llvm

from enzcc.backend import llvm_tools
from enzcc.errors import EnzccError, SourceLocation

_initialized = False


def ensure_initialized() -> None:
    global _initialized
    if not _initialized:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        # objects with inline assembly need the host's assembly parser (without it LLVM aborts)
        llvm.initialize_native_asmparser()
        _initialized = True


def host_triple() -> str:
    ensure_initialized()
    return llvm.get_default_triple()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line
    return type(exc).__name__


def parse_bitcode(data: bytes, where: str) -> llvm.ModuleRef:
    """Parse bitcode; a failure is an :class:`EnzccError` naming ``where``."""
    ensure_initialized()
    try:
        return llvm.parse_bitcode(data)
    except Exception as exc:  # llvmlite raises RuntimeError with LLVM's message
        raise EnzccError(f"invalid LLVM bitcode: {_first_line(exc)}", where) from None


_LLVM_DIAGNOSTIC = re.compile(r"^<string>:(\d+):(\d+): error: (.*)$", re.M)


def parse_ir_text(text: str, where: str) -> llvm.ModuleRef:
    """Parse LLVM 22 textual IR and verify it. A parse error points at LLVM's line and column."""
    ensure_initialized()
    version = llvm.llvm_version_info[0]
    if "\0" in text:  # LLVM would only read up to it
        line = text.count("\n", 0, text.index("\0")) + 1
        raise EnzccError(f"invalid LLVM IR (this is LLVM {version}): NUL character", SourceLocation(where, line))
    try:
        mod = llvm.parse_assembly(text)
    except Exception as exc:
        diag = _LLVM_DIAGNOSTIC.search(str(exc))
        if diag is None:
            raise EnzccError(f"invalid LLVM IR (this is LLVM {version}): {_first_line(exc)}", where) from None
        loc = SourceLocation(where, int(diag.group(1)), int(diag.group(2)))
        raise EnzccError(f"invalid LLVM IR (this is LLVM {version}): {diag.group(3)}", loc) from None
    verify(mod, where)
    return mod


def read_ir_file(path: str) -> llvm.ModuleRef:
    """Read a .bc or .ll file from any producer."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise EnzccError(f"cannot read {path}: {exc.strerror}") from None
    if data[:2] == b"BC" or data[:4] == b"\xde\xc0\x17\x0b":
        mod = parse_bitcode(data, path)
        verify(mod, path)
        check_target_cpus(mod, path)
        return mod
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise EnzccError("neither LLVM bitcode nor LLVM IR text", path) from None
    mod = parse_ir_text(text, path)
    check_target_cpus(mod, path)
    return mod


def verify(mod: llvm.ModuleRef, where: str) -> None:
    try:
        mod.verify()
    except Exception as exc:
        raise EnzccError(f"broken LLVM IR: {_first_line(exc)}", where) from None


@lru_cache(maxsize=None)
def cpu_problem(triple: str, cpu: str) -> str | None:
    """Why LLVM cannot generate code for ``cpu`` on ``triple`` (None: it can, or llc-22 is not there to ask).
    LLVM ends the whole process on some CPUs (an unknown one or a 32-bit one for x86-64: '64-bit code requested
    on a subtarget that doesn't support it'), so llc-22 compiles an empty function for it first."""
    if cpu in ("", "generic"):
        return None
    from enzcc.tools import find_tool

    llc = find_tool("llc", required=False)
    if not llc:
        return None
    proc = subprocess.run([llc, f"-mtriple={triple}", f"-mcpu={cpu}", "-filetype=null", "-o", "-", "-"],
                          input=b"define void @f() {\n  ret void\n}\n", capture_output=True)
    err = proc.stderr.decode(errors="replace")
    if "is not a recognized processor" in err:
        return f"unknown target CPU '{cpu}' for {triple}"
    if proc.returncode != 0:
        fatal = re.search(r"LLVM ERROR: (.*)", err)
        return f"target CPU '{cpu}' cannot be used for {triple}: {fatal.group(1) if fatal else _first_line(err)}"
    return None


def check_target_cpus(mod: llvm.ModuleRef, where: str) -> None:
    """Every ``"target-cpu"`` function attribute of an IR input names a CPU LLVM can compile for."""
    triple = mod.triple or host_triple()
    cpus = {m.decode(errors="replace") for fn in mod.functions for attrs in fn.attributes
            for m in re.findall(rb'"target-cpu"="([^"]*)"', attrs)}
    for cpu in sorted(cpus):
        problem = cpu_problem(triple, cpu)
        if problem:
            raise EnzccError(problem, where)


def target_machine(triple: str, opt_level: int, cpu: str | None = None, features: str | None = None,
                   pic: bool = True) -> llvm.TargetMachine:
    """A target machine for ``triple``. NVPTX defaults to sm_90 with PTX 8.0."""
    ensure_initialized()
    try:
        target = llvm.Target.from_triple(triple)
    except Exception as exc:
        raise EnzccError(f"unsupported target '{triple}': {_first_line(exc)}") from None
    if triple.startswith("nvptx"):
        cpu = cpu or "sm_90"
        features = features if features is not None else "+ptx80"
        return target.create_target_machine(cpu=cpu, features=features, opt=min(opt_level, 3))
    if cpu == "native":
        cpu = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten()
    elif cpu and cpu_problem(triple, cpu):
        raise EnzccError(cpu_problem(triple, cpu))
    tm = target.create_target_machine(cpu=cpu or "", features=features or "", opt=min(opt_level, 3),
                                      reloc="pic" if pic else "static", codemodel="small")
    # LLVM's own tools may do this machine's work (enzcc.backend.llvm_tools) when it is the target's default one:
    # a named CPU's features are spelled differently by llvmlite and by llc (its objects differed)
    tm.enzcc_tools = (min(opt_level, 3), pic) if not (cpu or features) else None
    return tm


def optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine, level: int, vectorize: bool = True,
             unroll: bool = True, loop_vectorize: bool | None = None,
             slp_vectorize: bool | None = None, fresh: bool = False) -> llvm.ModuleRef:
    """Run LLVM's default per-module pipeline at ``-O<level>`` (new pass manager) and return the optimized
    module: ``mod`` itself or, with ``fresh``, a new one when it is large (``opt-22`` does the work:
    :func:`_optimized_by_tools`). ``fresh``: ``mod`` is as it was parsed from LLVM text (nothing but linkage
    changed since), and the caller goes on with the returned module. The vectorizers run as clang runs them:
    loops and straight-line code (SLP) from -O2 on, unless ``loop_vectorize`` / ``slp_vectorize``
    (``-f[no-]vectorize``, ``-f[no-]slp-vectorize``) say otherwise; ``vectorize=False``: neither.
    ``unroll=False``: no loop unrolling at all (``-fno-unroll-loops``; loops marked as fixed-point iterations
    must stay loops until AD)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=max(0, min(level, 3)))
    # llvmlite's defaults are LLVM's (loop vectorizer on at every level, SLP never); clang's are by level
    pto.loop_vectorization = vectorize and (level >= 2 if loop_vectorize is None else loop_vectorize)
    pto.slp_vectorization = vectorize and (level >= 2 if slp_vectorize is None else slp_vectorize)
    if not unroll:
        pto.loop_unrolling = False
    if not vectorize:
        # before AD: scalar loops; vectorization comes after AD. Loops of constant trip count are still fully
        # unrolled, but no runtime or partial unrolling (remainder loops would add control flow to reverse).
        no_partial_unrolling()
    elif tm.triple.startswith(_UNROLLING_BY_DEFAULT):
        partial_unrolling_again()
    if fresh and not (pto.slp_vectorization and level < 2):
        # (opt-22 below -O2 has no SLP pass for -vectorize-slp to turn on: that one case stays in llvmlite)
        flags = [*_process_options.values(), f"-vectorize-loops={_bool(pto.loop_vectorization)}",
                 f"-vectorize-slp={_bool(pto.slp_vectorization)}", *([] if unroll else ["-disable-loop-unrolling"])]
        done = _optimized_by_tools(mod, tm, max(0, min(level, 3)), flags)
        if done is not None:
            return done
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _optimized_by_tools(mod: llvm.ModuleRef, tm: llvm.TargetMachine, level: int,
                        flags: list[str]) -> llvm.ModuleRef | None:
    """A large module optimized by ``opt-22`` (:mod:`enzcc.backend.llvm_tools`), or None (llvmlite does it).

    ``mod`` goes as the text LLVM prints of it: it was parsed from text, so opt-22 parses the same module, its
    values' uses listed in the same order (bitcode from llvmlite would not keep that order, and LLVM's passes
    read it: the output would differ). It comes back as bitcode, which keeps opt's order, parsed in a context of
    its own (in llvmlite's global one, its named types would be renamed), and carries that bitcode for
    :func:`emit_object` while nothing changes it (:data:`FINAL`)."""
    if getattr(tm, "enzcc_tools", None) is None or _is_gpu(tm.triple) or \
            not llvm_tools.wanted(len(mod.as_bitcode())):
        return None
    out = llvm_tools.optimize(str(mod).encode(), level, flags)
    if out is None:
        return None
    try:
        done = llvm.parse_bitcode(out, context=llvm.create_context())
    except Exception:  # noqa: BLE001  (a tool of another LLVM 22 release: llvmlite does the work)
        return None
    done.name = mod.name  # (printed as the ModuleID of -S -emit-llvm)
    setattr(done, FINAL, out)
    return done


#: the attribute of a module that :func:`emit_object` and :func:`emit_assembly` may hand to ``llc-22`` as it is:
#: the bytes (bitcode, or text it was parsed from) that make exactly this module. Set only where nothing changes
#: the module before its code generation: by :func:`_optimized_by_tools` for the pipeline's last optimization and
#: by the block splitting after it (:func:`enzcc.backend.pipeline.split_blocks`)
FINAL = "enzcc_final"


def promote_locals(mod: llvm.ModuleRef, tm: llvm.TargetMachine, names: list[str]) -> None:
    """SROA (locals to SSA values) on the functions ``names``."""
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
    fpm = llvm.create_new_function_pass_manager()
    fpm.add_sroa_pass()
    for name in names:
        fpm.run(mod.get_function(name), pb)


#: the LLVM options this process set (name -> ``-name=value``): LLVM's own tools get them too
_process_options: dict[str, str] = {}


def _set_option(flag: str) -> None:
    """``flag`` (``-name=value``) set in llvmlite's LLVM for the rest of the process, and remembered."""
    llvm.set_option("enzcc", flag)
    _process_options[flag.split("=", 1)[0]] = flag


_unroll_options_set = False


def no_partial_unrolling() -> None:
    """No runtime or partial loop unrolling (full unrolling of constant-trip loops stays). LLVM's unroller
    options are process-wide: once set they hold for every later run, which is why only processes that
    differentiate something set them (before AD in both AD modes, so the run after AD is the same)."""
    global _unroll_options_set
    if not _unroll_options_set:
        _set_option("-unroll-runtime=false")
        _set_option("-unroll-allow-partial=false")
        _unroll_options_set = True


#: targets whose LLVM cost model turns runtime and partial unrolling on for every CPU (x86: each CPU model has
#: a loop buffer size), so that turning them on again after AD gives what clang does at -O2
_UNROLLING_BY_DEFAULT = ("x86_64", "i386", "i486", "i586", "i686")


def partial_unrolling_again() -> None:
    """Runtime and partial unrolling as by default again, for the optimization after AD: the primal functions
    of a program that differentiates are then unrolled as clang unrolls them (``bench/fft``'s primal took 8%
    longer without), and so are the derivatives. The options cannot be unset, only set, so this is done only
    for targets where setting them on is the default (:data:`_UNROLLING_BY_DEFAULT`)."""
    global _unroll_options_set
    if _unroll_options_set:
        _set_option("-unroll-runtime=true")
        _set_option("-unroll-allow-partial=true")
        _unroll_options_set = False


#: the largest scheduling region (instructions of one block) LLVM's SLP vectorizer builds trees in; LLVM's own
#: default is 100,000
SLP_SCHEDULE_BUDGET = 5000
_slp_budget_set = False


def bounded_slp_scheduling() -> None:
    """Limit the SLP vectorizer's scheduling region to :data:`SLP_SCHEDULE_BUDGET` instructions, for processes
    that differentiate. A derivative of long straight-line code is one block where forward values are read by
    the reverse sweep thousands of instructions later; each tree the vectorizer tries (the operands of every
    reduction-like chain of adjoint sums) rescheduled the region between them, quadratic in the block's size
    (1,000 statements: the optimization after AD took 0.51 s, 0.24 s with the limit; the derivative's run time
    did not change). Six of the seven bench programs compile to the same IR with it; `ode`'s differs in a few
    vectorized stores, its gradient taking the same time. Process-wide, like the unroller's options."""
    global _slp_budget_set
    if not _slp_budget_set:
        _set_option(f"-slp-schedule-budget={SLP_SCHEDULE_BUDGET}")
        _slp_budget_set = True


def emit_object(mod: llvm.ModuleRef, tm: llvm.TargetMachine) -> bytes:
    if _is_gpu(tm.triple):
        return guarded_codegen(lambda: tm.emit_object(mod), tm.triple)
    return _codegen_by_tools(mod, tm, "object") or tm.emit_object(mod)


def emit_assembly(mod: llvm.ModuleRef, tm: llvm.TargetMachine) -> str:
    if _is_gpu(tm.triple):
        return guarded_codegen(lambda: tm.emit_assembly(mod).encode(), tm.triple).decode()
    out = _codegen_by_tools(mod, tm, "asm")
    return out.decode() if out is not None else tm.emit_assembly(mod)


def _codegen_by_tools(mod: llvm.ModuleRef, tm: llvm.TargetMachine, kind: str) -> bytes | None:
    """The object or assembly of a module that went through ``opt-22`` from ``llc-22``, given the bytes that
    make it (:data:`FINAL`), or None (llvmlite does it)."""
    final = getattr(mod, FINAL, None)
    settings = getattr(tm, "enzcc_tools", None)
    if final is None or settings is None:
        return None
    return llvm_tools.codegen(final, settings[0], kind, settings[1])


def _is_gpu(triple: str) -> bool:
    return triple.startswith(("nvptx", "amdgcn"))


_LLVM_MESSAGE = re.compile(r"^(?:LLVM ERROR: |error: |.*?: error: )(.*)$", re.M)


def guarded_codegen(emit, triple: str) -> bytes:
    """``emit()`` (code generation, returning bytes) in a child process. LLVM reports what it cannot generate
    code for (a GPU target: "no libcall available for fexp", "Cannot select: fsin") by printing it and ending
    the process (``exit(1)``, or an abort with a stack dump), which would leave no chance to report it as enzcc
    does or to remove the run's temporary files: here it is a one-line :class:`EnzccError` with LLVM's
    message. The output comes back through a memory file (and anything LLVM printed, when it succeeds)."""
    if not hasattr(os, "fork") or not hasattr(os, "memfd_create"):
        return emit()
    out, err = os.memfd_create("enzcc-codegen"), os.memfd_create("enzcc-codegen-errors")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 3
            try:
                os.dup2(err, 2)
                data = emit()
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view):]
                code = 0
            except BaseException as exc:  # noqa: BLE001  (reported by the parent)
                os.write(2, f"error: {type(exc).__name__}: {exc}\n".encode(errors="replace"))
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        text = _read_all(err).decode(errors="replace")
        if status == 0:
            if text:  # (LLVM's warnings, as they would have been shown)
                sys.stderr.write(text)
            return _read_all(out)
        found = _LLVM_MESSAGE.search(text)
        message = found.group(1).strip() if found else _first_line(text) if text.strip() else \
            f"the code generator ended with status {status}"
        raise EnzccError(f"LLVM cannot generate code for {triple}: {message}")
    finally:
        os.close(out)
        os.close(err)


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def value_name(value) -> str:
    """A function's or global's name. Names are bytes to LLVM (C's ``asm("...")`` labels may hold any), and
    llvmlite's ``.name`` fails on ones that are not UTF-8: those keep their bytes as surrogate escapes."""
    try:
        return value.name
    except UnicodeDecodeError:
        return llvm.ffi.lib.LLVMPY_GetValueName(value).decode("utf-8", "surrogateescape")


def module_text(mod: llvm.ModuleRef, where: str) -> str:
    """The module as LLVM text. LLVM prints some strings (attribute names) byte for byte: where that is not
    UTF-8 the text cannot go through enzcc's IR model, which is an error naming the bytes."""
    try:
        return str(mod)
    except UnicodeDecodeError as exc:
        raw = exc.object
        start = max(raw.rfind(b"\n", 0, exc.start) + 1, exc.start - 40)
        end = raw.find(b"\n", exc.start)
        end = min(end if end >= 0 else len(raw), exc.start + 40)
        excerpt = raw[start:end].decode("utf-8", "backslashreplace").strip()
        raise EnzccError(f"cannot differentiate: the module's LLVM IR holds a string that is not UTF-8 "
                         f"(byte 0x{raw[exc.start]:02x} in '{excerpt}')", where) from None


def defined_and_undefined(mod: llvm.ModuleRef) -> tuple[set[str], set[str]]:
    """Names of the global symbols a module defines and the ones it needs from elsewhere."""
    defined: set[str] = set()
    undefined: set[str] = set()
    local = (llvm.Linkage.internal, llvm.Linkage.private)
    for value in list(mod.functions) + list(mod.global_variables):
        name = value_name(value)
        if name.startswith("llvm."):
            continue
        if value.is_declaration or value.linkage == llvm.Linkage.available_externally:
            # (a C99 inline body kept for inlining at -O1 and above: the definition is another object's, dropped
            # from the code made, so the program still needs that object)
            undefined.add(name)
        elif value.linkage not in local:
            defined.add(name)
    return defined, undefined - defined
