"""Runs of rows that repeat across episodes (a partial re-upload), found while streaming.

The whole-episode checks (content digest, near-duplicate signature) cannot see an episode whose first
part repeats another episode's rows: its digest and its means differ. Comparing windows of rows can:
each row is hashed (every followed feature, bit for bit, by the health kernel), each run of `window`
consecutive rows of one episode gets a polynomial hash, and a window hash seen in another episode is a
match. Every moving window is kept until the table holds `max_kept` entries; past that, only the windows
whose hash is 0 modulo `sample` (a power of two, content-defined: the same rows are kept in both
copies) stay, `sample` doubling (and half of the table going) each time the table fills again.

A run is reported once two of its windows are kept at the same offset (by chance, two windows of
moving rows never agree bit for bit). While every window is kept (`max_kept` windows)
any run of window + 1 = 9 moving rows or more is found. Past that, a run of L rows is missed when
fewer than two of its m = L - window + 1 windows are kept: (1 - p)^m + m p (1 - p)^(m - 1),
p = 1/sample: at sample 4 (8 M rows), 1.2 % for 30 rows, 2e-6 for 60. Keeping 1 window in 4 from the
first row (as before) missed a 20-row run once in eight, on datasets of any size. Its length is known
only as the span of its kept windows (a lower bound). Windows in which no row changes (a robot resting
at its home pose, as every episode starts) are never kept: a run that repeats must move.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.readers import repeats_kernel, sketch_kernel

WINDOW = 8  # rows per hashed window
SAMPLE = 1  # one window hash in SAMPLE kept (doubles each time the table reaches MAX_KEPT)
MAX_KEPT = 4_000_000  # window hashes held (64 MB: a hash and a place each) before SAMPLE doubles
_MIX = np.uint64(0x9E3779B97F4A7C15)
_BASE = np.uint64(0x100000001B3)
BUSY_SAMPLE = 4  # a busy stream keeps 1 window in this many more: a 60-row run still missed < 1e-5
_SALT = np.uint64(0xD6E8FEB86659FD93)  # a stream's window hashes start at stream x this
_EMPTY = (np.empty(0, np.uint64), np.empty(0, np.int64), np.empty(0, np.int64))


SPAN = 1 << 32  # a place packs (episode, frame) as episode * SPAN + frame (frames of an episode < 2^32)


def _places(episodes: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """episode * SPAN + frame for each window (int64: episode ids below 2^31)."""
    return np.asarray(episodes, np.int64) * SPAN + np.asarray(frames, np.int64)


class RepeatScan:
    """Matches between sampled windows of different episodes, grouped by (episode, earlier episode,
    frame offset): a repeated run is a group whose matches span many frames. `expected_rows` (the rows
    the metadata claims) only sizes the compiled table up front: what it finds is the same."""

    def __init__(
        self,
        window: int = WINDOW,
        sample: int = SAMPLE,
        max_kept: int = MAX_KEPT,
        compiled: bool | None = None,
        expected_rows: int | None = None,
    ):
        if sample < 1 or sample & (sample - 1):
            raise ValueError(f"sample must be a power of two, got {sample}")
        self.window, self.sample, self.max_kept = window, sample, max_kept
        self._powers = np.array([_BASE] * window, dtype=np.uint64).cumprod()[::-1].copy()
        # compiled (numba): the windows in one loop and the table a hash table; else numpy, the reference
        self.compiled = sketch_kernel.HAVE_NUMBA if compiled is None else compiled
        # window hash -> where first seen (episode * SPAN + frame)
        self.table: repeats_kernel.HashTable | SortedTable = (
            repeats_kernel.HashTable(repeats_kernel.slots_for(expected_rows, max_kept))
            if self.compiled
            else SortedTable()
        )
        self.groups: dict[tuple[int, int, int], list[int]] = {}  # -> [matches, first frame, last frame]
        self._carry: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # per stream: its last rows
        # an array task's kept windows in order (hash, episode, frame), for the main job to replay; None:
        # not kept (one pass)
        self.log: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    def observe(
        self, ep: np.ndarray, pos: np.ndarray, rows: np.ndarray, stream: int = 0, busy: bool = False
    ) -> None:
        """One block: its episode ids, each row's frame in its episode and each row's hash. Each
        `stream` is windowed on its own and its window hashes salted by it: stream 0 hashes every
        feature of a row, the others one feature each, so that a run one feature repeats while another
        does not (a state copied, its actions re-recorded) is found too; a run found in several streams
        is one group. `busy`: keep only windows whose rows change at least every other step (one feature
        alone, a gripper's command stepping between two levels, repeats across episodes by itself), and
        1 in BUSY_SAMPLE of them (a copy of one feature is looked for over seconds of rows, not 9)."""
        every = self.sample * (BUSY_SAMPLE if busy else 1)
        carry = self._carry.get(stream, _EMPTY)
        with np.errstate(over="ignore"):
            salt = np.uint64(stream) * _SALT
        if self.compiled:
            kept, self._carry[stream] = repeats_kernel.windows(
                carry, rows, ep, pos, _MIX, salt, self._powers, busy, every
            )
        else:
            kept = self._windows(carry, rows, ep, pos, stream, busy, every)
        if self.log is not None:
            self.log.append(kept)
        self._see(*kept)

    def _windows(
        self,
        carry: tuple[np.ndarray, np.ndarray, np.ndarray],
        rows: np.ndarray,
        ep: np.ndarray,
        pos: np.ndarray,
        stream: int,
        busy: bool,
        every: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kept windows (hash, episode, first frame) in whole-block numpy passes (the reference)."""
        with np.errstate(over="ignore"):
            rows = (rows ^ (rows >> np.uint64(31))) * _MIX  # mixed, so that the low bits sample well
        h, e, p = (np.r_[c, x] for c, x in zip(carry, (rows, ep, pos), strict=True))
        self._carry[stream] = (h[-(self.window - 1) :], e[-(self.window - 1) :], p[-(self.window - 1) :])
        m = len(h) - self.window + 1
        if m <= 0:
            return _EMPTY
        with np.errstate(over="ignore"):
            wh = np.full(m, np.uint64(stream) * _SALT, dtype=np.uint64)
            for k, power in enumerate(self._powers):  # a polynomial hash of each window, in W passes
                wh += h[k : k + m] * power
        last = self.window - 1
        inside = (e[:m] == e[last:]) & (p[last:] - p[:m] == last)
        change = np.r_[0, np.cumsum(h[1:] != h[:-1])]
        moving = change[last:] - change[:m] >= (last + 1) // 2 if busy else change[last:] - change[:m] > 0
        keep = np.flatnonzero(inside & moving & ((wh & np.uint64(every - 1)) == 0))
        return wh[keep], e[keep], p[keep]

    def _see(self, keys: np.ndarray, episodes: np.ndarray, frames: np.ndarray) -> None:
        """Record the first place of each kept window; a window already seen in another episode is a
        match of its group."""
        keys = np.asarray(keys, np.uint64)
        if not len(keys):
            return
        self._group(*self.table.see(keys, _places(episodes, frames)))
        while len(self.table) > self.max_kept:
            self.sample *= 2
            self.table.thin(self.sample)

    def _group(self, places: np.ndarray, seen: np.ndarray) -> None:
        """Count the windows whose hash was first seen in another episode (`places`, in arrival order,
        and where each hash was first seen), per (episode, earlier episode, frame offset), with the
        group's first and last frame; matches are few (a loop), listed as a row-by-row scan lists them."""
        if not len(places):
            return
        (episode, frame), (other, at) = np.divmod(places, SPAN), np.divmod(seen, SPAN)
        for e, o, f, a in zip(*(v.tolist() for v in (episode, other, frame, at)), strict=True):
            group = self.groups.setdefault((e, o, f - a), [0, f, f])
            group[0] += 1
            group[1], group[2] = min(group[1], f), max(group[2], f)

    def facts(self) -> dict[str, Any]:
        """Each repeated run (at least two matching windows at one offset) with its frames in both
        episodes (the span of its kept windows: the run is at least that long)."""
        runs = [
            {
                "episode": e,
                "of": other,
                "frames": [lo, hi + self.window - 1],
                "of_frames": [lo - offset, hi - offset + self.window - 1],
                "rows": hi - lo + self.window,
                "windows": n,
            }
            for (e, other, offset), (n, lo, hi) in self.groups.items()
            if n >= 2
        ]
        runs.sort(key=lambda r: -r["rows"])
        return {"runs": runs, "window": self.window, "sample": self.sample}


class SortedTable:
    """Window hash -> the place it was first seen, as two arrays sorted by hash, searched and merged per
    block (numpy; the compiled path's hash table gives the same matches): a dict of Python ints cost
    ~100 B and ~1 us a window; the arrays cost 16 B and a few ns, plus a copy of the table per block."""

    def __init__(self) -> None:
        self.keys, self.places = np.empty(0, np.uint64), np.empty(0, np.int64)

    def __len__(self) -> int:
        return len(self.keys)

    def see(self, keys: np.ndarray, places: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Insert the new keys; returns the hits (place, first place of its hash), in arrival order."""
        order = np.argsort(keys)
        sk = keys[order]
        starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
        first = np.minimum.reduceat(order, starts)  # per distinct hash: its first arrival in the block
        at = np.searchsorted(self.keys, sk[starts])
        known = at < len(self.keys)
        known[known] = self.keys[at[known]] == sk[starts][known]
        lead = places[first]  # where each distinct hash was first seen: the table, else this block
        lead[known] = self.places[at[known]]
        seen = np.repeat(lead, np.diff(np.r_[starts, len(sk)]))
        sorted_places = places[order]
        hit = np.flatnonzero((sorted_places >> 32) != (seen >> 32))  # another episode's (SPAN is 2^32)
        hit = hit[np.argsort(order[hit], kind="stable")]
        new = ~known
        self.keys = np.insert(self.keys, at[new], sk[starts][new])
        self.places = np.insert(self.places, at[new], places[first][new])
        return sorted_places[hit], seen[hit]

    def thin(self, sample: int) -> None:
        """Keep only the entries whose hash is 0 modulo `sample` (a power of two)."""
        kept = (self.keys & np.uint64(sample - 1)) == 0
        self.keys, self.places = self.keys[kept], self.places[kept]
