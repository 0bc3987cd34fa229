"""Contract rows from the camera frames themselves, per camera: the faults no stats file shows.

A dataset whose frames were written BGR, whose two cameras were exchanged, or whose image stats are on
another scale trains a policy on pixels it was never meant to see, and every stats-only check passes.
Here a few frames of a few episodes per camera are decoded through the frame reader (what the training
loader yields: RGB, 0-1) and their per-channel means are compared with the dataset's own image stats and
the base checkpoint's: the resolution against info.json, the channel order (a reversed order that fits
clearly better names the camera), the scale (stats in 0-255 where the loader gives 0-1), the camera
assignment (exchanging two cameras fits the base's per-camera stats clearly better) and stale image
stats. Where the videos cannot be decoded that is one row, not silence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader
from pipeline.records import Check, Rows

ROWS = Rows("contract", "encoding")
LAYOUT = Rows("contract", "layout")


@dataclass
class FramesConfig:
    """`stages.contract.frames`: how many frames are decoded and how close channel means must be."""

    enabled: bool = True
    episodes: int = 4  # episodes sampled per camera (evenly spread)
    per_episode: int = 6  # frames per sampled episode (evenly spread in time)
    mean_atol: float = 0.06  # |channel mean - stats mean| within this is "fits" (0-1 units)
    clearly: float = 0.5  # an alternative fits "clearly better" when its distance is below this share


def frame_checks(root: str | Path | None, base_stats: Mapping[str, Any], conf: FramesConfig) -> list[Check]:
    """Every frame row for the dataset at `root` (none when it declares no video camera)."""
    if not conf.enabled or root is None or not (Path(root) / "meta" / "info.json").is_file():
        return []
    reader = FrameReader(root)
    try:
        cameras = reader.cameras
    except InputError:
        return []
    if not cameras:
        return []
    measured, rows = _measure(reader, cameras, conf)
    if not measured:
        return rows
    shipped = reader.data.stats()
    for key, means in measured.items():
        rows += _camera_rows(
            key, means["mean"], means["shape"], reader, shipped.get(key), base_stats.get(key), conf
        )
    rows += _swap_rows(measured, base_stats, conf)
    return rows


def _measure(
    reader: FrameReader, cameras: list[str], conf: FramesConfig
) -> tuple[dict[str, dict[str, Any]], list[Check]]:
    """Per camera: channel means of the sampled frames (0-1) and the frame shape; decode failures as rows."""
    episodes = reader.data.episodes()
    if episodes is None or episodes.length is None or not len(episodes.index):
        return {}, [
            ROWS("frames.available", "frames", "unverifiable", "no per-episode lengths to sample frames")
        ]
    pick = np.unique(
        np.linspace(0, len(episodes.index) - 1, min(conf.episodes, len(episodes.index))).astype(int)
    )
    measured, rows = {}, []
    for key in cameras:
        try:
            frames = [
                reader.frames(key, int(episodes.index[i]), _times(int(episodes.length[i]), reader.fps, conf))
                for i in pick
            ]
        except InputError as exc:
            rows.append(
                ROWS(f"frames.{key}.decode", key, "unverifiable", f"{key}: frames not checked: {exc}")
            )
            continue
        stack = np.concatenate(frames)
        measured[key] = {"mean": stack.reshape(-1, 3).mean(axis=0) / 255.0, "shape": stack.shape[1:]}
        rows.append(
            ROWS(
                f"frames.{key}.decode",
                key,
                "match",
                f"{key}: {len(stack)} frames of {len(pick)} episode(s) decode at the metadata's timestamps",
                evidence={"episodes": [int(episodes.index[i]) for i in pick], "frames": len(stack)},
            )
        )
    return measured, rows


def _times(length: int, fps: float, conf: FramesConfig) -> np.ndarray:
    frames = np.unique(np.linspace(0, max(length - 1, 0), conf.per_episode).astype(int))
    return frames / (fps or 1.0)


def _mean(stats: Any) -> np.ndarray | None:
    if not isinstance(stats, Mapping) or stats.get("mean") is None:
        return None
    mean = np.asarray(stats["mean"], dtype=np.float64).ravel()
    return mean if mean.size == 3 else None


def _camera_rows(
    key: str,
    mean: np.ndarray,
    shape: tuple[int, ...],
    reader: FrameReader,
    shipped: Any,
    base: Any,
    conf: FramesConfig,
) -> list[Check]:
    rows = [_resolution(key, shape, reader)]
    for tag, source, stats in (
        ("dataset", "the dataset's meta stats", shipped),
        ("base", "the base checkpoint's stats", base),
    ):
        ref = _mean(stats)
        if ref is None:
            continue
        rows.append(_scale(f"frames.{key}.scale.{tag}", key, source, ref, stats))
        if ref.max() <= 1.5:
            rows.append(_order(f"frames.{key}.channel_order.{tag}", key, source, mean, ref, conf))
    ref = _mean(shipped)
    if ref is not None and ref.max() <= 1.5:
        off = float(np.abs(mean - ref).max())
        rows.append(
            ROWS.judge(
                f"frames.{key}.stats_fresh",
                key,
                off <= conf.mean_atol,
                f"{key}: channel means of the sampled frames {np.round(mean, 3).tolist()} vs meta stats "
                f"{np.round(ref, 3).tolist()} (max off {off:.3g}, tolerance {conf.mean_atol})",
                severity="soft",
                expected=ref.tolist(),
                actual=mean.tolist(),
            )
        )
    return rows


def _resolution(key: str, shape: tuple[int, ...], reader: FrameReader) -> Check:
    declared = [int(v) for v in (reader.data.features.get(key) or {}).get("shape") or []]
    hwc = sorted(declared) == sorted(shape) and len(declared) == 3
    return LAYOUT.judge(
        f"frames.{key}.resolution",
        key,
        hwc if declared else None,
        f"{key}: decoded frames are {list(shape)} (H, W, C); info.json declares {declared or 'nothing'}",
        expected=declared,
        actual=list(shape),
    )


def _scale(check_id: str, key: str, source: str, ref: np.ndarray, stats: Mapping[str, Any]) -> Check:
    top = float(np.asarray(stats.get("max", ref), dtype=np.float64).max())
    on_255 = top > 1.5
    message = (
        f"{key}: {source} are on the 0-255 scale (max {top:.4g}) but the loader yields 0-1 frames: a "
        "factor-255 disagreement"
        if on_255
        else f"{key}: {source} are on the 0-1 scale the loader yields (max {top:.4g})"
    )
    return ROWS.judge(check_id, key, not on_255, message, expected="0-1", actual=top)


def _order(
    check_id: str, key: str, source: str, mean: np.ndarray, ref: np.ndarray, conf: FramesConfig
) -> Check:
    as_is, reversed_ = float(np.abs(mean - ref).sum()), float(np.abs(mean[::-1] - ref).sum())
    flipped = as_is > 3 * conf.mean_atol and reversed_ < conf.clearly * as_is
    message = (
        f"{key}: the frames fit {source} clearly better with their channels reversed (distance "
        f"{reversed_:.3g} vs {as_is:.3g}): written BGR"
        if flipped
        else f"{key}: channel order RGB fits {source} (distance {as_is:.3g}; reversed {reversed_:.3g})"
    )
    return ROWS.judge(
        check_id,
        key,
        not flipped,
        message,
        expected="RGB",
        actual="BGR" if flipped else "RGB",
        evidence={"frame_means": mean.tolist(), "reference_means": ref.tolist(), "reference": source},
    )


def _swap_rows(measured: Mapping[str, Any], base: Mapping[str, Any], conf: FramesConfig) -> list[Check]:
    """Which assignment of cameras to the base's per-camera stats fits best; the identity unless another
    fits clearly better (then the keys that look exchanged are named)."""
    keys = [k for k in measured if _mean(base.get(k)) is not None]
    if len(keys) < 2 or len(keys) > 6:
        return []
    cost = {(a, b): float(np.abs(measured[a]["mean"] - _mean(base.get(b))).sum()) for a in keys for b in keys}
    identity = sum(cost[(k, k)] for k in keys)
    best = min(permutations(keys), key=lambda p: sum(cost[(k, t)] for k, t in zip(keys, p, strict=True)))
    score = sum(cost[(k, t)] for k, t in zip(keys, best, strict=True))
    moved = {k: t for k, t in zip(keys, best, strict=True) if k != t}
    swapped = bool(moved) and identity > 3 * conf.mean_atol and score < conf.clearly * identity
    message = (
        "cameras look exchanged: "
        + ", ".join(f"{k} shows what the base knows as {t}" for k, t in moved.items())
        + f" (distance {score:.3g} exchanged vs {identity:.3g} as named)"
        if swapped
        else f"each camera's frames fit the base's stats of the same key (distance {identity:.3g})"
    )
    return [
        LAYOUT.judge(
            "frames.camera_assignment",
            ", ".join(keys),
            not swapped,
            message,
            expected=keys,
            actual=list(best) if swapped else keys,
            evidence={"distance": {f"{a}->{b}": round(v, 4) for (a, b), v in cost.items()}},
        )
    ]
