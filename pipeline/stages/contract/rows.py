"""The shared vocabulary of the contract checks: the three sources and how their features pair.

Kept apart from the checks so each category module stays a list of small functions that read
`Sources` and return `Check`s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.readers.base import Contract, DatasetContract, Feature
from pipeline.stages.contract.config import ContractConfig

NAME = "contract"


@dataclass
class Pair:
    """One of A's vector features and where it lives in B and C."""

    a: Feature
    c: Feature | None
    how: str  # exact | rename_map | role | missing
    b_mode: str | None
    a_mode: str | None


@dataclass
class Sources:
    """The three contracts plus the thresholds, and what checks learned for later checks."""

    a: Contract
    b: Contract
    c: DatasetContract
    cfg: ContractConfig
    permutations: dict[str, dict[int, int]] = field(default_factory=dict)
    explained: dict[str, dict[int, str]] = field(default_factory=dict)

    def b_mode(self, feature: Feature) -> str | None:
        """The mode training will use: B's mapping over A's (LeRobot finetuning keeps the base config)."""
        return self.b.norm_map.get(feature.type) or self.a.norm_map.get(feature.type)

    def b_features(self) -> dict[str, Feature]:
        return self.b.features or self.a.features

    def explain(self, key: str, dims: list[int], why: str) -> None:
        for d in dims:
            self.explained.setdefault(key, {})[int(d)] = why


def pair_features(src: Sources) -> list[Pair]:
    """A's non-image vector features, each matched to C by key, B's rename map, or role."""
    rename = {v: k for k, v in (src.b.hints.get("rename_map") or {}).items()}
    pairs = []
    for key, feature in src.a.features.items():
        if feature.role in ("image", "other"):
            continue
        c, how = src.c.features.get(key), "exact"
        if c is None and key in rename and rename[key] in src.c.features:
            c, how = src.c.features[rename[key]], "rename_map"
        if c is None:
            same = [f for f in src.c.features.values() if f.role == feature.role]
            c, how = (same[0], "role") if len(same) == 1 else (None, "missing")
        pairs.append(Pair(feature, c, how, src.b_mode(feature), src.a.mode(feature)))
    return pairs


def vec(stats: dict[str, np.ndarray] | None, name: str) -> np.ndarray | None:
    if not stats or name not in stats:
        return None
    return np.asarray(stats[name], dtype=np.float64).reshape(-1)


def dims_text(dims: list[int] | np.ndarray, names: list[str] | None = None, limit: int = 12) -> str:
    items = [
        f"{int(d)}" + (f" ({names[int(d)]})" if names and int(d) < len(names) else "")
        for d in list(dims)[:limit]
    ]
    more = len(dims) - limit
    return ", ".join(items) + (f", ... (+{more})" if more > 0 else "")


def fmt(values: Any, digits: int = 4) -> Any:
    """Round numbers for evidence (keeps JSON short and readable)."""
    if isinstance(values, dict):
        return {k: fmt(v, digits) for k, v in values.items()}
    arr = np.asarray(values, dtype=np.float64) if not isinstance(values, (str, type(None))) else values
    if isinstance(arr, np.ndarray):
        return np.round(arr, digits).tolist() if arr.ndim else round(float(arr), digits)
    return arr


def usable_stats(stats: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
    """A's stats for data-driven comparisons, or None when they are placeholders (inf/NaN: the
    reload.placeholders row reports those; comparing data against them would only invent findings)."""
    if not stats:
        return None
    for name in ("mean", "std"):
        value = vec(stats, name)
        if value is not None and not np.all(np.isfinite(value)):
            return None
    return stats
