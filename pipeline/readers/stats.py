"""Per-dimension statistics of vector features, streamed block by block in bounded memory.

Why not `np.quantile` on the whole column: datasets are larger than memory, and the contract stage must
recompute the stats the configured normalization needs (mean, std, min, max, q01/q99, q10/q90) to
compare them with the stats files a dataset ships. The guarantees:

- count, mean, std (population, like LeRobot), min and max are exact (`pipeline.readers.moments`);
- every quantile has a rank error of at most `rank_error * count` (default 0.1 %).

How, in one pass: per dim, a histogram of the top 16 bits of an order-preserving integer image of each
float32 value (65536 buckets spanning the whole float range, so no range is needed up front). A quantile
whose bucket holds at most `rank_error * count` values is interpolated inside its bucket (rank error <=
the bucket's mass). For the buckets that are too heavy (peaked joints, atoms like a binary gripper), the
sketch starts, as soon as such a bucket holds a quantile, a second-level histogram of the low 16 bits of
the values falling in it: that pins the quantile to an exact float32 value, up to the values the bucket
received before tracking began (`missed`, itself a bound on the rank error). Only when `missed` exceeds
the budget (the distribution moved a lot after the first blocks) does a second pass re-read the data for
those buckets. Memory: 65536 counters per dim, a few 65536-counter sub-histograms, and one block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from pipeline.normalization import QUANTILE_LEVELS
from pipeline.readers.moments import Moments, block_moments
from pipeline.readers.sketch_kernel import BUCKETS, kernels

QUANTILES: dict[str, float] = dict(QUANTILE_LEVELS)  # the vocabulary's levels, by stat name
KERNEL: str | None = None  # "numba" | "numpy" | None (numba when installed): see `sketch_kernel.kernels`
MAX_TRACKED = 24  # second-level histograms per dim (512 KiB each): <= 12 MiB per dim
WINDOW = 1  # buckets tracked on each side of a quantile's current bucket
MIN_BLOCK = 1 << 16  # rows: smaller blocks are joined before they reach the sketch
THREADS = 2  # features reduced in parallel per block
Blocks = Callable[[], Iterable[Mapping[str, np.ndarray]]]


def order_keys(values: np.ndarray) -> np.ndarray:
    """float32 -> int32 whose signed order is the float order (NaN excluded by the caller)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.int32)
    return bits ^ ((bits >> 31) & np.int32(0x7FFFFFFF))


def keys_to_float(keys: np.ndarray) -> np.ndarray:
    """Inverse of `order_keys` (the transform is an involution)."""
    keys = np.asarray(keys, dtype=np.int32)
    return (keys ^ ((keys >> 31) & np.int32(0x7FFFFFFF))).view(np.float32)


class QuantileSketch:
    """Top-16-bit histograms for `dim` dims plus low-16-bit histograms of the heavy quantile buckets.

    The low-16-bit histograms live in one pool of rows shared by all dims (`pool[slot]`, grown by
    doubling), `lut[d, bucket]` naming a bucket's slot or -1, so the per-block kernel needs no Python.
    """

    def __init__(
        self, dim: int, rank_error: float = 1e-3, quantiles: Mapping[str, float] = QUANTILES
    ) -> None:
        self.dim = dim
        self.rank_error = rank_error
        self.levels = tuple(quantiles.values())
        self.hist = np.zeros((dim, BUCKETS), dtype=np.int64)
        self.total = np.zeros(dim, dtype=np.int64)
        self.lut = np.full((dim, BUCKETS), -1, dtype=np.int32)
        self.tracked: list[dict[int, int]] = [{} for _ in range(dim)]  # bucket -> count missed before
        self.pool = np.zeros((0, BUCKETS), dtype=np.int64)
        self.free: list[int] = []

    def track(self, d: int) -> list[int]:
        """Start second-level histograms for heavy buckets that now hold a quantile; returns them.

        Their `missed` is provisionally the bucket's whole count: the caller counts the current block's
        values into the new slots and `settle`s. A bucket that no longer holds any quantile may be evicted
        to make room; should it hold one again, it comes back with everything it saw meanwhile counted as
        `missed` (and pass 2 if that is too much).
        """
        n = int(self.total[d])
        hist, heavy = self.hist[d], self.rank_error * n / 2
        cum = np.cumsum(hist)
        found = {min(int(np.searchsorted(cum, p * (n - 1), side="right")), BUCKETS - 1) for p in self.levels}
        # the quantile may still move a bucket or two as data arrives: watch the neighbourhood too
        targets = {b + k for b in found for k in range(-WINDOW, WINDOW + 1) if 0 <= b + k < BUCKETS}
        started = []
        for bucket in sorted(targets, key=lambda b: min(abs(b - f) for f in found)):
            if hist[bucket] > heavy and bucket not in self.tracked[d] and self._start(d, bucket, targets):
                started.append(bucket)
        return started

    def _start(self, d: int, bucket: int, targets: set[int]) -> bool:
        tracked = self.tracked[d]
        if len(tracked) >= MAX_TRACKED:
            idle = [b for b in tracked if b not in targets]
            if not idle:
                return False
            self.free.append(int(self.lut[d, idle[0]]))
            del tracked[idle[0]]
            self.lut[d, idle[0]] = -1
        if not self.free:  # grow the pool by doubling
            size = self.pool.shape[0]
            grown = np.zeros((max(2 * size, 4), BUCKETS), dtype=np.int64)
            grown[:size] = self.pool
            self.pool = grown
            self.free = list(range(grown.shape[0] - 1, size - 1, -1))
        slot = self.free.pop()
        self.pool[slot] = 0
        tracked[bucket] = int(self.hist[d, bucket])
        self.lut[d, bucket] = slot
        return True

    def settle(self, d: int, bucket: int) -> None:
        """After the block that started `bucket` was counted into its slot: what the slot missed."""
        self.tracked[d][bucket] = int(self.hist[d, bucket] - self.pool[self.lut[d, bucket]].sum())

    def locate(self, dim: int, rank: float) -> tuple[int, int, int]:
        """The bucket holding 0-based `rank`, the count below it, and its own count."""
        counts = self.hist[dim]
        cum = np.cumsum(counts)
        bucket = min(int(np.searchsorted(cum, rank, side="right")), BUCKETS - 1)
        below = int(cum[bucket - 1]) if bucket else 0
        return bucket, below, int(counts[bucket])

    def resolved(self, dim: int, bucket: int, rank_in_bucket: float) -> tuple[float, int] | None:
        """The value at `rank_in_bucket` from the bucket's second-level histogram, and its error bound."""
        if bucket not in self.tracked[dim]:
            return None
        missed = self.tracked[dim][bucket]
        low = self.pool[self.lut[dim, bucket]]
        seen = int(low.sum())
        if seen == 0:
            return None
        target = min(max(rank_in_bucket - missed / 2, 0.0), seen - 1)
        idx = min(int(np.searchsorted(np.cumsum(low), target, side="right")), BUCKETS - 1)
        key = np.int32(((bucket - BUCKETS // 2) << 16) | idx)
        return float(keys_to_float(np.array([key]))[0]), missed


def rank_of(fs: FeatureStats, values: np.ndarray) -> np.ndarray:
    """[d, 2]: the fraction of each dim's data strictly below `values[d]` and at or below it, as bounds.

    Bounds, not a point: a value sitting on an atom (e.g. actions clipped to 1.0) is consistent with
    every level the atom covers. The bucket holding the value widens the interval by its own mass.
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    out = np.full((fs.dim, 2), np.nan)
    for d in range(min(fs.dim, values.size)):
        n = fs.moments.count[d]
        if n == 0 or not np.isfinite(values[d]):
            continue
        if values[d] < fs.moments.lo[d] or values[d] > fs.moments.hi[d]:
            out[d] = 0.0 if values[d] < fs.moments.lo[d] else 1.0
            continue
        key = int(order_keys(np.array([values[d]], dtype=np.float32))[0])
        bucket = (key >> 16) + BUCKETS // 2
        counts = fs.sketch.hist[d]
        below = counts[:bucket].sum()
        out[d] = (below / n, (below + counts[bucket]) / n)
    return out


def _bucket_bounds(bucket: int) -> tuple[float, float]:
    base = np.int32((bucket - BUCKETS // 2) << 16)
    lo, hi = keys_to_float(np.array([base, base | np.int32(0xFFFF)], dtype=np.int32))
    return float(lo), float(hi)


@dataclass
class _Refine:
    """A quantile whose bucket is too heavy and was not tracked early enough: pass 2 resolves it."""

    feature: str
    dim: int
    stat: str
    bucket: int
    rank_in_bucket: float


class FeatureStats:
    """Streaming stats of one vector feature (blocks of shape [n, dim])."""

    def __init__(
        self,
        dim: int,
        rank_error: float = 1e-3,
        quantiles: Mapping[str, float] = QUANTILES,
        kernel: str | None = None,
    ) -> None:
        self.dim = dim
        self.moments = Moments(dim)
        self.sketch = QuantileSketch(dim, rank_error, quantiles)
        self.nonfinite = np.zeros(dim, dtype=np.int64)
        self.kernel = kernel or KERNEL
        self._out = np.zeros((5, dim))

    def update(self, block: np.ndarray) -> None:
        """One pass over the block in its stored [n, dim] layout (`sketch_kernel`), then per-dim upkeep."""
        block = np.asarray(block)
        block = block[:, None] if block.ndim == 1 else block
        values = np.ascontiguousarray(block, dtype=np.float32)
        if values.shape[0] == 0:
            return
        bits = values.view(np.int32)
        reduce, count = kernels(self.kernel)
        shift = self.moments.shift(values)
        out, sk = self._out, self.sketch
        reduce(values, bits, shift, sk.hist, sk.lut, sk.pool, out)
        finite = out[0].astype(np.int64)
        self.nonfinite += values.shape[0] - finite
        mean, m2 = block_moments(values, shift, finite, out[1], out[2])
        self.moments.merge(finite, mean, m2, out[3].astype(np.float32), out[4].astype(np.float32))
        sk.total += finite
        new = [(d, b) for d in np.flatnonzero(finite).tolist() for b in sk.track(d)]
        if new:  # rare after the first blocks: count this block's values of the new buckets
            dims, buckets = (np.array(c, dtype=np.int64) for c in zip(*new, strict=True))
            count(bits, dims, buckets, sk.lut[dims, buckets].astype(np.int64), sk.pool)
            for d, b in new:
                sk.settle(d, b)


def compute_stats(
    blocks: Blocks,
    dims: Mapping[str, int],
    *,
    rank_error: float = 1e-3,
    quantiles: Mapping[str, float] = QUANTILES,
    keep: dict[str, FeatureStats] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """Stats per feature from `blocks()` (a callable so pass 2 can re-read); LeRobot's stats.json shape.

    `keep`, when given, receives the per-feature sketches so callers can rank other values (`rank_of`).
    """
    feats = {name: FeatureStats(dim, rank_error, quantiles) for name, dim in dims.items()}
    if keep is not None:
        keep.update(feats)
    with ThreadPoolExecutor(max_workers=min(len(feats), THREADS) or 1) as pool:
        for block in coalesce(blocks()):
            # features are independent: reduce them side by side (numpy releases the GIL in its loops)
            jobs = [pool.submit(fs.update, block[name]) for name, fs in feats.items() if name in block]
            for job in jobs:
                job.result()
    out: dict[str, dict[str, np.ndarray]] = {}
    pending: list[_Refine] = []
    for name, fs in feats.items():
        out[name], todo = _finish_pass1(name, fs, rank_error, quantiles)
        pending += todo
    if pending:
        _refine(blocks, feats, pending, out)
    return out


def _finish_pass1(
    name: str, fs: FeatureStats, rank_error: float, quantiles: Mapping[str, float]
) -> tuple[dict[str, np.ndarray], list[_Refine]]:
    m = fs.moments
    counts = m.count
    n = int(counts.max()) if fs.dim else 0
    std = np.sqrt(m.m2 / np.maximum(counts, 1))
    stats = {
        "min": m.lo.astype(np.float64),
        "max": m.hi.astype(np.float64),
        "mean": m.mean.copy(),
        "std": std,
        "count": np.array([n], dtype=np.int64),
        "nonfinite": fs.nonfinite.copy(),
    }
    todo: list[_Refine] = []
    for stat, p in quantiles.items():
        values = np.full(fs.dim, np.nan)
        for d in range(fs.dim):
            if counts[d] == 0:
                continue
            rank = p * (counts[d] - 1)
            bucket, below, inside = fs.sketch.locate(d, rank)
            budget = rank_error * counts[d]
            resolved = fs.sketch.resolved(d, bucket, rank - below) if inside > budget else None
            if inside <= budget:
                lo, hi = _bucket_bounds(bucket)
                lo, hi = max(lo, m.lo[d]), min(hi, m.hi[d])
                frac = (rank - below + 0.5) / max(inside, 1)
                values[d] = lo + (hi - lo) * min(max(frac, 0.0), 1.0)
            elif resolved is not None and resolved[1] <= budget:
                values[d] = resolved[0]
            else:
                todo.append(_Refine(name, d, stat, bucket, rank - below))
        stats[stat] = values
    return stats, todo


def _refine(
    blocks: Blocks,
    feats: Mapping[str, FeatureStats],
    pending: Sequence[_Refine],
    out: dict[str, dict[str, np.ndarray]],
) -> None:
    """Pass 2: exact float32 quantiles for the heavy buckets (one low-bit histogram per bucket)."""
    wanted: dict[tuple[str, int, int], np.ndarray] = {}
    for item in pending:
        wanted.setdefault((item.feature, item.dim, item.bucket), np.zeros(BUCKETS, dtype=np.int64))
    by_feature: dict[str, list[tuple[int, int]]] = {}
    for feature, dim, bucket in wanted:
        by_feature.setdefault(feature, []).append((dim, bucket))
    for block in coalesce(blocks()):
        for feature, targets in by_feature.items():
            if feature not in block:
                continue
            arr = np.asarray(block[feature], dtype=np.float32)
            rows = np.ascontiguousarray((arr[:, None] if arr.ndim == 1 else arr).T)
            for dim, bucket in targets:
                col = rows[dim]
                keys = order_keys(col[np.isfinite(col)])
                sel = keys[((keys >> 16) + BUCKETS // 2) == bucket]
                if sel.size:
                    wanted[(feature, dim, bucket)] += np.bincount(sel & 0xFFFF, minlength=BUCKETS)
    for item in pending:
        low = wanted[(item.feature, item.dim, item.bucket)]
        idx = int(np.searchsorted(np.cumsum(low), item.rank_in_bucket, side="right"))
        key = np.int32(((item.bucket - BUCKETS // 2) << 16) | min(idx, BUCKETS - 1))
        out[item.feature][item.stat][item.dim] = float(keys_to_float(np.array([key]))[0])


def coalesce(
    blocks: Iterable[Mapping[str, np.ndarray]], min_rows: int | None = None
) -> Iterator[dict[str, np.ndarray]]:
    """Join consecutive small blocks (one parquet file per episode, one demo per HDF5 group) so the
    fixed per-block cost of the sketch is paid per ~64 k rows, not per episode. Memory stays bounded."""
    min_rows = MIN_BLOCK if min_rows is None else min_rows
    pending: list[Mapping[str, np.ndarray]] = []
    rows = 0
    for block in blocks:
        n = max((len(v) for v in block.values()), default=0)
        if not pending and n >= min_rows:
            yield dict(block)
            continue
        pending.append(block)
        rows += n
        if rows >= min_rows:
            yield _join(pending)
            pending, rows = [], 0
    if pending:
        yield _join(pending)


def _join(blocks: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    keys = dict.fromkeys(k for b in blocks for k in b)
    return {k: np.concatenate([np.asarray(b[k]) for b in blocks if k in b]) for k in keys}


def iter_array_blocks(array: np.ndarray, name: str, rows: int = 65536) -> Iterator[dict[str, np.ndarray]]:
    """Blocks of an in-memory array (tests and small npz/hdf5 features)."""
    for start in range(0, array.shape[0], rows):
        yield {name: array[start : start + rows]}
