"""The normalization vocabulary, in one place: modes, the stats each needs, feature types and roles.

LeRobot names a normalization per feature type (`{"STATE": "QUANTILES", "ACTION": "MEAN_STD", ...}`);
each mode reads a pair of statistics. Readers, the contract and determinism checks and the demo's
policy all speak this vocabulary, so it is defined here and imported everywhere (readers, records and
this module import no stage).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

MODES = ("MEAN_STD", "MIN_MAX", "QUANTILES", "QUANTILE10", "IDENTITY")
# mode -> the stats it reads (LeRobot's NormalizationMode)
NEEDS: dict[str, tuple[str, ...]] = {
    "MEAN_STD": ("mean", "std"),
    "MIN_MAX": ("min", "max"),
    "QUANTILES": ("q01", "q99"),
    "QUANTILE10": ("q10", "q90"),
    "IDENTITY": (),
}
# mode -> (low, high) of its scale; MEAN_STD's scale is std alone (no high)
SCALE_PAIR: dict[str, tuple[str, str | None]] = {
    "MEAN_STD": ("std", None),
    "MIN_MAX": ("min", "max"),
    "QUANTILES": ("q01", "q99"),
    "QUANTILE10": ("q10", "q90"),
}
# mode -> (low, high, maps to [-1, 1]) for the affine map a normalizer applies
AFFINE: dict[str, tuple[str, str, bool]] = {
    "MEAN_STD": ("mean", "std", False),
    "MIN_MAX": ("min", "max", True),
    "QUANTILES": ("q01", "q99", True),
    "QUANTILE10": ("q10", "q90", True),
}
# LeRobot's normalizer looks a feature's type up in its norm_map and passes the feature through when the
# type is absent (`norm_map.get(type, IDENTITY)`): an absent type is IDENTITY, not "unknown"
ABSENT_MODE = "IDENTITY"
# processor steps that normalize inside themselves instead of through LeRobot's normalizer step (GR00T's
# `groot_pack_inputs_v3` / `groot_action_unpack_unnormalize_v1`): the config flag that switches it on and
# the mode it applies, to the STATE and ACTION features (the unpacking step: ACTION only)
OWN_NORMALIZER_FLAGS: dict[str, str] = {"normalize_min_max": "MIN_MAX"}
OWN_NORMALIZED_TYPES = {"pre": ("STATE", "ACTION"), "post": ("ACTION",)}
# LeRobot's IMAGENET_STATS: under `use_imagenet_stats` they replace every camera's mean/std, so image
# stats equal to these describe ImageNet, not the dataset's cameras
IMAGENET_STATS = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
QUANTILE_LEVELS: dict[str, float] = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
LEGACY_MODES = {"mean_std": "MEAN_STD", "min_max": "MIN_MAX", "identity": "IDENTITY"}

ROLES = ("state", "env", "action", "image", "other")
TYPE_OF_ROLE = {"state": "STATE", "env": "ENV", "action": "ACTION", "image": "VISUAL"}
ROLE_OF_TYPE = {v: k for k, v in TYPE_OF_ROLE.items()}


# bookkeeping entries of a stats block, not statistics a normalizer reads
NOT_STATS = ("count", "mask")
# a scale or upper statistic that is 0 in every dim was never filled in (a zero mean is a real value)
ZERO_PLACEHOLDERS = ("std", "max", "q99")


def nonfinite_counts(value: Any) -> dict[str, int] | None:
    """`{inf, nan, size}` of an array that holds inf or NaN; None when every value is finite."""
    values = np.asarray(value, dtype=np.float64).ravel()
    if np.isfinite(values).all():
        return None
    return {"inf": int(np.isinf(values).sum()), "nan": int(np.isnan(values).sum()), "size": int(values.size)}


def placeholder_problems(stats: Mapping[str, Any], mode: str | None = None) -> dict[str, str]:
    """Stats that are placeholders rather than statistics: `{stat name: what is wrong}`.

    LeRobot initialises its normalizer buffers to +inf and a save without stats leaves them so; a
    NaN, a missing stat, or a scale (std, max, q99) that is zero in every dim is as bad. Only the
    stats `mode` reads are examined when it is given, else every stat but the bookkeeping ones
    (`count`, `mask`). A zero scale in some dims only is not judged here: whether it blows up
    depends on the data (the contract's `degenerate` check decides that). Both reload checks (the
    contract's on the base checkpoint, determinism's on the reloaded smoke checkpoint) use this.
    """
    names = NEEDS.get(mode, ()) if mode else tuple(n for n in stats if n not in NOT_STATS)
    out: dict[str, str] = {}
    for name in names:
        if name not in stats or stats[name] is None:
            out[name] = "missing"
            continue
        values = np.asarray(stats[name], dtype=np.float64).ravel()
        bad = nonfinite_counts(values)
        if values.size == 0:
            out[name] = "empty"
        elif bad:
            out[name] = f"{bad['inf'] + bad['nan']} non-finite ({bad['inf']} inf, {bad['nan']} NaN)"
        elif name in ZERO_PLACEHOLDERS and not values.any():
            out[name] = "all zeros"
    return out


def lerobot_modes(norm_map: Mapping[str, str], types: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """A LeRobot `normalization_mapping` as its normalizer applies it to these feature types: every
    type it leaves out is `ABSENT_MODE`. Returns the filled map and the types that were filled in, so a
    row can say which modes were read and which follow from their absence."""
    filled = dict(norm_map)
    absent = [t for t in dict.fromkeys(types) if t not in filled and t != "OTHER"]
    filled.update(dict.fromkeys(absent, ABSENT_MODE))
    return filled, absent


def is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def flat_stats(
    stats: Mapping[str, Mapping[str, Any]], features: Iterable[str] | None = None, dtype: Any = np.float32
) -> dict[str, np.ndarray]:
    """`{feature: {stat: values}}` -> LeRobot's flat `<feature>.<stat>` keys, the layout of a
    normalizer's safetensors state file (and of the training intent the reload check compares)."""
    keys = list(stats) if features is None else list(features)
    return {
        f"{feature}.{stat}": np.ascontiguousarray(np.asarray(value, dtype=dtype))
        for feature in keys
        for stat, value in stats.get(feature, {}).items()
    }


def unflatten_stats(flat: Mapping[str, Any], sep: str = ".") -> dict[str, dict[str, np.ndarray]]:
    """Flat `<feature>.<stat>` (or v1 `<feature>/<stat>`) keys back into `{feature: {stat: float64}}`."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, value in flat.items():
        feature, _, stat = key.rpartition(sep)
        if feature:
            out.setdefault(feature, {})[stat] = np.asarray(value, dtype=np.float64)
    return out


def stats_shift(mean_a: Any, std_a: Any, mean_b: Any, std_b: Any) -> tuple[np.ndarray, np.ndarray]:
    """How far stats B sit from stats A, per dim: |mean_B - mean_A| in units of A's std, and
    std_B / std_A (both with a small floor, so a constant dim does not divide by 0)."""
    mean_a, std_a = np.asarray(mean_a, dtype=float).ravel(), np.asarray(std_a, dtype=float).ravel()
    mean_b, std_b = np.asarray(mean_b, dtype=float).ravel(), np.asarray(std_b, dtype=float).ravel()
    floor = 1e-6 + 1e-3 * float(np.max(std_a)) if std_a.size else 1e-6
    return np.abs(mean_b - mean_a) / (std_a + floor), (std_b + floor) / (std_a + floor)
