"""Progress for long work, readable on a terminal and in a job log alike.

On a terminal a rich bar shows the work is alive. A Slurm or local job's stdout is a file (submitit's
`<job id>_0_log.out`), where a bar would be either nothing or a wall of carriage returns, so there the
same call writes a plain line at each quarter of the work and at most every `every_s` seconds in
between: `render_cache budget 003: 50% (12/24) 31 s`. One console factory as well, so every table this
project prints (launch, status) is as wide in a pipe as it needs to be instead of rich's 80 columns.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

T = TypeVar("T")
Advance = Callable[..., None]
PIPE_WIDTH = 200  # columns in a pipe or log: wide enough that no job name or resource cell is cut
EVERY_S = 10.0  # at most this long between two progress lines in a log while the work advances


def make_console(stderr: bool = False) -> Console:
    """A console for tables: the terminal's width on a terminal, PIPE_WIDTH columns elsewhere (rich
    assumes 80 in a pipe and would cut `container_check` to `container_c…`)."""
    console = Console(highlight=False, soft_wrap=True, stderr=stderr)
    if not console.is_terminal:
        width = max(console.width, PIPE_WIDTH)
        console = Console(highlight=False, soft_wrap=True, stderr=stderr, width=width)
    return console


class LineProgress:
    """The log form of a bar: a line at every 25 % step, and every `every_s` seconds in between."""

    def __init__(self, label: str, total: int | None, every_s: float, stream: TextIO) -> None:
        self.label, self.total, self.every_s, self.stream = label, total, every_s, stream
        self.done, self.quarter = 0, 0
        self.started = self.last = time.monotonic()

    def advance(self, steps: int = 1) -> None:
        self.done += steps
        now = time.monotonic()
        quarter = 4 * self.done // self.total if self.total else 0
        if quarter > self.quarter or now - self.last >= self.every_s:
            self.quarter = max(self.quarter, quarter)
            self._line(now)

    def start(self) -> None:
        size = f" ({self.total} steps)" if self.total else ""
        self.stream.write(f"{self.label}: started{size}\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.quarter < 4 or not self.total:  # the last quarter's line already said 100 %
            self._line(time.monotonic(), final=True)

    def _line(self, now: float, final: bool = False) -> None:
        self.last = now
        elapsed = f"{now - self.started:.0f} s"
        if self.total:
            pct = 100 * self.done // self.total
            text = f"{self.label}: {pct}% ({self.done}/{self.total}) {elapsed}"
        elif self.done:
            text = f"{self.label}: {self.done} {'done' if final else 'so far'} {elapsed}"
        else:
            text = f"{self.label}: {'done after' if final else 'running for'} {elapsed}"
        self.stream.write(text + "\n")
        self.stream.flush()


_SHARED: list[Progress] = []  # the bar already on the terminal: nested work adds a row to it


@contextmanager
def progress(
    label: str,
    total: int | None,
    *,
    every_s: float = EVERY_S,
    stream: TextIO | None = None,
    terminal: bool | None = None,
) -> Iterator[Advance]:
    """`with progress("stats pass", n) as advance: ... advance()` - a transient bar on a terminal, lines
    in a log. `terminal` forces one form (tests); `stream` is where the lines go (default stdout).
    Nested calls on a terminal share one display (rich allows one live display per console)."""
    out = stream or sys.stdout
    on_terminal = out.isatty() if terminal is None else terminal
    if not on_terminal:
        lines = LineProgress(label, total, every_s, out)
        lines.start()
        yield lines.advance
        lines.finish()
        return
    if _SHARED and stream is None:
        outer = _SHARED[-1]
        task = outer.add_task(label, total=total)
        try:
            yield lambda steps=1: outer.advance(task, steps)
        finally:
            outer.remove_task(task)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    console = Console(file=out, force_terminal=True) if stream is not None else None
    with Progress(*columns, transient=True, console=console) as bar:
        task = bar.add_task(label, total=total)
        _SHARED.append(bar)
        try:
            yield lambda steps=1: bar.advance(task, steps)
        finally:
            _SHARED.remove(bar)


def track(items: Iterable[T], label: str, total: int | None = None, **kwargs: object) -> Iterator[T]:
    """Iterate `items` under `progress` (total from len() when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress(label, total, **kwargs) as advance:  # type: ignore[arg-type]
        for item in items:
            yield item
            advance()
