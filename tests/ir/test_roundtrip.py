"""Round-trip real compiler output through enzcc.ir: parse (all bodies), print,
verify with llvmlite and compare llvmlite's canonical printing of both."""

from __future__ import annotations

import re

import pytest

from ir_helpers import assert_roundtrip, compile_to_ir, llvm_check
from enzcc.ir import parse_module

CONFIGS = [
    ("c", ["-O0", "-Xclang", "-disable-O0-optnone"], None),
    ("c", ["-O1"], None),
    ("c", ["-O2"], None),
    ("c", ["-O3"], None),
    ("c", ["-O0", "-g"], None),
    ("c", ["-O2", "-g"], None),
    ("c", ["-O3", "-ffast-math", "-mavx2", "-mfma"], None),
    ("c", ["--target=nvptx64-nvidia-cuda", "-O2"], "kernel.c"),
    ("c", ["--target=aarch64-linux-gnu", "-march=armv8-a+sve", "-O3"], "kernel.c"),
    ("cpp", ["-O0"], None),
    ("cpp", ["-O2"], None),
    ("cpp", ["-O1", "-g"], None),
    ("fortran", ["-O0"], None),
    ("fortran", ["-O2"], None),
    ("rust", ["-C", "opt-level=0"], None),
    ("rust", ["-C", "opt-level=3"], None),
    ("rust", ["-C", "opt-level=2", "-C", "debuginfo=2"], None),
]


def _id(cfg):
    lang, flags, src = cfg
    return "-".join([lang, *(f.strip("-").replace("=", "") for f in flags)] + ([src] if src else []))


@pytest.fixture(scope="module", params=CONFIGS, ids=[_id(c) for c in CONFIGS])
def program_ir(request, tmp_path_factory):
    lang, flags, src = request.param
    return compile_to_ir(lang, flags, tmp_path_factory.mktemp("ir"), src)


def test_roundtrip_full_parse(program_ir):
    assert_roundtrip(program_ir, force_parse=True)


def test_roundtrip_lazy_is_verbatim(program_ir):
    """Without touching any body, printing keeps every body verbatim."""
    mod = parse_module(program_ir)
    defined = [f for f in mod.functions.values() if not f.is_declaration]
    assert defined and not any(f.is_parsed for f in defined)
    printed = str(mod)
    for fn in defined:
        assert fn._body_text in printed
    assert llvm_check(printed)["text"] == llvm_check(program_ir)["text"]


def test_partial_parse(program_ir):
    """Parsing only some functions mixes parsed and verbatim bodies correctly."""
    mod = parse_module(program_ir)
    defined = [f for f in mod.functions.values() if not f.is_declaration]
    for fn in defined[::2]:
        assert fn.body  # forces parsing
    assert [f.is_parsed for f in defined] == [i % 2 == 0 for i in range(len(defined))]
    assert llvm_check(str(mod))["text"] == llvm_check(program_ir)["text"]


def test_printed_text_matches_llvm_formatting(tmp_path):
    """Our printer reproduces LLVM's own text line by line (except comments and
    the order of '; preds' lists)."""
    text = compile_to_ir("c", ["-O0", "-g"], tmp_path)
    mod = parse_module(text).parse_all()
    printed = str(mod)

    label_comment = re.compile(r"^(\S.*?:)\s+; (preds = .*|No predecessors!)$")

    def norm(t):
        lines = []
        for line in t.splitlines():
            if not line.strip() or line.startswith("; "):
                continue
            m = label_comment.match(line)
            lines.append(m.group(1) if m else line)
        return lines

    assert norm(printed) == norm(text)
