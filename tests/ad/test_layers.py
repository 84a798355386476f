"""The AD engine's layers, read from its imports (every import statement counts, those inside functions too):

- the core (the modules of ``enzcc/ad/`` but the package's own ``__init__``) imports no call family
  (``enzcc/ad/calls/``): families register their rules with ``enzcc.ad.registry``;
- no modules of ``enzcc.ad`` import each other in a circle (``from enzcc.ad import module`` imports the package
  ``enzcc.ad`` too: its ``__init__`` runs first);
- ``enzcc.ad.registry`` imports nothing of the engine.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AD = ROOT / "enzcc" / "ad"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph(root: Path = AD) -> dict[str, set[str]]:
    """Module -> the modules of the same package tree it imports (a package's ``__init__`` is the package)."""
    paths = {_module_name(p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for mod, path in paths.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_package else mod.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in paths else src for a in node.names]
                if src in paths and paths[src].name == "__init__.py":
                    targets.append(src)  # (``from package import module`` runs the package's __init__ too)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[mod] |= {t for t in targets if t in paths and t != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _is_family(mod: str) -> bool:
    return mod == "enzcc.ad.calls" or mod.startswith("enzcc.ad.calls.")


def test_core_imports_no_family():
    graph = import_graph()
    core = [m for m in graph if not _is_family(m) and m != "enzcc.ad"]
    wrong = {m: sorted(t for t in graph[m] if _is_family(t)) for m in core}
    assert not {m: t for m, t in wrong.items() if t}, "core modules import call families"
    assert "enzcc.ad.calls" in graph["enzcc.ad"]  # (the package's entry registers the families)


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_registry_imports_nothing_of_the_engine():
    assert import_graph()["enzcc.ad.registry"] == set()


def test_every_family_module_registers_and_is_imported():
    from enzcc.ad import calls, registry

    graph = import_graph()
    modules = {m for m in graph if m.startswith("enzcc.ad.calls.")}
    assert graph["enzcc.ad.calls"] == modules  # a family module nobody imports would register nothing
    assert {f"enzcc.ad.calls.{f}" for f in calls.FAMILIES} == modules
    assert {"libm", "memory", "blas", "complex", "custom", "openmp", "contexts"} <= set(registry.families())


# -- the checks themselves fail where they should ---------------------------------------------------------

def _write(tmp: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp


def test_a_cycle_through_a_lazy_import_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    root = _write(tmp_path / "enzcc" / "ad", {
        "__init__.py": "",
        "a.py": "from enzcc.ad.b import g\n",
        "b.py": "def g():\n    from enzcc.ad import a\n    return a\n",
        "c.py": "from . import a\n"})
    graph = import_graph(root)
    assert graph["enzcc.ad.c"] == {"enzcc.ad", "enzcc.ad.a"}
    assert cycles(graph) == [["enzcc.ad.a", "enzcc.ad.b"]]


@pytest.mark.parametrize("text", ["from enzcc.ad.calls.blas import routine\n",
                                  "def f():\n    from enzcc.ad.calls import blas\n"])
def test_a_core_module_importing_a_family_is_found(tmp_path, monkeypatch, text):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    root = _write(tmp_path / "enzcc" / "ad", {"__init__.py": "", "core.py": text, "calls/__init__.py": "",
                                               "calls/blas.py": ""})
    graph = import_graph(root)
    assert any(_is_family(t) for t in graph["enzcc.ad.core"])
