"""The alignment rows hold only the sampled episodes' state rows and their neighbours' (issue 35), with
the same steps as the whole-dataset read gave them (the state's spread over every row streamed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.make_large_dataset import Shape, make
from pipeline.readers.frames import FrameReader
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.stages.contract.alignment import _states, sampled_episodes

LENGTH = 20


def test_states_of_the_sampled_episodes_only(tmp_path: Path) -> None:
    make(tmp_path / "ds", Shape(episodes=40, length=LENGTH, state_dim=3, action_dim=2, episodes_per_file=7))
    reader = FrameReader(LeRobotData(tmp_path / "ds"))
    episodes = sampled_episodes(reader, 4)  # 0, 13, 26, 39
    states = _states(reader, ("observation.state",), episodes)
    neighbours = {e + d for e in episodes for d in (-1, 0, 1) if 0 <= e + d < 40}
    assert len(states.episode) == len(neighbours) * LENGTH < 40 * LENGTH
    whole = reader.data.frames(["observation.state", "episode_index"], dtype=np.float64)
    state = whole["observation.state"]
    np.testing.assert_allclose(states.scale, state.std(axis=0), rtol=1e-12)
    for e in sorted(neighbours):
        mine = state[whole["episode_index"] == e]
        np.testing.assert_array_equal(states.state[states.episode == e], mine)
    assert not states.has(40) and states.has(12)
