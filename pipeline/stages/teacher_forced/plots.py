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

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pipeline.storage import atomic_write_bytes  # noqa: E402


def _save(fig: plt.Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def per_dim(summaries: Mapping[str, Mapping], names: Sequence[str], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(names) + 2), 4))
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
    fig, ax = plt.subplots(figsize=(7, 4))
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
    path: Path,
    count: int = 3,
) -> Path:
    """One row per worst sample, one column per action dim: prediction vs ground truth over the chunk."""
    order = [i for i in np.argsort(np.nan_to_num(per_sample, nan=-1.0))[::-1] if np.isfinite(per_sample[i])]
    worst = order[:count] or [0]
    dims = len(names)
    fig, axes = plt.subplots(len(worst), dims, figsize=(2.4 * dims, 2.2 * len(worst)), squeeze=False)
    steps = np.arange(pred.shape[1])
    for row, sample in enumerate(worst):
        for d in range(dims):
            ax = axes[row, d]
            ax.plot(steps, truth[sample, : len(steps), d], "o-", label="ground truth")
            ax.plot(steps, pred[sample, :, d], "x--", label=model)
            ax.set_title(f"{labels[sample]} #{sample}: {names[d]}", fontsize=8)
            ax.set_xlabel("chunk step")
            ax.set_ylabel("action")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{model}: predicted vs ground truth on its worst samples")
    return _save(fig, path)
