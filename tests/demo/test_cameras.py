"""The demo's cameras: real MuJoCo renders from recorded states, cached by those states, written as AV1
in the LeRobot v3.0 layout and decoded back by the frame reader within a bound."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from pipeline.demo import cameras, videos
from pipeline.demo.dataset import camera_frames, generate_episodes, write_dataset
from pipeline.readers import LeRobotData

pytestmark = pytest.mark.render


@pytest.fixture(scope="module")
def episode() -> dict[str, np.ndarray]:
    return generate_episodes(1, 12, seed=4)[0]


def test_frames_are_rendered_once_then_read_from_the_cache(episode, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PREFLIGHT_CACHE", str(tmp_path / "cache"))
    first = cameras.render_episodes([episode], 32)[0]
    files = list((tmp_path / "cache" / "demo-cameras").glob("*.npz"))
    assert len(files) == 1
    assert set(first) == set(cameras.CAMERAS) and first[cameras.FRONT].shape == (12, 32, 32, 3)
    again = cameras.render_episodes([episode], 32)[0]  # from the cache file
    for key in cameras.CAMERAS:
        np.testing.assert_array_equal(first[key], again[key])
    moved = {**episode, "qpos": episode["qpos"] + 0.05}  # other states: another key, rendered anew
    other = cameras.render_episodes([moved], 32)[0]
    assert len(list(files[0].parent.glob("*.npz"))) == 2
    assert not np.array_equal(other[cameras.WRIST], first[cameras.WRIST])


def test_the_two_cameras_see_differently_and_the_wrist_one_moves_more(episode, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PREFLIGHT_CACHE", str(tmp_path / "cache"))
    frames = cameras.render_episodes([episode], 32)[0]
    front, wrist = (frames[k].astype(np.float64) for k in cameras.CAMERAS)
    assert np.abs(front - wrist).mean() > 5  # two views, not one camera twice
    motion = {k: np.abs(np.diff(frames[k].astype(np.float64), axis=0)).mean() for k in cameras.CAMERAS}
    assert motion[cameras.WRIST] > motion[cameras.FRONT]  # the whole wrist view shifts with the arm


def test_written_videos_decode_to_the_rendered_frames_within_a_bound(episode, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PREFLIGHT_CACHE", str(tmp_path / "cache"))
    rendered = cameras.render_episodes([episode, episode], 64)
    episodes = [{**episode, **frames} for frames in rendered]
    root = write_dataset(tmp_path / "ds", episodes)
    data = LeRobotData(root)
    assert data.video_keys() == list(cameras.CAMERAS)
    decoded = camera_frames(root, cameras.CAMERAS)
    stats = data.stats()
    for key in cameras.CAMERAS:
        written = np.concatenate([f[key] for f in rendered])
        assert decoded[key].shape == written.shape == (24, 64, 64, 3)
        error = np.abs(decoded[key].astype(np.float64) - written).mean()
        assert error < 4.0, f"{key}: AV1 mean abs error {error:.2f} levels"  # lossy codec, crf 30
        assert stats[key]["mean"].shape == (3, 1, 1)
        np.testing.assert_allclose(
            stats[key]["mean"].reshape(3), written.reshape(-1, 3).mean(0) / 255, atol=1e-6
        )
        assert data.info["features"][key]["info"]["video.codec"] == "av1"


ENCODE_HERE = (
    "import os, sys, numpy as np\n"
    "from pathlib import Path\n"
    "from pipeline.demo.videos import _encode_here\n"
    "import pipeline.demo.videos as v\n"
    "v.restore_scheduling = lambda: False\n"  # keep what the encoder did, to look at it
    "_encode_here(Path(sys.argv[1]), np.zeros((4, 64, 64, 3), np.uint8), 10)\n"
    "print(os.sched_getscheduler(0))\n"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="the encoder goes real-time only when run as root")
def test_the_demo_encoder_cannot_leave_its_caller_real_time(tmp_path) -> None:
    """libsvtav1 run as root moves its caller to SCHED_FIFO 99 (and children inherit it); the demo
    encodes in a child that lacks CAP_SYS_NICE, and `restore_scheduling` undoes it where it happened."""
    run = [sys.executable, "-c", ENCODE_HERE, str(tmp_path / "a.mp4")]
    plain = subprocess.run(run, capture_output=True, text=True, check=True).stdout.split()[-1]
    if int(plain) == os.SCHED_OTHER:
        pytest.skip("this libsvtav1 does not switch its caller to real-time scheduling")
    assert int(plain) == os.SCHED_FIFO
    guarded = subprocess.run(videos._without_realtime(run), capture_output=True, text=True, check=True)
    assert int(guarded.stdout.split()[-1]) == os.SCHED_OTHER and (tmp_path / "a.mp4").stat().st_size > 0
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # as a test's in-process encode leaves it
    assert videos.restore_scheduling() and os.sched_getscheduler(0) == os.SCHED_OTHER
