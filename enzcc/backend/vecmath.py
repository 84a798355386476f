"""``-fveclib=libmvec``: the math calls of a module marked with their vector variants in glibc's libmvec, so
that the loop vectorizer of the optimization after AD calls ``_ZGVdN4v_sin`` on four elements where it would
call ``sin`` four times.

Why marks in the IR and not LLVM's ``-vector-library`` option: that option is read by LLVM's own tools (clang,
opt) when they make the TargetLibraryInfo; llvmlite's pass builder makes it from the triple alone, so the option
has no effect there. The loop vectorizer finds vector variants through the call-site attribute
``vector-function-abi-variant`` (what LLVM's InjectTLIMappings pass writes from the TargetLibraryInfo): this
module writes it, for the calls of the functions below, with the variants of the instruction sets the target
has, and declares the variants (kept by ``llvm.compiler.used``, as clang does).

Accuracy: libmvec's functions are accurate to 4 ulp (glibc's manual), libm's scalar ones to 1 ulp for the
common functions; a build opts in with the flag, never by default. Only calls that neither read nor write
memory can be vectorized: the C math functions are such calls with ``-fno-math-errno`` (they set ``errno``
otherwise), the LLVM intrinsics (``llvm.sin.f64``, which the derivatives call) always.
"""

from __future__ import annotations

import re

from enzcc.errors import EnzccError

__all__ = ["LIBRARIES", "annotate", "check_library"]

LIBRARIES = ("libmvec",)
"""The ``-fveclib=`` values enzcc implements (``none``: no library, the default)."""

#: double-precision functions with libmvec variants -> their arity (the float ones end in f)
_FUNCTIONS = {"sin": 1, "cos": 1, "tan": 1, "exp": 1, "exp2": 1, "exp10": 1, "expm1": 1, "log": 1, "log2": 1,
              "log10": 1, "log1p": 1, "sinh": 1, "cosh": 1, "tanh": 1, "asin": 1, "acos": 1, "atan": 1,
              "asinh": 1, "acosh": 1, "atanh": 1, "cbrt": 1, "erf": 1, "erfc": 1, "pow": 2, "atan2": 2, "hypot": 2}

#: LLVM intrinsics -> the libm function they compute
_INTRINSICS = {"sin": "sin", "cos": "cos", "tan": "tan", "exp": "exp", "exp2": "exp2", "exp10": "exp10",
               "log": "log", "log2": "log2", "log10": "log10", "pow": "pow", "sinh": "sinh", "cosh": "cosh",
               "tanh": "tanh", "asin": "asin", "acos": "acos", "atan": "atan", "atan2": "atan2"}

#: libmvec's x86-64 instruction sets (the mangling letter), each with its vector length in bits and the CPU
#: feature it needs (None: every x86-64 CPU)
_ISAS = (("b", 128, None), ("c", 256, "avx"), ("d", 256, "avx2"), ("e", 512, "avx512f"))

_CALL = re.compile(r"(call (?:[a-z]+ )*(double|float) @((?:llvm\.)?[a-z0-9]+(?:\.f(?:32|64))?)\(([^()]*)\))")


def check_library(name: str, triple: str) -> None:
    """An EnzccError for a library enzcc does not implement, or one the target cannot call."""
    if name == "none":
        return
    if name not in LIBRARIES:
        raise EnzccError(f"-fveclib={name}: enzcc implements -fveclib=libmvec (glibc's vector math) and none")
    if not triple.startswith("x86_64") or "linux" not in triple:
        raise EnzccError(f"-fveclib={name}: glibc's libmvec is for x86-64 Linux, not {triple}")


def _isas(text: str) -> list[tuple[str, int]]:
    """(letter, bits) of the instruction sets every function of the module may use: the CPU features the
    frontend wrote on the functions (``"target-features"="+avx2,..."``, from ``-march``), those all share."""
    have = None
    for features in re.findall(r'"target-features"="([^"]*)"', text):
        on = {f[1:] for f in features.split(",") if f.startswith("+")}
        have = on if have is None else have & on
    have = have or set()
    best = {bits: letter for letter, bits, need in _ISAS if need is None or need in have}  # (d over c: AVX2)
    return [(letter, bits) for bits, letter in best.items()]


def _scalar(callee: str, ty: str) -> str | None:
    """The libm function (double name) a call of ``callee`` returning ``ty`` computes, or None."""
    if callee.startswith("llvm."):
        base, _, suffix = callee[5:].partition(".")
        if suffix != {"double": "f64", "float": "f32"}[ty]:
            return None
        return _INTRINSICS.get(base)
    name = callee[:-1] if ty == "float" and callee.endswith("f") else callee
    if ty == "float" and not callee.endswith("f"):
        return None
    return name if name in _FUNCTIONS else None


def annotate(text: str, name: str) -> str:
    """The module ``text`` with its math calls marked with their vector variants in library ``name``
    (``libmvec``; ``none``: unchanged), in the instruction sets its functions' CPU features allow."""
    if name == "none":
        return text
    isas = _isas(text)
    used: dict[str, str] = {}  # variant -> its declaration

    def mark(m: re.Match) -> str:
        call, ty, callee, args = m.group(1), m.group(2), m.group(3), m.group(4)
        scalar = _scalar(callee, ty)
        if scalar is None or args.count(",") + 1 != _FUNCTIONS[scalar]:
            return call
        lib = scalar + ("f" if ty == "float" else "")
        arity = _FUNCTIONS[scalar]
        width = 64 if ty == "double" else 32
        variants = []
        for letter, bits in isas:
            n = bits // width
            vname = f"_ZGV{letter}N{n}{'v' * arity}_{lib}"
            vty = f"<{n} x {ty}>"
            used[vname] = f"declare {vty} @{vname}({', '.join([vty] * arity)})"
            variants.append(f"_ZGV_LLVM_N{n}{'v' * arity}_{callee}({vname})")
        if not variants:
            return call
        return f'{call} "vector-function-abi-variant"="{",".join(variants)}"'

    out = _CALL.sub(mark, text)
    if not used:
        return text
    decls = [d for v, d in used.items() if not re.search(rf"^declare [^\n]*@{re.escape(v)}\(", out, re.M)]
    keep = ", ".join(f"ptr @{v}" for v in used)
    if re.search(r"^@llvm\.compiler\.used = ", out, re.M):  # (clang's module may have one: extend it)
        out = re.sub(r"^@llvm\.compiler\.used = appending global \[(\d+) x ptr\] \[(.*)\], section \"llvm.metadata\"$",
                     lambda m: f'@llvm.compiler.used = appending global [{int(m.group(1)) + len(used)} x ptr] '
                               f'[{m.group(2)}, {keep}], section "llvm.metadata"', out, count=1, flags=re.M)
    else:
        out += f'\n@llvm.compiler.used = appending global [{len(used)} x ptr] [{keep}], section "llvm.metadata"\n'
    return out + "\n" + "\n".join(decls) + "\n"
