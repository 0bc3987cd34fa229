"""The health plot people read: each episode's length, and how many of its frames a health row flagged.

matplotlib (Agg), written atomically like the contract's range plots.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from pipeline.stages.contract.plots import bars, save_png  # noqa: E402


def health_plot(path: Path, ids: list[int], rows: list[int], flagged: list[int]) -> Path:
    """Per episode (ids in order): its rows and its frames a health row flagged
    (`drawing.health_args`)."""
    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots()
    bars(ax, rows, "#babdb6", "episode length")
    bars(ax, flagged, "#cc0000", "flagged frames")
    step = max(1, len(ids) // 20)
    ax.set_xticks(range(0, len(ids), step), [str(i) for i in ids[::step]], fontsize=7)
    ax.set_xlabel("episode index")
    ax.set_ylabel("frames")
    ax.set_title("Dataset health: episode length and frames flagged by a health row")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return save_png(fig, path)
