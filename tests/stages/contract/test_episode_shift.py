"""A camera shifted by whole episodes (`frames.episode_shift`): every episode's frames are another
episode's. On the demo's own recordings (MuJoCo-rendered from the recorded states, AV1, LeRobot v3.0;
6 episodes of 120 steps, rendered once for the module) the shift is planted as the demo plants its
faults (`plant_faults`, `episode_shift_camera`); on the synthetic recordings of the alignment rows it is
planted in either LeRobot layout (v2.x files renumbered, v3.0 spans moved by one episode)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pipeline.demo import memo
from pipeline.demo.build import plant_faults
from pipeline.demo.cameras import FRONT, WRIST, render_episodes
from pipeline.demo.dataset import generate_episodes, write_dataset
from pipeline.readers import read_dataset
from pipeline.readers.base import Contract
from pipeline.record.records import Check
from pipeline.stages.contract.alignment import alignment_rows
from pipeline.stages.contract.rows import Sources
from tests.stages.contract.alignment_data import Faults, by_id, sources, write
from tests.stages.contract.helpers import OPTIONS, STAGE_CFG

EPISODES, STEPS, SEED = 6, 120, 0


@pytest.fixture(scope="module")
def recorded() -> list[dict[str, np.ndarray]]:
    """The oracle's episodes through the demo build's own cache (`memo.episodes`: what a rollout of these
    settings gives, kept under their key), rendered through the frames' cache: the MuJoCo rollouts cost
    ~5 s of CPU each session otherwise."""
    episodes = memo.episodes(EPISODES, STEPS, SEED, lambda: generate_episodes(EPISODES, STEPS, SEED))
    for episode, frames in zip(episodes, render_episodes(episodes, 64), strict=True):
        episode.update(frames)
    return episodes


def _demo_rows(root: Path, episodes: list[dict[str, np.ndarray]]) -> dict[str, Check]:
    write_dataset(root, episodes)
    c = read_dataset(root, OPTIONS)
    src = Sources(Contract("A", "contract_card", "base"), Contract("B", "training", "t"), c, STAGE_CFG)
    return by_id(alignment_rows(src))


def test_the_clean_demo_follows_its_own_episodes(recorded: list, tmp_path: Path) -> None:
    found = _demo_rows(tmp_path, recorded)
    assert not [r.message for r in found.values() if r.blocking or r.verdict == "unverifiable"]
    for key in (FRONT, WRIST):
        row = found[f"frames.episode_shift:{key}"]
        assert (row.verdict, row.actual) == ("match", 0), row.message
        offsets = row.evidence["offsets"]
        assert set(offsets) == {"+1", "-1"} and all(o["gain"] < 0 for o in offsets.values()), offsets


@pytest.mark.parametrize("key, other", [(FRONT, WRIST), (WRIST, FRONT)])
def test_a_camera_shifted_by_one_episode_throughout_is_named(
    recorded: list, tmp_path: Path, key: str, other: str
) -> None:
    found = _demo_rows(tmp_path, plant_faults(recorded, {"episode_shift_camera": {key: 1}}))
    row = found[f"frames.episode_shift:{key}"]
    assert (row.verdict, row.severity, row.actual) == ("mismatch", "hard", 1), row.message
    assert f"{key}: the camera's frames are shifted by +1 episode" in row.message
    assert "follow episode e+1's state" in row.message and row.evidence["offsets"]["+1"]["gain"] >= 0.1
    assert [r.id for r in found.values() if r.blocking] == [row.id]  # the cause, and nothing else
    lag = found[f"frames.lag:{key}"]  # its fit against the own state says nothing about timing
    assert (lag.verdict, lag.severity) == ("unverifiable", "soft") and "episode e+1's" in lag.message
    assert found[f"frames.episode_shift:{other}"].verdict == "match"


@pytest.mark.parametrize("version,codec", [("v2.1", "libx264"), ("v3.0", "libsvtav1")])
def test_a_shift_in_either_layout_and_direction_is_named(tmp_path: Path, version: str, codec: str) -> None:
    """v2.1: every episode's video file is another's; v3.0: every span moved by whole episodes. Offsets
    beyond one are tested where `max_episode_shift` reaches them."""
    wider = replace(STAGE_CFG, frames=replace(STAGE_CFG.frames, max_episode_shift=2))
    for shift, cfg in ((1, STAGE_CFG), (-1, STAGE_CFG), (2, wider)):
        root = tmp_path / f"{shift:+d}"
        write(root, version, codec, Faults(shift_all=shift), episodes=6)
        found = by_id(alignment_rows(sources(root, cfg)))
        for key in (FRONT, WRIST):  # the synthetic recordings use the same camera keys
            row = found[f"frames.episode_shift:{key}"]
            assert (row.verdict, row.severity, row.actual) == ("mismatch", "hard", shift), row.message
            assert f"shifted by {shift:+d} episode" in row.message


def test_one_episode_holding_its_neighbours_frames_is_no_whole_camera_shift(tmp_path: Path) -> None:
    write(tmp_path, "v3.0", "libx264", Faults(neighbour=1), episodes=6)
    found = by_id(alignment_rows(sources(tmp_path)))
    assert found[f"frames.episode_frames:{FRONT}"].verdict == "mismatch"
    assert found[f"frames.episode_shift:{FRONT}"].verdict == "match"


def test_a_negative_max_episode_shift_is_refused_naming_its_key() -> None:
    from pipeline.errors import ConfigError
    from pipeline.stages.config import typed
    from pipeline.stages.contract.config import ContractConfig

    with pytest.raises(ConfigError) as info:
        typed(ContractConfig, {"frames": {"max_episode_shift": -1}}, "stages.contract")
    assert info.value.key == "stages.contract.frames.max_episode_shift" and "got -1" in str(info.value)
