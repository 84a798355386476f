"""Fortran through flang-22."""

from __future__ import annotations

from enzcc.frontends.base import CompileRequest, Frontend
import os

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
        cmd = [find_tool("flang"), *fortran_args(req.compile_args), *req.lang_args]
        if req.opt_flag:
            cmd.append(req.opt_flag)
        if req.forced_lang:
            cmd += ["-x", "f95"]
        cmd += ["-c", req.src, "-o", req.out_obj]
        run(cmd, tool="flang")
        if req.dep_args:
            write_fortran_depfile(req)

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


_INCLUDE = r"""^\s*(?:#\s*include|include)\s*["'<]([^"'>]+)["'>]"""


def write_fortran_depfile(req: CompileRequest) -> None:
    """flang-22 has no -MD: write the Makefile rule ourselves (the source and the files it includes with
    ``include``/``#include``, found next to it or in -I directories), honouring -MF/-MT/-MQ/-MP."""
    deps = dependency_args(req)
    depfile, targets, phony = None, [], "-MP" in deps
    i = 0
    while i < len(deps):
        a = deps[i]
        for flag in ("-MF", "-MT", "-MQ"):
            if a.startswith(flag):
                value = a[len(flag):] or deps[i + 1]
                i += 0 if a != flag else 1
                if flag == "-MF":
                    depfile = value
                else:
                    targets.append(value if flag == "-MT" else value.replace("$", "$$"))
        i += 1
    if depfile is None:
        return
    dirs = [os.path.dirname(req.src) or "."]
    args = req.compile_args
    for k, a in enumerate(args):
        if a.startswith("-I"):
            dirs.append(a[2:] or (args[k + 1] if k + 1 < len(args) else "."))
    found: list[str] = []
    try:
        with open(req.src, errors="replace") as fh:
            text = fh.read()
    except OSError:
        text = ""
    import re  # (imported here: a plain C compile needs no regular expressions)

    for name in re.findall(_INCLUDE, text, re.IGNORECASE | re.MULTILINE):
        for d in dirs:
            path = os.path.normpath(os.path.join(d, name)) if d != "." else name
            if os.path.exists(path):
                if path not in found:
                    found.append(path)
                break
    quote = lambda p: p.replace(" ", "\\ ")  # noqa: E731
    lines = [f"{' '.join(targets)}: {' '.join(quote(p) for p in [req.src, *found])}"]
    if phony:
        lines += [f"{quote(p)}:" for p in found]
    with open(depfile, "w") as fh:
        fh.write("\n".join(lines) + "\n")
