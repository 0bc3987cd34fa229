"""The stage's pictures (matplotlib, Agg): what a reviewer looks at before reading the numbers.

1. per-dim normalized L1 per model (bars side by side: which dims a model gets wrong),
2. per-sample error against position in the episode (does error grow towards the end?),
3. predicted vs ground-truth action over the chunk for the worst samples of each model.
Each figure is written to a temporary name in the target folder and renamed into place.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.storage import atomic_write_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _pyplot() -> Any:
    """pyplot on the Agg backend, imported by the first plot: the stage's import and a run with
    plots=false do not pay for matplotlib (~0.5-1 s of CPU)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    _pyplot().close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def per_dim(summaries: Mapping[str, Mapping], names: Sequence[str], path: Path) -> Path:
    fig, ax = _pyplot().subplots(figsize=(max(6, 0.9 * len(names) + 2), 4))
    width = 0.8 / max(1, len(summaries))
    x = np.arange(len(names))
    for i, (model, summary) in enumerate(summaries.items()):
        values = np.asarray(summary["l1_norm"], dtype=float)
        ax.bar(x + i * width - 0.4 + width / 2, values, width, label=model)
    ax.set_xticks(x, list(names), rotation=30, ha="right")
    ax.set_xlabel("action dim")
    ax.set_ylabel("mean L1 (dataset std units)")
    ax.set_title("Teacher-forced action error per dim")
    ax.legend(title="model")
    return _save(fig, path)


def by_position(per_sample: Mapping[str, np.ndarray], position: np.ndarray, path: Path) -> Path:
    fig, ax = _pyplot().subplots(figsize=(7, 4))
    for model, errors in per_sample.items():
        ax.scatter(position, errors, s=14, alpha=0.7, label=model)
    ax.set_xlabel("position in episode (0 = first frame, 1 = last)")
    ax.set_ylabel("per-sample mean L1 (dataset std units)")
    ax.set_title("Teacher-forced error against position in episode")
    ax.legend(title="model")
    return _save(fig, path)


def worst_traces(
    model: str,
    pred: np.ndarray,
    truth: np.ndarray,
    per_sample: np.ndarray,
    labels: Sequence[str],
    names: Sequence[str],
    scale: np.ndarray,
    path: Path,
    count: int = 3,
) -> Path:
    """One panel per worst sample: its action (every dim, every chunk step) predicted vs ground truth,
    in dataset std units so dims of different ranges share an axis."""
    order = [i for i in np.argsort(np.nan_to_num(per_sample, nan=-1.0))[::-1] if np.isfinite(per_sample[i])]
    worst = order[:count] or [0]
    steps = pred.shape[1]
    ticks = [f"{n}" if steps == 1 else f"{n}@{h}" for n in names for h in range(steps)]
    x = np.arange(len(ticks))
    fig, axes = _pyplot().subplots(
        len(worst), 1, sharex=True, figsize=(max(6, 0.5 * len(ticks) + 2), 2.4 * len(worst) + 0.8)
    )
    for ax, sample in zip(np.atleast_1d(axes), worst, strict=False):
        want = (truth[sample, :steps] / scale).T.reshape(-1)
        got = (pred[sample] / scale).T.reshape(-1)
        ax.plot(x, want, "o-", label="ground truth")
        ax.plot(x, got, "x--", label=model)
        ax.set_title(f"sample {sample} ({labels[sample]}): mean L1 {per_sample[sample]:.3g}", fontsize=9)
        ax.set_ylabel("action / dataset std")
        ax.legend(fontsize=7)
    np.atleast_1d(axes)[-1].set_xticks(x, ticks, rotation=30, ha="right", fontsize=7)
    np.atleast_1d(axes)[-1].set_xlabel("action dim" + ("" if steps == 1 else " @ chunk step"))
    fig.suptitle(f"{model}: predicted vs ground truth on its worst samples")
    return _save(fig, path)
