"""Differential testing (tests/fuzz): the generator, classifier and shrinker, a fixed-seed sample of random
programs at -O0..-O3 (the CI part of ``make fuzz``), and the reduced programs of every bug it found."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from enzcc_testing import need
from tests.fuzz.__main__ import fuzz, table
from tests.fuzz.gen import CHECK_CLASSES, generate, read_regression, regression_text, render_file
from tests.fuzz.run import BUG_CLASSES, Outcome, classify_compile_failure, parse_check_output, run_batch, same_failure
from tests.fuzz.shrink import shrink

REGRESSIONS = sorted((Path(__file__).parent / "fuzz" / "regressions").glob("*.reg"))


def test_generation_is_deterministic_and_independent_of_batching():
    a = [generate(7, i).source() for i in range(5)]
    b = [generate(7, i).source() for i in reversed(range(5))][::-1]
    assert a == b
    assert len(set(a)) == 5
    assert generate(8, 0).source() != a[0]


def test_generated_programs_cover_the_constructs():
    features = set()
    for i in range(150):
        features |= generate(3, i).features
    for f in ("loop-fixed", "loop-n", "nested-loop", "while-break", "if", "local-array", "struct", "malloc",
              "calloc", "realloc", "memcpy", "in-place", "helper-static", "helper-extern", "helper-inplace",
              "recursion", "function-pointer"):
        assert f in features, f
    types = {generate(3, i).T for i in range(40)}
    assert types == {"float", "double"}


def test_batch_source_defines_each_program_once():
    progs = [generate(1, i) for i in range(3)]
    text = render_file(progs)
    for p in progs:
        assert text.count(f"static void {p.name}_check(void)") == 1
        assert f"{p.name}_check(); fflush(stdout);" in text


def test_classifier():
    assert classify_compile_failure(None, "")[0] == "timeout"
    assert classify_compile_failure(-6, "")[0] == "llvm-abort"
    assert classify_compile_failure(1, "LLVM ERROR: Broken module found")[0] == "llvm-abort"
    assert classify_compile_failure(70, "enzcc: internal error: KeyError: 3 (set ENZCC_DEBUG=1 for details)")[0] \
        == "crash"
    assert classify_compile_failure(1, "Traceback (most recent call last):\n  File ...\nValueError: x")[0] == "crash"
    assert classify_compile_failure(1, "enzcc: error: in function 'f': irreducible control flow cannot be "
                                       "differentiated") == \
        ("refused-unsupported", "enzcc: error: in function 'f': irreducible control flow cannot be differentiated")
    assert classify_compile_failure(1, "enzcc: error: in function 'f': no derivative rule for call to 'zork'")[0] \
        == "refused-bug"
    assert classify_compile_failure(1, "enzcc: error: one\nsecond line")[0] == "refused-bug"
    assert classify_compile_failure(1, "prog.c:3:1: error: expected ';'")[0] == "generator-error"


def test_check_output_parsing_and_failure_identity():
    out = parse_check_output("noise\nFUZZ p1 pass 3 of 3 coordinates\nFUZZ p2 wrong-reverse coordinate 0 of 2: x\n")
    assert out == {"p1": ("pass", "3 of 3 coordinates"), "p2": ("wrong-reverse", "coordinate 0 of 2: x")}
    a = Outcome("p1", 2, "refused-bug", "enzcc: error: in function 'p1_f': no shadow for pointer %12")
    b = Outcome("p1", 2, "refused-bug", "enzcc: error: in function 'p1_f': no shadow for pointer %3")
    c = Outcome("p1", 2, "refused-bug", "enzcc: error: in function 'p1_f': no derivative rule for call to 'g'")
    assert same_failure(a, b) and not same_failure(a, c)
    assert set(CHECK_CLASSES) - {"pass", "inconclusive", "invalid"} <= set(BUG_CLASSES)


def test_shrinker_keeps_the_property_and_removes_the_rest():
    prog = generate(5, 11)
    assert "sin" in prog.function_text()

    def still(p):
        return re.search(r"\bsinf?\(", p.function_text()) is not None

    small, tries = shrink(prog, still, max_tries=2000)
    assert still(small)
    assert small.size() < prog.size() / 2
    assert tries > 0
    assert not small.helpers or any("sin" in h.render(small.fs, small.T) for h in small.helpers)


@need("clang-22", "llvm-objcopy-22")
def test_a_wrong_gradient_is_caught(tmp_path, monkeypatch):
    """The checks can fail: a program whose derivative enzcc computes right, compared as if its primal were
    a different function, is classified as a wrong gradient (both modes disagree with finite differences)."""
    prog = generate(1, 3)
    good = run_batch([prog], 1)[0]
    assert good.cls == "pass", good
    import tests.fuzz.run as R

    real = R.render_file
    monkeypatch.setattr(R, "render_file", lambda ps: real(ps).replace(
        "double L = (double)r,", "double L = (double)r + 0.5 * x[0] * x[0],"))
    bad = R.run_batch([prog], 1)[0]
    assert bad.cls in ("wrong-both", "wrong-reverse"), bad


@need("clang-22", "llvm-objcopy-22")
def test_fixed_seed_sample_has_no_bugs():
    """What CI runs of ``make fuzz``: 16 programs of seed 2024 at each -O level."""
    opts = [0, 1, 2, 3]
    outcomes = fuzz(16, 2024, opts, jobs=2, batch=8)
    bugs = [o for o in outcomes if o.cls in BUG_CLASSES]
    assert not bugs, table(outcomes, opts) + "\n" + "\n".join(f"{o.name} -O{o.opt} {o.cls}: {o.detail}" for o in bugs)
    assert sum(o.cls == "pass" for o in outcomes) >= len(outcomes) * 0.6, table(outcomes, opts)


def test_fixed_seed_sample_without_inlining_has_no_bugs(monkeypatch):
    """The same kind of sample with ``--ad-inline=none``: every call inside differentiated code goes through
    the callee's derived functions (forward derivative; augmented primal and reverse with a tape)."""
    monkeypatch.setenv("ENZCC_FUZZ_FLAGS", "--ad-inline=none")
    opts = [0, 2]
    outcomes = fuzz(16, 2025, opts, jobs=2, batch=8)
    bugs = [o for o in outcomes if o.cls in BUG_CLASSES]
    assert not bugs, table(outcomes, opts) + "\n" + "\n".join(f"{o.name} -O{o.opt} {o.cls}: {o.detail}" for o in bugs)
    assert sum(o.cls == "pass" for o in outcomes) >= len(outcomes) * 0.6, table(outcomes, opts)


@need("clang-22", "llvm-objcopy-22")
@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_reduced_failure_now_passes(enzcc, path):
    """Each bug the fuzzer found, reduced to a small program that checks itself: it passes at every -O level."""
    prog = read_regression(path.read_text())
    enzcc.write("prog.c", render_file([prog]))
    for opt in ("-O0", "-O1", "-O2", "-O3"):
        enzcc(opt, "-w", "prog.c", "-o", "prog", "-lm")
        out = enzcc.run("./prog").stdout
        verdicts = parse_check_output(out)
        assert list(verdicts) == [prog.name] and verdicts[prog.name][0] == "pass", f"{opt}: {out}"


def test_regression_format_round_trips():
    prog = generate(4, 9)
    back = read_regression(regression_text(prog, "a note"))
    assert render_file([back]) == render_file([prog])


@need("clang-22", "llvm-objcopy-22")
def test_fixed_seed_sample_as_cxx_has_no_bugs():
    """The same kind of programs compiled as C++ (enzcc picks clang++ for .cpp)."""
    outcomes = fuzz(8, 2025, [2], jobs=2, batch=8, lang="c++")
    bugs = [o for o in outcomes if o.cls in BUG_CLASSES]
    assert not bugs, "\n".join(f"{o.name} -O{o.opt} {o.cls}: {o.detail}" for o in bugs)
    assert sum(o.cls == "pass" for o in outcomes) >= 5
