"""Absolute vs delta actions, tested in the data rather than guessed from spreads.

A base trained on absolute joint targets has action stats that sit on its state stats (same mean,
same spread per joint); one trained on deltas has actions centred near 0 with a small spread. The
dataset's relation is read from its consecutive rows (the reader's bounded `dynamics` sample), per
paired dim: an absolute target tracks the next state, a delta tracks the per-episode step of the state
(s[t+1] - s[t], or s[t] - s[t-1] for actions recorded after the step). A base of one kind trained on
data of the other learns outputs the robot reads as the wrong quantity: a hard row that says which
relation held in the data and how well.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.contract.rows import NAME, Pair, Sources, dims_text, fmt, usable_stats, vec

ROWS = Rows(NAME, "units")


def data_pairs(src: Sources) -> list[tuple[int, int]]:
    """(action dim, state dim) pairs of C's dynamics sample: by shared names, else by position."""
    dyn = src.c.dynamics
    if not dyn:
        return []
    s_names = next((f.names for f in src.c.features.values() if f.role == "state" and f.names), None)
    a_names = next((f.names for f in src.c.features.values() if f.role == "action" and f.names), None)
    if s_names and a_names:
        return [(a_names.index(n), s_names.index(n)) for n in a_names if n in s_names]
    if dyn["state"].shape[1] == dyn["action"].shape[1] and not (s_names or a_names):
        return [(d, d) for d in range(dyn["action"].shape[1])]
    return []


def per_dim_corr(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation per column (NaN where either column is constant)."""
    xc, yc = x - x.mean(axis=0), y - y.mean(axis=0)
    den = np.sqrt((xc**2).sum(axis=0) * (yc**2).sum(axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (xc * yc).sum(axis=0) / np.where(den > 0, den, 1.0), np.nan)


def data_relation(src: Sources) -> dict[str, Any]:
    """Per paired dim, corr of action[t] with state[t+1] and with the per-episode step; the verdict."""
    pairs = data_pairs(src)
    if not pairs:
        return {"mode": None, "reason": "no state/action pair in the data"}
    dyn = src.c.dynamics
    ai, si = [p[0] for p in pairs], [p[1] for p in pairs]
    state, action, episode = dyn["state"][:, si], dyn["action"][:, ai], dyn["episode"]
    same = episode[1:] == episode[:-1]
    if same.sum() < 3:
        return {"mode": None, "reason": "fewer than 3 consecutive rows in one episode"}
    nxt, cur = state[1:][same], state[:-1][same]
    step = nxt - cur
    a_now, a_next = action[:-1][same], action[1:][same]  # action at t (forward step), at t+1 (backward)
    corr = {
        "next_state": per_dim_corr(a_now, nxt),
        "step_forward": per_dim_corr(a_now, step),
        "step_backward": per_dim_corr(a_next, step),
    }
    med = {k: float(np.nanmedian(v)) if np.any(np.isfinite(v)) else 0.0 for k, v in corr.items()}
    step_key = "step_forward" if med["step_forward"] >= med["step_backward"] else "step_backward"
    target = a_now if step_key == "step_forward" else a_next
    cfg = src.cfg.relation
    mode = "unclear"
    if med["next_state"] >= cfg.min_corr and med["next_state"] >= med[step_key] + cfg.margin:
        mode = "absolute"
    elif med[step_key] >= cfg.min_corr and med[step_key] >= med["next_state"] + cfg.margin:
        mode = "delta"
    fit_to = nxt if mode == "absolute" else step
    return {
        "mode": mode,
        "step": "s[t+1] - s[t]" if step_key == "step_forward" else "s[t] - s[t-1]",
        "median_corr": {k: round(v, 3) for k, v in med.items()},
        "per_dim_corr": {k: fmt(v, 3) for k, v in corr.items()},
        "r2_identity": fmt(_r2(target if mode == "delta" else a_now, fit_to), 3),
        "dims": {"action": ai, "state": si},
        "rows": int(same.sum()),
    }


def _r2(actual: np.ndarray, target: np.ndarray) -> np.ndarray:
    """1 - SS(action - target) / SS(action - mean): how well `action == target` holds, unfitted."""
    ss = ((actual - actual.mean(axis=0)) ** 2).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ss > 0, 1 - ((actual - target) ** 2).sum(axis=0) / np.where(ss > 0, ss, 1.0), np.nan)


def base_relation(src: Sources) -> dict[str, Any]:
    """A's relation from its own stats: action stats on the state stats (absolute) or ~0-centred and
    narrow (delta); a declared `action_mode` hint wins."""
    declared = src.a.hints.get("action_mode")
    if declared:
        return {"mode": str(declared).lower(), "source": "declared by A"}
    if src.a.kind == "openpi":  # its norm stats are taken after the model's own (delta) transforms
        return {"mode": None, "reason": "openpi norm stats describe transformed actions"}
    states, actions = src.a.by_role("state"), src.a.by_role("action")
    if not states or not actions:
        return {"mode": None, "reason": "A has no state and action features"}
    s_st, a_st = usable_stats(src.a.stats.get(states[0].key)), usable_stats(src.a.stats.get(actions[0].key))
    s_names, a_names = states[0].names, actions[0].names
    if s_names and a_names:
        pairs = [(a_names.index(n), s_names.index(n)) for n in a_names if n in s_names]
    else:
        pairs = [(d, d) for d in range(actions[0].dim or 0)] if states[0].dim == actions[0].dim else []
    need = (vec(s_st, "mean"), vec(s_st, "std"), vec(a_st, "mean"), vec(a_st, "std"))
    if not pairs or any(v is None for v in need):
        return {"mode": None, "reason": "A's state/action stats do not pair"}
    sm, ss, am, as_ = need
    ai, si = [p[0] for p in pairs], [p[1] for p in pairs]
    if max(ai) >= min(len(am), len(as_)) or max(si) >= min(len(sm), len(ss)):
        # stats narrower than the features A declares (a config.json that is another policy's)
        return {"mode": None, "reason": "A's stats are narrower than its declared state/action features"}
    floor = 1e-9 + 1e-6 * float(np.max(np.abs(ss[si])))
    z = np.abs(am[ai] - sm[si]) / (ss[si] + floor)
    ratio = (as_[ai] + floor) / (ss[si] + floor)
    z0 = np.abs(am[ai]) / (ss[si] + floor)
    cfg = src.cfg.relation
    mode = None
    if np.median(z) <= cfg.base_z and 0.5 <= np.median(ratio) <= 2:
        mode = "absolute"
    elif np.median(ratio) <= cfg.base_delta and np.median(z0) <= cfg.base_z:
        mode = "delta"
    return {
        "mode": mode,
        "source": "A's stats",
        "median_mean_gap_state_std": round(float(np.median(z)), 3),
        "median_std_ratio_action_state": round(float(np.median(ratio)), 3),
        "median_mean_from_0_state_std": round(float(np.median(z0)), 3),
    }


def relation_rows(src: Sources, pair: Pair) -> list[Check]:
    """Base absolute vs dataset delta (or the reverse): one row for the action feature C's dynamics use."""
    if pair.a.role != "action" or pair.c is None or not src.c.dynamics:
        return []
    states = [f for f in src.c.features.values() if f.role == "state" and f.dim]
    actions = [f for f in src.c.features.values() if f.role == "action" and f.dim]
    if not states or not actions or actions[0].key != pair.c.key:
        return []
    base, data = base_relation(src), data_relation(src)
    if base.get("mode") not in ("absolute", "delta") or data.get("mode") not in ("absolute", "delta"):
        return []
    key = pair.a.key
    evidence = {"A": base, "C": data}
    how = _how_well(data)
    if base["mode"] == data["mode"]:
        message = f"{key}: base {base['mode']} ({base['source']}), data {data['mode']} too: {how}"
        return [
            ROWS(
                f"units.action_relation:{key}",
                key,
                "match",
                message,
                expected=base["mode"],
                actual=data["mode"],
                evidence=evidence,
            )
        ]
    dims = data["dims"]["action"]
    src.explain(key, dims, "units.action_relation")
    names = pair.c.names
    message = (
        f"{key}: base {base['mode']} ({_base_text(base)}), dataset {data['mode']}: {how} in dim(s) "
        f"{dims_text(dims, names)}; the base's outputs mean "
        f"{'targets' if base['mode'] == 'absolute' else 'steps'}, the data's "
        f"{'steps' if data['mode'] == 'delta' else 'targets'}"
    )
    return [
        ROWS(
            f"units.action_relation:{key}",
            key,
            "mismatch",
            message,
            severity=src.cfg.relation.severity,
            expected=base["mode"],
            actual=data["mode"],
            evidence=evidence,
        )
    ]


def _base_text(base: dict[str, Any]) -> str:
    if base["source"] != "A's stats":
        return base["source"]
    ratio = base["median_std_ratio_action_state"]
    if base["mode"] == "absolute":
        return (
            f"A's action stats sit on its state stats: mean within {base['median_mean_gap_state_std']} "
            f"state std, std ratio {ratio}"
        )
    return (
        f"A's actions centre within {base['median_mean_from_0_state_std']} state std of 0, "
        f"std {ratio}x the state's"
    )


def _how_well(data: dict[str, Any]) -> str:
    med = data["median_corr"]
    step = "step_forward" if data["step"].startswith("s[t+1]") else "step_backward"
    held, other = ("next_state", step) if data["mode"] == "absolute" else (step, "next_state")
    label = {"next_state": "action[t] ~ s[t+1]", step: f"action ~ {data['step']} per episode"}
    r2 = [v for v in np.asarray(data["r2_identity"], dtype=float).reshape(-1) if np.isfinite(v)]
    return (
        f"{label[held]} held (median corr {med[held]:.3f} over {len(data['dims']['action'])} dims, "
        f"median R^2 of the identity {float(np.median(r2)) if r2 else float('nan'):.3f}; "
        f"{label[other]}: {med[other]:.3f}, {data['rows']} row pairs)"
    )
