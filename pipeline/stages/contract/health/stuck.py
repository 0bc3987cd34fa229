"""`stuck:<state>`: a state dim still in an episode while its action moves there (the joint does not
follow its command), measured against how far each moves in a typical episode: a departure of the state
from its own action, hard where the model reads that state (it is taught that its commands do nothing)."""

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
    model_reads,
    per_episode,
)
from pipeline.stages.contract.rows import Sources


def stuck_rows(src: Sources, facts: dict[str, Any], judged: np.ndarray) -> list[Check]:
    """A state dim still in an episode while its action moves there. Both are measured against how far
    the dim typically moves in an episode (the median of its per-episode spreads, over the episodes where
    it moves), not against its range over the dataset: that range widens with every episode and every
    outlier, so on a long dataset no single episode's command ever spanned enough of it."""
    pair = state_action(src, facts)
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
        for row in np.flatnonzero(still & moving & judged):
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


def state_action(src: Sources, facts: dict[str, Any]) -> tuple[str, str, list[tuple[int, int]]] | None:
    """The state feature, its action feature and their dims paired by name (or its stem), else by
    position."""
    keys = facts["diff_std"]
    states = [k for k in keys if src.c.features.get(k) and src.c.features[k].role == "state"]
    actions = [k for k in keys if src.c.features.get(k) and src.c.features[k].role == "action"]
    if not states or not actions:
        return None
    state, action = states[0], actions[0]
    s_names, a_names = dim_names(src, state), dim_names(src, action)
    if s_names and a_names and set(s_names) & set(a_names):
        return state, action, [(s_names.index(n), a_names.index(n)) for n in s_names if n in a_names]
    stems = _by_stem(s_names, a_names)
    if stems:
        return state, action, stems
    width = min(len(facts["diff_std"][state]), len(facts["diff_std"][action]))
    if len(facts["diff_std"][state]) != len(facts["diff_std"][action]):
        return None
    return state, action, [(d, d) for d in range(width)]


def _by_stem(s_names: list[str], a_names: list[str]) -> list[tuple[int, int]]:
    """Dims paired by the part of their name before the first dot where it is unique on both sides
    (`gripper.opening` with `gripper.cmd`): a joint and its command named for what they measure."""

    def unique(names: list[str]) -> dict[str, int]:
        stems = [n.split(".", 1)[0] for n in names]
        return {s: i for i, s in enumerate(stems) if stems.count(s) == 1}

    s_stems, a_stems = unique(s_names), unique(a_names)
    return [(i, a_stems[s]) for s, i in s_stems.items() if s in a_stems]
