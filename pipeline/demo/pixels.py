"""Camera frames as the demo's trainers feed them: decoded once, normalized and pooled once.

Both the demo's own training (`pipeline.demo.train`) and the determinism stage's smoke trainer
(`pipeline.demo.reference_trainer`) train the camera encoders on these, so the two cannot drift apart.
The frames come from the one frame reader (`pipeline.demo.dataset.camera_frames`), RGB uint8 as the
loader decodes them, then float 0-1 and the saved normalizer's per-channel affine, as eval sees them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pipeline.demo.dataset import camera_frames
from pipeline.demo.policy import CameraEncoder, DemoPolicy, normalize

BLOCK = 1024  # frames converted to float at a time: a block's copy, never the whole demo's


class Pixels:
    """One camera's frames, normalized and pooled once to the encoder's first size. Average pooling and a
    per-channel affine commute, so training the encoder's later layers on these is training the whole
    encoder on the frames (and 16x cheaper per step than pooling every batch again). The frames are
    pooled before the 0-1 scaling and the normalizer's affine, so those touch 16x fewer values (3x faster
    on the demo; equal to normalize-then-pool up to float rounding, ~1e-6)."""

    def __init__(self, frames: np.ndarray, stats: Mapping[str, np.ndarray], mode: str) -> None:
        pool = CameraEncoder().net[0]
        parts = []
        for start in range(0, len(frames), BLOCK):
            view = torch.from_numpy(frames[start : start + BLOCK]).permute(0, 3, 1, 2).float()
            parts.append(normalize(pool(view) / 255.0, stats, mode))
        self.pooled = torch.cat(parts) if parts else torch.zeros(0, 3, 16, 16)

    def batch(self, idx: torch.Tensor) -> torch.Tensor:
        return self.pooled[idx]


def camera_pixels(
    dataset_dir: str | Path,
    keys: Sequence[str],
    stats: Mapping[str, Mapping[str, np.ndarray]],
    modes: Mapping[str, str],
) -> list[Pixels]:
    """Every row's frame of each camera in `keys` (the policy's encoder order), decoded once through the
    frame reader and pooled; the uint8 frames are dropped as soon as they are pooled."""
    out = []
    for key in keys:
        frames = camera_frames(dataset_dir, [key])[key]
        out.append(Pixels(frames, stats.get(key, {}), modes[key]))
    return out


def forward_pooled(policy: DemoPolicy, x: torch.Tensor, pooled: Sequence[torch.Tensor]) -> torch.Tensor:
    """`policy(x, frames)` for frames already pooled by the encoders' first layer (see `Pixels`)."""
    features = [encoder.net[1:](p) for encoder, p in zip(policy.encoders, pooled, strict=True)]
    return policy.net(torch.cat([x, *features], dim=-1) if features else x)


class PooledPolicy(nn.Module):
    """`forward_pooled` as a module, so a DDP wrapper sees the forward (its gradient hooks need that);
    the policy's parameters are its only ones."""

    def __init__(self, policy: DemoPolicy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, x: torch.Tensor, pooled: Sequence[torch.Tensor] = ()) -> torch.Tensor:
        return forward_pooled(self.policy, x, pooled)
