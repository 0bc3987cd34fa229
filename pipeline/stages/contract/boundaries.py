"""Episode boundaries from the pictures (issue 34): in a video shared by many episodes (LeRobot v3.0),
the scene changes most between one episode's last frame and the next one's first (the reset), so the
largest jump among the frames around an episode's `from_timestamp` must fall exactly on it.

A `from_timestamp` a few frames off (a conversion that rounded, a merge that dropped frames) hands an
episode some of its neighbour's frames: counts and spans still agree, the pictures do not. Only
`2 * max_lag` frames per sampled boundary are decoded (one seek each, through the frame reader's
decode path). A boundary without a clear jump (a recording that runs on through the reset) decides
nothing and is counted as such.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader, decode_at
from pipeline.record.records import Check, Rows
from pipeline.stages.contract.config import FramesConfig
from pipeline.stages.contract.motion import image_motion
from pipeline.stages.contract.rows import NAME

ROWS = Rows(NAME, "layout")


def boundary_offset(motion: np.ndarray, around: int, ratio: float) -> tuple[int | None, float]:
    """Where the clear jump lies relative to the boundary (0: on it; None: no clear jump), and how many
    times the next largest change it is. `motion[j]`: frame j to j+1 of the 2*around frames decoded."""
    order = np.argsort(motion)[::-1]
    top, second = float(motion[order[0]]), float(motion[order[1]]) if motion.size > 1 else 0.0
    strength = top / second if second > 0 else float("inf")
    if top <= 0 or strength < ratio:
        return None, strength
    return int(order[0]) + 1 - around, strength


def boundary_rows(cfg: FramesConfig, reader: FrameReader, key: str, episodes: list[int]) -> list[Check]:
    """One row per camera in a shared-file layout: the sampled episodes whose reset jump is off their
    `from_timestamp`, by how many frames; nothing for one file per episode (no boundary inside a file)."""
    fps = float(reader.data.info.get("fps") or 0)
    if key not in reader.data.video_keys() or not str(reader.data.version).startswith("v3") or not fps:
        return []
    around = cfg.max_lag
    found: dict[str, Any] = {"on": [], "off": {}, "no_jump": [], "skipped": {}}
    for ep in episodes:
        try:
            path, start, _ = reader.data.video_location(key, ep)
            if start * fps < around - 1e-6:
                found["skipped"][str(ep)] = "first in its file"
                continue
            times = start + np.arange(-around, around) / fps
            frames = decode_at(
                path, times, tolerance_s=reader.tolerance_s, what=f"camera {key}, episode {ep}"
            )
        except InputError as exc:
            found["skipped"][str(ep)] = str(exc)
            continue
        offset, strength = boundary_offset(image_motion(frames), around, cfg.jump_ratio)
        if offset is None:
            found["no_jump"].append(ep)
        elif offset == 0:
            found["on"].append(ep)
        else:
            found["off"][str(ep)] = {"offset": offset, "strength": round(strength, 2)}
    return [_row(cfg, key, found)]


def _row(cfg: FramesConfig, key: str, found: dict[str, Any]) -> Check:
    limits = f"{2 * cfg.max_lag} frames around each boundary, a jump >= {cfg.jump_ratio}x the next change"
    evidence = {**found, "thresholds": {"max_lag": cfg.max_lag, "jump_ratio": cfg.jump_ratio}}
    counts = f"{len(found['on'])} on their boundary, {len(found['no_jump'])} without a clear jump"
    if found["off"]:
        named = "; ".join(_said(int(e), v["offset"]) for e, v in found["off"].items())
        message = f"{key}: {named}; {counts} ({limits})"
        actual = {e: v["offset"] for e, v in found["off"].items()}
        return ROWS(
            "frames.boundaries:" + key, key, "mismatch", message, expected=0, actual=actual, evidence=evidence
        )
    if not found["on"] and found["no_jump"]:  # a recording that runs on through its resets: nothing to place
        message = (
            f"{key}: no sampled boundary shows a clear reset jump, so the pictures place no boundary here "
            f"(frames.episode_frames judges a neighbour's frames from the motion): {counts} ({limits})"
        )
        return ROWS(
            "frames.boundaries:" + key, key, "match", message, severity="soft",
            evidence={**evidence, "informational": True},
        )  # fmt: skip
    if not found["on"]:
        message = f"{key}: no sampled boundary could be decoded ({counts}; {limits})"
        return ROWS(
            "frames.boundaries:" + key, key, "unverifiable", message, severity="soft", evidence=evidence
        )
    message = f"{key}: every clear reset jump falls on its episode's from_timestamp: {counts} ({limits})"
    return ROWS("frames.boundaries:" + key, key, "match", message, expected=0, actual=0, evidence=evidence)


def _said(episode: int, offset: int) -> str:
    if offset > 0:
        return (
            f"episode {episode}: the reset jump lies {offset} frame(s) after its from_timestamp (its first "
            f"{offset} frame(s) are the previous episode's)"
        )
    return (
        f"episode {episode}: the reset jump lies {-offset} frame(s) before its from_timestamp (its span "
        f"starts {-offset} frame(s) into the episode, and runs as far into the next)"
    )
