"""One pass over a block for the stats sketch: moments, top-16-bit histograms and tracked low-16-bit ones.

Why a kernel: with numpy each of these is its own pass over the block (a transposing copy so each dim is
contiguous, the order keys, one bincount per dim with an int64 copy of its input, the second-level
selection, einsum for the sums of squares): ~166 ms per 1 M x 14 block, 0.28x of the parquet decode.
Compiled with numba, the same work is one pass over the block in its stored [n, dim] layout, without
the GIL (the other feature is reduced beside it). numba is optional: without it the numpy formulation
below computes the same numbers (no transpose, one combined bincount over all dims, in 32 k-row slices)
but is slower than the compiled loop by ~6x and than the former per-dim numpy code by ~3x (bench_stats,
`--kernel numpy`): it is the fallback, not the fast path.

Both functions take the block twice: `values` (float32 [n, dim], C order) and `bits` (its int32 view).
Non-finite values (NaN, +-inf) are skipped; the caller counts them as `n - count`.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

import numpy as np

BUCKETS = 1 << 16
CELLS = 1 << 8  # counters per level-2 / level-3 cell row
NUMPY_ROWS = 1 << 15  # rows per slice in the numpy formulation
CHUNK = 4096  # rows summed in a local float64 accumulator before joining the block's totals

# numba is imported on first use (importing it costs ~0.5-1 s): readers that never compute stats don't pay
AVAILABLE = importlib.util.find_spec("numba") is not None
HAVE_NUMBA = AVAILABLE and os.environ.get("PREFLIGHT_STATS_KERNEL", "numba") != "numpy"
_COMPILED: list[tuple[Callable[..., None], Callable[..., None]]] = []


def order_keys_scalar(value: float) -> int:
    """The order key of one float32 value (see `pipeline.readers.sketch.order_keys`)."""
    bits = int(np.array([value], dtype=np.float32).view(np.int32)[0])
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


def reduce_numpy(
    values: np.ndarray,
    bits: np.ndarray,
    shift: np.ndarray,
    hist: np.ndarray,
    lut: np.ndarray,
    mid: np.ndarray,
    lut2: np.ndarray,
    low: np.ndarray,
    out: np.ndarray,
) -> None:
    """Add the block to `hist` ([dim, BUCKETS]), to `mid[lut[d, top]]` (bits 8..15) and to
    `low[lut2[slot, cell]]` (bits 0..7); write per-dim finite count, sum and sum of squares of
    `values - shift`, min and max into `out` ([5, dim] float64). Works through the block in slices of
    NUMPY_ROWS rows so its temporaries stay small (and in cache)."""
    dim = values.shape[1]
    out[0], out[1], out[2], out[3], out[4] = 0.0, 0.0, 0.0, np.inf, -np.inf
    offsets = BUCKETS // 2 + BUCKETS * np.arange(dim, dtype=np.int64)  # one bincount for every dim
    for start in range(0, values.shape[0], NUMPY_ROWS):
        part, raw = values[start : start + NUMPY_ROWS], bits[start : start + NUMPY_ROWS]
        finite = (raw & np.int32(0x7F800000)) != np.int32(0x7F800000)
        everywhere = bool(finite.all())
        keys = raw ^ ((raw >> 31) & np.int32(0x7FFFFFFF))
        ids = (keys >> 16) + offsets
        flat = ids.reshape(-1) if everywhere else ids[finite]
        hist.reshape(-1)[:] += np.bincount(flat, minlength=hist.size)
        slots = lut.reshape(-1)[flat]
        sel = slots >= 0
        if sel.any():
            chosen = (keys.reshape(-1) if everywhere else keys[finite])[sel]
            cells = slots[sel].astype(np.int64) * CELLS + ((chosen >> 8) & 0xFF)
            mid.reshape(-1)[:] += np.bincount(cells, minlength=mid.size)
            subs = lut2.reshape(-1)[cells]
            deep = subs >= 0
            if deep.any():
                index = subs[deep].astype(np.int64) * CELLS + (chosen[deep] & 0xFF)
                low.reshape(-1)[:] += np.bincount(index, minlength=low.size)
        centred = part - shift
        if everywhere:
            lo, hi = part.min(axis=0), part.max(axis=0)
        else:
            centred[~finite] = 0.0
            lo = np.where(finite, part, np.inf).min(axis=0)
            hi = np.where(finite, part, -np.inf).max(axis=0)
        out[0] += finite.sum(axis=0)
        out[1] += centred.sum(axis=0)
        out[2] += np.einsum("ij,ij->j", centred, centred)
        np.minimum(out[3], lo, out=out[3])
        np.maximum(out[4], hi, out=out[4])


def count_numpy(
    bits: np.ndarray,
    dims: np.ndarray,
    buckets: np.ndarray,
    cells: np.ndarray,
    slots: np.ndarray,
    table: np.ndarray,
) -> None:
    """Count the block's values of bucket `buckets[j]` of dim `dims[j]` into `table[slots[j]]`: by bits
    8..15 where `cells[j]` < 0 (a new level-2 row), else those of level-2 cell `cells[j]` by bits 0..7."""
    for j, (d, bucket, cell) in enumerate(zip(dims.tolist(), buckets.tolist(), cells.tolist(), strict=True)):
        col = bits[:, d]
        keys = col ^ ((col >> 31) & np.int32(0x7FFFFFFF))
        finite = (col & np.int32(0x7F800000)) != np.int32(0x7F800000)
        keys = keys[finite & (((keys >> 16) + BUCKETS // 2) == bucket)]
        if cell >= 0:
            keys = keys[((keys >> 8) & 0xFF) == cell]
        if keys.size:
            table[slots[j]] += np.bincount((keys >> (8 if cell < 0 else 0)) & 0xFF, minlength=CELLS)


def _reduce_loop(values, bits, shift, hist, lut, mid, lut2, low, out):  # type: ignore[no-untyped-def]
    """The compiled twin of `reduce_numpy` (same arguments, same results up to summation order).

    Per CHUNK rows: one sweep for the counters, then one for the sums. A value of a tracked bucket is
    counted into its level-2 row only; the bucket's level-1 counter gets the row's growth at the end
    (one read-modify-write per value saved where the mass is, the tracked buckets). The sums sweep the
    chunk as one flat run in strides of `width` (a multiple of `dim`) with one accumulator per position,
    a loop LLVM vectorises; a chunk holding a non-finite value is summed row by row, skipping it."""
    n, dim = values.shape
    before = _row_sums(lut, mid)
    rep = max(1, 64 // max(dim, 1))
    width = dim * rep
    flat = values.reshape(-1)
    wshift = np.empty(width)
    for j in range(width):
        wshift[j] = shift[j % dim]
    acc, acc2 = np.zeros(width), np.zeros(width)
    wlo = np.full(width, np.inf, dtype=np.float32)
    whi = np.full(width, -np.inf, dtype=np.float32)
    bad = np.zeros(dim, dtype=np.int64)
    total, squares = np.zeros(dim), np.zeros(dim)
    lo = np.full(dim, np.inf, dtype=np.float32)
    hi = np.full(dim, -np.inf, dtype=np.float32)
    for start in range(0, n, CHUNK):
        end = min(start + CHUNK, n)
        skipped = _count_rows(bits, start, end, hist, lut, mid, lut2, low, bad)
        wide = start + (end - start) // rep * rep if skipped == 0 else start
        for g in range(start * dim, wide * dim, width):
            for j in range(width):
                v = flat[g + j]
                c = np.float64(v) - wshift[j]
                acc[j] += c
                acc2[j] += c * c
                wlo[j] = min(wlo[j], v)
                whi[j] = max(whi[j], v)
        _sum_rows(values, shift, wide, end, total, squares, lo, hi)
    for j in range(width):
        d = j % dim
        total[d] += acc[j]
        squares[d] += acc2[j]
        lo[d] = min(lo[d], wlo[j])
        hi[d] = max(hi[d], whi[j])
    _settle_hist(lut, mid, before, hist)
    for d in range(dim):
        out[0, d] = n - bad[d]
        out[1, d] = total[d]
        out[2, d] = squares[d]
        out[3, d] = lo[d]
        out[4, d] = hi[d]


def _count_rows(bits, start, end, hist, lut, mid, lut2, low, bad):  # type: ignore[no-untyped-def]
    """Count rows start..end into the three levels; returns how many values were non-finite."""
    skipped = 0
    for i in range(start, end):
        for d in range(bits.shape[1]):
            b = bits[i, d]
            if (b & 0x7F800000) == 0x7F800000:
                bad[d] += 1
                skipped += 1
                continue
            key = b ^ ((b >> 31) & 0x7FFFFFFF)
            top = np.uint32((key >> 16) + 32768)
            slot = lut[d, top]
            if slot < 0:
                hist[d, top] += 1
                continue
            cell = np.uint32((key >> 8) & 0xFF)
            mid[np.uint32(slot), cell] += 1
            sub = lut2[np.uint32(slot), cell]
            if sub >= 0:
                low[np.uint32(sub), np.uint32(key & 0xFF)] += 1
    return skipped


def _sum_rows(values, shift, start, end, total, squares, lo, hi):  # type: ignore[no-untyped-def]
    """Sums of rows start..end row by row, skipping non-finite values."""
    for i in range(start, end):
        for d in range(values.shape[1]):
            v = values[i, d]
            if not np.isfinite(v):
                continue
            c = np.float64(v) - shift[d]
            total[d] += c
            squares[d] += c * c
            lo[d] = min(lo[d], v)
            hi[d] = max(hi[d], v)


def _row_sums(lut, mid):  # type: ignore[no-untyped-def]
    """Each level-2 row's total before the block (rows of tracked buckets only; the rest stay 0)."""
    sums = np.zeros(mid.shape[0], dtype=np.int64)
    for d in range(lut.shape[0]):
        for t in range(lut.shape[1]):
            slot = lut[d, t]
            if slot >= 0:
                sums[slot] = mid[slot].sum()
    return sums


def _settle_hist(lut, mid, before, hist):  # type: ignore[no-untyped-def]
    """Add each tracked bucket's level-2 growth during the block to its level-1 counter."""
    for d in range(lut.shape[0]):
        for t in range(lut.shape[1]):
            slot = lut[d, t]
            if slot >= 0:
                hist[d, t] += mid[slot].sum() - before[slot]


def _count_loop(bits, dims, buckets, cells, slots, table):  # type: ignore[no-untyped-def]
    """The compiled twin of `count_numpy`. New level-2 rows (cells < 0) are found through a table of the
    new buckets, one lookup per value of the dims concerned, however many there are (the first blocks
    start dozens); new level-3 rows are few and compared one by one."""
    n, ndim = bits.shape
    fresh = np.full((ndim, BUCKETS), -1, dtype=np.int32)
    wanted = np.zeros(ndim, dtype=np.bool_)
    deep = [j for j in range(dims.shape[0]) if cells[j] >= 0]
    for j in range(dims.shape[0]):
        if cells[j] < 0:
            fresh[dims[j], buckets[j]] = slots[j]
            wanted[dims[j]] = True
    which = np.flatnonzero(wanted)  # only the dims concerned are read (often one or two of them)
    for i in range(n):
        for k in range(which.shape[0]):
            d = which[k]
            b = bits[i, d]
            if (b & 0x7F800000) == 0x7F800000:
                continue
            key = b ^ ((b >> 31) & 0x7FFFFFFF)
            slot = fresh[d, np.uint32((key >> 16) + 32768)]
            if slot >= 0:
                table[np.uint32(slot), np.uint32((key >> 8) & 0xFF)] += 1
        for j in deep:
            b = bits[i, dims[j]]
            if (b & 0x7F800000) == 0x7F800000:
                continue
            key = b ^ ((b >> 31) & 0x7FFFFFFF)
            if (key >> 16) + 32768 == buckets[j] and (key >> 8) & 0xFF == cells[j]:
                table[slots[j], key & 0xFF] += 1


def warm() -> None:
    """Compile (or load from numba's cache) both kernels on a tiny block: `compute_stats` calls it in a
    worker thread while the first block is being decoded, so the ~0.5-1 s this takes overlaps it."""
    reduce, count = kernels()
    values = np.zeros((2, 1), dtype=np.float32)
    values.flags.writeable = False  # blocks come read-only from arrow buffers: compile that signature
    bits = values.view(np.int32)
    table = np.zeros((1, CELLS), dtype=np.int64)
    hist, lut = np.zeros((1, BUCKETS), dtype=np.int64), np.full((1, BUCKETS), -1, dtype=np.int32)
    ids = np.zeros(1, dtype=np.int64)
    reduce(
        values,
        bits,
        np.zeros(1),
        hist,
        lut,
        table,
        np.full((1, CELLS), -1, dtype=np.int32),
        table,
        np.zeros((5, 1)),
    )
    count(bits, ids, ids, ids - 1, ids, table)


def kernels(name: str | None = None) -> tuple:  # type: ignore[type-arg]
    """(reduce, count) for `name` ("numba" or "numpy"); by default numba when installed, unless the
    environment says PREFLIGHT_STATS_KERNEL=numpy."""
    name = name or ("numba" if HAVE_NUMBA else "numpy")
    if name not in ("numba", "numpy"):
        raise ValueError(f"stats kernel: expected 'numba' or 'numpy', got {name!r}")
    if name == "numba" and AVAILABLE:
        if not _COMPILED:
            import numba

            _COMPILED.append(_compile(numba))
        return _COMPILED[0]
    return reduce_numpy, count_numpy


def _compile(numba: object) -> tuple:  # type: ignore[type-arg]
    """njit the loops (helpers first: the reduce loop calls them), cached beside this file or in the
    user's cache dir (compiled once per install), or uncached where no cache location is writable."""
    global _row_sums, _settle_hist, _count_rows, _sum_rows
    try:
        jit = numba.njit(cache=True, nogil=True)  # type: ignore[attr-defined]
        helpers = [jit(f) for f in (_row_sums, _settle_hist, _count_rows, _sum_rows)]
    except RuntimeError:  # read-only install and home
        jit = numba.njit(nogil=True)  # type: ignore[attr-defined]
        helpers = [jit(f) for f in (_row_sums, _settle_hist, _count_rows, _sum_rows)]
    _row_sums, _settle_hist, _count_rows, _sum_rows = helpers
    return jit(_reduce_loop), jit(_count_loop)
