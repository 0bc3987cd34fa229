"""Single episodes' rows through the per-episode metadata (issue 35): the frame sampler reads the files
of the episodes it samples, and within them only the row groups that can hold them.

The dataset is `benchmarks/make_large_dataset.py`'s v3.0 layout (40 episodes in 6 data files, one
camera); the data files holding no sampled episode are overwritten with garbage, so any read of the
whole dataset fails, and the frames, timestamps and rows decoded are set against a pristine copy."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.make_large_dataset import Shape, make
from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.contract.frames import _episodes

LENGTH = 30
SHAPE = Shape(episodes=40, length=LENGTH, state_dim=3, action_dim=2, cameras=1, episodes_per_file=7)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("episode_rows") / "ds"
    make(root, SHAPE)
    return root


def sampled(reader: FrameReader) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """What the contract's frame sampler reads: each sampled episode's timestamps and 8 frames."""
    cfg = ContractConfig().frames
    key = reader.data.video_keys()[0]
    out = {}
    for ep in _episodes(reader, cfg.episodes):
        ts = reader.timestamps(ep)
        idx = sorted({*np.linspace(0, ts.size - 1, min(cfg.per_episode, ts.size)).round().astype(int)})
        out[ep] = (ts, reader.frames(key, ep, idx))
    return out


def garbage_elsewhere(root: Path, keep: set[int]) -> int:
    """Overwrite every data file holding none of `keep` (episode e lies in file e // 7); their count."""
    spoiled = 0
    for path in sorted((root / "data").rglob("*.parquet")):
        number = int(path.stem.split("-")[1])
        if not any(e // SHAPE.episodes_per_file == number for e in keep):
            path.write_bytes(b"PAR1 not a parquet file" * 40)
            spoiled += 1
    return spoiled


def test_sampler_reads_only_the_sampled_episodes_files(pristine: Path, tmp_path: Path) -> None:
    whole = LeRobotData(pristine).frames(["episode_index", "timestamp"])
    expected = sampled(FrameReader(LeRobotData(pristine)))
    for ep, (ts, _) in expected.items():  # the same timestamps as the whole-dataset read
        np.testing.assert_array_equal(ts, whole["timestamp"][whole["episode_index"] == ep].astype(np.float64))
    root = tmp_path / "ds"
    shutil.copytree(pristine, root)
    assert garbage_elsewhere(root, set(expected)) >= 2
    with pytest.raises(InputError, match="not a readable parquet"):
        LeRobotData(root).frames(["episode_index", "timestamp"])  # a whole read cannot pass
    reader = FrameReader(LeRobotData(root))
    got = sampled(reader)
    assert list(got) == list(expected)
    for ep, (ts, frames) in expected.items():
        np.testing.assert_array_equal(got[ep][0], ts)
        np.testing.assert_array_equal(got[ep][1], frames)
    files = {ep // SHAPE.episodes_per_file for ep in expected}
    assert reader.rows.decoded <= len(files) * SHAPE.episodes_per_file * LENGTH


def test_row_groups_the_footer_rules_out_are_not_decoded(tmp_path: Path) -> None:
    make(tmp_path / "ds", Shape(**{**SHAPE.__dict__, "episodes": 14, "row_group": LENGTH}))
    reader = FrameReader(LeRobotData(tmp_path / "ds"))
    for ep in (0, 9, 13):
        assert reader.timestamps(ep).size == LENGTH
    assert reader.rows.decoded == 3 * LENGTH  # one row group per episode: exactly its rows
    cols = reader.rows.arrays(9, ["observation.state", "frame_index"])
    assert cols["observation.state"].shape == (LENGTH, 3)
    np.testing.assert_array_equal(cols["frame_index"], np.arange(LENGTH))
    with pytest.raises(InputError, match="no rows for episode 99"):
        reader.timestamps(99)
