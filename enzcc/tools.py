"""Finding and running external tools (the LLVM 22 toolchain, rustc, ptxas)."""

from __future__ import annotations

import os
import sys

from enzcc.errors import SubprocessFailed, ToolMissingError

#: tool name -> (candidate executables, where to get it)
TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "clang": (("clang-22",), "Debian package clang-22 (apt-get install clang-22)"),
    "clang++": (("clang++-22",), "Debian package clang-22 (apt-get install clang-22)"),
    "flang": (("flang-22", "flang-new-22"), "Debian package flang-22 (apt-get install flang-22)"),
    "llvm-objcopy": (("llvm-objcopy-22",), "Debian package llvm-22 (apt-get install llvm-22)"),
    "llvm-ar": (("llvm-ar-22",), "Debian package llvm-22 (apt-get install llvm-22)"),
    "llc": (("llc-22",), "Debian package llvm-22 (apt-get install llvm-22)"),
    "opt": (("opt-22",), "Debian package llvm-22 (apt-get install llvm-22)"),
    "mlir-translate": (("mlir-translate-22",), "Debian package mlir-22-tools (apt-get install mlir-22-tools)"),
    "rustc": (("rustc",), "rustc with LLVM 22 (https://rustup.rs, rust 1.95)"),
    "ptxas": (("ptxas",), "the CUDA toolkit (ptxas)"),
    "fatbinary": (("fatbinary",), "the CUDA toolkit (fatbinary)"),
}

#: where the CUDA toolkit is looked for when neither --cuda-path nor $CUDA_PATH/$CUDA_HOME names it
CUDA_PLACES = ("/usr/local/cuda", "/usr/local/cuda-13.0", "/opt/cuda")


def cuda_path(given: str | None = None, required: bool = True) -> str | None:
    """The CUDA toolkit's directory (it has ``nvvm/libdevice`` and ``include/cuda_runtime.h``): ``given``
    (``--cuda-path=``), else ``$CUDA_PATH``, ``$CUDA_HOME``, else the usual places and ``/usr/local/cuda-*``,
    newest first. None, or a :class:`ToolMissingError` when ``required``, when there is none."""
    def is_toolkit(d: str | None) -> bool:
        return bool(d) and os.path.isfile(os.path.join(d, "include", "cuda_runtime.h"))

    if given:
        if is_toolkit(given):
            return given
        raise ToolMissingError(f"--cuda-path={given}: no CUDA toolkit there (include/cuda_runtime.h is missing)")
    places = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), *CUDA_PLACES]
    try:
        versions = sorted((e for e in os.listdir("/usr/local") if e.startswith("cuda-")),
                          key=lambda e: [int(p) if p.isdigit() else 0 for p in e[5:].split(".")], reverse=True)
        places += [os.path.join("/usr/local", e) for e in versions]
    except OSError:
        pass
    for d in places:
        if is_toolkit(d):
            return d
    if required:
        raise ToolMissingError("the CUDA toolkit was not found (set CUDA_PATH or pass --cuda-path=DIR; "
                               "CUDA 12 or 13, e.g. /usr/local/cuda-13.0)")
    return None


def _env_override(name: str) -> str | None:
    key = "ENZCC_" + name.upper().replace("+", "X").replace("-", "_")
    return os.environ.get(key)


_FOUND: dict[tuple[str, bool], str | None] = {}


def find_tool(name: str, required: bool = True) -> str | None:
    """Return the path of tool ``name`` or raise a :class:`ToolMissingError` naming the package.

    ``ENZCC_CLANG``, ``ENZCC_FLANG``, ``ENZCC_RUSTC``... override the lookup. Found paths are remembered.
    """
    key = (name, required)
    if key not in _FOUND:
        _FOUND[key] = _find_tool(name, required)
    return _FOUND[key]


def _find_tool(name: str, required: bool) -> str | None:
    override = _env_override(name)
    candidates, package = TOOLS[name]
    if override:
        path = which(override)
        if path:
            return path
        if required:
            raise ToolMissingError(f"{name} set by ENZCC_{name.upper()}={override} was not found")
        return None
    for cand in candidates:
        path = which(cand)
        if path:
            return path
    if name == "rustc":
        home = os.path.expanduser("~/.cargo/bin/rustc")
        if os.access(home, os.X_OK):
            return home
    if required:
        raise ToolMissingError(f"'{candidates[0]}' not found; install {package}")
    return None


def verbose() -> bool:
    return bool(os.environ.get("ENZCC_VERBOSE"))


def which(cmd: str) -> str | None:
    """The executable ``cmd`` names, looked up on ``PATH`` when it has no directory (as ``shutil.which``,
    without importing it: every enzcc run looks up clang)."""
    def runnable(path: str) -> bool:
        return os.access(path, os.X_OK) and not os.path.isdir(path)

    if os.path.dirname(cmd):
        return cmd if runnable(cmd) else None
    for d in os.get_exec_path():
        path = os.path.join(d or os.curdir, cmd)
        if runnable(path):
            return path
    return None


class Finished:
    """What :func:`run` returns: the exit code, and the output when it was captured."""

    __slots__ = ("args", "returncode", "stdout", "stderr")

    def __init__(self, args, returncode: int, stdout: bytes | None = None, stderr: bytes | None = None):
        self.args, self.returncode, self.stdout, self.stderr = args, returncode, stdout, stderr


def run(cmd: list[str], *, capture: bool = False, tool: str | None = None, check: bool = True,
        input: bytes | None = None, cwd: str | None = None) -> Finished:
    """Run ``cmd``. Diagnostics go straight to the user's terminal unless ``capture``.

    With ``check``, a non-zero exit raises :class:`SubprocessFailed` carrying the tool's exit code
    (when captured, the tool's stderr is replayed first so the user sees why).
    """
    if verbose():
        print("enzcc: + " + " ".join(_quote(c) for c in cmd), file=sys.stderr)
    try:
        if capture or input is not None or cwd is not None:
            import subprocess

            proc = subprocess.run(cmd, stdout=subprocess.PIPE if capture else None,
                                  stderr=subprocess.PIPE if capture else None, input=input, cwd=cwd)
            done = Finished(cmd, proc.returncode, proc.stdout, proc.stderr)
        else:  # (the common case, a compile whose diagnostics go to the user: no need for subprocess, whose
            # import costs more than a small compile's own start-up)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.posix_spawn(cmd[0] if os.path.dirname(cmd[0]) else (which(cmd[0]) or cmd[0]), cmd, os.environ)
            try:
                status = os.waitpid(pid, 0)[1]
            except BaseException:  # (interrupted: as subprocess.run does, the tool does not outlive enzcc)
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise
            done = Finished(cmd, os.waitstatus_to_exitcode(status))
    except FileNotFoundError as exc:
        raise ToolMissingError(f"cannot run '{cmd[0]}': {exc.strerror}") from None
    if check and done.returncode != 0:
        if capture:
            if done.stdout:
                sys.stderr.buffer.write(done.stdout)
            if done.stderr:
                sys.stderr.buffer.write(done.stderr)
            sys.stderr.flush()
        raise SubprocessFailed(tool or os.path.basename(cmd[0]), done.returncode)
    return done


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)
