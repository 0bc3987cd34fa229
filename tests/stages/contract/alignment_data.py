"""LeRobot datasets written here for the alignment rows (issue 34): a robot tip moving in bursts with idle
stretches, a fixed camera watching it and a wrist camera moving with it, encoded with PyAV (H.264 or
AV1, lossy, as recorders write them) in either LeRobot layout, with camera faults planted in the
pictures or the metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers import read_dataset
from pipeline.readers.base import Contract, Feature
from pipeline.record.records import Check
from pipeline.stages.contract.rows import Sources
from tests.readers.test_frames import FPS, write_video
from tests.stages.contract.helpers import OPTIONS, STAGE_CFG

FIXED, WRIST = "observation.images.front", "observation.images.wrist"
SIDE = 48
LOSSY = {"libx264": {"crf": "23"}, "libsvtav1": {"crf": "35", "preset": "12"}}


@dataclass(frozen=True)
class Faults:
    """What to plant: a camera lagging (frames), an episode holding its neighbour's frames, a grey
    camera, a still camera."""

    lag: dict[str, int] = field(default_factory=dict)
    neighbour: int | None = None  # this episode holds episode neighbour+1's frames
    grey: str | None = None
    still: str | None = None
    span_shift: dict[int, int] = field(default_factory=dict)  # v3.0: episode -> from/to moved (frames)
    unrelated: str | None = None  # a camera whose picture flickers with no relation to the robot
    shift_all: int = 0  # every episode holds episode e+shift_all's frames (counted round the end)


def trajectory(n: int, seed: int) -> np.ndarray:
    """A tip position [n, 2] in 0-1 moving in bursts of random direction and speed, idle in between."""
    rng = np.random.default_rng(seed)
    velocity = np.zeros((n, 2))
    t = int(rng.integers(0, 4))
    while t < n:
        length = int(rng.integers(4, 10))
        bump = np.sin(np.linspace(0, np.pi, length)) * rng.uniform(0.01, 0.04)
        angle = rng.uniform(0, 2 * np.pi)
        part = bump[: n - t, None] * np.array([np.cos(angle), np.sin(angle)])
        velocity[t : t + len(part)] = part
        t += length + int(rng.integers(2, 8))
    return 0.5 + np.cumsum(velocity, axis=0).clip(-0.35, 0.35)


def fixed_view(tip: np.ndarray) -> np.ndarray:
    """A still scene (gradient table) and the arm's tip, a bright disc, seen from a fixed camera."""
    y, x = np.mgrid[0:SIDE, 0:SIDE] / SIDE
    scene = np.stack([60 + 80 * x, 90 + 40 * y, 70 + 30 * x * y], -1)
    out = np.repeat(scene[None], len(tip), 0)
    for i, (px, py) in enumerate(tip):
        disc = (x - px) ** 2 + (y - py) ** 2 < 0.012
        out[i][disc] = (240, 220, 40)
    return out.clip(0, 255).astype(np.uint8)


def wrist_view(tip: np.ndarray) -> np.ndarray:
    """A camera on the arm: the textured scene slides under it as the tip moves."""
    y, x = np.mgrid[0:SIDE, 0:SIDE] / SIDE
    out = []
    for px, py in tip:
        u, v = x + 2 * px, y + 2 * py
        r = 128 + 90 * np.sin(11 * u) * np.cos(7 * v)
        g = 128 + 80 * np.cos(9 * v + 3 * u)
        b = 100 + 60 * np.sin(5 * (u + v))
        out.append(np.stack([r, g, b], -1))
    return np.stack(out).clip(0, 255).astype(np.uint8)


def pictures(tip: np.ndarray, key: str, faults: Faults) -> np.ndarray:
    k = faults.lag.get(key, 0)
    seen = tip[np.clip(np.arange(len(tip)) - k, 0, len(tip) - 1)]  # frame t shows the state at t-k
    frames = fixed_view(seen) if key == FIXED else wrist_view(seen)
    if faults.still == key:
        frames[:] = frames[0]
    if faults.unrelated == key:
        light = np.random.default_rng(99).uniform(0.5, 1.0, len(tip))
        frames[:] = (frames[0][None] * light[:, None, None, None]).astype(np.uint8)
    if faults.grey == key:
        frames[:] = frames.mean(-1, keepdims=True).astype(np.uint8)
    return frames


def write(
    root: Path, version: str, codec: str, faults: Faults = Faults(), episodes: int = 4, n: int = 48
) -> dict[str, list[np.ndarray]]:
    """The dataset: rows (state = tip x, y and a gripper in other units), info.json, episodes, videos."""
    tips = [trajectory(n, seed) for seed in range(episodes)]
    state = [np.column_stack([t, 40.0 * t[:, :1] ** 2]) for t in tips]
    frames = {key: [pictures(t, key, faults) for t in tips] for key in (FIXED, WRIST)}
    if faults.neighbour is not None and version == "v2.1":  # the episode's file is its neighbour's
        for key in frames:
            frames[key][faults.neighbour] = frames[key][faults.neighbour + 1]
    if faults.shift_all and version == "v2.1":  # the files renumbered: each episode's is another's
        for key in frames:
            frames[key] = [frames[key][(e + faults.shift_all) % episodes] for e in range(episodes)]
    _rows(root, state)
    _videos(root, version, codec, frames, faults, n)
    return frames


def _rows(root: Path, state: list[np.ndarray]) -> None:
    (root / "data").mkdir(parents=True)
    n = [len(s) for s in state]
    table = {
        "observation.state": pa.array(
            np.concatenate(state).astype(np.float32).tolist(), pa.list_(pa.float32())
        ),
        "episode_index": np.repeat(np.arange(len(state)), n),
        "frame_index": np.concatenate([np.arange(k) for k in n]),
        "timestamp": np.concatenate([np.arange(k) / FPS for k in n]).astype(np.float32),
    }
    pq.write_table(pa.table(table), root / "data/file-000.parquet")


def _videos(root: Path, version: str, codec: str, frames: dict, faults: Faults, n: int) -> None:
    episodes = len(next(iter(frames.values())))
    features: dict = {
        "observation.state": {"dtype": "float32", "shape": [3], "names": ["x", "y", "gripper"]},
        "timestamp": {"dtype": "float32", "shape": [1]},
        "episode_index": {"dtype": "int64", "shape": [1]},
        "frame_index": {"dtype": "int64", "shape": [1]},
    }
    cols: dict = {"episode_index": list(range(episodes)), "length": [n] * episodes}
    if version == "v2.1":
        template = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
        for key, per in frames.items():
            for e, f in enumerate(per):
                path = root / template.format(episode_chunk=0, video_key=key, episode_index=e)
                write_video(path, f, codec, LOSSY.get(codec))
    else:
        template = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
        starts = np.arange(episodes + 1) * n / FPS
        span = np.arange(episodes)
        if faults.neighbour is not None:  # from/to_timestamp off by one episode for this one
            span[faults.neighbour] += 1
        if faults.shift_all:  # ... or for every episode
            span = (span + faults.shift_all) % episodes
        moved = np.array([faults.span_shift.get(e, 0) for e in range(episodes)]) / FPS
        for key, per in frames.items():
            path = root / template.format(video_key=key, chunk_index=0, file_index=0)
            write_video(path, np.concatenate(per), codec, LOSSY.get(codec))
            v = f"videos/{key}/"
            cols |= {
                v + "chunk_index": [0] * episodes,
                v + "file_index": [0] * episodes,
                v + "from_timestamp": (starts[span] + moved).tolist(),
                v + "to_timestamp": (starts[span + 1] + moved).tolist(),
            }
    for key in frames:
        features[key] = {"dtype": "video", "shape": [SIDE, SIDE, 3], "names": ["height", "width", "channels"]}
    (root / "meta/episodes").mkdir(parents=True)
    pq.write_table(pa.table(cols), root / "meta/episodes/file-000.parquet")
    info = {"codebase_version": version, "fps": FPS, "video_path": template, "features": features}
    info |= {"total_episodes": episodes, "total_frames": episodes * n}
    if version == "v2.1":
        info["data_path"] = "data/file-000.parquet"
    (root / "meta/info.json").write_text(json.dumps(info))


def image_stats(frames: list[np.ndarray], shift: float = 0.0) -> dict[str, list]:
    """LeRobot's image stats block (0-1, shape (3, 1, 1)) of these frames, the mean moved by `shift`."""
    pixels = np.concatenate(frames).reshape(-1, 3) / 255.0
    mean, std = pixels.mean(0) + shift, pixels.std(0)
    return {"mean": mean.reshape(3, 1, 1).tolist(), "std": std.reshape(3, 1, 1).tolist()}


def write_stats(root: Path, blocks: dict[str, dict[str, list]]) -> None:
    (root / "meta/stats.json").write_text(json.dumps(blocks))


def sources(root: Path, cfg: object = STAGE_CFG, base: dict | None = None) -> Sources:
    """The three contracts for the rows: the dataset as the stage reads it, a base reading both cameras
    (with `base` as its image stats, LeRobot's shapes)."""
    c = read_dataset(root, OPTIONS)
    feats = {k: Feature(k, "image", (3, SIDE, SIDE)) for k in (FIXED, WRIST)}
    stats = {k: {n: np.asarray(v) for n, v in block.items()} for k, block in (base or {}).items()}
    a = Contract("A", "contract_card", "base", features=feats, stats=stats)
    return Sources(a, Contract("B", "training", "train"), c, cfg)  # type: ignore[arg-type]


def by_id(rows: list[Check]) -> dict[str, Check]:
    return {r.id.removeprefix("contract."): r for r in rows}
