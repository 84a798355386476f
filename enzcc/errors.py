"""Error types. Every user-facing failure is an :class:`EnzccError` and is printed as one line."""

from __future__ import annotations

from enzcc.records import record


@record
class SourceLocation:
    """Where in user code an error points."""

    file: str
    """Source file name as the user wrote it (or as debug info records it)."""
    line: int | None = None
    """1-based line number, when known."""
    column: int | None = None
    """1-based column, when known."""

    def __str__(self) -> str:
        out = self.file
        if self.line:
            out += f":{self.line}"
            if self.column:
                out += f":{self.column}"
        return out


class EnzccError(Exception):
    """A failure that is reported to the user as ``enzcc: error: ...`` with a non-zero exit code."""

    exit_code = 1

    def __init__(self, message: str, location: SourceLocation | str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = " ".join(str(message).split()) if "\n" in str(message) else str(message)
        self.location = location
        if exit_code is not None:
            self.exit_code = exit_code

    def format(self) -> str:
        loc = f"{self.location}: " if self.location else ""
        return f"{loc}error: {self.message}"


class ToolMissingError(EnzccError):
    """An external program (clang-22, flang-22, ...) is not installed."""


class SubprocessFailed(EnzccError):
    """A frontend or linker exited non-zero; its own diagnostics were already shown.

    The exit code of the tool is passed through to the caller of enzcc.
    """

    def __init__(self, tool: str, exit_code: int, message: str | None = None):
        super().__init__(message or f"{tool} failed with exit code {exit_code}", exit_code=exit_code or 1)
        self.tool = tool
        self.quiet = message is None
