"""Every episode's video span against its file's header (issue 35): a dataset of several video files per
camera written by `benchmarks/make_large_dataset.py` (tiny, a second to write), a file cut short and a
file that is no video found in the parallel header read, and a cap on the files read named in the row."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.make_large_dataset import Shape, clip, encode, make
from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.stages.contract.spans import cap_note, frame_counts, spans

KEY = "observation.images.cam0"
SHAPE = Shape(
    episodes=12,
    length=6,
    state_dim=3,
    action_dim=3,
    cameras=1,
    size=16,
    episodes_per_file=6,
    episodes_per_video=4,
    tasks=2,
)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("spans") / "ds"
    make(root, SHAPE)
    return root


def video(root: Path, number: int) -> Path:
    return root / f"videos/{KEY}/chunk-000/file-{number:03d}.mp4"


def test_every_file_read_when_under_the_cap(written: Path) -> None:
    found = spans(FrameReader(LeRobotData(written)), KEY, max_files=10)
    assert found["problems"] == []
    assert (found["checked"], found["files"], found["files_probed"], found["capped"]) == (12, 3, 3, False)
    assert cap_note(found) == ""


def test_cap_is_named_not_silent(written: Path) -> None:
    found = spans(FrameReader(LeRobotData(written)), KEY, max_files=2)
    assert (found["files"], found["files_probed"], found["capped"]) == (3, 2, True)
    assert "headers of 2 of 3 video files read" in cap_note(found)
    assert "span_files=2" in cap_note(found)


def test_short_and_unreadable_files_found_in_the_parallel_read(written: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    shutil.copytree(written, root)
    encode(video(root, 1), np.tile(clip(SHAPE, 0), (2, 1, 1, 1)), SHAPE.fps)  # 2 of its 4 episodes
    video(root, 2).write_bytes(b"not an mp4")
    found = spans(FrameReader(LeRobotData(root)), KEY, max_files=10)
    text = " ".join(found["problems"])
    assert "1 video file(s) end before their last episode" in text and "file-001.mp4" in text
    assert "unreadable" in text and "file-002.mp4" in text
    counts = frame_counts([video(root, n) for n in range(3)], threads=3)
    assert counts[video(root, 0)] == 4 * SHAPE.length and counts[video(root, 1)] == 2 * SHAPE.length
    assert isinstance(counts[video(root, 2)], InputError)


def test_video_location_by_episode_index(written: Path) -> None:
    data = LeRobotData(written)
    path, start, end = data.video_location(KEY, 9)
    assert path == video(written, 2).resolve() or path == video(written, 2)
    assert (start, end) == pytest.approx((SHAPE.length / SHAPE.fps, 2 * SHAPE.length / SHAPE.fps))
    with pytest.raises(InputError, match="episode 99 not listed"):
        data.video_location(KEY, 99)
