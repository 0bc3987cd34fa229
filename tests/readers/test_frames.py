"""The frame reader on real videos written here with PyAV: H.264 (lossless libx264rgb: the frames read
equal the frames written) and AV1 (libsvtav1, lossy: within a bound), in LeRobot's v2.1 layout (one mp4
per episode) and v3.0 layout (episodes sharing a file, found by from_timestamp); and the bad videos:
missing, truncated, no moov atom, not a video, shorter than the episode, timestamps off the frame grid."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader, processor_view

FPS, SIZE = 10, 32
KEYS = ("observation.images.front", "observation.images.wrist")


def scene(episode: int, t: int, camera: int) -> np.ndarray:
    """A frame that differs by episode, time and camera (smooth, so a lossy codec keeps it close)."""
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    red = (x * 4 + t * 9 + episode * 40) % 256
    green = (y * 4 + camera * 120) % 256
    blue = np.full_like(x, (t * 20 + camera * 60) % 256)
    return np.stack([red, green, blue], axis=-1).astype(np.uint8)


def write_video(path: Path, frames: list[np.ndarray], codec: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=FPS)
        stream.width = stream.height = SIZE
        if codec == "libx264rgb":
            stream.pix_fmt, stream.options = "rgb24", {"qp": "0"}
        else:
            stream.pix_fmt, stream.options = "yuv420p", {"crf": "10", "preset": "8"}
        for image in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())


def info(version: str, template: str) -> dict:
    video = {"dtype": "video", "shape": [SIZE, SIZE, 3], "names": ["height", "width", "channels"]}
    return {
        "codebase_version": version,
        "fps": FPS,
        "chunks_size": 1000,
        "video_path": template,
        "features": {KEYS[0]: video, KEYS[1]: video, "action": {"dtype": "float32", "shape": [2]}},
    }


def v21(root: Path, codec: str, lengths=(6, 8)) -> Path:
    template = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
    for episode, n in enumerate(lengths):
        for c, key in enumerate(KEYS):
            path = root / template.format(episode_chunk=0, video_key=key, episode_index=episode)
            write_video(path, [scene(episode, t, c) for t in range(n)], codec)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    (root / "meta" / "info.json").write_text(json.dumps(info("v2.1", template)))
    return root


def v30(root: Path, codec: str, lengths=(6, 8)) -> Path:
    template = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    rows = []
    for c, key in enumerate(KEYS):
        frames = [scene(e, t, c) for e, n in enumerate(lengths) for t in range(n)]
        write_video(root / template.format(video_key=key, chunk_index=0, file_index=0), frames, codec)
    start = 0
    for episode, n in enumerate(lengths):
        row = {"episode_index": episode, "length": n}
        for key in KEYS:
            row |= {f"videos/{key}/chunk_index": 0, f"videos/{key}/file_index": 0}
            row |= {
                f"videos/{key}/from_timestamp": start / FPS,
                f"videos/{key}/to_timestamp": (start + n) / FPS,
            }
        rows.append(row)
        start += n
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    (root / "meta" / "info.json").write_text(json.dumps(info("v3.0", template)))
    return root


@pytest.mark.parametrize("layout", [v21, v30])
def test_lossless_h264_frames_read_equal_the_frames_written(tmp_path, layout):
    reader = FrameReader(layout(tmp_path, "libx264rgb"))
    assert reader.cameras == list(KEYS)
    got = reader.frames(KEYS[1], 1, [0.5, 0.0, 0.3])
    assert np.array_equal(got, np.stack([scene(1, t, 1) for t in (5, 0, 3)]))
    view = processor_view(got)
    assert (
        view.shape == (3, 3, SIZE, SIZE) and view.dtype == np.float32 and 0 <= view.min() <= view.max() <= 1
    )


@pytest.mark.parametrize("layout", [v21, v30])
def test_av1_frames_are_within_a_bound_of_the_frames_written(tmp_path, layout):
    reader = FrameReader(layout(tmp_path, "libsvtav1"))
    got = reader.frames(KEYS[0], 1, [0.0, 0.7]).astype(int)
    want = np.stack([scene(1, t, 0) for t in (0, 7)]).astype(int)
    assert np.abs(got - want).mean() < 4  # lossy, but the same picture
    other = np.stack([scene(1, t, 1) for t in (0, 7)]).astype(int)
    assert np.abs(got - other).mean() > 20  # and not the other camera's


def test_a_video_shorter_than_its_episode_names_file_camera_and_episode(tmp_path):
    reader = FrameReader(v21(tmp_path, "libx264rgb"))
    with pytest.raises(InputError, match=r"camera observation.images.front, episode 0: no frame within"):
        reader.frames(KEYS[0], 0, [0.0, 0.9])  # episode 0 has 6 frames (0.0-0.5 s)
    with pytest.raises(InputError, match="timestamps do not map to frames"):
        reader.frames(KEYS[0], 0, [0.25])  # between two frames at 10 fps


@pytest.mark.parametrize("damage", ["missing", "truncated", "no_moov", "not_video"])
def test_a_damaged_video_is_one_named_error(tmp_path, damage):
    root = v21(tmp_path, "libx264rgb")
    path = root / "videos/chunk-000/observation.images.front/episode_000000.mp4"
    data = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 3])
    elif damage == "no_moov":
        at = data.find(b"moov")
        path.write_bytes(data[: at - 4] + b"\0" * 8 + data[at + 4 :])
    else:
        path.write_bytes(b"this is a text file, not an mp4\n" * 20)
    with pytest.raises(InputError) as info:
        FrameReader(root).frames(KEYS[0], 0, [0.0, 0.1])
    message = str(info.value)
    assert message.startswith(str(path)) and "camera observation.images.front, episode 0" in message
    assert ("video file not found" if damage == "missing" else "cannot decode the video") in message


SHARED = Path(__file__).resolve().parents[2].parent / "shared"
REAL = SHARED / "data" / "real" / "SamueleSandrini__record-test"


@pytest.mark.skipif(not REAL.is_dir(), reason=f"needs the real LeRobot v3.0 dataset under {REAL}")
def test_a_real_v3_dataset_without_its_videos_names_the_missing_file(tmp_path):
    reader = FrameReader(REAL)
    assert reader.cameras == ["observation.images.front", "observation.images.top"] and reader.fps == 30
    span = reader.span("observation.images.top", 1)
    assert span.path.name == "file-000.mp4" and span.start_s > 0  # episode 1 starts inside a shared file
    with pytest.raises(InputError, match="camera observation.images.top, episode 1: video file not found"):
        reader.frames("observation.images.top", 1, [0.0])
