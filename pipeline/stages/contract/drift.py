"""Drift of the statistics: the shipped stats vs the data they claim to describe (stale), and the base's
baked-in stats vs the dataset's (shift).

Stale stats are exact moments recomputed from the data, compared with what the dataset ships; shipped
quantiles are judged by their rank in the data. A stale row gives, per dim, the shipped and recomputed
values, their ratio and the likely cause (float32 cancellation in the stats tool, a std-only
disagreement, or stats of other data). A shift is measured per dim in units of the base's
std, after undoing any permutation the layout checks found, and leaves out dims other rows explained.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.normalization import QUANTILE_LEVELS, stats_shift
from pipeline.record.records import Check, Rows
from pipeline.stages.contract import quantiles, stale_effect
from pipeline.stages.contract.config import StaleConfig
from pipeline.stages.contract.rows import (
    NAME,
    Pair,
    Sources,
    dim_values,
    dims_text,
    fmt,
    usable_stats,
    values_text,
    vec,
)

ROWS = Rows(NAME, "normalization")
QUANTILE_NOTE = (
    "rank = [fraction of the data below, at or below] the shipped value; LeRobot v3 "
    "averages per-episode quantiles, which is not the dataset quantile: those are judged as that average"
)


def stale_rows(src: Sources, pair: Pair) -> list[Check]:
    """Shipped stats vs stats recomputed from the data (exact moments; quantiles by rank)."""
    if pair.c is None:
        return []
    c_key, key = pair.c.key, pair.a.key
    shipped, rec = src.c.stats.get(c_key), src.c.recomputed.get(c_key)
    if shipped is None or rec is None:
        return []
    problems, detail = _stale_dims(shipped, rec, src.cfg.stale)
    roundoff = stale_effect.roundoff_constants(shipped, rec)
    problems = {s: kept for s, ds in problems.items() if (kept := [d for d in ds if d not in roundoff])}
    count_s = vec(shipped, "count")
    counts = {"shipped": None if count_s is None else float(count_s[0]), "rows": int(vec(rec, "count")[0])}
    evidence = {
        "per_stat_dims": problems,
        "count": counts,
        **detail,
        "roundoff_constant_dims": sorted(roundoff),
    }
    stale_dims = sorted({d for v in problems.values() for d in v})
    if problems:
        diagnosis = diagnose(shipped, rec, problems, src.cfg.stale, pair.c.names)
        evidence["diagnosis"] = diagnosis
        evidence["values"] = dim_values(src, pair, stale_dims)
        causes = {item["cause"] for item in diagnosis.values()}
        found = stale_effect.judged(shipped, rec, pair.b_mode, stale_dims)
        evidence["effect"] = {**found, "blocks_above": src.cfg.stale.effect}
        tail = (
            "the normalizer would use stats of other data"
            if causes == {"other_data"}
            else "the normalizer would use these wrong stats"
        )
        message = (
            f"{c_key}: shipped stats disagree with the data in dim(s) "
            f"{dims_text(stale_dims, pair.c.names)} ({', '.join(problems)}): "
            + "; ".join(item["text"] for item in list(diagnosis.values())[:4])
            + (f"; +{len(diagnosis) - 4} more in evidence" if len(diagnosis) > 4 else "")
            + f"; {tail}"
            + stale_effect.effect_text(found, src.cfg.stale.effect, pair.c.names)
        )
        fields: dict[str, Any] = {
            "severity": src.cfg.stale.severity if found["largest"] > src.cfg.stale.effect else "soft",
            "expected": "stats of this data",
            "actual": f"{len(stale_dims)} dim(s) stale (likely cause: {', '.join(sorted(causes))})",
        }
    else:
        message = f"{c_key}: shipped mean/std/min/max agree with the data ({counts['rows']} rows)"
        fields = {"actual": "consistent"}
    verdict = "mismatch" if problems else "match"
    row = ROWS(f"normalization.stale:{key}", key, verdict, message, evidence=evidence, **fields)
    return [row, *_quantile_rank_rows(src, pair)]


def _stale_dims(
    shipped: dict[str, np.ndarray], rec: dict[str, np.ndarray], cfg: StaleConfig
) -> tuple[dict[str, list[int]], dict[str, Any]]:
    """Per shipped stat, the dims off the data beyond the thresholds; and the z/ratio evidence."""
    std_r, lo_r, hi_r = vec(rec, "std"), vec(rec, "min"), vec(rec, "max")
    span = np.maximum(hi_r - lo_r, 1e-12)
    # float32 round-off of the tool that wrote the stats: ~1e-4 of the value's magnitude is noise
    noise = 1e-4 * np.maximum(1.0, np.abs(vec(rec, "mean")))
    floor = np.maximum(std_r, noise)
    problems: dict[str, list[int]] = {}
    detail: dict[str, Any] = {}
    same_size = {
        s: vec(shipped, s) is not None and vec(shipped, s).size == std_r.size
        for s in ("mean", "std", "min", "max")
    }
    if same_size.get("mean"):
        z = np.abs(vec(shipped, "mean") - vec(rec, "mean")) / floor
        problems["mean"] = np.where(z > cfg.mean_z)[0].tolist()
        detail["mean_z"] = fmt(z, 3)
    if same_size.get("std"):
        ratio = (vec(shipped, "std") + 1e-12) / (std_r + 1e-12)
        off = (ratio > cfg.std_ratio) | (ratio < 1 / cfg.std_ratio)
        problems["std"] = np.where(off & (np.abs(vec(shipped, "std") - std_r) > noise))[0].tolist()
        detail["std_ratio"] = fmt(ratio, 3)
    for name, ref in (("min", lo_r), ("max", hi_r)):
        if same_size.get(name):
            problems[name] = np.where(np.abs(vec(shipped, name) - ref) / span > cfg.range_frac)[0].tolist()
    return {k: v for k, v in problems.items() if v}, detail


EPS32 = float(np.finfo(np.float32).eps)


def diagnose(
    shipped: dict[str, np.ndarray],
    rec: dict[str, np.ndarray],
    problems: dict[str, list[int]],
    cfg: StaleConfig,
    names: list[str] | None,
) -> dict[int, dict[str, Any]]:
    """Per stale dim: shipped vs recomputed value and ratio for each stat off, and the likely cause.

    A std off while the mean agrees to float32 precision and |mean|/std >= `cancel_condition` is
    float32 cancellation (E[x^2] - E[x]^2 loses the variance's digits when the mean dwarfs the spread):
    the data is right, the stats tool was not; recomputing in float64 fixes it. Anything else off (the
    mean, the range) means the stats describe other data (another version, a subset, an edit)."""
    out: dict[int, dict[str, Any]] = {}
    for d in sorted({d for v in problems.values() for d in v}):
        off = {s: _pair_at(shipped, rec, s, d) for s, dims in problems.items() if d in dims}
        mean_s, mean_r, std_r = vec(shipped, "mean"), vec(rec, "mean"), vec(rec, "std")
        rel = None if mean_s is None else abs(mean_s[d] - mean_r[d]) / max(abs(mean_r[d]), 1e-30)
        cond = abs(mean_r[d]) / max(std_r[d], 1e-30)
        item: dict[str, Any] = {"name": names[d] if names and d < len(names) else None, "stats": off}
        item["mean_rel_diff"] = None if rel is None else float(f"{rel:.3g}")
        item["abs_mean_over_std"] = float(f"{cond:.4g}")
        std_s = vec(shipped, "std")
        if std_s is not None and "std" in off:
            # the variance error in float32 ulps of mean^2: a few to a few hundred is float32 round-off
            item["var_error_in_f32_ulps_of_mean2"] = float(
                f"{abs(std_s[d] ** 2 - std_r[d] ** 2) / (EPS32 * mean_r[d] ** 2 + 1e-300):.3g}"
            )
        cancel = set(off) == {"std"} and rel is not None and rel <= cfg.cancel_mean_rel
        cancel = cancel and cond >= cfg.cancel_condition
        item["cause"] = (
            "float32_cancellation" if cancel else ("std_only" if set(off) == {"std"} else "other_data")
        )
        item["text"] = _diagnosis_text(d, item)
        out[d] = item
    return out


def _pair_at(shipped: dict, rec: dict, stat: str, d: int) -> dict[str, float]:
    s, r = float(vec(shipped, stat)[d]), float(vec(rec, stat)[d])
    return {
        "shipped": float(f"{s:.6g}"),
        "recomputed": float(f"{r:.6g}"),
        "ratio": float(f"{s / r:.4g}") if r else None,
    }


def _diagnosis_text(d: int, item: dict[str, Any]) -> str:
    label = f"dim {d}" + (f" ({item['name']})" if item["name"] else "")
    values = ", ".join(
        f"{s} shipped {v['shipped']:.6g} vs recomputed {v['recomputed']:.6g}"
        + (f" ({v['ratio']:.3g}x)" if v["ratio"] is not None else "")
        for s, v in item["stats"].items()
    )
    if item["cause"] == "float32_cancellation":
        why = (
            f"the mean agrees to {item['mean_rel_diff']:.1e} relative and |mean|/std = "
            f"{item['abs_mean_over_std']:.3g}: float32 cancellation in the stats computation "
            "(E[x^2] - E[x]^2 in float32), not other data; recomputing the stats in float64 fixes it"
        )
    elif item["cause"] == "std_only":
        why = (
            f"only the std is off (mean agrees to {item['mean_rel_diff']:.1e} relative, |mean|/std = "
            f"{item['abs_mean_over_std']:.3g}): a different std computation; recompute the stats"
        )
    else:
        why = "the stats describe other data (a different version, subset or edit of it)"
    return f"{label}: {values}; {why}"


def _quantile_rank_rows(src: Sources, pair: Pair) -> list[Check]:
    """Shipped quantiles: LeRobot's average of per-episode quantiles is judged as that average
    (`quantiles.py`); other shipped quantiles, and an average that is not one, by their rank in the data."""
    ranks = src.c.shipped_ranks.get(pair.c.key) if pair.c else None
    if not ranks or pair.c is None:
        return []
    key, check_id, tol = pair.a.key, f"normalization.quantiles:{pair.a.key}", src.cfg.stale.quantile_rank
    averaged = quantiles.episode_average(src, pair.c.key, list(ranks))
    if averaged is not None and averaged.is_average:
        return [_averaged_row(src, pair, averaged)]
    rec = src.c.recomputed[pair.c.key]
    off = _ranks_off(rec, ranks, tol)
    evidence = {
        "shipped_quantile_ranks": {q: fmt(r, 3) for q, r in ranks.items()},
        "tolerance": tol,
        "note": QUANTILE_NOTE,
        **({"per_episode": quantiles.evidence(averaged)} if averaged is not None else {}),
    }
    if not off:
        message = f"{pair.c.key}: shipped quantiles sit within {tol:g} of their levels in the data"
        return [ROWS(check_id, key, "match", message, severity="soft", evidence=evidence)]
    dims = sorted({d for v in off.values() for d in v})
    evidence["values"] = dim_values(src, pair, dims, stats=("mean", "std", *QUANTILE_LEVELS))
    neither = (
        f"; nor are they the length-weighted average of meta/episodes' per-episode quantiles (off in "
        f"{', '.join(f'{q} dim(s) {d}' for q, d in averaged.off_average.items())}): stale"
        if averaged is not None
        else ""
    )
    message = (
        f"{pair.c.key}: shipped quantiles are off their level by > {tol:g} in rank in dim(s) "
        f"{dims_text(dims, pair.c.names)} ({', '.join(off)}); "
        + "; ".join(
            f"dim {d} {q}: shipped {_num(vec(src.c.stats[pair.c.key], q), d)} sits at rank "
            f"{fmt(ranks[q][d], 3)}"
            + (f", recomputed {_num(vec(rec, q), d)}" if vec(rec, q) is not None else "")
            for q, ds in list(off.items())[:2]
            for d in ds[:2]
        )
        + neither
    )
    return [
        ROWS(
            check_id,
            key,
            "mismatch",
            message,
            severity=src.cfg.stale.quantile_severity,
            expected="q01/q99 at ranks 0.01/0.99",
            actual=f"{len(dims)} dim(s) off",
            evidence=evidence,
        )
    ]


def _ranks_off(rec: dict[str, np.ndarray], ranks: dict[str, np.ndarray], tol: float) -> dict[str, list[int]]:
    """Per level, the varying dims whose shipped quantile sits more than `tol` in rank from its level."""
    varying = vec(rec, "max") > vec(rec, "min")
    off = {
        q: [
            int(d)
            for d in np.where(
                varying & ((QUANTILE_LEVELS[q] < r[:, 0] - tol) | (QUANTILE_LEVELS[q] > r[:, 1] + tol))
            )[0]
        ]
        for q, r in ranks.items()
    }
    return {q: d for q, d in off.items() if d}


def _averaged_row(src: Sources, pair: Pair, found: quantiles.Averaged) -> Check:
    """stats.json's quantiles are the episodes' average: stale only where an episode's own quantile lies
    outside that episode's data."""
    assert pair.c is not None
    key, check_id = pair.a.key, f"normalization.quantiles:{pair.a.key}"
    what = (
        f"{pair.c.key}: shipped quantiles are LeRobot's per-episode quantiles averaged over the "
        f"{found.episodes} episodes (weighted by length), which LeRobot normalises with"
    )
    evidence = {"note": QUANTILE_NOTE, **quantiles.evidence(found)}
    if not found.outside:
        checked = f", each of {found.compared} followed episodes' within its data" if found.compared else ""
        message = f"{what}: stats.json is their average{checked}"
        return ROWS(check_id, key, "match", message, severity="soft", evidence=evidence)
    message = (
        f"{what}, but {len(found.outside)} episode(s)' own quantiles lie outside that episode's data, so "
        f"they describe other data (stale): {quantiles.outside_text(found)}"
    )
    return ROWS(
        check_id,
        key,
        "mismatch",
        message,
        severity=src.cfg.stale.quantile_severity,
        expected="each episode's quantiles within its data",
        actual=f"{len(found.outside)} episode(s) outside",
        evidence=evidence,
    )


def _num(values: np.ndarray | None, d: int) -> str:
    return "-" if values is None or d >= values.size else f"{values[d]:.5g}"


def shift_rows(src: Sources, pair: Pair) -> list[Check]:
    """Base's baked-in stats vs the dataset's, per dim in units of the base's std."""
    if pair.c is None:
        return []
    a_stats, rec = usable_stats(src.a.stats.get(pair.a.key)), src.c.recomputed.get(pair.c.key)
    mean_a, std_a = vec(a_stats, "mean"), vec(a_stats, "std")
    if mean_a is None or std_a is None or rec is None or mean_a.size != vec(rec, "mean").size:
        return []
    perm = src.permutations.get(pair.a.key, {})
    order = np.array([perm.get(i, i) for i in range(mean_a.size)])
    mean_c, std_c = vec(rec, "mean")[order], vec(rec, "std")[order]
    z, ratio = stats_shift(mean_a, std_a, mean_c, std_c)
    explained = src.explained.get(pair.a.key, {})
    cfg = src.cfg.shift
    off = (z > cfg.soft_z) | (ratio > cfg.std_ratio) | (ratio < 1 / cfg.std_ratio)
    flagged = [int(d) for d in np.where(off)[0] if int(d) not in explained]
    hard = [d for d in flagged if cfg.hard_z is not None and z[d] > cfg.hard_z]
    evidence = {
        "z_mean": fmt(z, 3),
        "std_ratio": fmt(ratio, 3),
        "explained_elsewhere": explained,
        "units": "|mean_C - mean_A| / std_A",
    }
    key = pair.a.key
    fields: dict[str, Any] = {"expected": "base stats", "evidence": evidence}
    if not flagged:
        message = f"{pair.c.key}: dataset within {cfg.soft_z} base std of the base's stats in every dim" + (
            f" (dims {sorted(explained)} explained by other rows)" if explained else ""
        )
        return [
            ROWS(
                f"normalization.shift:{key}", key, "match", message, severity="soft", actual="close", **fields
            )
        ]
    evidence["values"] = dim_values(src, pair, flagged, c_dims={int(d): int(order[d]) for d in flagged})
    message = (
        f"{pair.c.key}: dim(s) {dims_text(flagged, pair.c.names)} differ from the base's stats "
        f"(max {float(np.max(z[flagged])):.2f} base std, std ratio up to "
        f"{float(np.max(np.maximum(ratio[flagged], 1 / ratio[flagged]))):.2f}x). "
        + values_text(evidence["values"])
    )
    severity = "hard" if hard else "soft"
    actual = f"{len(flagged)} dim(s) shifted"
    return [
        ROWS(
            f"normalization.shift:{key}", key, "mismatch", message, severity=severity, actual=actual, **fields
        )
    ]
