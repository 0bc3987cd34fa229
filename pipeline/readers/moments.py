"""Exact streaming moments per dimension: count, mean, M2 (for the population std), min and max.

Float64 accumulation of float32 products per block, merged with Chan's parallel update, so the result
does not depend on block order or size; a block whose mean dwarfs its spread is recomputed centred to
avoid cancellation. Used by `pipeline.readers.stats.FeatureStats`, which gets a block's sums from one
pass (`pipeline.readers.sketch_kernel`) and hands them to `block_moments` + `Moments.merge`.
"""

from __future__ import annotations

import numpy as np


class Moments:
    """Exact per-dim count/mean/M2/min/max with Chan's merge, so block order and size do not matter."""

    def __init__(self, dim: int) -> None:
        self.count = np.zeros(dim, dtype=np.int64)
        self.mean = np.zeros(dim)
        self.m2 = np.zeros(dim)
        self.lo = np.full(dim, np.inf)
        self.hi = np.full(dim, -np.inf)

    def update(self, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, where: np.ndarray) -> None:
        """Merge `rows` ([k, n] float32, one row per dim in `where`) with their precomputed min/max."""
        n = rows.shape[1]
        if n == 0:
            return
        b_mean = rows.sum(axis=1, dtype=np.float64) / n
        b_sq = np.einsum("ij,ij->i", rows, rows, dtype=np.float64)
        b_m2 = np.maximum(b_sq - n * b_mean * b_mean, 0.0)
        shaky = np.where(b_m2 < 1e-6 * b_sq)[0]  # cancellation (mean >> spread): recompute centred
        for i in shaky:
            centred = rows[i].astype(np.float64) - b_mean[i]
            b_m2[i] = float(np.dot(centred, centred))
        prior = self.count[where]
        total = prior + n
        delta = b_mean - self.mean[where]
        self.mean[where] = self.mean[where] + delta * (n / total)
        self.m2[where] = self.m2[where] + b_m2 + delta * delta * (prior * n / total)
        self.count[where] = total
        self.lo[where] = np.minimum(self.lo[where], lo)
        self.hi[where] = np.maximum(self.hi[where], hi)

    def merge(
        self, count: np.ndarray, mean: np.ndarray, m2: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> None:
        """Chan's merge of one block's per-dim count/mean/M2/min/max (dims with count 0 are left alone)."""
        where = np.flatnonzero(count > 0)
        if where.size == 0:
            return
        n = count[where].astype(np.int64)
        prior = self.count[where]
        total = prior + n
        delta = mean[where] - self.mean[where]
        self.mean[where] += delta * (n / total)
        self.m2[where] += m2[where] + delta * delta * (prior * n / total)
        self.count[where] = total
        self.lo[where] = np.minimum(self.lo[where], lo[where])
        self.hi[where] = np.maximum(self.hi[where], hi[where])

    def shift(self, values: np.ndarray) -> np.ndarray:
        """Per-dim float32 offset subtracted before the block's sums: the running mean where known, else
        the block's first finite value, so the sums of squares do not cancel when |mean| >> spread."""
        shift = self.mean.astype(np.float32)
        fresh = np.flatnonzero(self.count == 0)
        for d in fresh.tolist():
            col = values[:, d]
            first = np.flatnonzero(np.isfinite(col[: 1 << 12]))
            if first.size == 0:
                first = np.flatnonzero(np.isfinite(col))
            shift[d] = col[first[0]] if first.size else 0.0
        return shift.astype(np.float64)


def block_moments(
    values: np.ndarray, shift: np.ndarray, count: np.ndarray, total: np.ndarray, squares: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A block's per-dim mean and M2 from the sums of `values - shift` and of their squares.

    Where M2 is a tiny fraction of the sum of squares (the shift was far from this block's mean, e.g. a
    first value that is an outlier), it is recomputed centred from the dim's finite values (rare)."""
    safe = np.maximum(count, 1)
    mean = shift + total / safe
    m2 = np.maximum(squares - total * total / safe, 0.0)
    for d in np.flatnonzero((count > 0) & (m2 < 1e-6 * squares)).tolist():
        col = values[:, d].astype(np.float64)
        col = col[np.isfinite(col)]
        centred = col - col.mean()
        mean[d], m2[d] = col.mean(), float(np.dot(centred, centred))
    return mean, m2


def accumulate(acc: Moments | None, block: np.ndarray) -> Moments:
    """A block of rows ([n, D], or [n]) merged into running per-dim moments: a pass that needs a column's
    mean and std over every row keeps these, never the column (teacher_forced's error units, the
    alignment's state scale)."""
    rows = np.asarray(block, dtype=np.float64).reshape(len(block), -1).T
    acc = Moments(rows.shape[0]) if acc is None else acc
    if rows.shape[1]:
        acc.update(rows, rows.min(axis=1), rows.max(axis=1), np.arange(rows.shape[0]))
    return acc


def mean_std(acc: Moments) -> tuple[np.ndarray, np.ndarray]:
    """The population mean and std (numpy's `std`, ddof 0) of what `acc` saw."""
    return acc.mean.copy(), np.sqrt(acc.m2 / np.maximum(acc.count, 1))
