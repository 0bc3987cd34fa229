"""A tiny LeRobot v3.0 dataset written with pyarrow, so these tests need neither the demo nor downloads."""

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


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("dataset"))


@pytest.fixture(scope="session")
def other_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("other_dataset"), seed=7, scale=3.0)


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
    )
