"""A tiny two-camera LeRobot v3.0 dataset written with PyAV (lossless FFV1, 16x16), and a deterministic
pixel model loaded through the stage's loader interface, for the teacher_forced image tests.

The dataset's action is a fixed linear function of each camera's per-channel means (RGB, 0-1) plus the
state, plus a little noise; the model computes exactly that function from its batch. So a model fed the
frames as written fits to the noise, and a camera stored BGR or two cameras stored exchanged raise its
error, which the right counterfactual probe brings back down.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from tests.readers.test_frames import FPS as VIDEO_FPS
from tests.readers.test_frames import write_video

FPS, SIDE = 10, 16
FRONT, WRIST = "observation.images.front", "observation.images.wrist"
CAMERAS = (FRONT, WRIST)
TASKS = ["stack the red block", "open the drawer"]
WEIGHTS = {  # camera -> [3 channels, 2 action dims]; R and B weigh differently, the cameras too
    FRONT: [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]],
    WRIST: [[-0.5, 1.0], [1.0, -1.0], [0.5, 0.5]],
}
LOADER = "tests.stages.teacher_forced.pixels:load_pixel_model"
SEEN: dict[str, dict[str, Any]] = {}  # model path -> the first batch it was given (for the tests)


def _frames(n: int, rng: np.random.Generator, side: int) -> np.ndarray:
    """Frames with a random level per channel and a small moving pattern (distinct channel means)."""
    levels = rng.uniform(0.15, 0.85, (n, 1, 1, 3))
    y, x = np.mgrid[0:side, 0:side]
    pattern = 0.1 * np.sin((x[None] + np.arange(n)[:, None, None]) / 3.0)[..., None]
    return np.clip(np.rint((levels + pattern) * 255), 0, 255).astype(np.uint8)


def _means(frames: np.ndarray) -> np.ndarray:
    return frames.astype(np.float64).mean(axis=(1, 2)) / 255.0


def _video(path: Path, frames: np.ndarray, codec: str) -> None:
    """FFV1 (lossless) for the tests; AV1 at crf 30 as LeRobot and the demo write it."""
    assert VIDEO_FPS == FPS, "the shared writer's frame rate is this dataset's"
    write_video(path, frames, codec, {"libsvtav1": {"crf": "30", "preset": "12"}}.get(codec))


def write_dataset(
    root: Path,
    episodes: int = 3,
    length: int = 40,
    *,
    bgr: str | None = None,
    exchanged: bool = False,
    side: int = SIDE,
    codec: str = "ffv1",
    dims: int = 2,
    swapped: tuple[int, int] | None = None,
    degrees: int | None = None,
    state_degrees: int | None = None,
    spatial: bool = False,
    stored_as: dict[str, str] | None = None,
    lag: dict[str, int] | None = None,
) -> Path:
    """The dataset; `bgr` stores that camera's channels reversed, `exchanged` stores each camera's
    frames under the other's key (the actions always follow the true frames). The benchmark writes a
    larger one (64x64 AV1, like the demo's cameras). `dims` > 2: a wider, named state (and action),
    dims 2.. offset from -1.5 to 1.5; `swapped` stores those two state dims exchanged, `degrees`
    stores that action dim in degrees (the actions are radians), `state_degrees` that state dim.
    `spatial`: each frame also gets a random vertical gradient and the actions follow each camera's
    left-minus-right and top-minus-bottom halves too (so orientation matters; the model's `spatial`);
    `stored_as` stores a camera rotated180 / flipped_lr / flipped_ud / grey; `lag` stores a camera's
    frames k rows late within each episode (the first frame repeated)."""
    rng = np.random.default_rng(7)
    n = episodes * length
    true = {k: _frames(n, rng, side) for k in CAMERAS}
    if spatial:
        for k in CAMERAS:
            slope = rng.uniform(-0.3, 0.3, (n, 1, 1, 1)) * (np.arange(side)[None, :, None, None] / side - 0.5)
            true[k] = np.clip(true[k] + np.rint(slope * 255), 0, 255).astype(np.uint8)
    state = rng.normal(0, 0.3, (n, dims)) + _offsets(dims)
    seen = sum(_means(true[k]) @ np.asarray(WEIGHTS[k]) for k in CAMERAS)
    if spatial:
        seen = seen + sum(_halves(np.moveaxis(true[k], -1, 1) / 255.0) for k in CAMERAS)
    action = state + _padded(seen, dims)
    action += rng.normal(0, 0.02, action.shape)
    if swapped:
        state[:, list(swapped)] = state[:, list(swapped[::-1])]
    if degrees is not None:
        action[:, degrees] = np.degrees(action[:, degrees])
    if state_degrees is not None:
        state[:, state_degrees] = np.degrees(state[:, state_degrees])
    stored = {FRONT: true[WRIST], WRIST: true[FRONT]} if exchanged else dict(true)
    if bgr:
        stored[bgr] = np.ascontiguousarray(stored[bgr][..., ::-1])
    for key, how in (stored_as or {}).items():
        stored[key] = np.ascontiguousarray(STORED[how](stored[key]))
    for key, k in (lag or {}).items():
        late = (
            np.clip(np.tile(np.arange(length), episodes) - k, 0, None)
            + np.repeat(np.arange(episodes), length) * length
        )
        stored[key] = stored[key][late]
    episode = np.repeat(np.arange(episodes), length)
    frame = np.tile(np.arange(length), episodes)
    template = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    for key in CAMERAS:
        _video(root / template.format(video_key=key, chunk_index=0, file_index=0), stored[key], codec)
    _parquet(root, state, action, episode, frame)
    _meta(root, episodes, length, template, side, dims)
    return root


STORED = {  # a camera stored another way ([n, H, W, C] uint8)
    "rotated180": lambda f: f[:, ::-1, ::-1],
    "flipped_lr": lambda f: f[:, :, ::-1],
    "flipped_ud": lambda f: f[:, ::-1],
    "grey": lambda f: np.repeat(f.mean(axis=-1, keepdims=True).round().astype(np.uint8), 3, axis=-1),
}


def _halves(x: np.ndarray) -> np.ndarray:
    """[..., C, H, W] in 0-1 -> [..., 2]: left minus right half, top minus bottom half (all channels)."""
    h, w = x.shape[-2] // 2, x.shape[-1] // 2
    lr = x[..., :, :w].mean(axis=(-3, -2, -1)) - x[..., :, w:].mean(axis=(-3, -2, -1))
    ud = x[..., :h, :].mean(axis=(-3, -2, -1)) - x[..., h:, :].mean(axis=(-3, -2, -1))
    return 2.0 * np.stack([lr, ud], axis=-1)


def _offsets(dims: int) -> np.ndarray:
    return np.concatenate([np.zeros(min(dims, 2)), np.linspace(-1.5, 1.5, max(dims - 2, 0))])


def _padded(camera_part: np.ndarray, dims: int) -> np.ndarray:
    """The cameras drive action dims 0-1; the other dims follow the state alone."""
    out = np.zeros((*camera_part.shape[:-1], dims))
    out[..., :2] = camera_part
    return out


def state_names(dims: int) -> list[str]:
    return ["x", "y"] if dims == 2 else [f"joint{d}.pos" for d in range(dims)]


def action_names(dims: int) -> list[str]:
    return ["x", "y"] if dims == 2 else [f"joint{d}.vel" for d in range(dims)]


def _parquet(
    root: Path, state: np.ndarray, action: np.ndarray, episode: np.ndarray, frame: np.ndarray
) -> None:
    f32 = pa.list_(pa.float32(), state.shape[1])
    table = pa.table(
        {
            "observation.state": pa.array(state.astype(np.float32).tolist(), f32),
            "action": pa.array(action.astype(np.float32).tolist(), f32),
            "timestamp": pa.array((frame / FPS).astype(np.float32)),
            "frame_index": pa.array(frame.astype(np.int64)),
            "episode_index": pa.array(episode.astype(np.int64)),
            "index": pa.array(np.arange(len(frame), dtype=np.int64)),
            "task_index": pa.array((episode % len(TASKS)).astype(np.int64)),
        }
    )
    (root / "data/chunk-000").mkdir(parents=True)
    pq.write_table(table, root / "data/chunk-000/file-000.parquet")


def _meta(root: Path, episodes: int, length: int, template: str, side: int, dims: int) -> None:
    (root / "meta/episodes").mkdir(parents=True)
    starts = np.arange(episodes + 1) * length / FPS
    columns: dict[str, Any] = {"episode_index": list(range(episodes)), "length": [length] * episodes}
    for key in CAMERAS:
        p = f"videos/{key}/"
        columns |= {p + "chunk_index": [0] * episodes, p + "file_index": [0] * episodes}
        columns |= {p + "from_timestamp": list(starts[:-1]), p + "to_timestamp": list(starts[1:])}
    pq.write_table(pa.table(columns), root / "meta/episodes/file-000.parquet")
    tasks = {"task_index": list(range(len(TASKS))), "__index_level_0__": TASKS}
    pq.write_table(pa.table(tasks), root / "meta/tasks.parquet")
    vector = {"dtype": "float32", "shape": [dims]}
    features = {
        **{
            k: {"dtype": "video", "shape": [side, side, 3], "names": ["height", "width", "channels"]}
            for k in CAMERAS
        },
        "observation.state": {**vector, "names": state_names(dims)},
        "action": {**vector, "names": action_names(dims)},
        **{
            k: {"dtype": "int64", "shape": [1]}
            for k in ("frame_index", "episode_index", "index", "task_index")
        },
        "timestamp": {"dtype": "float32", "shape": [1]},
    }
    info = {"codebase_version": "v3.0", "fps": FPS, "video_path": template, "features": features}
    (root / "meta/info.json").write_text(json.dumps(info))


class PixelModel:
    """The dataset's action function read off the batch, LeRobot-style `input_features` (typed)."""

    def __init__(self, path: str) -> None:
        self.path = path
        config = json.loads((Path(path) / "config.json").read_text())
        self.cameras: list[str] = config["cameras"]
        self.n_obs_steps = int(config.get("n_obs_steps", 1))
        side = int(config.get("side", SIDE))  # what it declares; it reads any size
        self.input_features = {k: {"type": "VISUAL", "shape": [3, side, side]} for k in self.cameras}
        self.dims = int(config.get("dims", 2))
        self.blind: list[int] = config.get("blind", [])  # action dims it predicts as 0 (a weak dim)
        self.spatial = bool(config.get("spatial", False))  # reads each camera's halves too
        self.input_features["observation.state"] = {"type": "STATE", "shape": [self.dims]}
        if config.get("task"):
            self.input_features["task"] = {"type": "LANGUAGE", "shape": [1]}

    def predict(self, batch: dict[str, Any]) -> np.ndarray:
        SEEN.setdefault(self.path, batch)
        last = (lambda x: x[:, -1]) if self.n_obs_steps > 1 else (lambda x: x)
        out = np.asarray(last(batch["observation.state"]), np.float64)
        for key in self.cameras:
            weights = np.asarray(WEIGHTS.get(key, np.zeros((3, 2))))
            out = out + _padded(last(batch[key]).mean(axis=(-2, -1)) @ weights, self.dims)
            if self.spatial:
                out = out + _padded(_halves(np.asarray(last(batch[key]), np.float64)), self.dims)
        out[..., self.blind] = 0.0
        return out.astype(np.float32)


class ChunkPixelModel:
    """The same function behind LeRobot's `predict_action_chunk` (torch tensors in, the task a list)."""

    def __init__(self, path: str) -> None:
        self.inner = PixelModel(path)
        self.path, self.input_features = path, self.inner.input_features
        self.config = type("Config", (), {"n_obs_steps": self.inner.n_obs_steps})()  # LeRobot's place

    def predict_action_chunk(self, batch: dict[str, Any]) -> torch.Tensor:
        SEEN.setdefault(self.path, batch)
        numpy = {k: v if isinstance(v, list) else v.cpu().numpy() for k, v in batch.items()}
        return torch.from_numpy(self.inner.predict(numpy))[:, None, :]


def load_chunk_pixel_model(path: str, device: str) -> ChunkPixelModel:
    return ChunkPixelModel(path)


def write_model(folder: Path, cameras: list[str], **config: Any) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"cameras": cameras, **config}))
    return str(folder)


def load_pixel_model(path: str, device: str) -> PixelModel:
    return PixelModel(path)
