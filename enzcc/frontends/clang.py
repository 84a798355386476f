"""C and C++ through clang-22 (and assembly, which has no bitcode)."""

from __future__ import annotations

from enzcc.clang_args import ATTRIBUTE_DEFINES, INCLUDE_DIR, compile_with_bitcode_command, dependency_flags, \
    include_args, x_args
from enzcc.frontends.base import CompileRequest, Frontend
from enzcc.tools import find_tool, run

__all__ = ["ATTRIBUTE_DEFINES", "INCLUDE_DIR", "include_args", "dependency_args", "ClangFrontend",
           "AssemblerFrontend"]


def _include_args(req: CompileRequest) -> list[str]:
    return include_args(req.lang)


def _x_args(req: CompileRequest) -> list[str]:
    return x_args(req.lang, req.forced_lang)


def dependency_args(req: CompileRequest) -> list[str]:
    """The user's -MD style flags, made explicit so they name the final object, not a temporary."""
    return dependency_flags(req.dep_args, req.final_name)


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
        """One clang run (:func:`enzcc.clang_args.compile_with_bitcode_command`): the real compile, and the
        module before optimization, read back from the object's ``.llvmbc``."""
        from enzcc.backend.embed import elf_section
        from enzcc.errors import EnzccError

        cmd = compile_with_bitcode_command(self.driver(req), req.src, req.out_obj, req.final_name, lang=req.lang,
                                           forced=req.forced_lang, compile_args=req.compile_args,
                                           lang_args=req.lang_args, dep_args=req.dep_args, opt_flag=req.opt_flag,
                                           level=req.level)
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
