"""Normalization contract: the mode A was built with vs the mode B will train with, and whether C
has the stats that mode needs, in a form that will not blow up or be silently skipped.

LeRobot's normalizer looks stats up by exact feature key and passes a feature through unnormalized when
the key is missing (its issues #821, #1763), so a missing or renamed key is a hard finding, not a
warning. The shipped stats are also compared with stats recomputed from the data (stale stats).
"""

from __future__ import annotations

import difflib

import numpy as np

from pipeline.records import Check
from pipeline.stages.contract.rows import (
    NEEDS,
    SCALE_PAIR,
    Pair,
    Sources,
    dims_text,
    fmt,
    row,
    usable_stats,
    vec,
)


def mode_rows(src: Sources) -> list[Check]:
    """One row per feature type A uses: A's mode vs B's mode (an override contradicting the base)."""
    types = dict.fromkeys(f.type for f in src.a.features.values() if f.role != "other")
    out = []
    for ftype in types:
        a_mode, b_mode = src.a.norm_map.get(ftype), src.b.norm_map.get(ftype)
        effective = b_mode or a_mode
        evidence = {
            "A.source": src.a.hints.get("mode_source", src.a.path),
            "B.source": src.b.path,
            "B.inherits": b_mode is None,
        }
        if a_mode is None:
            out.append(
                row(
                    f"normalization.mode:{ftype}",
                    "normalization",
                    ftype,
                    "unverifiable",
                    f"A ({src.a.kind}) does not encode the {ftype} normalization mode; give it in a "
                    "contract card or model.normalization_mapping",
                    expected=None,
                    configured=effective,
                    evidence=evidence,
                )
            )
            continue
        verdict = "match" if effective == a_mode else "mismatch"
        msg = f"{ftype}: base built with {a_mode}, training uses {effective}" + (
            ""
            if verdict == "match"
            else " (an override contradicting the base's design saturates or clips its inputs/targets)"
        )
        if verdict == "mismatch":
            quantiles = _has_quantiles(src, ftype)
            evidence["dataset_has_quantiles"] = quantiles
            lacking = [k for k, ok in quantiles.items() if not ok]
            if a_mode.startswith("QUANTILE") and lacking:
                msg += f"; the dataset ships no q01/q99 for {lacking}, the likely reason for the override"
        out.append(
            row(
                f"normalization.mode:{ftype}",
                "normalization",
                ftype,
                verdict,
                msg,
                expected=a_mode,
                configured=effective,
                actual=_c_supports(src, ftype),
                evidence=evidence,
            )
        )
    return out


def _features_of_type(src: Sources, ftype: str) -> list[str]:
    return [k for k, f in src.c.features.items() if f.type == ftype]


def _has_quantiles(src: Sources, ftype: str) -> dict[str, bool]:
    return {k: {"q01", "q99"} <= set(src.c.stats.get(k, {})) for k in _features_of_type(src, ftype)}


def _c_supports(src: Sources, ftype: str) -> str:
    keys = _features_of_type(src, ftype)
    if not keys:
        return "no such feature in C"
    have = set.intersection(*(set(src.c.stats.get(k, {})) for k in keys))
    modes = [m for m, need in NEEDS.items() if m != "IDENTITY" and set(need) <= have]
    return "stats for " + (", ".join(modes) if modes else "no mode")


def stats_rows(src: Sources, pair: Pair) -> list[Check]:
    """C has the stats B's mode needs for this feature (or the normalizer passes it through)."""
    key, mode = pair.a.key, pair.b_mode
    if mode in (None, "IDENTITY") or pair.c is None:
        return []
    c_key = pair.c.key
    shipped = src.c.stats.get(c_key)
    needed = list(NEEDS.get(mode, ()))
    if shipped is None:
        close = difflib.get_close_matches(c_key, list(src.c.stats), n=3, cutoff=0.5)
        prefixed = [k for k in src.c.stats if k.endswith(c_key) or c_key.endswith(k)]
        return [
            row(
                f"normalization.passthrough:{key}",
                "normalization",
                key,
                "mismatch",
                f"{c_key}: no stats key in the dataset's stats ({src.c.kind}); the {mode} normalizer "
                "would silently pass this feature through unnormalized",
                expected=f"{mode} stats {needed}",
                configured=mode,
                actual="key missing",
                evidence={"stats_keys": sorted(src.c.stats), "similar_keys": sorted(set(close + prefixed))},
            )
        ]
    missing = [s for s in needed if s not in shipped]
    bad = {
        s: int(np.sum(~np.isfinite(vec(shipped, s))))
        for s in needed
        if s in shipped and not np.all(np.isfinite(vec(shipped, s)))
    }
    if missing or bad:
        why = (f"missing {missing}" if missing else "") + (f" non-finite values {bad}" if bad else "")
        return [
            row(
                f"normalization.stats:{key}",
                "normalization",
                key,
                "mismatch",
                f"{c_key}: {mode} needs {needed} but the dataset stats have {why.strip()}"
                + (" (QUANTILES without q01/q99 is a hard stop)" if mode == "QUANTILES" and missing else ""),
                expected=needed,
                configured=mode,
                actual=sorted(shipped),
                evidence={"present": sorted(shipped), "missing": missing, "nonfinite": bad},
            )
        ]
    return [
        row(
            f"normalization.stats:{key}",
            "normalization",
            key,
            "match",
            f"{c_key}: dataset stats have {needed} for {mode}",
            expected=needed,
            configured=mode,
            actual=sorted(shipped),
        )
    ]


def _scale(stats: dict[str, np.ndarray] | None, mode: str) -> np.ndarray | None:
    lo_name, hi_name = SCALE_PAIR.get(mode, (None, None))
    if lo_name is None:
        return None
    lo = vec(stats, lo_name)
    if hi_name is None:
        return lo
    hi = vec(stats, hi_name)
    return None if lo is None or hi is None else hi - lo


def degenerate_rows(src: Sources, pair: Pair) -> list[Check]:
    """Dims whose normalizer scale is ~0: a division blow-up where the data varies, padding where not."""
    mode = pair.b_mode
    if mode in (None, "IDENTITY") or pair.c is None:
        return []
    stats = src.c.stats.get(pair.c.key) or src.c.recomputed.get(pair.c.key)
    scale = _scale(stats, mode)
    if scale is None:
        return []
    eps = float(src.cfg.degenerate.eps)
    rec = src.c.recomputed.get(pair.c.key)
    center = np.abs(vec(stats, "mean")) if vec(stats, "mean") is not None else np.zeros_like(scale)
    tiny = np.where(np.abs(scale) <= eps * np.maximum(1.0, center))[0]
    key, names = pair.a.key, pair.c.names
    if tiny.size == 0:
        return [
            row(
                f"normalization.degenerate:{key}",
                "normalization",
                key,
                "match",
                f"{pair.c.key}: every dim has a {mode} scale above {eps:g}",
                configured=mode,
                actual=f"min scale {float(np.min(np.abs(scale))):.3g}",
            )
        ]
    span_source = rec if rec is not None else stats  # without data, the stats' own min/max tell
    lo, hi = vec(span_source, "min"), vec(span_source, "max")
    varying = [int(d) for d in tiny if lo is not None and hi is not None and hi[d] > lo[d]]
    constant = [int(d) for d in tiny if int(d) not in varying]
    hard = bool(varying)
    what = {
        "MEAN_STD": "std == 0",
        "QUANTILES": "q01 == q99",
        "QUANTILE10": "q10 == q90",
        "MIN_MAX": "min == max",
    }[mode]
    msg = (
        f"{pair.c.key}: {what} in dim(s) {dims_text(list(tiny), names)}; "
        + (
            f"the data varies in {dims_text(varying, names)}, so normalizing divides by ~0 (blow-up)"
            if varying
            else "the data is constant there too (padding?), normalized to 0"
        )
        + ("" if rec is not None else " [from the stats' min/max: no data files to recompute from]")
    )
    evidence = {
        "dims": tiny.tolist(),
        "varying_in_data": varying,
        "constant_in_data": constant,
        "scale": [float(f"{v:.4g}") for v in scale[tiny]],
        "eps": eps,
    }
    if rec is not None:
        evidence["data_range"] = {
            int(d): [float(vec(rec, "min")[d]), float(vec(rec, "max")[d])] for d in tiny
        }
    severity = "hard" if hard else str(src.cfg.degenerate.constant_severity)
    return [
        row(
            f"normalization.degenerate:{key}",
            "normalization",
            key,
            "mismatch",
            msg,
            severity=severity,
            expected=f"{mode} scale > {eps:g}",
            configured=mode,
            actual=f"{len(tiny)} dim(s) ~0",
            evidence=evidence,
        )
    ]


def stale_rows(src: Sources, pair: Pair) -> list[Check]:
    """Shipped stats vs stats recomputed from the data (exact moments; quantiles by rank)."""
    if pair.c is None:
        return []
    c_key, key = pair.c.key, pair.a.key
    shipped, rec = src.c.stats.get(c_key), src.c.recomputed.get(c_key)
    if shipped is None or rec is None:
        return []
    cfg = src.cfg.stale
    std_r = vec(rec, "std")
    lo_r, hi_r = vec(rec, "min"), vec(rec, "max")
    span = np.maximum(hi_r - lo_r, 1e-12)
    # float32 round-off of the tool that wrote the stats: ~1e-4 of the value's magnitude is noise
    noise = 1e-4 * np.maximum(1.0, np.abs(vec(rec, "mean")))
    floor = np.maximum(std_r, noise)
    problems: dict[str, list[int]] = {}
    detail: dict[str, object] = {}
    if vec(shipped, "mean") is not None and vec(shipped, "mean").size == std_r.size:
        z = np.abs(vec(shipped, "mean") - vec(rec, "mean")) / floor
        problems["mean"] = np.where(z > float(cfg.mean_z))[0].tolist()
        detail["mean_z"] = fmt(z, 3)
    if vec(shipped, "std") is not None and vec(shipped, "std").size == std_r.size:
        ratio = (vec(shipped, "std") + 1e-12) / (std_r + 1e-12)
        bound = float(cfg.std_ratio)
        off = (ratio > bound) | (ratio < 1 / bound)
        problems["std"] = np.where(off & (np.abs(vec(shipped, "std") - std_r) > noise))[0].tolist()
        detail["std_ratio"] = fmt(ratio, 3)
    for name, ref in (("min", lo_r), ("max", hi_r)):
        if vec(shipped, name) is not None and vec(shipped, name).size == std_r.size:
            off = np.abs(vec(shipped, name) - ref) / span
            problems[name] = np.where(off > float(cfg.range_frac))[0].tolist()
    problems = {k: v for k, v in problems.items() if v}
    count_s = vec(shipped, "count")
    counts = {"shipped": None if count_s is None else float(count_s[0]), "rows": int(vec(rec, "count")[0])}
    out = []
    stale_dims = sorted({d for v in problems.values() for d in v})
    evidence = {"per_stat_dims": problems, "count": counts, **detail}
    if problems:
        out.append(
            row(
                f"normalization.stale:{key}",
                "normalization",
                key,
                "mismatch",
                f"{c_key}: shipped stats disagree with the data in dim(s) "
                f"{dims_text(stale_dims, pair.c.names)} ({', '.join(problems)}); the normalizer would "
                "use stats of other data",
                severity=str(cfg.severity),
                expected="stats of this data",
                actual=f"{len(stale_dims)} dim(s) stale",
                evidence=evidence,
            )
        )
    else:
        out.append(
            row(
                f"normalization.stale:{key}",
                "normalization",
                key,
                "match",
                f"{c_key}: shipped mean/std/min/max agree with the data ({counts['rows']} rows)",
                actual="consistent",
                evidence=evidence,
            )
        )
    out += _quantile_rank_rows(src, pair)
    return out


def _quantile_rank_rows(src: Sources, pair: Pair) -> list[Check]:
    ranks = src.c.shipped_ranks.get(pair.c.key) if pair.c else None
    if not ranks:
        return []
    levels = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
    tol = float(src.cfg.stale.quantile_rank)
    rec = src.c.recomputed[pair.c.key]
    varying = vec(rec, "max") > vec(rec, "min")
    off = {
        q: [
            int(d) for d in np.where(varying & ((levels[q] < r[:, 0] - tol) | (levels[q] > r[:, 1] + tol)))[0]
        ]
        for q, r in ranks.items()
    }
    off = {q: d for q, d in off.items() if d}
    evidence = {
        "shipped_quantile_ranks": {q: fmt(r, 3) for q, r in ranks.items()},
        "tolerance": tol,
        "note": "rank = [fraction of the data below, at or below] the shipped value; LeRobot v3 "
        "averages per-episode quantiles, which is not the dataset quantile",
    }
    key = pair.a.key
    if not off:
        return [
            row(
                f"normalization.quantiles:{key}",
                "normalization",
                key,
                "match",
                f"{pair.c.key}: shipped quantiles sit within {tol:g} of their levels in the data",
                severity="soft",
                evidence=evidence,
            )
        ]
    dims = sorted({d for v in off.values() for d in v})
    return [
        row(
            f"normalization.quantiles:{key}",
            "normalization",
            key,
            "mismatch",
            f"{pair.c.key}: shipped quantiles are off their level by > {tol:g} in rank in dim(s) "
            f"{dims_text(dims, pair.c.names)} ({', '.join(off)})",
            severity=str(src.cfg.stale.quantile_severity),
            expected="q01/q99 at ranks 0.01/0.99",
            actual=f"{len(dims)} dim(s) off",
            evidence=evidence,
        )
    ]


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
    floor = 1e-6 + 1e-3 * float(np.max(std_a)) if std_a.size else 1e-6
    z = np.abs(mean_c - mean_a) / (std_a + floor)
    ratio = (std_c + floor) / (std_a + floor)
    explained = src.explained.get(pair.a.key, {})
    cfg = src.cfg.shift
    flagged = [
        int(d)
        for d in np.where(
            (z > float(cfg.soft_z)) | (ratio > float(cfg.std_ratio)) | (ratio < 1 / float(cfg.std_ratio))
        )[0]
        if int(d) not in explained
    ]
    hard_z = cfg.get("hard_z")
    hard = [d for d in flagged if hard_z is not None and z[d] > float(hard_z)]
    evidence = {
        "z_mean": fmt(z, 3),
        "std_ratio": fmt(ratio, 3),
        "explained_elsewhere": explained,
        "units": "|mean_C - mean_A| / std_A",
    }
    key = pair.a.key
    if not flagged:
        return [
            row(
                f"normalization.shift:{key}",
                "normalization",
                key,
                "match",
                f"{pair.c.key}: dataset within {cfg.soft_z} base std of the base's stats in every dim"
                + (f" (dims {sorted(explained)} explained by other rows)" if explained else ""),
                severity="soft",
                expected="base stats",
                actual="close",
                evidence=evidence,
            )
        ]
    return [
        row(
            f"normalization.shift:{key}",
            "normalization",
            key,
            "mismatch",
            f"{pair.c.key}: dim(s) {dims_text(flagged, pair.c.names)} differ from the base's stats "
            f"(max {float(np.max(z[flagged])):.2f} base std, std ratio up to "
            f"{float(np.max(np.maximum(ratio[flagged], 1 / ratio[flagged]))):.2f}x)",
            severity="hard" if hard else "soft",
            expected="base stats",
            actual=f"{len(flagged)} dim(s) shifted",
            evidence=evidence,
        )
    ]
