"""Exceptions raised by the IR model."""

from __future__ import annotations


class IRParseError(Exception):
    """Raised when LLVM textual IR cannot be parsed.

    The message is always a single line of the form
    ``line N: <what went wrong>: <offending line>``.
    """

    def __init__(self, message: str, line: int | None = None, text: str | None = None):
        self.message = message
        """What went wrong."""
        self.line = line
        """1-based line number in the module text (None if unknown)."""
        self.text = text
        """The offending source line, stripped (None if unknown)."""
        super().__init__(self._format())

    def _format(self) -> str:
        parts = []
        if self.line is not None:
            parts.append(f"line {self.line}")
        parts.append(self.message)
        if self.text is not None:
            snippet = self.text.strip()
            if len(snippet) > 200:
                snippet = snippet[:197] + "..."
            parts.append(snippet)
        return ": ".join(parts).replace("\n", " ")


class IRError(Exception):
    """Raised for invalid manipulations of the IR (e.g. erasing a used value)."""
