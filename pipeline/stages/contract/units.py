"""Units and conventions: per-dim scale ratios that match known factors, and absolute vs delta actions.

A dim recorded in degrees where the base saw radians has a spread 57.3x the base's; raw counts, mm vs m
and 0-255 vs 0-1 show up the same way. Only ratios close to a configured factor are hard findings; an
unexplained large ratio is a soft one (it may be a different task), unless every dim of the feature
moved at once: that is one finding about the whole feature (`units.scale_feature`, hard by default).
Dims a convention row (sign, offset, absolute vs delta) already explains are left to it. The declared
action mode is checked against consecutive rows: an absolute action tracks the next state, a delta
action tracks the step (`relation.py` tests the base's relation against the data's).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.contract.config import UnitsConfig
from pipeline.stages.contract.relation import data_pairs
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

ROWS = Rows(NAME, "units")
CONVENTIONS = ("units.action_relation", "units.sign", "units.offset")  # rows that explain a dim first


def _spread(stats: dict | None) -> np.ndarray | None:
    q01, q99 = vec(stats, "q01"), vec(stats, "q99")
    if q01 is not None and q99 is not None:
        return q99 - q01
    return vec(stats, "std")


def scale_rows(src: Sources, pair: Pair) -> list[Check]:
    measured = _spread_ratios(src, pair)
    if measured is None:
        return []
    ratio, order, a_stats, rec = measured
    cfg = src.cfg.units
    key, names = pair.a.key, (pair.c.names if pair.c else None) or pair.a.names
    taken = {d for d, why in src.explained.get(key, {}).items() if why.startswith(CONVENTIONS)}
    free = ~np.isnan(ratio) & np.array([d not in taken for d in range(ratio.size)])
    hits, odd = _classify(ratio, free, cfg)
    c_dims = {d: int(order[d]) for d in range(ratio.size)}
    gripper = [i for i, n in enumerate(names or []) if "gripper" in str(n).lower()]
    evidence = {
        "std_ratio_C_over_A": fmt(ratio, 3),
        "factors": dict(cfg.factors),
        "tolerance": cfg.tolerance,
        "gripper_dims": {d: _gripper_ranges(a_stats, rec, d, int(order[d])) for d in gripper},
    }
    whole = _whole_feature_row(src, pair, ratio, free, hits, evidence)
    if whole is not None:
        return [whole]
    out = []
    if hits:
        src.explain(key, list(hits), "units.scale")
        text = "; ".join(f"{key.split('.')[-1]}[{d}] x{r:.2f} ~ {n}" for d, (n, r) in hits.items())
        evidence["matches"] = {d: {"factor": n, "ratio": round(r, 3)} for d, (n, r) in hits.items()}
        evidence["values"] = dim_values(src, pair, sorted(hits), c_dims=c_dims)
        message = f"{key}: dim(s) {dims_text(list(hits), names)} scaled by a known unit factor: {text}"
        fields = {"expected": "same units as the base", "actual": text, "evidence": evidence}
        out.append(ROWS(f"units.scale:{key}", key, "mismatch", message, **fields))
    if odd:
        src.explain(key, odd, "units.scale(unexplained)")
        spread = [round(float(ratio[d]), 2) for d in odd]
        evidence = {**evidence, "values_unexplained": dim_values(src, pair, odd, c_dims=c_dims)}
        message = f"{key}: dim(s) {dims_text(odd, names)} spread {spread}x the base's, no known unit factor"
        fields = {"severity": "soft", "expected": "ratio ~1", "actual": spread, "evidence": evidence}
        out.append(ROWS(f"units.scale_unexplained:{key}", key, "mismatch", message, **fields))
    if not out:
        message = f"{key}: per-dim spread within {cfg.min_ratio}x of the base's; no unit factor" + (
            f" (dims {sorted(taken)} left to the convention rows)" if taken else ""
        )
        fields = {"expected": "same units as the base", "actual": "consistent", "evidence": evidence}
        out.append(ROWS(f"units.scale:{key}", key, "match", message, **fields))
    return out


def _whole_feature_row(
    src: Sources, pair: Pair, ratio: np.ndarray, free: np.ndarray, hits: dict, evidence: dict[str, Any]
) -> Check | None:
    """Every comparable dim's spread beyond `unexplained_ratio` at once: one finding about the feature.
    A new task moves some dims; all of them at once is a convention of the whole feature (delta vs
    absolute actions, another action space, a global unit), so its severity is `feature_severity`."""
    cfg, key = src.cfg.units, pair.a.key
    dims = [int(d) for d in np.where(free)[0]]
    if len(dims) < 2 or len(dims) < int(np.sum(~np.isnan(ratio))):
        return None
    far = [d for d in dims if max(ratio[d], 1 / ratio[d]) >= cfg.unexplained_ratio]
    if len(far) != len(dims):
        return None
    src.explain(key, dims, "units.scale_feature")
    factors = {n for n, _ in hits.values()}
    why = (
        f"all ~ {next(iter(factors))}"
        if len(factors) == 1 and len(hits) == len(dims)
        else "no single unit factor: a convention of the whole feature (delta vs absolute actions, "
        "another action/state space)"
    )
    lo, hi = float(np.min(ratio[dims])), float(np.max(ratio[dims]))
    message = (
        f"{key}: every dim ({len(dims)}) spreads {lo:.3g}-{hi:.3g}x the base's at once; {why}. "
        + values_text(dim_values(src, pair, dims[:3]))
    )
    evidence = {**evidence, "values": dim_values(src, pair, dims), "unexplained_ratio": cfg.unexplained_ratio}
    return ROWS(
        f"units.scale_feature:{key}",
        key,
        "mismatch",
        message,
        severity=cfg.feature_severity,
        expected="spread ~ the base's",
        actual=f"{lo:.3g}-{hi:.3g}x in every dim",
        evidence=evidence,
    )


def _spread_ratios(src: Sources, pair: Pair) -> tuple[np.ndarray, np.ndarray, dict | None, dict] | None:
    """Per dim, C's std over A's (NaN where either is ~0), with C's dims in A's order (after any
    permutation the layout check found); None when the two cannot be compared."""
    if pair.c is None:
        return None
    a_stats, rec = usable_stats(src.a.stats.get(pair.a.key)), src.c.recomputed.get(pair.c.key)
    std_a = vec(a_stats, "std")
    if std_a is None or rec is None or std_a.size != vec(rec, "std").size:
        return None
    perm = src.permutations.get(pair.a.key, {})
    order = np.array([perm.get(i, i) for i in range(std_a.size)])
    std_c = vec(rec, "std")[order]
    floor = 1e-9 + 1e-4 * float(np.max(std_a))
    usable = (std_a > floor) & (std_c > floor)
    ratio = np.where(usable, std_c / np.where(usable, std_a, 1.0), np.nan)
    return ratio, order, a_stats, rec


def _classify(
    ratio: np.ndarray, usable: np.ndarray, cfg: UnitsConfig
) -> tuple[dict[int, tuple[str, float]], list[int]]:
    """Dims whose spread ratio is a known unit factor (`{dim: (factor name, ratio)}`), and dims whose
    ratio is large with no factor to explain it."""
    hits: dict[int, tuple[str, float]] = {}
    odd: list[int] = []
    for d in np.where(usable)[0]:
        r = float(ratio[d])
        if max(r, 1 / r) < cfg.min_ratio:
            continue
        name = next(
            (n for n, f in cfg.factors.items() if abs(np.log(r / f)) <= np.log1p(cfg.tolerance)), None
        )
        if name:
            hits[int(d)] = (name, r)
        elif max(r, 1 / r) >= cfg.unexplained_ratio:
            odd.append(int(d))
    return hits, odd


def _gripper_ranges(a_stats: dict | None, rec: dict, d: int, c_dim: int) -> dict[str, Any]:
    """A gripper's [min, max] in the base and in the data: its unit and sign are visible there."""
    return {
        "A": [fmt(vec(a_stats, s)[d]) if vec(a_stats, s) is not None else None for s in ("min", "max")],
        "C": [fmt(vec(rec, "min")[c_dim]), fmt(vec(rec, "max")[c_dim])],
    }


ACTION_MODES = ("absolute", "delta")  # what `infer_action_mode` can tell from the data


def action_mode_rows(src: Sources) -> list[Check]:
    """Absolute vs delta actions, from consecutive rows, against what A or B declares."""
    evidence = infer_action_mode(src)
    declared = src.b.hints.get("action_mode") or src.a.hints.get("action_mode")
    if not declared:
        src.b.hints.setdefault("_action_mode_inferred", evidence)
        return []
    inferred = evidence.get("mode")
    if str(declared).lower() not in ACTION_MODES:
        return [_action_space_row(src, str(declared), evidence)]
    if inferred in (None, "unclear"):
        message = f"declared {declared}, but the data does not say: {evidence.get('reason', 'no pairing')}"
        return [
            ROWS(
                "units.action_mode",
                "action",
                "unverifiable",
                message,
                expected=declared,
                actual=inferred,
                evidence=evidence,
            )
        ]
    message = (
        f"declared {declared}; the data looks {inferred} (corr with next state "
        f"{evidence['corr_next_state']}, with the step {evidence['corr_step']})"
    )
    return [
        ROWS.judge(
            "units.action_mode",
            "action",
            str(declared).lower() == inferred,
            message,
            expected=src.a.hints.get("action_mode"),
            configured=src.b.hints.get("action_mode"),
            actual=inferred,
            evidence=evidence,
        )
    ]


def _action_space_row(src: Sources, declared: str, evidence: dict) -> Check:
    """A declared `action_mode` outside absolute/delta names the policy's action space in its own
    vocabulary (XVLA: `ee6d` = end-effector xyz + 6D rotation + gripper per arm). The files do not say
    how that space lays out the dims, so the stage cannot prove a mismatch; what it can show is the
    action the data holds (its names and width), for the user to confirm: soft."""
    action = next((f for f in src.c.features.values() if f.role == "action"), None)
    names = list(action.names or []) if action else []
    message = (
        f"declared action_mode {declared!r} is the policy's own action-space name, not absolute/delta; "
        f"the dataset's action is {action.dim if action else '?'}-d"
        + (f" ({', '.join(map(str, names[:8]))})" if names else "")
        + f", and looks {evidence.get('mode')} (corr with next state {evidence.get('corr_next_state')}): "
        "confirm the policy's action space is meant for these dims (the files do not say how "
        f"{declared!r} lays them out, so this is not proven a mismatch)"
    )
    return ROWS(
        "units.action_mode",
        "action",
        "mismatch",
        message,
        severity="soft",
        expected=src.a.hints.get("action_mode"),
        configured=declared,
        actual={"mode": evidence.get("mode"), "dims": action.dim if action else None, "names": names},
        evidence=evidence,
    )


def infer_action_mode(src: Sources) -> dict:
    dyn = src.c.dynamics
    if not dyn:
        return {"mode": None, "reason": "no state/action pair in the data"}
    state, action, episode = dyn["state"], dyn["action"], dyn["episode"]
    pairs = data_pairs(src)  # one pairing rule with the action_relation row
    if not pairs:
        return {"mode": None, "reason": "no action dim shares a name with a state dim"}
    same = episode[1:] == episode[:-1]
    ai, si = [p[0] for p in pairs], [p[1] for p in pairs]
    a = action[:-1][same][:, list(ai)]
    nxt, cur = state[1:][same][:, list(si)], state[:-1][same][:, list(si)]
    c_abs, c_delta = _corr(a, nxt), _corr(a, nxt - cur)
    mode = (
        "absolute"
        if c_abs > 0.9 and c_abs > c_delta
        else "delta"
        if c_delta > 0.5 and c_delta > c_abs
        else "unclear"
    )
    return {
        "mode": mode,
        "corr_next_state": round(c_abs, 3),
        "corr_step": round(c_delta, 3),
        "paired_dims": len(pairs),
        "rows": int(same.sum()),
    }


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    """Median over dims of the Pearson correlation (dims with no variance skipped)."""
    values = []
    for d in range(x.shape[1]):
        if x[:, d].std() > 0 and y[:, d].std() > 0:
            values.append(float(np.corrcoef(x[:, d], y[:, d])[0, 1]))
    return float(np.median(values)) if values else 0.0
