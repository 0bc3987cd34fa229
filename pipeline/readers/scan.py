"""The streaming pass every dataset reader shares, and the options its caller sets.

Each format (LeRobot, HDF5, npz) yields blocks of rows `{feature: [n, dim] array, "episode_index": [n]}`.
One `Scan` consumes those blocks: exact moments and min/max plus the bounded-memory quantile sketch
(`pipeline.readers.stats`), a capped sample of consecutive state/action rows for the absolute-vs-delta
check, and row/episode counts to compare with what the metadata claims. Memory is one block plus fixed
per-dim counters, whatever the dataset size. The format readers import this module and the dispatcher
(`dataset.py`) imports them, so nothing here imports back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from pipeline.readers.base import DatasetContract
from pipeline.readers.health import HealthScan
from pipeline.readers.sketch_kernel import compiled_for
from pipeline.readers.stats import QUANTILES, FeatureStats, finish_stats, rank_of, reduce_blocks

Blocks = Callable[[], Iterable[Mapping[str, np.ndarray]]]
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
IMAGE_FRAMES = 64  # frames sampled per image feature for the encoding summary (no stage threshold)


@dataclass(frozen=True)
class ScanOptions:
    """What the data pass keeps. The thresholds belong to the caller's config (the contract stage's
    `rank_error` and `dynamics_rows`), so they have no default here."""

    rank_error: float
    dynamics_rows: int
    image_frames: int = IMAGE_FRAMES
    # dataset health in the same pass (`pipeline.readers.health`): > 0 follows every episode; 0: off
    health_episodes: int = 0
    health_gap_factor: float = 1.5  # a timestamp step longer than this x 1/fps is a dropped-frame gap
    # called with each block's row count as the pass reads it (both passes): the caller's progress display
    progress: Callable[[int], None] | None = field(default=None, compare=False)

    @classmethod
    def of(cls, options: ScanOptions | Mapping[str, Any] | Any) -> ScanOptions:
        """From a ScanOptions, a mapping or a config object with these attributes (e.g. a stage config)."""
        if isinstance(options, ScanOptions):
            return options
        get = options.get if isinstance(options, Mapping) else lambda k, d=None: getattr(options, k, d)
        values = {f.name: get(f.name, None) for f in fields(cls)}
        missing = [k for k in ("rank_error", "dynamics_rows") if values[k] is None]
        if missing:
            raise TypeError(f"dataset scan options lack {missing} (the caller's config sets them)")
        return cls(
            rank_error=float(values["rank_error"]),
            dynamics_rows=int(values["dynamics_rows"]),
            image_frames=int(values["image_frames"] if values["image_frames"] is not None else IMAGE_FRAMES),
            health_episodes=int(values["health_episodes"] or 0),
            health_gap_factor=float(values["health_gap_factor"] or 1.5),
            progress=values["progress"],
        )


class Scan:
    """Everything the data itself must tell the reconciliation, gathered while streaming."""

    def __init__(
        self,
        dims: Mapping[str, int],
        pair: tuple[str, str] | None,
        options: ScanOptions,
        health: HealthScan | None = None,
        compiled: bool | None = None,
    ):
        self.dims = dict(dims)
        self.health = health
        self.kernel = None if compiled is None else ("numba" if compiled else "numpy")
        self.pair = pair
        self.options = options
        self.rows = 0
        self.episodes: set[int] = set()
        self._dyn: dict[str, list[np.ndarray]] = {"state": [], "action": [], "episode": []}
        self._dyn_rows = 0
        self.sketches: dict[str, FeatureStats] = {}
        self.merged_health: dict[str, Any] | None = None  # health facts merged from array tasks

    def observe(self, block: Mapping[str, np.ndarray]) -> None:
        """Side channel on pass 1: counts and the capped dynamics sample (cheap, bounded)."""
        n = next((len(v) for k, v in block.items() if k in self.dims), 0)
        self.rows += n
        episode = block.get("episode_index")
        if episode is not None and len(episode):
            episode = np.asarray(episode).reshape(-1)
            starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])  # episodes are runs of rows
            self.episodes.update(episode[starts].tolist())
        cap = self.options.dynamics_rows
        if self.pair and self._dyn_rows < cap and all(k in block for k in self.pair):
            take = min(cap - self._dyn_rows, *(len(block[k]) for k in self.pair))
            state, action = (np.asarray(block[k][:take], dtype=np.float64) for k in self.pair)
            ep = np.asarray(episode[:take]) if episode is not None else np.zeros(take, dtype=np.int64)
            self._dyn["state"].append(state.reshape(take, -1))
            self._dyn["action"].append(action.reshape(take, -1))
            self._dyn["episode"].append(ep)
            self._dyn_rows += take

    def run(self, blocks: Blocks) -> dict[str, dict[str, np.ndarray]]:
        """Both stats passes over `blocks()`: `reduce`, then the stats (pass 2 only where needed)."""
        self.reduce(blocks())
        return self.stats(blocks)

    def reduce(self, blocks: Iterable[Mapping[str, np.ndarray]]) -> None:
        """Pass 1: each block feeds the sketches, the counts, the dynamics sample and (in a worker
        thread, beside the stats reduction of the same block, one block at a time and in order) the
        health facts, whose kernel and hashing release the GIL. An array task runs this on its files."""
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending: list[Future[None]] = []

            def tapped() -> Iterator[Mapping[str, np.ndarray]]:
                for block in blocks:
                    self.observe(block)
                    if self.health is not None:
                        for done in pending:
                            done.result()
                        pending[:] = [pool.submit(self.health.observe, block)]
                    if self.options.progress is not None:
                        self.options.progress(next((len(v) for k, v in block.items() if k in self.dims), 0))
                    yield block
                    del block  # not held while the next block is decoded
                for done in pending:
                    done.result()

            opts, kernel = self.options, self.kernel
            feats = reduce_blocks(tapped(), self.dims, rank_error=opts.rank_error, kernel=kernel)
            self.sketches.update(feats)

    def stats(self, blocks: Blocks) -> dict[str, dict[str, np.ndarray]]:
        """The stats from pass 1's sketches (this scan's or merged array tasks'); `blocks()` re-read
        only for a quantile pass 1 could not pin within the rank error."""

        def counted() -> Iterator[Mapping[str, np.ndarray]]:
            for block in blocks():
                if self.options.progress is not None:
                    self.options.progress(next((len(v) for k, v in block.items() if k in self.dims), 0))
                yield block

        opts = self.options
        return finish_stats(counted, self.sketches, rank_error=opts.rank_error, quantiles=QUANTILES)

    def dynamics(self) -> dict[str, np.ndarray]:
        if not self._dyn["state"]:
            return {}
        return {k: np.concatenate(v) for k, v in self._dyn.items()}


def dynamics_pair(contract: DatasetContract) -> tuple[str, str] | None:
    """The (state, action) feature keys whose consecutive rows feed the absolute-vs-delta check."""
    states = [f for f in contract.features.values() if f.role == "state" and f.dim]
    actions = [f for f in contract.features.values() if f.role == "action" and f.dim]
    if not states or not actions:
        return None
    return states[0].key, actions[0].key


def finish(contract: DatasetContract, blocks: Blocks, options: ScanOptions) -> DatasetContract:
    """Run the scan over the vector features and store what it found on the contract."""
    scan = scan_for(contract, options)
    contract.recomputed = scan.run(blocks) if scan.dims else {}
    return store(contract, scan)


def scan_for(contract: DatasetContract, options: ScanOptions) -> Scan:
    """An empty scan of the contract's vector features (an array task fills it with `reduce`), its
    kernels chosen by the whole dataset's size (every array task of one dataset runs the same ones)."""
    dims = vector_dims(contract)
    rows = _claimed_rows(contract)
    compiled = compiled_for(rows * sum(dims.values()) if rows else None)
    return Scan(dims, dynamics_pair(contract), options, _health(contract, dims, options, compiled), compiled)


def vector_dims(contract: DatasetContract) -> dict[str, int]:
    return {
        k: f.dim
        for k, f in contract.features.items()
        if f.role != "image" and f.dim and k not in INDEX_COLUMNS
    }


def store(contract: DatasetContract, scan: Scan) -> DatasetContract:
    """What a finished scan (one pass, or merged array tasks) found, on the contract."""
    contract.rows = scan.rows
    if scan.rows == 0:  # metadata-only copy: nothing was recomputed, so claim nothing
        contract.recomputed, scan.sketches = {}, {}
    contract.episodes = len(scan.episodes)
    contract.dynamics = scan.dynamics()
    if scan.merged_health is not None:
        contract.health = scan.merged_health
    elif scan.health is not None:
        contract.health = scan.health.facts()
    for key, fs in scan.sketches.items():  # where the shipped quantiles really sit in the data
        shipped = contract.stats.get(key, {})
        contract.shipped_ranks[key] = {
            q: rank_of(fs, shipped[q])
            for q in QUANTILES
            if q in shipped and np.asarray(shipped[q]).size == fs.dim
        }
    return contract


def _claimed_rows(contract: DatasetContract) -> int | None:
    """The rows the metadata claims: it sizes the repeat table and picks the kernels, so a wrong claim
    costs time, never a finding."""
    claimed = contract.claimed.get("total_frames")
    return claimed if isinstance(claimed, int) and not isinstance(claimed, bool) and claimed > 0 else None


def _health(
    contract: DatasetContract, dims: Mapping[str, int], options: ScanOptions, compiled: bool | None
) -> HealthScan | None:
    """The health side channel, following every episode (its facts are a few numbers per episode and dim)."""
    if options.health_episodes <= 0:
        return None
    fps = contract.claimed.get("fps")
    rate = float(fps) if isinstance(fps, (int, float)) else None
    measured = [k for k in dims if contract.features[k].role == "state"]
    rows = _claimed_rows(contract)
    return HealthScan(dims, rate, 1, options.health_gap_factor, measured, rows, compiled)


def image_summary(frames: np.ndarray) -> dict[str, Any]:
    """dtype, value range and per-channel means of a sample of HWC (or CHW) frames."""
    arr = np.asarray(frames)
    channel_axis = -1 if arr.shape[-1] in (1, 3, 4) else (1 if arr.ndim == 4 else 0)
    means = np.moveaxis(arr, channel_axis, -1).reshape(-1, arr.shape[channel_axis]).mean(axis=0)
    return {
        "dtype": str(arr.dtype),
        "shape": list(arr.shape[1:]),
        "min": float(arr.min()),
        "max": float(arr.max()),
        "channel_means": [float(m) for m in means],
        "layout": "HWC" if channel_axis == -1 else "CHW",
        "frames": int(arr.shape[0]),
    }
