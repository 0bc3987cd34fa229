"""Which state dim and which action dim are the same joint, and what each pair says about its channels.

LeRobot names a joint the same in `observation.state` and `action` (`shoulder_pan.pos` in both): the
names pair them; a pair of names sharing only the part before their first dot, where that part is unique
on both sides, also does. Without names, a state and an action of one width pair by position only where
the data confirms it: every moving action dim correlates best with the state dim at its own index.

A pair then judges its two channels against each other over the episodes training reads: a state dim
that never changes while its command moves is a dead sensor (the model never sees that joint; where the
sensor works at deployment its normalizer divides the change by a scale of ~0), hard where the model reads
that state. A command that never moves while its joint does is an unused or unrecorded command: soft,
and only where names pair them (a constant dim has no correlation to confirm a positional pair).
Everything comes from the stats pass: per-episode ranges (`readers.health`) and its row sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.stages.contract.health.common import episode_ids, listed, model_reads, trained
from pipeline.stages.contract.rows import Sources, vec

CONFIRM_SHARE = 0.8  # positional pairs: this share of moving action dims correlate best with their own
CONFIRM_R = 0.5  # ... with a median |r| at least this over those dims
POSITION = "position (confirmed by correlation)"


@dataclass(frozen=True)
class Joined:
    """A state feature, an action feature and their dims paired (state dim, action dim), and by what."""

    state: str
    action: str
    dims: tuple[tuple[int, int], ...]
    how: str


def names(src: Sources, key: str) -> list[str]:
    feature = src.c.features.get(key)
    return [str(n) for n in feature.names] if feature is not None and feature.names else []


def _bynames(s_names: list[str], a_names: list[str]) -> tuple[list[tuple[int, int]], str]:
    exact = [(i, a_names.index(n)) for i, n in enumerate(s_names) if n in a_names]
    if exact:
        return exact, "names"

    def unique(names: list[str]) -> dict[str, int]:
        stems = [n.split(".", 1)[0] for n in names]
        return {s: i for i, s in enumerate(stems) if stems.count(s) == 1}

    s_stems, a_stems = unique(s_names), unique(a_names)
    return [(i, a_stems[s]) for s, i in s_stems.items() if s in a_stems], "name stems"


def _by_position(sample: dict[str, Any], state: str, action: str, width: int) -> bool:
    """Whether the sampled rows confirm state dim i is action dim i: each moving action dim correlates
    best with its own index (in CONFIRM_SHARE of them), with a median |r| of at least CONFIRM_R."""
    s, a = (sample.get(k, {}).get("values") for k in (state, action))
    if s is None or a is None or len(s) < 8 or s.shape[1] != width or a.shape[1] != width:
        return False
    s_sd, a_sd = s.std(axis=0), a.std(axis=0)
    moving = np.flatnonzero((s_sd > 0) & (a_sd > 0))
    if moving.size < 2:
        return False
    sz = (s[:, moving] - s[:, moving].mean(axis=0)) / s_sd[moving]
    az = (a[:, moving] - a[:, moving].mean(axis=0)) / a_sd[moving]
    r = np.abs(az.T @ sz) / len(s)
    own = np.argmax(r, axis=1) == np.arange(moving.size)
    return bool(own.mean() >= CONFIRM_SHARE and np.median(np.diag(r)) >= CONFIRM_R)


def joined(src: Sources) -> list[Joined]:
    """Every state/action feature pair whose dims can be paired, by names or by confirmed position."""
    keys = [k for k, f in src.c.features.items() if k in src.c.recomputed]
    states = [k for k in keys if src.c.features[k].role == "state"]
    actions = [k for k in keys if src.c.features[k].role == "action"]
    out = []
    for state in states:
        for action in actions:
            dims, how = _bynames(names(src, state), names(src, action))
            if dims:
                out.append(Joined(state, action, tuple(dims), how))
    if out or len(states) != 1 or len(actions) != 1:
        return out
    state, action = states[0], actions[0]
    width = vec(src.c.recomputed[state], "mean").size
    if names(src, state) or names(src, action) or vec(src.c.recomputed[action], "mean").size != width:
        return []
    if not _by_position(src.c.health.get("sample") or {}, state, action, width):
        return []
    return [Joined(state, action, tuple((d, d) for d in range(width)), POSITION)]


def spans(src: Sources, key: str) -> tuple[np.ndarray, np.ndarray, list[int]] | None:
    """(min, max) per dim over the episodes training reads, and those episodes; the whole data's
    recomputed range (and no episode list) where the pass followed no episode."""
    facts = src.c.health
    episodes = facts.get("episodes") or {}
    if f"{key}/lo" in episodes and len(episodes["index"]):
        ids = episode_ids(facts)
        keep = trained(src, ids)
        if not keep.any():
            return None
        lo = np.asarray(episodes[f"{key}/lo"], dtype=np.float64)[keep]
        hi = np.asarray(episodes[f"{key}/hi"], dtype=np.float64)[keep]
        return lo.min(axis=0), hi.max(axis=0), [e for e, k in zip(ids, keep, strict=True) if k]
    rec = src.c.recomputed.get(key)
    return None if rec is None else (vec(rec, "min"), vec(rec, "max"), [])


def constant(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Dims that hold one value (to float32 round-off of its magnitude) over the judged rows."""
    return (hi - lo) <= 1e-6 * np.maximum(1.0, np.maximum(np.abs(lo), np.abs(hi)))


def moving(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Dims that move beyond round-off: their range is more than 1e-4 of their magnitude."""
    return (hi - lo) > 1e-4 * np.maximum(1.0, np.maximum(np.abs(lo), np.abs(hi)))


def blowup(src: Sources, key: str, d: int, mode: str | None) -> tuple[str, float]:
    """What a change of 1 in dim `d` at deployment becomes after the normalizer, from the shipped stats
    LeRobot normalizes with (the recomputed where none ship): `(mode, factor)`; MEAN_STD divides by
    std + 1e-8, the range modes by their span floored at 1e-8 (times 2 for their [-1, 1] map)."""
    stats = src.c.stats.get(key) or src.c.recomputed.get(key) or {}
    mode = mode or "MEAN_STD"
    if mode == "MEAN_STD":
        std = vec(stats, "std")
        return mode, 1.0 / ((0.0 if std is None or d >= std.size else abs(float(std[d]))) + 1e-8)
    lo_name, hi_name = {"MIN_MAX": ("min", "max"), "QUANTILE10": ("q10", "q90")}.get(mode, ("q01", "q99"))
    lo, hi = vec(stats, lo_name), vec(stats, hi_name)
    span = 0.0 if lo is None or hi is None or d >= lo.size else abs(float(hi[d] - lo[d]))
    return mode, 2.0 / (span if span > 0 else 1e-8)


def hazard_text(factor: float, mode: str) -> str:
    return (
        f"a change of 1 at deployment becomes {factor:.3g} in the model's {mode} units (the normalizer's "
        "scale for it is ~0: std + 1e-8, or max - min floored at 1e-8)"
    )


def episodes_text(episodes: list[int]) -> str:
    return (
        f"every one of the {len(episodes)} episode(s) judged ({listed(episodes, 5)})"
        if episodes
        else ("every row")
    )


def reads(src: Sources, key: str) -> bool:
    return key in model_reads(src)
