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
# A's formats whose files list every input the model reads (LeRobot's input_features / input_shapes)
DECLARES_INPUTS = ("lerobot", "lerobot_legacy", "lerobot_processor")


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
    # the episodes training reads (B's dataset.episodes, from --dataset.episodes or the training config);
    # None: every episode. The health rows judge these; the stats rows judge the whole dataset.
    trained_episodes: list[int] | None = None
    # dataset cameras named after no base camera fitted to the base cameras no key provides (frames.py):
    # {"assignment": {policy key as fed: base key}, "best": cost, "runner_up": cost}, or None
    camera_match: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.trained_episodes is None:
            self.trained_episodes = (self.b.hints.get("dataset") or {}).get("episodes")

    def b_mode(self, feature: Feature) -> str | None:
        return self.b_mode_of(feature.type)

    def b_mode_of(self, ftype: str) -> str | None:
        """The mode training will use: B's mapping over A's (LeRobot finetuning keeps the base config),
        except for a type A's policy normalizes inside its own steps (no mapping reaches those)."""
        if ftype in (self.a.hints.get("own_normalizer") or {}):
            return self.a.norm_map.get(ftype)
        return self.b.norm_map.get(ftype) or self.a.norm_map.get(ftype)

    def model_cameras(self) -> list[str] | None:
        """The dataset's camera keys the model reads (A's image input_features, through B's rename map),
        or None where A's format does not declare its inputs (then every camera counts as read)."""
        if self.a.kind not in DECLARES_INPUTS:
            return None
        rename = self.b.hints.get("rename_map") or {}
        read = {k for k, f in self.a.features.items() if f.role == "image"}
        return [k for k, f in self.c.features.items() if f.role == "image" and rename.get(k, k) in read]

    def reads_camera(self, key: str) -> bool:
        cams = self.model_cameras()
        return cams is None or key in cams

    def b_features(self) -> dict[str, Feature]:
        return self.b.features or self.a.features

    def explain(self, key: str, dims: list[int], why: str) -> None:
        for d in dims:
            self.explained.setdefault(key, {})[int(d)] = why


def provider(src: Sources, key: str) -> tuple[Feature | None, str]:
    """The dataset feature the policy sees under `key`, as LeRobot applies B's rename map (dataset key
    -> policy key, before the normalizer): a dataset key the map sends elsewhere no longer provides its
    own name, which a lookup by name alone would miss."""
    rename = src.b.hints.get("rename_map") or {}
    for c_key, feature in src.c.features.items():
        if rename.get(c_key, c_key) == key:
            return feature, "exact" if c_key == key else "rename_map"
    return None, "missing"


def renamed_away(src: Sources) -> dict[str, str]:
    """Rename-map entries whose dataset key exists but whose policy key A does not have: the frames
    or values under them reach no input of the base."""
    rename = src.b.hints.get("rename_map") or {}
    return {k: v for k, v in rename.items() if k in src.c.features and v not in src.a.features}


def rename_text(src: Sources) -> str:
    """`; rename_map in force: {...}` for a row's message (empty when B renames nothing)."""
    rename = src.b.hints.get("rename_map") or {}
    away = renamed_away(src)
    if not rename:
        return ""
    text = f"; rename_map in force (dataset key -> policy key): {rename}"
    return text + (f", of which {away} map onto keys the {a_label(src)} does not have" if away else "")


def rename_evidence(src: Sources) -> dict[str, Any]:
    return {"rename_map": dict(src.b.hints.get("rename_map") or {}), "renamed_away": renamed_away(src)}


def a_label(src: Sources) -> str:
    """What A is in a row's words: the base checkpoint, or the policy a training config builds fresh."""
    return "fresh policy (training config)" if src.a.hints.get("fresh") else "base"


def chw(feature: Feature) -> tuple[int, ...] | None:
    """An image feature's shape as a policy declares it (channels first); LeRobot datasets store video
    and image features as (height, width, channels)."""
    shape = feature.shape
    if feature.role == "image" and shape and len(shape) == 3 and shape[-1] in (1, 3, 4) and shape[0] > 4:
        return (shape[2], shape[0], shape[1])
    return shape


def spec(feature: Feature | None, key: bool = False) -> str:
    """`STATE (11,)`: a feature's type and shape as a row names them (with its key when asked)."""
    if feature is None:
        return "none"
    shape = chw(feature)
    text = f"{feature.type} {tuple(shape) if shape is not None else '(shape not given)'}"
    return f"'{feature.key}' {text}" if key else text


def pair_features(src: Sources) -> list[Pair]:
    """A's non-image vector features, each matched to C by key after B's rename map, or by role."""
    pairs = []
    for key, feature in src.a.features.items():
        if feature.role in ("image", "other"):
            continue
        c, how = provider(src, key)
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


DIM_STATS = ("mean", "std", "min", "max")


def dim_values(
    src: Sources,
    pair: Pair,
    dims: list[int] | np.ndarray,
    c_dims: dict[int, int] | None = None,
    stats: tuple[str, ...] = DIM_STATS,
) -> dict[int, dict[str, Any]]:
    """Per dim a row names, the numbers behind its verdict from each source, so a reader needs no second
    tool: A's baked-in stats, B's mode (and stats where the training config carries any), C's stats
    recomputed from the data and C's shipped stats. `c_dims` maps A's dim to C's (after a permutation)."""
    c_dims = c_dims or {}
    b_stats = pair.c and src.b.stats.get(pair.a.key)
    out: dict[int, dict[str, Any]] = {}
    for d in [int(x) for x in dims]:
        c = c_dims.get(d, d)
        names = (pair.c.names if pair.c else None) or pair.a.names
        out[d] = {
            "name": names[c] if names and c < len(names) else None,
            "A": _at(src.a.stats.get(pair.a.key), d, stats),
            "B": {"mode": pair.b_mode, **(_at(b_stats, d, stats) or {})},
            "C": _at(src.c.recomputed.get(pair.c.key) if pair.c else None, c, stats),
            "C_shipped": _at(src.c.stats.get(pair.c.key) if pair.c else None, c, stats),
        }
        if c != d:
            out[d]["C_dim"] = c
    return out


def _at(stats: dict[str, np.ndarray] | None, d: int, names: tuple[str, ...]) -> dict[str, float] | None:
    if not stats:
        return None
    values = {s: vec(stats, s) for s in names}
    picked = {s: float(f"{v[d]:.6g}") for s, v in values.items() if v is not None and d < v.size}
    return picked or None


def values_text(
    values: dict[int, dict[str, Any]], stats: tuple[str, ...] = ("mean", "std"), limit: int = 3
) -> str:
    """`dim 4: A mean 1 std 2 | C mean -1 std 2` for the first dims a row names (the rest in evidence)."""

    def side(label: str, numbers: dict[str, float] | None) -> str:
        if not numbers:
            return f"{label} -"
        return f"{label} " + " ".join(f"{s} {numbers[s]:.4g}" for s in stats if s in numbers)

    parts = [f"dim {d}: {side('A', v['A'])} | {side('C', v['C'])}" for d, v in list(values.items())[:limit]]
    more = len(values) - limit
    return "; ".join(parts) + (f"; +{more} more in evidence" if more > 0 else "")
