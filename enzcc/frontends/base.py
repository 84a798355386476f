"""What every frontend provides: a real native compile and the LLVM 22 bitcode of a source file."""

from __future__ import annotations

import os

from enzcc.records import factory, record


@record
class CompileRequest:
    """One source file to compile."""

    src: str
    """Source path as given by the user."""
    lang: str
    """enzcc language name (c, c++, fortran, rust, llvm, mlir, assembler...)."""
    out_obj: str
    """Where the real native object is written."""
    final_name: str
    """The name the object will finally have (for dependency files)."""
    workdir: str
    """A private temporary directory for intermediate files."""
    compile_args: list[str] = factory(list)
    """Preprocessor/compiler flags from the command line, in order."""
    dep_args: list[str] = factory(list)
    """-MD/-MF/... flags (real compile only)."""
    opt_level: int | None = None
    opt_flag: str | None = None
    target: str | None = None
    cpu: str | None = None
    lang_args: list[str] = factory(list)
    """Flags for this language only (``rustflags``/``fflags`` of enzcc.toml, ``ENZCC_RUSTFLAGS``)."""
    show_diagnostics: bool = False
    """The bitcode compile is the only compile (one-step builds): let its warnings through."""
    forced_lang: bool = False
    """The language was given with ``-x``/``--lang`` rather than by extension."""

    @property
    def level(self) -> int:
        return self.opt_level if self.opt_level is not None else 0

    def tmp(self, suffix: str) -> str:
        stem = os.path.splitext(os.path.basename(self.src))[0] or "stdin"
        return os.path.join(self.workdir, f"{stem}-{abs(hash(self.src)) % 10**8}{suffix}")


class Frontend:
    """Base class: subclasses set :attr:`langs` and implement the two steps."""

    langs: tuple[str, ...] = ()
    has_bitcode = True
    """False for inputs enzcc only passes to the native toolchain (assembly)."""

    def compile(self, req: CompileRequest) -> None:
        """The real compile: diagnostics, dependency files and exit code as the user expects."""
        raise NotImplementedError

    def bitcode(self, req: CompileRequest) -> bytes:
        """LLVM 22 bitcode of the source, unoptimized but optimizable (no ``optnone``). Diagnostics are
        captured (the real compile already showed them) unless ``req.show_diagnostics``."""
        raise NotImplementedError

    def compile_with_bitcode(self, req: CompileRequest) -> bytes:
        """The real compile (native object at ``req.out_obj``, diagnostics, dependency files) and the bitcode.
        Here: two compiles; a frontend that can make the object from the bitcode parses the source once."""
        self.compile(req)
        return self.bitcode(req)

    def bitcode_with_dependencies(self, req: CompileRequest) -> bytes | None:
        """The bitcode only, with the diagnostics and dependency files of the real compile, for a source that
        is expected to differentiate something (its native object is then made from the derivative, and the
        real compile's optimization and code generation would be thrown away); None when this frontend cannot
        (the caller then uses :meth:`compile_with_bitcode`)."""
        return None

    def codegen(self, req: CompileRequest, bitcode: bytes) -> None:
        """The native object at ``req.out_obj`` for a source whose bitcode was made by :meth:`bitcode` (links
        that differentiate nothing). Here: the real compile again."""
        self.compile(req)
