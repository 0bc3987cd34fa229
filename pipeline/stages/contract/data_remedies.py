"""Remedies that only a change to the dataset's files can make (no lerobot-train flag reorders a state
vector, converts degrees or re-encodes a camera): which file, which dims or episodes, and the change,
with lerobot 0.4.4's own command where it has one. The gate makes none of these changes."""

from __future__ import annotations

import math
from typing import Any

from pipeline.record.records import Check
from pipeline.stages.contract.rows import Sources

QUANTILE_STATS = "lerobot.datasets.v30.augment_dataset_quantile_stats"  # lerobot 0.4.4, v3.0 datasets
QUANTILES = ("q01", "q10", "q50", "q90", "q99")


def data(summary: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "data", "summary": summary, **{k: v for k, v in fields.items() if v is not None}}


def undecided(summary: str, decide: str) -> dict[str, Any]:
    return {"kind": "undecided", "summary": summary, "decide": decide}


def permutation(check: Check, src: Sources) -> dict[str, Any]:
    """Reorder the feature's dims, where each moved dim's partner beats its next candidate by the rule the
    row's cycle was accepted by against leaving the dims in place: the partner costs at most
    (1 - `min_gain`) of the next candidate."""
    ev = check.evidence
    mapping = {int(c[i]): int(c[(i + 1) % len(c)]) for c in ev.get("cycles") or [] for i in range(len(c))}
    cfg = src.cfg.permutation
    permuted, runner = ev.get("permuted_cost") or {}, ev.get("runner_up_cost") or {}
    close = {d: (_at(permuted, d), _at(runner, d)) for d in mapping}
    close = {d: (p, r) for d, (p, r) in close.items() if p is None or r is None or p > (1 - cfg.min_gain) * r}
    if not mapping or close:
        return undecided(
            f"no reorder offered for {check.feature}: the found order does not clearly beat the next",
            f"dim(s) {sorted(close)} fit their partner at cost {[v[0] for v in close.values()]} against "
            f"{[v[1] for v in close.values()]} for the next candidate (a reorder is offered where the "
            f"partner costs at most {1 - cfg.min_gain:g}x the next); "
            "moving each named joint alone on the robot and reading which column moves decides it",
        )
    moves = {str(d): mapping[d] for d in sorted(mapping)}
    text = ", ".join(f"{check.feature}[{d}] <- now [{s}]" for d, s in moves.items())
    return data(
        f"reorder {check.feature} in the data files (each dim i takes the column now at the named dim: "
        f"{text}), then recompute meta/stats.json; no lerobot-train flag reorders a vector",
        file=f"{src.c.path}/data (column {check.feature}) and meta/stats.json",
        dims=moves,
    )


def _at(table: dict[Any, Any], d: int) -> float | None:
    value = table.get(d, table.get(str(d)))
    return float(value) if value is not None else None


def units(check: Check, src: Sources) -> dict[str, Any] | None:
    """Dims recorded in another unit by a known factor: scale them back."""
    matches = check.evidence.get("matches") or {}
    factors = check.evidence.get("factors") or {}
    dims: dict[str, str] = {}
    for d, hit in matches.items():
        name, ratio = hit.get("factor"), float(hit.get("ratio") or 0)
        factor = factors.get(name)
        if factor is None or not ratio:
            continue
        scale = 1 / float(factor) if ratio > 1 else float(factor)
        dims[str(d)] = f"x{scale:.6g} ({name})"
    if not dims:
        return None
    text = ", ".join(f"{check.feature}[{d}] {s}" for d, s in dims.items())
    return data(
        f"convert {text} in the data files, then recompute meta/stats.json (the base's units)",
        file=f"{src.c.path}/data (column {check.feature}) and meta/stats.json",
        dims=dims,
    )


def stats(check: Check, src: Sources, repo: str) -> dict[str, Any] | None:
    """Stats the configured mode needs and the dataset lacks: the quantiles lerobot's own script adds
    to a v3.0 dataset; any other stat, recomputed from the data."""
    missing = list(check.evidence.get("missing") or [])
    if not missing:
        return None
    feature = check.feature
    command = None
    if set(missing) <= set(QUANTILES) and src.c.kind.endswith("v3.0"):
        command = ["python", "-m", QUANTILE_STATS, f"--repo-id={repo}", f"--root={src.c.path}"]
    return data(
        f"meta/stats.json: add {missing} for {feature} (computed from the data)"
        + ("; lerobot's quantile script does it in place" if command else ""),
        file=f"{src.c.path}/meta/stats.json",
        command=command,
    )


def renamed(check: Check, src: Sources) -> dict[str, Any]:
    """An input the rename map feeds from another dataset key: lerobot-train looks its stats up under the
    policy's name, after the rename; the dataset's stats.json holds them under its own. The same stats
    under the policy's name as well mend it (the data files and the map stay as they are)."""
    data_key = check.evidence.get("dataset_key")
    held = data_key in src.c.stats
    what = f"a copy of its {data_key} entry" if held else f"its stats computed from {data_key}'s data"
    return data(
        f"meta/stats.json: add {check.feature} ({what}), so lerobot-train finds stats under the name the "
        f"rename map gives {data_key}; no lerobot-train flag renames the stats it normalizes with",
        file=f"{src.c.path}/meta/stats.json",
    )


def passthrough(check: Check, src: Sources) -> dict[str, Any]:
    similar = check.evidence.get("similar_keys") or []
    return data(
        f"meta/stats.json: add the {check.feature} entry ({check.expected}), computed from the data"
        + (f"; or rename the similar key(s) {similar} there, if one is this feature's" if similar else ""),
        file=f"{src.c.path}/meta/stats.json",
    )


def channels(check: Check, src: Sources) -> dict[str, Any]:
    return data(
        f"videos of {check.feature}: frames stored BGR: re-encode them with red and blue exchanged, then "
        "recompute their image stats; no lerobot-train flag reorders channels",
        file=f"{src.c.path}/videos/{check.feature}",
    )


def lag(check: Check, src: Sources) -> dict[str, Any] | None:
    late = check.actual
    if not isinstance(late, (int, float)) or isinstance(late, bool) or not late or math.isnan(late):
        return None
    n = int(late)
    how, lost = ("late", f"its last {n}") if n > 0 else ("early", f"its first {-n}")
    return data(
        f"videos of {check.feature}: the camera runs {abs(n)} frame(s) {how}: re-cut each episode so row t "
        f"holds the frame now at t{n:+d} ({lost} rows then have no frame: drop them)",
        file=f"{src.c.path}/videos/{check.feature}",
    )
