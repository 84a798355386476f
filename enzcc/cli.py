"""Command-line entry points: ``enzcc`` / ``enzcc++`` (clang-compatible) and ``enzcc build``."""

from __future__ import annotations

import os
import sys

from enzcc.errors import EnzccError, SubprocessFailed


def _report(exc: EnzccError) -> int:
    if isinstance(exc, SubprocessFailed) and exc.quiet:
        return exc.exit_code  # the tool already printed its diagnostics
    if exc.location:
        print(exc.format(), file=sys.stderr)
    else:
        print(f"enzcc: {exc.format()}", file=sys.stderr)
    return exc.exit_code


def guarded(fn, *args) -> int:
    """Run ``fn``; turn every failure into one line on stderr and an exit code (never a traceback)."""
    try:
        return fn(*args)
    except EnzccError as exc:
        return _report(exc)
    except KeyboardInterrupt:
        print("enzcc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 141
    except Exception as exc:  # a bug in enzcc: still one line, with a way to see more
        if os.environ.get("ENZCC_DEBUG"):
            import traceback

            traceback.print_exc()
        first = str(exc).strip().splitlines()
        detail = f": {first[0]}" if first else ""
        print(f"enzcc: internal error: {type(exc).__name__}{detail} (set ENZCC_DEBUG=1 for details)",
              file=sys.stderr)
        return 70


def _drive(argv: list[str], cxx: bool) -> int:
    if argv and argv[0] == "build":
        from enzcc.buildconfig import build_main

        return build_main(argv[1:])
    from enzcc.fastpath import try_fast  # (calls that differentiate nothing, without the driver's imports)

    code = try_fast(argv, cxx)
    if code is not None:
        return code
    from enzcc.driver import Driver
    from enzcc.flags import parse_args

    return Driver(parse_args(argv), cxx=cxx).run()


def _rustc_call(argv: list[str]) -> bool:
    """cargo's ``RUSTC_WRAPPER=enzcc`` (``enzcc /path/to/rustc ARGS``) or ``RUSTC=enzcc`` (``enzcc -vV``,
    ``enzcc - --crate-name ___ --print ...``, ``enzcc --crate-name foo ...``): see :mod:`enzcc.rustc_wrapper`."""
    name = os.path.basename(argv[0])
    return name in ("rustc", "clippy-driver") or (name.startswith("rustc-") and name[6:].replace(".", "").isdigit()) \
        or argv[0] == "-vV" or "--crate-name" in argv


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and _rustc_call(argv):
        from enzcc.rustc_wrapper import main as rustc_main

        return guarded(rustc_main, argv)
    cxx = os.path.basename(sys.argv[0]).endswith("++")
    return guarded(_drive, argv, cxx)


def main_cxx(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return guarded(_drive, argv, True)
