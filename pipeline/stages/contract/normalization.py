"""Normalization contract: the mode A was built with vs the mode B will train with, and whether C
has the stats that mode needs, in a form that will not blow up or be silently skipped.

LeRobot's normalizer looks stats up by exact feature key and passes a feature through unnormalized when
the key is missing (its issues #821, #1763), so a missing or renamed key is a hard finding, not a
warning. Whether the shipped stats describe this data (stale) and the base's (shift) is `drift.py`.
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np

from pipeline.normalization import NEEDS, SCALE_PAIR
from pipeline.readers.rename import unnormalized
from pipeline.record.records import Check, Rows
from pipeline.stages.contract.rows import (
    NAME,
    Pair,
    Sources,
    a_label,
    dim_values,
    dims_text,
    rename_text,
    spec,
    vec,
)

ROWS = Rows(NAME, "normalization")
ZERO_SCALE = {
    "MEAN_STD": "std == 0",
    "QUANTILES": "q01 == q99",
    "QUANTILE10": "q10 == q90",
    "MIN_MAX": "min == max",
}


def mode_rows(src: Sources) -> list[Check]:
    """One row per feature type A uses: A's mode vs B's mode (an override contradicting the base)."""
    types = dict.fromkeys(f.type for f in src.a.features.values() if f.role != "other")
    return [_mode_row(src, ftype) for ftype in types]


def _mode_row(src: Sources, ftype: str) -> Check:
    a_mode, b_mode = src.a.norm_map.get(ftype), src.b.norm_map.get(ftype)
    own = (src.a.hints.get("own_normalizer") or {}).get(ftype)
    effective = src.b_mode_of(ftype)
    evidence: dict[str, Any] = {
        "A.source": src.a.hints.get("mode_source", src.a.path),
        "B.source": src.b.path,
        "B.inherits": b_mode is None,
    }
    notes = _mode_notes(src, ftype, own, b_mode)
    if notes:
        evidence["read_as"] = notes
    check_id = f"normalization.mode:{ftype}"
    if a_mode is None:
        message = (
            f"A ({src.a.kind}) does not encode the {ftype} normalization mode; give it in a "
            "contract card or model.normalization_mapping"
        )
        return ROWS(check_id, ftype, "unverifiable", message, configured=effective, evidence=evidence)
    message = f"{ftype}: base built with {a_mode}, training uses {effective}" + "".join(
        f" ({n})" for n in notes
    )
    if effective != a_mode:
        message += " (an override contradicting the base's design saturates or clips its inputs/targets)"
        quantiles = _has_quantiles(src, ftype)
        evidence["dataset_has_quantiles"] = quantiles
        lacking = [k for k, ok in quantiles.items() if not ok]
        if a_mode.startswith("QUANTILE") and lacking:
            message += f"; the dataset ships no q01/q99 for {lacking}, the likely reason for the override"
    return ROWS.judge(
        check_id,
        ftype,
        effective == a_mode,
        message,
        expected=a_mode,
        configured=effective,
        actual=_c_supports(src, ftype),
        evidence=evidence,
    )


def _mode_notes(src: Sources, ftype: str, own: str | None, b_mode: str | None) -> list[str]:
    """How a mode was read when no mapping entry names it: a type LeRobot's normalizer passes through
    because the mapping leaves it out, or a policy step that normalizes it itself."""
    notes = []
    if own:
        declared = (src.a.hints.get("config") or {}).get("norm_map", {}).get(ftype)
        notes.append(
            f"normalized inside {own}; the config's normalization_mapping "
            f"({declared}, B: {b_mode}) is not applied to it"
        )
    for label, contract in (("A", src.a), ("B", src.b)):
        if ftype in (contract.hints.get("absent_modes") or ()):
            notes.append(f"{label}'s normalization_mapping has no {ftype} entry: LeRobot passes it through")
    return notes


def _features_of_type(src: Sources, ftype: str) -> list[str]:
    return [k for k, f in src.c.features.items() if f.type == ftype]


def _has_quantiles(src: Sources, ftype: str) -> dict[str, bool]:
    return {k: {"q01", "q99"} <= set(src.c.stats.get(k, {})) for k in _features_of_type(src, ftype)}


def _c_supports(src: Sources, ftype: str) -> str:
    keys = _features_of_type(src, ftype)
    if not keys:
        return "no such feature in C"
    have = set.intersection(*(set(src.c.stats.get(k, {})) for k in keys))
    modes = [m for m, need in NEEDS.items() if m != "IDENTITY" and set(need) <= have]
    return "stats for " + (", ".join(modes) if modes else "no mode")


def stats_rows(src: Sources, pair: Pair) -> list[Check]:
    """C has the stats B's mode needs for this feature (or the normalizer passes it through)."""
    key, mode = pair.a.key, pair.b_mode
    if mode in (None, "IDENTITY") or pair.c is None:
        return []
    c_key = pair.c.key
    shipped = src.c.stats.get(c_key)
    needed = list(NEEDS.get(mode, ()))
    if shipped is None:
        return [_passthrough_row(src, key, c_key, mode, needed)]
    missing = [s for s in needed if s not in shipped]
    bad = {
        s: int(np.sum(~np.isfinite(vec(shipped, s))))
        for s in needed
        if s in shipped and not np.all(np.isfinite(vec(shipped, s)))
    }
    # the normalizer is built for A's features (LeRobot keeps the base's input_features when finetuning)
    # and filled from these stats: a stat of another width cannot fill it
    width = pair.a.dim
    sized = {s: int(vec(shipped, s).size) for s in needed if s in shipped and width is not None}
    wrong = {s: n for s, n in sized.items() if n != width}
    fields: dict[str, Any] = {"expected": needed, "configured": mode, "actual": sorted(shipped)}
    if not (missing or bad or wrong):
        message = f"{c_key}: dataset stats have {needed} for {mode}"
        return [ROWS(f"normalization.stats:{key}", key, "match", message, **fields)]
    why = (f"missing {missing}" if missing else "") + (f" non-finite values {bad}" if bad else "")
    if wrong:
        why += f" {sorted(wrong)} of width {sorted(set(wrong.values()))} where the {a_label(src)}'s "
        why += f"normalizer holds {spec(pair.a)}{rename_text(src)}"
    message = f"{c_key}: {mode} needs {needed} but the dataset stats have {why.strip()}" + (
        " (QUANTILES without q01/q99 is a hard stop)" if mode == "QUANTILES" and missing else ""
    )
    evidence = {"present": sorted(shipped), "missing": missing, "nonfinite": bad, "widths": sized}
    return [ROWS(f"normalization.stats:{key}", key, "mismatch", message, evidence=evidence, **fields)]


def _passthrough_row(src: Sources, key: str, c_key: str, mode: str, needed: list[str]) -> Check:
    """No stats under the feature's key: the normalizer would skip it (the likely renamed keys named)."""
    close = difflib.get_close_matches(c_key, list(src.c.stats), n=3, cutoff=0.5)
    prefixed = [k for k in src.c.stats if k.endswith(c_key) or c_key.endswith(k)]
    message = (
        f"{c_key}: no stats key in the dataset's stats ({src.c.kind}); the {mode} normalizer "
        "would silently pass this feature through unnormalized"
    )
    return ROWS(
        f"normalization.passthrough:{key}",
        key,
        "mismatch",
        message,
        expected=f"{mode} stats {needed}",
        configured=mode,
        actual="key missing",
        evidence={"stats_keys": sorted(src.c.stats), "similar_keys": sorted(set(close + prefixed))},
    )


def _scale(stats: dict[str, np.ndarray] | None, mode: str) -> np.ndarray | None:
    lo_name, hi_name = SCALE_PAIR.get(mode, (None, None))
    if lo_name is None:
        return None
    lo = vec(stats, lo_name)
    if hi_name is None:
        return lo
    hi = vec(stats, hi_name)
    return None if lo is None or hi is None else hi - lo


def degenerate_rows(src: Sources, pair: Pair) -> list[Check]:
    """Dims whose normalizer scale is ~0: a division blow-up where the data varies, padding where not."""
    mode = pair.b_mode
    if mode in (None, "IDENTITY") or pair.c is None:
        return []
    stats = src.c.stats.get(pair.c.key) or src.c.recomputed.get(pair.c.key)
    scale = _scale(stats, mode)
    if scale is None:
        return []
    eps = src.cfg.degenerate.eps
    rec = src.c.recomputed.get(pair.c.key)
    center = np.abs(vec(stats, "mean")) if vec(stats, "mean") is not None else np.zeros_like(scale)
    tiny = np.where(np.abs(scale) <= eps * np.maximum(1.0, center))[0]
    key, c_key = pair.a.key, pair.c.key
    if tiny.size == 0:
        message = f"{c_key}: every dim has a {mode} scale above {eps:g}"
        actual = f"min scale {float(np.min(np.abs(scale))):.3g}"
        return [
            ROWS(f"normalization.degenerate:{key}", key, "match", message, configured=mode, actual=actual)
        ]
    span_source = rec if rec is not None else stats  # without data, the stats' own min/max tell
    lo, hi = vec(span_source, "min"), vec(span_source, "max")
    varying = [int(d) for d in tiny if lo is not None and hi is not None and hi[d] > lo[d]]
    evidence: dict[str, Any] = {
        "dims": tiny.tolist(),
        "varying_in_data": varying,
        "constant_in_data": [int(d) for d in tiny if int(d) not in varying],
        "scale": [float(f"{v:.4g}") for v in scale[tiny]],
        "eps": eps,
    }
    evidence["values"] = dim_values(src, pair, tiny, stats=("mean", "std", "min", "max", "q01", "q99"))
    if rec is not None:
        evidence["data_range"] = {
            int(d): [float(vec(rec, "min")[d]), float(vec(rec, "max")[d])] for d in tiny
        }
    return [
        ROWS(
            f"normalization.degenerate:{key}",
            key,
            "mismatch",
            _degenerate_message(c_key, mode, list(tiny), varying, pair.c.names, rec is not None),
            severity="hard" if varying else src.cfg.degenerate.constant_severity,
            expected=f"{mode} scale > {eps:g}",
            configured=mode,
            actual=f"{len(tiny)} dim(s) ~0",
            evidence=evidence,
        )
    ]


def _degenerate_message(
    c_key: str, mode: str, tiny: list[int], varying: list[int], names: list[str] | None, from_data: bool
) -> str:
    where = (
        f"the data varies in {dims_text(varying, names)}, so normalizing divides by ~0 (blow-up)"
        if varying
        else "the data is constant there too (padding?), normalized to 0"
    )
    tail = "" if from_data else " [from the stats' min/max: no data files to recompute from]"
    return f"{c_key}: {ZERO_SCALE[mode]} in dim(s) {dims_text(tiny, names)}; {where}{tail}"


def renamed_rows(src: Sources) -> list[Check]:
    """Each model input the training's rename map feeds from another dataset key, where the stats
    lerobot-train normalizes with (the dataset's, keyed as the dataset names them) hold nothing under
    the input's own name: the normalizer passes it through unnormalized at training as at inference.
    Hard where the declared mode reads stats (not IDENTITY); the same finding the determinism reload
    makes on a saved checkpoint, here from the inputs alone (so a run that skips determinism hears it)."""
    mapping = src.b.hints.get("rename_map") or {}
    inputs = {k: f for k, f in src.b_features().items() if f.role != "other"}
    given = {d: p for d, p in mapping.items() if d in src.c.features}
    lost = unnormalized(given, lambda key: key in src.c.stats, inputs)
    rows = []
    for key, data_key in lost.items():
        mode = src.b_mode_of(inputs[key].type)
        where = (
            f"its stats are held under the dataset's name {data_key}"
            if data_key in src.c.stats
            else f"the dataset ships no stats for {data_key} either"
        )
        said = (
            f"{key} is read from the dataset's {data_key} by the rename map, and the dataset's stats "
            f"(which lerobot-train normalizes with, keyed as the dataset names them) hold nothing under "
            f"{key}: {where}"
        )
        fields: dict[str, Any] = {
            "expected": f"{mode} stats under {key}",
            "configured": mode,
            "actual": "none under the renamed name",
            "evidence": {"dataset_key": data_key, "stats_keys": sorted(src.c.stats)[:50], "mode": mode},
        }
        check_id = f"normalization.renamed:{key}"
        if mode in (None, "IDENTITY"):
            message = f"{said}; {mode or 'no mode'} reads no stats, so it trains as declared"
            rows.append(ROWS(check_id, key, "match", message, **fields))
        else:
            message = f"{said}; so it trains and runs unnormalized though {mode} is declared"
            rows.append(ROWS(check_id, key, "mismatch", message, **fields))
    return rows
