"""Fortran through flang-22."""

from __future__ import annotations

from enzcc.frontends.base import CompileRequest, Frontend
from enzcc.frontends.clang import dependency_args
from enzcc.tools import find_tool, run

#: C-family flags that flang rejects; dropped so one CFLAGS can serve a mixed project
_C_ONLY_PREFIXES = ("-std=c", "-std=gnu", "-std=iso", "--std=", "-include", "-imacros", "-isystem", "-iquote",
                    "-idirafter", "-iprefix", "-iwithprefix", "-isysroot", "-ansi", "-nostdinc", "-trigraphs",
                    "-Xclang", "-Xpreprocessor", "-fno-strict-aliasing", "-fstrict-aliasing")
_KEEP_W = ("-Werror", "-w")


def fortran_args(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg.startswith(_C_ONLY_PREFIXES):
            # flags of arity 1 given separately take their value with them
            skip = arg in ("-include", "-imacros", "-isystem", "-iquote", "-idirafter", "-iprefix",
                           "-iwithprefix", "-isysroot", "-Xclang", "-Xpreprocessor")
            continue
        if arg.startswith("-W") and not arg.startswith(_KEEP_W) and not arg.startswith(("-Wl,", "-Wp,", "-Wa,")):
            continue
        out.append(arg)
    return out


class FortranFrontend(Frontend):
    langs = ("fortran",)

    def compile(self, req: CompileRequest) -> None:
        cmd = [find_tool("flang"), *fortran_args(req.compile_args), *req.lang_args, *dependency_args(req)]
        if req.opt_flag:
            cmd.append(req.opt_flag)
        if req.forced_lang:
            cmd += ["-x", "f95"]
        cmd += ["-c", req.src, "-o", req.out_obj]
        run(cmd, tool="flang")

    def bitcode(self, req: CompileRequest) -> bytes:
        out = req.tmp(".bc")
        # flang adds no optnone at -O0 and has no -disable-llvm-passes: its bitcode is produced at the
        # requested level and the whole-program pipeline optimizes it again after linking.
        cmd = [find_tool("flang"), *fortran_args(req.compile_args), *req.lang_args, f"-O{min(req.level, 3)}"]
        if req.forced_lang:
            cmd += ["-x", "f95"]
        cmd += ["-c", "-emit-llvm", req.src, "-o", out]
        run(cmd, capture=not req.show_diagnostics, tool="flang")
        with open(out, "rb") as fh:
            return fh.read()
