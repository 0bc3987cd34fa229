"""The frame reader on real video written here with PyAV (AV1 via libsvtav1, H.264 via libx264, lossless
FFV1) in both LeRobot layouts, on parquet images and arrays, and on broken videos."""

from __future__ import annotations

import io
import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import InputError
from pipeline.readers.frames import (
    OPEN_FILES,
    FrameReader,
    ImageStats,
    array_frames,
    decode_at,
    processor_view,
)
from pipeline.readers.lerobot_data import LeRobotData

FPS, N, SIDE = 10, 12, 32


def pictures(n: int, seed: int) -> np.ndarray:
    """Smooth, distinct frames (gradients moving per frame) so a lossy codec stays within a small bound."""
    y, x = np.mgrid[0:SIDE, 0:SIDE].astype(np.float64)
    out = []
    for i in range(n):
        r = 128 + 100 * np.sin((x + 3 * i + seed) / 7)
        g = 128 + 100 * np.cos((y - 2 * i) / 9)
        b = np.full_like(x, 20 * (i % 10) + 10 * seed)
        out.append(np.stack([r, g, b], -1))
    return np.clip(np.stack(out), 0, 255).astype(np.uint8)


def write_video(path: Path, frames: np.ndarray, codec: str = "ffv1", options: dict | None = None) -> None:
    """Frames to an mp4 at FPS with pts = index (time base 1/FPS), the way LeRobot's encoder writes them;
    lossless or near it unless `options` say otherwise (FFV1 in bgr0, H.264 qp 0 in yuv444p, AV1 crf 1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format="mp4") as out:
        lossless = {"libx264": {"qp": "0"}, "libsvtav1": {"crf": "1", "preset": "12"}}.get(codec, {})
        stream = out.add_stream(codec, rate=FPS, options=lossless if options is None else options)
        stream.width, stream.height = int(frames.shape[2]), int(frames.shape[1])
        stream.pix_fmt = {"ffv1": "bgr0", "libx264": "yuv444p"}.get(codec, "yuv420p")
        stream.time_base = Fraction(1, FPS)
        for i, f in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(f, format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode())


def write_dataset(root: Path, version: str, codec: str, lengths: tuple[int, ...] = (N, N)) -> dict:
    """A LeRobot dataset of two episodes and one camera; returns the frames written per episode."""
    key = "observation.images.top"
    features = {
        key: {"dtype": "video", "shape": [SIDE, SIDE, 3]},
        "timestamp": {"dtype": "float32", "shape": [1]},
    }
    written = {e: pictures(n, e) for e, n in enumerate(lengths)}
    rows = {"episode_index": [], "timestamp": []}
    for e, n in enumerate(lengths):
        rows["episode_index"] += [e] * n
        rows["timestamp"] += [i / FPS for i in range(n)]
    (root / "data").mkdir(parents=True)
    (root / "meta").mkdir()
    pq.write_table(pa.table(rows), root / "data/file-000.parquet")
    if version == "v2.1":
        template = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
        for e, f in written.items():
            write_video(root / template.format(episode_chunk=0, video_key=key, episode_index=e), f, codec)
    else:
        template = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
        write_video(
            root / template.format(video_key=key, chunk_index=0, file_index=0),
            np.concatenate(list(written.values())),
            codec,
        )
        starts = np.cumsum((0,) + lengths) / FPS
        p = f"videos/{key}/"
        (root / "meta/episodes").mkdir()
        pq.write_table(
            pa.table(
                {
                    "episode_index": list(range(len(lengths))),
                    "length": list(lengths),
                    p + "chunk_index": [0] * len(lengths),
                    p + "file_index": [0] * len(lengths),
                    p + "from_timestamp": list(starts[:-1]),
                    p + "to_timestamp": list(starts[1:]),
                }
            ),
            root / "meta/episodes/file-000.parquet",
        )
    info = {"codebase_version": version, "fps": FPS, "video_path": template, "features": features}
    (root / "meta/info.json").write_text(json.dumps(info))
    return written


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
@pytest.mark.parametrize("codec,bound", [("ffv1", 0), ("libx264", 3.0), ("libsvtav1", 6.0)])
def test_frames_equal_the_frames_written(tmp_path: Path, version: str, codec: str, bound: float) -> None:
    written = write_dataset(tmp_path, version, codec)
    reader = FrameReader(LeRobotData(tmp_path))
    assert reader.cameras() == ["observation.images.top"]
    got = reader.frames("observation.images.top", 1)
    assert got.shape == (N, SIDE, SIDE, 3) and got.dtype == np.uint8
    error = np.abs(got.astype(int) - written[1].astype(int)).mean()
    assert error <= bound, f"{codec} mean abs error {error}"
    some = reader.frames("observation.images.top", 1, [7, 2])  # decode only these, any order
    np.testing.assert_array_equal(some, got[[7, 2]])
    view = processor_view(some)
    assert view.shape == (2, 3, SIDE, SIDE) and view.dtype == np.float32 and view.max() <= 1.0


@pytest.mark.parametrize("codec", ["libx264", "libsvtav1"])
def test_a_reader_keeps_its_containers_open_and_decodes_as_a_fresh_open(tmp_path: Path, codec: str) -> None:
    """Windows read back and forth through one open container (seeks backwards included) are the frames
    a fresh open decodes; the least recently used container beyond OPEN_FILES is closed."""
    write_dataset(tmp_path, "v3.0", codec)
    key, asks = "observation.images.top", [(1, [5, 6, 7]), (0, [2, 3]), (1, [0, 1]), (0, [9]), (1, [7])]
    with FrameReader(LeRobotData(tmp_path)) as kept:
        for episode, index in asks:
            fresh = FrameReader(LeRobotData(tmp_path))
            np.testing.assert_array_equal(kept.frames(key, episode, index), fresh.frames(key, episode, index))
            fresh.close()
        assert len(kept._open) == 1  # both episodes sit in one v3.0 file
        for i in range(OPEN_FILES + 2):
            kept._container(write_copy(tmp_path, i))
        assert len(kept._open) == OPEN_FILES
    assert kept._open == {}


def write_copy(root: Path, i: int) -> Path:
    (video,) = root.glob("videos/**/*.mp4")
    copy = root / f"copy-{i}.mp4"
    copy.write_bytes(video.read_bytes())
    return copy


def test_parquet_images_and_arrays_through_the_same_api(tmp_path: Path) -> None:
    frames = pictures(3, 0)
    blobs = []
    for f in frames:
        buf = io.BytesIO()
        with av.open(buf, "w", format="image2pipe") as out:
            s = out.add_stream("png")
            s.width = s.height = SIDE
            s.pix_fmt = "rgb24"
            out.mux(s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")))
            out.mux(s.encode())
        blobs.append({"bytes": buf.getvalue(), "path": None})
    (tmp_path / "data").mkdir()
    (tmp_path / "meta").mkdir()
    key = "observation.image"
    pq.write_table(
        pa.table({key: blobs, "episode_index": [0] * 3, "timestamp": [0.0, 0.1, 0.2]}),
        tmp_path / "data/file-000.parquet",
    )
    features = {key: {"dtype": "image", "shape": [SIDE, SIDE, 3]}}
    (tmp_path / "meta/info.json").write_text(json.dumps({"codebase_version": "v2.1", "features": features}))
    np.testing.assert_array_equal(FrameReader(LeRobotData(tmp_path)).frames(key, 0), frames)
    np.testing.assert_array_equal(array_frames(np.moveaxis(frames, -1, 1), "x.npz"), frames)
    np.testing.assert_array_equal(array_frames(frames / 255.0, "x.h5"), frames)
    with pytest.raises(InputError, match="x.h5"):
        array_frames(frames.astype(np.float32), "x.h5")  # 0-255 floats where 0-1 was expected


def _broken(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "no moov":
        at = data.find(b"moov")
        path.write_bytes(data[: at - 4] + b"\0" * (len(data) - at + 4))
    elif how == "missing":
        path.unlink()
    elif how == "garbage":
        path.write_bytes(b"\x00\x00\x00\x18ftypisom" + bytes(range(256)) * 8)


@pytest.mark.parametrize("how", ["truncated", "no moov", "missing", "garbage"])
def test_broken_video_is_an_input_error_naming_file_and_episode(tmp_path: Path, how: str) -> None:
    write_dataset(tmp_path, "v2.1", "ffv1")
    path = tmp_path / "videos/chunk-000/observation.images.top/episode_000001.mp4"
    _broken(path, how)
    with pytest.raises(InputError, match="episode_000001.mp4") as err:
        FrameReader(LeRobotData(tmp_path)).frames("observation.images.top", 1)
    assert "episode 1" in str(err.value)


def test_video_shorter_than_episode_and_off_grid_timestamps(tmp_path: Path) -> None:
    write_dataset(tmp_path, "v2.1", "ffv1")
    path = tmp_path / "videos/chunk-000/observation.images.top/episode_000000.mp4"
    write_video(path, pictures(5, 0))
    with pytest.raises(InputError, match="5 of 12|shorter"):
        FrameReader(LeRobotData(tmp_path)).frames("observation.images.top", 0)
    with pytest.raises(InputError, match="no frame at 0.150000"):
        decode_at(path, [0.0, 0.15])


def test_real_v30_dataset_locates_videos_and_names_the_missing_one(real_data: Path) -> None:
    """SamueleSandrini/record-test (v3.0, two AV1 cameras; the snapshot lacks the videos)."""
    data = LeRobotData(real_data / "SamueleSandrini__record-test")
    keys = data.video_keys()
    assert len(keys) == 2
    path, start, end = data.video_location(keys[0], 1)
    assert path.name.endswith(".mp4") and keys[0] in str(path) and end is not None and end > start >= 0
    with pytest.raises(InputError, match=f"{path.name}.*episode 1.*missing"):
        FrameReader(data).frames(keys[0], 1, [0])


def test_image_stats_from_histograms_equal_numpy() -> None:
    frames = pictures(5, 3)
    stats = ImageStats()
    stats.add(frames[:2])
    stats.add(frames[2:])
    got = stats.result()
    flat = frames.reshape(-1, 3) / 255.0
    for name, want in (
        ("mean", flat.mean(0)),
        ("std", flat.std(0)),
        ("min", flat.min(0)),
        ("max", flat.max(0)),
    ):
        np.testing.assert_allclose(got[name].reshape(3), want, atol=1e-12, err_msg=name)
    assert got["count"][0] == flat.shape[0]
