"""A LeRobot v3.0 dataset of N episodes, written fast, for the scale benchmarks (issue 35).

    python benchmarks/make_large_dataset.py --episodes N --out DIR [--length 50] [--state-dim 14]
        [--action-dim 14] [--cameras 1] [--size 32] [--episodes-per-file 1000]
        [--episodes-per-video 1000] [--fps 30] [--tasks 4] [--row-group 0] [--seed 0]

Why a generator and not a real dataset: the cost curve needs the same dataset shape at 1k, 10k and
50k episodes, on a disk of tens of GB. What makes it fast: vectors are random walks drawn in one numpy
call per data file; every episode shows the same short clip per camera (a colour per camera, a
gradient that moves with the frame index), so a video file's frames depend only on how many episodes
it holds, and one encoded file (libx264, ultrafast) is copied, not re-encoded, for every file of that
size; the per-episode image stats are the clip's, computed once.

What is correct about it, as LeRobot 0.4.4 writes it: `meta/info.json` (features, totals, paths),
`data/chunk-*/file-*.parquet` (fixed-size-list vectors, `timestamp`, `frame_index`, `episode_index`,
`index`, `task_index`), `videos/<camera>/chunk-*/file-*.mp4` with each episode at its own
`from_timestamp`/`to_timestamp`, `meta/episodes/chunk-*/file-*.parquet` (one per data file: length,
tasks, data and video locations, dataset index span, `stats/<feature>/<stat>` per episode),
`meta/tasks.parquet` and `meta/stats.json` aggregated from the per-episode stats exactly as
`lerobot.datasets.compute_stats.aggregate_stats` does (count-weighted means and variances, min of
mins, max of maxes, count-weighted quantiles). One difference, named: an episode's quantiles here are
`np.quantile`'s, LeRobot's come from a 5000-bin histogram between the episode's min and max (the two
agree within one bin, 1/5000 of the episode's range).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.demo.videos import write_mp4

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
INDEX = ("timestamp", "frame_index", "episode_index", "index", "task_index")
CHUNKS = 1000  # files per chunk folder (LeRobot's DEFAULT_CHUNK_SIZE)
CODEC = "libx264"


@dataclass(frozen=True)
class Shape:
    """Every size of the generated dataset (each a command-line option)."""

    episodes: int
    length: int = 50
    state_dim: int = 14
    action_dim: int = 14
    cameras: int = 1
    size: int = 32
    episodes_per_file: int = 1000
    episodes_per_video: int = 1000
    fps: int = 30
    tasks: int = 4
    row_group: int = 0  # rows per parquet row group; 0: one per data file
    seed: int = 0

    def check(self) -> None:
        for name, value in asdict(self).items():
            low = 0 if name in ("cameras", "row_group", "seed") else 1
            if not isinstance(value, int) or value < low:
                raise SystemExit(f"--{name.replace('_', '-')} must be an integer >= {low}, got {value!r}")
        if self.size % 2:
            raise SystemExit(f"--size must be even (yuv420p), got {self.size}")

    @property
    def camera_keys(self) -> list[str]:
        return [f"observation.images.cam{i}" for i in range(self.cameras)]


def _where(index: int) -> tuple[int, int]:
    return index // CHUNKS, index % CHUNKS


def _rel(kind: str, index: int, key: str = "") -> str:
    chunk, file = _where(index)
    folder = {"data": "data", "meta": "meta/episodes", "video": f"videos/{key}"}[kind]
    ext = "mp4" if kind == "video" else "parquet"
    return f"{folder}/chunk-{chunk:03d}/file-{file:03d}.{ext}"


def _fixed(arr: np.ndarray) -> pa.FixedSizeListArray:
    arr = np.ascontiguousarray(arr)
    return pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), int(np.prod(arr.shape[1:])))


def episode_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Per-episode stats of [E, L, D] values, each [E, D]: LeRobot's `get_feature_stats` over axis 0."""
    v = values.astype(np.float64)
    out = {"min": v.min(1), "max": v.max(1), "mean": v.mean(1), "std": v.std(1)}
    qs = np.quantile(v, list(QUANTILES.values()), axis=1)
    out.update({k: qs[i] for i, k in enumerate(QUANTILES)})
    out["count"] = np.full((values.shape[0], 1), values.shape[1], np.int64)
    return out


class Aggregate:
    """LeRobot's `aggregate_feature_stats`, fed file by file: sums kept, so memory is per feature."""

    def __init__(self) -> None:
        self.n = 0.0
        self.sums: dict[str, np.ndarray] = {}
        self.lo: np.ndarray | None = None
        self.hi: np.ndarray | None = None
        self.means: list[np.ndarray] = []
        self.vars: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []

    def add(self, stats: dict[str, np.ndarray]) -> None:
        counts = stats["count"].astype(np.float64).reshape(-1, *([1] * (stats["mean"].ndim - 1)))
        self.n += float(counts.sum())
        for k in ("mean", *QUANTILES):
            if k in stats:
                self.sums[k] = self.sums.get(k, 0.0) + (stats[k] * counts).sum(0)
        self.means.append(stats["mean"])
        self.vars.append(stats["std"] ** 2)
        self.counts.append(counts)
        lo, hi = stats["min"].min(0), stats["max"].max(0)
        self.lo = lo if self.lo is None else np.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else np.maximum(self.hi, hi)

    def result(self) -> dict[str, Any]:
        mean = self.sums["mean"] / self.n
        var = sum(
            ((v + (m - mean) ** 2) * c).sum(0)
            for m, v, c in zip(self.means, self.vars, self.counts, strict=True)
        )
        out = {"min": self.lo, "max": self.hi, "mean": mean, "std": np.sqrt(var / self.n)}
        out.update({k: self.sums[k] / self.n for k in QUANTILES if k in self.sums})
        out["count"] = np.array([int(self.n)])
        return {k: np.asarray(v).tolist() for k, v in out.items()}


def clip(shape: Shape, camera: int) -> np.ndarray:
    """The frames every episode shows on this camera: RGB uint8 [L, H, W, 3], cheap to encode."""
    s, n = shape.size, shape.length
    base = np.array([(60 + 70 * camera) % 256, (200 - 50 * camera) % 256, (40 + 90 * camera) % 256])
    ramp = np.add.outer(np.arange(s), np.arange(s))[None, :, :, None] * 2
    move = (np.arange(n) * 3)[:, None, None, None]
    return ((base + ramp + move) % 256).astype(np.uint8)


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's per-episode image stats (its `sample_indices` frames; per channel in 0-1, (3, 1, 1))."""
    n = len(frames)
    count = min(n, max(100, min(int(n**0.75), 10_000)))
    picked = frames[np.round(np.linspace(0, n - 1, count)).astype(int)].astype(np.float64) / 255.0
    chw = np.moveaxis(picked, -1, 1)
    out = {"min": chw.min((0, 2, 3)), "max": chw.max((0, 2, 3)), "mean": chw.mean((0, 2, 3))}
    out["std"] = chw.std((0, 2, 3))
    qs = np.quantile(np.moveaxis(chw, 1, 0).reshape(3, -1), list(QUANTILES.values()), axis=1)
    out.update({k: qs[i] for i, k in enumerate(QUANTILES)})
    out = {k: v.reshape(3, 1, 1) for k, v in out.items()}
    out["count"] = np.array([count], np.int64)
    return out


def encode(path: Path, frames: np.ndarray, fps: int) -> None:
    """An mp4 of RGB frames, libx264 ultrafast, one keyframe a second so a seek decodes at most `fps`
    frames (the demo's writer with another encoder: quick to encode, tiny)."""
    write_mp4(path, frames, fps, CODEC, {"preset": "ultrafast", "g": str(fps)})


def vectors(shape: Shape, rng: np.random.Generator, n_eps: int) -> dict[str, np.ndarray]:
    """[E, L, D] state (a random walk from a per-episode home, a binary gripper last) and action (the
    next state plus noise: absolute targets)."""
    e, n, d = n_eps, shape.length, shape.state_dim
    home = rng.normal(0, 0.3, (e, 1, d)).astype(np.float32)
    state = home + np.cumsum(rng.normal(0, 0.01, (e, n, d)).astype(np.float32), axis=1)
    state[..., -1] = rng.random((e, n)) > 0.5
    nxt = np.concatenate([state[:, 1:], state[:, -1:]], axis=1)
    a = shape.action_dim
    action = np.resize(nxt.transpose(2, 0, 1), (a, e, n)).transpose(1, 2, 0)
    action = action + rng.normal(0, 0.005, action.shape).astype(np.float32)
    return {"observation.state": state, "action": action.astype(np.float32)}


def write_data(
    root: Path, shape: Shape, number: int, first: int, n_eps: int, rng: np.random.Generator
) -> dict:
    """One data file of `n_eps` episodes from episode `first`; returns its per-episode stats."""
    vec = vectors(shape, rng, n_eps)
    n, rows = shape.length, n_eps * shape.length
    episode = np.repeat(np.arange(first, first + n_eps, dtype=np.int64), n)
    frame = np.tile(np.arange(n, dtype=np.int64), n_eps)
    index = np.arange(first * n, first * n + rows, dtype=np.int64)
    cols: dict[str, np.ndarray] = {
        "timestamp": (frame / shape.fps).astype(np.float32),
        "frame_index": frame,
        "episode_index": episode,
        "index": index,
        "task_index": episode % shape.tasks,
    }
    table = pa.table({**{k: _fixed(v.reshape(rows, -1)) for k, v in vec.items()}, **cols})
    path = root / _rel("data", number)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=shape.row_group or rows)
    stats = {k: episode_stats(v) for k, v in vec.items()}
    stats.update({k: episode_stats(v.reshape(n_eps, n, 1).astype(np.float64)) for k, v in cols.items()})
    return stats


def write_videos(
    root: Path, shape: Shape, clips: list[np.ndarray], cache: dict[tuple[int, int], Path]
) -> None:
    """Every video file: one encode per (camera, episodes in the file), then copies of its bytes."""
    per = shape.episodes_per_video
    for number, first in enumerate(range(0, shape.episodes, per)):
        n_eps = min(per, shape.episodes - first)
        for cam, key in enumerate(shape.camera_keys):
            path = root / _rel("video", number, key)
            made = cache.get((cam, n_eps))
            if made is None:
                encode(path, np.tile(clips[cam], (n_eps, 1, 1, 1)), shape.fps)
                cache[(cam, n_eps)] = path
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(made, path)


def episodes_table(
    shape: Shape, number: int, first: int, n_eps: int, stats: dict[str, dict[str, np.ndarray]]
) -> pa.Table:
    """meta/episodes rows of one data file, LeRobot v3.0's columns."""
    eps = np.arange(first, first + n_eps, dtype=np.int64)
    n = shape.length
    tasks = [[f"task {int(e % shape.tasks)}"] for e in eps]
    cols: dict[str, Any] = {
        "episode_index": eps,
        "tasks": pa.array(tasks, pa.list_(pa.string())),
        "length": np.full(n_eps, n, np.int64),
        "data/chunk_index": np.full(n_eps, _where(number)[0], np.int64),
        "data/file_index": np.full(n_eps, _where(number)[1], np.int64),
        "dataset_from_index": eps * n,
        "dataset_to_index": (eps + 1) * n,
    }
    video_file = eps // shape.episodes_per_video
    start = (eps % shape.episodes_per_video) * n / shape.fps
    for key in shape.camera_keys:
        cols[f"videos/{key}/chunk_index"] = video_file // CHUNKS
        cols[f"videos/{key}/file_index"] = video_file % CHUNKS
        cols[f"videos/{key}/from_timestamp"] = start
        cols[f"videos/{key}/to_timestamp"] = start + n / shape.fps
    for feature, block in stats.items():
        for stat, values in block.items():
            arr = values.reshape(n_eps, -1) if values.shape[0] == n_eps else np.tile(values, (n_eps, 1))
            cols[f"stats/{feature}/{stat}"] = _fixed(arr)
    cols["meta/episodes/chunk_index"] = np.full(n_eps, _where(number)[0], np.int64)
    cols["meta/episodes/file_index"] = np.full(n_eps, _where(number)[1], np.int64)
    return pa.table(cols)


def info(shape: Shape) -> dict[str, Any]:
    features: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": [shape.state_dim], "names": None},
        "action": {"dtype": "float32", "shape": [shape.action_dim], "names": None},
    }
    for key in shape.camera_keys:
        video = {"video.height": shape.size, "video.width": shape.size, "video.codec": "h264"}
        video.update({"video.pix_fmt": "yuv420p", "video.is_depth_map": False, "video.fps": shape.fps})
        video.update({"video.channels": 3, "has_audio": False})
        names = ["height", "width", "channels"]
        features[key] = {
            "dtype": "video",
            "shape": [shape.size, shape.size, 3],
            "names": names,
            "info": video,
        }
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for key in INDEX[1:]:
        features[key] = {"dtype": "int64", "shape": [1], "names": None}
    return {
        "codebase_version": "v3.0",
        "robot_type": "scale_benchmark",
        "total_episodes": shape.episodes,
        "total_frames": shape.episodes * shape.length,
        "total_tasks": shape.tasks,
        "chunks_size": CHUNKS,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 500,
        "fps": shape.fps,
        "splits": {"train": f"0:{shape.episodes}"},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
        if shape.cameras
        else None,
        "features": features,
    }


def write_tasks(root: Path, shape: Shape) -> None:
    """meta/tasks.parquet as LeRobot writes it: the task text is the pandas index."""
    column = {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64"}
    index = {
        "name": None,
        "field_name": "__index_level_0__",
        "pandas_type": "unicode",
        "numpy_type": "object",
    }
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [],
        "columns": [{**column, "metadata": None}, {**index, "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    table = pa.table(
        {
            "task_index": pa.array(np.arange(shape.tasks, dtype=np.int64)),
            "__index_level_0__": pa.array([f"task {i}" for i in range(shape.tasks)]),
        }
    )
    pq.write_table(
        table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)}), root / "meta/tasks.parquet"
    )


def make(root: Path, shape: Shape) -> dict[str, Any]:
    """Write the whole dataset under `root` (which must not hold one yet); returns what was written."""
    shape.check()
    if (root / "meta/info.json").exists():
        raise SystemExit(f"{root}: already holds a dataset (meta/info.json); pick an empty --out")
    started = time.perf_counter()
    (root / "meta").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(shape.seed)
    clips = [clip(shape, c) for c in range(shape.cameras)]
    images = {key: image_stats(clips[c]) for c, key in enumerate(shape.camera_keys)}
    totals: dict[str, Aggregate] = {}
    per = shape.episodes_per_file
    for number, first in enumerate(range(0, shape.episodes, per)):
        n_eps = min(per, shape.episodes - first)
        stats = write_data(root, shape, number, first, n_eps, rng)
        stats.update(
            {k: {s: np.broadcast_to(v, (n_eps, *v.shape)) for s, v in b.items()} for k, b in images.items()}
        )
        for key, block in stats.items():
            totals.setdefault(key, Aggregate()).add(block)
        path = root / _rel("meta", number)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(episodes_table(shape, number, first, n_eps, stats), path)
    vectors_s = time.perf_counter() - started
    write_videos(root, shape, clips, {})
    write_tasks(root, shape)
    (root / "meta/stats.json").write_text(json.dumps({k: a.result() for k, a in totals.items()}, indent=2))
    (root / "meta/info.json").write_text(json.dumps(info(shape), indent=4))
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return {
        "out": str(root),
        **asdict(shape),
        "rows": shape.episodes * shape.length,
        "bytes": size,
        "data_s": round(vectors_s, 2),
        "total_s": round(time.perf_counter() - started, 2),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    for name, default in asdict(Shape(episodes=0)).items():
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            default=None if name == "episodes" else default,
            required=name == "episodes",
        )
    args = vars(parser.parse_args(argv))
    root = args.pop("out")
    print(json.dumps(make(root, Shape(**args))))


if __name__ == "__main__":
    main()
