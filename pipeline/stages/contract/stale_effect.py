"""Stale stats judged by what they do to the model: how far the shipped stats move the normalized data
away from where the data's own stats put it, over the data's range, in the normalizer's units.

A disagreement between shipped and recomputed stats matters through the normalizer alone: the model sees
`(x - mean) / (std + eps)` (MEAN_STD) or `2 (x - min) / (max - min) - 1` (MIN_MAX). Both are affine in x,
so the largest difference over the data sits at its minimum or maximum. A dim constant in the data is a
constant after either normalization: its shipped mean off by float32 round-off and a std of that size
instead of 0 change nothing the model learns (what a constant does at deployment is `constant_rows`').
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.stages.contract.rows import vec

EPS = 1e-8  # LeRobot's normalizer floor: std + eps, and max - min floored at eps
# the modes whose scale comes from the moments this row compares (mean/std/min/max); the quantile modes
# read q01/q99 (judged by the quantile rows), IDENTITY reads nothing
MOMENT_MODES = ("MEAN_STD", "MIN_MAX")


def roundoff_constants(shipped: dict[str, np.ndarray], rec: dict[str, np.ndarray]) -> set[int]:
    """Dims constant in the data whose shipped mean/min/max sit on the value and whose shipped std is 0,
    each up to float32 round-off (1e-4 of the value's magnitude): not stale, the same stats written in
    float32."""
    lo, hi, mean = vec(rec, "min"), vec(rec, "max"), vec(rec, "mean")
    if lo is None or hi is None or mean is None:
        return set()
    noise = 1e-4 * np.maximum(1.0, np.abs(mean))
    ok = hi <= lo
    for stat, ref in (("mean", mean), ("min", lo), ("max", hi), ("std", np.zeros_like(mean))):
        values = vec(shipped, stat)
        if values is not None and values.size == mean.size:
            ok = ok & (np.abs(values - ref) <= noise)
    return {int(d) for d in np.flatnonzero(ok)}


def _normalized(stats: dict[str, np.ndarray], mode: str, x: np.ndarray) -> np.ndarray | None:
    if mode == "MEAN_STD":
        mean, std = vec(stats, "mean"), vec(stats, "std")
        return None if mean is None or std is None else (x - mean) / (std + EPS)
    lo, hi = vec(stats, "min"), vec(stats, "max")
    if lo is None or hi is None:
        return None
    span = np.where(hi - lo == 0, EPS, hi - lo)
    return 2 * (x - lo) / span - 1


def effect(shipped: dict[str, np.ndarray], rec: dict[str, np.ndarray], mode: str) -> np.ndarray | None:
    """Per dim, max over the data's range of |normalized with shipped - normalized with recomputed|
    (0 for a dim constant in the data); None where the shipped stats lack what `mode` reads."""
    lo, hi = vec(rec, "min"), vec(rec, "max")
    out = None
    for x in (lo, hi):
        a, b = _normalized(shipped, mode, x), _normalized(rec, mode, x)
        if a is None or b is None or a.size != x.size:
            return None
        gap = np.abs(a - b)
        out = gap if out is None else np.maximum(out, gap)
    assert out is not None
    return np.where(hi > lo, out, 0.0)


def judged(
    shipped: dict[str, np.ndarray], rec: dict[str, np.ndarray], mode: str | None, dims: list[int]
) -> dict[str, Any]:
    """The effect of the stale dims under the mode training uses (every moment mode where it is not
    known: a dataset checked alone): `{mode, modes, largest, dim, per_dim}`; `largest` 0 where the mode
    reads none of these stats."""
    modes = modes_for(mode)
    best: dict[str, Any] = {"mode": mode, "modes": modes, "largest": 0.0, "dim": None, "per_dim": {}}
    for m in modes:
        values = effect(shipped, rec, m)
        if values is None or not dims:
            continue
        for d in dims:
            best["per_dim"][d] = max(best["per_dim"].get(d, 0.0), float(f"{values[d]:.4g}"))
        d = max(dims, key=lambda i: values[i])
        if values[d] > best["largest"]:
            best.update(largest=float(f"{values[d]:.4g}"), dim=int(d), worst_mode=m)
    return best


def effect_text(found: dict[str, Any], limit: float, names: list[str] | None) -> str:
    """`; the shipped stats move the normalized data by up to 3.2 (MEAN_STD, dim 4) ...` for a message."""
    if not found["modes"]:
        return (
            f"; training normalizes with {found['mode']}, which reads none of these stats: "
            "they move nothing the model sees"
        )
    d = found["dim"]
    label = "" if d is None else f", dim {d}" + (f" ({names[d]})" if names and d < len(names) else "")
    which = "" if found["mode"] else " under MEAN_STD or MIN_MAX (no training config: either may read them)"
    verdict = "above" if found["largest"] > limit else "within"
    return (
        f"; over the data they move the normalized values by up to {found['largest']:.3g} "
        f"({found.get('worst_mode', found['mode'])}{label}){which}, {verdict} the {limit:g} that blocks"
    )


def modes_for(mode: str | None) -> list[str]:
    """The moment modes to judge by: the one training uses, both where it is not known, none where it
    reads no moments (a quantile mode, IDENTITY)."""
    return [mode] if mode in MOMENT_MODES else list(MOMENT_MODES) if mode is None else []


def removal_effect(
    stats: dict[str, float], rows: int, value: float, rest: tuple[float, float], modes: list[str]
) -> tuple[float, str | None]:
    """How far one sample (`value`) moves the normalized data through the stats it enters: `effect` of
    the stats with it against those without it, over the other samples' range `rest` (lo, hi), and the
    mode giving the largest. `stats`: one dim's mean, std, min and max over `rows` samples, that one
    included."""
    n, mean, std = float(rows), stats["mean"], stats["std"]
    if n < 3:
        return 0.0, None
    mean2 = (n * mean - value) / (n - 1)
    var2 = (n * (std * std + mean * mean) - value * value) / (n - 1) - mean2 * mean2
    without = {"mean": mean2, "std": float(np.sqrt(max(var2, 0.0))), "min": rest[0], "max": rest[1]}
    arrays = [{k: np.array([v]) for k, v in side.items()} for side in (stats, without)]
    best: tuple[float, str | None] = (0.0, None)
    for mode in modes:
        values = effect(arrays[0], arrays[1], mode)
        if values is not None and values[0] > best[0]:
            best = (float(f"{values[0]:.4g}"), mode)
    return best
