"""LLVM IR from any producer (.ll text, .bc bitcode; e.g. Julia, Zig, Swift dumps) and the MLIR LLVM
dialect (via mlir-translate-22)."""

from __future__ import annotations

import os

from enzcc.frontends.base import CompileRequest, Frontend
from enzcc.tools import find_tool, run


class LLVMIRFrontend(Frontend):
    langs = ("llvm",)

    def load(self, req: CompileRequest):
        from enzcc.backend.llvm import read_ir_file

        return read_ir_file(req.src)

    def bitcode(self, req: CompileRequest) -> bytes:
        return self.load(req).as_bitcode()

    def compile(self, req: CompileRequest) -> None:
        """There is no other compiler to run: enzcc's own backend writes the object."""
        from enzcc.backend.pipeline import compile_module_to_object

        mod = self.load(req)
        data = compile_module_to_object(mod, req.level, req.cpu, req.src)
        with open(req.out_obj, "wb") as fh:
            fh.write(data)


class MLIRFrontend(LLVMIRFrontend):
    langs = ("mlir",)

    def load(self, req: CompileRequest):
        from enzcc.backend.llvm import read_ir_file

        out = req.tmp(".ll")
        if not os.path.exists(out):
            run([find_tool("mlir-translate"), "--mlir-to-llvmir", req.src, "-o", out], capture=True,
                tool="mlir-translate")
        return read_ir_file(out)
