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
    """The compiled twin of `reduce_numpy` (same arguments, same results up to summation order)."""
    n, dim = values.shape
    bad = np.zeros(dim, dtype=np.int64)
    total, squares = np.zeros(dim), np.zeros(dim)
    part, part2 = np.zeros(dim), np.zeros(dim)
    lo = np.full(dim, np.inf, dtype=np.float32)
    hi = np.full(dim, -np.inf, dtype=np.float32)
    for start in range(0, n, CHUNK):
        part[:] = 0.0
        part2[:] = 0.0
        for i in range(start, min(start + CHUNK, n)):
            for d in range(dim):
                b = bits[i, d]
                if (b & 0x7F800000) == 0x7F800000:
                    bad[d] += 1
                    continue
                key = b ^ ((b >> 31) & 0x7FFFFFFF)
                top = (key >> 16) + 32768
                hist[d, top] += 1
                slot = lut[d, top]
                if slot >= 0:
                    cell = (key >> 8) & 0xFF
                    mid[slot, cell] += 1
                    sub = lut2[slot, cell]
                    if sub >= 0:
                        low[sub, key & 0xFF] += 1
                v = values[i, d]
                c = np.float64(v) - shift[d]
                part[d] += c
                part2[d] += c * c
                lo[d] = min(lo[d], v)
                hi[d] = max(hi[d], v)
        total += part
        squares += part2
    for d in range(dim):
        out[0, d] = n - bad[d]
        out[1, d] = total[d]
        out[2, d] = squares[d]
        out[3, d] = lo[d]
        out[4, d] = hi[d]


def _count_loop(bits, dims, buckets, cells, slots, table):  # type: ignore[no-untyped-def]
    """The compiled twin of `count_numpy`. New level-2 rows (cells < 0) are found through a table of the
    new buckets, one lookup per value of the dims concerned, however many there are (the first blocks
    start dozens); new level-3 rows are few and compared one by one."""
    n, ndim = bits.shape
    fresh = np.full((ndim, BUCKETS), -1, dtype=np.int64)
    wanted = np.zeros(ndim, dtype=np.bool_)
    deep = [j for j in range(dims.shape[0]) if cells[j] >= 0]
    for j in range(dims.shape[0]):
        if cells[j] < 0:
            fresh[dims[j], buckets[j]] = slots[j]
            wanted[dims[j]] = True
    for i in range(n):
        for d in range(ndim):
            if not wanted[d]:
                continue
            b = bits[i, d]
            if (b & 0x7F800000) == 0x7F800000:
                continue
            key = b ^ ((b >> 31) & 0x7FFFFFFF)
            slot = fresh[d, (key >> 16) + 32768]
            if slot >= 0:
                table[slot, (key >> 8) & 0xFF] += 1
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

            try:  # cached beside this file or in the user's cache dir: compiled once per install
                pair = (numba.njit(cache=True, nogil=True)(f) for f in (_reduce_loop, _count_loop))
                _COMPILED.append(tuple(pair))  # type: ignore[arg-type]
            except RuntimeError:  # no writable cache location (read-only install and home): compile
                _COMPILED.append(tuple(numba.njit(nogil=True)(f) for f in (_reduce_loop, _count_loop)))  # type: ignore[arg-type]
        return _COMPILED[0]
    return reduce_numpy, count_numpy
