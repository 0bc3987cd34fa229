"""Action and state rows: stuck actuators, frozen stretches, spikes, pinned values, dead dims, outliers.

A stuck actuator (a joint that does not follow its command) teaches the model that its commands do
nothing: hard when the model reads that state dim. The rest are soft: a frozen stretch, a spike, values
pinned at a limit or a far outlier may be the task, or a fault worth a look before GPU days are spent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check
from pipeline.stages.contract.health.common import (
    ROWS,
    column,
    dim_names,
    labels,
    listed,
    model_predicts,
    model_reads,
    per_episode,
)
from pipeline.stages.contract.rows import Sources

ACTUATED = ("state", "action")  # the robot's own dims: frozen, spiking or pinned ones are the robot's


def motion_rows(src: Sources, facts: dict[str, Any]) -> list[Check]:
    out = []
    for key in facts["diff_std"]:
        out += [_dead(src, facts, key), _outliers(src, facts, key)]
        feature = src.c.features.get(key)
        if feature is not None and feature.role in ACTUATED:  # an object at rest is not a fault
            out += [_pinned(src, facts, key), _spikes(src, facts, key), _frozen(src, facts, key)]
            out += [_held(src, facts, key)]
    return out + _stuck(src, facts)


def _range(facts: dict[str, Any], key: str) -> np.ndarray:
    return np.asarray(facts["high"][key]["value"]) - np.asarray(facts["low"][key]["value"])


def _dead(src: Sources, facts: dict[str, Any], key: str) -> Check:
    dims = [int(d) for d in np.flatnonzero(_range(facts, key) == 0)]
    names = dim_names(src, key)
    message = (
        f"{key}: dim(s) {listed(labels(names, dims))} never change over the dataset (zero variance)"
        if dims
        else f"{key}: every dim varies"
    )
    return ROWS(
        f"health.dead:{key}",
        key,
        "mismatch" if dims else "match",
        message,
        severity="soft",
        evidence={"dims": dims, "episodes": []},
    )


def _pinned(src: Sources, facts: dict[str, Any], key: str) -> Check:
    share = src.cfg.health.clip_share
    rows = max(int(facts["rows"]), 1)
    found = {}
    for side in ("low", "high"):
        extreme = facts[side][key]
        for d in np.flatnonzero((np.asarray(extreme["count"]) / rows > share) & (_range(facts, key) > 0)):
            found[f"{int(d)} {'min' if side == 'low' else 'max'}"] = {
                "value": float(extreme["value"][d]),
                "share": round(float(extreme["count"][d]) / rows, 4),
            }
    names = dim_names(src, key)
    shown = [
        f"{labels(names, [int(k.split()[0])])[0]} at its {k.split()[1]} {v['value']:.4g} "
        f"({v['share']:.0%} of rows)"
        for k, v in found.items()
    ]
    message = (
        f"{key}: values pinned at a limit: {listed(shown)} (more than {share:.0%} of rows exactly there)"
        if found
        else f"{key}: no dim has more than {share:.0%} of rows exactly at its min or max"
    )
    return ROWS(
        f"health.pinned:{key}",
        key,
        "mismatch" if found else "match",
        message,
        severity="soft",
        evidence={
            "pinned": found,
            "dims": sorted({int(k.split()[0]) for k in found}),
            "clip_share": share,
            "episodes": [],
        },
    )


def _outliers(src: Sources, facts: dict[str, Any], key: str) -> Check:
    stats, k = src.c.recomputed.get(key, {}), src.cfg.health.outlier_iqr
    if "q01" not in stats or "q99" not in stats:
        return ROWS(
            f"health.outliers:{key}", key, "unverifiable", f"{key}: no recomputed quantiles", severity="soft"
        )
    q01, q99 = np.asarray(stats["q01"], dtype=float), np.asarray(stats["q99"], dtype=float)
    spread = q99 - q01
    found = {}
    for side, limit in (("low", q01 - k * spread), ("high", q99 + k * spread)):
        extreme = facts[side][key]
        value = np.asarray(extreme["value"], dtype=float)
        beyond = (value < limit) if side == "low" else (value > limit)
        for d in np.flatnonzero(beyond & (spread > 0)):
            found[int(d)] = {
                "value": float(value[d]),
                "episode": int(extreme["episode"][d]),
                "frame": int(extreme["frame"][d]),
                "q01": float(q01[d]),
                "q99": float(q99[d]),
            }
    names = dim_names(src, key)
    shown = [
        f"{labels(names, [d])[0]}: {v['value']:.4g} in episode {v['episode']} frame {v['frame']}"
        for d, v in found.items()
    ]
    message = (
        f"{key}: extreme outlier(s) beyond q01/q99 by more than {k:g}x (q99 - q01): {listed(shown)}"
        if found
        else f"{key}: min and max within {k:g}x (q99 - q01) of q01/q99"
    )
    return ROWS(
        f"health.outliers:{key}",
        key,
        "mismatch" if found else "match",
        message,
        severity="soft",
        evidence={
            "outliers": found,
            "outlier_iqr": k,
            "episodes": sorted({v["episode"] for v in found.values()}),
        },
    )


def _spikes(src: Sources, facts: dict[str, Any], key: str) -> Check:
    """One-sample spikes: a value that leaves both its neighbours, out and straight back, by more than
    `spike_z` standard deviations of the dim's steps. A large step alone is not one: a fast motion, a
    gripper closing or a step to a new level happens in real data, more often the longer the episodes
    (the largest step of an episode grows with its length), and it would hide the spike beside it."""
    z_max = src.cfg.health.spike_z
    std = np.asarray(facts["diff_std"][key], dtype=float)
    episodes, bounce = per_episode(facts, key, "bounce")
    _, at = per_episode(facts, key, "bounce_at")
    if not episodes:
        return ROWS(f"health.spikes:{key}", key, "unverifiable", f"{key}: not followed", severity="soft")
    z = np.where(std > 0, bounce / np.where(std > 0, std, 1), 0)
    found: dict[int, dict[str, Any]] = {}
    for row, dim in np.argwhere(z > z_max):
        entry = found.setdefault(episodes[int(row)], {"dims": [], "frames": [], "z": []})
        entry["dims"].append(int(dim))
        entry["frames"].append(int(at[row][dim]))
        entry["z"].append(round(float(z[row][dim]), 1))
    names = dim_names(src, key)
    each = [
        (zz, e, d, f)
        for e, v in found.items()
        for d, f, zz in zip(v["dims"], v["frames"], v["z"], strict=True)
    ]
    shown = [
        f"episode {e} dim {labels(names, [d])[0]} frame {f} ({zz} sd)"
        for zz, e, d, f in sorted(each, reverse=True)
    ]
    rule = f"a sample off both neighbours and back by > {z_max:g} standard deviations of the dim's steps"
    message = (
        f"{key}: one-sample spikes ({rule}), largest first: {listed(shown)}"
        if found
        else f"{key}: no one-sample spike ({rule})"
    )
    return ROWS(
        f"health.spikes:{key}",
        key,
        "mismatch" if found else "match",
        message,
        severity="soft",
        evidence={
            "episodes": list(found),
            "spikes": found,
            "spike_z": z_max,
            "frames_per_episode": {e: len(v["dims"]) for e, v in found.items()},
        },
    )


def _frozen(src: Sources, facts: dict[str, Any], key: str) -> Check:
    cfg = src.cfg.health
    alive = _range(facts, key) > 0
    found: dict[int, dict[str, Any]] = {}
    ids, longest_all = per_episode(facts, key, "longest")
    if not ids:
        return ROWS(f"health.frozen:{key}", key, "unverifiable", f"{key}: not followed", severity="soft")
    rows, row_longest = column(facts, "rows"), column(facts, f"{key}/row_longest")
    for i, episode in enumerate(ids):
        need, length = max(cfg.frozen_frames, cfg.frozen_share * int(rows[i])), int(rows[i])
        longest = np.asarray(longest_all[i])
        dims = np.flatnonzero((longest >= need) & (longest < length - 1) & alive)
        whole = need <= int(row_longest[i]) < length - 1
        if len(dims) or whole:
            found[episode] = {
                "dims": [int(d) for d in dims],
                "steps": int(longest.max()),
                "all_dims": bool(whole),
                "rows": length,
            }
    what = f"unchanged >= max({cfg.frozen_frames}, {cfg.frozen_share:.0%} of the episode) steps"
    names = dim_names(src, key)
    shown = [
        f"episode {e}: {'every dim' if v['all_dims'] else listed(labels(names, v['dims']), 3)} "
        f"for {v['steps']} of {v['rows']} frames"
        for e, v in found.items()
    ]
    message = (
        f"{key}: frozen stretches ({what}) while the episode goes on: {listed(shown, 5)}"
        if found
        else f"{key}: no frozen stretch ({what})"
    )
    return ROWS(
        f"health.frozen:{key}",
        key,
        "mismatch" if found else "match",
        message,
        severity="soft",
        evidence={
            "episodes": list(found),
            "frozen": found,
            "frames_per_episode": {e: v["steps"] for e, v in found.items()},
        },
    )


def _held(src: Sources, facts: dict[str, Any], key: str) -> Check:
    """A dim at exactly one value for a whole episode while it moves in most other episodes: unlike a
    frozen stretch (a gripper held shut for a while, everywhere in real data), nothing in the task
    holds a continuous joint or command still from the first frame to the last in one episode only.
    Discrete dims (mostly at their limits, a gripper's open / close) are left out."""
    cfg = src.cfg.health
    ids, lo = per_episode(facts, key, "lo")
    _, hi = per_episode(facts, key, "hi")
    if not ids:
        return ROWS(f"health.held:{key}", key, "unverifiable", f"{key}: not followed", severity="soft")
    spread, length = np.asarray(hi, dtype=float) - np.asarray(lo, dtype=float), column(facts, "rows")
    held = (spread == 0) & (length >= cfg.frozen_frames)[:, None] & ~_discrete(facts, key)
    found: dict[int, dict[str, Any]] = {}
    for d in range(spread.shape[1]):
        rows, others = np.flatnonzero(held[:, d]), spread[~held[:, d], d]
        moves = float(np.mean(others > 0)) if len(others) >= 2 else 0.0
        if len(rows) and moves >= cfg.held_moving:
            found[d] = {
                "episodes": [ids[r] for r in rows],
                "frames": {ids[r]: [0, int(length[r]) - 1] for r in rows},
                "value": float(np.asarray(lo)[rows[0], d]),
                "moves_elsewhere": round(moves, 3),
                "spread_elsewhere": float(np.median(others[others > 0])),
            }
    return _held_row(src, key, found)


def _discrete(facts: dict[str, Any], key: str) -> np.ndarray:
    """Dims that sit at their min or max in most rows: a discrete command (a gripper's open / close),
    which may stay at one level for a whole episode by design (a grasp that never happened)."""
    at_limits = np.asarray(facts["low"][key]["count"]) + np.asarray(facts["high"][key]["count"])
    return at_limits / max(int(facts["rows"]), 1) >= 0.5


def _held_row(src: Sources, key: str, found: dict[int, dict[str, Any]]) -> Check:
    cfg, names = src.cfg.health, dim_names(src, key)
    used = key in model_reads(src) | model_predicts(src)
    rule = (
        f"one value for a whole episode (>= {cfg.frozen_frames} frames) while the dim moves in >= "
        f"{cfg.held_moving:.0%} of the other episodes"
    )
    shown = [
        f"{labels(names, [d])[0]} at {v['value']:.4g} in episode(s) {listed(v['episodes'], 3)} (moves in "
        f"{v['moves_elsewhere']:.0%} of the others, median spread {v['spread_elsewhere']:.4g})"
        for d, v in found.items()
    ]
    role = "reads" if key in model_reads(src) else "predicts"
    message = (
        f"{key}: held dims, a stuck actuator or a disconnected command ({rule}): {listed(shown, 3)}"
        + (f"; the model {role} {key}" if used else "")
        if found
        else f"{key}: no dim held ({rule})"
    )
    episodes = sorted({e for v in found.values() for e in v["episodes"]})
    return ROWS(
        f"health.held:{key}",
        key,
        "mismatch" if found else "match",
        message,
        severity="hard" if used else "soft",
        evidence={"episodes": episodes, "dims": list(found), "held": found, "model_uses": used},
    )


def _stuck(src: Sources, facts: dict[str, Any]) -> list[Check]:
    """A state dim still in an episode while its action moves there. Both are measured against how far
    the dim typically moves in an episode (the median of its per-episode spreads, over the episodes where
    it moves), not against its range over the dataset: that range widens with every episode and every
    outlier, so on a long dataset no single episode's command ever spanned enough of it."""
    pair = _pair(src, facts)
    if pair is None:
        return []
    state, action, dims = pair
    cfg = src.cfg.health
    episodes, s_spread = _spreads(facts, state)
    ids, a_spread = _spreads(facts, action)
    if episodes != ids or not episodes:
        return []
    s_typical, a_typical = _typical(s_spread), _typical(a_spread)
    rows = column(facts, "rows").astype(int)
    found: dict[int, list[int]] = {}
    frames: dict[int, list[int]] = {}
    for sd, ad in dims:
        if s_typical[sd] <= 0 or a_typical[ad] <= 0:
            continue
        still = s_spread[:, sd] <= cfg.stuck_still * s_typical[sd]
        moving = a_spread[:, ad] >= cfg.stuck_moving * a_typical[ad]
        for row in np.flatnonzero(still & moving):
            found.setdefault(episodes[row], []).append(sd)
            frames[episodes[row]] = [0, int(rows[row]) - 1]
    return [_stuck_row(src, state, action, found, frames)]


def _spreads(facts: dict[str, Any], key: str) -> tuple[list[int], np.ndarray]:
    """(episode ids, each episode's max - min per dim)."""
    episodes, lo = per_episode(facts, key, "lo")
    _, hi = per_episode(facts, key, "hi")
    return episodes, np.asarray(hi, dtype=float) - np.asarray(lo, dtype=float)


def _typical(spread: np.ndarray) -> np.ndarray:
    """Per dim, the median spread over the episodes where the dim moves (0 where it never does)."""
    moving = np.where(spread > 0, spread, np.nan)
    counts = np.sum(spread > 0, axis=0)
    out = np.zeros(spread.shape[1])
    out[counts > 0] = np.nanmedian(moving[:, counts > 0], axis=0)
    return out


def _stuck_row(
    src: Sources, state: str, action: str, found: dict[int, list[int]], frames: dict[int, list[int]]
) -> Check:
    cfg, names = src.cfg.health, dim_names(src, state)
    read = state in model_reads(src)
    dims = sorted({d for ds in found.values() for d in ds})
    rule = (
        f"{state} moves < {cfg.stuck_still:.0%} of its typical per-episode spread in an episode while "
        f"{action} moves > {cfg.stuck_moving:.0%} of its own"
    )
    shown = [
        f"episode {e} dim(s) {listed(labels(names, ds), 3)} frames {frames[e][0]}-{frames[e][1]}"
        for e, ds in found.items()
    ]
    message = (
        f"stuck actuator: {listed(labels(names, dims))} of {state} in {len(found)} episode(s) "
        f"({listed(shown, 5)}): {rule}" + ("; the model reads this state" if read else "")
        if found
        else f"no stuck actuator ({rule})"
    )
    return ROWS(
        f"health.stuck:{state}",
        state,
        "mismatch" if found else "match",
        message,
        severity="hard" if read else "soft",
        evidence={
            "episodes": list(found),
            "dims": dims,
            "per_episode": found,
            "frames": frames,
            "model_reads": read,
        },
    )


def _pair(src: Sources, facts: dict[str, Any]) -> tuple[str, str, list[tuple[int, int]]] | None:
    """The state feature, its action feature and their dims paired by name, else by position."""
    keys = facts["diff_std"]
    states = [k for k in keys if src.c.features.get(k) and src.c.features[k].role == "state"]
    actions = [k for k in keys if src.c.features.get(k) and src.c.features[k].role == "action"]
    if not states or not actions:
        return None
    state, action = states[0], actions[0]
    s_names, a_names = dim_names(src, state), dim_names(src, action)
    if s_names and a_names and set(s_names) & set(a_names):
        return state, action, [(s_names.index(n), a_names.index(n)) for n in s_names if n in a_names]
    width = min(len(facts["diff_std"][state]), len(facts["diff_std"][action]))
    if len(facts["diff_std"][state]) != len(facts["diff_std"][action]):
        return None
    return state, action, [(d, d) for d in range(width)]
