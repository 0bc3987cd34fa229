"""The contract's plots, drawn by a process of their own while the stage goes on.

Why: in a launch that checks a dataset alone, importing matplotlib (~0.8 s) and drawing the profile,
health and range plots (~0.3-0.7 s each, most of it laying out tick labels) took half the launch, one
after the other on one core. A drawer is a `python -m` process of this module that imports matplotlib,
then draws each plot the stage sends it (one JSON line: kind, path and the plot's data) and answers one
line per plot. The launcher of a dataset alone starts it before it plans (`prestart`), so matplotlib is
imported on another core meanwhile; otherwise the stage's first run in a process starts it, and every
later run of that process reuses it (a test session, or a launcher that runs the stage twice).
`Plots.finish` waits for this run's answers. A plot the drawer did not draw (it could not start, died,
failed on that plot, or stopped answering) is drawn here, by the same function: the files are the same
whoever drew them. The drawer ends when this process closes its input (at exit).

No drawer where a second process gains nothing: matplotlib already imported here, or one CPU to use.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.record.records import Check

if TYPE_CHECKING:
    import numpy as np

WAIT_S = 600  # the drawer's whole budget once the stage has sent its last plot
RANGE_KEYS = ("lo", "hi", "mean")


class Drawer:
    """One drawer process, reused by every stage run of this process while it answers."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.proc, self._buffer, self.owner = proc, b"", os.getpid()

    def alive(self) -> bool:
        """Running, and this process's (a forked child shares the pipes, never the drawer)."""
        return self.owner == os.getpid() and self.proc.poll() is None

    def send(self, kind: str, path: Path, args: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"kind": kind, "path": str(path), "args": args}) + "\n").encode())
        self.proc.stdin.flush()

    def answers(self, n: int, timeout: float) -> list[dict[str, Any]]:
        """The next `n` answers; TimeoutError or EOFError where the drawer does not give them."""
        assert self.proc.stdout is not None
        fd, deadline, out = self.proc.stdout.fileno(), time.monotonic() + timeout, []
        while len(out) < n:
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimeoutError(f"the plot drawer gave no answer in {timeout:g} s")
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise EOFError("the plot drawer ended")
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            out.append(json.loads(line))
        return out

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
            self.proc.wait()


_DRAWER: list[Drawer] = []  # this process's drawer (`prestart` or the first stage run starts it)


class Plots:
    """Where one stage run's plots are drawn: `draw` now or by the drawer, `finish` before the result."""

    def __init__(self, drawer: Drawer | None = None):
        self.drawer = drawer
        self.sent: dict[str, tuple[str, dict[str, Any]]] = {}  # path -> (kind, args), for a redraw here

    @classmethod
    def start(cls) -> Plots:
        """With this process's drawer (started now where none runs yet and one gains time)."""
        prestart()
        return cls(_DRAWER[0] if _DRAWER else None)

    def draw(self, kind: str, path: Path, **args: Any) -> Path:
        """The plot's path; it exists once `finish` returned."""
        if self.drawer is not None:
            try:
                self.drawer.send(kind, path, args)
                self.sent[str(path)] = (kind, args)
                return path
            except (OSError, ValueError):  # the drawer is gone: this one and the rest are drawn here
                self.close()
        return _draw(kind, path, args)

    def finish(self) -> None:
        """Wait for the drawer's answers; draw here whatever it did not draw."""
        drawn: set[str] = set()
        if self.drawer is not None and self.sent:
            try:
                drawn = {a["path"] for a in self.drawer.answers(len(self.sent), WAIT_S) if a.get("ok")}
            except (TimeoutError, EOFError, OSError, ValueError):
                self.close()
        sent, self.sent = self.sent, {}
        for path, (kind, args) in sent.items():
            if path not in drawn or not Path(path).is_file():
                _draw(kind, Path(path), args)

    def close(self) -> None:
        """Stop the drawer where this run left it unanswered (a stage that failed, a drawer that stopped
        answering): a later run starts a new one."""
        if self.drawer is not None and (self.sent or not self.drawer.alive()):
            self.drawer.stop()
            if self.drawer in _DRAWER:
                _DRAWER.remove(self.drawer)
        self.drawer = None  # what it was sent and did not answer, `finish` draws here

    def __enter__(self) -> Plots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prestart() -> None:
    """Start this process's drawer now where none runs (the launcher of a dataset alone calls it before it
    plans, so matplotlib is imported while it plans) and where one gains time: matplotlib not imported
    here, a second CPU to draw on."""
    if _DRAWER and _DRAWER[0].alive():
        return
    _DRAWER.clear()
    if "matplotlib" not in sys.modules and len(os.sched_getaffinity(0)) >= 2 and (drawer := spawn()):
        _DRAWER.append(drawer)


def spawn() -> Drawer | None:
    """A drawer process (None where it cannot start). It ends when this process closes its input."""
    root = str(Path(__file__).resolve().parents[3])  # the folder `pipeline` is imported from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.stages.contract.drawing"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    except OSError:
        return None
    return Drawer(proc)


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

    while line := sys.stdin.readline():
        job = json.loads(line)
        try:
            _draw(job["kind"], Path(job["path"]), job["args"])
            answer = {"path": job["path"], "ok": True}
        except Exception as exc:  # noqa: BLE001  (the stage draws it again and sees the error itself)
            answer = {"path": job["path"], "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
