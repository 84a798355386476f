"""Frontends: each turns a source language into a native object and LLVM 22 bitcode."""

from __future__ import annotations

from enzcc.errors import EnzccError
from enzcc.frontends.base import CompileRequest, Frontend
from enzcc.frontends.clang import AssemblerFrontend, ClangFrontend
from enzcc.frontends.cuda import CudaFrontend
from enzcc.frontends.fortran import FortranFrontend
from enzcc.frontends.llvmir import LLVMIRFrontend, MLIRFrontend
from enzcc.frontends.rust import RustFrontend

_FRONTENDS: list[Frontend] = [ClangFrontend(), CudaFrontend(), FortranFrontend(), RustFrontend(), LLVMIRFrontend(),
                              MLIRFrontend(), AssemblerFrontend()]


def frontend_for(lang: str) -> Frontend:
    for fe in _FRONTENDS:
        if lang in fe.langs:
            return fe
    raise EnzccError(f"no frontend for language '{lang}'")


__all__ = ["CompileRequest", "Frontend", "frontend_for"]
