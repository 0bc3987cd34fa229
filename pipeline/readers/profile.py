"""What the data is, per feature and dim: its kind, range, time at its limits, holds and steps.

A profile, not findings: grippers held shut, actions clipped at +-1, constant padding, a flag's jumps are
what a dataset is, and the health rows judge an episode only against this habit. Everything here comes
from the stats pass: the health facts (`readers.health`: per-episode ranges, holds, largest steps and
one-sample excursions, the dataset's extremes and how many rows sit on them) and a small sample of rows
and steps taken while streaming (`RowSample`: every k-th row, k doubling whenever the sample fills, so
its memory is bounded and it spans the whole dataset).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

SAMPLE_ROWS = 4096  # rows (and steps) kept per feature; the sample halves when it reaches twice this
MAX_LEVELS = 8  # a dim whose sampled values take at most this many values is discrete
MIN_SAMPLE = 32  # fewer sampled values than this cannot tell a discrete dim from a continuous one


class RowSample:
    """Every `every`-th row of each feature and the step into it (NaN at an episode's first row)."""

    def __init__(self, cap: int = SAMPLE_ROWS):
        self.cap, self.every, self.seen = cap, 1, 0
        self.values: dict[str, list[np.ndarray]] = {}
        self.steps: dict[str, list[np.ndarray]] = {}
        self.kept = 0

    def observe(self, data: Mapping[str, np.ndarray], inside: np.ndarray) -> None:
        """`data`: the block's [n, dim] features; `inside`: the row before is the same episode's."""
        n = len(inside)
        while n // self.every > 2 * self.cap:  # a large block: thin first, never copy it whole
            self._halve()
        rows = np.arange((-self.seen) % self.every, n, self.every)
        self.seen += n
        if not len(rows):
            return
        for key, x in data.items():
            prev = x[np.maximum(rows - 1, 0)].astype(np.float64)
            step = np.where((inside[rows] & (rows > 0))[:, None], x[rows] - prev, np.nan)
            self.values.setdefault(key, []).append(x[rows].astype(np.float64))
            self.steps.setdefault(key, []).append(step)
        self.kept += len(rows)
        while self.kept >= 2 * self.cap:
            self._halve()

    def _halve(self) -> None:
        for table in (self.values, self.steps):
            for key, parts in table.items():
                table[key] = [np.concatenate(parts)[::2]]
        self.kept = len(next(iter(self.values.values()))[0]) if self.values else 0
        self.every *= 2

    def facts(self) -> dict[str, dict[str, np.ndarray]]:
        return {
            k: {"values": np.concatenate(self.values[k]), "steps": np.concatenate(self.steps[k])}
            for k in self.values
        }


def merge_samples(samples: Sequence[Mapping[str, Any]], cap: int = SAMPLE_ROWS) -> dict[str, Any]:
    """Array tasks' samples as one (each task's sample thinned to a share of `cap` by its row count)."""
    out: dict[str, Any] = {}
    for sample in samples:
        for key, part in sample.items():
            entry = out.setdefault(key, {"values": [], "steps": []})
            entry["values"].append(np.asarray(part["values"]))
            entry["steps"].append(np.asarray(part["steps"]))
    for entry in out.values():
        for name in ("values", "steps"):
            joined = np.concatenate(entry[name])
            entry[name] = joined[:: max(1, len(joined) // (2 * cap))]
    return out


def kinds(facts: Mapping[str, Any], key: str) -> tuple[list[str], list[list[float] | None]]:
    """Per dim of `key`: "constant" (one value over the data), "discrete" (at most MAX_LEVELS values,
    with its levels), else "continuous"."""
    low = np.asarray(facts["low"][key]["value"], dtype=float)
    high = np.asarray(facts["high"][key]["value"], dtype=float)
    values = np.asarray(((facts.get("sample") or {}).get(key) or {}).get("values", np.empty((0, len(low)))))
    out, levels = [], []
    for d in range(len(low)):
        if low[d] == high[d]:
            out.append("constant")
            levels.append([float(low[d])])
            continue
        seen = np.unique(values[:, d][np.isfinite(values[:, d])]) if len(values) else np.empty(0)
        found = np.unique(np.r_[seen, low[d], high[d]])
        if len(values) >= MIN_SAMPLE and len(found) <= MAX_LEVELS:
            out.append("discrete")
            levels.append([float(v) for v in found])
        else:
            out.append("continuous")
            levels.append(None)
    return out, levels


def profile_rows(facts: Mapping[str, Any], names: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """One row per feature and dim (the `preflight.profile/1` rows)."""
    rows: list[dict[str, Any]] = []
    table = facts.get("episodes") or {}
    length = np.maximum(np.asarray(table.get("rows", []), dtype=float), 1)
    total = max(int(facts.get("rows") or 0), 1)
    for key in sorted(facts.get("low") or {}):
        kind, levels = kinds(facts, key)
        low, high = facts["low"][key], facts["high"][key]
        steps = np.abs(
            np.asarray(((facts.get("sample") or {}).get(key) or {}).get("steps", np.empty((0, 0))))
        )
        spread = _episode(table, key, "hi") - _episode(table, key, "lo")
        longest = _episode(table, key, "longest")
        labels = list(names.get(key) or [])
        for d, k in enumerate(kind):
            lo, hi = float(low["value"][d]), float(high["value"][d])
            at = 1.0 if lo == hi else (int(low["count"][d]) + int(high["count"][d])) / total
            step = steps[:, d][np.isfinite(steps[:, d])] if steps.size else np.empty(0)
            per = spread[:, d] if spread.size else np.empty(0)
            rows.append(
                {
                    "feature": key,
                    "dim": d,
                    "name": labels[d] if d < len(labels) else None,
                    "kind": k,
                    "levels": levels[d],
                    "min": lo,
                    "max": hi,
                    "at_limits": round(min(at, 1.0), 4),
                    "held_longest": int(longest[:, d].max()) if longest.size else 0,
                    "step_p50": float(np.quantile(step, 0.5)) if step.size else 0.0,
                    "step_p99": float(np.quantile(step, 0.99)) if step.size else 0.0,
                    "moving_episodes": round(float(np.mean(per > 0)), 4) if per.size else 0.0,
                    "episode_spread_p50": float(np.median(per)) if per.size else 0.0,
                    "held_share_p50": round(float(np.median(longest[:, d] / length)), 4)
                    if longest.size
                    else 0.0,
                }
            )
    return rows


def _episode(table: Mapping[str, Any], key: str, fact: str) -> np.ndarray:
    values = table.get(f"{key}/{fact}")
    return np.asarray(values, dtype=float) if values is not None else np.empty((0, 0))


__all__ = ["RowSample", "kinds", "merge_samples", "profile_rows"]
