"""Shipped quantiles that LeRobot averaged over episodes, judged as that average.

LeRobot v3 writes each episode's quantiles into meta/episodes (`stats/<key>/q01`, ...) and stats.json's
as their average weighted by the episodes' lengths: every LeRobot dataset and base is normalised with that
average, which can sit far from the pooled data's own quantile (episodes that rest in different places
pull each episode's q01 apart). Its rank in the pooled data is the data's nature, not a fault. A quantile
is stale when it is not what it says it is: stats.json is not the average of the per-episode quantiles,
or an episode's quantile lies outside that episode's own data (its min and max from the health pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.stages.contract.rows import Sources, vec

AGREE = 1e-6  # relative agreement of stats.json with the average (float64 round-off is ~1e-14)
INSIDE = 1e-5  # relative slack of an episode's quantile beyond its data's min and max


@dataclass
class Averaged:
    """The per-episode quantiles meta/episodes ships for one feature, set against stats.json and the data."""

    episodes: int
    off_average: dict[str, list[int]]  # per level, the dims where stats.json is not the episodes' average
    outside: dict[int, dict[str, list[int]]] = field(default_factory=dict)  # episode -> level -> dims
    compared: int = 0  # episodes whose quantiles were set against their own data

    @property
    def is_average(self) -> bool:
        return not self.off_average


def episode_average(src: Sources, key: str, levels: list[str]) -> Averaged | None:
    """The per-episode quantiles of `key` in meta/episodes, or None where the dataset ships none (not
    LeRobot v3, or written without them): its shipped quantiles are then judged by their rank alone."""
    if not src.c.kind.startswith("lerobot"):
        return None
    names = ["episode_index", f"stats/{key}/count", *(f"stats/{key}/{q}" for q in levels)]
    try:
        found = LeRobotData(src.c.path).episode_columns(names)
    except InputError:
        return None
    have = [q for q in levels if f"stats/{key}/{q}" in found]
    if not have or f"stats/{key}/count" not in found or not found[f"stats/{key}/count"]:
        return None
    weight = np.array([np.ravel(c)[0] for c in found[f"stats/{key}/count"]], dtype=np.float64)
    shipped = src.c.stats.get(key, {})
    per_episode = {q: np.array(found[f"stats/{key}/{q}"], dtype=np.float64) for q in have}
    off = {}
    for q, values in per_episode.items():
        target = vec(shipped, q)
        if target is None or values.ndim != 2 or values.shape[1] != target.size or weight.sum() <= 0:
            return None
        mean = (values * weight[:, None]).sum(axis=0) / weight.sum()
        dims = np.flatnonzero(np.abs(mean - target) > AGREE * np.maximum(1.0, np.abs(mean)))
        if dims.size:
            off[q] = dims.tolist()
    index = found.get("episode_index") or list(range(len(weight)))
    result = Averaged(len(weight), off)
    _inside(src, key, [int(e) for e in index], per_episode, result)
    return result


def _inside(
    src: Sources, key: str, index: list[int], per_episode: dict[str, np.ndarray], result: Averaged
) -> None:
    """Each followed episode's shipped quantiles against its own data's min and max (health facts)."""
    facts = src.c.health.get("episodes") or {}
    if f"{key}/lo" not in facts or "index" not in facts:
        return
    row_of = {int(e): r for r, e in enumerate(np.asarray(facts["index"]).tolist())}
    lo, hi = np.asarray(facts[f"{key}/lo"], dtype=np.float64), np.asarray(facts[f"{key}/hi"], np.float64)
    for i, episode in enumerate(index):
        r = row_of.get(episode)
        if r is None or lo.ndim != 2:
            continue
        result.compared += 1
        slack = INSIDE * np.maximum(1.0, np.maximum(np.abs(lo[r]), np.abs(hi[r])))
        for q, values in per_episode.items():
            if values.shape[1] != lo.shape[1]:
                continue
            dims = np.flatnonzero((values[i] < lo[r] - slack) | (values[i] > hi[r] + slack))
            if dims.size:
                result.outside.setdefault(episode, {})[q] = dims.tolist()


def outside_text(found: Averaged, limit: int = 3) -> str:
    shown = [
        f"episode {e}: {', '.join(f'{q} dim(s) {dims}' for q, dims in levels.items())}"
        for e, levels in list(found.outside.items())[:limit]
    ]
    more = len(found.outside) - limit
    return "; ".join(shown) + (f"; +{more} more episode(s) in evidence" if more > 0 else "")


def evidence(found: Averaged) -> dict[str, Any]:
    return {
        "averaged_over_episodes": found.episodes,
        "is_average": found.is_average,
        "off_average": found.off_average,
        "episodes_outside_their_data": {e: v for e, v in list(found.outside.items())[:50]},
        "episodes_compared_with_their_data": found.compared,
        "episodes": list(found.outside)[:200],
    }
