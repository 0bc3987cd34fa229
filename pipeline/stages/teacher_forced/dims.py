"""Which action dims make a model worse than the baseline, and whether its normalizer says why.

A comparison row that only says "30x worse" leaves the user to find the cause. When the extra error
sits in a few dims (two dims' normalizer stats exchanged, one dim in other units), those dims are the
lead: the smallest set of dims that holds `EXCESS_SHARE` of the model's extra error is named when it is
at most half of the dims. And when the model's own normalizer stats for the action differ from the
baseline's, or from the scored data's own mean and std, in some dims (in units of the other's std, the
contract's shift measure, `normalization.stats_shift`), the row says which: exchanged stats show up as
two dims shifted both ways.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.errors import PreflightError
from pipeline.normalization import stats_shift
from pipeline.readers import read_model

EXCESS_SHARE = 0.8  # the dims named hold this share of the extra error
SHIFT_Z = 0.5  # a normalizer mean this many baseline stds away, or
STD_RATIO = 1.5  # a std this many times larger or smaller: the dim's stats differ


def label(names: Sequence[str], d: int) -> str:
    return f"{d} ({names[d]})" if d < len(names) else str(d)


def excess(run: np.ndarray, base: np.ndarray, names: Sequence[str]) -> dict[str, Any]:
    """Per-dim extra normalized L1 of `run` over `base` ((N, H, D) arrays on the same samples and steps)
    and the few dims that hold most of it (empty when the extra error is spread over the dims)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        per_dim = np.nanmean(run.reshape(-1, run.shape[-1]), axis=0) - np.nanmean(
            base.reshape(-1, base.shape[-1]), axis=0
        )
    extra = np.where(np.isfinite(per_dim), np.maximum(per_dim, 0.0), 0.0)
    total = float(extra.sum())
    if total <= 0:
        return {"dims": [], "share": None, "per_dim": [round(float(v), 6) for v in per_dim]}
    order = np.argsort(-extra)
    held = np.cumsum(extra[order]) / total
    count = int(np.searchsorted(held, EXCESS_SHARE) + 1)
    few = count <= max(1, len(extra) // 2)
    dims = sorted(int(d) for d in order[:count]) if few else []
    return {
        "dims": dims,
        "share": round(float(held[count - 1]), 3) if few else None,
        "per_dim": [round(float(v), 6) for v in per_dim],
        "labels": [label(names, d) for d in dims],
    }


def normalizer(
    path: str | None, base_path: str | None, key: str, data: dict[str, np.ndarray] | None = None
) -> dict[str, Any] | None:
    """Dims whose action normalizer stats (mean/std) differ between the model and the baseline, and
    between the model and the data it is scored on (`data`: the action column's own mean and std);
    None when the model's stats cannot be read."""
    try:
        mine, theirs = (read_model(p).stats.get(key) if p else None for p in (path, base_path))
    except PreflightError:
        return None
    if not _has_moments(mine):
        return None
    return {"dims": _differ(mine, theirs), "data_dims": _differ(mine, data)}


def _has_moments(stats: dict[str, Any] | None) -> bool:
    return bool(stats) and all(s in stats for s in ("mean", "std"))  # type: ignore[operator]


def _differ(mine: dict[str, Any], other: dict[str, Any] | None) -> list[int]:
    """Dims where `mine` sits > SHIFT_Z of `other`'s std from its mean, or has a std STD_RATIO off."""
    if not _has_moments(other) or np.shape(mine["mean"]) != np.shape(other["mean"]):  # type: ignore[index]
        return []
    z, ratio = stats_shift(other["mean"], other["std"], mine["mean"], mine["std"])  # type: ignore[index]
    return [int(d) for d in np.flatnonzero((z > SHIFT_Z) | (ratio > STD_RATIO) | (ratio < 1 / STD_RATIO))]


def text(found: dict[str, Any], stats: dict[str, Any] | None, names: Sequence[str]) -> str:
    """The row's words: where the extra error sits, and which dims' normalizer stats differ."""
    parts = []
    if found["dims"]:
        parts.append(f"{found['share']:.0%} of the extra error is in dim(s) {', '.join(found['labels'])}")
    elif found["share"] is None and any(v > 0 for v in found["per_dim"]):
        parts.append(f"the extra error is spread over the dims (no {EXCESS_SHARE:.0%} in half of them)")
    for field, whose in (("dims", "the baseline's"), ("data_dims", "the data's")):
        if stats and stats.get(field):
            shown = ", ".join(label(names, d) for d in stats[field])
            parts.append(
                f"its action normalizer stats differ from {whose} in dim(s) {shown} (> {SHIFT_Z} std "
                f"apart, or std x{STD_RATIO})"
            )
    return "; ".join(parts)
