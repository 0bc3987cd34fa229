"""Every plot a record shows has a title, axis labels and a legend (colours explained in the picture,
not in a docstring), and is drawn with the Agg backend."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

from pipeline.stages.contract import plots as contract_plots
from pipeline.stages.render_cache.gap import side_by_side
from pipeline.stages.teacher_forced import plots as tf_plots


@pytest.fixture
def figures(monkeypatch) -> list[Figure]:
    """The figures the modules save (Figure.savefig wrapped)."""
    saved: list[Figure] = []
    original = Figure.savefig

    def record(self: Figure, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return saved


def labelled(fig: Figure) -> None:
    titles = [ax.get_title() for ax in fig.axes] + [fig._suptitle.get_text() if fig._suptitle else ""]
    assert any(titles), "no title"
    plotted = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert any(ax.get_xlabel() for ax in plotted) and any(ax.get_ylabel() for ax in plotted), "no axis label"
    assert fig.legends or any(ax.get_legend() for ax in plotted), "no legend"


def test_every_plot_is_titled_labelled_and_has_a_legend(figures, tmp_path: Path):
    assert matplotlib.get_backend().lower() == "agg"
    stats = {"lo": np.zeros(3), "hi": np.ones(3), "mean": np.full(3, 0.5)}
    contract_plots.range_plot(tmp_path / "r.png", stats, {k: v * 2 for k, v in stats.items()}, {1})
    summaries = {"base": {"l1_norm": [0.1, 0.2]}, "other": {"l1_norm": [0.3, 0.1]}}
    tf_plots.per_dim(summaries, ["x", "y"], tmp_path / "d.png")
    tf_plots.by_position({"base": np.arange(4.0)}, np.linspace(0, 1, 4), tmp_path / "p.png")
    pred, truth = np.zeros((4, 1, 2)), np.ones((4, 1, 2))
    tf_plots.worst_traces(
        "base", pred, truth, np.arange(4.0), list("abcd"), ["x", "y"], np.ones(2), tmp_path / "w.png"
    )
    frame = np.zeros((8, 8, 3), np.uint8)
    side_by_side(tmp_path / "g.png", [(0, frame, frame + 10)], "ep.npz", "env")
    assert len(figures) == 5
    for fig in figures:
        labelled(fig)
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in tmp_path.glob("*.png"))
