"""Conventions that keep names, shapes and spread: a sign-inverted dim (C ~ -A) and a constant offset
(C ~ A + k, a zero-position / calibration shift).

Both pass every shape, name and unit check: the spread is the base's, only the sign or the zero moved.
A mirrored joint is a convention change between robots or recordings, not new data: the base's learned
mapping is inverted for it (hard). Each dim is compared stat by stat with the base's: the mean and the
quantiles (where the base ships them, the shape of the data's distribution, not only its moments) in
units of the base's std, the range in units of the base's max - min; at least three location stats
(a mean alone could be any new task). A dim is mirrored when every
mirrored stat fits within `sign.tol` while as-is they differ by at least `sign.min_gap`; offset when
every stat moved by the same k with the std unchanged. Where the data pairs the action dim with a state
dim, the correlation of action[t] with state[t+1] in that dim is added as evidence from the data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.contract.relation import data_relation
from pipeline.stages.contract.rows import NAME, Pair, Sources, dim_values, dims_text, usable_stats, vec

ROWS = Rows(NAME, "units")
# stat in C -> the stat of A it mirrors to (C's q01 is -A's q99, C's min is -A's max)
MIRROR = {
    "mean": "mean",
    "min": "max",
    "max": "min",
    "q01": "q99",
    "q10": "q90",
    "q50": "q50",
    "q90": "q10",
    "q99": "q01",
}
SHOWN = ("mean", "std", "min", "max", "q01", "q50", "q99")


def _fit(src: Sources, pair: Pair) -> dict[str, Any] | None:
    """Per dim: deviation as-is, mirrored (C = -A) and shifted (C = A + k), in base spreads."""
    if pair.c is None:
        return None
    a, c = usable_stats(src.a.stats.get(pair.a.key)), src.c.recomputed.get(pair.c.key)
    std_a, std_c = vec(a, "std"), vec(c, "std")
    if std_a is None or std_c is None or vec(a, "mean") is None or std_a.size != std_c.size:
        return None
    stats = [
        s
        for s in MIRROR
        if vec(a, s) is not None
        and vec(a, MIRROR[s]) is not None
        and vec(c, s) is not None
        and vec(a, s).size == std_a.size
    ]
    if len(stats) < 3:  # mean alone cannot tell a mirrored or re-zeroed dim from a new task
        return None
    lo, hi = vec(a, "min"), vec(a, "max")
    span = hi - lo if lo is not None and hi is not None else 4 * std_a
    scale = float(np.max(np.abs(std_a))) if std_a.size else 0.0
    usable = (std_a > 1e-9 + 1e-6 * scale) & (std_c > 1e-9 + 1e-6 * scale) & (span > 0)
    unit = {s: (span if s in ("min", "max") else std_a) for s in stats}
    safe = {s: np.where(usable, u, 1.0) for s, u in unit.items()}
    k = vec(c, "mean") - vec(a, "mean")
    dev = {
        "in_place": np.max([np.abs(vec(c, s) - vec(a, s)) / safe[s] for s in stats], axis=0),
        "mirrored": np.max([np.abs(vec(c, s) + vec(a, MIRROR[s])) / safe[s] for s in stats], axis=0),
        "offset": np.max([np.abs(vec(c, s) - vec(a, s) - k) / safe[s] for s in stats], axis=0),
    }
    ratio = np.where(usable, std_c / np.where(usable, std_a, 1.0), np.nan)
    return {
        "dev": dev,
        "ratio": ratio,
        "k": k,
        "k_z": np.abs(k) / np.where(usable, std_a, 1.0),
        "usable": usable,
        "stats": stats,
    }


def convention_rows(src: Sources, pair: Pair) -> list[Check]:
    """One row per convention found (sign, offset) naming the dims with their A and C values."""
    fit = _fit(src, pair)
    if fit is None:
        return []
    explained = src.explained.get(pair.a.key, {})
    free = fit["usable"] & np.array([d not in explained for d in range(fit["usable"].size)])
    dev, ratio = fit["dev"], fit["ratio"]
    spread = np.maximum(ratio, 1 / np.where(free, ratio, 1.0))
    sign_cfg, off_cfg = src.cfg.sign, src.cfg.offset
    mirrored = (
        free
        & (spread <= sign_cfg.std_ratio)
        & (dev["mirrored"] <= sign_cfg.tol)
        & (dev["in_place"] >= sign_cfg.min_gap)
    )
    shifted = (
        free
        & ~mirrored
        & (spread <= off_cfg.std_ratio)
        & (dev["offset"] <= off_cfg.tol)
        & (fit["k_z"] >= off_cfg.min_z)
    )
    out = []
    for kind, mask in (("sign", mirrored), ("offset", shifted)):
        dims = [int(d) for d in np.where(mask)[0]]
        if dims:
            src.explain(pair.a.key, dims, f"units.{kind}")
            out.append(_row(src, pair, kind, dims, fit))
    return out


def _row(src: Sources, pair: Pair, kind: str, dims: list[int], fit: dict[str, Any]) -> Check:
    key, names = pair.a.key, pair.c.names if pair.c else None
    values = dim_values(src, pair, dims, stats=SHOWN)
    corr = _data_corr(src, pair)
    per_dim = {}
    for d in dims:
        per_dim[d] = {
            **values[d],
            "relation": "C = -A" if kind == "sign" else f"C = A {fit['k'][d]:+.6g}",
            "deviation_as_is": round(float(fit["dev"]["in_place"][d]), 4),
            "deviation_mirrored": round(float(fit["dev"]["mirrored"][d]), 4),
            "deviation_shifted": round(float(fit["dev"]["offset"][d]), 4),
            "std_ratio_C_over_A": round(float(fit["ratio"][d]), 4),
        }
        if corr is not None and d in corr:
            per_dim[d]["data_corr_action_next_state"] = corr[d]
    text = "; ".join(_dim_text(d, per_dim[d], kind) for d in dims[:3]) + (
        f"; +{len(dims) - 3} more in evidence" if len(dims) > 3 else ""
    )
    cfg = src.cfg.sign if kind == "sign" else src.cfg.offset
    if kind == "sign":
        head = (
            f"{key}: dim(s) {dims_text(dims, names)} sign-inverted against the base (C = -A: std equal, "
            "mean and [min, max] mirrored); the base's learned mapping is inverted there"
        )
    else:
        head = (
            f"{key}: dim(s) {dims_text(dims, names)} offset by a constant against the base (same spread, "
            "every stat shifted by the same k: a zero-position / calibration shift)"
        )
    evidence = {
        "dims": per_dim,
        "stats_compared": fit["stats"],
        "units": "mean/quantiles in base std, min/max in base max - min",
        "tolerance": cfg.tol,
    }
    return ROWS(
        f"units.{kind}:{key}",
        key,
        "mismatch",
        f"{head}. {text}",
        severity=cfg.severity,
        expected="base convention",
        actual={d: per_dim[d]["relation"] for d in dims},
        evidence=evidence,
    )


def _dim_text(d: int, item: dict[str, Any], kind: str) -> str:
    a, c = item["A"] or {}, item["C"] or {}
    name = f" ({item['name']})" if item.get("name") else ""
    line = (
        f"dim {d}{name}: A mean {a.get('mean', float('nan')):.4g} std {a.get('std', float('nan')):.4g} "
        f"[{a.get('min', float('nan')):.4g}, {a.get('max', float('nan')):.4g}] vs C mean "
        f"{c.get('mean', float('nan')):.4g} std {c.get('std', float('nan')):.4g} "
        f"[{c.get('min', float('nan')):.4g}, {c.get('max', float('nan')):.4g}] ({item['relation']}, "
        f"off by {item['deviation_mirrored' if kind == 'sign' else 'deviation_shifted']:.3g} spread "
        f"vs {item['deviation_as_is']:.3g} as-is)"
    )
    if "data_corr_action_next_state" in item:
        line += f", data corr(action, next state) {item['data_corr_action_next_state']}"
    return line


def _data_corr(src: Sources, pair: Pair) -> dict[int, float] | None:
    """Per action dim, corr of action[t] with its state's next value (sign shows in the data)."""
    if pair.a.role != "action" or pair.c is None:
        return None
    actions = [f for f in src.c.features.values() if f.role == "action" and f.dim]
    if not actions or actions[0].key != pair.c.key:
        return None
    data = data_relation(src)
    if not data.get("mode"):
        return None
    corr = data["per_dim_corr"]["next_state"]
    return {int(d): corr[i] for i, d in enumerate(data["dims"]["action"])}
