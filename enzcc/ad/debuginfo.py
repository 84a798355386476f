"""Source locations from LLVM debug info (``!dbg`` attachments), for error messages."""

from __future__ import annotations

import re

from enzcc.errors import SourceLocation

_REF = r"!(\d+)"


def _field(text: str, name: str) -> str | None:
    m = re.search(rf"\b{name}:\s*(\"(?:[^\"\\]|\\.)*\"|[^,)]+)", text)
    if not m:
        return None
    value = m.group(1).strip()
    return value[1:-1] if value.startswith('"') else value


def _md(module, ref: str | None) -> str | None:
    if not ref:
        return None
    m = re.fullmatch(_REF, ref.strip())
    if not m:
        return None
    return module.metadata.get(int(m.group(1)))


def _file_of(module, node: str | None, depth: int = 0) -> str | None:
    """File name of a DISubprogram / DILexicalBlock / DIFile chain."""
    if node is None or depth > 32:
        return None
    if "DIFile(" in node:
        return _field(node, "filename")
    f = _md(module, _field(node, "file"))
    if f and "DIFile(" in f:
        return _field(f, "filename")
    return _file_of(module, _md(module, _field(node, "scope")), depth + 1)


def instruction_location(inst) -> SourceLocation | None:
    """``file:line:col`` of an instruction with a ``!dbg`` attachment."""
    module = inst.module
    if module is None:
        return None
    loc = _md(module, inst.get_metadata("dbg"))
    if not loc or "DILocation(" not in loc:
        return None
    line = _field(loc, "line")
    col = _field(loc, "column")
    filename = _file_of(module, _md(module, _field(loc, "scope"))) or (module.source_filename or "")
    if not filename:
        return None
    return SourceLocation(filename, int(line) if line and line.isdigit() else None,
                          int(col) if col and col.isdigit() else None)


def function_location(fn) -> SourceLocation | None:
    """Where a function is defined (its DISubprogram), if known."""
    module = fn.module
    if module is None:
        return None
    for kind, ref in fn.metadata:
        if kind == "dbg":
            sp = _md(module, ref)
            if sp:
                line = _field(sp, "line")
                filename = _file_of(module, sp) or module.source_filename
                if filename:
                    return SourceLocation(filename, int(line) if line and line.isdigit() else None)
    return None


#: metadata kind naming the function whose body an instruction was inlined from by enzcc (see
#: :func:`enzcc.ad.inline.inline_call`), for messages when there is no debug info
INLINED_FROM = "enzcc.inlined_from"


def source_function(inst) -> str | None:
    """The function an instruction comes from, when it was inlined into another: the subprogram of its debug
    location (LLVM's inlining or enzcc's: ``-g``), else the callee enzcc inlined it from; None when not known."""
    module = inst.module
    if module is None:
        return None
    node = _md(module, inst.get_metadata("dbg"))
    if node and "DILocation(" in node:
        scope = _md(module, _field(node, "scope"))
        for _ in range(64):  # (lexical blocks up to their subprogram)
            if scope is None:
                break
            if "DISubprogram(" in scope:
                return _field(scope, "linkageName") or _field(scope, "name")
            scope = _md(module, _field(scope, "scope"))
    tag = _md(module, inst.get_metadata(INLINED_FROM))
    if tag:
        m = re.search(r'!"((?:[^"\\]|\\.)*)"', tag)
        if m:
            return m.group(1)
    return None


def locate(inst) -> SourceLocation | None:
    """Best location for an instruction: its own, or its function's."""
    loc = instruction_location(inst)
    if loc is None and inst.function is not None:
        loc = function_location(inst.function)
    return loc


def parameter_name(fn, index: int) -> str | None:
    """The source name of parameter ``index`` (0-based) of ``fn``: its IR name when the frontend kept it, else
    the debug info's (``DILocalVariable(name: "p", arg: 1, scope: <the function>)``, with ``-g``); None when
    neither says (clang drops value names, and without ``-g`` there is no debug info)."""
    arg = fn.args[index] if 0 <= index < len(fn.args) else None
    if arg is not None and arg.name and not arg.name.isdigit():
        return arg.name
    module = fn.module
    if module is None:
        return None
    scopes = {ref.strip() for kind, ref in fn.metadata if kind == "dbg"}
    original = module.functions.get(getattr(fn, "primal_name", fn.name))
    if original is not None:
        scopes |= {ref.strip() for kind, ref in original.metadata if kind == "dbg"}
    if not scopes:
        return None
    for node in module.metadata.values():
        if "DILocalVariable(" in node and _field(node, "arg") == str(index + 1) and \
                (_field(node, "scope") or "").strip() in scopes:
            return _field(node, "name")
    return None
