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
# Below this many values (rows x dims) a pass runs the numpy kernels: a process's first compiled call
# loads numba and its cached kernels (~1.2 s), which the numpy kernels' extra time per value repays only
# past ~3 M values (a 100k x 28 dataset: 1.50 s compiled, 1.44 s numpy, first call of a process)
COMPILED_VALUES = 2_000_000


def compiled_for(values: int | None) -> bool:
    """Whether a pass over about `values` values (None: unknown) runs the compiled kernels."""
    return HAVE_NUMBA and (values is None or values >= COMPILED_VALUES)


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

    Per CHUNK rows: one sweep for the counters, then one for the sums. The sums sweep the
    chunk as one flat run in strides of `width` (a multiple of `dim`) with one accumulator per position,
    a loop LLVM vectorises once its indices are unsigned (numba wraps negative signed indices, a select
    per access that kept it scalar: 15.7 -> 3.1 ms per 1 M x 14 block); a chunk holding a non-finite value
    is summed row by row, skipping it."""
    n, dim = values.shape
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
            base = np.uint64(g)
            for j in range(np.uint64(width)):  # unsigned: no negative-index wraparound, so LLVM vectorises
                v = flat[base + j]
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
            hist[d, top] += 1
            slot = lut[d, top]
            if slot < 0:
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


def _count_loop(bits, dims, buckets, cells, slots, table):  # type: ignore[no-untyped-def]
    """The compiled twin of `count_numpy`. One lookup per value of the dims concerned, however many rows
    are new (the first blocks start dozens): (dim, bucket) -> its pair in this call, then per pair the
    level-2 row's slot (column CELLS) and each level-3 row's slot by its level-2 cell."""
    n, ndim = bits.shape
    pair_of = np.full((ndim, BUCKETS), -1, dtype=np.int32)
    slot_of = np.full((dims.shape[0], CELLS + 1), -1, dtype=np.int64)
    wanted = np.zeros(ndim, dtype=np.bool_)
    pairs = 0
    for j in range(dims.shape[0]):
        if pair_of[dims[j], buckets[j]] < 0:
            pair_of[dims[j], buckets[j]] = pairs
            pairs += 1
        slot_of[pair_of[dims[j], buckets[j]], cells[j] if cells[j] >= 0 else CELLS] = slots[j]
        wanted[dims[j]] = True
    which = np.flatnonzero(wanted)  # only the dims concerned are read (often one or two of them)
    for i in range(n):
        for k in range(which.shape[0]):
            d = which[k]
            b = bits[i, d]
            if (b & 0x7F800000) == 0x7F800000:
                continue
            key = b ^ ((b >> 31) & 0x7FFFFFFF)
            pair = pair_of[d, np.uint32((key >> 16) + 32768)]
            if pair < 0:
                continue
            cell = np.uint32((key >> 8) & 0xFF)
            if slot_of[pair, CELLS] >= 0:
                table[slot_of[pair, CELLS], cell] += 1
            if slot_of[pair, cell] >= 0:
                table[slot_of[pair, cell], np.uint32(key & 0xFF)] += 1


def wanted_numpy(hist, total, levels, lut, mid, children, rank_error, window, out):  # type: ignore[no-untyped-def]
    """Every dim with values: the numpy fallback does not pre-filter (`QuantileSketch.track` decides)."""
    out[:] = total > 0


def _wanted_loop(hist, total, levels, lut, mid, children, rank_error, window, out):  # type: ignore[no-untyped-def]
    """out[d]: whether `QuantileSketch.track(d)` could start a cell now, tested without Python.

    Why: `track` runs per dim after every block and costs ~0.3 ms in Python (a cumsum over 65536
    buckets, searches, dicts); in bench_stats that was a fifth of the stats pass's own CPU, though most
    calls start nothing. This is a superset of its test (same quantile buckets, `levels` sorted): a
    heavy untracked bucket within `window` of a quantile's, or a heavy level-2 cell without a level-3
    row anywhere in a heavy tracked quantile bucket."""
    dim, buckets = hist.shape
    found = np.empty(levels.shape[0], dtype=np.int64)
    for d in range(dim):
        out[d] = False
        n = total[d]
        if n == 0:
            continue
        heavy = rank_error * n / 2
        k, cum = 0, 0
        for b in range(buckets):
            cum += hist[d, b]
            while k < levels.shape[0] and cum > levels[k] * (n - 1):
                found[k] = b
                k += 1
            if k == levels.shape[0]:
                break
        for j in range(k, levels.shape[0]):
            found[j] = buckets - 1
        for j in range(levels.shape[0]):
            centre = found[j]
            for b in range(max(centre - window, 0), min(centre + window + 1, buckets)):
                if hist[d, b] > heavy and lut[d, b] < 0:
                    out[d] = True
            slot = lut[d, centre]
            if slot >= 0 and hist[d, centre] > heavy:
                for c in range(mid.shape[1]):
                    if mid[slot, c] > heavy and children[slot, c] < 0:
                        out[d] = True


def warm() -> None:
    """Compile (or load from numba's cache) the kernels on a tiny block: `compute_stats` calls it in a
    worker thread while the first block is being decoded, so the ~0.5-1 s this takes overlaps it."""
    reduce, count, wanted = kernels()
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
    wanted(hist, ids, np.zeros(1), lut, table, np.full((1, CELLS), -1, dtype=np.int32), 1e-3, 1, ids > 0)


def kernels(name: str | None = None) -> tuple:  # type: ignore[type-arg]
    """(reduce, count, wanted) for `name` ("numba" or "numpy"); by default numba when installed, unless the
    environment says PREFLIGHT_STATS_KERNEL=numpy."""
    name = name or ("numba" if HAVE_NUMBA else "numpy")
    if name not in ("numba", "numpy"):
        raise ValueError(f"stats kernel: expected 'numba' or 'numpy', got {name!r}")
    if name == "numba" and AVAILABLE:
        if not _COMPILED:
            import numba

            _COMPILED.append(_compile(numba))
        return _COMPILED[0]
    return reduce_numpy, count_numpy, wanted_numpy


def _compile(numba: object) -> tuple:  # type: ignore[type-arg]
    """njit the loops (helpers first: the reduce loop calls them), cached beside this file or in the
    user's cache dir (compiled once per install), or uncached where no cache location is writable."""
    global _count_rows, _sum_rows
    try:
        jit = numba.njit(cache=True, nogil=True)  # type: ignore[attr-defined]
        helpers = [jit(f) for f in (_count_rows, _sum_rows)]
    except RuntimeError:  # read-only install and home
        jit = numba.njit(nogil=True)  # type: ignore[attr-defined]
        helpers = [jit(f) for f in (_count_rows, _sum_rows)]
    _count_rows, _sum_rows = helpers
    return jit(_reduce_loop), jit(_count_loop), jit(_wanted_loop)
