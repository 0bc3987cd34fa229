"""Dtype, range and encoding: vector dtypes, image scale (0-1 vs 0-255) and channel order (RGB vs BGR).

Channel order is read from the data where images are available: C's per-channel means are compared with
A's image stats in both orders; a reversed order that fits much better is reported. Image scale comes
from the pixel range (raw arrays) or the image stats (LeRobot stores 0-1 stats for decoded frames).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.contract.rows import NAME, Pair, Sources

ROWS = Rows(NAME, "encoding")

FLOATS = ("float16", "float32", "float64", "bfloat16")


def dtype_rows(src: Sources, pair: Pair) -> list[Check]:
    if pair.c is None or pair.c.dtype is None:
        return []
    key, dtype = pair.a.key, pair.c.dtype
    expected = pair.a.dtype or "float"
    ok = dtype in FLOATS if expected == "float" else dtype == expected
    return [
        ROWS(
            f"encoding.dtype:{key}",
            key,
            "match" if ok else "mismatch",
            f"{pair.c.key}: stored as {dtype}" + ("" if ok else f", expected {expected}"),
            severity="soft",
            expected=expected,
            actual=dtype,
        )
    ]


def _scale_of(summary: dict[str, Any]) -> str | None:
    if "max" in summary and summary.get("dtype") not in (None, "video", "image"):
        return "0-255" if float(summary["max"]) > 1.5 else "0-1"
    stats = summary.get("stats") or {}
    if "max" in stats:
        return "0-255" if float(np.max(stats["max"])) > 1.5 else "0-1"
    return None


def _channel_means(summary: dict[str, Any]) -> np.ndarray | None:
    if "channel_means" in summary:
        return np.asarray(summary["channel_means"], dtype=np.float64)
    mean = (summary.get("stats") or {}).get("mean")
    return None if mean is None else np.asarray(mean, dtype=np.float64).reshape(-1)


def image_rows(src: Sources) -> list[Check]:
    out = []
    a_images = {k: f for k, f in src.a.features.items() if f.role == "image"}
    for key, summary in src.c.images.items():
        a_key = key if key in a_images else None
        expected_scale = src.a.hints.get("image_scale")
        a_stats = src.a.stats.get(a_key) if a_key else None
        if expected_scale is None and a_stats and "max" in a_stats:
            expected_scale = "0-255" if float(np.max(a_stats["max"])) > 1.5 else "0-1"
        actual = _scale_of(summary)
        raw_uint8 = summary.get("dtype") == "uint8"
        if expected_scale and actual:
            c_after = "0-1" if raw_uint8 and src.c.kind.startswith("lerobot") else actual
            verdict = "match" if c_after == expected_scale else "mismatch"
            out.append(
                ROWS(
                    f"encoding.image_scale:{key}",
                    key,
                    verdict,
                    f"{key}: base expects {expected_scale}, data is {actual} ({summary.get('dtype')})",
                    expected=expected_scale,
                    actual=actual,
                    evidence={k: v for k, v in summary.items() if k != "stats"},
                )
            )
        out += _channel_rows(src, key, summary, a_stats)
    return out


def _channel_rows(src: Sources, key: str, summary: dict[str, Any], a_stats: dict | None) -> list[Check]:
    c_means = _channel_means(summary)
    a_mean = None if not a_stats or "mean" not in a_stats else np.asarray(a_stats["mean"]).reshape(-1)
    declared = src.a.hints.get("channel_order")
    if c_means is None or c_means.size != 3 or a_mean is None or a_mean.size != 3:
        if declared and c_means is not None:
            return [
                ROWS(
                    f"encoding.channels:{key}",
                    key,
                    "unverifiable",
                    f"{key}: base declares {declared}; no base image stats to compare channel means with",
                    expected=declared,
                    actual=None,
                    evidence={"channel_means": c_means.tolist()},
                )
            ]
        return []
    scale = 255.0 if float(np.max(c_means)) > 1.5 and float(np.max(a_mean)) <= 1.5 else 1.0
    c = c_means / scale
    same, flipped = float(np.abs(c - a_mean).sum()), float(np.abs(c[::-1] - a_mean).sum())
    bgr = flipped < 0.5 * same and same > 0.05
    evidence = {
        "C_channel_means": c.round(4).tolist(),
        "A_channel_means": a_mean.round(4).tolist(),
        "distance_as_is": round(same, 4),
        "distance_reversed": round(flipped, 4),
    }
    return [
        ROWS(
            f"encoding.channels:{key}",
            key,
            "mismatch" if bgr else "match",
            f"{key}: channel means fit the base's "
            + ("much better reversed: BGR?" if bgr else "in RGB order"),
            severity="soft",
            expected=declared or "RGB",
            actual="BGR?" if bgr else "RGB",
            evidence=evidence,
        )
    ]
