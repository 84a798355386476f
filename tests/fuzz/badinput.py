"""Bad-input fuzzer: mutated C and LLVM IR go into enzcc, which must fail cleanly or succeed.

A bug is a Python traceback, an ``internal error`` line, an LLVM abort, a death by signal, a hang, or an
output file that exists although enzcc failed (or is missing although it succeeded). Everything else
(clang's own diagnostics, enzcc's one-line errors) is a clean error.

    python3 -m tests.fuzz.badinput --n 200 --seed 1 [--keep DIR] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
"""The checkout holding this file: the enzcc that gets fuzzed."""
TIMEOUT = 60
BUG_CLASSES = ("traceback", "internal-error", "llvm-abort", "signal", "timeout", "half-written-output",
               "missing-output")

DECLS = """extern int enzyme_dup, enzyme_dupnoneed, enzyme_const, enzyme_out;
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
double sin(double); double exp(double); double cos(double);
void *malloc(unsigned long); void free(void *);
int printf(const char *, ...);
"""

C_SEEDS = {
    "sum_loop": DECLS + """
double sumsq(double *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}
int main(void) {
    double x[4] = {1, 2, 3, 4}, dx[4] = {0};
    int n = 4;
    __enzyme_autodiff((void *)sumsq, enzyme_dup, x, dx, enzyme_const, n);
    printf("%g\\n", dx[2]);
    return 0;
}
""",
    "transcendental": DECLS + """
double f(double a, double b) { return sin(a) * exp(b) + cos(a * b); }
int main(void) {
    double a = 0.5, b = 1.5;
    double da = __enzyme_autodiff((void *)f, enzyme_out, a, enzyme_const, b);
    double fa = __enzyme_fwddiff((void *)f, enzyme_dup, a, 1.0, enzyme_const, b);
    printf("%g %g\\n", da, fa);
    return 0;
}
""",
    "malloc_buffer": DECLS + """
double norm(double *x, int n) {
    double *t = malloc(sizeof(double) * n);
    double s = 0;
    for (int i = 0; i < n; i++) { t[i] = exp(x[i]); s += t[i]; }
    free(t);
    return s;
}
int main(void) {
    double x[3] = {0.1, 0.2, 0.3}, dx[3] = {0};
    int n = 3;
    __enzyme_autodiff((void *)norm, enzyme_dup, x, dx, enzyme_const, n);
    printf("%g\\n", dx[0]);
    return 0;
}
""",
    "struct": DECLS + """
struct P { double x, y; };
double energy(struct P *p, int n) {
    double e = 0;
    for (int i = 0; i < n; i++) e += p[i].x * p[i].y + sin(p[i].x);
    return e;
}
int main(void) {
    struct P p[2] = {{1, 2}, {3, 4}}, dp[2] = {{0, 0}, {0, 0}};
    int n = 2;
    __enzyme_autodiff((void *)energy, enzyme_dup, p, dp, enzyme_const, n);
    double d = __enzyme_fwddiff((void *)energy, enzyme_dup, p, dp, enzyme_const, n);
    printf("%g %g\\n", dp[0].x, d);
    return 0;
}
""",
}

C_TOKEN = re.compile(r"\s+|[A-Za-z_]\w*|\d+\.\d*|\d+|\"(?:[^\"\\\n]|\\.)*\"|->|\+\+|--|[<>=!+\-*/]=|&&|\|\||\S")
EXTRA_TOKENS = ("(", ")", "{", "}", ";", "*", ",", "enzyme_dup", "enzyme_out", "enzyme_const", "0", "1.5", "x",
                "__enzyme_autodiff", "int", "double", "return", "float", "long", "unsigned", "&", "[0]")
C_NUMBERS = ("0", "1", "-1", "3", "100000", "1e308", "0.0", "2147483647")
C_OPERATORS = ("+", "-", "*", "/", "<", ">", "<=", "==")
IR_TYPES = ("double", "float", "i32", "ptr", "i64", "half", "x86_fp80", "fp128", "<2 x double>", "i1")
IR_NUMBERS = ("0", "1", "-1", "2", "7", "64", "255", "4294967296", "9223372036854775807")


# ---------------------------------------------------------------------------------------------
# C mutations


def _token_positions(toks: list[str]) -> list[int]:
    return [i for i, t in enumerate(toks) if not t.isspace()]


def mutate_tokens(src: str, rng: random.Random) -> str:
    """One token-level edit: delete, duplicate, insert, swap or replace (a number by a number, an operator
    by an operator, a name by a name: often still valid C)."""
    toks = C_TOKEN.findall(src)
    pos = _token_positions(toks)
    i = rng.choice(pos)
    op = rng.choice(("delete", "duplicate", "insert", "swap", "replace", "replace"))
    if op == "delete":
        toks[i] = " "
    elif op == "duplicate":
        toks[i] = f"{toks[i]} {toks[i]}"
    elif op == "insert":
        new = rng.choice(EXTRA_TOKENS) if rng.random() < 0.6 else toks[rng.choice(pos)]
        toks[i] = f"{new} {toks[i]}"
    elif op == "swap":
        j = rng.choice(pos)
        toks[i], toks[j] = toks[j], toks[i]
    else:
        i = rng.choice([j for j in pos if toks[j][0].isalnum() or toks[j][0] == "_" or toks[j] in C_OPERATORS])
        toks[i] = _replacement(toks[i], [toks[j] for j in pos], rng)
    return "".join(toks)


def _replacement(tok: str, program: list[str], rng: random.Random) -> str:
    """A token of the same sort as ``tok``: number for number, operator for operator, name for name."""
    if tok[0].isdigit():
        return rng.choice(C_NUMBERS)
    if tok in C_OPERATORS:
        return rng.choice(C_OPERATORS)
    if tok[0].isalpha() or tok[0] == "_":
        return rng.choice([t for t in program if t[0].isalpha() or t[0] == "_"])
    return tok


def _ad_calls(src: str) -> list[tuple[int, int]]:
    """(start, end) of the argument text of each ``__enzyme_*(...)`` call (parentheses balanced)."""
    spans = []
    for m in re.finditer(r"__enzyme_(?:autodiff|fwddiff)\s*\(", src):
        depth, k = 1, m.end()
        while k < len(src) and depth:
            depth += {"(": 1, ")": -1}.get(src[k], 0)
            k += 1
        if not depth and not src[m.start() - 7:m.start()].rstrip().endswith("double"):
            spans.append((m.end(), k - 1))
    return spans


def _split_args(text: str) -> list[str]:
    args, depth, cur = [], 0, ""
    for ch in text:
        depth += {"(": 1, ")": -1, "{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
        else:
            cur += ch
    return args + [cur]


def _api_edit(args: list[str], rng: random.Random) -> tuple[list[str], str]:
    """One change to an AD call's arguments that keeps the C valid; returns (args, extra declarations)."""
    op = rng.choice(("marker_order", "drop_arg", "extra_arg", "int_for_pointer", "missing_function",
                     "variable", "wrong_marker", "dupnoneed"))
    markers = [k for k, a in enumerate(args) if a.strip().startswith("enzyme_")]
    extra = ""
    if op == "marker_order" and len(markers) >= 2:
        a, b = rng.sample(markers, 2)
        args[a], args[b] = args[b], args[a]
    elif op == "drop_arg" and len(args) > 1:
        del args[rng.randrange(1, len(args))]
    elif op == "extra_arg":
        args.insert(rng.randrange(1, len(args) + 1), rng.choice((" x", " 0", " 1.5", " enzyme_dup", " n")))
    elif op == "int_for_pointer" and len(args) > 1:
        args[rng.randrange(1, len(args))] = " 7"
    elif op == "missing_function":
        args[0] = "(void *)undefined_fn"
        extra = "double undefined_fn(double *, int);\n"
    elif op == "variable":
        args[0] = rng.choice(("(void *)&enzyme_dup", "(void *)0", "(void *)main", "(void *)printf"))
    elif op == "wrong_marker" and markers:
        args[rng.choice(markers)] = " " + rng.choice(("enzyme_dup", "enzyme_out", "enzyme_const", "enzyme_dupnoneed"))
    elif op == "dupnoneed" and markers:
        args[rng.choice(markers)] = " enzyme_dupnoneed"
    else:
        args = args[:1]
    return args, extra


def mutate_api(src: str, rng: random.Random) -> str:
    """Misuse the AD API in one call (still valid C)."""
    spans = _ad_calls(src)
    if not spans:
        return mutate_tokens(src, rng)
    start, end = rng.choice(spans)
    args, extra = _api_edit(_split_args(src[start:end]), rng)
    return extra + src[:start] + ",".join(args) + src[end:]


def mutate_c(src: str, rng: random.Random) -> str:
    """1-3 mutations, token-level or API-level."""
    for _ in range(rng.randint(1, 3)):
        src = (mutate_api if rng.random() < 0.4 else mutate_tokens)(src, rng)
    return src


# ---------------------------------------------------------------------------------------------
# IR mutations


def _replace_match(text: str, pattern: str, rng: random.Random, choices) -> str:
    matches = list(re.finditer(pattern, text))
    if not matches:
        return text
    m = rng.choice(matches)
    return text[:m.start()] + rng.choice(choices) + text[m.end():]


def mutate_ir(text: str, rng: random.Random) -> str:
    """1-3 edits: delete/duplicate a line, swap a type, rename an operand or a global symbol, change a number,
    insert a stray character, truncate."""
    for _ in range(rng.randint(1, 3)):
        op = rng.choice(("delete", "duplicate", "type", "operand", "symbol", "number", "number", "garbage",
                         "truncate"))
        lines = text.split("\n")
        k = rng.randrange(len(lines))
        if op == "delete":
            del lines[k]
        elif op == "duplicate":
            lines.insert(k, lines[k])
        if op in ("delete", "duplicate"):
            text = "\n".join(lines)
        elif op == "type":
            text = _replace_match(text, r"\b(?:double|float|i32|ptr)\b", rng, IR_TYPES)
        elif op == "operand":
            text = _replace_match(text, r"%\d+\b", rng, [f"%{n}" for n in range(12)])
        elif op == "number":
            text = _replace_match(text, r"(?<![%@\w.])-?\d+\b", rng, IR_NUMBERS)
        elif op == "symbol":
            text = _replace_match(text, r"@[\w.]+", rng, sorted(set(re.findall(r"@[\w.]+", text))) or ["@x"])
        elif op == "garbage":
            k = rng.randrange(len(text) + 1)
            text = text[:k] + rng.choice(("\0", "\\", "\u00e9", "\u2028", "\"", "$", "!", "#")) + text[k:]
        else:
            text = text[:rng.randrange(len(text))]
    return text


@lru_cache(maxsize=None)
def ir_seeds() -> dict[str, str]:
    """LLVM IR of each C seed at -O0 (without optnone) and -O2, made by clang-22."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="enzcc-fuzz-seeds-") as d:
        for name, src in C_SEEDS.items():
            path = os.path.join(d, f"{name}.c")
            Path(path).write_text(src)
            for level, extra in (("O0", ["-Xclang", "-disable-O0-optnone"]), ("O2", [])):
                ll = os.path.join(d, f"{name}-{level}.ll")
                subprocess.run(["clang-22", f"-{level}", *extra, "-S", "-emit-llvm", path, "-o", ll], check=True)
                out[f"{name}-{level}"] = Path(ll).read_text()
    return out


# ---------------------------------------------------------------------------------------------
# running and classifying


@dataclass
class Case:
    """One program and the command line it is compiled with."""

    ident: str
    suffix: str
    """``.c`` or ``.ll``."""
    text: str
    """The program; with :attr:`mutation` set, the seed that the worker mutates."""
    args: list[str]
    """enzcc arguments; ``prog`` + suffix is the input, the output follows ``-o``."""
    mutation: int | None = None
    """Seed of the random mutations applied in the worker (None: ``text`` as it is)."""
    valid: bool = False
    """Mutate again (up to :data:`VALID_TRIES` times) until the frontend accepts the program, so that the
    mutant reaches enzcc's own stages."""


@dataclass
class Result:
    case: Case
    text: str
    """The program that was compiled."""
    kind: str
    returncode: int | None
    stderr: str


VALID_TRIES = 30


def frontend_accepts(text: str, suffix: str) -> bool:
    """Whether clang-22 (C) or llvm-as-22 (IR) accepts the program."""
    cmd = ["clang-22", "-fsyntax-only", "-x", "c", "-"] if suffix == ".c" else ["llvm-as-22", "-o", os.devnull, "-"]
    return subprocess.run(cmd, input=text.encode(), capture_output=True).returncode == 0


def program_of(case: Case) -> str:
    """The program a case compiles (deterministic in the case's mutation seed)."""
    if case.mutation is None:
        return case.text
    rng = random.Random(case.mutation)
    mutate = mutate_ir if case.suffix == ".ll" else mutate_c
    text = mutate(case.text, rng)
    for _ in range(VALID_TRIES if case.valid else 0):
        if frontend_accepts(text, case.suffix):
            break
        text = mutate(case.text, rng)
    return text


LLVM_ABORT = ("LLVM ERROR", "PLEASE submit a bug report", "Assertion", "Stack dump")


def classify(returncode: int | None, stderr: str, output_exists: bool, leftovers: bool = False) -> str:
    """The class of one enzcc run. ``returncode`` None means it timed out; ``leftovers``: temporary output
    files were left beside the output."""
    if returncode is None:
        return "timeout"
    if "Traceback (most recent call last)" in stderr:
        return "traceback"
    if re.search(r"\binternal error\b", stderr):
        return "internal-error"
    if any(marker in stderr for marker in LLVM_ABORT):
        return "llvm-abort"
    if returncode < 0:
        return "signal"
    if returncode == 0:
        return "missing-output" if not output_exists else "ok"
    return "half-written-output" if output_exists or leftovers else "clean-error"


def _output_of(args: list[str]) -> str:
    return args[args.index("-o") + 1]


def run_case(case: Case) -> Result:
    """Compile one mutant in a fresh directory and classify the outcome."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), ENZCC_NO_CACHE="1")
    env.pop("ENZCC_DEBUG", None)
    text = program_of(case)
    with tempfile.TemporaryDirectory(prefix="enzcc-fuzz-") as d:
        Path(d, "prog" + case.suffix).write_text(text)
        try:
            proc = subprocess.run([sys.executable, "-m", "enzcc", *case.args], cwd=d, env=env,
                                  capture_output=True, text=True, errors="replace", timeout=TIMEOUT)
            code, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            code = None
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        out = _output_of(case.args)
        leftovers = any(p.name.startswith(f".{out}.enzcc-") for p in Path(d).iterdir())
        return Result(case, text, classify(code, stderr, Path(d, out).exists(), leftovers), code, stderr)


C_MODES = ([[f"-O{k}", "prog.c", "-o", "prog", "-lm"] for k in range(4)] + [["-c", "prog.c", "-o", "prog.o"]]
           + [["-O2", "--ad-mode=before-opt", "prog.c", "-o", "prog", "-lm"]])
IR_MODES = [[f"-O{k}", "prog.ll", "-o", "prog", "-lm"] for k in (0, 2)] + [["-c", "prog.ll", "-o", "prog.o"]]


def make_cases(n: int, seed: int, ir_share: float = 0.4, valid_share: float = 0.5) -> list[Case]:
    """``n`` mutants (a share of them IR, a share made to pass the frontend), each with one mode; the same
    seed gives the same cases."""
    rng = random.Random(seed)
    irs = ir_seeds() if ir_share > 0 else {}
    cases = []
    for k in range(n):
        suffix, seeds, modes = (".ll", irs, IR_MODES) if irs and rng.random() < ir_share else (".c", C_SEEDS, C_MODES)
        name = rng.choice(sorted(seeds))
        cases.append(Case(f"{k:05d}-{name}", suffix, seeds[name], list(rng.choice(modes)),
                          mutation=rng.randrange(2**32), valid=rng.random() < valid_share))
    return cases


def run_cases(cases: list[Case], jobs: int = 2) -> list[Result]:
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(run_case, cases))


def mode_name(case: Case) -> str:
    return " ".join(a for a in case.args if a.startswith("-") and a not in ("-o", "-lm")) + f" {case.suffix}"


def keep_bug(result: Result, keep: Path) -> Path:
    """Write a bug's mutant, command line and stderr under ``keep``; returns the mutant's path."""
    keep.mkdir(parents=True, exist_ok=True)
    stem = keep / f"{result.case.ident}-{result.kind}"
    path = stem.with_suffix(result.case.suffix)
    path.write_text(result.text)
    stem.with_suffix(".stderr").write_text(f"enzcc {' '.join(result.case.args)}\nexit: {result.returncode}\n"
                                           f"{result.stderr}")
    return path


def bugs(results: list[Result]) -> list[Result]:
    return [r for r in results if r.kind in BUG_CLASSES]


def summary(results: list[Result]) -> str:
    """Counts per class, overall and per mode."""
    lines = [f"{len(results)} mutants"]
    lines += [f"  {kind}: {n}" for kind, n in sorted(Counter(r.kind for r in results).items())]
    per_mode = Counter((mode_name(r.case), r.kind) for r in results)
    for mode in sorted({m for m, _ in per_mode}):
        counts = ", ".join(f"{k}={n}" for (m, k), n in sorted(per_mode.items()) if m == mode)
        lines.append(f"  [{mode}] {counts}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="number of mutants")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, default=ROOT / "build" / "fuzz-bad", help="where bugs are written")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--ir-share", type=float, default=0.4, help="fraction of mutants that are LLVM IR")
    ap.add_argument("--valid-share", type=float, default=0.5,
                    help="fraction of mutants mutated again until the frontend accepts them")
    opts = ap.parse_args(argv)
    results = run_cases(make_cases(opts.n, opts.seed, opts.ir_share, opts.valid_share), opts.jobs)
    print(summary(results))
    found = bugs(results)
    for r in found:
        first = next((l for l in r.stderr.splitlines() if l.strip()), "")
        print(f"BUG {r.kind}: {keep_bug(r, opts.keep)}: {first[:160]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
