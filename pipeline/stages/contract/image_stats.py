"""Rows that set the decoded frames' colour statistics against the stats files (issues 22 and 34): a
grey camera where the base saw colour, and a dataset's image stats gone stale.

Both read the sample `frame_rows` already decoded (nothing more is decoded here). A stale image stat
matters by how far it moves what the policy sees: LeRobot normalizes `(x - mean) / std` with the
dataset's stats when it trains, so a gap is measured in units of the base's std for that channel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.readers.frames import ImageStats
from pipeline.record.records import Check, Rows
from pipeline.stages.contract.rows import NAME, Sources

ROWS = Rows(NAME, "encoding")


def _channels(block: dict[str, Any], name: str) -> np.ndarray | None:
    """A (3,)-shaped statistic in 0-1 (stats in 0-255 scaled down), or None where it is not 3 channels."""
    if name not in block:
        return None
    value = np.asarray(block[name], np.float64).reshape(-1)
    if value.size != 3:
        return None
    mean = np.asarray(block.get("mean", value), np.float64).reshape(-1)
    return value / (255.0 if mean.max() > 1.5 else 1.0)


def channel_spread(frames: np.ndarray, block: int = 4) -> float:
    """Mean absolute difference between neighbouring channels, grey levels 0-255, over `block` x `block`
    averages: a lossy codec's chroma noise on a grey picture (zero-mean, pixel-sized) averages out,
    a colour scene's channel differences do not."""
    n, h, w, _ = frames.shape
    h, w = h - h % block, w - w % block
    if h == 0 or w == 0:
        blocks = frames.astype(np.float64)
    else:
        cut = frames[:, :h, :w].astype(np.float64)
        blocks = cut.reshape(n, h // block, block, w // block, block, 3).mean(axis=(2, 4))
    return float(np.abs(np.diff(blocks, axis=-1)).mean())


def grey_row(src: Sources, key: str, sample: np.ndarray) -> list[Check]:
    """Three equal channels in every decoded frame, where the base's image stats say its channels differ
    (it was trained on colour): the policy gets a picture it never saw."""
    base = src.a.stats.get(key) or {}
    mean = _channels(base, "mean")
    if mean is None:
        return []
    cfg = src.cfg.frames
    spread_frames = channel_spread(sample)
    spread_base = float(mean.max() - mean.min())
    grey = spread_frames <= cfg.grey_level
    bad = grey and spread_base > cfg.colour_spread
    said = (
        f"{key}: decoded channels differ by {spread_frames:.2f} grey levels on average (grey <= "
        f"{cfg.grey_level}); the base's image mean per channel spans {spread_base:.4f} (colour > "
        f"{cfg.colour_spread})"
    )
    message = said + (": a grey camera where the base was trained on colour" if bad else "")
    evidence = {"frames": int(sample.shape[0]), "channel_spread": round(spread_frames, 3)}
    evidence["base_mean"] = mean.round(4).tolist()
    return [
        ROWS(
            "frames.grey:" + key,
            key,
            "mismatch" if bad else "match",
            message,
            expected="colour" if spread_base > cfg.colour_spread else "any",
            actual="grey" if grey else "colour",
            evidence=evidence,
        )
    ]


def stale_row(src: Sources, key: str, sample: np.ndarray, used: dict[int, list[int]]) -> list[Check]:
    """meta/stats.json image mean/std against the same statistics recomputed from the sampled frames:
    soft past `stale_mean` (0-1 units), hard where the gap moves the normalized input by more than
    `stale_std` of the base's std (the dataset's own std where the base has none)."""
    block = src.c.stats.get(key) or {}
    shipped = {k: v for k in ("mean", "std") if (v := _channels(block, k)) is not None}
    if not shipped:
        return []
    acc = ImageStats()
    acc.add(sample)
    recomputed = {k: v.reshape(3) for k, v in acc.result().items() if k in shipped}
    gaps = {k: np.abs(recomputed[k] - shipped[k]) for k in shipped}
    gap = max(float(v.max()) for v in gaps.values())
    unit = _channels(src.a.stats.get(key) or {}, "std")
    unit_from = "the base's" if unit is not None else "the dataset's"
    unit = unit if unit is not None else shipped.get("std", recomputed.get("std"))
    in_std = (
        max(float((v / np.maximum(unit, 1e-6)).max()) for v in gaps.values()) if unit is not None else 0.0
    )
    cfg = src.cfg.frames
    hard = in_std > cfg.stale_std
    evidence = {
        "recomputed": {k: v.round(4).tolist() for k, v in recomputed.items()},
        "shipped": {k: v.round(4).tolist() for k, v in shipped.items()},
        "gaps": {k: round(float(v.max()), 4) for k, v in gaps.items()},
        "gap_in_std": round(in_std, 3),
        "std_unit": f"{unit_from} image std",
        "frames": int(sample.shape[0]),
        "episodes_frames": used,
    }
    message = (
        f"{key}: meta/stats.json vs sampled frames differ by {gap:.4f} per channel at most, {in_std:.2f} "
        f"std of {unit_from} image std (limits: {cfg.stale_mean} in 0-1, hard past {cfg.stale_std} std)"
    )
    verdict = "match" if gap <= cfg.stale_mean and not hard else "mismatch"
    return [
        ROWS(
            "frames.stale_stats:" + key,
            key,
            verdict,
            message,
            severity="hard" if hard else "soft",
            expected=f"<= {cfg.stale_mean} (hard past {cfg.stale_std} std)",
            actual=round(gap, 4),
            evidence=evidence,
        )
    ]
