"""NaN and inf in the dataset's rows: a hard row naming the feature, the dims and the count.

The data pass (`pipeline.readers.stats`) skips non-finite values so its moments and quantiles stay
defined, and counts them per dim (`recomputed[key]["nonfinite"]`). Skipping is right for the stats and
wrong for training: a NaN in a state or action row becomes a NaN loss on the first batch that holds it.
So every vector feature of C gets one row: `match` when every value was finite, a hard `mismatch` with
the dims and counts when not.
"""

from __future__ import annotations

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.contract.rows import NAME, Sources

ROWS = Rows(NAME, "normalization")
SHOWN_DIMS = 16  # dims listed in the message (all of them are in the evidence)


def nonfinite_rows(src: Sources) -> list[Check]:
    """One row per recomputed vector feature of C; none when C's rows were not read (metadata only)."""
    out = []
    for key, stats in src.c.recomputed.items():
        counts = stats.get("nonfinite")
        if counts is None:
            continue
        counts = np.asarray(counts, dtype=np.int64).reshape(-1)
        rows = int(np.asarray(stats.get("count", [0])).reshape(-1)[0]) if "count" in stats else None
        names = (src.c.features.get(key).names if src.c.features.get(key) else None) or []
        out.append(_row(key, counts, rows, names))
    return out


def _row(key: str, counts: np.ndarray, rows: int | None, names: list[str]) -> Check:
    dims = [int(d) for d in np.flatnonzero(counts)]
    if not dims:
        return ROWS(f"finite:{key}", key, "match", f"{key}: every value in the dataset's rows is finite")
    total = int(counts.sum())
    labels = [f"{d} ({names[d]})" if d < len(names) else str(d) for d in dims[:SHOWN_DIMS]]
    more = f" and {len(dims) - SHOWN_DIMS} more" if len(dims) > SHOWN_DIMS else ""
    message = (
        f"{key}: {total} NaN/inf value(s) in the dataset's rows, in dim(s) {', '.join(labels)}{more}; "
        "training on them gives a NaN loss (the stats skip them, the loader does not)"
    )
    return ROWS(
        f"finite:{key}",
        key,
        "mismatch",
        message,
        expected="finite values",
        actual={"nonfinite": total, "dims": dims},
        evidence={"dims": dims, "counts": [int(counts[d]) for d in dims], "finite_rows_counted": rows},
    )
