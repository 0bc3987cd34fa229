"""Health facts of an array's tasks merged into what one pass over every file finds (issue 35).

Each task runs `HealthScan` over its own files (whole episodes: `scan_shards` refuses a merge where an
episode crosses tasks). What one pass carries from block to block is carried here from task to task:
the `index` column's continuity at each seam (a break there is counted where one pass would count it),
the running global extremes (the first place a tie was seen kept, tasks in file order), the squared
step sums behind `diff_std`, and the windows the repeat scan kept, replayed in order through one
`RepeatScan` so that a run repeated across two tasks' episodes is found as one pass finds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.readers.health import Extreme, HealthScan, _episodes, _with_digest
from pipeline.readers.profile import merge_samples
from pipeline.readers.repeats import RepeatScan

REPLAY = 1 << 19  # windows replayed per call (one pass sees one block's worth at a time)


def partial(health: HealthScan) -> dict[str, Any]:
    """One task's facts plus what the merge needs beyond them (called after its scan ends)."""
    log = health.repeats.log or []
    windows = {
        "keys": np.concatenate([w[0] for w in log]) if log else np.zeros(0, np.uint64),
        "episodes": np.concatenate([w[1] for w in log]) if log else np.zeros(0, np.int64),
        "frames": np.concatenate([w[2] for w in log]) if log else np.zeros(0, np.int64),
    }
    return {
        "facts": health.facts(),
        "diff_sq": health.diff_sq,
        "diff_n": health.diff_n,
        "index_first": health.index_first,
        "index_last": health._index_prev,
        "windows": windows,
        "window": health.repeats.window,
    }


def merged(proto: HealthScan, parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The facts one pass would return; `proto` is the main job's unused scan (its settings)."""
    parts = [p for p in parts if p["facts"]["rows"]]
    if not parts:
        return proto.facts()
    facts = [p["facts"] for p in parts]
    order: dict[int, None] = {}
    for f in facts:
        order.update(dict.fromkeys(int(e) for e in f["order"]))
    low, high = _extremes(facts, "low"), _extremes(facts, "high")
    breaks, first_break = _index(parts)
    keys = list(facts[0]["low"])
    diff_sq = {k: sum(np.asarray(p["diff_sq"][k]) for p in parts) for k in keys}
    diff_n = {k: sum(np.asarray(p["diff_n"][k]) for p in parts) for k in keys}
    return {
        "rows": sum(int(f["rows"]) for f in facts),
        "stride": facts[0]["stride"],
        "fps": facts[0]["fps"],
        "columns": sorted({c for f in facts for c in f["columns"]}),
        "order": list(order),
        "tasks_used": sorted({int(t) for f in facts for t in f["tasks_used"]}),
        "index_breaks": breaks,
        "first_index_break": first_break,
        "diff_std": {k: np.sqrt(diff_sq[k] / np.maximum(diff_n[k], 1)) for k in keys},
        "low": {k: vars(v) for k, v in low.items()},
        "high": {k: vars(v) for k, v in high.items()},
        "episodes": _tables(facts, sorted(low)),
        "repeats": _replay(parts, proto.repeats.sample),
        "sample": merge_samples([f.get("sample") or {} for f in facts]),
    }


def _extremes(facts: Sequence[Mapping[str, Any]], side: str) -> dict[str, Extreme]:
    out: dict[str, Extreme] = {}
    for f in facts:
        for key, e in f[side].items():
            values = [np.array(e[n], copy=True) for n in ("value", "count", "episode", "frame")]
            HealthScan._extreme(out, key, *values, side == "low")
    return out


def _index(parts: Sequence[Mapping[str, Any]]) -> tuple[int, int | None]:
    """Breaks in `index` (each task's own, plus each seam where the next task's first index does not
    follow the last one's) and the row of the first, as one pass counts them."""
    breaks, first, offset, last = 0, None, 0, None
    for p in parts:
        f = p["facts"]
        if last is not None and p["index_first"] is not None and int(p["index_first"]) != last + 1:
            breaks += 1
            first = offset if first is None else first
        breaks += int(f["index_breaks"])
        if first is None and f["first_index_break"] is not None:
            first = offset + int(f["first_index_break"])
        offset += int(f["rows"])
        last = int(p["index_last"]) if p["index_last"] is not None else last
    return breaks, first


def _tables(facts: Sequence[Mapping[str, Any]], keys: list[str]) -> dict[str, Any]:
    tables = [
        {k: np.asarray(v) for k, v in f["episodes"].items() if k != "digest"}
        for f in facts
        if len(f["episodes"]["index"])
    ]
    return _with_digest(_episodes(tables), keys)


def _replay(parts: Sequence[Mapping[str, Any]], sample: int) -> dict[str, Any]:
    """The tasks' kept windows through one repeat scan, in file order, a block's worth at a time."""
    scan = RepeatScan(window=int(parts[0]["window"]), sample=sample)
    for p in parts:
        w = p["windows"]
        keys, eps, frames = (np.asarray(w[k]) for k in ("keys", "episodes", "frames"))
        for lo in range(0, len(keys), REPLAY):
            k = keys[lo : lo + REPLAY].astype(np.uint64)
            kept = (k & np.uint64(scan.sample - 1)) == 0
            scan._see(k[kept], eps[lo : lo + REPLAY][kept], frames[lo : lo + REPLAY][kept])
    return scan.facts()
