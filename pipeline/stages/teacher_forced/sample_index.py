"""The samples chosen from per-episode facts, and only their episodes' rows read (issue 35).

Holding every row's state and action to pick 96 samples made teacher_forced's memory grow ~360 B a row
(1.9 GB at 50k episodes). What the choice needs of the whole dataset is per episode: where its rows
start and how many there are (the strata are thirds of an episode), plus the action's mean and std over
every row (the error units). One streamed pass (`LeRobotData.blocks`, bounded batches) collects exactly
that and checks the one property that makes it equal to the whole-dataset choice: each episode's rows
are contiguous and its frames ascend in row order. Then only the episodes holding samples are read
(`EpisodeRows`: their files, the row groups that can hold them), whole, so targets, past frames and
time shifts, which never leave an episode, are what they were. A dataset without that property (an
episode split across places, frames out of order) is read whole, as before, and gives the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.episode_rows import EpisodeRows
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.readers.moments import Moments, accumulate, mean_std
from pipeline.stages.teacher_forced.samples import Frames, check_keys, draw, frames_of, third

FRAME = "frame_index"


@dataclass(frozen=True)
class Index:
    """Per-episode facts of the whole dataset, in row order, and the moments of the chosen columns."""

    root: Path
    episode: np.ndarray  # (episodes,) int64, in the order their rows come
    start: np.ndarray  # (episodes,) the global row of each episode's first row
    length: np.ndarray  # (episodes,) its rows
    moments: dict[str, tuple[np.ndarray, np.ndarray]]  # key -> (mean, std) over every row, float64

    @property
    def rows(self) -> int:
        return int(self.length.sum())

    def counts(self) -> dict[int, int]:
        return {int(e): int(n) for e, n in zip(self.episode, self.length, strict=True)}


def read_index(root: Path, moment_keys: Sequence[str]) -> Index | None:
    """One streamed pass: per-episode start and length, and the moments of `moment_keys`; None where the
    rows are not one contiguous, frame-ascending run per episode (or cannot be streamed as declared)."""
    data = LeRobotData(root)
    try:
        dims = {k: data.feature_dim(k) for k in moment_keys}
        has_frame = FRAME in data.features
        runs: list[tuple[int, int, int]] = []  # (episode, start, length)
        moments: dict[str, Moments | None] = {k: None for k in moment_keys}
        row, last_frame = 0, None
        for block in data.blocks(dims):
            episode = block.get("episode_index")
            if episode is None or (has_frame and FRAME not in block):
                return None
            frame = block[FRAME] if has_frame else None
            last_frame = _runs(runs, row, episode.astype(np.int64), frame, last_frame)
            if last_frame is False:
                return None
            for key, acc in moments.items():
                moments[key] = accumulate(acc, block[key])
            row += len(episode)
    except InputError:
        return None  # the whole read says what is wrong, as before
    if not runs or len({e for e, _, _ in runs}) != len(runs):
        return None
    ep, start, length = (np.array(c, dtype=np.int64) for c in zip(*runs, strict=True))
    done = {k: mean_std(m) for k, m in moments.items() if m is not None}
    return Index(data.root, ep, start, length, done)


def _runs(runs: list[tuple[int, int, int]], row: int, episode: np.ndarray, frame: Any, last: Any) -> Any:
    """Extends `runs` by one batch; the batch's last frame, or False where frames do not ascend."""
    cuts = np.flatnonzero(episode[1:] != episode[:-1]) + 1
    bounds = np.r_[0, cuts, len(episode)]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        ep = int(episode[a])
        joins = bool(runs) and runs[-1][0] == ep and a == 0
        if frame is not None:
            f = frame[a:b]
            if np.any(np.diff(f) <= 0) or (joins and last is not None and f[0] <= last):
                return False
        if joins:
            runs[-1] = (ep, runs[-1][1], runs[-1][2] + (b - a))
        else:
            runs.append((ep, row + int(a), int(b - a)))
    return None if frame is None else frame[-1]


def select_index(index: Index, n: int, seed: int, episodes: Sequence[int] | None = None) -> np.ndarray:
    """Global rows of `n` samples, drawn exactly as `samples.select` draws them from every row."""
    where = {int(e): i for i, e in enumerate(index.episode)}
    cache: dict[int, list[np.ndarray]] = {}

    def strata(ep: int) -> list[np.ndarray]:
        if ep not in cache:
            i = where.get(ep)
            if i is None:
                cache[ep] = [np.zeros(0, np.int64)] * 3
            else:
                rank = np.arange(index.length[i])
                part = third(rank, np.full(len(rank), index.length[i]))
                cache[ep] = [index.start[i] + rank[part == t] for t in range(3)]
        return cache[ep]

    pool = np.unique(index.episode) if episodes is None else np.asarray(sorted(set(episodes)))
    return draw(index.root, pool, n, seed, strata)


def load(root: Path, keys: Sequence[str], index: Index, episodes: Sequence[int]) -> Frames | None:
    """The named episodes' rows, whole, in row order, as a Frames that carries the dataset's facts;
    None where an episode's file holds only part of it (one run across two files): read it all then."""
    data = LeRobotData(root)
    features = check_keys(data, keys)
    wanted = [*keys, "episode_index"] + ([FRAME] if FRAME in features else [])
    where = {int(e): i for i, e in enumerate(index.episode)}
    chosen = sorted({int(e) for e in episodes if int(e) in where}, key=lambda e: index.start[where[e]])
    reader = EpisodeRows(data)
    tables = reader.tables(chosen, wanted)
    parts = [reader.convert(tables[e], wanted) for e in chosen]
    for e, part in zip(chosen, parts, strict=True):
        if len(part["episode_index"]) != index.length[where[e]]:
            return None
    cat = {k: _joined([p[k] for p in parts], features[k]) for k in wanted}
    return frames_of(data.root, features, keys, wanted, cat, dataset=index)


def _joined(parts: list[np.ndarray], spec: Any) -> np.ndarray:
    if parts:
        return np.concatenate(parts)
    shape = spec.get("shape") if isinstance(spec, dict) else None
    width = int(np.prod(shape)) if isinstance(shape, list) and shape else 1
    return np.zeros((0, width) if width > 1 else (0,))


def episodes_of(index: Index, rows: np.ndarray) -> list[int]:
    """The episode of each global row."""
    return [int(index.episode[np.searchsorted(index.start, r, "right") - 1]) for r in rows.tolist()]


def local(frames: Frames, index: Index, rows: np.ndarray) -> np.ndarray:
    """Global rows -> rows of `frames` (which holds their episodes whole, in row order)."""
    first: dict[int, int] = {}
    for at, e in enumerate(frames.episode.tolist()):
        first.setdefault(e, at)
    out = []
    for r in rows.tolist():
        i = int(np.searchsorted(index.start, r, "right")) - 1
        out.append(first[int(index.episode[i])] + r - int(index.start[i]))
    return np.asarray(out, dtype=np.int64)
