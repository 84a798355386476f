"""CUDA's libdevice in NVPTX modules: math calls mapped to it, and the library linked in after AD.

NVPTX has no math library: LLVM cannot lower ``llvm.sin.f64`` or a call of ``exp`` for it ("no libcall
available"). clang's CUDA headers call libdevice's ``__nv_sin`` for ``sin``, and clang links libdevice's bitcode
into the module before optimizing. enzcc does the same, but after AD, so that the derivative is made from the
calls (``enzcc/ad/calls/libdevice.py`` has their rules), not from libdevice's bodies (bit tricks on the
floats' integer halves, which carry no derivative):

- :func:`device_math_calls`: calls of C math functions (``sin``, ``erff``) and of the LLVM intrinsics NVPTX
  cannot lower (``llvm.sin.f64``, ``llvm.pow.f32``, ``llvm.powi.f64.i32``) call libdevice's functions instead;
- :func:`link_libdevice`: libdevice is linked in, its functions made internal (those not called go), and the
  module flag ``nvvm-reflect-ftz`` set as clang sets it (0: denormals are kept), which ``NVVMReflect`` reads
  when the optimizer resolves libdevice's ``__nvvm_reflect`` tests.

libdevice is found by :func:`find_libdevice`: ``$ENZCC_LIBDEVICE`` (the file), else the CUDA toolkit's
``nvvm/libdevice/libdevice.10.bc`` (``--cuda-path``, ``$CUDA_PATH``, ``$CUDA_HOME``, ``/usr/local/cuda*``:
:func:`enzcc.tools.cuda_path`).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

import llvmlite.binding as llvm

from enzcc.backend import llvm as L
from enzcc.errors import EnzccError, ToolMissingError

PREFIX = "__nv_"
LIBDEVICE = os.path.join("nvvm", "libdevice", "libdevice.10.bc")
ENV = "ENZCC_LIBDEVICE"

#: LLVM math intrinsics NVPTX has no lowering for (LLVM 22; ``llvm.exp2.f32`` it has: ``ex2.approx``), each
#: called as libdevice's function of the same name
UNLOWERED_INTRINSICS = ("sin", "cos", "tan", "exp", "exp10", "log", "log2", "log10", "pow", "powi", "atan2",
                        "tanh", "sinh", "cosh", "asin", "acos", "atan")
_INTRINSIC = re.compile(r"^llvm\.(\w+)\.(f32|f64)(?:\.i32)?$")

REFLECT_FTZ = '!llvm.module.flags = !{!0}\n!0 = !{i32 4, !"nvvm-reflect-ftz", i32 0}\n'
"""The module flag clang sets for CUDA without ``-fcuda-flush-denormals-to-zero``."""


def find_libdevice(cuda_path: str | None = None) -> str:
    """The path of ``libdevice.10.bc`` (see the module docstring); an :class:`EnzccError` saying why when there
    is none."""
    override = os.environ.get(ENV)
    if override:
        if os.path.isfile(override):
            return override
        raise EnzccError(f"{ENV}={override}: no such file")
    from enzcc.tools import cuda_path as toolkit

    try:
        root = toolkit(cuda_path, required=False)
    except ToolMissingError as exc:
        raise EnzccError(exc.message) from None
    path = os.path.join(root, LIBDEVICE) if root else None
    if path and os.path.isfile(path):
        return path
    where = f"the CUDA toolkit at {root} has no {LIBDEVICE}" if root else "no CUDA toolkit was found"
    raise EnzccError(f"CUDA's libdevice is needed, but {where} (set CUDA_PATH, pass --cuda-path=DIR or set "
                     f"{ENV} to libdevice.10.bc)")


def libdevice_identity(cuda_path: str | None = None) -> str:
    """Which libdevice NVPTX modules would link (path, size, time), or why none: part of the build cache's key."""
    try:
        path = find_libdevice(cuda_path)
        st = os.stat(path)
    except (EnzccError, OSError) as exc:
        return f"no libdevice: {exc}"
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


@lru_cache(maxsize=4)
def _libdevice_bitcode(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise EnzccError(f"cannot read libdevice: {exc.strerror}", path) from None


@lru_cache(maxsize=4)
def libdevice_functions(path: str) -> dict[str, str]:
    """libdevice's functions: name -> function type (``double (double, i32)``)."""
    mod = L.parse_bitcode(_libdevice_bitcode(path), path)
    return {L.value_name(f): str(f.global_value_type) for f in mod.functions if not f.is_declaration}


def _declared(mod: llvm.ModuleRef) -> dict[str, str]:
    return {L.value_name(f): str(f.global_value_type) for f in mod.functions if f.is_declaration}


def math_mapping(mod: llvm.ModuleRef, functions: dict[str, str]) -> dict[str, str]:
    """The declared functions of ``mod`` that become libdevice's (``functions``: libdevice's): C math functions
    whose ``__nv_`` namesake has the same type, and the intrinsics of :data:`UNLOWERED_INTRINSICS` (scalar)."""
    out = {}
    for name, ftype in _declared(mod).items():
        match = _INTRINSIC.match(name)
        if match:
            stem, kind = match.groups()
            target = PREFIX + stem + ("f" if kind == "f32" else "")
            if stem in UNLOWERED_INTRINSICS and (stem == "powi") == name.endswith(".i32"):
                if functions.get(target) == ftype:
                    out[name] = target
        elif not name.startswith(("llvm.", PREFIX)) and functions.get(PREFIX + name) == ftype:
            out[name] = PREFIX + name
    return out


def _rename_calls(text: str, mapping: dict[str, str]) -> str:
    """``text`` with every ``@old`` of ``mapping`` made ``@new``, and one declaration for each new name."""
    symbol = re.compile(r"@(" + "|".join(re.escape(n) for n in sorted(mapping, key=len, reverse=True)) +
                        r")(?![-\w.$])")
    text = symbol.sub(lambda m: "@" + mapping[m.group(1)], text)
    seen: set[str] = set()
    lines = []
    for line in text.split("\n"):
        if line.startswith("declare "):
            m = re.search(r"@([-\w.$]+)\(", line)
            if m and m.group(1).startswith(PREFIX):
                if m.group(1) in seen:
                    continue
                seen.add(m.group(1))
        lines.append(line)
    return "\n".join(lines)


def device_math_calls(mod: llvm.ModuleRef, functions: dict[str, str], where: str) -> llvm.ModuleRef:
    """``mod`` with its C math calls and unlowered math intrinsics calling libdevice (:func:`math_mapping`);
    the same module when there are none."""
    mapping = math_mapping(mod, functions)
    if not mapping:
        return mod
    text = _rename_calls(L.module_text(mod, where), mapping)
    try:
        out = llvm.parse_assembly(text)
        out.verify()
    except Exception as exc:
        raise EnzccError(f"internal error: calling libdevice for math functions made invalid LLVM IR: "
                         f"{L._first_line(exc)} (please report this with the source that triggered it)") from None
    return out


def calls_libdevice(mod: llvm.ModuleRef) -> list[str]:
    """The ``__nv_`` functions ``mod`` declares (sorted)."""
    return sorted(n for n in _declared(mod) if n.startswith(PREFIX))


def link_libdevice(mod: llvm.ModuleRef, path: str, where: str, tm: llvm.TargetMachine | None = None) -> None:
    """Link libdevice (``path``) into ``mod``: its functions and tables become internal, the ones not called
    are dropped, and ``nvvm-reflect-ftz`` is set unless the module sets it already."""
    _set_reflect_ftz(mod)
    lib = L.parse_bitcode(_libdevice_bitcode(path), path)
    lib.triple = mod.triple
    lib.data_layout = mod.data_layout
    own = {L.value_name(v) for v in [*lib.functions, *lib.global_variables] if not v.is_declaration}
    try:
        mod.link_in(lib)
    except RuntimeError as exc:
        raise EnzccError(f"cannot link libdevice ({path}): {L._first_line(exc)}", where) from None
    for value in [*mod.functions, *mod.global_variables]:
        if not value.is_declaration and L.value_name(value) in own:
            value.linkage = llvm.Linkage.internal
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_global_dead_code_eliminate_pass()
    tm = tm or L.target_machine(mod.triple, 0)
    mpm.run(mod, llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0)))


def _set_reflect_ftz(mod: llvm.ModuleRef) -> None:
    """The module flag ``nvvm-reflect-ftz`` = 0 (an override, as clang sets it), unless the module has it
    already: clang's CUDA compiles set it (to 1 with ``-fcuda-flush-denormals-to-zero``), and a different value
    is a conflict that LLVM's linker refuses, which leaves the module's own."""
    flags = llvm.parse_assembly(REFLECT_FTZ)
    flags.triple, flags.data_layout = mod.triple, mod.data_layout
    try:
        mod.link_in(flags)
    except RuntimeError as exc:
        if "nvvm-reflect-ftz" not in str(exc):
            raise EnzccError(f"cannot set nvvm-reflect-ftz: {L._first_line(exc)}") from None


def with_libdevice(mod: llvm.ModuleRef, where: str, cuda_path: str | None = None,
                   tm: llvm.TargetMachine | None = None) -> tuple[llvm.ModuleRef, bool]:
    """The NVPTX module ``mod`` ready for its last optimization: math calls mapped to libdevice and libdevice
    linked in when something calls it; and whether anything changed. Not finding libdevice is an error only
    when the module needs it."""
    try:
        path, problem = find_libdevice(cuda_path), None
    except EnzccError as exc:
        path, problem = None, exc
    before = mod
    if path is not None:
        mod = device_math_calls(mod, libdevice_functions(path), where)
    needed = calls_libdevice(mod)
    if path is None:
        needed += sorted(n for n in _declared(mod) if _INTRINSIC.match(n) and
                         _INTRINSIC.match(n).group(1) in UNLOWERED_INTRINSICS)
    if not needed:
        return mod, mod is not before
    if path is None:
        raise EnzccError(f"{problem.message} (the device code calls {_some(needed)})", where)
    link_libdevice(mod, path, where, tm)
    missing = calls_libdevice(mod)
    if missing:
        raise EnzccError(f"device code calls {_some(missing)}, which libdevice ({path}) does not define", where)
    return mod, True


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


__all__ = ["UNLOWERED_INTRINSICS", "calls_libdevice", "device_math_calls", "find_libdevice",
           "libdevice_functions", "libdevice_identity", "link_libdevice", "math_mapping", "with_libdevice"]
