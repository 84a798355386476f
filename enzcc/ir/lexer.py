"""Tokenizer for LLVM textual IR.

Produces :class:`Token` objects carrying their kind, spelling, source span and
line number.  Newlines and comments are dropped (line numbers let the parser
tell where a line ends when it needs to).
"""

from __future__ import annotations

import re
from typing import Iterator, NamedTuple

from .errors import IRParseError

__all__ = ["Token", "tokenize", "iter_tokens", "unescape_name", "unescape_bytes"]

_NAME = r'(?:[-a-zA-Z$._][-a-zA-Z$._0-9]*|\d+|"[^"]*")'

_TOKEN_RE = re.compile(
    r"""
    [ \t\r\f]*(?:;[^\n]*)?
    (?:
      (?P<nl>\n)
    | (?P<dbgrec>\#dbg_[a-zA-Z_]+)
    | (?P<attrgrp>\#\d+)
    | (?P<label>(?:[-a-zA-Z$._][-a-zA-Z$._0-9]*|\d+|"[^"]*"):)
    | (?P<local>%""" + _NAME + r""")
    | (?P<global>@""" + _NAME + r""")
    | (?P<comdat>\$""" + _NAME + r""")
    | (?P<meta>![-a-zA-Z$._0-9\\]*)
    | (?P<cstr>c"[^"]*")
    | (?P<str>"[^"]*")
    | (?P<hexfp>0x[KLMHR]?[0-9a-fA-F]+)
    | (?P<hexint>[us]0x[0-9a-fA-F]+)
    | (?P<num>[-+]?\d+(?:\.\d*(?:[eE][-+]?\d+)?)?(?![a-zA-Z_$.]))
    | (?P<punct>\.\.\.|[=,*()\[\]{}<>|])
    | (?P<ident>[a-zA-Z_$.][-a-zA-Z$._0-9]*)
    | (?P<end>\Z)
    )
    """,
    re.VERBOSE,
)


class Token(NamedTuple):
    """One lexical token."""

    kind: str
    """``local``, ``global``, ``meta``, ``attrgrp``, ``comdat``, ``dbgrec``,
    ``label``, ``cstr``, ``str``, ``hexfp``, ``hexint``, ``num``, ``ident``,
    ``punct`` or ``eof``."""
    text: str
    """Exact spelling."""
    start: int
    """Start offset in the tokenized text."""
    end: int
    """End offset in the tokenized text."""
    line: int
    """1-based line number (including the caller's line offset)."""


def iter_tokens(text: str, line_offset: int = 0, pos: int = 0) -> Iterator[Token]:
    """Yield tokens of ``text`` lazily, ending with an ``eof`` token."""
    line = line_offset + 1
    match = _TOKEN_RE.match
    while True:
        m = match(text, pos)
        if m is None:
            _bad_char(text, pos, line)
        kind = m.lastgroup
        if kind == "nl":
            line += 1
        elif kind == "end":
            yield Token("eof", "", len(text), len(text), line)
            return
        else:
            yield Token(kind, m.group(kind), m.start(kind), m.end(), line)
        pos = m.end()


def tokenize(text: str, line_offset: int = 0) -> list[Token]:
    """Tokenize ``text`` completely (the list ends with an ``eof`` token)."""
    line = line_offset + 1
    toks: list[Token] = []
    append = toks.append
    pos = 0
    for m in _TOKEN_RE.finditer(text):
        if m.start() != pos:
            _bad_char(text, pos, line)
        kind = m.lastgroup
        pos = m.end()
        if kind == "nl":
            line += 1
        elif kind == "end":
            append(Token("eof", "", pos, pos, line))
            return toks
        else:
            append(Token(kind, m.group(kind), m.start(kind), pos, line))
    _bad_char(text, pos, line)
    raise AssertionError("unreachable")  # pragma: no cover


def _bad_char(text: str, pos: int, line: int) -> None:
    m = re.compile(r"[ \t\r\f]*").match(text, pos)
    pos = m.end()
    end = text.find("\n", pos)
    line_text = text[text.rfind("\n", 0, pos) + 1: end if end >= 0 else len(text)]
    raise IRParseError(f"unexpected character {text[pos]!r}", line, line_text)


_ESC_RE = re.compile(r"\\([0-9A-Fa-f]{2}|\\)")


def unescape_bytes(body: str) -> bytes:
    """Decode the inside of an LLVM string literal (``\\XX`` escapes) into bytes."""
    out = bytearray()
    pos = 0
    for m in _ESC_RE.finditer(body):
        out += body[pos:m.start()].encode("utf-8")
        esc = m.group(1)
        out.append(0x5C if esc == "\\" else int(esc, 16))
        pos = m.end()
    out += body[pos:].encode("utf-8")
    return bytes(out)


def unescape_name(spelling: str) -> str:
    """Turn the part after a sigil (``foo`` or ``"a b"``) into the plain name."""
    if spelling.startswith('"'):
        return unescape_bytes(spelling[1:-1]).decode("utf-8", errors="surrogateescape")
    return spelling
