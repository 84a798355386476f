"""C and C++ through clang-22 (and assembly, which has no bitcode)."""

from __future__ import annotations

import os

from enzcc.frontends.base import CompileRequest, Frontend
from enzcc.tools import find_tool, run


#: Enzyme's function attributes. clang-22 does not know them and would drop them with a warning; as macros they
#: become ``annotate`` attributes, which reach the IR in ``@llvm.global.annotations`` (read by enzcc.ad.hints,
#: which refuses those it does not implement). Not ``enzyme_nofree``: that is also the name of a marker global
#: programs declare (``int enzyme_nofree;``, split mode), and as an attribute a promise enzcc does not need
#: (clang warns that it ignores it).
ENZYME_ATTRIBUTES = ("enzyme_inactive", "enzyme_inactive_noblock", "enzyme_notypeanalysis",
                     "enzyme_no_escaping_allocation", "enzyme_sparse_accumulate")
ATTRIBUTE_DEFINES = [f'-D{a}=annotate("{a}")' for a in ENZYME_ATTRIBUTES] + \
    ['-Denzyme_function_like(name)=annotate("enzyme_function_like=" name)',
     '-Denzyme_shadow(name)=annotate("enzyme_shadow=" #name)']  # the global that is a global's shadow


#: enzcc's own headers (``#include <enzyme/enzyme>``, the C++ interface; ``<enzyme/fixed_point.h>``), searched
#: after the user's -I/-isystem
INCLUDE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "include")


def include_args(lang: str | None) -> list[str]:
    """Where a compile of ``lang`` finds enzcc's headers."""
    return ["-idirafter", INCLUDE_DIR] if lang in ("c", "c++") else []


def _include_args(req: CompileRequest) -> list[str]:
    return include_args(req.lang)


def _x_args(req: CompileRequest) -> list[str]:
    if not req.forced_lang:
        return []
    return ["-x", {"c": "c", "c++": "c++", "assembler": "assembler",
                   "assembler-with-cpp": "assembler-with-cpp"}[req.lang]]


def dependency_args(req: CompileRequest) -> list[str]:
    """The user's -MD style flags, made explicit so they name the final object, not a temporary."""
    deps = list(req.dep_args)
    if not deps:
        return deps
    if ("-MD" in deps or "-MMD" in deps) and not any(a.startswith("-MF") for a in deps):
        deps += ["-MF", os.path.splitext(req.final_name)[0] + ".d"]
    if not any(a.startswith(("-MT", "-MQ")) for a in deps):
        deps += ["-MQ", req.final_name]
    return deps


class ClangFrontend(Frontend):
    langs = ("c", "c++")

    def driver(self, req: CompileRequest) -> str:
        return find_tool("clang++" if req.lang == "c++" else "clang")

    def target_args(self, req: CompileRequest) -> list[str]:
        return []  # --target is already part of compile_args

    def compile(self, req: CompileRequest) -> None:
        cmd = [self.driver(req), *_x_args(req), *ATTRIBUTE_DEFINES, *req.compile_args, *req.lang_args,
               *_include_args(req), *dependency_args(req)]
        if req.opt_flag:
            cmd.append(req.opt_flag)
        cmd += ["-c", req.src, "-o", req.out_obj]
        run(cmd, tool="clang")

    def bitcode(self, req: CompileRequest, dependencies: bool = False) -> bytes:
        out = req.tmp(".bc")
        cmd = [self.driver(req), *_x_args(req), *ATTRIBUTE_DEFINES, *req.compile_args, *req.lang_args,
               *_include_args(req), *(dependency_args(req) if dependencies else []), f"-O{min(req.level, 3)}"]
        if req.level == 0:
            cmd += ["-Xclang", "-disable-O0-optnone"]
        else:
            cmd += ["-Xclang", "-disable-llvm-passes"]
        cmd += ["-Qunused-arguments", "-c", "-emit-llvm", req.src, "-o", out]
        run(cmd, capture=not req.show_diagnostics, tool="clang")
        with open(out, "rb") as fh:
            return fh.read()

    def bitcode_with_dependencies(self, req: CompileRequest) -> bytes:
        req.show_diagnostics = True
        return self.bitcode(req, dependencies=True)

    def compile_with_bitcode(self, req: CompileRequest) -> bytes:
        """One clang run: the real compile, which also puts the module as it was before optimization into the
        object (``-fembed-bitcode=all``: the same bitcode as ``-Xclang -disable-llvm-passes``, and the same
        machine code as without it). At -O0 the bitcode must stay optimizable: ``-disable-O0-optnone``, which
        changes nothing in -O0 machine code."""
        from enzcc.backend.embed import elf_section
        from enzcc.errors import EnzccError

        cmd = [self.driver(req), *_x_args(req), *ATTRIBUTE_DEFINES, *req.compile_args, *req.lang_args,
               *_include_args(req), *dependency_args(req)]
        if req.opt_flag:
            cmd.append(req.opt_flag)
        if req.level == 0:
            cmd += ["-Xclang", "-disable-O0-optnone"]
        cmd += ["-Xclang", "-fembed-bitcode=all", "-c", req.src, "-o", req.out_obj]
        run(cmd, tool="clang")
        with open(req.out_obj, "rb") as fh:
            obj = fh.read()
        if obj[:4] in (b"BC\xc0\xde", b"\xde\xc0\x17\x0b"):  # (raw or wrapped bitcode: -flto, -emit-llvm)
            raise EnzccError("this compile makes an LLVM bitcode object (-flto?); enzcc -c makes native objects "
                             "that carry their bitcode for AD at the link: drop -flto", req.src)
        data = elf_section(obj, ".llvmbc")
        if not data:
            raise EnzccError(f"clang put no bitcode into the object for {req.src}", req.src)
        return data

    def codegen(self, req: CompileRequest, bitcode: bytes) -> None:
        path = req.tmp(".bc")
        with open(path, "wb") as fh:
            fh.write(bitcode)
        # the flags that matter after the frontend (-O, -march, -fPIC, -ffunction-sections, -g...) are among
        # the compile flags; the others are unused for bitcode input
        cmd = [self.driver(req), *req.compile_args, *req.lang_args, "-Qunused-arguments"]
        if req.opt_flag:
            cmd.append(req.opt_flag)
        cmd += ["-c", path, "-o", req.out_obj]
        run(cmd, tool="clang")


class AssemblerFrontend(Frontend):
    """Assembly goes straight to clang; the object carries no bitcode."""

    langs = ("assembler", "assembler-with-cpp")
    has_bitcode = False

    def compile(self, req: CompileRequest) -> None:
        cmd = [find_tool("clang"), *_x_args(req), *req.compile_args, *dependency_args(req),
               "-c", req.src, "-o", req.out_obj]
        run(cmd, tool="clang")
