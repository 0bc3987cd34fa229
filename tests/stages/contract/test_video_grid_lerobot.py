"""The video-grid row against lerobot 0.4.4's own loader: a small v3.0 dataset with one camera
(`benchmarks/make_large_dataset.py`, frames at k / fps), two of its episodes re-stamped with a host's clock
(starting 0.05-0.11 s in, steps of 0.049-0.352 s). The gate names those two episodes, with and without
the video files; lerobot's `LeRobotDataset` refuses a row of each of them (`FrameTimestampError`, the
query further than `tolerance_s` from every frame) and loads every row of the others. The loader's half
runs only where `lerobot` is importable (scripts/test_lerobot.sh)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from benchmarks.make_large_dataset import Shape, make
from pipeline.stages.contract import load_sources
from pipeline.stages.contract.health import health_rows
from pipeline.stages.contract.rows import Sources
from tests.stages.contract.helpers import STAGE_CFG
from tests.trainers.helpers import LEROBOT_ONLY

SHAPE = Shape(episodes=4, length=24, state_dim=3, action_dim=3, cameras=1, size=16, tasks=1)
STAMPED = [1, 2]  # the episodes whose rows carry the host's clock


def host_clock(root: Path) -> None:
    """Rewrite the data file's `timestamp` of the STAMPED episodes (float32, as lerobot stores it)."""
    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    stamps = table["timestamp"].to_numpy().copy()
    episodes = table["episode_index"].to_numpy()
    rng = np.random.default_rng(0)
    for e in STAMPED:
        rows = np.flatnonzero(episodes == e)
        steps = rng.uniform(0.049, 0.352, len(rows) - 1)
        stamps[rows] = rng.uniform(0.05, 0.11) + np.r_[0.0, np.cumsum(steps)]
    i = table.schema.get_field_index("timestamp")
    pq.write_table(table.set_column(i, "timestamp", pa.array(stamps.astype(np.float32))), path)


def grid_row(root: Path):
    a, b, c, _ = load_sources(OmegaConf.create({"dataset": {"path": str(root)}}), STAGE_CFG)
    rows = {ch.id: ch for ch in health_rows(Sources(a, b, c, STAGE_CFG))}
    return rows["contract.health.time.video_grid"]


def refused_by_lerobot(root: Path) -> set[int]:
    """The episodes of which lerobot's loader refuses at least one row (it decodes every row's frame)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.datasets.video_utils import FrameTimestampError

    dataset = LeRobotDataset("local/host_clock", root=root, video_backend="pyav")
    refused = set()
    for idx in range(len(dataset)):
        episode = int(dataset.hf_dataset[idx]["episode_index"])
        if episode in refused:
            continue
        try:
            dataset[idx]
        except FrameTimestampError:
            refused.add(episode)
    return refused


@pytest.fixture(scope="module")
def stamped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grid") / "local" / "host_clock"
    make(root, SHAPE)
    host_clock(root)
    return root


@LEROBOT_ONLY[0]
@LEROBOT_ONLY[1]
def test_the_gate_names_the_episodes_lerobots_loader_refuses(stamped: Path) -> None:
    row = grid_row(stamped)
    assert (row.verdict, row.severity) == ("mismatch", "hard"), row.message
    assert row.evidence["episodes"] == STAMPED and row.evidence["against"] == "files"
    assert refused_by_lerobot(stamped) == set(STAMPED)


def test_without_the_videos_the_grid_names_the_same_episodes(stamped: Path, tmp_path: Path) -> None:
    root = tmp_path / "no_videos"
    shutil.copytree(stamped, root, ignore=shutil.ignore_patterns("*.mp4"))
    row = grid_row(root)
    assert (row.verdict, row.severity) == ("mismatch", "hard"), row.message
    assert row.evidence["episodes"] == STAMPED and row.evidence["against"] == "grid"
    assert "the video grid k / fps" in row.message
