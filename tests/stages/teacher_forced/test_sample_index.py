"""teacher_forced holds only the sampled episodes' rows (issue 35), and its samples, manifest, targets and
error units are those of the whole-dataset read; a layout the per-episode facts cannot describe (an
episode's rows in two places) is read whole and gives the same samples.

The dataset is `benchmarks/make_large_dataset.py`'s v3.0 layout: 60 episodes in 9 data files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from benchmarks.make_large_dataset import Shape, make
from pipeline.stages.teacher_forced import metrics, sample_index, samples
from pipeline.stages.teacher_forced.evaluate import _samples
from pipeline.stages.teacher_forced.samples import Frames

LENGTH = 25
SHAPE = Shape(episodes=60, length=LENGTH, state_dim=3, action_dim=2, cameras=0, episodes_per_file=7)
KEYS = ["action", "observation.state"]


class Config:
    """The fields of TeacherForcedConfig the sample choice reads."""

    sample_manifest = None
    action_key = "action"
    samples = 12
    seed = 5
    episodes: list[int] = []
    subset_column = None


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sample_index") / "ds"
    make(root, SHAPE)
    return root


def whole(root: Path) -> tuple[Frames, np.ndarray, dict]:
    """What the stage chose before issue 35: every row read, then the draw."""
    frames = samples.read_frames(root, KEYS)
    rows = samples.select(frames, Config.samples, Config.seed)
    return frames, rows, samples.manifest(frames, rows, Config.seed, ["all"] * len(rows))


def test_only_the_sampled_episodes_are_held_and_the_choice_is_the_same(dataset: Path, tmp_path: Path) -> None:
    every, rows, manifest = whole(dataset)
    frames, got, labels, checks = _samples(Config(), dataset, KEYS, {}, tmp_path)
    episodes = set(every.episode[rows].tolist())
    assert len(frames) == len(episodes) * LENGTH < len(every)  # the sampled episodes, whole; no other row
    assert samples.manifest(frames, got, Config.seed, labels) == manifest  # rows, hashes, fingerprint
    truth, valid = metrics.targets(frames, got, "action", 6)
    expected = metrics.targets(every, rows, "action", 6)
    np.testing.assert_array_equal(truth, expected[0])
    np.testing.assert_array_equal(valid, expected[1])
    for a, b in zip(every.moments("action"), frames.moments("action"), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12)
    assert checks[0].verdict == "match"
    # a saved manifest reads its own episodes only and still matches
    Config.sample_manifest = str(tmp_path / "saved.json")
    try:
        _samples(Config(), dataset, KEYS, {}, tmp_path)  # writes it (the file did not exist)
        frames, again, _, checks = _samples(Config(), dataset, KEYS, {}, tmp_path)
    finally:
        Config.sample_manifest = None
    assert checks[0].id.endswith("samples.manifest") and checks[0].verdict == "match"
    assert len(frames) == len(episodes) * LENGTH
    np.testing.assert_array_equal(frames.episode[again], every.episode[rows])


def test_an_episode_in_two_places_is_read_whole_with_the_same_choice(dataset: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    shutil.copytree(dataset, root)
    first = sorted((root / "data").rglob("*.parquet"))[0]
    table = pq.read_table(first)
    split = np.r_[0:10, LENGTH : 2 * LENGTH, 10:LENGTH, 2 * LENGTH : table.num_rows]  # episode 1 inside 0
    pq.write_table(table.take(split), first)
    assert sample_index.read_index(root, ["action"]) is None  # episode 0's rows now lie in two runs
    every, rows, manifest = whole(root)
    frames, got, labels, _ = _samples(Config(), root, KEYS, {}, tmp_path)
    assert len(frames) == len(every)
    assert samples.manifest(frames, got, Config.seed, labels) == manifest
