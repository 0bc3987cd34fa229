"""An action dim mirrored inside its range (v -> lo + hi - v): a gripper whose open and closed were
swapped, with the dataset's stats rewritten to match.

Its stats can pass every stats check: a mirror about the middle of the range keeps the spread and the
range, and moves the mean only as far as the distribution is lopsided. The data still shows it: the
action dim now moves against the state dim it commands. Per action dim, the state dim that tracks it
(the one of the same name, else the one it correlates with best in absolute value) and the sign of
corr(action[t], state[t+1]) over the contract's dynamics sample (consecutive rows inside episodes).

What the sign should be comes from the base where its stats pin it: a base trained on absolute targets
has each action dim's stats sitting on its state dim's (mean and quantiles within `sign.base_tol` state
std, min and max within that share of the state's range) and far (>= `sign.min_gap`) from the mirrored
state's (lo + hi - the mirrored stat): action and state moved together in its training data (+), or the
reverse (-). Where the base pins nothing (delta actions, no stats, a lopsided-free dim), the data's own
dominant relation is the reference: one dim against the rest, warned (`sign.data_severity`), since a
robot may command a gripper in the opposite sense of the width it reports.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.contract.conventions import MIRROR
from pipeline.stages.contract.relation import data_pairs
from pipeline.stages.contract.rows import NAME, Pair, Sources, dims_text, usable_stats, vec

ROWS = Rows(NAME, "units")
DOMINANT = 0.9  # share of the other tracked dims that must share one sign for the data's own reference
LEAST_OTHERS = 3  # and at least this many of them


def mirror_rows(src: Sources, pair: Pair) -> list[Check]:
    """One row for the action feature C's dynamics sample holds: the dims moving against their state."""
    if pair.a.role != "action" or pair.c is None or not src.c.dynamics:
        return []
    actions = [f for f in src.c.features.values() if f.role == "action" and f.dim]
    if not actions or actions[0].key != pair.c.key:
        return []
    tracked = tracking(src)
    if not tracked:
        return []
    explained = src.explained.get(pair.a.key, {})
    tracked = {a: t for a, t in tracked.items() if a not in explained}
    base = base_signs(src, pair, tracked)
    found = _judge(tracked, base)
    return [_row(src, pair, tracked, base, found)]


def tracking(src: Sources) -> dict[int, dict[str, Any]]:
    """Per action dim that a state dim tracks (|corr| >= `sign.track_corr`): that state dim, the
    correlation of action[t] with it at t+1 (its sign), and whether it was paired by name."""
    dyn = src.c.dynamics
    same = dyn["episode"][1:] == dyn["episode"][:-1]
    if same.sum() < 3:
        return {}
    action, state = dyn["action"][:-1][same], dyn["state"][1:][same]
    corr = _corr_matrix(action, state)
    named = dict(data_pairs(src))
    out: dict[int, dict[str, Any]] = {}
    for a in range(corr.shape[0]):
        row = np.nan_to_num(corr[a])
        s = named.get(a, int(np.argmax(np.abs(row))))
        if abs(row[s]) >= src.cfg.sign.track_corr:
            out[a] = {"state": int(s), "corr": round(float(row[s]), 4), "by_name": a in named}
    return out


def _corr_matrix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation of every column of x with every column of y (NaN where one is constant)."""
    xc, yc = x - x.mean(axis=0), y - y.mean(axis=0)
    den = np.outer(np.sqrt((xc**2).sum(axis=0)), np.sqrt((yc**2).sum(axis=0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (xc.T @ yc) / np.where(den > 0, den, 1.0), np.nan)


def base_signs(src: Sources, pair: Pair, tracked: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per tracked action dim, the sign the base's stats pin (+1, -1 or 0: none) and the deviations of
    its action stats from its state's, as they are and mirrored, in state spreads."""
    states = src.a.by_role("state")
    if not states:
        return {}
    act, st = usable_stats(src.a.stats.get(pair.a.key)), usable_stats(src.a.stats.get(states[0].key))
    std, lo, hi = vec(st, "std"), vec(st, "min"), vec(st, "max")
    if std is None or lo is None or hi is None or vec(act, "mean") is None:
        return {}
    stats = [
        s
        for s in MIRROR
        if vec(act, s) is not None and vec(st, s) is not None and vec(st, MIRROR[s]) is not None
    ]
    if len(stats) < 3:  # the mean alone cannot tell a mirror from a lopsided task
        return {}
    cfg, out = src.cfg.sign, {}
    for a, t in tracked.items():
        s = t["state"]
        if a >= vec(act, "mean").size or s >= std.size or std[s] <= 0 or hi[s] <= lo[s]:
            continue
        unit = {k: (hi[s] - lo[s] if k in ("min", "max") else std[s]) for k in stats}
        as_is = max(abs(vec(act, k)[a] - vec(st, k)[s]) / unit[k] for k in stats)
        mirrored = max(abs(vec(act, k)[a] - (lo[s] + hi[s] - vec(st, MIRROR[k])[s])) / unit[k] for k in stats)
        sign = 0
        if as_is <= cfg.base_tol and mirrored >= cfg.min_gap:
            sign = 1
        elif mirrored <= cfg.base_tol and as_is >= cfg.min_gap:
            sign = -1
        out[a] = {"sign": sign, "as_is": round(float(as_is), 3), "mirrored": round(float(mirrored), 3)}
    return out


def _judge(tracked: dict[int, dict[str, Any]], base: dict[int, dict[str, Any]]) -> dict[int, str]:
    """Per action dim against its reference: 'base' where the base pins the sign and the data's is the
    other, 'data' where only the data's dominant relation does."""
    found: dict[int, str] = {}
    for a, t in tracked.items():
        pinned = base.get(a, {}).get("sign", 0)
        if pinned and np.sign(t["corr"]) != pinned:
            found[a] = "base"
            continue
        if pinned:
            continue
        others = [np.sign(o["corr"]) for b, o in tracked.items() if b != a]
        if len(others) < LEAST_OTHERS:
            continue
        dominant = 1.0 if np.mean(np.asarray(others) > 0) >= DOMINANT else -1.0
        if np.mean(np.asarray(others) == dominant) >= DOMINANT and np.sign(t["corr"]) != dominant:
            found[a] = "data"
    return found


def _row(
    src: Sources,
    pair: Pair,
    tracked: dict[int, dict[str, Any]],
    base: dict[int, dict[str, Any]],
    found: dict[int, str],
) -> Check:
    key, cfg = pair.a.key, src.cfg.sign
    a_names = pair.c.names if pair.c else None
    s_names = next((f.names for f in src.c.features.values() if f.role == "state" and f.names), None)
    pinned = sum(1 for b in base.values() if b["sign"])
    rule = (
        f"corr(action[t], its state[t+1]) with |corr| >= {cfg.track_corr:g}, its sign against the base's "
        f"stats ({pinned} of {len(tracked)} dim(s) pinned) or the other dims' shared sign"
    )
    evidence = {"tracked": tracked, "base": base, "found": found, "dims": sorted(found)}
    if not found:
        message = f"{key}: every tracked action dim moves in the sense its reference expects ({rule})"
        return ROWS(f"units.mirror:{key}", key, "match", message, evidence=evidence)
    src.explain(key, sorted(found), "units.mirror")
    parts = [_dim_text(a, tracked[a], base.get(a), found[a], a_names, s_names) for a in sorted(found)]
    message = (
        f"{key}: dim(s) {dims_text(sorted(found), a_names)} mirrored inside the range (v -> lo + hi - v: "
        f"open and closed swapped?): {'; '.join(parts)} ({rule})"
    )
    by_base = any(v == "base" for v in found.values())
    return ROWS(
        f"units.mirror:{key}",
        key,
        "mismatch",
        message,
        severity=cfg.severity if by_base else cfg.data_severity,
        expected={a: "moves with its state" for a in found},
        actual={a: tracked[a]["corr"] for a in found},
        evidence=evidence,
    )


def _dim_text(
    a: int,
    track: dict[str, Any],
    base: dict[str, Any] | None,
    why: str,
    a_names: list[str] | None,
    s_names: list[str] | None,
) -> str:
    state = track["state"]
    s_name = f" ({s_names[state]})" if s_names and state < len(s_names) else ""
    head = f"dim {dims_text([a], a_names)} vs state dim {state}{s_name}: corr {track['corr']:+.3f}"
    if why == "base" and base is not None:
        sense = "together" if base["sign"] > 0 else "against each other"
        return (
            f"{head}, where the base's stats show them moving {sense} (its action stats "
            f"{base['as_is']:.3g} state spreads off its state's as-is, {base['mirrored']:.3g} mirrored)"
        )
    return f"{head}, where the other tracked dims share the opposite sign"
