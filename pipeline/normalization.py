"""The normalization vocabulary, in one place: modes, the stats each needs, feature types and roles.

LeRobot names a normalization per feature type (`{"STATE": "QUANTILES", "ACTION": "MEAN_STD", ...}`);
each mode reads a pair of statistics. Readers, the contract and determinism checks and the demo's
policy all speak this vocabulary, so it is defined here and imported everywhere (readers, records and
this module import no stage).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
QUANTILE_LEVELS: dict[str, float] = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
LEGACY_MODES = {"mean_std": "MEAN_STD", "min_max": "MIN_MAX", "identity": "IDENTITY"}

ROLES = ("state", "env", "action", "image", "other")
TYPE_OF_ROLE = {"state": "STATE", "env": "ENV", "action": "ACTION", "image": "VISUAL"}
ROLE_OF_TYPE = {v: k for k, v in TYPE_OF_ROLE.items()}


def placeholder_problems(stats: Mapping[str, Any], mode: str | None = None) -> dict[str, str]:
    """Stats that are placeholders rather than statistics: `{stat name: what is wrong}`.

    LeRobot initialises its normalizer buffers to +inf and a save without stats leaves them so; a
    NaN or a missing stat is as bad. Only the stats `mode` reads are examined when it is given. A
    zero scale is not judged here: whether it blows up depends on the data (the contract's
    `degenerate` check decides that).
    """
    names = NEEDS.get(mode, ()) if mode else tuple(stats)
    out: dict[str, str] = {}
    for name in names:
        if name not in stats or stats[name] is None:
            out[name] = "missing"
            continue
        values = np.asarray(stats[name], dtype=np.float64).ravel()
        if values.size == 0:
            out[name] = "empty"
        elif np.isinf(values).any():
            out[name] = f"inf in {int(np.isinf(values).sum())} of {values.size} values (placeholder)"
        elif np.isnan(values).any():
            out[name] = f"NaN in {int(np.isnan(values).sum())} of {values.size} values"
    return out


def is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
