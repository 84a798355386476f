"""Compile generated programs with enzcc, run their checks and classify each one.

Programs are compiled in batches (one C file, one ``main`` running every check); a batch that enzcc
refuses, or whose executable dies, is split in halves until each outcome belongs to one program, so a
batch costs one compile when all goes well and an outcome is always a single program's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.fuzz.gen import Program, render_file

ROOT = Path(__file__).resolve().parents[2]

#: outcomes that are enzcc bugs (a refusal of a construct docs/limitations.md lists is not)
BUG_CLASSES = ("wrong-reverse", "wrong-forward", "wrong-both", "ad-mismatch", "wrong-primal", "run-crash",
               "run-timeout", "refused-bug", "crash", "llvm-abort", "timeout", "generator-error")
OK_CLASSES = ("pass", "inconclusive", "invalid", "refused-unsupported")

#: refusals of what docs/limitations.md lists that generated programs can contain
#: (every function they call has a body or a rule; function-pointer targets are known), by the message
UNSUPPORTED = [
    re.compile(r"irreducible control flow cannot be differentiated$"),
]

#: source file suffix per language (the same program text is C and C++)
SUFFIX = {"c": ".c", "c++": ".cpp"}

LLVM_ABORT = ("LLVM ERROR", "PLEASE submit a bug report", "Stack dump", "Assertion `")


@dataclass
class Outcome:
    """What happened to one program at one -O level."""

    name: str
    opt: int
    cls: str
    """One of :data:`BUG_CLASSES` or :data:`OK_CLASSES`."""
    detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def enzcc_command(opt: int, src: str, exe: str) -> list[str]:
    """The compile command; ``ENZCC_FUZZ_FLAGS`` adds enzcc flags (``--ad-inline=none``)."""
    extra = os.environ.get("ENZCC_FUZZ_FLAGS", "").split()
    return [sys.executable, "-m", "enzcc", f"-O{opt}", "--no-cache", *extra, "-w", src, "-o", exe, "-lm"]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("ENZCC_DEBUG", None)
    return env


def classify_compile_failure(returncode: int | None, stderr: str) -> tuple[str, str]:
    """(class, detail) for an enzcc run that did not produce the executable (``returncode`` None: timed out)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    first = lines[0] if lines else f"exit code {returncode} and no message"
    if returncode is None:
        return "timeout", "enzcc did not finish"
    if returncode < 0 or any(m in stderr for m in LLVM_ABORT):
        return "llvm-abort", first
    if "Traceback" in stderr or "internal error" in stderr:
        return "crash", next((ln for ln in lines if "internal error" in ln or "Error" in ln), first)
    if lines and lines[0].startswith("enzcc: error:"):
        if len(lines) > 1:
            return "refused-bug", f"message of {len(lines)} lines: {first}"
        if any(p.search(first) for p in UNSUPPORTED):
            return "refused-unsupported", first
        return "refused-bug", first
    return "generator-error", first


def parse_check_output(stdout: str) -> dict[str, tuple[str, str]]:
    """``FUZZ <name> <class> <detail>`` lines -> {name: (class, detail)}."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[0] == "FUZZ":
            out[parts[1]] = (parts[2], parts[3] if len(parts) > 3 else "")
    return out


def run_batch(programs: list[Program], opt: int, lang: str = "c", compile_timeout: float = 120.0,
              run_timeout: float = 20.0) -> list[Outcome]:
    """Outcomes for ``programs`` at ``-O{opt}``, compiled as C or C++ (``lang``), splitting the batch where
    one program spoils it."""
    with tempfile.TemporaryDirectory(prefix="enzcc-fuzz-") as tmp:
        src, exe = os.path.join(tmp, "prog" + SUFFIX[lang]), os.path.join(tmp, "prog")
        Path(src).write_text(render_file(programs))
        try:
            proc = subprocess.run(enzcc_command(opt, src, exe), cwd=tmp, env=_env(), capture_output=True,
                                  text=True, timeout=compile_timeout * max(1, len(programs) // 4))
            rc, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            rc, err = None, ""
        if rc != 0 or not os.path.exists(exe):
            if len(programs) > 1:
                culprit = _named_program(programs, err)
                if culprit is not None:  # enzcc's message names the function: that program alone fails
                    rest = [p for p in programs if p is not culprit]
                    return [Outcome(culprit.name, opt, *classify_compile_failure(rc, err))] + \
                        run_batch(rest, opt, lang, compile_timeout, run_timeout)
                return _split(programs, opt, lang, compile_timeout, run_timeout)
            cls, detail = classify_compile_failure(rc, err)
            return [Outcome(programs[0].name, opt, cls, detail)]
        try:
            proc = subprocess.run([exe], cwd=tmp, capture_output=True, text=True,
                                  timeout=run_timeout * len(programs))
            rc, stdout = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as exc:
            rc, stdout = None, (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    seen = parse_check_output(stdout)
    done = [Outcome(p.name, opt, *seen[p.name]) for p in programs if p.name in seen]
    missing = [p for p in programs if p.name not in seen]
    if not missing:
        return done
    if len(missing) < len(programs):
        return done + run_batch(missing, opt, lang, compile_timeout, run_timeout)
    if len(programs) > 1:
        return _split(programs, opt, lang, compile_timeout, run_timeout)
    why = "timed out" if rc is None else f"exit code {rc}" if rc >= 0 else f"killed by signal {-rc}"
    return [Outcome(programs[0].name, opt, "run-timeout" if rc is None else "run-crash", f"the check {why}")]


def _named_program(programs: list[Program], stderr: str) -> Program | None:
    """The program whose function a one-line enzcc error names (``in function 'p12_f'``), if any."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    m = re.search(r"in function '(p\d+)_", lines[0]) if len(lines) == 1 else None
    return next((p for p in programs if m and p.name == m.group(1)), None)


def _split(programs, opt, lang, compile_timeout, run_timeout):
    half = len(programs) // 2
    return (run_batch(programs[:half], opt, lang, compile_timeout, run_timeout)
            + run_batch(programs[half:], opt, lang, compile_timeout, run_timeout))


def run_one(program: Program, opt: int, lang: str = "c") -> Outcome:
    return run_batch([program], opt, lang)[0]


def same_failure(a: Outcome, b: Outcome) -> bool:
    """Whether ``b`` is the failure ``a`` is (class, and for messages their shape without names/numbers)."""
    if a.cls != b.cls:
        return False
    if a.cls in ("refused-bug", "crash", "llvm-abort"):
        return _shape(a.detail) == _shape(b.detail)
    return True


def _shape(message: str) -> str:
    message = re.sub(r"'[^']*'", "'_'", message)
    message = re.sub(r"%[\w.<>-]+", "%_", message)
    return re.sub(r"\d+", "0", message)
