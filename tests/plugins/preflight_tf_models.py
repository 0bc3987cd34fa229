"""Loaders for the teacher_forced tests: real demo checkpoints behind the stage's model interfaces,
with planted behaviours (noise, NaN outputs, LeRobot-style chunk API) a real model can show."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from pipeline.demo.teacher_forced import DemoModel


class Noisy(DemoModel):
    """A stochastic policy (like a diffusion head with too few steps): noise dominates its output."""

    scale = 5.0

    def predict(self, batch: Mapping[str, np.ndarray]) -> torch.Tensor:
        out = super().predict(batch)
        return out + self.scale * torch.randn_like(out) * out.std(dim=0, keepdim=True).clamp_min(1e-3)


class Jitter(Noisy):
    """Stochastic, but its per-sample error ranking is stable (tiny noise)."""

    scale = 1e-3


class NaNs(DemoModel):
    """A model whose outputs go NaN on some inputs (e.g. an fp16 overflow in one layer)."""

    def predict(self, batch: Mapping[str, np.ndarray]) -> torch.Tensor:
        out = super().predict(batch).clone()
        out[::5] = float("nan")
        return out


class Chunked:
    """LeRobot-style: `predict_action_chunk` on torch tensors, a chunk of 3 steps (repeats the action)."""

    def __init__(self, path: str, device: str) -> None:
        self.inner = DemoModel(path, device)
        self.input_features = self.inner.input_features
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def predict_action_chunk(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        out = self.inner.predict({k: v.cpu().numpy() for k, v in batch.items()})
        return out[:, None, :].repeat(1, 3, 1)


def noisy(path: str, device: str) -> Noisy:
    return Noisy(path, device)


def jitter(path: str, device: str) -> Jitter:
    return Jitter(path, device)


def nans(path: str, device: str) -> NaNs:
    return NaNs(path, device)


def chunked(path: str, device: str) -> Chunked:
    return Chunked(path, device)


class Biased(DemoModel):
    """Clearly but modestly worse: every output overshoots by 30 % (per sample, so deterministic)."""

    def predict(self, batch: Mapping[str, np.ndarray]) -> torch.Tensor:
        return super().predict(batch) * 1.3


class WrongWidth(DemoModel):
    """Predicts one action dim too many (a checkpoint for another robot)."""

    def predict(self, batch: Mapping[str, np.ndarray]) -> torch.Tensor:
        out = super().predict(batch)
        return torch.cat([out, out[:, :1]], dim=1)


class FourStep(Chunked):
    """A 4-step chunk whose first step is the demo policy's action."""

    def predict_action_chunk(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return super().predict_action_chunk(batch)[:, :1].repeat(1, 4, 1)


def biased(path: str, device: str) -> Biased:
    return Biased(path, device)


def wrong_width(path: str, device: str) -> WrongWidth:
    return WrongWidth(path, device)


def four_step(path: str, device: str) -> FourStep:
    return FourStep(path, device)


def torch_pickle(path: str, device: str) -> FourStep:
    """A loader that opens a `model.pt` the safe way, as a careful user's would: torch refuses a file
    that needs unpickling with several paragraphs of advice."""
    torch.load(f"{path}/model.pt", map_location=device, weights_only=True)
    return FourStep(path, device)
