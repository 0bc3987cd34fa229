"""Exact streaming moments per dimension: count, mean, M2 (for the population std), min and max.

Float64 accumulation of float32 products per block, merged with Chan's parallel update, so the result
does not depend on block order or size; a block whose mean dwarfs its spread is recomputed centred to
avoid cancellation. Used by `pipeline.readers.stats.FeatureStats`.
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
