"""Runs of rows that repeat across episodes (a partial re-upload), found while streaming.

The whole-episode checks (content digest, near-duplicate signature) cannot see an episode whose first
part repeats another episode's rows: its digest and its means differ. Comparing windows of rows can:
each row is hashed (every followed feature, bit for bit, by the health kernel), each run of `window`
consecutive rows of one episode gets a polynomial hash, and a window hash seen in another episode is a
match. Every moving window is kept until the table holds `max_kept` entries; past that, only the windows
whose hash is 0 modulo `sample` (a power of two, content-defined: the same rows are kept in both
copies) stay, `sample` doubling (and half of the table going) each time the table fills again.

A run is reported once two of its windows are kept at the same offset (by chance, two windows of
moving rows never agree bit for bit). While every window is kept (datasets up to `max_kept` rows: 2 M)
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

WINDOW = 8  # rows per hashed window
SAMPLE = 1  # one window hash in SAMPLE kept (doubles each time the table reaches MAX_KEPT)
MAX_KEPT = 2_000_000  # window hashes held (~100 MB with the dict's overhead) before SAMPLE doubles
_MIX = np.uint64(0x9E3779B97F4A7C15)
_BASE = np.uint64(0x100000001B3)


SPAN = 1 << 32  # a place packs (episode, frame) as episode * SPAN + frame (frames of an episode < 2^32)


def _places(episodes: list[int], frames: list[int]) -> list[int]:
    """episode * SPAN + frame for each window, in numpy where that fits in int64, else in Python."""
    e, f = np.asarray(episodes), np.asarray(frames)
    small = e.size == 0 or max(abs(int(e.min())), abs(int(e.max()))) < 1 << 30
    if e.dtype.kind in "iu" and f.dtype.kind in "iu" and small:
        return (e.astype(np.int64) * SPAN + f.astype(np.int64)).tolist()
    return [x * SPAN + y for x, y in zip(episodes, frames, strict=True)]


class RepeatScan:
    """Matches between sampled windows of different episodes, grouped by (episode, earlier episode,
    frame offset): a repeated run is a group whose matches span many frames."""

    def __init__(self, window: int = WINDOW, sample: int = SAMPLE, max_kept: int = MAX_KEPT):
        if sample < 1 or sample & (sample - 1):
            raise ValueError(f"sample must be a power of two, got {sample}")
        self.window, self.sample, self.max_kept = window, sample, max_kept
        self._powers = np.array([_BASE] * window, dtype=np.uint64).cumprod()[::-1].copy()
        self.first: dict[int, int] = {}  # window hash -> where first seen: episode * SPAN + frame
        self.groups: dict[tuple[int, int, int], list[int]] = {}  # -> [matches, first frame, last frame]
        self._carry = (np.empty(0, np.uint64), np.empty(0, np.int64), np.empty(0, np.int64))
        # an array task's kept windows in order (hash, episode, frame), for the main job to replay; None:
        # not kept (one pass)
        self.log: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    def observe(self, ep: np.ndarray, pos: np.ndarray, rows: np.ndarray) -> None:
        """One block: its episode ids, each row's frame in its episode and each row's hash."""
        with np.errstate(over="ignore"):
            rows = (rows ^ (rows >> np.uint64(31))) * _MIX  # mixed, so that the low bits sample well
        h, e, p = (np.r_[c, x] for c, x in zip(self._carry, (rows, ep, pos), strict=True))
        self._carry = (h[-(self.window - 1) :], e[-(self.window - 1) :], p[-(self.window - 1) :])
        m = len(h) - self.window + 1
        if m <= 0:
            return
        wh = np.zeros(m, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for k, power in enumerate(self._powers):  # a polynomial hash of each window, in W passes
                wh += h[k : k + m] * power
        last = self.window - 1
        inside = (e[:m] == e[last:]) & (p[last:] - p[:m] == last)
        change = np.r_[0, np.cumsum(h[1:] != h[:-1])]
        moving = change[last:] - change[:m] > 0
        keep = np.flatnonzero(inside & moving & ((wh & np.uint64(self.sample - 1)) == 0))
        if self.log is not None:
            self.log.append((wh[keep], e[keep], p[keep]))
        self._see(wh[keep].tolist(), e[keep].tolist(), p[keep].tolist())

    def _see(self, keys: list[int], episodes: list[int], frames: list[int]) -> None:
        """Record the first place of each kept window; a window already seen in another episode is a
        match of its group. Most keys are new: looked up in one pass, inserted in another. A place is
        one int, episode * 2^32 + frame (a tuple per window cost ~80 B more: 100 MB at 5 M rows)."""
        first, groups = self.first, self.groups
        # both tests in C (`isdisjoint` probes the dict per key): a list of `get`s cost ~0.4 us a key
        if not first.keys().isdisjoint(keys) or len(set(keys)) < len(keys):
            for key, episode, frame in zip(keys, episodes, frames, strict=True):
                seen, at = divmod(first.setdefault(key, episode * SPAN + frame), SPAN)
                if seen != episode:
                    group = groups.setdefault((episode, seen, frame - at), [0, frame, frame])
                    group[0] += 1
                    group[1], group[2] = min(group[1], frame), max(group[2], frame)
        else:
            first.update(zip(keys, _places(episodes, frames), strict=True))
        if len(first) > self.max_kept:
            self._thin()

    def _thin(self) -> None:
        while len(self.first) > self.max_kept:
            self.sample *= 2
            self.first = {k: v for k, v in self.first.items() if k & (self.sample - 1) == 0}

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
