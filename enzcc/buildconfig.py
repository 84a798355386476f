"""``enzcc build``: multi-language builds described by ``enzcc.toml`` (see ``enzcc.toml.example``)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

try:
    import tomllib as _toml  # Python 3.11+
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as _toml

import click

from enzcc.errors import EnzccError

KINDS = ("executable", "shared", "object", "ptx")

#: every key accepted in [build] and in each [[output]] (output-only keys below)
LIST_KEYS = ("cflags", "cxxflags", "cudaflags", "fflags", "rustflags", "ldflags", "include-dirs", "defines", "libs", "lib-dirs")
SCALAR_KEYS = {"opt-level": int, "ad-mode": str, "target": str, "cpu": str, "gpu-arch": str}
BUILD_KEYS = set(LIST_KEYS) | set(SCALAR_KEYS) | {"build-dir"}
OUTPUT_KEYS = set(LIST_KEYS) | set(SCALAR_KEYS) | {"name", "kind", "sources"}


@dataclass
class OutputSpec:
    """One ``[[output]]`` table, with [build] defaults merged in."""

    name: str
    kind: str
    sources: list[str]
    settings: dict = field(default_factory=dict)


@dataclass
class BuildConfig:
    path: str
    """The enzcc.toml file."""
    root: str
    """Its directory: relative paths in the file are relative to it."""
    build_dir: str
    outputs: list[OutputSpec]


def _check_type(where: str, key: str, value) -> None:
    if key in LIST_KEYS or key == "sources":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise EnzccError(f"{where}: '{key}' must be a list of strings")
    elif key in SCALAR_KEYS:
        if not isinstance(value, SCALAR_KEYS[key]) or isinstance(value, bool):
            raise EnzccError(f"{where}: '{key}' must be a {SCALAR_KEYS[key].__name__}")
    elif not isinstance(value, str):
        raise EnzccError(f"{where}: '{key}' must be a string")


def load_config(path: str) -> BuildConfig:
    try:
        with open(path, "rb") as fh:
            data = _toml.load(fh)
    except FileNotFoundError:
        raise EnzccError(f"{path} not found (see enzcc.toml.example)") from None
    except _toml.TOMLDecodeError as exc:
        raise EnzccError(f"invalid TOML: {exc}", path) from None
    root = os.path.dirname(os.path.abspath(path))
    unknown = set(data) - {"build", "output"}
    if unknown:
        raise EnzccError(f"unknown table(s) {', '.join(sorted(unknown))} (expected [build] and [[output]])", path)
    build = data.get("build", {})
    if not isinstance(build, dict):
        raise EnzccError("[build] must be a table", path)
    for key, value in build.items():
        if key not in BUILD_KEYS:
            raise EnzccError(f"[build]: unknown key '{key}'", path)
        _check_type(f"{path}: [build]", key, value)
    outputs_raw = data.get("output", [])
    if not isinstance(outputs_raw, list) or not outputs_raw:
        raise EnzccError("no [[output]] tables: nothing to build", path)
    outputs = []
    for n, raw in enumerate(outputs_raw, 1):
        where = f"{path}: [[output]] #{n}"
        for key, value in raw.items():
            if key not in OUTPUT_KEYS:
                raise EnzccError(f"{where}: unknown key '{key}'")
            _check_type(where, key, value)
        for key in ("name", "sources"):
            if key not in raw:
                raise EnzccError(f"{where}: missing '{key}'")
        kind = raw.get("kind", "executable")
        if kind not in KINDS:
            raise EnzccError(f"{where}: kind must be one of {', '.join(KINDS)}, not '{kind}'")
        if not raw["sources"]:
            raise EnzccError(f"{where}: 'sources' is empty")
        settings = {k: v for k, v in build.items() if k != "build-dir"}
        for key, value in raw.items():
            if key in LIST_KEYS:
                settings[key] = list(build.get(key, [])) + list(value)
            elif key in SCALAR_KEYS:
                settings[key] = value
        outputs.append(OutputSpec(raw["name"], kind, list(raw["sources"]), settings))
    return BuildConfig(path, root, os.path.join(root, build.get("build-dir", "build")), outputs)


def command_line(cfg: BuildConfig, out: OutputSpec) -> tuple[list[str], dict[str, list[str]]]:
    """The enzcc command line that builds ``out``, and the per-language flags."""
    s = out.settings
    rel = lambda p: p if os.path.isabs(p) else os.path.join(cfg.root, p)  # noqa: E731
    args: list[str] = [f"-O{s.get('opt-level', 2)}", "--ad-mode", s.get("ad-mode", "after-opt")]
    target = s.get("target") or ("nvptx64-nvidia-cuda" if out.kind == "ptx" else "")
    if out.kind == "ptx" and not target.startswith("nvptx"):
        raise EnzccError(f"output '{out.name}': kind 'ptx' needs an nvptx target, not '{target}'")
    if target:
        args.append(f"--target={target}")
    if s.get("cpu"):
        args.append(f"--cuda-gpu-arch={s['cpu']}" if target.startswith("nvptx") else f"-march={s['cpu']}")
    if s.get("gpu-arch"):  # the device side of .cu sources in a host build
        args.append(f"--cuda-gpu-arch={s['gpu-arch']}")
    args += [f"-I{rel(d)}" for d in s.get("include-dirs", [])]
    args += [f"-D{d}" for d in s.get("defines", [])]
    for src in out.sources:
        path = rel(src)
        if not os.path.exists(path):
            raise EnzccError(f"output '{out.name}': source {src} not found", cfg.path)
        args.append(path)
    if out.kind == "shared":
        args += ["-shared", "-fPIC"]
    if out.kind == "object":
        args.append("--whole-program-object")
    args += [f"-L{rel(d)}" for d in s.get("lib-dirs", [])]
    args += list(s.get("ldflags", []))
    if out.kind != "ptx":  # a GPU module has no native libraries to link
        args += [f"-l{lib}" for lib in s.get("libs", [])]
    args += ["-o", rel(out.name)]
    lang_args = {"c": s.get("cflags", []), "c++": s.get("cxxflags", []), "cuda": s.get("cudaflags", []),
                 "fortran": s.get("fflags", []),
                 "rust": s.get("rustflags", [])}
    return args, lang_args


def run_build(config_path: str, only: tuple[str, ...] = (), ad_mode: str | None = None, time_report: bool = False,
              verbose: bool = False) -> int:
    from enzcc.driver import Driver
    from enzcc.flags import parse_args

    cfg = load_config(config_path)
    names = {o.name for o in cfg.outputs}
    for name in only:
        if name not in names:
            raise EnzccError(f"no output named '{name}' in {config_path}")
    for out in cfg.outputs:
        if only and out.name not in only:
            continue
        if ad_mode:
            out.settings["ad-mode"] = ad_mode
        args, lang_args = command_line(cfg, out)
        if time_report:
            args.append("--time-report")
        if verbose:
            print("enzcc " + " ".join(args), file=sys.stderr)
        os.makedirs(os.path.dirname(os.path.join(cfg.root, out.name)) or cfg.root, exist_ok=True)
        rc = Driver(parse_args(args), extra_lang_args=lang_args).run()
        if rc:
            return rc
        print(f"enzcc: built {out.kind} {out.name}", file=sys.stderr)
    return 0


@click.command(name="enzcc build", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-f", "--file", "config", default="enzcc.toml", show_default=True, help="The build description.")
@click.option("--ad-mode", type=click.Choice(["after-opt", "before-opt"]), default=None,
              help="Override where AD runs relative to optimization.")
@click.option("--time-report", is_flag=True, help="Print the time spent in each compiler stage.")
@click.option("-v", "--verbose", is_flag=True, help="Print the enzcc command line of each output.")
@click.argument("outputs", nargs=-1)
def _build_command(config, ad_mode, time_report, verbose, outputs):
    """Build the outputs described by enzcc.toml (all of them, or the ones named)."""
    raise SystemExit(run_build(config, outputs, ad_mode, time_report, verbose))


def build_main(argv: list[str]) -> int:
    try:
        _build_command.main(args=argv, prog_name="enzcc build", standalone_mode=False)
    except SystemExit as exc:
        return int(exc.code or 0)
    except click.exceptions.Abort:
        return 130
    except click.ClickException as exc:
        print(f"enzcc build: error: {exc.format_message()}", file=sys.stderr)
        return exc.exit_code
    return 0
