"""The clang-compatible driver: compile (-c), assembly (-S), link, and everything clang answers alone."""

from __future__ import annotations

import os
import sys

from enzcc import __version__
from enzcc.backend import embed as E
from enzcc.errors import EnzccError
from enzcc.files import atomic_output, mentions_enzyme, private_directory
from enzcc.flags import Input, Invocation
from enzcc.frontends import CompileRequest, frontend_for
from enzcc.frontends.clang import dependency_args
from enzcc.records import factory, record
from enzcc.timing import TIMES
from enzcc.tools import find_tool, run


ENZCC_HELP = """
ENZCC OPTIONS (besides clang's, above; Fortran, Rust, LLVM IR and MLIR inputs are accepted too):
  --lang <c|c++|fortran|rust|llvm|mlir>  Treat source inputs as this language
  --ad-mode=<after-opt|before-opt>      Synthesize gradients after optimization (default) or before it
  --ad-inline=<auto|all|none>           Inside differentiated code, inline calls to functions up to a size
                                        (auto, default), every call (all) or none: calls that are not
                                        inlined use the callee's own derivative functions
  --time-report                         Print the seconds spent in each compiler stage
  --no-cache                            Neither use nor fill the build cache (ENZCC_CACHE_DIR, default
                                        ~/.cache/enzcc; ENZCC_CACHE_MAX_SIZE bytes, default 2 GiB)
  --cache-stats                         Print the build cache's hits, misses and size
  --keep-temps                          Keep intermediate files (their directory is printed)
  --cuda-host-emulation                 Run CUDA kernels on the CPU: each GPU thread a coroutine, blocks with
                                        their own shared memory and real barriers (tests without a GPU;
                                        ENZCC_CUDA_HOST_ORDER=forward|reverse|shuffle[:seed] at run time)
  --enzcc-version                       Print enzcc's version alone
  build [-f enzcc.toml] [outputs...]    Multi-language builds described by enzcc.toml (enzcc build --help)
Fortran sources (.f90, .f, ... or --lang fortran) are compiled by flang-22, the flang LLVM compiler
(`enzcc --lang fortran --help` shows its options).
Environment: ENZCC_VERBOSE=1 prints each command run; ENZCC_NO_FAST_PATH=1 sends every call through the full
driver (enzcc/fastpath.py says which calls skip it); ENZCC_CLANG, ENZCC_FLANG, ENZCC_RUSTC... choose the
tools; ENZCC_RUSTFLAGS adds rustc flags; ENZCC_NO_PTXAS=1 skips the ptxas check of generated PTX."""


def write_atomically(path: str, data: bytes, mode: int | None = None) -> None:
    if path == "-":  # (-o -: standard output, as clang writes it)
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
        if mode is not None:
            os.chmod(tmp, mode)


def build(*args, **kwargs):
    """The orchestrator (:func:`enzcc.backend.pipeline.build`), imported on first use: a compile that
    differentiates nothing never loads LLVM into this process."""
    from enzcc.backend.pipeline import build as run_pipeline

    return run_pipeline(*args, **kwargs)


@record
class LinkItem:
    """One element of the native link line after classification."""

    kind: str
    """``flag``, ``native`` (object/archive/library without bitcode), ``bitcode`` (object with bitcode),
    ``archive`` (archive with bitcode members)."""
    value: str
    records: list[E.BitcodeRecord] = factory(list)
    keep_native: bool = False
    """For archives: some members have no bitcode, so the archive still goes to the native linker."""
    native_code: bool = True
    """The file has machine code besides its bitcode (an ``enzcc -c`` object, or an archive of them), so a
    link that differentiates nothing can pass it to the native linker as it is."""
    source: Input | None = None
    """For a source compiled by this link: the source (its object holds only bitcode)."""


class Driver:
    """Runs one classified command line."""

    def __init__(self, inv: Invocation, cxx: bool = False, extra_lang_args: dict[str, list[str]] | None = None):
        self.inv = inv
        self.cxx = cxx
        self.extra_lang_args = extra_lang_args or {}
        self.workdir = private_directory()

    # -- entry ----------------------------------------------------------------------------------

    def run(self) -> int:
        try:
            mode = self.inv.mode
            if mode == "enzcc-version":
                print(f"enzcc {__version__}")
                return 0
            if mode == "cache-stats":
                from enzcc.backend.cache import format_stats

                print(format_stats())
                return 0
            if mode == "query":
                return self.query()
            if mode in ("preprocess", "passthrough"):
                return self.passthrough()
            if not self.inv.inputs:
                raise EnzccError("no input files")
            if mode == "compile":
                return self.compile_mode()
            if mode == "asm":
                return self.asm_mode()
            return self.link_mode()
        finally:
            if self.inv.time_report:
                TIMES.report()
            self.close()

    def close(self) -> None:
        """Remove the temporaries (or say where they are kept)."""
        if self.inv.keep_temps:
            print(f"enzcc: temporaries kept in {self.workdir}", file=sys.stderr)
            return
        try:
            os.rmdir(self.workdir)  # (mostly it is empty: no need to import shutil)
        except OSError:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- things clang does alone ----------------------------------------------------------------

    def query(self) -> int:
        from enzcc.fastpath import query

        return query(self.inv, self.cxx, become=False)

    def passthrough(self) -> int:
        from enzcc.fastpath import passthrough

        return passthrough(self.inv, self.cxx, become=False)

    # -- compiling one source ---------------------------------------------------------------------

    def request(self, inp: Input, out_obj: str, final_name: str) -> CompileRequest:
        inv = self.inv
        args = list(inv.compile_args)
        if inv.is_nvptx and inv.cuda_arch and inp.lang in ("c", "c++") and \
                not any(a.startswith("-march=") for a in args):
            args.append(f"-march={inv.cuda_arch}")  # (C for NVPTX: the SM's builtins, such as sm_60's double atomics)
        return CompileRequest(src=inp.path, lang=inp.lang, out_obj=out_obj, final_name=final_name,
                              workdir=self.workdir, compile_args=args, dep_args=list(inv.dep_args),
                              opt_level=inv.opt_level, opt_flag=inv.opt_flag, target=inv.target,
                              cpu=inv.cuda_arch if inp.lang == "cuda" else inv.cpu,
                              forced_lang=inp.forced or bool(inv.lang_override),
                              lang_args=list(self.extra_lang_args.get(inp.lang, [])))

    def record_for(self, req: CompileRequest, bitcode: bytes) -> E.BitcodeRecord:
        return E.BitcodeRecord(bitcode=bitcode, source=req.src, lang=req.lang, opt=req.level,
                               target=self.inv.target or "")

    def compile_source(self, inp: Input, out_obj: str, final_name: str,
                       for_link: bool = False) -> list[E.BitcodeRecord]:
        """Write ``out_obj``: the real native object carrying the source's bitcode. Returns the records.

        Where no native object is wanted (NVPTX; ``-flto``, whose objects are bitcode; or ``for_link``: the
        object only feeds this enzcc's own link, which uses the bitcode alone, and no dependency files are asked
        for) ``out_obj`` is a bitcode container and the bitcode compile is the only compile."""
        if not os.path.exists(inp.path) and inp.path != "-":
            raise EnzccError(f"no such file or directory: '{inp.path}'")
        fe = frontend_for(inp.lang)
        req = self.request(inp, out_obj, final_name)
        if inp.lang == "cuda":
            return self.compile_cuda_source(req)
        if self.inv.is_nvptx and not fe.has_bitcode:
            raise EnzccError("assembly sources cannot be compiled for NVPTX", inp.path)
        if self.inv.is_nvptx or (fe.has_bitcode and (self.inv.lto or (for_link and not self.inv.dep_args))):
            # no native object is wanted: the bitcode compile is the only one, its diagnostics shown
            req.show_diagnostics = True
            with TIMES.stage("frontend", inp.path):
                bitcode = (fe.bitcode_with_dependencies(req) if self.inv.dep_args else None) or fe.bitcode(req)
                rec = self.record_for(req, bitcode)
            with open(out_obj, "wb") as fh:
                fh.write(E.pack_records([rec]))
            return [rec]
        if not fe.has_bitcode:
            with TIMES.stage("frontend", inp.path):
                fe.compile(req)
            return []
        if mentions_enzyme(inp.path):
            # most likely differentiates: the bitcode alone, and the object made from the derivative (clang's
            # own optimization and code generation of the primal would be thrown away)
            with TIMES.stage("frontend", inp.path):
                bitcode = fe.bitcode_with_dependencies(req)
            if bitcode is not None:
                rec = self.record_for(req, bitcode)
                if b"__enzyme_" not in rec.bitcode or not self._differentiate_translation_unit(rec, out_obj):
                    with TIMES.stage("codegen", inp.path):
                        fe.codegen(req, rec.bitcode)
                E.embed(out_obj, [rec], self.workdir)
                return [rec]
        with TIMES.stage("frontend", inp.path):
            rec = self.record_for(req, fe.compile_with_bitcode(req))
        if b"__enzyme_" in rec.bitcode:
            self._differentiate_translation_unit(rec, out_obj)
        E.embed(out_obj, [rec], self.workdir)
        return [rec]

    def cuda_device_code(self, req: CompileRequest, kind: str = "asm", dependencies: bool = False) -> bytes:
        """A CUDA source's device side through enzcc's pipeline (optimize, AD, optimize, libdevice): PTX
        (``asm``), or the final module (``llvm``, ``bitcode``)."""
        from enzcc.frontends.cuda import DEVICE_TRIPLE, arch_of, given_cuda_path

        if self.inv.target and self.inv.target != DEVICE_TRIPLE and not self.inv.target.startswith("x86_64"):
            raise EnzccError(f"--target={self.inv.target}: a CUDA source is built for the host and "
                             f"{DEVICE_TRIPLE}", req.src)
        fe = frontend_for("cuda")
        req.show_diagnostics = True
        with TIMES.stage("frontend", req.src + " (device)"):
            rec = E.BitcodeRecord(bitcode=fe.device_bitcode(req, dependencies), source=req.src, lang="cuda",
                                  opt=req.level, target=DEVICE_TRIPLE)
        opts = self.pipeline_options([rec])
        opts.triple, opts.cpu = DEVICE_TRIPLE, arch_of(req)
        opts.cuda_path = given_cuda_path(req.compile_args)  # (libdevice, linked after AD)
        return build([rec], opts, kind, req.src)

    def compile_cuda_source(self, req: CompileRequest) -> list[E.BitcodeRecord]:
        """``-c`` of a CUDA source: the device side through enzcc's pipeline into a fat binary (PTX and
        machine code for the one GPU architecture), then the host side's native object embedding it, with the
        host side's bitcode carried in the object as for C++ (AD of host code happens at the link)."""
        from enzcc.frontends.cuda import arch_of, fat_binary

        fe = frontend_for("cuda")
        if self.inv.cuda_host_emulation:
            self.compile_cuda_for_host_emulation(req)
            return []
        ptx = self.cuda_device_code(req)
        stem = os.path.splitext(os.path.basename(req.src))[0] or "stdin"
        fatbin = fat_binary(ptx, arch_of(req), self.workdir, f"{stem}-{os.urandom(4).hex()}", req.src)
        with TIMES.stage("frontend", req.src + " (host)"):
            bitcode = fe.compile_host(req, fatbin)
        rec = E.BitcodeRecord(bitcode=bitcode, source=req.src, lang="cuda", opt=req.level,
                              target=self.inv.target or "")
        E.embed(req.out_obj, [rec], self.workdir)
        return [rec]

    def compile_cuda_for_host_emulation(self, req: CompileRequest) -> None:
        """``--cuda-host-emulation``: the object of a CUDA source whose kernels run on the CPU: the device module
        as enzcc's pipeline made it (after AD), converted to a host module (:mod:`enzcc.backend.cuda_host`), and
        the host side compiled against the emulation's runtime, in one relocatable object. The link adds the
        runtime instead of CUDA's. (Tests check GPU gradients this way where there is no GPU.)"""
        from enzcc.backend import cuda_host

        device = self.cuda_device_code(req, "llvm").decode()
        with TIMES.stage("codegen", req.src + " (device code for the host)"):
            host_text = cuda_host.device_to_host(device)
            stem = os.path.join(self.workdir, f"{os.path.splitext(os.path.basename(req.src))[0] or 'stdin'}-"
                                              f"{os.urandom(4).hex()}")
            with open(stem + ".device.ll", "w") as fh:
                fh.write(host_text)
            # (-O0: the host compiler keeps the device code as enzcc made it, each access where it was)
            run([find_tool("clang"), "-O0", "-fPIC", "-Wno-override-module", "-c", stem + ".device.ll", "-o",
                 stem + ".device.o"], capture=True, tool="clang")
        with open(stem + ".gpubin", "w") as fh:
            fh.write("enzcc host emulation: the kernels are in the converted device module\n")
        host = frontend_for("cuda").host_args(req, stem + ".gpubin")
        with TIMES.stage("frontend", req.src + " (host)"):
            run([*host, *dependency_args(req), "-c", req.src, "-o", stem + ".host.o"], tool="clang")
        with open(stem + ".host.o", "rb") as fh:
            differentiates = b"__enzyme_" in fh.read()
        if differentiates:
            self._differentiate_emulated_host_side(req, host, stem)
        run([find_tool("clang++"), "-r", "-nostdlib", stem + ".host.o", stem + ".device.o", "-o", req.out_obj],
            capture=True, tool="linker")

    def _differentiate_emulated_host_side(self, req: CompileRequest, host: list[str], stem: str) -> None:
        """Host code of an emulated CUDA source that calls ``__enzyme_*`` (a host function using ``cudaMalloc``
        and ``cudaMemcpy``, differentiated): its object is made again from its bitcode through enzcc's pipeline,
        as the link does for a real GPU build (here the object is final: the function must be in this file)."""
        with TIMES.stage("frontend", req.src + " (host bitcode)"):
            # (unoptimized but optimizable, as every frontend's bitcode: enzcc's pipeline optimizes it)
            run([*host, "-Xclang", "-disable-O0-optnone" if req.level == 0 else "-disable-llvm-passes",
                 "-emit-llvm", "-c", req.src, "-o", stem + ".host.bc"], tool="clang")
        with open(stem + ".host.bc", "rb") as fh:
            rec = E.BitcodeRecord(bitcode=fh.read(), source=req.src, lang="cuda", opt=req.level,
                                  target=self.inv.target or "")
        data = build([rec], self.pipeline_options([rec]), "object", req.src)
        with open(stem + ".host.o", "wb") as fh:
            fh.write(data)

    def _differentiate_translation_unit(self, rec: E.BitcodeRecord, out_obj: str) -> bool:
        """When everything a translation unit differentiates is defined in it, its native object gets the
        derivatives right away, so the object also works with a plain linker. Otherwise AD waits for the link
        (which always redoes it on the whole program); so does split mode, whose augmented primal and reverse
        calls may sit in different objects and must agree on the tape's layout, and so does a context of global
        shadows, whose layout covers the globals of the whole program. Returns whether it wrote the object."""
        from enzcc.ad.errors import MissingBodyError

        if any(name in rec.bitcode for name in (b"__enzyme_augmentfwd", b"__enzyme_reverse", b"enzyme_context",
                                                b"__enzyme_shadow", b"__enzyme_zero_shadows")):
            return False  # split mode, contexts: one layout for the whole program, made at the link
        try:
            data = build([rec], self.pipeline_options([rec]), "object", rec.source)
        except MissingBodyError:
            return False
        with open(out_obj, "wb") as fh:
            fh.write(data)
        return True

    def default_object_name(self, inp: Input) -> str:
        return os.path.splitext(os.path.basename(inp.path))[0] + ".o"

    def compile_mode(self) -> int:
        sources = [i for i in self.inv.inputs if i.lang]
        if self.inv.output and len(sources) > 1:
            raise EnzccError("cannot specify -o when generating multiple output files")
        for inp in self.inv.inputs:
            if not inp.lang:
                print(f"enzcc: warning: {inp.path}: linker input unused because linking is not done",
                      file=sys.stderr)
        for inp in sources:
            out = self.inv.output or self.default_object_name(inp)
            with atomic_output(out) as tmp:
                self.compile_source(inp, tmp, out)
        return 0

    # -- assembly / PTX ---------------------------------------------------------------------------

    def pipeline_options(self, records: list[E.BitcodeRecord]):
        from enzcc.backend.pipeline import PipelineOptions

        level = self.inv.opt_level
        if level is None:
            level = max((r.opt for r in records), default=0)
        triple = self.inv.target if self.inv.target else None
        # (the CPU of a host build is -march's, never the GPU of its CUDA sources)
        cpu = self.inv.cpu if self.inv.is_nvptx else self.inv.march
        return PipelineOptions(opt_level=level, ad_mode=self.inv.ad_mode, cpu=cpu, triple=triple,
                               ad_inline=self.inv.ad_inline, cache=not self.inv.no_cache,
                               loop_vectorize=self.inv.loop_vectorize, slp_vectorize=self.inv.slp_vectorize,
                               unroll_loops=self.inv.unroll_loops, veclib=self.inv.veclib)

    def asm_mode(self) -> int:
        """``-S``: clang's own assembly when enzcc has nothing to add (host C/C++ without ``__enzyme_*`` calls),
        else assembly (PTX for NVPTX) from enzcc's pipeline, translation unit by translation unit. With
        ``-emit-llvm`` the same, as LLVM text (``-S``) or bitcode (``-c``): the module after AD and the second
        optimization, what the code generator would get."""
        sources = [i for i in self.inv.inputs if i.lang]
        if self.inv.output and len(sources) > 1:
            raise EnzccError("cannot specify -o when generating multiple output files")
        if any(not frontend_for(i.lang).has_bitcode for i in sources):
            return self.passthrough()
        emit_llvm = self.inv.emit_llvm
        bitcode_out = emit_llvm and "-S" not in self.inv.args
        ext = (".bc" if bitcode_out else ".ll") if emit_llvm else ".ptx" if self.inv.is_nvptx else ".s"
        kind = ("bitcode" if bitcode_out else "llvm") if emit_llvm else "asm"
        if any(i.lang == "cuda" for i in sources):
            if not all(i.lang == "cuda" for i in sources):
                raise EnzccError("-S: CUDA sources and others cannot be mixed in one command")
            for inp in sources:  # the device side, after AD: PTX (or LLVM with -emit-llvm)
                ext = (".bc" if bitcode_out else ".ll") if emit_llvm else ".ptx"
                out = self.inv.output or os.path.splitext(os.path.basename(inp.path))[0] + ext
                req = self.request(inp, os.path.join(self.workdir, "unused.o"), out)
                code = self.cuda_device_code(req, kind, dependencies=bool(self.inv.dep_args))
                if kind == "asm":
                    self.check_ptx(code, inp.path, req.cpu)
                write_atomically(out, code)
            return 0
        jobs = []
        for inp in sources:
            out = self.inv.output or os.path.splitext(os.path.basename(inp.path))[0] + ext
            req = self.request(inp, os.path.join(self.workdir, "unused.o"), out)
            with TIMES.stage("frontend", inp.path):
                jobs.append((inp, out, self.record_for(req, frontend_for(inp.lang).bitcode(req))))
        if (emit_llvm or not self.inv.is_nvptx) and all(i.lang in ("c", "c++") and b"__enzyme_" not in rec.bitcode
                                                         for i, _, rec in jobs):
            return self.passthrough()  # nothing for enzcc to do: clang's own -S output, exactly
        for inp, out, rec in jobs:
            text = build([rec], self.pipeline_options([rec]), kind, inp.path)
            if self.inv.is_nvptx and kind == "asm":
                self.check_ptx(text, inp.path)
            write_atomically(out, text)
        return 0

    def check_ptx(self, ptx: bytes, where: str, arch: str | None = None) -> None:
        """Assemble the PTX with ptxas, when the CUDA toolkit is installed, to prove it is accepted."""
        if os.environ.get("ENZCC_NO_PTXAS"):
            return
        ptxas = find_tool("ptxas", required=False)
        if not ptxas:
            return
        from enzcc.frontends.cuda import assemble_ptx

        path = os.path.join(self.workdir, "check.ptx")
        with open(path, "wb") as fh:
            fh.write(ptx)
        assemble_ptx(ptxas, path, arch or self.inv.cpu or "sm_90", os.devnull, where)

    # -- link -------------------------------------------------------------------------------------

    def _library_dirs(self) -> list[str]:
        dirs = [f[2:] for f in self.inv.link_flags() if f.startswith("-L")]
        dirs += [d for d in os.environ.get("LIBRARY_PATH", "").split(":") if d]
        return dirs

    def _resolve_lib(self, name: str) -> str | None:
        """The file ``-l<name>`` names in the user's library directories (None: a system library)."""
        static = "-static" in self.inv.link_flags()
        if name.startswith(":"):
            candidates = [name[1:]]
        else:
            candidates = ([] if static else [f"lib{name}.so"]) + [f"lib{name}.a"]
        for d in self._library_dirs():
            for cand in candidates:
                path = os.path.join(d, cand)
                if os.path.exists(path):
                    return path
        return None

    def classify(self, path: str, flag: str | None = None) -> LinkItem:
        """Look inside a link input for enzcc bitcode."""
        shown = flag or path
        if E.is_archive(path):
            recs: list[E.BitcodeRecord] = []
            native = False
            native_code = True
            for m in E.read_archive(path):
                found = E.records_in_object(m.data, f"{path}({m.name})")
                if not found and m.data[:8] == E.MAGIC:
                    found = E.unpack_records(m.data, f"{path}({m.name})")
                if found:
                    recs += found
                    native_code = native_code and m.data[:4] == b"\x7fELF"
                elif m.data[:4] == b"\x7fELF":
                    native = True
            if recs:
                return LinkItem("archive", shown, recs, keep_native=native, native_code=native_code)
            return LinkItem("native" if flag is None else "flag", shown)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            return LinkItem("native" if flag is None else "flag", shown)  # the native linker reports it
        if data[:8] == E.MAGIC:
            return LinkItem("bitcode", path, E.unpack_records(data, path), native_code=False)
        recs = E.records_in_object(data, path)
        if recs:
            return LinkItem("bitcode", path, recs)
        return LinkItem("native" if flag is None else "flag", shown)

    def link_mode(self) -> int:
        items: list[LinkItem] = []
        for n, x in enumerate(self.inv.link_line):
            if isinstance(x, str):
                lib = self._resolve_lib(x[2:]) if x.startswith("-l") else None
                items.append(self.classify(lib, x) if lib else LinkItem("flag", x))
            elif x.lang:
                obj = os.path.join(self.workdir, f"{n}-{self.default_object_name(x)}")
                recs = self.compile_source(x, obj, obj, for_link=True)
                with open(obj, "rb") as fh:
                    native = fh.read(4) == b"\x7fELF"
                items.append(LinkItem("bitcode" if recs else "native", obj, recs, native_code=native, source=x))
            else:
                items.append(self.classify(x.path))
        records = [r for it in items if it.kind == "bitcode" for r in it.records]
        archives = [(it.value, it.records) for it in items if it.kind == "archive"]
        output = self.inv.output or "a.out"
        if records and not self.inv.is_nvptx and not self.inv.whole_object and self._links_natively(items):
            for it in items:  # sources compiled by this link: their machine code, from the bitcode already made
                if it.kind == "bitcode" and not it.native_code:
                    with TIMES.stage("codegen", it.source.path):
                        frontend_for(it.source.lang).codegen(self.request(it.source, it.value, it.value),
                                                             it.records[0].bitcode)
            records = []  # nothing to differentiate: the machine code compiled per object is the program
        if self.inv.is_nvptx:
            if not records:
                raise EnzccError("nothing to link for NVPTX: no input carries bitcode")
            ptx = build(records, self.pipeline_options(records), "asm", output, archives)
            self.check_ptx(ptx, output)
            write_atomically(output, ptx)
            return 0
        line: list[str] = []
        extra: list[str] = []
        if records:
            all_records = records + [r for _, recs in archives for r in recs]
            obj_bytes = build(records, self.pipeline_options(all_records), "object", output, archives)
            if self.inv.whole_object:
                write_atomically(output, obj_bytes)
                return 0
            whole = os.path.join(self.workdir, "enzcc-whole-program.o")
            with open(whole, "wb") as fh:
                fh.write(obj_bytes)
            placed = False
            for it in items:
                if it.kind == "bitcode":
                    if not placed:
                        line.append(whole)
                        placed = True
                elif it.kind == "archive":
                    if it.keep_native:
                        line.append(it.value)
                else:
                    line.append(it.value)
            extra = self.runtime_libraries({r.lang for r in all_records})
        else:
            if self.inv.whole_object:
                raise EnzccError("--whole-program-object: no input carries bitcode")
            line = [it.value for it in items]
            extra = self.runtime_libraries({r.lang for it in items for r in it.records})
        langs = {r.lang for it in items for r in it.records} | {i.lang for i in self.inv.inputs if i.lang}
        linker = find_tool("clang++" if (self.cxx or langs & {"c++", "cuda"}) else "clang")
        with TIMES.stage("native-link", output):
            with atomic_output(output) as tmp:
                run([linker, *line, *extra, "-o", tmp], tool="linker")
        return 0

    @staticmethod
    def _links_natively(items: list[LinkItem]) -> bool:
        """The fast path of a link: when no input calls an ``__enzyme_*`` function, the program is what the
        native linker makes of the objects' own machine code; the whole-program rebuild is only for AD. False
        when an input other than a source of this link has bitcode only."""
        if any(b"__enzyme_" in r.bitcode for it in items for r in it.records):
            return False
        return not any(it.kind == "bitcode" and not it.native_code and it.source is None for it in items) and \
            not any(it.kind == "archive" and not it.native_code for it in items)

    def runtime_libraries(self, langs: set[str]) -> list[str]:
        """Native libraries the languages in the program need (Fortran and Rust runtimes)."""
        out: list[str] = []
        if "rust" in langs:
            from enzcc.frontends.rust import rust_std_archive

            lib, libs = rust_std_archive(self.inv.target)
            out += [lib, *libs]
        if self.inv.cuda_host_emulation:
            from enzcc.backend.cache import cache_dir
            from enzcc.backend.cuda_host import compile_runtime

            where = os.path.join(self.workdir, "runtime") if self.inv.no_cache else str(cache_dir() / "runtime")
            out += [compile_runtime(where), "-lm"]
        elif "cuda" in langs:
            from enzcc.frontends.cuda import cuda_link_libraries, given_cuda_path

            out += cuda_link_libraries(given_cuda_path(self.inv.compile_args))
        if "fortran" in langs:
            import subprocess

            rt = subprocess.run([find_tool("clang"), "-print-runtime-dir"], capture_output=True, text=True)
            path = os.path.join(rt.stdout.strip(), "libflang_rt.runtime.a")
            if not os.path.exists(path):
                raise EnzccError(f"flang runtime not found at {path}; install Debian package flang-22")
            out += [path, "-lm"]
            if not self.cxx:
                out += ["-lstdc++"]
        return out
