"""clang's command line for a C or C++ compile, shared by the frontend and the no-AD fast path.

Kept apart from :mod:`enzcc.frontends` (whose package imports every frontend) so that :mod:`enzcc.fastpath`,
which runs for most calls of a drop-in build, imports only the standard library and this.
"""

from __future__ import annotations

import os

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
INCLUDE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def include_args(lang: str | None) -> list[str]:
    """Where a compile of ``lang`` finds enzcc's headers."""
    return ["-idirafter", INCLUDE_DIR] if lang in ("c", "c++") else []


def x_args(lang: str, forced: bool) -> list[str]:
    """``-x`` for a language given with ``-x``/``--lang`` rather than by the file's extension."""
    if not forced:
        return []
    return ["-x", {"c": "c", "c++": "c++", "assembler": "assembler",
                   "assembler-with-cpp": "assembler-with-cpp"}[lang]]


def dependency_flags(dep_args: list[str], final_name: str) -> list[str]:
    """The user's -MD style flags, made explicit so they name the final object, not a temporary."""
    deps = list(dep_args)
    if not deps:
        return deps
    if ("-MD" in deps or "-MMD" in deps) and not any(a.startswith("-MF") for a in deps):
        deps += ["-MF", os.path.splitext(final_name)[0] + ".d"]
    if not any(a.startswith(("-MT", "-MQ")) for a in deps):
        deps += ["-MQ", final_name]
    return deps


def compile_with_bitcode_command(driver: str, src: str, out_obj: str, final_name: str, *, lang: str,
                                 forced: bool, compile_args: list[str], lang_args: list[str],
                                 dep_args: list[str], opt_flag: str | None, level: int) -> list[str]:
    """The one clang run of ``enzcc -c``: the real compile, which also puts the module as it was before
    optimization into the object (``-fembed-bitcode=all``: the same bitcode as ``-Xclang
    -disable-llvm-passes``, and the same machine code as without it). At -O0 the bitcode must stay
    optimizable: ``-disable-O0-optnone``, which changes nothing in -O0 machine code."""
    cmd = [driver, *x_args(lang, forced), *ATTRIBUTE_DEFINES, *compile_args, *lang_args, *include_args(lang),
           *dependency_flags(dep_args, final_name)]
    if opt_flag:
        cmd.append(opt_flag)
    if level == 0:
        cmd += ["-Xclang", "-disable-O0-optnone"]
    return cmd + ["-Xclang", "-fembed-bitcode=all", "-c", src, "-o", out_obj]
