"""The command-line table: modes, arity, joined values, order, response files."""

import pytest

from enzcc.errors import EnzccError
from enzcc.flags import Input, lookup, parse_args


def test_modes():
    assert parse_args(["a.c"]).mode == "link"
    assert parse_args(["-c", "a.c"]).mode == "compile"
    assert parse_args(["-S", "a.c"]).mode == "asm"
    assert parse_args(["-E", "a.c"]).mode == "preprocess"
    assert parse_args(["-M", "a.c"]).mode == "preprocess"
    assert parse_args(["-c", "-MD", "a.c"]).mode == "compile"
    assert parse_args(["--version"]).mode == "query"
    assert parse_args(["-print-prog-name=ld"]).mode == "query"
    assert parse_args(["-dumpversion"]).mode == "query"
    assert parse_args(["-v"]).mode == "query"
    assert parse_args(["-c", "-emit-llvm", "a.c"]).mode == "asm"
    assert parse_args(["-fsyntax-only", "a.c"]).mode == "passthrough"


def test_arity_joined_and_separate():
    inv = parse_args(["-I", "inc", "-Iinc2", "-D", "X=1", "-DY", "-o", "out", "-c", "a.c", "-MF", "a.d", "-MT", "t"])
    assert inv.compile_args == ["-I", "inc", "-Iinc2", "-D", "X=1", "-DY"]
    assert inv.output == "out"
    assert inv.dep_args == ["-MF", "a.d", "-MT", "t"]
    assert [i.path for i in inv.inputs] == ["a.c"]


def test_link_line_keeps_order():
    inv = parse_args(["main.o", "-L", "lib", "-lfoo", "x.a", "-l", "m", "-Wl,--as-needed", "-shared"])
    flat = [x.path if isinstance(x, Input) else x for x in inv.link_line]
    assert flat == ["main.o", "-Llib", "-lfoo", "x.a", "-lm", "-Wl,--as-needed", "-shared"]
    assert inv.link_flags() == ["-Llib", "-lfoo", "-lm", "-Wl,--as-needed", "-shared"]


def test_opt_levels():
    for flag, level in [("-O0", 0), ("-O", 1), ("-O1", 1), ("-O2", 2), ("-O3", 3), ("-Os", 2), ("-Oz", 2),
                        ("-Ofast", 3)]:
        inv = parse_args([flag, "a.c"])
        assert inv.opt_level == level and inv.opt_flag == flag
    with pytest.raises(EnzccError):
        parse_args(["-Oq", "a.c"])


def test_languages_by_extension_and_x():
    inv = parse_args(["a.c", "b.cpp", "c.f90", "d.F90", "e.f", "f.rs", "g.ll", "h.bc", "i.mlir", "j.o", "k.a",
                      "l.so.1", "m.s"])
    assert [i.lang for i in inv.inputs] == ["c", "c++", "fortran", "fortran", "fortran", "rust", "llvm", "llvm",
                                            "mlir", None, None, None, "assembler"]
    inv = parse_args(["-x", "c++", "a.c", "-x", "none", "b.c", "-xc", "z.txt"])
    assert [(i.lang, i.forced) for i in inv.inputs] == [("c++", True), ("c", False), ("c", True)]


def test_lang_option_overrides_sources_not_objects():
    inv = parse_args(["--lang", "fortran", "prog.src", "x.o"])
    assert [i.lang for i in inv.inputs] == ["fortran", None]
    inv = parse_args(["prog.txt", "--lang=rust"])
    assert inv.inputs[0].lang == "rust"
    with pytest.raises(EnzccError, match="unknown language"):
        parse_args(["--lang", "cobol", "a.cob"])


def test_unknown_flags_go_to_clang_unchanged():
    inv = parse_args(["-frobnicate-unknown", "--weird-flag", "a.c"])
    assert "-frobnicate-unknown" in inv.compile_args and "--weird-flag" in inv.compile_args
    assert "--weird-flag" in inv.link_line


def test_missing_value():
    with pytest.raises(EnzccError, match="argument to '-o' is missing"):
        parse_args(["a.c", "-o"])


def test_response_files(tmp_path):
    inner = tmp_path / "inner.rsp"
    inner.write_text("-DINNER=1\n")
    rsp = tmp_path / "args.rsp"
    rsp.write_text(f'-c "my file.c" -I inc @{inner}\n')
    inv = parse_args([f"@{rsp}", "-O2"])
    assert [i.path for i in inv.inputs] == ["my file.c"]
    assert inv.compile_args == ["-I", "inc", "-DINNER=1"]
    assert inv.mode == "compile" and inv.opt_level == 2


def test_target_and_cpu():
    inv = parse_args(["--target=nvptx64-nvidia-cuda", "--cuda-gpu-arch=sm_80", "-S", "k.c"])
    assert inv.is_nvptx and inv.cpu == "sm_80"
    inv = parse_args(["-march=native", "a.c"])
    assert inv.cpu == "native" and not inv.is_nvptx


def test_lookup_prefers_longest():
    assert lookup("-Wl,-rpath,x")[0].name == "-Wl,"
    assert lookup("-Wall")[0].name == "-W"
    assert lookup("-fuse-ld=lld")[0].role == "link"
    assert lookup("-fPIC")[0].role == "both"
    assert lookup("-MF")[0].name == "-MF" and lookup("-MD")[1] is None


def test_ad_inline_option():
    assert parse_args(["-c", "a.c"]).ad_inline == "auto"
    assert parse_args(["--ad-inline=none", "-c", "a.c"]).ad_inline == "none"
    assert parse_args(["--ad-inline", "all", "-c", "a.c"]).ad_inline == "all"
    with pytest.raises(EnzccError, match="--ad-inline: expected 'auto', 'all' or 'none', not 'some'"):
        parse_args(["--ad-inline=some", "a.c"])


def test_vectorizer_and_unroller_switches():
    """clang's -f[no-]vectorize, -f[no-]slp-vectorize and -f[no-]unroll-loops (the last one given wins) reach
    enzcc's own pipeline; they still go to clang unchanged."""
    inv = parse_args(["-O2", "a.c"])
    assert (inv.loop_vectorize, inv.slp_vectorize, inv.unroll_loops) == (None, None, None)
    inv = parse_args(["-O2", "-fno-vectorize", "-fno-slp-vectorize", "-fno-unroll-loops", "a.c"])
    assert (inv.loop_vectorize, inv.slp_vectorize, inv.unroll_loops) == (False, False, False)
    assert "-fno-slp-vectorize" in inv.compile_args
    inv = parse_args(["-fno-tree-vectorize", "-ftree-vectorize", "-fno-slp-vectorize", "-fslp-vectorize",
                      "-O1", "a.c"])
    assert (inv.loop_vectorize, inv.slp_vectorize) == (True, True)
    assert parse_args(["-fno-tree-slp-vectorize", "a.c"]).slp_vectorize is False
