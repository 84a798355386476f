"""Launchers for ``enzcc`` and ``enzcc++`` that start in about a third of the time of pip's entry scripts.

A drop-in build (``CC=enzcc make``) starts enzcc once per translation unit, and a plain compile spends most
of enzcc's own time starting Python: above all Python's ``site``, which reads every ``.pth`` file of the
installation (an editable install's import hook alone imports ``pathlib``). enzcc's compile path needs only
the standard library and enzcc itself, so the launcher starts Python with ``-S`` (no ``site``) and puts the
directory that holds the ``enzcc`` package first on ``sys.path``. The first import that nothing can find then
runs ``site.main()``, which adds the site-packages directories and their ``.pth`` hooks as at a normal start,
and the import is tried again: a link that differentiates (llvmlite, PyYAML) works as before.

``python3 -m enzcc.launcher [DIR]`` (``make setup`` runs it) writes the two launchers into ``DIR``, by default
the scripts directory where pip installed enzcc's entry scripts, which they replace; ``--print`` shows one
instead. A ``pip install`` of enzcc writes pip's scripts again (slower to start, otherwise the same).
"""

from __future__ import annotations

import os
import sys

TEMPLATE = '''#!{python} -S
# enzcc's launcher (written by `python3 -m enzcc.launcher`): Python starts without `site`; the first import
# that nothing finds runs site.main() and is tried again (see enzcc/launcher.py).
import sys
sys.path.insert(0, {root!r})


class _SiteOnDemand:
    @staticmethod
    def find_spec(name, path=None, target=None):
        sys.meta_path.remove(_SiteOnDemand)
        import site
        site.main()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                return spec
        return None


sys.meta_path.append(_SiteOnDemand)
from enzcc.cli import {entry}
sys.exit({entry}())
'''

ENTRIES = {"enzcc": "main", "enzcc++": "main_cxx"}
"""Launcher name -> the function of :mod:`enzcc.cli` it runs (as ``[project.scripts]`` in pyproject.toml)."""


def package_root() -> str:
    """The directory that holds the ``enzcc`` package (the checkout for an editable install)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def script(name: str, python: str | None = None) -> str:
    return TEMPLATE.format(python=python or sys.executable, root=package_root(), entry=ENTRIES[name])


def install(directory: str, python: str | None = None) -> list[str]:
    """Write the launchers into ``directory`` (atomically, executable). Returns their paths."""
    written = []
    for name in ENTRIES:
        path = os.path.join(directory, name)
        tmp = f"{path}.enzcc-{os.getpid()}"
        with open(tmp, "w") as fh:
            fh.write(script(name, python))
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        written.append(path)
    return written


def installed_scripts() -> str | None:
    """The scripts directory of this Python (or of its user scheme) where pip wrote ``enzcc`` (or a launcher
    was written before), or None."""
    import sysconfig

    for scheme in (sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user")):
        directory = sysconfig.get_path("scripts", scheme)
        try:
            with open(os.path.join(directory, "enzcc")) as fh:
                text = fh.read(4096)
        except (OSError, UnicodeDecodeError):
            continue
        if "enzcc.cli import" in text:
            return directory
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--print"]:
        print(script("enzcc"), end="")
        return 0
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python3 -m enzcc.launcher [DIR | --print]", file=sys.stderr)
        return 2
    directory = argv[0] if argv else installed_scripts()
    if directory is None:
        print("enzcc.launcher: no enzcc entry script of this Python's installation found; nothing written",
              file=sys.stderr)
        return 1
    if not os.path.isdir(directory):
        print(f"enzcc.launcher: {directory} is not a directory", file=sys.stderr)
        return 1
    for path in install(directory):
        print(f"enzcc.launcher: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
