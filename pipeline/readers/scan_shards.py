"""The data pass split over a Slurm array (issue 35): each task scans a range of data files and writes
its partial facts; the main job merges them into the scan one pass would have made.

Why the facts and not the stats: moments merge exactly (Chan's update, in file order, as the single
pass merges its blocks), the sketches' level-1 histograms add exactly, so every quantile one pass
interpolates in a light bucket comes out the same; a heavy bucket's level-2/3 cells add over the tasks
that tracked them, the values of tasks that did not counted as `missed` (the same bound on the rank
error one pass keeps, with a second pass over all files where it exceeds the budget). The row and
episode counts, the dynamics sample (the first rows, in file order) and the health facts
(`pipeline.readers.health_merge`) merge to what one pass finds, as long as no episode crosses from one
task's files into the next (a v3.0 file holds whole episodes); where one does, the merge is refused and
the caller runs the single pass.

The partial is one `.npz` (arrays, and the JSON-able rest as one string; read with allow_pickle=False),
written atomically under the run folder's part directory and followed by a done marker; what the main
job accepts of it (this launch, these inputs, these bytes, files unchanged) is
`pipeline.readers.shard_partial`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.readers import health_merge
from pipeline.readers.scan import Scan
from pipeline.readers.shard_partial import pack, write
from pipeline.readers.sketch_kernel import CELLS
from pipeline.readers.stats import FeatureStats


def task_count(total_rows: int, files: int, shard_rows: int) -> int:
    """Tasks for a dataset of `total_rows` in `files` data files: one per `shard_rows`, at most one per
    file (a task reads whole files); 1 (no array) at or below `shard_rows`."""
    if shard_rows <= 0 or total_rows <= shard_rows or files <= 1:
        return 1
    return min(files, math.ceil(total_rows / shard_rows))


def split(rows: Sequence[int], tasks: int) -> list[tuple[int, int]]:
    """Contiguous file ranges [lo, hi), one per task, balanced by rows (a task may get none)."""
    starts = np.cumsum([0, *rows])[:-1]
    total = int(sum(rows))
    cuts = [0] + [int(np.searchsorted(starts, total * i / tasks, side="left")) for i in range(1, tasks)]
    cuts.append(len(rows))
    return [(cuts[i], max(cuts[i], cuts[i + 1])) for i in range(tasks)]


# --------------------------------------------------------------------------------------- write
def _feature_arrays(fs: FeatureStats) -> dict[str, np.ndarray]:
    m, sk = fs.moments, fs.sketch
    l2 = [(d, b, missed, int(sk.lut[d, b])) for d in range(fs.dim) for b, missed in sk.tracked[d].items()]
    l3 = [
        (d, b, c, missed3, int(sk.mid.children[slot, c]))
        for d, b, _, slot in l2
        for c, missed3 in sk.tracked3.get(slot, {}).items()
    ]
    return {
        "count": m.count, "mean": m.mean, "m2": m.m2, "lo": m.lo, "hi": m.hi,
        "nonfinite": fs.nonfinite, "hist": sk.hist, "total": sk.total,
        "l2": np.array([r[:3] for r in l2], np.int64).reshape(-1, 3),
        "l2_counts": sk.mid.counts[[r[3] for r in l2]].reshape(-1, CELLS),
        "l3": np.array([r[:4] for r in l3], np.int64).reshape(-1, 4),
        "l3_counts": sk.low.counts[[r[4] for r in l3]].reshape(-1, CELLS),
    }  # fmt: skip


def write_partial(
    scan: Scan,
    files: Sequence[str],
    seen: Mapping[str, list[int]],
    path: Path,
    stamp: Mapping[str, Any],
    key: bytes | None = None,
) -> Path:
    """One task's facts after `scan.reduce` over its files (`seen`: each file's size and mtime before it
    was read), then its done marker (signed with `key`, the team's audit key, where one is set), for the
    main job to merge (`pipeline.readers.shard_partial`)."""
    arrays: dict[str, np.ndarray] = {}
    dyn = scan.dynamics()
    meta = {
        "files": list(files),
        "identity": dict(seen),
        "rows": scan.rows,
        "episodes": pack(np.array(sorted(scan.episodes), np.int64), "episodes", arrays),
        "dynamics": pack(dyn, "dynamics", arrays),
        "stats": pack({k: _feature_arrays(fs) for k, fs in scan.sketches.items()}, "stats", arrays),
        "health": pack(health_merge.partial(scan.health), "health", arrays) if scan.health else None,
    }
    return write(meta, arrays, path, stamp, key)


# --------------------------------------------------------------------------------------- merge
def crossing(parts: Sequence[Mapping[str, Any]]) -> int | None:
    """An episode whose rows lie in two tasks' files (the merge would differ from one pass), or None."""
    edges = [p["episodes"] for p in parts if p["rows"]]
    for before, after in zip(edges, edges[1:], strict=False):
        if np.intersect1d(before, after).size:
            return int(np.intersect1d(before, after)[0])
    return None


def _merge_feature(fs: FeatureStats, part: Mapping[str, np.ndarray]) -> None:
    """One task's moments and sketch into `fs` (tasks in file order)."""
    fs.moments.merge(part["count"], part["mean"], part["m2"], part["lo"], part["hi"])
    fs.nonfinite += part["nonfinite"]
    sk = fs.sketch
    sk.hist += part["hist"]
    sk.total += part["total"]


def _merge_cells(fs: FeatureStats, parts: Sequence[Mapping[str, np.ndarray]]) -> None:
    """Level-2/3 cells: counts added over the tasks that tracked a cell. What a cell missed is what one
    pass keeps for it: the values counted a level up but not in it (the other tasks' whole count there)."""
    sk = fs.sketch
    buckets = sorted({(int(d), int(b)) for p in parts for d, b, _ in p["l2"].tolist()})
    for d, b in buckets:
        slot = sk.mid.take()
        sk.lut[d, b] = slot
        cells: dict[int, int] = {}  # cell -> its level-3 slot
        for p in parts:
            rows = np.flatnonzero((p["l2"][:, 0] == d) & (p["l2"][:, 1] == b))
            if rows.size:
                sk.mid.counts[slot] += p["l2_counts"][rows[0]]
            for r in np.flatnonzero((p["l3"][:, 0] == d) & (p["l3"][:, 1] == b)).tolist():
                sub = cells.setdefault(int(p["l3"][r, 2]), sk.low.take())
                sk.low.counts[sub] += p["l3_counts"][r]
        sk.tracked[d][b] = int(sk.hist[d, b] - sk.mid.counts[slot].sum())
        for c, sub in cells.items():
            sk.mid.children[slot, c] = sub
            sk.tracked3.setdefault(slot, {})[c] = int(sk.mid.counts[slot, c] - sk.low.counts[sub].sum())


def merge(scan: Scan, parts: Sequence[Mapping[str, Any]]) -> Scan:
    """Fill the empty `scan` with the tasks' partials (in task order): what one pass would hold."""
    for name, dim in scan.dims.items():
        fs = FeatureStats(dim, scan.options.rank_error)
        mine = [p["stats"][name] for p in parts if name in p["stats"]]
        for part in mine:
            _merge_feature(fs, part)
        _merge_cells(fs, mine)
        scan.sketches[name] = fs
    scan.rows = sum(int(p["rows"]) for p in parts)
    scan.episodes = {int(e) for p in parts for e in p["episodes"].tolist()}
    samples = [p["dynamics"] for p in parts if p["dynamics"]]
    if samples and scan.pair:
        cap = scan.options.dynamics_rows
        dyn = {k: np.concatenate([s[k] for s in samples])[:cap] for k in ("state", "action", "episode")}
        scan._dyn = {k: [v] for k, v in dyn.items()}
        scan._dyn_rows = len(dyn["state"])
    if scan.health is not None:
        scan.merged_health = health_merge.merged(scan.health, [p["health"] for p in parts if p["health"]])
    return scan
