"""Rows read from the decoded camera frames (issue 22): video health, channel order, scale, camera keys
and swapped cameras, stale image stats.

The stats files alone cannot tell a BGR camera or two exchanged cameras: here a few frames of a few
episodes per camera are decoded (`pipeline.readers.frames`, one seek per episode) and their per-channel
means, in 0-1 as LeRobot's loader yields them, are set against the dataset's `meta/stats.json` and the
base checkpoint's image stats. Every row carries the episodes and frames it used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader, ImageStats, probe
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.records import Check, Rows
from pipeline.stages.contract.rows import NAME, Sources

ROWS = Rows(NAME, "encoding")
LAYOUT = Rows(NAME, "layout")


def frame_rows(src: Sources) -> list[Check]:
    """Every frame row; one `frames.unavailable` row when the input has cameras but no frames here."""
    a_cams = [k for k, f in src.a.features.items() if f.role == "image"]
    data = LeRobotData(src.c.path) if src.c.kind.startswith("lerobot") else None
    reader = FrameReader(data) if data is not None else None
    cams = reader.cameras() if reader is not None else []
    root = Path(src.c.path)
    no_videos = reader is not None and not reader.data.image_keys() and not (root / "videos").is_dir()
    if reader is None or not cams or no_videos or not (root / "data").is_dir():
        if not a_cams and not src.c.images:
            return []
        why = f"{src.c.kind} input at {src.c.path} holds no decodable frames (stats only)"
        return [LAYOUT("frames.unavailable", "images", "unverifiable", why, severity="soft")]
    out: list[Check] = []
    means: dict[str, np.ndarray] = {}
    for key in cams:
        rows, sample = _sample(src, reader, key)
        out += rows
        if sample is not None:
            means[key] = sample.reshape(-1, 3).mean(axis=0) / 255.0
            out += _channel_row(src, key, means[key]) + _scale_row(src, key) + _stale_row(src, key, sample)
    return out + _key_rows(src, a_cams, cams) + _swap_rows(src, means)


def _episodes(reader: FrameReader, count: int) -> list[int]:
    eps = reader.data.episodes()
    index = [0] if eps is None or eps.index.size == 0 else eps.index.tolist()
    pick = np.unique(np.linspace(0, len(index) - 1, min(count, len(index))).round().astype(int))
    return [int(index[i]) for i in pick]


def _sample(src: Sources, reader: FrameReader, key: str) -> tuple[list[Check], np.ndarray | None]:
    """Decode `per_episode` frames of the sampled episodes; one health row (or one error row) per camera."""
    cfg = src.cfg.frames
    used: dict[int, list[int]] = {}
    frames: list[np.ndarray] = []
    facts: dict[str, Any] = {}
    try:
        for ep in _episodes(reader, cfg.episodes):
            n = reader.timestamps(ep).size
            idx = sorted({*np.linspace(0, n - 1, min(cfg.per_episode, n)).round().astype(int).tolist()})
            if key in reader.data.video_keys():
                facts = probe(reader.data.video_location(key, ep)[0], f"camera {key}, episode {ep}")
            frames.append(reader.frames(key, ep, idx))
            used[ep] = idx
    except InputError as exc:
        return [ROWS("frames.health:" + key, key, "error", str(exc), evidence={"decoded": used})], None
    sample = np.concatenate(frames)
    problems = _health_problems(src, reader, key, sample, facts)
    evidence = {"episodes_frames": used, "video": facts, "frame_shape": list(sample.shape[1:])}
    message = f"{key}: " + ("; ".join(problems) if problems else "sampled frames decode, fps and shape agree")
    row = ROWS("frames.health:" + key, key, "mismatch" if problems else "match", message, evidence=evidence)
    return [row], sample


def _health_problems(
    src: Sources, reader: FrameReader, key: str, sample: np.ndarray, facts: dict[str, Any]
) -> list[str]:
    problems = []
    fps = reader.data.info.get("fps")
    if facts.get("fps") and fps and abs(facts["fps"] - float(fps)) > src.cfg.frames.fps_tolerance:
        problems.append(f"video fps {facts['fps']:g} != info.json fps {fps}")
    shape = (reader.data.features.get(key) or {}).get("shape")
    hwc = list(sample.shape[1:])
    if isinstance(shape, list) and sorted(shape) != sorted(hwc):
        problems.append(f"decoded frames {hwc} (HWC) != info.json shape {shape}")
    a = src.a.features.get(key)
    if a is not None and a.shape and sorted(a.shape) != sorted(hwc):
        problems.append(
            f"decoded frames {hwc} != base input_features shape {list(a.shape)} (no resize named)"
        )
    return problems


def _mean_of(stats: dict[str, dict[str, np.ndarray]], key: str) -> np.ndarray | None:
    mean = (stats.get(key) or {}).get("mean")
    return None if mean is None or np.asarray(mean).size != 3 else np.asarray(mean, np.float64).reshape(3)


def _channel_row(src: Sources, key: str, mean: np.ndarray) -> list[Check]:
    """Sampled means vs the dataset's and the base's image stats, each in both channel orders."""
    cfg = src.cfg.frames
    found: dict[str, Any] = {"decoded_mean_rgb": mean.round(4).tolist()}
    flipped_any = False
    for who, stats in (("dataset", src.c.stats), ("base", src.a.stats)):
        ref = _mean_of(stats, key)
        if ref is None:
            continue
        ref = ref / 255.0 if ref.max() > 1.5 else ref
        same, rev = float(np.abs(mean - ref).sum()), float(np.abs(mean[::-1] - ref).sum())
        flipped = rev < cfg.reversed_ratio * same and same > cfg.min_distance
        flipped_any |= flipped
        found[who] = {"mean": ref.round(4).tolist(), "as_is": round(same, 4), "reversed": round(rev, 4)}
    if len(found) == 1:
        return []
    verdict = "mismatch" if flipped_any else "match"
    text = "fit clearly better reversed: frames look BGR" if flipped_any else "fit in RGB order"
    return [
        ROWS(
            "frames.channels:" + key,
            key,
            verdict,
            f"{key}: decoded channel means {text}",
            expected="RGB",
            actual="BGR" if flipped_any else "RGB",
            evidence=found,
        )
    ]


def _scale_row(src: Sources, key: str) -> list[Check]:
    """The loader yields 0-1 float from video; the base normalizes with its image stats' range."""
    stats = src.a.stats.get(key) or {}
    a = src.a.features.get(key)
    mode = src.a.mode(a) if a is not None else None
    if "max" not in stats:
        return []
    expected = "0-255" if float(np.max(stats["max"])) > 1.5 else "0-1"
    ok = expected == "0-1"
    message = f"{key}: loader yields 0-1 float frames, base image stats span {expected} (mode {mode})"
    return [
        ROWS(
            "frames.scale:" + key,
            key,
            "match" if ok else "mismatch",
            message,
            expected=expected,
            actual="0-1",
            evidence={"base_max": float(np.max(stats["max"])), "normalization": mode},
        )
    ]


def _stale_row(src: Sources, key: str, sample: np.ndarray) -> list[Check]:
    """meta/stats.json image mean/std against the same statistics recomputed from the sampled frames."""
    block = src.c.stats.get(key) or {}
    shipped = {k: np.asarray(block[k], np.float64).reshape(-1) for k in ("mean", "std") if k in block}
    shipped = {k: v for k, v in shipped.items() if v.size == 3}
    if not shipped:
        return []
    scale = 255.0 if shipped.get("mean", np.zeros(3)).max() > 1.5 else 1.0
    acc = ImageStats()
    acc.add(sample)
    recomputed = {k: v.reshape(3) for k, v in acc.result().items() if k in shipped}
    gaps = {k: float(np.abs(recomputed[k] - shipped[k] / scale).max()) for k in shipped}
    gap = max(gaps.values())
    limit = src.cfg.frames.stale_mean
    evidence = {
        "recomputed": {k: v.round(4).tolist() for k, v in recomputed.items()},
        "shipped": {k: (v / scale).round(4).tolist() for k, v in shipped.items()},
        "gaps": {k: round(v, 4) for k, v in gaps.items()},
        "frames": int(sample.shape[0]),
    }
    message = f"{key}: meta/stats.json vs sampled frames differ by {gap:.4f} per channel at most"
    verdict = "match" if gap <= limit else "mismatch"
    return [
        ROWS(
            "frames.stale_stats:" + key,
            key,
            verdict,
            message,
            severity="soft",
            expected=f"<= {limit}",
            actual=round(gap, 4),
            evidence=evidence,
        )
    ]


def _key_rows(src: Sources, a_cams: list[str], cams: list[str]) -> list[Check]:
    """The base's camera keys and order (rename map applied) against the dataset's."""
    if not a_cams:
        return []
    rename = src.b.hints.get("rename_map") or {}
    named = [rename.get(k, k) for k in cams]
    missing = [k for k in a_cams if k not in named]
    extra = [k for k in named if k not in a_cams]
    order = [k for k in named if k in a_cams] == [k for k in a_cams if k in named]
    ok = not missing and not extra and order
    message = f"cameras: base expects {a_cams}, dataset gives {named}" + (
        "" if ok else f" (missing {missing}, extra {extra}, same order: {order})"
    )
    return [
        LAYOUT(
            "frames.cameras",
            "images",
            "match" if ok else "mismatch",
            message,
            expected=a_cams,
            actual=named,
            evidence={"rename_map": rename, "dataset_keys": cams},
        )
    ]


def _swap_rows(src: Sources, means: dict[str, np.ndarray]) -> list[Check]:
    """Each pair of cameras against the base's per-camera stats: exchanged fits clearly better -> swapped."""
    refs = {k: _mean_of(src.a.stats, k) for k in means}
    keys = [k for k, r in refs.items() if r is not None]
    out = []
    for i, x in enumerate(keys):
        for y in keys[i + 1 :]:
            rx, ry = (r / 255.0 if r.max() > 1.5 else r for r in (refs[x], refs[y]))
            named = float(np.abs(means[x] - rx).sum() + np.abs(means[y] - ry).sum())
            swapped = float(np.abs(means[x] - ry).sum() + np.abs(means[y] - rx).sum())
            bad = swapped < src.cfg.frames.swap_ratio * named and named > src.cfg.frames.min_distance
            message = f"{x} and {y}: " + ("frames fit the base's stats exchanged" if bad else "fit as named")
            out.append(
                LAYOUT(
                    f"frames.swapped:{x}|{y}",
                    f"{x}|{y}",
                    "mismatch" if bad else "match",
                    message,
                    evidence={"as_named": round(named, 4), "exchanged": round(swapped, 4)},
                )
            )
    return out
