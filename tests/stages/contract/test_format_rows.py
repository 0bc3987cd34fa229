"""Rows that need a field a format does not carry by design are `skipped`, naming the format and what
would enable them; where the format does carry it the check runs and can still find a fault. On real
robosuite demos (raw and made robomimic-shaped) and real `.npz` episodes, each checked alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.readers.test_format_carries import LIFT, NPZ, robomimic_copy
from tests.stages.contract.test_clean_corpus import rows_of

RATE = json.dumps({"env_name": "Lift", "type": 1, "env_kwargs": {"control_freq": 20}})


def rows(path: Path) -> dict:
    return {c.id: c for c in rows_of({"dataset": {"path": str(path)}})}


def test_robomimic_time_rows_are_skipped_with_the_control_frequency_as_fps(
    real_data: Path, tmp_path: Path
) -> None:
    found = rows(robomimic_copy(real_data, tmp_path, RATE))
    order = found["contract.health.time.order"]
    assert (order.verdict, order.severity) == ("skipped", "soft")
    assert order.message.startswith("the robomimic HDF5 format carries no per-row timestamps by design")
    assert "control frequency 20 Hz" in order.message and order.evidence["fps"] == 20.0
    assert not [k for k in found if k.startswith("contract.health.time.") and k != order.id]
    lengths = found["contract.health.episodes.lengths"]  # num_samples is a second count
    assert lengths.verdict == "match" and "robomimic HDF5 metadata" in lengths.message


def test_a_num_samples_the_demo_does_not_hold_is_a_mismatch(real_data: Path, tmp_path: Path) -> None:
    lengths = rows(robomimic_copy(real_data, tmp_path, RATE, num_samples=7))[
        "contract.health.episodes.lengths"
    ]
    assert lengths.verdict == "mismatch" and lengths.blocking
    assert lengths.evidence["episodes"] == [0] and lengths.evidence["lengths"][0]["meta"] == 7


def test_raw_robosuite_lengths_are_skipped_saying_what_would_enable_them(real_data: Path) -> None:
    found = rows(real_data / LIFT)
    lengths = found["contract.health.episodes.lengths"]
    assert lengths.verdict == "skipped" and "robosuite HDF5 (raw demos)" in lengths.message
    assert "num_samples would give a second count" in lengths.message
    assert "env_kwargs.control_freq would give the fps" in found["contract.health.time.order"].message


def test_npz_frames_are_skipped_and_a_timestamp_array_turns_the_time_rows_on(
    real_data: Path, tmp_path: Path
) -> None:
    found = rows(real_data / NPZ)
    frames = found["contract.frames.unavailable"]
    assert frames.verdict == "skipped" and "npz episodes" in frames.message and "obs_rgb" in frames.message
    assert found["contract.health.time.order"].verdict == "skipped"
    with np.load(real_data / NPZ / "trajectory.npz") as data:
        arrays = {k: data[k] for k in data.files}
    stamps = np.arange(len(arrays["obs_state"])) / 20.0
    stamps[40:] -= 1.0  # time runs back once: the check runs, and finds it
    (tmp_path / "ep").mkdir()
    np.savez(tmp_path / "ep" / "trajectory.npz", **arrays, timestamp=stamps)
    timed = rows(tmp_path / "ep")
    order = timed["contract.health.time.order"]
    assert order.verdict == "mismatch" and order.blocking and order.evidence["episodes"] == [0]
    fps = timed[
        "contract.health.time.fps"
    ]  # no rate declared anywhere in the format: skipped, not unverifiable
    assert fps.verdict == "skipped" and "declared frame rate" in fps.message
