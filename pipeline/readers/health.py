"""Dataset health, gathered inside the stats pass: per-episode time, index, motion and content facts.

The contract stage reads the data once (`scan.Scan`); each block it streams is also handed to
`HealthScan.observe`, which reduces it per episode with numpy's `reduceat` over the block's runs of
`episode_index` (no Python loop over rows or episodes, except one hash update per episode), so the health
section costs a few array passes over blocks already in memory, not another read. An episode cut by a
block boundary stays open and the next block's first run continues it (its last row, runs and timestamp
carry over). The facts are columnar (one array per fact, one entry per episode). Judging them
(thresholds, severities, the model's horizon) is the contract stage's (`stages.contract.health`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.readers import health_kernel
from pipeline.readers.profile import RowSample
from pipeline.readers.repeats import RepeatScan

TIME_COLUMNS = ("timestamp", "frame_index", "index", "task_index")
# LeRobot's video decoder asserts a frame within tolerance_s (1e-4 s) of each queried timestamp
TOLERANCE_S = 1e-4
NONE = np.iinfo(np.int64).max  # "no such frame" in the first_* columns
# per-episode columns and how two pieces of one episode merge (an episode whose rows are not contiguous)
MERGE = {
    **dict.fromkeys(("rows", "segments", "backwards", "repeated", "gaps", "dt_sum", "dt_n"), "add"),
    **dict.fromkeys(("frame_bad", "grid_miss", "grid_other"), "add"),
    **dict.fromkeys(("first_grid_miss", "first_backwards", "first_frame_bad"), "min"),
    "grid_off": "max",
    "t_first": "first",
    "t_last": "last",
}
MOTION = {
    "h1": "hash",
    "h2": "hash",
    "lo": "min",
    "hi": "max",
    "total": "add",
    "first": "first",
    "last": "last",
    "longest": "max",
    "row_longest": "max",
    "jump": "max",
    "bounce": "max",
    "run": "last",
    "row_run": "last",
}


COMBINE = {
    "add": lambda old, new: old + new,
    "hash": lambda old, new: np.add(np.atleast_1d(old), np.atleast_1d(new), dtype=np.uint64)[0],
    "min": np.minimum,
    "max": np.maximum,
    "first": lambda old, new: old,
    "last": lambda old, new: new,
}


@dataclass
class Extreme:
    """A dim's global minimum or maximum: its value, how many rows sit exactly on it, and where."""

    value: np.ndarray
    count: np.ndarray
    episode: np.ndarray
    frame: np.ndarray


class HealthScan:
    """Facts about every episode (or every `stride`-th one of a very large dataset) while streaming."""

    def __init__(
        self,
        dims: Mapping[str, int],
        fps: float | None,
        stride: int = 1,
        gap_factor: float = 1.5,
        alone: Sequence[str] = (),
        expected_rows: int | None = None,
        compiled: bool | None = None,
    ):
        self.dims = dict(dims)
        self.compiled = compiled  # numba's kernels (None: where installed): `sketch_kernel.compiled_for`
        # features the repeat scan also follows alone: measured ones (a state), which two episodes never
        # record alike bit for bit; commands do repeat (a replayed sequence), so only with the whole row
        self.alone = [k for k in alone if k in self.dims]
        self.fps = fps if fps and fps > 0 else None
        self.gap_factor = gap_factor
        self.stride = max(1, int(stride))
        self.rows = 0
        self.order: list[int] = []  # episode ids in the order their rows came (each once)
        self.seen: set[int] = set()
        self.tasks: set[int] = set()
        self.columns: set[str] = set()
        self.index_breaks, self.first_index_break = 0, None
        self.index_first: int | None = None  # the first `index` seen: an array merge checks the seam
        self._index_prev: int | None = None
        self.diff_sq = {k: np.zeros(d) for k, d in self.dims.items()}
        self.diff_n = {k: np.zeros(d) for k, d in self.dims.items()}
        self.low: dict[str, Extreme] = {}
        self.high: dict[str, Extreme] = {}
        self._parts: list[dict[str, Any]] = []  # closed episodes, a block's worth at a time
        self._open: dict[str, Any] | None = None  # the episode the last block ended in
        self._last: dict[str, np.ndarray] = {}  # its last row, per feature
        self._step: dict[str, np.ndarray] = {}  # and its last step (a spike straddling a block's cut)
        self._t_last: float | None = None
        self._float32: dict[str, bool] = {}  # features stored as float32 (their values kept as such)
        # rows repeated across episodes
        self.repeats = RepeatScan(compiled=compiled, expected_rows=expected_rows)
        self.sample = RowSample()  # rows and steps for the profile (`readers.profile`)

    # ------------------------------------------------------------------------------- per block
    def observe(self, block: Mapping[str, np.ndarray]) -> None:
        keys = [k for k in self.dims if k in block]
        # a format whose features hold different row counts (an .npz episode) is followed on the rows
        # they all have; the contract's counts rows name the difference
        n = min(len(v) for k, v in block.items() if k in keys or k in ("episode_index", *TIME_COLUMNS))
        if not n:
            return
        block = {k: v[:n] for k, v in block.items() if k in keys or k in ("episode_index", *TIME_COLUMNS)}
        self.columns.update(k for k in TIME_COLUMNS if k in block)
        self._index(block.get("index"))
        if "task_index" in block:
            self.tasks.update(int(t) for t in np.unique(np.asarray(block["task_index"])))
        ep = block.get("episode_index")
        ep = np.zeros(n, dtype=np.int64) if ep is None else np.asarray(ep, dtype=np.int64).reshape(-1)
        starts = np.flatnonzero(np.r_[True, ep[1:] != ep[:-1]])
        cont = self._open is not None and int(ep[0]) == int(self._open["index"][0])
        seg = Segments(ep, starts, self._open["rows"][0] if cont else 0, cont)
        for e in seg.ids.tolist():
            if e not in self.seen:
                self.seen.add(e)
                self.order.append(e)
        part: dict[str, Any] = {"index": seg.ids, "rows": seg.lens, "segments": np.ones(seg.k, np.int64)}
        self._time(block, seg, part)
        data = {k: _matrix(block[k], n) for k in keys}
        hashes = [self._motion(key, x, seg, part) for key, x in data.items()]
        if hashes:  # every feature's row hash together (stream 0), then a measured one's alone
            with np.errstate(over="ignore"):
                rows = sum((h * np.uint64(2 * i + 1) for i, h in enumerate(hashes)), np.zeros(n, np.uint64))
            self.repeats.observe(ep, seg.pos, rows)
            for stream, (key, h) in enumerate(zip(data, hashes, strict=True), start=1):
                if key in self.alone and len(hashes) > 1:
                    self.repeats.observe(ep, seg.pos, h, stream, busy=True)
            self.sample.observe(data, seg.inside)
        self._close(part, seg, cont)
        self.rows += n

    def _index(self, index: np.ndarray | None) -> None:
        if index is None:
            return
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        if self.index_first is None and idx.size:
            self.index_first = int(idx[0])
        prev = np.r_[self._index_prev if self._index_prev is not None else idx[0] - 1, idx[:-1]]
        bad = np.flatnonzero(idx != prev + 1)
        if len(bad) and self.first_index_break is None:
            self.first_index_break = self.rows + int(bad[0])
        self.index_breaks += len(bad)
        self._index_prev = int(idx[-1])

    def _time(self, block: Mapping[str, np.ndarray], seg: Segments, part: dict[str, Any]) -> None:
        if "timestamp" in block:
            ts = np.asarray(block["timestamp"], dtype=np.float64).reshape(-1)
            prev = np.r_[self._t_last if seg.cont and self._t_last is not None else ts[0], ts[:-1]]
            step = np.where(seg.inside, ts - prev, 0.0)
            back = seg.inside & (step < 0)
            part["backwards"] = seg.sum(back)
            part["repeated"] = seg.sum(seg.inside & (step == 0))
            part["gaps"] = (
                seg.sum(step > self.gap_factor / self.fps) if self.fps else np.zeros(seg.k, np.int64)
            )
            part["first_backwards"] = seg.first(back)
            part["dt_sum"] = seg.sum(np.where(step > 0, step, 0.0))
            part["dt_n"] = seg.sum(step > 0)
            part["t_first"], part["t_last"] = ts[seg.starts], ts[seg.ends - 1]
            self._t_last = float(ts[-1])
            if self.fps:
                self._grid(ts, seg, part)
        if "frame_index" in block:
            bad = np.asarray(block["frame_index"]).reshape(-1) != seg.pos
            part["frame_bad"], part["first_frame_bad"] = seg.sum(bad), seg.first(bad)

    def _grid(self, ts: np.ndarray, seg: Segments, part: dict[str, Any]) -> None:
        """Each row's timestamp against the video grid k / fps (a LeRobot video holds frame k of its
        episode at k / fps): off the grid by more than TOLERANCE_S (no frame there), or on it at another
        frame than the row's own (k != frame position)."""
        k = np.rint(ts * self.fps)
        off = np.abs(ts - k / self.fps)
        miss = (off > TOLERANCE_S) | (k < 0)
        part["grid_miss"], part["first_grid_miss"] = seg.sum(miss), seg.first(miss)
        part["grid_other"] = seg.sum(k != seg.pos)
        part["grid_off"] = np.maximum.reduceat(off, seg.starts)

    def _motion(self, key: str, x: np.ndarray, seg: Segments, part: dict[str, Any]) -> np.ndarray:
        """The kernel's facts for one feature, kept; returns its row hashes."""
        opened = self._open if seg.cont else None
        width = x.shape[1]
        out = health_kernel.motion(
            x,
            seg.starts,
            seg.ends,
            seg.cont,
            self._last.get(key) if seg.cont else None,
            opened[f"{key}/run"][0] if opened else np.zeros(width, np.int64),
            np.atleast_1d(opened[f"{key}/row_run"][0]) if opened else np.zeros(1, np.int64),
            int(seg.pos[0]),
            self._step.get(key) if seg.cont else None,
            self.compiled,
        )
        self.diff_sq[key] += out["diff_sq"]
        self.diff_n[key] += out["diff_n"]
        for side, low in ((self.low, True), (self.high, False)):
            name = "low" if low else "high"
            rows = out[f"{name}_row"]
            self._extreme(
                side, key, out[name], out[f"{name}_count"], seg.episode_of(rows), seg.pos[rows], low
            )
        for name in MOTION:
            part[f"{key}/{name}"] = out[name]
        part[f"{key}/jump_at"], part[f"{key}/bounce_at"] = out["jump_at"], out["bounce_at"]
        self._last[key] = np.asarray(x[-1], dtype=np.float64).copy()
        self._float32[key] = x.dtype == np.float32
        self._step[key] = out["last_step"]
        return out["rowh"]

    @staticmethod
    def _extreme(
        side: dict[str, Extreme],
        key: str,
        value: np.ndarray,
        count: np.ndarray,
        episode: Any,
        frame: Any,
        low: bool,
    ) -> None:
        old = side.get(key)
        if old is None:
            side[key] = Extreme(value, count, episode, frame)
            return
        beyond = value < old.value if low else value > old.value
        old.count = np.where(beyond, count, old.count + np.where(value == old.value, count, 0))
        old.episode = np.where(beyond, episode, old.episode)
        old.frame = np.where(beyond, frame, old.frame)
        old.value = np.where(beyond, value, old.value)

    def _close(self, part: dict[str, Any], seg: Segments, cont: bool) -> None:
        """Merge the block's first run into the open episode if it continues it; every run but the last
        is then closed (kept if followed), the last one stays open for the next block."""
        if cont:
            part = _merge_first(self._open, part)  # type: ignore[arg-type]
        elif self._open is not None:
            self._keep(self._open)
        last = seg.k - 1
        if last > 0:
            self._keep({k: v[:last] for k, v in part.items()})
        self._open = {k: v[last : last + 1] for k, v in part.items()}

    def _keep(self, part: dict[str, Any]) -> None:
        followed = part["index"] % self.stride == 0
        if followed.any():
            self._parts.append({k: _compact(k, v[followed], self._float32) for k, v in part.items()})

    # ------------------------------------------------------------------------------------ end
    def facts(self) -> dict[str, Any]:
        """What the stage judges: per-episode columns plus the dataset-wide numbers."""
        if self._open is not None:
            self._keep(self._open)
            self._open = None
        return {
            "rows": self.rows,
            "stride": self.stride,
            "fps": self.fps,
            "columns": sorted(self.columns),
            "order": self.order,
            "tasks_used": sorted(self.tasks),
            "index_breaks": self.index_breaks,
            "first_index_break": self.first_index_break,
            "diff_std": {k: np.sqrt(self.diff_sq[k] / np.maximum(self.diff_n[k], 1)) for k in self.low},
            "low": {k: vars(v) for k, v in self.low.items()},
            "high": {k: vars(v) for k, v in self.high.items()},
            "episodes": _with_digest(_episodes(self._parts), sorted(self.low)),
            "repeats": self.repeats.facts(),
            "sample": self.sample.facts(),
        }


# per-episode motion facts kept narrower than the kernel computes them (4 bytes, not 8, per episode and
# dim: ~40 % of the facts' memory at 50k episodes): counts and frames fit int32, a step's size float32;
# a value (lo, hi, first, last) only where the feature itself is float32, so that it stays exact
NARROW_INT = ("longest", "run", "row_longest", "row_run", "jump_at", "bounce_at")
NARROW_FLOAT = ("jump", "bounce")
VALUES = ("lo", "hi", "first", "last")


def _compact(name: str, values: np.ndarray, float32: Mapping[str, bool]) -> np.ndarray:
    key, _, fact = name.rpartition("/")
    if fact in NARROW_INT:
        return values.astype(np.int32)
    if fact in NARROW_FLOAT or (fact in VALUES and float32.get(key)):
        return values.astype(np.float32)
    return values


def _matrix(values: np.ndarray, n: int) -> np.ndarray:
    """A block's feature as a C-ordered [n, dim] float32/float64 array (the kernel's two signatures)."""
    arr = np.asarray(values).reshape(n, -1)
    return np.ascontiguousarray(arr if arr.dtype in (np.float32, np.float64) else arr.astype(np.float64))


class Segments:
    """A block's runs of one episode: where each starts and ends, its id, each row's frame position
    within its episode, and whether the row before it belongs to the same episode."""

    def __init__(self, ep: np.ndarray, starts: np.ndarray, carried: int, cont: bool):
        n = len(ep)
        self.starts, self.ends = starts, np.r_[starts[1:], n]
        self.lens, self.ids, self.k, self.cont = self.ends - starts, ep[starts], len(starts), cont
        offset = np.zeros(self.k, dtype=np.int64)
        offset[0] = carried if cont else 0
        self.pos = np.arange(n) - np.repeat(starts - offset, self.lens)
        self.inside = np.ones(n, dtype=bool)
        self.inside[starts] = False
        self.inside[0] = cont
        self._ep = ep

    def sum(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(
            values.astype(np.float64 if values.dtype.kind == "f" else np.int64), self.starts
        )

    def first(self, flags: np.ndarray) -> np.ndarray:
        return np.minimum.reduceat(np.where(flags, self.pos, NONE), self.starts)

    def episode_of(self, rows: np.ndarray) -> np.ndarray:
        return self._ep[rows]


def _merge_first(opened: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    """The open episode and the block's first run (its continuation) as one entry, in `part`."""
    out = dict(part)
    for name, value in part.items():
        rule = MERGE.get(name) or MOTION.get(name.rsplit("/", 1)[-1])
        if name not in opened or rule is None or name == "segments":
            continue
        merged = COMBINE[rule](opened[name][0], value[0])
        out[name] = value.copy()
        out[name][0] = merged
    for name in [n for n in part if n.endswith(("/jump_at", "/bounce_at"))]:
        key, fact = name.rsplit("/", 1)
        size = f"{key}/{fact[: -len('_at')]}"
        better = part[size][0] > opened[size][0]
        out[name] = part[name].copy()
        out[name][0] = np.where(better, part[name][0], opened[name][0])
    return out


def _with_digest(table: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """Each episode's content digest: its features' two hash lanes, in feature order, as one hex string."""
    lanes = [table[f"{k}/{h}"] for k in keys for h in ("h1", "h2") if f"{k}/{h}" in table]
    if lanes:
        # one hex string per episode, its lanes' 16 hex digits each in order: the lanes side by side as
        # big-endian bytes, hexed in one call and cut per episode (formatting each value cost ~7 us an
        # episode, a third of a second at 50k episodes)
        width = 16 * len(lanes)
        text = np.stack([np.asarray(x, dtype=np.uint64) for x in lanes], axis=1).astype(">u8").tobytes().hex()
        table["digest"] = np.array([text[i : i + width] for i in range(0, len(text), width)], dtype=str)
    else:
        table["digest"] = np.array([""] * len(table["index"]))
    return table


def _episodes(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The kept entries as one column per fact; an episode kept twice (rows not contiguous) merged."""
    if not parts:
        return {"index": np.empty(0, dtype=np.int64)}
    names = set.intersection(*(set(p) for p in parts))
    table = {k: np.concatenate([p[k] for p in parts]) for k in names}
    ids, first = np.unique(table["index"], return_index=True)
    if len(ids) == len(table["index"]):
        return table
    merged = {k: v[np.sort(first)].copy() for k, v in table.items()}
    for row, e in enumerate(merged["index"].tolist()):
        for later in np.flatnonzero(table["index"] == e)[1:]:
            for k in merged:
                rule = MERGE.get(k) or MOTION.get(k.rsplit("/", 1)[-1])
                if rule in ("add", "min", "max", "last"):
                    merged[k][row] = COMBINE[rule](merged[k][row], table[k][later])
    return merged
