"""Brief, deterministic training of the demo policy on the demo dataset (behaviour cloning, MSE).

Stable API: `train_policy(dataset_dir, seed=0, steps=300, hidden=64) -> (DemoPolicy, stats, spec)`.
The normalizer stats are the dataset's own `meta/stats.json`, as LeRobot does, and the same stats are
saved with the checkpoint, so the saved processors encode exactly what training used.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pipeline.demo.cameras import CAMERAS
from pipeline.demo.dataset import read_frames
from pipeline.demo.pixels import Pixels, camera_pixels, forward_pooled
from pipeline.demo.policy import (
    ACTION_KEY,
    ENV_KEY,
    STATE_KEY,
    DemoPolicy,
    PolicySpec,
    default_spec,
    normalize,
)
from pipeline.progress import track
from pipeline.readers import LeRobotData


def load_stats(dataset_dir: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """The dataset's shipped stats (float64), read through the one LeRobot data API."""
    return LeRobotData(dataset_dir).stats()


def train_policy(
    dataset_dir: str | Path,
    seed: int = 0,
    steps: int = 300,
    hidden: int = 64,
    batch: int = 256,
    lr: float = 3e-3,
) -> tuple[DemoPolicy, dict, PolicySpec]:
    frames = read_frames(dataset_dir)
    data = LeRobotData(dataset_dir)
    stats = data.stats()  # load_stats, on the one reader
    cams = [k for k in CAMERAS if k in data.video_keys()]
    shapes = {k: [3, *data.features[k]["shape"][:2]] for k in cams}  # info.json's HWC, as the policy's CHW
    spec = default_spec(
        frames[STATE_KEY].shape[1], frames[ACTION_KEY].shape[1], frames[ENV_KEY].shape[1], cameras=shapes
    )
    modes = {
        k: spec.normalization_mapping[f["type"]]
        for k, f in {**spec.input_features, **spec.output_features}.items()
    }
    vectors = [k for k in spec.input_features if k not in cams]
    x = np.concatenate([normalize(frames[k].astype(np.float32), stats[k], modes[k]) for k in vectors], axis=1)
    y = normalize(frames[ACTION_KEY].astype(np.float32), stats[ACTION_KEY], modes[ACTION_KEY])
    pixels = camera_pixels(dataset_dir, cams, stats, modes)  # one camera's uint8 frames in memory at a time
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small net: thread fan-out costs more than it gains, and stays deterministic
    try:
        return _fit(x, y, pixels, seed, steps, hidden, batch, lr), stats, spec
    finally:
        torch.set_num_threads(threads)


def _fit(
    x: np.ndarray,
    y: np.ndarray,
    pixels: list[Pixels],
    seed: int,
    steps: int,
    hidden: int,
    batch: int,
    lr: float,
) -> DemoPolicy:
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    policy = DemoPolicy(x.shape[1], y.shape[1], hidden, cameras=len(pixels))
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)
    for _ in track(range(steps), f"demo: training a policy ({steps} steps)"):
        idx = torch.randint(0, len(xt), (batch,), generator=generator)
        predicted = forward_pooled(policy, xt[idx], [p.batch(idx) for p in pixels])
        loss = torch.nn.functional.mse_loss(predicted, yt[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    policy.eval()
    policy.final_loss = float(loss.detach()) if steps else None  # type: ignore[attr-defined]
    return policy
