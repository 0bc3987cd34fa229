"""Dead channels found by their own command, and constants the model normalizes with a floor.

`health.dead_sensor:<state>`: a state dim constant over the episodes training reads while the action dim
of the same joint (`pairs.py`) moves: the model never sees that joint move, and at deployment, where the
sensor works, LeRobot's normalizer divides its change by std + 1e-8 (MIN_MAX: max - min floored at 1e-8).
Hard where the model reads that state. `health.unused_command:<action>`: the reverse, soft (the joint
moves on its own, or its command was never recorded; the model learns a constant for it).

`normalization.constant:<key>`: an input dim constant over the trained episodes that training normalizes
with a mode that floors its scale (every mode but IDENTITY): a deployment hazard said in the model's
units, with its fix. Hard where the model reads it and no base stats give it a scale; only where the
mode is known (a training config or a base): a dataset alone may be trained with IDENTITY.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.contract import pairs
from pipeline.stages.contract.health.common import ROWS, labels
from pipeline.stages.contract.rows import NAME, Sources, vec
from pipeline.stages.contract.sides import sides

NORM = Rows(NAME, "normalization")
FIX = (
    "drop the dim from the feature the model reads, or normalize its type with IDENTITY (or give the dim "
    "a finite scale in the stats, e.g. std 1)"
)


def channel_rows(src: Sources) -> list[Check]:
    """The pair rows for every paired state/action, then the constant rows (dims the pair rows named
    are left to them)."""
    out: list[Check] = []
    named: dict[str, set[int]] = {}
    for join in pairs.joined(src):
        s_span, a_span = pairs.spans(src, join.state), pairs.spans(src, join.action)
        if s_span is None or a_span is None:
            continue
        (s_lo, s_hi, episodes), (a_lo, a_hi, _) = s_span, a_span
        s_const, a_moves = pairs.constant(s_lo, s_hi), pairs.moving(a_lo, a_hi)
        a_const, s_moves = pairs.constant(a_lo, a_hi), pairs.moving(s_lo, s_hi)
        dead = [(s, a) for s, a in join.dims if s_const[s] and a_moves[a]]
        named.setdefault(join.state, set()).update(s for s, _ in dead)
        out.append(_dead_row(src, join, dead, episodes, (a_lo, a_hi)))
        if join.how != pairs.POSITION:
            unused = [(s, a) for s, a in join.dims if a_const[a] and s_moves[s]]
            out.append(_unused_row(src, join, unused, episodes, (a_lo, a_hi)))
    return out + constant_rows(src, named)


def _pairs_text(src: Sources, join: pairs.Joined, dims: list[tuple[int, int]], limit: int = 4) -> str:
    s_names, a_names = pairs.names(src, join.state), pairs.names(src, join.action)
    shown = [
        f"{join.state} dim {labels(s_names, [s])[0]} with {join.action} dim {labels(a_names, [a])[0]}"
        for s, a in dims[:limit]
    ]
    return "; ".join(shown) + (f"; +{len(dims) - limit} more in evidence" if len(dims) > limit else "")


def _dead_row(
    src: Sources,
    join: pairs.Joined,
    dead: list[tuple[int, int]],
    episodes: list[int],
    a_span: tuple[np.ndarray, np.ndarray],
) -> Check:
    read = pairs.reads(src, join.state)
    evidence: dict[str, Any] = {
        "paired_by": join.how,
        "pairs": [list(p) for p in join.dims],
        "model_reads": read,
    }
    if not dead:
        message = (
            f"every state dim of {join.state} moves where its command in {join.action} does "
            f"({len(join.dims)} dim(s) paired by {join.how})"
        )
        return ROWS(f"health.dead_sensor:{join.state}", join.state, "match", message, evidence=evidence)
    mode = src.b_mode_of(src.c.features[join.state].type)
    s_lo = pairs.spans(src, join.state)[0]  # type: ignore[index]
    stated = []
    for s, a in dead:
        m, factor = pairs.blowup(src, join.state, s, mode)
        stated.append({"state_dim": s, "action_dim": a, "value": float(s_lo[s]), "mode": m, "factor": factor})
    a_lo, a_hi = a_span
    first = stated[0]
    message = (
        f"dead sensor: {_pairs_text(src, join, dead)}: the state holds {first['value']:.6g} in "
        f"{pairs.episodes_text(episodes)} while its command moves (range "
        f"[{a_lo[dead[0][1]]:.4g}, {a_hi[dead[0][1]]:.4g}]); paired by {join.how}. The model never sees "
        f"this joint move; "
        + pairs.hazard_text(first["factor"], first["mode"] if mode else "MEAN_STD")
        + ("" if mode else " (MIN_MAX: the same, times 2)")
        + ("; the model reads this state" if read else "; the model does not read this state")
        + f". Fix: repair or re-record the sensor, or {FIX}"
    )
    evidence.update(
        dims=[s for s, _ in dead],
        action_dims=[a for _, a in dead],
        dead=stated,
        episodes_judged=len(episodes),
        episodes=[],
    )
    return ROWS(
        f"health.dead_sensor:{join.state}",
        join.state,
        "mismatch",
        message,
        severity="hard" if read else "soft",
        expected="a state dim that moves where its command moves",
        actual=f"{len(dead)} dim(s) constant",
        evidence=evidence,
    )


def _unused_row(
    src: Sources,
    join: pairs.Joined,
    unused: list[tuple[int, int]],
    episodes: list[int],
    a_span: tuple[np.ndarray, np.ndarray],
) -> Check:
    evidence: dict[str, Any] = {"paired_by": join.how, "episodes": []}
    if not unused:
        message = f"every command in {join.action} moves where its joint in {join.state} does"
        return ROWS(
            f"health.unused_command:{join.action}",
            join.action,
            "match",
            message,
            severity="soft",
            evidence=evidence,
        )
    message = (
        f"unused or unrecorded command: {_pairs_text(src, join, unused)}: the command holds "
        f"{a_span[0][unused[0][1]]:.6g} in {pairs.episodes_text(episodes)} while its joint moves; the "
        "model learns a constant for it (the joint moves on its own, is driven by another channel, or its "
        "command was never recorded): soft, a look at the recording setup"
    )
    evidence.update(dims=[a for _, a in unused], state_dims=[s for s, _ in unused])
    return ROWS(
        f"health.unused_command:{join.action}",
        join.action,
        "mismatch",
        message,
        severity="soft",
        expected="a command that moves where its joint moves",
        actual=f"{len(unused)} dim(s) constant",
        evidence=evidence,
    )


def constant_rows(src: Sources, named: dict[str, set[int]]) -> list[Check]:
    """One row per input feature the model reads and normalizes with a floored scale."""
    out = []
    for key, feature in src.c.features.items():
        mode = src.b_mode_of(feature.type)
        if feature.role not in ("state", "env") or mode in (None, "IDENTITY") or not pairs.reads(src, key):
            continue
        span = pairs.spans(src, key)
        if span is None:
            continue
        lo, hi, episodes = span
        dims = [int(d) for d in np.flatnonzero(pairs.constant(lo, hi)) if int(d) not in named.get(key, set())]
        out.append(_constant_row(src, key, mode, dims, lo, episodes))
    return out


def _base_moves(src: Sources, key: str, d: int) -> bool:
    """The base's own stats give dim `d` a scale (a real base only, not a stand-in)."""
    stats = src.a.stats.get(key) if sides(src.a) == "ABC" else None
    std, lo, hi = vec(stats, "std"), vec(stats, "min"), vec(stats, "max")
    if std is not None and d < std.size:
        return bool(std[d] > 1e-6)
    return lo is not None and hi is not None and d < lo.size and bool(hi[d] > lo[d])


def _constant_row(
    src: Sources, key: str, mode: str, dims: list[int], lo: np.ndarray, episodes: list[int]
) -> Check:
    check_id = f"normalization.constant:{key}"
    if not dims:
        message = f"{key}: no dim the model reads is constant over the trained episodes ({mode})"
        return NORM(check_id, key, "match", message, configured=mode)
    names = pairs.names(src, key)
    factors = {d: pairs.blowup(src, key, d, mode)[1] for d in dims}
    scaled = [d for d in dims if _base_moves(src, key, d)]
    worst = max(dims, key=lambda d: factors[d])
    message = (
        f"{key}: dim(s) {', '.join(labels(names, dims[:8]))}{' ...' if len(dims) > 8 else ''} hold one value "
        f"in {pairs.episodes_text(episodes)} and training normalizes {key} with {mode}: "
        + pairs.hazard_text(factors[worst], mode)
        + f" (dim {worst}); the model reads it. Fix: {FIX}"
        + (f"; the base's stats give dim(s) {scaled} a scale" if scaled else "")
    )
    evidence = {
        "dims": dims,
        "values": {d: float(lo[d]) for d in dims},
        "factor": {d: float(f"{factors[d]:.4g}") for d in dims},
        "base_scaled": scaled,
        "episodes": [],
    }
    return NORM(
        check_id,
        key,
        "mismatch",
        message,
        severity="soft" if len(scaled) == len(dims) else "hard",
        expected="a dim that varies, or a mode that does not divide by its ~0 scale",
        configured=mode,
        actual=f"{len(dims)} constant dim(s)",
        evidence=evidence,
    )
