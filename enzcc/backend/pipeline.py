"""The whole-program pipeline: link bitcode -> optimize -> AD -> optimize again -> codegen.

AD runs on optimized IR by default (the Enzyme paper's point); ``--ad-mode=before-opt`` runs it on the
unoptimized linked module instead, for comparison.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import llvmlite.binding as llvm

from enzcc.backend import llvm as L
from enzcc.backend.embed import BitcodeRecord
from enzcc.errors import EnzccError
from enzcc.timing import TIMES

ENZYME_PREFIX = "__enzyme_"


@dataclass
class PipelineOptions:
    """How to run the pipeline."""

    opt_level: int = 0
    """Speed level of both optimization runs (0..3)."""
    ad_mode: str = "after-opt"
    """``after-opt`` (default) or ``before-opt``."""
    ad_inline: str = "auto"
    """Which calls inside differentiated code are inlined: ``auto`` (up to a size), ``all`` or ``none``."""
    cpu: str | None = None
    """CPU for codegen (``-march``); for NVPTX the SM, e.g. ``sm_90``."""
    triple: str | None = None
    """Target triple; defaults to the first module's."""
    cache: bool = True
    """Reuse (and store) the output of an identical earlier run (:mod:`enzcc.backend.cache`)."""
    loop_vectorize: bool | None = None
    """``-f[no-]vectorize``; None: as clang at ``opt_level`` (from -O2)."""
    slp_vectorize: bool | None = None
    """``-f[no-]slp-vectorize``; None: as clang at ``opt_level`` (from -O2)."""
    unroll_loops: bool | None = None
    """``-f[no-]unroll-loops``; None: as clang at ``opt_level``."""
    veclib: str | None = None
    """``-fveclib=``: the vector math library the loop vectorizer may call (:mod:`enzcc.backend.vecmath`);
    None: none, as clang's default."""
    cuda_path: str | None = None
    """``--cuda-path``: the CUDA toolkit whose libdevice NVPTX modules link (:mod:`enzcc.backend.libdevice`);
    None: found as :func:`enzcc.tools.cuda_path` finds it."""

    def vectorizers(self) -> dict:
        """The keyword arguments of :func:`enzcc.backend.llvm.optimize` these options set."""
        return {"loop_vectorize": self.loop_vectorize, "slp_vectorize": self.slp_vectorize,
                "unroll": self.unroll_loops is not False}


# ---------------------------------------------------------------------------------------------
# link


def _compatible(a: str, b: str) -> bool:
    """Same architecture and OS (vendor may differ: rustc says 'unknown', clang 'pc')."""
    pa, pb = a.split("-"), b.split("-")
    return pa[0] == pb[0] and pa[2:3] == pb[2:3]


def link_modules(records: list[BitcodeRecord], archives: list[tuple[str, list[BitcodeRecord]]] = (),
                 triple: str | None = None) -> llvm.ModuleRef:
    """Link ``records`` into one module, then pull in archive members that define still-undefined
    symbols (repeating until nothing changes, like ``--start-group``)."""
    with TIMES.stage("link", f"{len(records)} module(s)"):
        mods = [(rec, L.parse_bitcode(rec.bitcode, rec.source or "<bitcode>")) for rec in records]
        if not mods:
            raise EnzccError("no LLVM bitcode to link")
        dst = mods[0][1]
        if triple:
            dst.triple = triple
        for rec, mod in mods[1:]:
            _link_into(dst, mod, rec.source)
        pending = [(name, rec) for name, recs in archives for rec in recs]
        changed = True
        while pending and changed:
            changed = False
            _, undefined = L.defined_and_undefined(dst)
            for item in list(pending):
                name, rec = item
                mod = L.parse_bitcode(rec.bitcode, f"{name}({rec.source})")
                defined, _ = L.defined_and_undefined(mod)
                if defined & undefined:
                    _link_into(dst, mod, f"{name}({rec.source})")
                    pending.remove(item)
                    changed = True
                    _, undefined = L.defined_and_undefined(dst)
        L.verify(dst, "linked module")
        return dst


def _link_into(dst: llvm.ModuleRef, src: llvm.ModuleRef, where: str) -> None:
    if src.triple != dst.triple:
        if src.triple and dst.triple and not _compatible(src.triple, dst.triple):
            raise EnzccError(f"cannot link a module for '{src.triple}' into one for '{dst.triple}'", where)
        src.triple = dst.triple
        src.data_layout = dst.data_layout
    try:
        dst.link_in(src)
    except RuntimeError as exc:
        raise EnzccError(f"link error: {L._first_line(exc)}", where) from None


# ---------------------------------------------------------------------------------------------
# AD stage


def _enzyme_names(mod: llvm.ModuleRef) -> set[str]:
    """Names of the ``__enzyme_*`` functions the module declares."""
    return {name for name in map(L.value_name, mod.functions) if name.startswith(ENZYME_PREFIX)}


def enzyme_callers(mod: llvm.ModuleRef, first_only: bool = False) -> list[str]:
    """Names of the functions that call an ``__enzyme_*`` entry point (``first_only``: stop at the first).
    Read from each function's text, where a callee is the only symbol followed by its arguments' ``(``:
    walking the instructions through llvmlite costs several calls into LLVM per instruction."""
    targets = _enzyme_names(mod)
    if not targets:
        return []
    callee = _callee_pattern(targets)
    out = []
    for fn in mod.functions:
        if not fn.is_declaration and callee.search(str(fn).partition("{\n")[2]):  # (the body, not the define line)
            out.append(L.value_name(fn))
            if first_only:
                break
    return out


def _callee_pattern(targets: set[str]) -> re.Pattern:
    """``@name(`` for each of ``targets``, plain or quoted as LLVM quotes names."""
    return re.compile("@(?:" + "|".join(
        sorted((re.escape(n) + r"\(" for n in targets), reverse=True) +
        [r'"' + re.escape(n.replace("\\", "\\5C").replace('"', "\\22")) + r'"\(' for n in targets]) + ")")


def text_calls_enzyme(text: str, targets: set[str]) -> bool:
    """Whether the module ``text`` (LLVM's or enzcc's printing) calls one of ``targets``: a callee on an
    indented line, an instruction (``declare``/``define`` lines and globals start at the line's start). The
    check after each AD round, which has this text at hand: :func:`enzyme_callers` prints each function through
    llvmlite, more than printing the module (35 ms after AD for 1,000 statements)."""
    if not targets:
        return False
    for m in _callee_pattern(targets).finditer(text):
        if text[text.rfind("\n", 0, m.start()) + 1] in " \t":
            return True
    return False


def has_enzyme_calls(mod: llvm.ModuleRef) -> bool:
    """Whether any function calls an ``__enzyme_*`` entry point (stops at the first call found)."""
    return bool(enzyme_callers(mod, first_only=True))


def unmangle_api_names(mod: llvm.ModuleRef) -> None:
    """C++ declares ``__enzyme_*`` functions and globals with mangled names (``_Z17__enzyme_autodiffPvd``, or
    Enzyme's templated ``__enzyme_autodiff<double>``): each is renamed to its identifier plus a suffix
    (``__enzyme_autodiff._Z17...``; any suffix is allowed), so the AD stage recognises it as in C."""
    from enzcc.ad.api import cxx_api_name

    taken = {L.value_name(g) for g in mod.global_variables} | {L.value_name(f) for f in mod.functions}
    for value in list(mod.functions) + list(mod.global_variables):
        name = L.value_name(value)
        ident = cxx_api_name(name)
        if ident is None:
            continue
        new = ident if ident not in taken and not value.is_declaration else f"{ident}.{name}"
        value.name = new
        taken.add(new)


def ad_stage(mod: llvm.ModuleRef, opts: PipelineOptions, where: str, tm=None) -> tuple[llvm.ModuleRef, bool]:
    """Replace ``__enzyme_*`` calls with synthesized derivatives. Returns (module, changed)."""
    if not _enzyme_names(mod):
        return mod, False
    if (mod.triple or "").startswith(("amdgcn", "r600", "spir")) and has_enzyme_calls(mod):
        # (barriers, LDS memory, address spaces and atomics of these GPUs have no rules: refused, not guessed)
        raise EnzccError(f"enzcc differentiates GPU code for NVIDIA GPUs (nvptx64-nvidia-cuda) only, not for "
                         f"'{mod.triple}'", where)
    from enzcc.ad import differentiate_text
    from enzcc.ir.errors import IRError, IRParseError

    changed = False
    while True:  # nested AD (a derivative of a derivative) takes one round per level, the inner one first
        try:
            text, count = differentiate_text(L.module_text(mod, where), tm, inline=opts.ad_inline)
        except IRParseError as exc:
            raise EnzccError(f"cannot differentiate: enzcc's IR model does not support this code yet ({exc})") \
                from None
        except IRError as exc:
            raise EnzccError(f"internal error while synthesizing the derivative: {exc} "
                             "(please report this with the source that triggered it)") from None
        if not count:
            return mod, changed
        mod = _parse_generated(text, "the synthesized derivative is not valid LLVM IR")
        changed = True
        if not text_calls_enzyme(text, _enzyme_names(mod)):
            return mod, True
        # the next level differentiates the optimized derivative, as the first one did the optimized primal
        L.optimize(mod, tm or L.target_machine(mod.triple or L.llvm.get_default_triple(), opts.opt_level),
                   opts.opt_level, vectorize=False, unroll=opts.vectorizers()["unroll"])


# ---------------------------------------------------------------------------------------------
# the pipeline


def keep_enzyme_calls_apart(mod: llvm.ModuleRef) -> None:
    """``__enzyme_*`` functions are ``nomerge``: the optimization before AD would otherwise merge two calls in
    different branches (``__enzyme_autodiff(p1, x)`` in one case of a switch, ``__enzyme_autodiff(p2, x)`` in
    another) into one call of a function chosen at run time, which AD cannot differentiate."""
    for fn in mod.functions:
        if fn.is_declaration and L.value_name(fn).startswith(ENZYME_PREFIX):
            fn.add_function_attribute("nomerge")


def protect_hinted_functions(mod: llvm.ModuleRef) -> None:
    """Functions the user described to the AD engine (inactive, like a math function: :mod:`enzcc.ad.hints`)
    must still be called where the derivative is made: marked ``noinline`` before the first optimization."""
    from enzcc.ad.hints import protected_functions

    by_name = {g.name: g for g in mod.global_variables}  # (get_global_variable misses private ones)
    if not any(n.startswith(ENZYME_PREFIX) or n == "llvm.global.annotations" for n in by_name):
        return

    def text_of(name: str):
        g = by_name.get(name)
        return str(g) if g is not None else None

    def is_function(name: str) -> bool:
        try:
            return not mod.get_function(name).is_declaration
        except NameError:
            return False

    for name in sorted(protected_functions(list(by_name), text_of, is_function)):
        fn = mod.get_function(name)
        if "alwaysinline" not in " ".join(str(a) for a in fn.attributes):
            fn.add_function_attribute("noinline")


def shield_rule_bodies(mod: llvm.ModuleRef) -> dict[str, object]:
    """Functions the program defines but a call rule stands for (``replaces_body``: a reference or mock BLAS
    compiled in) are made interposable (weak) for the optimization before AD: otherwise it reads their bodies to
    change their calls (an argument a body ignores, such as a row-major-only BLAS's order, becomes poison at
    the calls, and the rule that reads it to size its copies reads poison). Returns each one's linkage, which
    :func:`unshield_rule_bodies` gives back after AD."""
    import enzcc.ad.calls  # noqa: F401  (the families register their rules)
    from enzcc.ad.registry import rule_named

    saved = {}
    for fn in mod.functions:
        if fn.is_declaration:
            continue
        rule = rule_named(L.value_name(fn))
        if rule is not None and rule.replaces_body:
            saved[L.value_name(fn)] = fn.linkage
            fn.linkage = llvm.Linkage.weak_any
    return saved


def unshield_rule_bodies(mod: llvm.ModuleRef, saved: dict[str, object]) -> None:
    """The linkage :func:`shield_rule_bodies` took, given back."""
    for name, linkage in saved.items():
        try:
            mod.get_function(name).linkage = linkage
        except NameError:
            pass  # (removed as unused)


def run_pipeline(mod: llvm.ModuleRef, opts: PipelineOptions, tm: llvm.TargetMachine, where: str,
                 kind: str = "object") -> llvm.ModuleRef:
    """optimize -> AD -> optimize (or AD -> optimize with ``before-opt``). The run after AD is the same in
    both modes, so they compare only where AD happens. NVPTX modules get libdevice before their last
    optimization (:func:`device_libraries`). ``kind``: the output wanted (:func:`codegen`); for machine code
    (``object``, ``asm``) LLVM's own tools may do the optimization after AD (:func:`enzcc.backend.llvm.optimize`;
    the declarations of the intrinsics they add carry their release's attributes, which LLVM text shows)."""
    machine_code = kind in ("object", "asm")
    unmangle_api_names(mod)
    needs_ad = has_enzyme_calls(mod)
    if needs_ad:
        L.no_partial_unrolling()
        L.bounded_slp_scheduling()
        keep_enzyme_calls_apart(mod)
        protect_hinted_functions(mod)
        shielded = shield_rule_bodies(mod)
        if opts.opt_level == 0:
            # -O0 keeps every local in memory: a marker or function passed through C++ helpers (the enzyme/enzyme
            # header) would reach the __enzyme_* call as a load from a stack slot instead of the value itself
            L.promote_locals(mod, tm, enzyme_callers(mod))
    if opts.ad_mode == "before-opt":
        with TIMES.stage("ad", where):
            mod, changed = ad_stage(mod, opts, where, tm)
        unshield_rule_bodies(mod, shielded if needs_ad else {})
        mod, linked = device_libraries(mod, opts, tm, where)
        mod = vector_math(mod, opts, where)
        with TIMES.stage("optimize", f"-O{opts.opt_level} after AD"):
            # (a module the AD made is parsed from its text: the one case where opt-22 may do the work)
            mod = L.optimize(mod, tm, opts.opt_level, **opts.vectorizers(),
                             fresh=changed and not linked and machine_code)
        return split_blocks(mod, where) if changed else mod
    if not needs_ad:
        mod, _ = device_libraries(mod, opts, tm, where)
        mod = vector_math(mod, opts, where)
    with TIMES.stage("optimize", f"-O{opts.opt_level}"):
        # before AD, keep loops scalar: vectorization comes in the run after AD; a loop marked by
        # __enzyme_set_fixed_point must stay a loop (none is unrolled in such a module before AD)
        from enzcc.ad.calls.outline import SET_FIXED_POINT

        marked = needs_ad and any(L.value_name(f).startswith(SET_FIXED_POINT) for f in mod.functions)
        before = opts.vectorizers()
        before["unroll"] = before["unroll"] and not marked
        L.optimize(mod, tm, opts.opt_level, vectorize=not needs_ad, **before)
    with TIMES.stage("ad", where):
        mod, changed = ad_stage(mod, opts, where, tm)
    fresh = changed and machine_code  # (parsed from the AD's text: opt-22 may do the optimization after AD)
    if needs_ad:
        unshield_rule_bodies(mod, shielded)
        mod, linked = device_libraries(mod, opts, tm, where)
        changed, fresh = changed or linked, fresh and not linked
    if changed:
        mod = vector_math(mod, opts, where)
        with TIMES.stage("optimize", f"-O{opts.opt_level} after AD"):
            mod = L.optimize(mod, tm, opts.opt_level, **opts.vectorizers(), fresh=fresh)
        mod = split_blocks(mod, where)
    return mod


def vector_math(mod: llvm.ModuleRef, opts: PipelineOptions, where: str) -> llvm.ModuleRef:
    """``-fveclib=``: before the optimization that vectorizes, the module's math calls marked with their vector
    variants (:mod:`enzcc.backend.vecmath`), parsed again from its text; without the flag ``mod`` itself."""
    if not opts.veclib or opts.veclib == "none":
        return mod
    from enzcc.backend import vecmath

    vecmath.check_library(opts.veclib, mod.triple or L.host_triple())
    return L.parse_ir_text(vecmath.annotate(str(mod), opts.veclib), where)


def device_libraries(mod: llvm.ModuleRef, opts: PipelineOptions, tm: llvm.TargetMachine,
                     where: str) -> tuple[llvm.ModuleRef, bool]:
    """An NVPTX module with its math calling libdevice and libdevice linked in, before the last optimization
    (after AD: the derivatives are made from the ``__nv_*`` calls, not from libdevice's bodies); whether that
    changed it. Other modules as they are."""
    if not (mod.triple or "").startswith("nvptx"):
        return mod, False
    from enzcc.backend.libdevice import with_libdevice

    with TIMES.stage("link", "libdevice"):
        return with_libdevice(mod, where, opts.cuda_path, tm)


def split_blocks(mod: llvm.ModuleRef, where: str) -> llvm.ModuleRef:
    """The module with its very large blocks split for code generation (derivatives of long straight-line
    code: :mod:`enzcc.backend.split_blocks`); the same module when it has none."""
    from enzcc.backend.split_blocks import split_large_blocks

    with TIMES.stage("codegen", "large blocks split"):
        text = split_large_blocks(L.module_text(mod, where))
        if text is None:
            return mod
        split = _parse_generated(text, "splitting large blocks made invalid LLVM IR")
        if getattr(mod, L.FINAL, None) is not None:  # (went through opt-22: llc-22 takes the text it is made of)
            setattr(split, L.FINAL, text.encode())
        return split


def _parse_generated(text: str, problem: str) -> llvm.ModuleRef:
    """A module from LLVM text enzcc made, verified; invalid text is an internal error saying ``problem``."""
    try:
        mod = L.llvm.parse_assembly(text)
        mod.verify()
    except Exception as exc:
        raise EnzccError(f"internal error: {problem}: {L._first_line(exc)} (please report this with the source "
                         "that triggered it)") from None
    return mod


def codegen(mod: llvm.ModuleRef, tm: llvm.TargetMachine, kind: str) -> bytes:
    """``kind``: ``object`` (native object bytes), ``asm`` (assembly / PTX text), ``llvm`` (the final module as
    LLVM text: ``-S -emit-llvm``) or ``bitcode`` (``-c -emit-llvm``)."""
    with TIMES.stage("codegen", kind):
        if kind == "llvm":
            return str(mod).encode()
        if kind == "bitcode":
            return mod.as_bitcode()
        if kind == "asm":
            return L.emit_assembly(mod, tm).encode()
        return L.emit_object(mod, tm)


def compile_module_to_object(mod: llvm.ModuleRef, level: int, cpu: str | None, where: str) -> bytes:
    """Optimize and codegen one module (used for IR inputs compiled with ``-c``; no AD here, AD waits for
    the link or runs in :func:`build`; an NVPTX module's object gets libdevice, the bitcode for AD does not)."""
    tm = L.target_machine(mod.triple or L.host_triple(), level, cpu)
    mod, _ = device_libraries(mod, PipelineOptions(opt_level=level, cpu=cpu), tm, where)
    with TIMES.stage("optimize", f"-O{level}"):
        L.optimize(mod, tm, level)
    return codegen(mod, tm, "object")


def build(records: list[BitcodeRecord], opts: PipelineOptions, kind: str, where: str,
          archives: list[tuple[str, list[BitcodeRecord]]] = ()) -> bytes:
    """The whole pipeline from bitcode records to object/assembly/PTX bytes, or its output from the build
    cache when the same inputs were built before."""
    from enzcc.backend import cache

    key = None
    if opts.cache and not cache.disabled_by_environment():
        key = cache.make_key(_cache_parts(records, opts, kind, archives))
        with TIMES.stage("cache", "lookup"):
            hit = cache.lookup(key)
        if hit is not None:
            return hit
    out = _build(records, opts, kind, where, archives)
    if key is not None:
        with TIMES.stage("cache", "store"):
            cache.store(key, out)
    return out


def _cache_parts(records, opts: PipelineOptions, kind: str, archives) -> list:
    """Everything the output depends on besides enzcc itself (see :func:`enzcc.backend.cache.make_key`)."""
    import llvmlite

    parts = [kind, llvmlite.__version__, repr((opts.opt_level, opts.ad_mode, opts.ad_inline, opts.cpu, opts.triple,
                                                      opts.loop_vectorize, opts.slp_vectorize, opts.unroll_loops)),
             *([f"veclib={opts.veclib}"] if opts.veclib else []),
             os.environ.get("ENZCC_SPILL_THRESHOLD", "")]
    for rec in [*records, *(r for _, recs in archives for r in recs)]:
        parts += [f"{rec.lang}:{rec.opt}:{rec.target}", rec.bitcode]
    if any((t or "").startswith("nvptx") for t in [opts.triple, *(r.target for r in records)]):
        from enzcc.backend.libdevice import libdevice_identity

        parts.append(libdevice_identity(opts.cuda_path))  # (linked into NVPTX modules)
    return parts


def _build(records: list[BitcodeRecord], opts: PipelineOptions, kind: str, where: str,
           archives: list[tuple[str, list[BitcodeRecord]]] = ()) -> bytes:
    mod = link_modules(records, archives, opts.triple)
    triple = opts.triple or mod.triple or L.host_triple()
    mod.triple = triple
    tm = L.target_machine(triple, opts.opt_level, opts.cpu)
    if not mod.data_layout:
        mod.data_layout = str(tm.target_data)
    mod = run_pipeline(mod, opts, tm, where, kind)
    return codegen(mod, tm, kind)
