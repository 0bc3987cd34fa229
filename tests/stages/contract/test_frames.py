"""Contract rows from decoded frames, on LeRobot v3.0 datasets written here with PyAV (two cameras of
distinct colours): the clean dataset matches; a camera written BGR, two cameras exchanged, image stats on
the 0-255 scale and absent videos each give their own row naming the camera(s)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pipeline.stages.contract.frames import FramesConfig, frame_checks
from tests.readers.test_frames import FPS, KEYS, SIZE, info, write_video

COLOURS = {KEYS[0]: (200, 70, 20), KEYS[1]: (30, 100, 220)}  # front: warm; wrist: cold
LENGTHS = (8, 8, 8)


def frame(key: str, t: int) -> np.ndarray:
    base = np.array(COLOURS[key], dtype=np.int64)
    ripple = (np.arange(SIZE)[None, :, None] * 2 + t * 3) % 16  # a little texture, so it is a real video
    return np.clip(base + ripple + np.zeros((SIZE, SIZE, 1), np.int64), 0, 255).astype(np.uint8)


def stats_of(key: str, scale: float = 1.0) -> dict:
    mean = np.stack([frame(key, t) for t in range(8)]).reshape(-1, 3).mean(axis=0) / 255.0 * scale
    return {
        "mean": [[[v]] for v in mean.tolist()],
        "std": [[[0.02 * scale]]] * 3,
        "min": [[[0.0]]] * 3,
        "max": [[[1.0 * scale]]] * 3,
    }


def dataset(root: Path, bgr: str | None = None, exchanged: bool = False, scale: float = 1.0) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    template = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    for key in KEYS:
        shown = KEYS[1 - KEYS.index(key)] if exchanged else key
        frames = [frame(shown, t) for _ in LENGTHS for t in range(8)]
        if key == bgr:
            frames = [f[..., ::-1].copy() for f in frames]
        write_video(root / template.format(video_key=key, chunk_index=0, file_index=0), frames, "libx264rgb")
    rows, start = [], 0
    for episode, n in enumerate(LENGTHS):
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
    stats = {key: stats_of(KEYS[1 - KEYS.index(key)] if exchanged else key, scale) for key in KEYS}
    if bgr:
        stats[bgr]["mean"] = stats[bgr]["mean"][::-1]  # the stats were computed on what was written
    (root / "meta" / "stats.json").write_text(json.dumps(stats))
    return root


BASE = {key: {k: np.asarray(v) for k, v in stats_of(key).items()} for key in KEYS}  # the clean base's


def by_id(rows) -> dict:
    return {c.id.removeprefix("contract."): c for c in rows}


def test_the_clean_dataset_matches_on_every_frame_row(tmp_path):
    rows = by_id(frame_checks(dataset(tmp_path), BASE, FramesConfig()))
    assert rows and all(c.verdict == "match" for c in rows.values()), [
        (i, c.message) for i, c in rows.items()
    ]
    assert {f"frames.{k}.channel_order.base" for k in KEYS} <= set(
        rows
    ) and "frames.camera_assignment" in rows


def test_a_camera_written_bgr_is_a_hard_row_naming_it(tmp_path):
    rows = by_id(frame_checks(dataset(tmp_path, bgr=KEYS[1]), BASE, FramesConfig()))
    bad = [c for c in rows.values() if c.verdict == "mismatch"]
    assert [c.id for c in bad] == [f"contract.frames.{KEYS[1]}.channel_order.base"]
    assert (
        bad[0].severity == "hard" and "written BGR" in bad[0].message and "base checkpoint" in bad[0].message
    )


def test_two_exchanged_cameras_are_named_from_the_data(tmp_path):
    rows = by_id(frame_checks(dataset(tmp_path, exchanged=True), BASE, FramesConfig()))
    row = rows["frames.camera_assignment"]
    assert row.verdict == "mismatch" and row.severity == "hard"
    assert f"{KEYS[0]} shows what the base knows as {KEYS[1]}" in row.message


def test_image_stats_on_the_255_scale_are_a_factor_255_row(tmp_path):
    rows = by_id(frame_checks(dataset(tmp_path, scale=255.0), BASE, FramesConfig()))
    row = rows[f"frames.{KEYS[0]}.scale.dataset"]
    assert row.verdict == "mismatch" and "factor-255" in row.message


def test_absent_videos_are_one_row_per_camera(tmp_path):
    root = dataset(tmp_path)
    for video in root.glob("videos/**/*.mp4"):
        video.unlink()
    rows = by_id(frame_checks(root, BASE, FramesConfig()))
    assert set(rows) == {f"frames.{k}.decode" for k in KEYS}
    assert all(c.verdict == "unverifiable" and "video file not found" in c.message for c in rows.values())
