"""Contract rows from decoded frames, on real FFV1 video written here in the LeRobot v3.0 layout:
a clean pair of cameras, one camera written BGR, two cameras exchanged, stale image stats, a missing
video and a stats-only input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers.base import Contract, DatasetContract, Feature
from pipeline.record.records import Check
from pipeline.stages.contract.frames import frame_rows
from pipeline.stages.contract.rows import Sources
from tests.readers.test_frames import FPS, SIDE, write_video
from tests.stages.contract.helpers import STAGE_CFG

COLORS = {"observation.images.front": (200, 60, 20), "observation.images.wrist": (30, 90, 220)}
N = 6


def camera(color: tuple[int, int, int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.integers(-8, 9, size=(N, SIDE, SIDE, 3))
    return np.clip(np.array(color) + noise, 0, 255).astype(np.uint8)


def dataset(root: Path, bgr: str | None = None, exchange: bool = False) -> dict[str, np.ndarray]:
    """Two cameras, two episodes, v3.0 (one shared file per camera); `bgr` names a camera written BGR."""
    means = {}
    p = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    cols: dict[str, list] = {"episode_index": [0, 1], "length": [N, N]}
    recorded = {}
    for i, (key, color) in enumerate(COLORS.items()):
        frames = np.concatenate([camera(color, i), camera(color, i + 5)])
        means[key] = frames.reshape(-1, 3).mean(0) / 255.0  # the camera's own (RGB) means
        recorded[key] = frames[..., ::-1] if key == bgr else frames
    if exchange:  # the recording's keys exchanged after the fact
        front, wrist = COLORS
        recorded[front], recorded[wrist] = recorded[wrist], recorded[front]
    for key, frames in recorded.items():
        write_video(root / p.format(video_key=key, chunk_index=0, file_index=0), frames)
        v = f"videos/{key}/"
        cols |= {
            v + "chunk_index": [0, 0],
            v + "file_index": [0, 0],
            v + "from_timestamp": [0.0, N / FPS],
            v + "to_timestamp": [N / FPS, 2 * N / FPS],
        }
    (root / "meta/episodes").mkdir(parents=True)
    pq.write_table(pa.table(cols), root / "meta/episodes/file-000.parquet")
    (root / "data").mkdir()
    rows = {"episode_index": [0] * N + [1] * N, "timestamp": [i / FPS for i in range(N)] * 2}
    pq.write_table(pa.table(rows), root / "data/file-000.parquet")
    features = {k: {"dtype": "video", "shape": [SIDE, SIDE, 3]} for k in COLORS}
    info = {"codebase_version": "v3.0", "fps": FPS, "video_path": p, "features": features}
    (root / "meta/info.json").write_text(json.dumps(info))
    return means


def rows(root: Path, c_means: dict, a_means: dict, kind: str = "lerobot_v3.0") -> dict[str, Check]:
    feats = {k: Feature(k, "image", (3, SIDE, SIDE)) for k in COLORS}
    a = Contract(
        "A",
        "contract_card",
        "base",
        features=feats,
        stats={k: {"mean": np.reshape(m, (3, 1, 1)), "max": np.ones((3, 1, 1))} for k, m in a_means.items()},
    )
    c = DatasetContract(
        "C", kind, str(root), stats={k: {"mean": np.reshape(m, (3, 1, 1))} for k, m in c_means.items()}
    )
    out = frame_rows(Sources(a, Contract("B", "training", "train"), c, STAGE_CFG))
    return {r.id.removeprefix("contract."): r for r in out}


def bad(found: dict[str, Check]) -> set[str]:
    return {k for k, r in found.items() if r.verdict != "match"}


def test_clean_cameras_match_every_row(tmp_path: Path) -> None:
    means = dataset(tmp_path)
    found = rows(tmp_path, means, means)
    assert bad(found) == set(), {k: r.message for k, r in found.items()}
    assert {
        "frames.health:observation.images.front",
        "frames.channels:observation.images.wrist",
        "frames.scale:observation.images.front",
        "frames.stale_stats:observation.images.wrist",
        "frames.swapped:observation.images.front|observation.images.wrist",
    } <= set(found)
    assert found["frames.health:observation.images.front"].evidence["episodes_frames"]


def test_bgr_camera_is_a_hard_row_naming_it(tmp_path: Path) -> None:
    means = dataset(tmp_path, bgr="observation.images.front")
    found = rows(tmp_path, means, means)
    assert bad(found) == {
        "frames.channels:observation.images.front",
        "frames.stale_stats:observation.images.front",
    }
    assert found["frames.channels:observation.images.front"].severity == "hard"


def test_exchanged_cameras_named_from_the_data(tmp_path: Path) -> None:
    means = dataset(tmp_path)
    front, wrist = COLORS
    found = rows(tmp_path, means, {front: means[wrist], wrist: means[front]})
    assert f"frames.swapped:{front}|{wrist}" in bad(found)
    assert found[f"frames.swapped:{front}|{wrist}"].severity == "hard"


def test_a_bgr_camera_and_exchanged_keys_together_are_both_named(tmp_path: Path) -> None:
    """demo=faulty's pair: front recorded BGR, then the keys exchanged. Judged one camera at a time,
    each fault hides the other; the joint fit names both (the BGR frames now sit under `wrist`)."""
    clean = dataset(tmp_path, bgr="observation.images.front", exchange=True)
    front, wrist = COLORS
    shipped = {front: clean[wrist], wrist: clean[front][::-1]}  # stats of the frames as stored
    found = rows(tmp_path, shipped, clean)
    assert bad(found) == {f"frames.channels:{wrist}", f"frames.swapped:{front}|{wrist}"}
    assert found[f"frames.channels:{wrist}"].evidence["base"]["fits"] == front
    assert found[f"frames.swapped:{front}|{wrist}"].evidence["assignment"] == {front: wrist, wrist: front}


def test_stale_stats_and_missing_video_and_stats_only(tmp_path: Path) -> None:
    means = dataset(tmp_path)
    wrist = "observation.images.wrist"
    stale = {**means, wrist: np.clip(means[wrist] + 0.2, 0, 1)}
    assert f"frames.stale_stats:{wrist}" in bad(rows(tmp_path, stale, means))
    (tmp_path / f"videos/{wrist}/chunk-000/file-000.mp4").unlink()
    found = rows(tmp_path, means, means)
    assert found[f"frames.health:{wrist}"].verdict == "error"
    assert "file-000.mp4" in found[f"frames.health:{wrist}"].message
    assert found["frames.health:observation.images.front"].verdict == "match"  # the rest still reports
    only = rows(tmp_path / "nowhere", means, means, kind="stats_only")
    assert list(only) == ["frames.unavailable"] and only["frames.unavailable"].verdict == "unverifiable"


def test_an_episode_span_that_disagrees_with_its_rows_is_named(tmp_path: Path) -> None:
    """Every episode is checked from the metadata and the file headers, not only the sampled ones: an
    episode whose span holds more frames than its rows, and a file ending before its last episode."""
    means = dataset(tmp_path)
    front, wrist = COLORS
    episodes = tmp_path / "meta/episodes/file-000.parquet"
    table = pq.read_table(episodes).to_pydict()
    table["length"] = [N, N]
    table[f"videos/{wrist}/to_timestamp"] = [(N + 2) / FPS, 2 * N / FPS]  # episode 0 spans N+2 frames
    table[f"videos/{front}/from_timestamp"] = [0.0, (N + 3) / FPS]  # episode 1 runs past the file's end
    table[f"videos/{front}/to_timestamp"] = [N / FPS, (2 * N + 3) / FPS]
    pq.write_table(pa.table(table), episodes)
    found = rows(tmp_path, means, means)
    wrist_row = found[f"frames.health:{wrist}"]
    assert wrist_row.verdict == "mismatch" and "1 episode span(s)" in wrist_row.message, wrist_row.message
    assert wrist_row.evidence["spans"]["checked"] == 2
    front_row = found[f"frames.health:{front}"]
    assert front_row.verdict in ("mismatch", "error") and "end" in front_row.message, front_row.message
