"""Timestamps judged as the video queries LeRobot makes, planted into a copy of a real v2.1 dataset with a
declared camera (G1, 26-d, its first 8 episodes): host-clock stamps (each episode starting 0.05-0.11 s in,
steps 0.049-0.352 s) are found without the videos, against the grid k / fps; with mp4 files written here
at k / fps, against the frames' own timestamps read from the container; the clean copy raises nothing."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from omegaconf import OmegaConf

from pipeline.record.records import Check
from pipeline.stages.contract import load_sources
from pipeline.stages.contract.frames import frame_rows
from pipeline.stages.contract.health import health_rows
from pipeline.stages.contract.rows import Sources
from tests.stages.contract.health_faults import DATASETS, Copy, copy_dataset, write
from tests.stages.contract.helpers import STAGE_CFG

CAMERA = "observation.images.cam_high"
needs_real = pytest.mark.skipif(
    not DATASETS["v2.1"].is_dir(), reason=f"real test files not present: {DATASETS}"
)


def host_clock(copy: Copy, episodes: list[int]) -> None:
    """The report's stamps: each listed episode starts 0.05-0.11 s in and steps 0.049-0.352 s."""
    rng = np.random.default_rng(0)
    for e in episodes:
        rows = copy.rows(e)
        steps = rng.uniform(0.049, 0.352, len(rows) - 1)
        copy.cols["timestamp"][rows] = rng.uniform(0.05, 0.11) + np.r_[0.0, np.cumsum(steps)]


def videos(copy: Copy) -> None:
    """One small FFV1 mp4 per episode at the dataset's fps, frame k at k / fps (pts = k), as LeRobot's
    encoder writes them."""
    fps = int(copy.fps())
    for e in np.unique(copy.cols["episode_index"]).tolist():
        path = copy.root / f"videos/chunk-000/{CAMERA}/episode_{e:06d}.mp4"
        path.parent.mkdir(parents=True, exist_ok=True)
        with av.open(str(path), "w", format="mp4") as out:
            stream = out.add_stream("ffv1", rate=fps)
            stream.width = stream.height = 16
            stream.pix_fmt, stream.time_base = "bgr0", Fraction(1, fps)
            for k in range(len(copy.rows(e))):
                frame = av.VideoFrame.from_ndarray(np.full((16, 16, 3), k % 255, np.uint8), format="rgb24")
                frame.pts = k
                out.mux(stream.encode(frame))
            out.mux(stream.encode())


def sources(root: Path) -> Sources:
    a, b, c, _ = load_sources(OmegaConf.create({"dataset": {"path": str(root)}}), STAGE_CFG)
    return Sources(a, b, c, STAGE_CFG)


def grid_row(root: Path) -> Check:
    return {ch.id: ch for ch in health_rows(sources(root))}["contract.health.time.video_grid"]


@needs_real
@pytest.mark.parametrize("with_videos", [False, True], ids=["grid", "files"])
def test_host_clock_timestamps_miss_every_video_query(with_videos: bool, tmp_path: Path) -> None:
    copy = copy_dataset("v2.1", tmp_path / "host")
    host_clock(copy, [2, 5])
    if with_videos:
        videos(copy)
    row = grid_row(write(copy))
    assert (row.verdict, row.severity) == ("mismatch", "hard"), row.message
    assert sorted(row.evidence["largest_offset_s"]) == [2, 5] and row.evidence["episodes"] == [2, 5]
    assert "episode(s) (2, 5)" in row.message and "largest offset" in row.message
    assert max(row.evidence["largest_offset_s"].values()) > 1e-4
    against = "the frames' timestamps in the video files" if with_videos else "the video grid k / fps"
    assert against in row.message and row.evidence["against"] == ("files" if with_videos else "grid")
    if with_videos:  # the decoded-frames row samples episodes 0, 2, 5, 7: a fault of the data, not an error
        decoded = {ch.id: ch for ch in frame_rows(sources(copy.root))}[f"contract.frames.health:{CAMERA}"]
        assert decoded.verdict == "mismatch" and "within 0.0001 s" in decoded.message, decoded.message


@needs_real
def test_rows_on_the_grid_at_another_frame_get_another_rows_image(tmp_path: Path) -> None:
    copy = copy_dataset("v2.1", tmp_path / "shifted")
    rows = copy.rows(3)
    copy.cols["timestamp"][rows] += 2 / copy.fps()  # two whole frames late: on the grid, not its own
    row = grid_row(write(copy))
    assert row.verdict == "mismatch" and row.evidence["episodes"] == [3]
    assert 3 in row.evidence["largest_offset_s"]  # its last rows ask past the episode's last frame


@needs_real
def test_the_clean_copy_with_its_videos_matches(tmp_path: Path) -> None:
    copy = copy_dataset("v2.1", tmp_path / "clean")
    videos(copy)
    row = grid_row(write(copy))
    assert row.verdict == "match", row.message
