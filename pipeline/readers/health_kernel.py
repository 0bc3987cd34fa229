"""One pass over a block for the health facts of one vector feature, per run of one episode.

Why a kernel: in numpy each fact (ranges, sums, constant runs, largest steps, the dataset's extremes and
step spread) is its own pass over a [n, dim] block plus float64 temporaries as large as it: measured 3-4x
the whole stats pass (bench_stats). Compiled with numba (as `sketch_kernel` is, optional, cached), it is
one loop over the block in its stored layout. Without numba, `motion_numpy` computes the same arrays.

Inputs: `x` [n, dim] (float32 or float64), the block's runs `starts`/`ends`, whether the first run
continues the episode the previous block ended in (`cont`, with that episode's last row and open runs),
and `pos0`, the frame position of the block's first row within its episode. Outputs, per row: `rowh`,
a hash of the row's bits (readers/repeats.py finds repeated runs with it). Per run k:
lo, hi, total (finite values), first, last, longest/run (constant runs per dim), row_longest/row_run
(every dim unchanged), jump/jump_at (largest |step| and the frame it lands on), bounce/bounce_at (the
largest one-sample excursion: a step out and a step back of opposite signs, the smaller of the two, and
the frame of the sample between them; a fast motion, a reversal at speed or a step to a new level never
makes both large, a glitch does); and for the whole block:
sum of squared finite steps and their count per dim, and the min and max per dim with how many rows sit
on them and the first row holding them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.readers import sketch_kernel

_COMPILED: list[Callable[..., None]] = []
# the content digest: two 64-bit lanes of sum(bits x w) mod 2^64, w odd and set by (frame, dim), so it is
# order-sensitive, exact for equal episodes, additive across the blocks an episode is cut into, and costs
# two multiply-adds per value (sha1 over the bytes cost a third of the health pass)
K1, K2, K3, K4 = 0x9E3779B97F4A7C15, 0x632BE59BD9B4E019, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9


def allocate(k: int, dim: int, n: int) -> dict[str, np.ndarray]:
    """The output arrays for k runs of a dim-wide feature over n rows."""
    f, i = np.float64, np.int64
    return {
        "lo": np.full((k, dim), np.inf),
        "hi": np.full((k, dim), -np.inf),
        "total": np.zeros((k, dim)),
        "first": np.zeros((k, dim)),
        "last": np.zeros((k, dim)),
        "longest": np.zeros((k, dim), i),
        "run": np.zeros((k, dim), i),
        "row_longest": np.zeros(k, i),
        "row_run": np.zeros(k, i),
        "jump": np.zeros((k, dim), f),
        "jump_at": np.zeros((k, dim), i),
        "bounce": np.zeros((k, dim), f),
        "bounce_at": np.zeros((k, dim), i),
        "last_step": np.full(dim, np.nan),  # the block's last step per dim (NaN: none), carried on
        "diff_sq": np.zeros(dim),
        "diff_n": np.zeros(dim, i),
        "low": np.full(dim, np.inf),
        "low_count": np.zeros(dim, i),
        "low_row": np.zeros(dim, i),
        "high": np.full(dim, -np.inf),
        "high_count": np.zeros(dim, i),
        "high_row": np.zeros(dim, i),
        "h1": np.zeros(k, np.uint64),
        "h2": np.zeros(k, np.uint64),
        "rowh": np.zeros(n, np.uint64),  # each row's hash (readers/repeats.py), independent of its frame
    }


# Dim by dim, each run's facts in locals: row by row they were loads and stores to arrays the compiler must
# assume alias each other (~10 ns a value, 1.4x this loop); each dim's rows still come in order, so every
# sum, extreme and first row is the same. Per (run, dim), two loops over its rows: the values (hashes,
# sums, ranges, extremes), then the steps (spread, jumps, excursions, constant runs): one loop holding
# both kept ~25 scalars live (spilled to the stack) and took a mispredicted branch on every other step
# (the excursion's sign test); split, with the excursion a select, it is ~1.7x faster, the same bits.
# `moved` marks the rows where some dim changed (the row runs).
def _motion_loop(  # type: ignore[no-untyped-def]
    x, bits, starts, ends, cont, carry, carry_run, carry_row_run, carry_step, pos0,
    lo, hi, total, first, last, longest, run, row_longest, row_run, jump, jump_at, bounce, bounce_at,
    last_step, diff_sq, diff_n, low, low_count, low_row, high, high_count, high_row, h1, h2, rowh,
):  # fmt: skip
    dim, moved = x.shape[1], np.zeros(x.shape[0], np.bool_)
    k1, k2, k3, k4, one = np.uint64(K1), np.uint64(K2), np.uint64(K3), np.uint64(K4), np.uint64(1)
    for k in range(starts.shape[0]):
        s, e, linked = starts[k], ends[k], k == 0 and cont
        offset, lane1, lane2 = pos0 if k == 0 else 0, h1[k], h2[k]
        for d in range(dim):
            row_weight = (np.uint64(d) * k3 + k4) | one
            first[k, d], last[k, d] = x[s, d], x[e - 1, d]
            # the values: hashes, sums, ranges, the block's extremes
            low_k, high_k, total_k = lo[k, d], hi[k, d], total[k, d]
            low_v, low_c, low_r = low[d], low_count[d], low_row[d]
            high_v, high_c, high_r = high[d], high_count[d], high_row[d]
            for i in range(s, e):
                pos = i - s + offset
                v, b = x[i, d], np.uint64(bits[i, d])
                w = (np.uint64(pos * dim + d) * k1 + k2) | one
                lane1, lane2 = lane1 + b * w, lane2 + (b ^ k3) * ((w * k4) | one)
                rowh[i] += b * row_weight
                if v == v and abs(v) != np.inf:
                    total_k += v
                    low_k, high_k = min(low_k, v), max(high_k, v)
                    if v <= low_v:  # a new minimum (its first row), or one more row on it
                        low_c, low_r = (low_c + 1, low_r) if v == low_v else (1, i)
                        low_v = v
                    if v >= high_v:
                        high_c, high_r = (high_c + 1, high_r) if v == high_v else (1, i)
                        high_v = v
            lo[k, d], hi[k, d], total[k, d] = low_k, high_k, total_k
            low[d], low_count[d], low_row[d] = low_v, low_c, low_r
            high[d], high_count[d], high_row[d] = high_v, high_c, high_r
            # the steps: their spread, the largest, one-sample excursions, constant runs
            if linked:
                prev, cur, before = carry[d], carry_run[d], carry_step[d]
            else:
                prev, cur, before = np.float64(x[s, d]), 0, np.nan
                moved[s] = True
            (
                run[k, d], last_step[d], longest[k, d], jump[k, d], jump_at[k, d], bounce[k, d],
                bounce_at[k, d], diff_sq[d], diff_n[d],
            ) = _step_pass(
                x, s if linked else s + 1, e, d, s - offset, prev, cur, before, longest[k, d], jump[k, d],
                jump_at[k, d], bounce[k, d], bounce_at[k, d], diff_sq[d], diff_n[d], moved,
            )  # fmt: skip
        h1[k], h2[k] = lane1, lane2
        row_cur = carry_row_run[0] if linked else 0
        for i in range(s, e):
            row_cur = row_cur + 1 if (i > s or linked) and not moved[i] else 0
            row_longest[k] = max(row_longest[k], row_cur)
        row_run[k] = row_cur


def _step_pass(  # type: ignore[no-untyped-def]
    x, begin, e, d, base, prev, cur, before, longest, jump, jump_at, bounce, bounce_at, sq, sq_n, moved
):  # fmt: skip
    """One dim's steps over rows begin..e of a run (`base`: the row at position 0): their sum of squares,
    the largest, the largest one-sample excursion (a step undone by the next), the constant run's
    length; `moved` marks the rows where any dim changed. Compiled with `_motion_loop`, which calls it."""
    for i in range(begin, e):
        v = np.float64(x[i, d])
        step = v - prev
        prev = v
        pos = i - base
        size = abs(step)
        if size != np.inf and step == step:
            sq += step * step
            sq_n += 1
            if size > jump:
                jump, jump_at = size, pos
            small = size if size < abs(before) else abs(before)
            cand = small if step * before < 0 else 0.0
            if cand > bounce:
                bounce, bounce_at = cand, pos - 1
            before = step
        else:
            before = np.nan
        same = step == 0
        cur = cur + 1 if same else 0
        longest = max(longest, cur)
        moved[i] = moved[i] or not same
    return cur, before, longest, jump, jump_at, bounce, bounce_at, sq, sq_n


def runs(eq: np.ndarray, carry: np.ndarray) -> np.ndarray:
    """For each row of `eq` [n, D] (True: unchanged from the row before), the length of the run of
    unchanged steps ending there; runs not broken since the block's start continue `carry`."""
    steps = np.arange(1, eq.shape[0] + 1)[:, None]
    last_false = np.maximum.accumulate(np.where(~eq, steps, 0), axis=0)
    return steps - last_false + np.where(last_false == 0, carry[None, :], 0)


def _content_hash(bits: np.ndarray, pos: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    dim = bits.shape[1]
    b = bits.astype(np.uint64)
    w = ((pos[:, None] * dim + np.arange(dim)).astype(np.uint64) * np.uint64(K1) + np.uint64(K2)) | np.uint64(
        1
    )
    lane1 = (b * w).sum(axis=1, dtype=np.uint64)
    lane2 = ((b ^ np.uint64(K3)) * ((w * np.uint64(K4)) | np.uint64(1))).sum(axis=1, dtype=np.uint64)
    return np.add.reduceat(lane1, starts), np.add.reduceat(lane2, starts)


def _bounce(steps: np.ndarray, valid: np.ndarray, carry_step: np.ndarray, cont: bool) -> np.ndarray:
    """Per row and dim, the one-sample excursion ending there: min(|step|, |step before|) where the two
    are valid steps of opposite signs (the row before is the sample that went out and came back)."""
    before = np.vstack([np.asarray(carry_step, np.float64)[None, :], steps[:-1]])
    before_valid = np.vstack([np.full((1, steps.shape[1]), cont) & np.isfinite(before[:1]), valid[:-1]])
    turn = valid & before_valid & (steps * np.where(before_valid, before, 0.0) < 0)
    return np.where(turn, np.minimum(np.abs(steps), np.abs(before)), 0.0)


def motion_numpy(x, bits, starts, ends, cont, carry, carry_run, carry_row_run, carry_step, pos0, out):  # type: ignore[no-untyped-def]
    """The same arrays as the compiled loop, from whole-block numpy operations (the fallback)."""
    n = x.shape[0]
    lens = ends - starts
    inside = np.ones(n, dtype=bool)
    inside[starts] = False
    inside[0] = cont
    prev = np.vstack([carry[None, :].astype(x.dtype) if cont else x[:1], x[:-1]])
    steps = (x - prev).astype(np.float64)
    finite_steps = np.isfinite(steps) & inside[:, None]
    finite = np.isfinite(x)
    offset = np.zeros(len(starts), dtype=np.int64)
    offset[0] = pos0
    pos = np.arange(n) - np.repeat(starts - offset, lens)
    eq = (steps == 0) & inside[:, None]
    run = runs(eq, carry_run if cont else np.zeros(x.shape[1], np.int64))
    row = runs(eq.all(axis=1, keepdims=True), carry_row_run if cont else np.zeros(1, np.int64))
    size = np.where(finite_steps, np.abs(steps), 0.0)
    jump = np.maximum.reduceat(size, starts, axis=0)
    hit = (size == np.repeat(jump, lens, axis=0)) & (size > 0)
    at = np.minimum.reduceat(np.where(hit, pos[:, None], np.iinfo(np.int64).max), starts, axis=0)
    values = np.where(finite, x, np.nan).astype(np.float64)
    bounce = _bounce(steps, finite_steps, carry_step, cont)
    top = np.maximum.reduceat(bounce, starts, axis=0)
    turn_at = np.where(
        (bounce == np.repeat(top, lens, axis=0)) & (bounce > 0), pos[:, None] - 1, np.iinfo(np.int64).max
    )
    out["bounce"], out["bounce_at"] = top, np.where(top > 0, np.minimum.reduceat(turn_at, starts, axis=0), 0)
    out["last_step"] = np.where(finite_steps[-1], steps[-1], np.nan)
    out["h1"], out["h2"] = _content_hash(bits, pos, starts)
    row_weights = (np.arange(x.shape[1], dtype=np.uint64) * np.uint64(K3) + np.uint64(K4)) | np.uint64(1)
    out["rowh"] = (bits.astype(np.uint64) * row_weights).sum(axis=1, dtype=np.uint64)
    out.update(
        lo=np.fmin.reduceat(np.where(finite, values, np.inf), starts, axis=0),
        hi=np.fmax.reduceat(np.where(finite, values, -np.inf), starts, axis=0),
        total=np.add.reduceat(np.where(finite, values, 0.0), starts, axis=0),
        first=x[starts].astype(np.float64),
        last=x[ends - 1].astype(np.float64),
        longest=np.maximum.reduceat(run, starts, axis=0),
        run=run[ends - 1],
        row_longest=np.maximum.reduceat(row, starts, axis=0)[:, 0],
        row_run=row[ends - 1, 0],
        jump=jump,
        jump_at=np.where(jump > 0, at, 0),
        diff_sq=np.where(finite_steps, steps, 0.0).__pow__(2).sum(axis=0),
        diff_n=finite_steps.sum(axis=0),
    )
    for side, low in (("low", True), ("high", False)):
        masked = np.where(finite, values, np.inf if low else -np.inf)
        where = masked.argmin(axis=0) if low else masked.argmax(axis=0)
        value = masked[where, np.arange(x.shape[1])]
        out[side], out[f"{side}_count"], out[f"{side}_row"] = value, (values == value).sum(axis=0), where


def motion(
    x, starts, ends, cont, carry, carry_run, carry_row_run, pos0, carry_step=None, compiled=None
) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """The per-run and per-block arrays for one feature of one block (numba where installed, unless
    `compiled` is False); `carry_step` is the open episode's last step per dim (None: no step before
    this block)."""
    out = allocate(len(starts), x.shape[1], x.shape[0])
    bits = x.view(np.uint32 if x.dtype == np.float32 else np.uint64)
    carry = np.zeros(x.shape[1]) if carry is None else np.asarray(carry, dtype=np.float64)
    step = np.full(x.shape[1], np.nan) if carry_step is None else np.asarray(carry_step, dtype=np.float64)
    if not (sketch_kernel.HAVE_NUMBA if compiled is None else compiled):
        motion_numpy(x, bits, starts, ends, cont, carry, carry_run, carry_row_run, step, pos0, out)
        return out
    _kernel()(x, bits, starts, ends, cont, carry, carry_run, carry_row_run, step, pos0, *out.values())
    return out


def _kernel() -> Callable[..., None]:
    if not _COMPILED:
        import numba

        global _step_pass
        try:
            jit = numba.njit(cache=True, nogil=True)
            step_pass = jit(_step_pass)
        except RuntimeError:  # read-only install and home
            jit = numba.njit(nogil=True)
            step_pass = jit(_step_pass)
        _step_pass = step_pass  # the loop calls the compiled helper: bound before the loop compiles
        _COMPILED.append(jit(_motion_loop))
    return _COMPILED[0]
