"""Order from content (issue 27): a high-resolution cache's frame j, downsampled to the base cache's size
with the configured resize, must look most like the base cache's frame j, not a neighbour's.

Metadata copied from the base cache says nothing about the order the high-resolution frames were written
in; this looks at the pixels. No rendering: frames are read from the memory-mapped caches. A 224 px render
box-downsampled to 64 px is not the 64 px render (another rasterisation), so the test is relative: frame
j is out of order when another row k of the same episode is closer than row j by more than
`ORDER_MARGIN` grey levels of mean |diff|; or when it is far from every candidate (`content_max_mean`),
e.g. a frame of another episode. Measured on the demo's 16 rows (224 px renders area-downsampled vs the
64 px renders): 1.63-1.85 to its own row; two neighbours swapped: 2.9 to its own row, 1.8 to the other;
another episode's row: 6.7.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.stages.render_cache.tolerance import resize

ORDER_MARGIN = 0.5  # mean |diff| grey levels: identical neighbouring frames (a still scene) never flag
NEIGHBOURS = (-2, -1, 1, 2)


def _mean_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def content_order(
    hires: np.ndarray, base: np.ndarray, j: int, span: tuple[int, int], method: str
) -> dict[str, Any]:
    """Compare downsampled hires[j] with base rows j and j+-1, j+-2 inside the episode's rows `span`."""
    small = resize(np.asarray(hires[j]), base.shape[1], method)
    lo, hi = span
    same = _mean_abs(small, np.asarray(base[j]))
    best, best_d = j, same
    for k in (j + o for o in NEIGHBOURS if lo <= j + o < hi):
        d = _mean_abs(small, np.asarray(base[k]))
        if d + ORDER_MARGIN < best_d:
            best, best_d = k, d
    return {"row": j, "closest": best, "mean_abs_same": round(same, 3), "mean_abs_closest": round(best_d, 3)}


def out_of_order(found: list[dict[str, Any]], max_mean: float) -> list[dict[str, Any]]:
    """The rows whose downsampled frame is closer to another row, or far from its own."""
    return [r for r in found if r["closest"] != r["row"] or r["mean_abs_same"] > max_mean]
