"""The contract's plots drawn by the drawer process give the same files as drawn in the stage's process;
a drawer that dies or fails on a plot costs time, never a plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.stages.contract import drawing
from pipeline.stages.contract.drawing import Plots

ROWS = [
    {"feature": "observation.state", "dim": d, "kind": kind, "at_limits": 0.1 * d, "held_share_p50": 0.05 * d}
    for d, kind in enumerate(["continuous", "discrete", "constant", "continuous"])
]
RANGE = drawing.range_args(
    {"lo": np.zeros(3), "hi": np.ones(3), "mean": np.array([0.5, np.nan, 0.2])},
    {"lo": np.array([-1.0, 0.0, -np.inf]), "hi": np.array([2.0, 1.0, 1.0]), "mean": np.zeros(3)},
    {1},
    "action: base vs data",
)
HEALTH = {"ids": [0, 1, 2], "rows": [50, 60, 55], "flagged": [0, 12, 0]}


def _draw_all(plots: Plots, out: Path) -> list[Path]:
    out.mkdir()
    paths = [
        plots.draw("profile", out / "profile.png", rows=ROWS),
        plots.draw("health", out / "health.png", **HEALTH),
        plots.draw("range", out / "range.png", **RANGE),
    ]
    plots.finish()
    return paths


def test_the_drawer_draws_the_files_the_stage_would_and_serves_the_next_run(tmp_path: Path) -> None:
    here = _draw_all(Plots(), tmp_path / "here")
    drawer = drawing.spawn()
    assert drawer is not None
    with Plots(drawer) as plots:
        there = _draw_all(plots, tmp_path / "drawer")
        assert plots.sent == {}  # finished: nothing left to draw here
    for a, b in zip(here, there, strict=True):
        assert b.is_file() and a.read_bytes() == b.read_bytes(), b.name
    assert drawer.alive()  # a finished run leaves it for the next one
    with Plots(drawer) as plots:
        again = _draw_all(plots, tmp_path / "again")
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in here]
    drawer.proc.stdin.close()  # this process's exit: the drawer ends on its own
    assert drawer.proc.wait(timeout=60) == 0


def test_a_dead_drawer_costs_no_plot(tmp_path: Path) -> None:
    drawer = drawing.spawn()
    assert drawer is not None
    plots = Plots(drawer)
    first = plots.draw("profile", tmp_path / "profile.png", rows=ROWS)  # sent, then the drawer dies
    drawer.proc.kill()
    drawer.proc.wait()
    second = plots.draw("range", tmp_path / "range.png", **RANGE)  # drawn here: the pipe is gone
    plots.finish()  # the one it never answered is drawn here
    assert first.is_file() and second.is_file()


def test_a_plot_the_drawer_fails_on_is_drawn_here_and_its_error_raised(tmp_path: Path) -> None:
    drawer = drawing.spawn()
    assert drawer is not None
    with Plots(drawer) as plots:
        plots.draw("histogram", tmp_path / "h.png", values=[1, 2])  # a kind no drawer knows
        with pytest.raises(ValueError, match="unknown plot kind 'histogram'"):
            plots.finish()  # the drawer answered with its error; drawn here, the error is the stage's
    assert drawer.alive()  # the drawer itself went on
    drawer.stop()


def test_a_stage_run_that_fails_stops_the_drawer_it_left_unanswered(tmp_path: Path) -> None:
    drawer = drawing.spawn()
    assert drawer is not None
    with pytest.raises(RuntimeError), Plots(drawer) as plots:
        plots.draw("profile", tmp_path / "profile.png", rows=ROWS)
        raise RuntimeError("the stage failed before it finished its plots")
    assert drawer.proc.wait(timeout=60) is not None and not drawer.alive()
