"""Action and state rows: an episode whose motion on a dim departs from that dim's habit.

Each row turns a per-episode summary from the stats pass into a departure (`departure.depart`: robust z
over the episodes, Benjamini-Hochberg over every (episode, dim) judged, a practical threshold): `held`
(one value for the whole episode while the dim moves in the others: a stuck actuator, a gripper that never
opens, a dead sensor), `frozen` (a hold much longer than the dim's holds in the other episodes), `spikes`
(a one-sample excursion far beyond the dim's usual one; on a discrete dim, beyond its levels' span) and
`jumps` (a step far beyond the dim's largest steps elsewhere: two episodes joined, a reset recorded; a
discrete dim's jumps are its level changes, never judged). What every episode shares (a gripper held shut,
clipped actions) is the habit itself and stays in the profile. With fewer than `min_episodes` episodes
there is no habit to depart from: one `skipped` row says so. Severity: `held` is hard where the model
reads or predicts the feature (it is taught that the dim does not move); `frozen` where it does and the
hold outlasts its moving partner's by FROZEN_HARD_S or more (a sensor or actuator dropout); `spikes` where
the model uses the feature and one spike alone moves the normalized data by more than `stale.effect`
through the stats it enters (MIN_MAX's range, MEAN_STD's moments: every other sample squeezed); the rest
are soft.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.readers.profile import kinds
from pipeline.record.records import Check
from pipeline.stages.contract import stale_effect
from pipeline.stages.contract.health.base import base_rows
from pipeline.stages.contract.health.common import (
    ROWS,
    column,
    dim_names,
    episode_ids,
    labels,
    listed,
    model_predicts,
    model_reads,
    trained,
)
from pipeline.stages.contract.health.departure import depart
from pipeline.stages.contract.health.stuck import state_action, stuck_rows
from pipeline.stages.contract.rows import Sources, vec

ACTUATED = ("state", "action")  # the robot's own dims: an object at rest is not a fault
LOG_FLOOR = 0.5  # the smallest spread (in log units, a factor of 1.65) a dim's habit is given
FROZEN_BEYOND = 1.5  # a frozen hold exceeds the partner's (or the feature's) by this x frozen_share
FROZEN_HARD_S = 2.0  # a joint still this long beyond its moving command (or the reverse) is a dropout: hard
TOGETHER_Z = 2.0  # each of them beyond this robust z (their number at one frame is the evidence)
TOGETHER = 0.25  # a seam: at least this share of a feature's moving dims jump at the same frame
HELD_RARE = 0.05  # a held episode departs only where at most this share of the others is held too
HELD_FLOOR = 0.1  # and of its per-episode spread, as a share of the median spread
QUANTUM_STEPS = 8  # nonzero steps of a dim in the profile's sample that tell its resolution


def motion_rows(src: Sources, facts: dict[str, Any]) -> list[Check]:
    cfg = src.cfg.health
    out = base_rows(src, facts)
    ids = episode_ids(facts)
    if len(ids) < cfg.min_episodes:
        message = (
            f"{len(ids)} episode(s): a departure from the episodes' habit needs at least {cfg.min_episodes} "
            "(health.min_episodes); the data's size, not a fault: see the dataset profile"
        )
        return out + [ROWS("health.motion", "motion", "skipped", message, severity="soft")]
    judged = trained(src, ids)
    views = {
        k: _View(src, facts, k, judged)
        for k in facts["diff_std"]
        if src.c.features.get(k) is not None and src.c.features[k].role in ACTUATED
    }
    pair = state_action(src, facts)
    for key, view in views.items():
        other, paired = None, {}
        if pair is not None and key in pair[:2] and pair[1 - pair.index(key)] in views:
            other = views[pair[1 - pair.index(key)]]
            paired = dict(pair[2] if key == pair[0] else [(b, a) for a, b in pair[2]])
        out += [_held(view, other, paired), _frozen(view, other, paired)]
        out += [_excursions(view, "spikes", other, paired), _excursions(view, "jumps", other, paired)]
    return out + stuck_rows(src, facts, judged)


class _View:
    """One feature's per-episode facts as [episodes, dims] arrays, and its dims' kinds."""

    def __init__(self, src: Sources, facts: dict[str, Any], key: str, judged: np.ndarray):
        self.src, self.key, self.cfg = src, key, src.cfg.health
        self.ids = episode_ids(facts)
        self.length = column(facts, "rows").astype(float)
        self.fact = {
            n: np.asarray(column(facts, f"{key}/{n}"), dtype=float)
            for n in ("lo", "hi", "longest", "jump", "jump_at", "bounce", "bounce_at")
        }
        self.row_longest = column(facts, f"{key}/row_longest").astype(float)
        self.spread = self.fact["hi"] - self.fact["lo"]
        self.kind, levels = kinds(facts, key)
        self.span = np.array([(max(v) - min(v)) if v else 0.0 for v in levels])
        self.live = np.array([k != "constant" for k in self.kind])
        self.discrete = np.array([k == "discrete" for k in self.kind])
        self.step = np.asarray(facts["diff_std"][key], dtype=float)
        unit = np.where(self.discrete, self.span, self.step)  # a step's size: RMS steps, or levels' span
        self.unit = np.where(unit > 0, unit, 1.0)
        self.quantum = _quantum(facts, key, self.spread.shape[1])
        self.limit = np.where(self.discrete, 1.5, self.cfg.spike_z)
        self.judged = judged[:, None] & self.live[None, :]
        self.names = dim_names(src, key)
        fps = facts.get("fps")
        self.fps = float(fps) if isinstance(fps, (int, float)) and fps > 0 else None
        self.used = key in model_reads(src) | model_predicts(src)
        self.role = "reads" if key in model_reads(src) else "predicts"


def _held(v: _View, other: _View | None, paired: dict[int, int]) -> Check:
    """Exactly one value over a whole episode, against the dim's spread in the episodes, on a log scale:
    a held episode's spread is below the dim's resolution (its smallest recorded step), so the departure
    is how many of the dim's own spreads (robust, in log units) lie between what the dim moves in a
    typical episode and one step of it. A dim whose episodes move alike departs far; one that barely
    moves anywhere (an arm at rest, a quantized joint that twitches one step) or whose spread ranges over
    orders of magnitude does not. Where its partner (the joint's command, the command's joint) is still
    in that episode too (within HELD_FLOOR of its median spread), the operator held it (a hand left
    unused in one episode): behaviour, not a fault."""
    typical = np.median(v.spread, axis=0) if len(v.spread) else v.span
    large = (v.spread == 0) & (v.length >= v.cfg.frozen_frames)[:, None] & (typical > 0)[None, :]
    others = np.sum(v.spread == 0, axis=0) - 1
    large &= (others / max(len(v.ids) - 1, 1) <= HELD_RARE)[None, :]  # held in more: the dim's habit
    still = other.spread <= HELD_FLOOR * np.median(other.spread, axis=0) if other is not None else None
    large &= ~_partner(v, other, paired, still)
    dep = depart(-v.spread, v.judged, typical * HELD_FLOOR, v.cfg.departure_alpha, large)
    # the log scale, where no other episode holds the dim: one step of it against its typical spread
    quantum = np.where(np.isnan(v.quantum), typical, v.quantum)  # unknown: a typical spread, no departure
    spread = np.log(np.maximum(v.spread, np.maximum(quantum, 1e-300)[None, :]))
    logged = depart(-spread, v.judged, LOG_FLOOR, v.cfg.departure_alpha, large & (others == 0)[None, :])
    dep.z = np.where(logged.flagged, logged.z, dep.z)
    dep.flagged |= logged.flagged
    found = {
        (v.ids[r], int(d)): {
            "frames": [0, int(v.length[r]) - 1],
            "value": float(v.fact["lo"][r, d]),
            "spread_elsewhere": float(typical[d]),
            "z": round(float(dep.z[r, d]), 1),
        }
        for r, d in np.argwhere(dep.flagged)
    }
    rule = (
        f"one value for a whole episode (>= {v.cfg.frozen_frames} frames) where the dim's spread over the "
        "episodes says it moves (robust z of the log spread, a held one at the dim's smallest step; "
        f"BH q < {v.cfg.departure_alpha:g} over the episodes x dims judged)"
    )
    shown = [
        f"episode {e} dim {labels(v.names, [d])[0]} at {x['value']:.4g} (median spread "
        f"{x['spread_elsewhere']:.4g}, z {x['z']:g})"
        for (e, d), x in found.items()
    ]
    tail = f"; the model {v.role} {v.key}" if v.used and found else ""
    message = (
        f"{v.key}: held dims ({rule}): {listed(shown, 5)}{tail}"
        if found
        else f"{v.key}: no dim held ({rule})"
    )
    return _row("held", v, found, message, "hard" if v.used else "soft")


def _quantum(facts: dict[str, Any], key: str, dims: int) -> np.ndarray:
    """Per dim, its resolution: the smallest nonzero step in the profile's sample of steps; NaN where the
    sample holds fewer than QUANTUM_STEPS of them (a dim that barely moves: no resolution to judge by)."""
    steps = np.abs(np.asarray(((facts.get("sample") or {}).get(key) or {}).get("steps", np.empty(0))))
    if steps.ndim != 2 or steps.shape[1] != dims:
        return np.full(dims, np.nan)
    moved = np.isfinite(steps) & (steps > 0)
    smallest = np.where(moved, steps, np.inf).min(axis=0) if len(steps) else np.full(dims, np.inf)
    return np.where(moved.sum(axis=0) >= QUANTUM_STEPS, smallest, np.nan)


def _frozen(v: _View, other: _View | None, paired: dict[int, int]) -> Check:
    """A hold much longer than the dim's habit. Where the dim has a partner (a state joint and its
    command), the hold beyond the partner's: a joint that stops while its command goes on, or a command
    that stops while the joint goes on (an operator holding a joint still holds both). Else the hold
    beyond the stretches where the whole feature stood still (a robot at rest), judged more strictly."""
    hold = np.maximum(v.fact["longest"] - v.row_longest[:, None], 0)
    floor = np.full(hold.shape[1], v.cfg.frozen_share)
    if other is not None:
        for d, o in paired.items():
            hold[:, d] = v.fact["longest"][:, d] - other.fact["longest"][:, o]
            floor[d] = v.cfg.frozen_share / 2
    own = hold / np.maximum(v.length - 1, 1)[:, None]
    need = np.maximum(v.cfg.frozen_frames, v.cfg.frozen_share * v.length)[:, None]
    large = (v.fact["longest"] >= need) & (v.spread > 0) & (own >= FROZEN_BEYOND * v.cfg.frozen_share)
    dep = depart(own, v.judged, floor, v.cfg.departure_alpha, large)
    fps = v.fps or np.nan
    found = {
        (v.ids[r], int(d)): {
            "steps": int(v.fact["longest"][r, d]),
            "rows": int(v.length[r]),
            "share": round(float(own[r, d]), 3),
            "habit": round(float(dep.centre[d]), 3),
            "against": "its partner" if int(d) in paired and other is not None else "the feature",
            "seconds": round(float(hold[r, d] / fps), 2),  # NaN without an fps: never hard
        }
        for r, d in np.argwhere(dep.flagged)
    }
    rule = (
        f"a hold >= max({v.cfg.frozen_frames}, {v.cfg.frozen_share:.0%} of the episode) steps beyond its "
        f"partner's (or the feature's), departing from the dim's habit (BH q < {v.cfg.departure_alpha:g})"
    )
    shown = [
        f"episode {e} dim {labels(v.names, [d])[0]} unchanged {x['steps']} of {x['rows']} frames "
        f"({x['share']:.0%} beyond {x['against']}; habit {x['habit']:.0%})"
        for (e, d), x in found.items()
    ]
    message = f"{v.key}: frozen ({rule}): {listed(shown, 5)}" if found else f"{v.key}: no frozen dim ({rule})"
    dropped = [x for x in found.values() if x["against"] == "its partner" and x["seconds"] >= FROZEN_HARD_S]
    if v.used and dropped:
        message += (
            f"; held {max(x['seconds'] for x in dropped):.3g} s while its partner moved "
            f"(>= {FROZEN_HARD_S:g} s: a dropout, not a pause); the model {v.role} {v.key}"
        )
    return _row("frozen", v, found, message, "hard" if v.used and dropped else "soft")


def _partner(v: _View, other: _View | None, paired: dict[int, int], flag: np.ndarray | None) -> np.ndarray:
    """[episodes, dims]: True where the dim's partner shows `flag` (an array over the partner's dims)."""
    out = np.zeros(v.spread.shape, dtype=bool)
    if other is not None and flag is not None:
        for d, o in paired.items():
            out[:, d] = flag[:, o]
    return out


def _partner_at(v: _View, other: _View, paired: dict[int, int], fact: str) -> np.ndarray:
    """[episodes, dims]: the partner's `fact` (a frame) per dim (-inf where the dim has no partner)."""
    out = np.full(v.spread.shape, -np.inf)
    for d, o in paired.items():
        out[:, d] = other.fact[fact][:, o]
    return out


def _excursions(v: _View, what: str, other: _View | None, paired: dict[int, int]) -> Check:
    """`spikes`: an episode's largest one-sample excursion; `jumps`: its largest step; each in units of
    the dim's step scale (its RMS step; a discrete dim's levels' span), on a log scale, against the
    same in the other episodes. A discrete dim's steps are its level changes: only spikes are judged."""
    fact, at = ("bounce", "bounce_at") if what == "spikes" else ("jump", "jump_at")
    size, limit = v.fact[fact] / v.unit[None, :], v.limit
    judged = v.judged & (~v.discrete[None, :] if what == "jumps" else True)
    moving = v.spread > 0  # the habit of the episodes where the dim moves (an arm at rest has no steps)
    enough = moving.sum(axis=0) >= v.cfg.min_episodes
    stat = np.where(moving, np.log1p(size), np.nan)
    large = size > limit[None, :]
    if what == "spikes" and other is not None:  # both the joint and its command spiked: a real motion
        big = other.fact["bounce"] / other.unit[None, :] > other.limit[None, :] / 2
        when = _partner_at(v, other, paired, "bounce_at")
        large &= ~(_partner(v, other, paired, big) & (np.abs(when - v.fact["bounce_at"]) <= 2))
    dep = depart(stat, judged & moving & enough[None, :], LOG_FLOOR, v.cfg.departure_alpha, large)
    if what == "jumps":  # one dim's rare large step is a fast motion; a seam moves most dims at once
        dep.flagged = _together(v, dep.z, large & judged & moving)
    found = {
        (v.ids[r], int(d)): {"frame": int(v.fact[at][r, d]), "size": round(float(size[r, d]), 1)}
        | (_spike_effect(v, int(r), int(d)) if what == "spikes" else {})
        for r, d in np.argwhere(dep.flagged)
    }
    noun = "one-sample spike" if what == "spikes" else "step"
    rule = (
        f"a {noun} > {v.cfg.spike_z:g} RMS steps (a discrete dim: 1.5x its levels' span) departing from the "
        f"dim's largest {noun}s in the episodes (BH q < {v.cfg.departure_alpha:g})"
    )
    ranked = sorted(found.items(), key=lambda kv: -kv[1]["size"])
    shown = [
        f"episode {e} dim {labels(v.names, [d])[0]} frame {x['frame']} ({x['size']:g} steps)"
        for (e, d), x in ranked
    ]
    message = f"{v.key}: {what} ({rule}): {listed(shown, 5)}" if found else f"{v.key}: no {what} ({rule})"
    worst = max(found.items(), key=lambda kv: kv[1].get("effect", 0.0), default=None)
    limit = v.src.cfg.stale.effect
    hard = v.used and worst is not None and worst[1].get("effect", 0.0) > limit
    if hard:
        (e, d), x = worst
        message += (
            f"; the spike at episode {e} dim {labels(v.names, [d])[0]} alone moves the normalized values "
            f"by up to {x['effect']:.3g} ({x['mode']}), above the {limit:g} that blocks; the model {v.role} "
            f"{v.key}"
        )
    spikes: dict[int, dict[str, list[int]]] = {}
    for (e, d), x in found.items():
        entry = spikes.setdefault(e, {"dims": [], "frames": []})
        entry["dims"].append(d)
        entry["frames"].append(x["frame"])
    return _row(what, v, found, message, "hard" if hard else "soft", {what: spikes})


def _spike_effect(v: _View, r: int, d: int) -> dict[str, Any]:
    """What one spike does to the stats the model normalizes with (`stale_effect.removal_effect`): the
    spiked value is the episode's extreme farther from the dim's mean (a spike that is not one moves
    nothing); without it the dim's range is the other episodes' and the spike's neighbour's (one of
    them lies `bounce` from it)."""
    stats = {k: vec(v.src.c.recomputed.get(v.key) or {}, k) for k in ("mean", "std", "min", "max")}
    modes = stale_effect.modes_for(v.src.b_mode_of(v.src.c.features[v.key].type))
    if any(x is None or x.size <= d for x in stats.values()) or not modes or len(v.ids) < 2:
        return {}
    one = {k: float(x[d]) for k, x in stats.items()}  # type: ignore[union-attr]
    lo, hi = float(v.fact["lo"][r, d]), float(v.fact["hi"][r, d])
    up = abs(hi - one["mean"]) >= abs(lo - one["mean"])
    value = hi if up else lo
    near = value - np.sign(value - one["mean"]) * float(v.fact["bounce"][r, d])
    rest = np.delete(np.arange(len(v.ids)), r)
    bounds = (min(float(v.fact["lo"][rest, d].min()), near), max(float(v.fact["hi"][rest, d].max()), near))
    effect, mode = stale_effect.removal_effect(one, int(v.src.c.rows), value, bounds, modes)
    return {"effect": effect, "mode": mode} if mode else {}


def _row(
    name: str,
    v: _View,
    found: dict[tuple[int, int], dict[str, Any]],
    message: str,
    severity: str,
    extra: dict[str, Any] | None = None,
) -> Check:
    per: dict[int, list[int]] = {}
    for e, d in found:
        per.setdefault(e, []).append(d)
    return ROWS(
        f"health.{name}:{v.key}",
        v.key,
        "mismatch" if found else "match",
        message,
        severity=severity if found else "soft",
        evidence={
            "episodes": sorted(per),
            "dims": sorted({d for _, d in found}),
            "per_episode": per,
            "found": {f"{e}:{d}": x for (e, d), x in found.items()},
            "frames_per_episode": {e: len(ds) for e, ds in per.items()},
            "model_uses": v.used,
            **(extra or {}),
        },
    )


def _together(v: _View, z: np.ndarray, large: np.ndarray) -> np.ndarray:
    """Cells whose large step lands on the same frame (+-1) as the steps of at least TOGETHER of the
    feature's moving continuous dims (and 3) in that episode, each beyond the dim's habit (TOGETHER_Z):
    k dims departing at one frame by chance is a product of k tail probabilities."""
    candidate = large & (z >= TOGETHER_Z)
    out = np.zeros_like(candidate)
    dims = max(3, int(np.ceil(TOGETHER * max(int((v.live & ~v.discrete).sum()), 1))))
    for r in np.flatnonzero(candidate.sum(axis=1) >= dims):
        at = v.fact["jump_at"][r]
        cells = np.flatnonzero(candidate[r])
        for d in cells:
            near = cells[np.abs(at[cells] - at[d]) <= 1]
            if len(near) >= dims:
                out[r, near] = True
    return out
