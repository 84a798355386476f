"""Per-stage compile-time accounting for ``--time-report``."""

from __future__ import annotations

import sys
import time

from enzcc.records import factory, record


class _Stage:
    """The context manager :meth:`StageTimes.stage` returns (a class: ``contextlib`` costs every enzcc run)."""

    __slots__ = ("times", "name", "what", "start")

    def __init__(self, times: "StageTimes", name: str, what: str):
        self.times, self.name, self.what = times, name, what

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc) -> bool:
        self.times.entries.append((self.name, self.what, time.perf_counter() - self.start))
        return False


@record
class StageTimes:
    """Wall-clock seconds spent in each named stage (frontend, link, optimize, ad, codegen, native-link)."""

    entries: list[tuple[str, str, float]] = factory(list)
    """(stage, what, seconds) in the order they ran."""

    def stage(self, name: str, what: str = "") -> "_Stage":
        """``with TIMES.stage(name, what): ...`` records the block's time."""
        return _Stage(self, name, what)

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, _, secs in self.entries:
            out[name] = out.get(name, 0.0) + secs
        return out

    def report(self, file=None) -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="enzcc time report")
        table.add_column("stage")
        table.add_column("what")
        table.add_column("seconds", justify="right")
        for name, what, secs in self.entries:
            table.add_row(name, what, f"{secs:.4f}")
        table.add_row("total", "", f"{sum(s for _, _, s in self.entries):.4f}", style="bold")
        Console(file=file or sys.stderr, width=100).print(table)


#: the process-wide accounting
TIMES = StageTimes()
