"""What every health row shares: its row builder, how it names episodes and dims, and its per-episode
facts as arrays."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from pipeline.record.records import Rows
from pipeline.stages.contract.rows import NAME, Sources

ROWS = Rows(NAME, "health")
SHOWN = 10  # episodes or dims named in a message (all of them are in the evidence)


def listed(items: Sequence[Any], shown: int = SHOWN) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(str(i) for i in items[:shown]) + more


def dim_names(src: Sources, key: str) -> list[str]:
    feature = src.c.features.get(key)
    return list(feature.names or []) if feature is not None else []


def label(names: Sequence[str], dim: int) -> str:
    return f"{dim} ({names[dim]})" if dim < len(names) else str(dim)


def labels(names: Sequence[str], dims: Iterable[int]) -> list[str]:
    return [label(names, int(d)) for d in dims]


def model_reads(src: Sources) -> set[str]:
    """C's feature keys the audited model (A) takes as input, by key or by role."""
    a_inputs = [f for f in src.a.features.values() if f.role != "action"]
    keys = {f.key for f in a_inputs}
    roles = {f.role for f in a_inputs}
    return {k for k, f in src.c.features.items() if k in keys or (f.role in roles and f.role == "state")}


def model_predicts(src: Sources) -> set[str]:
    """C's action keys the model learns to predict: those A declares as outputs, else every action key
    (a policy trained on C is trained on its actions whether or not its config names them)."""
    declared = {f.key for f in src.a.features.values() if f.role == "action"}
    actions = {k for k, f in src.c.features.items() if f.role == "action"}
    return (actions & declared) or (actions if not declared else set())


def episode_ids(facts: dict[str, Any]) -> list[int]:
    return [int(e) for e in facts["episodes"]["index"]]


def column(facts: dict[str, Any], name: str) -> np.ndarray:
    """One per-episode fact over the followed episodes (`readers.health`'s columnar episodes)."""
    return np.asarray(facts["episodes"][name])


def per_episode(facts: dict[str, Any], key: str, field: str) -> tuple[list[int], np.ndarray]:
    """(episode ids, the [episodes, dim] values of `key`'s `field`) over the followed episodes."""
    name = f"{key}/{field}"
    if name not in facts["episodes"]:
        return [], np.empty((0, 0))
    return episode_ids(facts), column(facts, name)


def trained(src: Sources, ids: Sequence[int]) -> np.ndarray:
    """Which of these episodes training reads (`Sources.trained_episodes`): all of them unless the
    training line or config names its episodes."""
    chosen = src.trained_episodes
    ids = np.asarray(ids, dtype=np.int64)
    return np.ones(len(ids), dtype=bool) if chosen is None else np.isin(ids, np.asarray(chosen, np.int64))


def trained_text(src: Sources) -> str:
    """`; judged on the 10 episode(s) training reads (dataset.episodes)` for a row's message, or ''."""
    chosen = src.trained_episodes
    return (
        ""
        if chosen is None
        else f"; judged on the {len(chosen)} episode(s) training reads (dataset.episodes)"
    )
