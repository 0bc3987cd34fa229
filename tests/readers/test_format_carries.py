"""What each dataset format says it carries by design (`readers.carries`), read off real files: raw
robosuite HDF5 demos, the same file made robomimic-shaped (`env_args` with a control frequency, per-demo
`num_samples`, an `obs` group), and real `.npz` episodes with and without a `timestamp` array."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from pipeline.readers import read_dataset
from pipeline.readers.carries import EPISODE_LENGTHS, FPS, FRAMES, TIMESTAMPS
from tests.stages.contract.helpers import OPTIONS

LIFT = "StanfordVL__robosuite/robosuite/models/assets/demonstrations/lift/panda/demo.hdf5"
NPZ = "ch33nchan__hybrid-rl/data/raw/mj_pick_place_phase_boost/episode_desc_000"


def robomimic_copy(real_data: Path, dest: Path, env_args: str | None, num_samples: int | None = 0) -> Path:
    """The real lift demo with robomimic's additions: `data.attrs['env_args']`, each demo's
    `num_samples` (its true length when 0, none when None) and an `obs` group."""
    path = dest / "demo.hdf5"
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(real_data / LIFT, path)
    with h5py.File(path, "a") as handle:
        data = handle["data"]
        if env_args is not None:
            data.attrs["env_args"] = env_args
        for demo in data:
            group = data[demo]
            group.create_dataset("obs/robot0_eef_pos", data=np.asarray(group["states"])[:, :3])
            if num_samples is not None:
                group.attrs["num_samples"] = np.int64(num_samples or group["actions"].shape[0])
    return path


def test_raw_robosuite_demos_carry_no_timestamps_no_listed_lengths_no_rate(real_data: Path) -> None:
    c = read_dataset(real_data / LIFT, OPTIONS)
    assert c.carries.format == "robosuite HDF5 (raw demos)"
    for name in (TIMESTAMPS, EPISODE_LENGTHS, FRAMES, FPS):
        assert name not in c.carries, name
    assert c.claimed["fps"] is None and "episode_lengths" not in c.claimed
    assert "env_kwargs.control_freq would give the fps" in c.carries.enable[TIMESTAMPS]


def test_robomimic_env_args_give_the_fps_and_num_samples_the_lengths(real_data: Path, tmp_path: Path) -> None:
    env_args = json.dumps({"env_name": "Lift", "type": 1, "env_kwargs": {"control_freq": 20}})
    c = read_dataset(robomimic_copy(real_data, tmp_path, env_args), OPTIONS)
    assert (c.kind, c.carries.format) == ("robomimic_hdf5", "robomimic HDF5")
    assert c.claimed["fps"] == 20.0 and FPS in c.carries and EPISODE_LENGTHS in c.carries
    assert TIMESTAMPS not in c.carries
    with h5py.File(real_data / LIFT, "r") as handle:
        assert c.claimed["episode_lengths"] == {0: handle["data/demo_1/actions"].shape[0]}
    assert (
        "control frequency 20 Hz (data.attrs['env_args'] env_kwargs.control_freq)"
        in c.carries.enable[TIMESTAMPS]
    )


@pytest.mark.parametrize(
    "env_args, note",
    [
        ("{not json", "is not JSON"),
        (json.dumps({"env_kwargs": {"control_freq": "fast"}}), "is not a rate in Hz"),
        (json.dumps({"env_kwargs": {"control_freq": -5}}), "is not a rate in Hz"),
    ],
)
def test_a_control_frequency_that_is_not_a_rate_is_noted_and_not_used(
    real_data: Path, tmp_path: Path, env_args: str, note: str
) -> None:
    c = read_dataset(robomimic_copy(real_data, tmp_path, env_args, num_samples=None), OPTIONS)
    assert c.claimed["fps"] is None and FPS not in c.carries and EPISODE_LENGTHS not in c.carries
    assert any(note in n and "env_args" in n for n in c.notes), c.notes


def test_npz_episodes_carry_timestamps_only_where_they_hold_a_timestamp_array(
    real_data: Path, tmp_path: Path
) -> None:
    c = read_dataset(real_data / NPZ, OPTIONS)
    assert c.carries.format == "npz episodes"
    for name in (TIMESTAMPS, EPISODE_LENGTHS, FRAMES, FPS):
        assert name not in c.carries, name
    with np.load(real_data / NPZ / "trajectory.npz") as data:
        arrays = {k: data[k] for k in data.files}
    timed = tmp_path / "timed"
    timed.mkdir()
    np.savez(timed / "trajectory.npz", **arrays, timestamp=np.arange(len(arrays["obs_state"])) / 20.0)
    assert TIMESTAMPS in read_dataset(timed, OPTIONS).carries
