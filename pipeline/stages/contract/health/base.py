"""`dead:<feature>`: the base's own stats as a second reference for what a dim does.

A dim that never changes over the whole dataset is padding or a flag nobody set (the profile says
`constant`), unless the base was trained on data where it moves: then the sensor died, or the dataset
pads what the base reads, and fine-tuning teaches the model to ignore a dim it relied on. The reverse, a
dim the base saw constant (std 0) that moves here, normalizes by a zero std. Both are departures from
the base, hard where the model reads or predicts the feature. Without a base's stats there is nothing to
compare a constant dim with, and no row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check
from pipeline.stages.contract.health.common import (
    ROWS,
    dim_names,
    labels,
    listed,
    model_predicts,
    model_reads,
)
from pipeline.stages.contract.rows import Sources, pair_features

STILL = 1e-8  # a base std at or below this (relative to 1 + |mean|) says the dim did not move


def base_rows(src: Sources, facts: dict[str, Any]) -> list[Check]:
    out = []
    for pair in pair_features(src):
        stats = src.a.stats.get(pair.a.key) or {}
        key = pair.c.key if pair.c is not None else None
        if key is None or key not in facts.get("low", {}) or "std" not in stats:
            continue
        low, high = (np.asarray(facts[s][key]["value"], dtype=float) for s in ("low", "high"))
        std = np.asarray(stats["std"], dtype=float).reshape(-1)
        mean = np.asarray(stats.get("mean", np.zeros_like(std)), dtype=float).reshape(-1)
        if std.size != low.size or mean.size != low.size:
            continue  # the layout rows name a width mismatch
        still = std <= STILL * (1 + np.abs(mean))
        out.append(_row(src, key, pair.a.key, (low == high) & ~still, (low != high) & still, std))
    return out


def _row(src: Sources, key: str, a_key: str, dead: np.ndarray, woke: np.ndarray, std: np.ndarray) -> Check:
    names = dim_names(src, key)
    used = key in model_reads(src) | model_predicts(src)
    parts = []
    if dead.any():
        shown = [f"{labels(names, [d])[0]} (base std {std[d]:.4g})" for d in np.flatnonzero(dead)]
        parts.append(f"constant over the whole dataset while the base's stats say it moves: {listed(shown)}")
    if woke.any():
        dims = labels(names, np.flatnonzero(woke))
        parts.append(f"moving here while the base's stats say it never moved (std 0): {listed(dims)}")
    found = dead | woke
    message = (
        f"{key}: departs from the base ({a_key}): "
        + "; ".join(parts)
        + ("; the model uses it" if used else "")
        if found.any()
        else f"{key}: every dim moves where the base's stats say it moves ({a_key})"
    )
    return ROWS(
        f"health.dead:{key}",
        key,
        "mismatch" if found.any() else "match",
        message,
        severity="hard" if used and found.any() else "soft",
        evidence={
            "dims": [int(d) for d in np.flatnonzero(found)],
            "dead": [int(d) for d in np.flatnonzero(dead)],
            "moving_where_base_still": [int(d) for d in np.flatnonzero(woke)],
            "episodes": [],
            "model_uses": used,
        },
    )
