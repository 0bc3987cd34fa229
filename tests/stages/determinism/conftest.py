"""A tiny LeRobot v3.0 dataset written with pyarrow, so these tests need neither the demo nor downloads
(and a copy with the demo's two cameras as real AV1 video, written by the demo's own encoder)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

STATE_DIM, ACTION_DIM, FRAMES = 4, 2, 96


def write_dataset(root: Path, seed: int = 0, scale: float = 1.0) -> Path:
    """meta/info.json, meta/stats.json and one data parquet; `scale` changes the stats (another dataset)."""
    rng = np.random.default_rng(seed)
    state = (rng.normal(size=(FRAMES, STATE_DIM)) * scale).astype(np.float32)
    noise = rng.normal(scale=0.1, size=(FRAMES, ACTION_DIM))
    action = (state[:, :ACTION_DIM] * 0.5 + noise).astype(np.float32)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    (root / "data" / "chunk-000").mkdir(parents=True, exist_ok=True)
    info = {
        "codebase_version": "v3.0",
        "fps": 10,
        "total_frames": FRAMES,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "features": {
            "observation.state": {"dtype": "float32", "shape": [STATE_DIM]},
            "action": {"dtype": "float32", "shape": [ACTION_DIM]},
            "episode_index": {"dtype": "int64", "shape": [1]},
            "frame_index": {"dtype": "int64", "shape": [1]},
        },
    }
    (root / "meta" / "info.json").write_text(json.dumps(info))
    stats = {name: _stats(values) for name, values in (("observation.state", state), ("action", action))}
    (root / "meta" / "stats.json").write_text(json.dumps(stats))
    table = pa.table(
        {
            "observation.state": state.tolist(),
            "action": action.tolist(),
            "episode_index": np.repeat(np.arange(FRAMES // 24), 24),
            "frame_index": np.tile(np.arange(24), FRAMES // 24),
            "index": np.arange(FRAMES),
        }
    )
    pq.write_table(table, root / "data" / "chunk-000" / "file-000.parquet")
    return root


def _stats(values: np.ndarray) -> dict[str, list[float]]:
    return {
        "mean": values.mean(0).tolist(),
        "std": values.std(0).tolist(),
        "min": values.min(0).tolist(),
        "max": values.max(0).tolist(),
        "q01": np.quantile(values, 0.01, axis=0).tolist(),
        "q99": np.quantile(values, 0.99, axis=0).tolist(),
        "count": [len(values)],
    }


def add_cameras(root: Path, side: int = 32) -> Path:
    """The demo's two camera keys as AV1 mp4s in the v3.0 layout (`pipeline.demo.videos.write_cameras`,
    what the demo build uses): smooth frames that move per frame, so the encoders see real pixels;
    info.json features, meta/episodes video columns and per-channel image stats added."""
    from pipeline.demo.cameras import CAMERAS
    from pipeline.demo.videos import write_cameras

    y, x = np.mgrid[0:side, 0:side].astype(np.float64)
    episodes = FRAMES // 24
    cameras = []
    for e in range(episodes):
        frames = {}
        for c, key in enumerate(CAMERAS):
            pics = [
                np.stack(
                    [
                        128 + 90 * np.sin((x + 3 * i + c) / 6),
                        128 + 90 * np.cos((y - 2 * i) / 8),
                        np.full_like(x, 40 + 8 * e + 60 * c),
                    ],
                    -1,
                )
                for i in range(24)
            ]
            frames[key] = np.clip(np.stack(pics), 0, 255).astype(np.uint8)
        cameras.append(frames)
    features, columns, stats = write_cameras(root, cameras, fps=10)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["features"].update(features)
    info["video_path"] = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    (root / "meta" / "info.json").write_text(json.dumps(info))
    shipped = json.loads((root / "meta" / "stats.json").read_text())
    shipped.update({k: {s: np.asarray(v).tolist() for s, v in block.items()} for k, block in stats.items()})
    (root / "meta" / "stats.json").write_text(json.dumps(shipped))
    data = root / "data" / "chunk-000" / "file-000.parquet"
    rows = pq.read_table(data)
    timestamps = (np.asarray(rows.column("frame_index")) / 10.0).astype(np.float32)
    pq.write_table(rows.append_column("timestamp", pa.array(timestamps)), data)
    (root / "meta" / "episodes").mkdir(exist_ok=True)
    table = {"episode_index": np.arange(episodes), "length": np.full(episodes, 24), **columns}
    pq.write_table(pa.table(table), root / "meta" / "episodes" / "file-000.parquet")
    return root


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("dataset"))


@pytest.fixture(scope="session")
def other_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("other_dataset"), seed=7, scale=3.0)


@pytest.fixture(scope="session")
def camera_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return add_cameras(write_dataset(tmp_path_factory.mktemp("camera_dataset")))


@pytest.fixture(scope="session")
def trained_cameras(tmp_path_factory: pytest.TempPathFactory, camera_dataset: Path) -> dict[str, Path]:
    """Reference-trainer runs on the camera dataset: a policy with one encoder per camera."""
    from tests.stages.determinism.helpers import reference_runs

    # twins only: the planted faults on a camera policy are the demo=faulty stage test's (test_stage.py)
    return reference_runs(tmp_path_factory.mktemp("camera_runs"), camera_dataset, {"a": (), "b": ()})


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory, tiny_dataset: Path) -> dict[str, Path]:
    """Output folders of real reference-trainer runs shared by the compare and reload tests."""
    from tests.stages.determinism.helpers import reference_runs

    return reference_runs(
        tmp_path_factory.mktemp("runs"),
        tiny_dataset,
        {
            "a": (),
            "b": (),
            "control": ("--seed", "1"),
            "faulty": ("--fault", "unseeded_shuffle"),
            "clock": ("--fault", "clock_seed"),
            "with_stats": ("--save-normalization-stats", "true"),
        },
        one_process=("control", "faulty", "clock", "with_stats"),  # compared with a's stream or reloaded
    )
