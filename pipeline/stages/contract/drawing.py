"""The contract's plots, drawn by a process of their own while the stage goes on.

Why: in a launch that checks a dataset alone, importing matplotlib (~0.8 s) and drawing the profile,
health and range plots (~0.7 s each, most of it laying out tick labels) took half the launch, one after
the other on one core. The stage starts a drawer when it starts (`Plots.start`): a `python -m` process of
this module, which imports matplotlib on another core while the stage reads the data, then draws each
plot as the stage sends it (one JSON line: kind, path and the plot's data) and answers one line per plot.
`Plots.finish` waits for it. A plot the drawer did not draw (it could not start, died, or failed on that
plot) is drawn here, in this process, by the same function: the files are the same whoever drew them.

Drawn here from the start, where a second process gains nothing: matplotlib is already imported (a
second stage run in one process, a test session) or this process may use one CPU only.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.record.records import Check

if TYPE_CHECKING:
    import numpy as np

WAIT_S = 600  # the drawer's whole budget once the stage has sent its last plot
RANGE_KEYS = ("lo", "hi", "mean")
_STARTED: list[subprocess.Popen[str]] = []  # `prestart`'s drawer, until a stage takes it


class Plots:
    """Where the stage's plots are drawn: `draw` now or by the drawer, `finish` before the result."""

    def __init__(self, proc: subprocess.Popen[str] | None = None):
        self.proc = proc
        self.sent: dict[str, tuple[str, dict[str, Any]]] = {}  # path -> (kind, args), for a redraw here

    @classmethod
    def start(cls) -> Plots:
        """With the drawer `prestart` started, else a new one, or none where it gains nothing."""
        proc = _STARTED.pop() if _STARTED else _drawer()
        return cls(proc if proc is not None and proc.poll() is None else None)

    def draw(self, kind: str, path: Path, **args: Any) -> Path:
        """The plot's path; it exists once `finish` returned."""
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(json.dumps({"kind": kind, "path": str(path), "args": args}) + "\n")
                self.proc.stdin.flush()
                self.sent[str(path)] = (kind, args)
                return path
            except (OSError, ValueError):  # the drawer is gone: this one and the rest are drawn here
                self.close()
        return _draw(kind, path, args)

    def finish(self) -> None:
        """Wait for the drawer; draw here whatever it did not."""
        drawn: set[str] = set()
        if self.proc is not None:
            try:
                out, _ = self.proc.communicate(timeout=WAIT_S)
                drawn = {a["path"] for a in map(json.loads, out.splitlines()) if a.get("ok")}
            except (subprocess.TimeoutExpired, OSError, ValueError):
                self.close()
        for path, (kind, args) in self.sent.items():
            if path not in drawn or not Path(path).is_file():
                _draw(kind, Path(path), args)
        self.sent.clear()

    def close(self) -> None:
        """Stop the drawer (a stage that failed, or a drawer that stopped answering)."""
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def __enter__(self) -> Plots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prestart() -> None:
    """Start this process's drawer now, for the contract stage this process will run (a dataset alone,
    run in the launcher's process): matplotlib is imported while the launch plans, not while it waits."""
    if not _STARTED and (proc := _drawer()) is not None:
        _STARTED.append(proc)


def _drawer() -> subprocess.Popen[str] | None:
    """A drawer, where one gains time (matplotlib not imported here yet, a second CPU to draw on)."""
    if "matplotlib" in sys.modules or len(os.sched_getaffinity(0)) < 2:
        return None
    return spawn()


def spawn() -> subprocess.Popen[str] | None:
    """A drawer process (None where it cannot start)."""
    root = str(Path(__file__).resolve().parents[3])  # the folder `pipeline` is imported from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "pipeline.stages.contract.drawing"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
    except OSError:
        return None


def health_args(facts: dict[str, Any], checks: list[Check]) -> dict[str, Any] | None:
    """The health plot's data: each episode's length and its frames a health row flagged."""
    episodes = facts.get("episodes") or {}
    if not len(episodes.get("index", ())):
        return None
    flagged: dict[int, int] = {}
    for check in checks:
        if check.category == "health" and check.verdict != "match":
            for episode, count in (check.evidence.get("frames_per_episode") or {}).items():
                flagged[int(episode)] = flagged.get(int(episode), 0) + int(count)
    ids = [int(e) for e in episodes["index"]]
    return {
        "ids": ids,
        "rows": [int(n) for n in episodes["rows"]],
        "flagged": [flagged.get(i, 0) for i in ids],
    }


def range_args(
    a: dict[str, np.ndarray], c: dict[str, np.ndarray], flagged: set[int], title: str
) -> dict[str, Any]:
    """A range plot's data as JSON values (NaN and inf included: Python's json writes and reads them)."""
    import numpy as np

    lists = {
        side: {k: np.asarray(v[k], dtype=np.float64).tolist() for k in RANGE_KEYS}
        for side, v in (("a", a), ("c", c))
    }
    return {**lists, "flagged": sorted(flagged), "title": title}


def _draw(kind: str, path: Path, args: dict[str, Any]) -> Path:
    import numpy as np

    if kind == "profile":
        from pipeline.stages.contract.plots import profile_plot

        return profile_plot(Path(path), args["rows"])
    if kind == "health":
        from pipeline.stages.contract.health.plot import health_plot

        return health_plot(Path(path), args["ids"], args["rows"], args["flagged"])
    if kind == "range":
        from pipeline.stages.contract.plots import range_plot

        a, c = ({k: np.asarray(args[side][k]) for k in RANGE_KEYS} for side in ("a", "c"))
        return range_plot(Path(path), a, c, set(args["flagged"]), title=args["title"])
    raise ValueError(f"unknown plot kind {kind!r}")


def main() -> None:
    """The drawer: matplotlib first (while the stage reads), then one plot per line of stdin."""
    import pipeline.stages.contract.health.plot  # noqa: F401  (matplotlib and every plot module)
    import pipeline.stages.contract.plots  # noqa: F401

    for line in sys.stdin:
        job = json.loads(line)
        try:
            _draw(job["kind"], Path(job["path"]), job["args"])
            answer = {"path": job["path"], "ok": True}
        except Exception as exc:  # noqa: BLE001  (the stage draws it again and sees the error itself)
            answer = {"path": job["path"], "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
