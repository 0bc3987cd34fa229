"""The quantile sketch behind `pipeline.readers.stats`: three levels over the order keys of float32 values.

Level 1: per dim, 65536 counters for the top 16 bits of each key (the whole float range, no range needed
up front). Level 2: for a heavy bucket (more than `rank_error * n / 2` values) that holds a requested
quantile or sits next to one, 256 counters for bits 8..15. Level 3: for a heavy level-2 cell (an atom
such as a binary gripper or a padding dim, or an extremely peaked joint), 256 counters for bits 0..7,
which pin a value exactly. Levels 2 and 3 start when their cell turns heavy; what the cell had received
before is kept as `missed`, a bound on the rank error (a second pass resolves the rare case where it
exceeds the budget). Why three levels of 8 bits rather than one of 16: a 16-bit level costs 512 KiB per
tracked bucket, and with ~15 tracked buckets per dim that was 256 MiB per 14-dim feature, twice the
decode's whole footprint; 256-counter cells cost 2 KiB.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pipeline.normalization import QUANTILE_LEVELS
from pipeline.readers.sketch_kernel import BUCKETS, CELLS

QUANTILES: dict[str, float] = dict(QUANTILE_LEVELS)  # the vocabulary's levels, by stat name
MAX_TRACKED = 48  # level-2 cells per dim
# Buckets (and level-2 cells) tracked on each side of a quantile's current one. Two, not one: a quantile
# creeping through fine buckets (values near 0, where a bucket is narrow) reached a bucket that had
# filled up untracked; with one, bench_stats' state dim 5 q90 had missed 11 k values against a 10 k
# budget and the pass was read twice.
WINDOW = 2


def order_keys(values: np.ndarray) -> np.ndarray:
    """float32 -> int32 whose signed order is the float order (NaN excluded by the caller)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.int32)
    return bits ^ ((bits >> 31) & np.int32(0x7FFFFFFF))


def keys_to_float(keys: np.ndarray) -> np.ndarray:
    """Inverse of `order_keys` (the transform is an involution)."""
    keys = np.asarray(keys, dtype=np.int32)
    return (keys ^ ((keys >> 31) & np.int32(0x7FFFFFFF))).view(np.float32)


def key_float(key: int) -> float:
    return float(keys_to_float(np.array([key], dtype=np.int64).astype(np.int32))[0])


class Table:
    """Rows of 256 counters handed out and taken back by slot number (grown by doubling)."""

    def __init__(self) -> None:
        self.counts = np.zeros((0, CELLS), dtype=np.int64)
        self.children = np.zeros((0, CELLS), dtype=np.int32)  # next level's slot per cell, or -1
        self.free: list[int] = []

    def take(self) -> int:
        if not self.free:
            size = self.counts.shape[0]
            grow = max(size, 16)
            self.counts = np.concatenate([self.counts, np.zeros((grow, CELLS), dtype=np.int64)])
            self.children = np.concatenate([self.children, np.full((grow, CELLS), -1, dtype=np.int32)])
            self.free = list(range(size + grow - 1, size - 1, -1))
        slot = self.free.pop()
        self.counts[slot] = 0
        self.children[slot] = -1
        return slot


class QuantileSketch:
    """Level-1 histograms for `dim` dims plus level-2/3 cells for the heavy cells near the quantiles."""

    def __init__(
        self, dim: int, rank_error: float = 1e-3, quantiles: Mapping[str, float] = QUANTILES
    ) -> None:
        self.dim = dim
        self.rank_error = rank_error
        self.levels = tuple(quantiles.values())
        self.hist = np.zeros((dim, BUCKETS), dtype=np.int64)
        self.total = np.zeros(dim, dtype=np.int64)
        self.lut = np.full((dim, BUCKETS), -1, dtype=np.int32)  # level-2 slot per bucket, or -1
        self.mid, self.low = Table(), Table()
        self.tracked: list[dict[int, int]] = [{} for _ in range(dim)]  # bucket -> count missed before
        self.tracked3: dict[int, dict[int, int]] = {}  # level-2 slot -> {cell: count missed before}

    def track(self, d: int) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
        """Start level-2 cells for heavy buckets at or next to a quantile, and level-3 cells for heavy
        level-2 cells there. Returns the new ones as (bucket, slot) and (bucket, cell, slot): the caller
        counts the current block into them, then `settle`s (their `missed` is provisionally everything).
        A bucket that no longer holds any quantile may be evicted to make room; should it hold one again,
        it comes back with everything it saw meanwhile counted as `missed` (and pass 2 if that is too much).
        """
        n = int(self.total[d])
        hist, heavy = self.hist[d], self.rank_error * n / 2
        cum = np.cumsum(hist)
        ranks = [p * (n - 1) for p in self.levels]
        found = {min(int(np.searchsorted(cum, r, side="right")), BUCKETS - 1): r for r in ranks}
        targets = {b + k for b in found for k in range(-WINDOW, WINDOW + 1) if 0 <= b + k < BUCKETS}
        new2, new3 = [], []
        for bucket in sorted(targets, key=lambda b: min(abs(b - f) for f in found)):
            if hist[bucket] > heavy and bucket not in self.tracked[d]:
                slot = self._start(d, bucket, targets)
                if slot is not None:
                    new2.append((bucket, slot))
        for bucket, rank in found.items():
            if bucket not in self.tracked[d] or hist[bucket] <= heavy:
                continue
            slot = int(self.lut[d, bucket])
            cells = self.mid.counts[slot]
            below = int(cum[bucket - 1]) if bucket else 0
            target = rank - below - self.tracked[d][bucket] / 2
            cell = min(int(np.searchsorted(np.cumsum(cells), max(target, 0.0), side="right")), CELLS - 1)
            mine = self.tracked3.setdefault(slot, {})
            for c in range(max(cell - WINDOW, 0), min(cell + WINDOW + 1, CELLS)):
                if cells[c] > heavy and c not in mine:
                    mine[c] = int(cells[c])
                    sub = self.low.take()
                    self.mid.children[slot, c] = sub
                    new3.append((bucket, c, sub))
        return new2, new3

    def _start(self, d: int, bucket: int, targets: set[int]) -> int | None:
        tracked = self.tracked[d]
        if len(tracked) >= MAX_TRACKED:
            idle = [b for b in tracked if b not in targets]
            if not idle:
                return None
            # the one farthest from every quantile now: the least likely to hold one again
            evict = max(idle, key=lambda b: min(abs(b - t) for t in targets))
            old = int(self.lut[d, evict])
            for sub in self.mid.children[old][self.mid.children[old] >= 0].tolist():
                self.low.free.append(sub)
            self.tracked3.pop(old, None)
            self.mid.free.append(old)
            del tracked[evict]
            self.lut[d, evict] = -1
        slot = self.mid.take()
        tracked[bucket] = int(self.hist[d, bucket])
        self.lut[d, bucket] = slot
        return slot

    def settle(self, d: int, new2: list[tuple[int, int]], new3: list[tuple[int, int, int]]) -> None:
        """After the current block was counted into the new cells: what each of them missed before."""
        for bucket, slot in new2:
            self.tracked[d][bucket] = int(self.hist[d, bucket] - self.mid.counts[slot].sum())
        for bucket, cell, sub in new3:
            slot = int(self.lut[d, bucket])
            self.tracked3[slot][cell] = int(self.mid.counts[slot, cell] - self.low.counts[sub].sum())

    def locate(self, dim: int, rank: float) -> tuple[int, int, int]:
        """The bucket holding 0-based `rank`, the count below it, and its own count."""
        counts = self.hist[dim]
        cum = np.cumsum(counts)
        bucket = min(int(np.searchsorted(cum, rank, side="right")), BUCKETS - 1)
        below = int(cum[bucket - 1]) if bucket else 0
        return bucket, below, int(counts[bucket])

    def resolved(
        self, dim: int, bucket: int, rank_in_bucket: float, span: tuple[float, float]
    ) -> tuple[float, int] | None:
        """The value at `rank_in_bucket` from the bucket's level-2 (interpolated inside a light cell) or
        level-3 cells (exact), and a bound on its rank error; `span` is the data's [min, max]."""
        if bucket not in self.tracked[dim]:
            return None
        missed = self.tracked[dim][bucket]
        slot = int(self.lut[dim, bucket])
        cells = self.mid.counts[slot]
        seen = int(cells.sum())
        if seen == 0:
            return None
        target = min(max(rank_in_bucket - missed / 2, 0.0), seen - 1)
        cum = np.cumsum(cells)
        cell = min(int(np.searchsorted(cum, target, side="right")), CELLS - 1)
        below, inside = (int(cum[cell - 1]) if cell else 0), int(cells[cell])
        base = ((bucket - BUCKETS // 2) << 16) | (cell << 8)
        sub = int(self.mid.children[slot, cell])
        if sub >= 0 and self.low.counts[sub].sum() and missed + inside > self.rank_error * self.total[dim]:
            missed3 = self.tracked3[slot][cell]
            low = self.low.counts[sub]
            target3 = min(max(target - below - missed3 / 2, 0.0), int(low.sum()) - 1)
            idx = min(int(np.searchsorted(np.cumsum(low), target3, side="right")), CELLS - 1)
            return key_float(base | idx), missed + missed3
        lo, hi = max(key_float(base), span[0]), min(key_float(base | 0xFF), span[1])
        frac = min(max((target - below + 0.5) / max(inside, 1), 0.0), 1.0)
        return lo + (hi - lo) * frac, missed + inside
