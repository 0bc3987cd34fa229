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
sketch (`pipeline.readers.sketch`) starts, as soon as such a bucket holds a quantile, 256 counters for the
next 8 bits, and for a cell of those that is heavy too, 256 for the last 8: that pins the quantile to an
exact float32 value, up to the values a cell received before tracking began (`missed`, itself a bound on
the rank error). Only when `missed` exceeds the budget (the distribution moved a lot after the first
blocks) does a second pass re-read the data for those buckets. Each block is reduced in one pass in its
stored layout (`pipeline.readers.sketch_kernel`: numba when installed, else numpy). Memory: 65536
counters per dim, 2 KiB per tracked cell, and one block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from pipeline.readers import sketch_kernel
from pipeline.readers.moments import Moments, block_moments
from pipeline.readers.sketch import QUANTILES, WINDOW, QuantileSketch, keys_to_float, order_keys
from pipeline.readers.sketch_kernel import BUCKETS, kernels, warm

KERNEL: str | None = None  # "numba" | "numpy" | None (numba when installed): see `sketch_kernel.kernels`
MIN_BLOCK = 1 << 16  # rows: smaller blocks are joined before they reach the sketch
THREADS = 2  # features reduced in parallel per block
Blocks = Callable[[], Iterable[Mapping[str, np.ndarray]]]


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
        self._levels = np.sort(np.asarray(self.sketch.levels, dtype=np.float64))  # what `wanted` scans for
        self._wanted = np.zeros(dim, dtype=np.bool_)

    def update(self, block: np.ndarray) -> None:
        """One pass over the block in its stored [n, dim] layout (`sketch_kernel`), then per-dim upkeep."""
        block = np.asarray(block)
        block = block[:, None] if block.ndim == 1 else block
        values = np.ascontiguousarray(block, dtype=np.float32)
        if values.shape[0] == 0:
            return
        bits = values.view(np.int32)
        reduce, count, wanted = kernels(self.kernel)
        shift = self.moments.shift(values)
        out, sk = self._out, self.sketch
        reduce(values, bits, shift, sk.hist, sk.lut, sk.mid.counts, sk.mid.children, sk.low.counts, out)
        finite = out[0].astype(np.int64)
        self.nonfinite += values.shape[0] - finite
        mean, m2 = block_moments(values, shift, finite, out[1], out[2])
        self.moments.merge(finite, mean, m2, out[3].astype(np.float32), out[4].astype(np.float32))
        sk.total += finite
        dims = np.flatnonzero(finite).tolist()
        for _ in range(2):  # a level-2 cell started now may need level 3 in this same block
            tables = (sk.lut, sk.mid.counts, sk.mid.children)  # read again: `track` may have grown them
            wanted(sk.hist, sk.total, self._levels, *tables, sk.rank_error, WINDOW, self._wanted)
            dims = self._start_cells(bits, [d for d in dims if self._wanted[d]], count)
            if not dims:
                break

    def _start_cells(self, bits: np.ndarray, dims: list[int], count: Callable[..., None]) -> list[int]:
        """Start the cells the sketch now wants and count this block into them (rare after the first
        blocks). Returns the dims that got new level-2 cells: only those can want level 3 now."""
        sk = self.sketch
        new = {d: sk.track(d) for d in dims}
        rows2 = [(d, b, -1, s) for d, (n2, _) in new.items() for b, s in n2]
        rows3 = [(d, b, c, s) for d, (_, n3) in new.items() for b, c, s in n3]
        for rows, table in ((rows2, sk.mid.counts), (rows3, sk.low.counts)):
            if rows:
                d, b, c, s = (np.array(col, dtype=np.int64) for col in zip(*rows, strict=True))
                count(bits, d, b, c, s, table)
        for d, (n2, n3) in new.items():
            sk.settle(d, n2, n3)
        return sorted({d for d, _, _, _ in rows2})


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
    feats = reduce_blocks(blocks(), dims, rank_error=rank_error, quantiles=quantiles)
    if keep is not None:
        keep.update(feats)
    return finish_stats(blocks, feats, rank_error=rank_error, quantiles=quantiles)


def reduce_blocks(
    blocks: Iterable[Mapping[str, np.ndarray]],
    dims: Mapping[str, int],
    *,
    rank_error: float = 1e-3,
    quantiles: Mapping[str, float] = QUANTILES,
    kernel: str | None = None,
) -> dict[str, FeatureStats]:
    """Pass 1 alone: the per-feature moments and sketches, which an array task writes for its files and
    the main job merges (`pipeline.readers.scan_shards`) before `finish_stats`. `kernel`: "numba",
    "numpy" or None (the module's `KERNEL`, else numba where installed)."""
    kernel = kernel or KERNEL
    feats = {name: FeatureStats(dim, rank_error, quantiles, kernel) for name, dim in dims.items()}
    compiled = kernel == "numba" or (kernel is None and sketch_kernel.HAVE_NUMBA)
    with ThreadPoolExecutor(max_workers=min(len(feats), THREADS) or 1) as pool:
        warming = pool.submit(warm) if feats and compiled else None  # overlaps the first decode
        for block in coalesce(blocks):
            if warming is not None:
                warming.result()
                warming = None
            # features are independent: reduce them side by side (numpy releases the GIL in its loops)
            jobs = [pool.submit(fs.update, block[name]) for name, fs in feats.items() if name in block]
            for job in jobs:
                job.result()
            del block, jobs  # not held while the next block is decoded
    return feats


def finish_stats(
    blocks: Blocks,
    feats: Mapping[str, FeatureStats],
    *,
    rank_error: float = 1e-3,
    quantiles: Mapping[str, float] = QUANTILES,
) -> dict[str, dict[str, np.ndarray]]:
    """The stats from pass 1's sketches; pass 2 over `blocks()` only for quantiles left unresolved."""
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
            span = (float(m.lo[d]), float(m.hi[d]))
            resolved = fs.sketch.resolved(d, bucket, rank - below, span) if inside > budget else None
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
            del block  # not held while the next block is decoded
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
