"""Repeatability of a model declared deterministic (issue 31, item 4): a chunking model (ACT-like, a
(B, chunk, D) output scored at its first `horizon` steps) is compared with itself over every chunk
step under two seeds, never with a prediction already cut to the horizon; seed noise anywhere in the
chunk, even past the scored steps, is still named. Real FFV1 video and the pixel model of pixels.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.stages.teacher_forced import repeatability
from tests.stages.teacher_forced.helpers import by_id, run_stage
from tests.stages.teacher_forced.pixels import CAMERAS, ChunkPixelModel, write_dataset, write_model

HERE = "tests.stages.teacher_forced.test_repeatability"
CHUNK = 100


class ChunkOf100(ChunkPixelModel):
    """ACT-like: a whole chunk of CHUNK steps per call (the pixel model's action, drifting per step);
    `noise_from` adds seed-dependent noise (torch's global generator) from that chunk step on."""

    noise_from: int | None = None

    def predict_action_chunk(self, batch: dict) -> torch.Tensor:
        first = super().predict_action_chunk(batch)  # (B, 1, D)
        chunk = first + 0.01 * torch.arange(CHUNK, dtype=first.dtype)[None, :, None]
        if self.noise_from is not None:
            chunk[:, self.noise_from :] += torch.randn_like(chunk[:, self.noise_from :])
        return chunk


class NoisyTail(ChunkOf100):
    noise_from = 50  # beyond any scored horizon here


class Noisy(ChunkOf100):
    noise_from = 0


def load_chunk(path: str, device: str) -> ChunkOf100:
    return ChunkOf100(path)


def load_noisy_tail(path: str, device: str) -> NoisyTail:
    return NoisyTail(path)


def load_noisy(path: str, device: str) -> Noisy:
    return Noisy(path)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("repeat") / "data")


def _rows(dataset: Path, run_dir: Path, horizon: int) -> dict:
    model = write_model(run_dir / "model", list(CAMERAS))
    models = [
        {"name": name, "path": model, "loader": f"{HERE}:{loader}"}
        for name, loader in (("act", "load_chunk"), ("tail", "load_noisy_tail"), ("noisy", "load_noisy"))
    ]
    result = run_stage(str(dataset), run_dir, models=models, samples=24, horizon=horizon, plots=False)
    return {k.removeprefix("repeatability."): r for k, r in by_id(result).items() if "repeatab" in k}


@pytest.mark.parametrize("horizon", [1, 4])
def test_a_deterministic_chunk_model_is_not_called_seed_dependent(dataset, tmp_path, horizon):
    rows = _rows(dataset, tmp_path, horizon)
    act = rows["act"]
    assert act.verdict == "match", act.message
    assert act.evidence["shape"] == [16, CHUNK, 2] and "deterministic" in act.message
    for name, first_step in (("tail", 50), ("noisy", 0)):
        row = rows[name]
        assert row.verdict == "mismatch" and "declare stochastic: true" in row.message, row.message
        assert row.evidence["chunk_steps_differing"][0] == first_step
        assert row.evidence["samples_differing"] == 16 and row.evidence["max_abs_diff"] > 0


def test_same_outputs_compares_whole_chunks_and_names_where_they_differ():
    chunk = np.random.default_rng(0).normal(size=(4, 10, 3)).astype(np.float32)
    assert repeatability.same_outputs(chunk, chunk.copy())["identical"]
    cut = repeatability.same_outputs(chunk, chunk[:, :1])
    assert not cut["identical"] and cut["differs"] == "output shapes [4, 10, 3] vs [4, 1, 3]"
    nan = chunk.copy()
    nan[1, 7, 2] = np.nan
    assert repeatability.same_outputs(nan, nan.copy())["identical"]  # NaN where both are NaN: same
    moved = repeatability.same_outputs(chunk, nan)
    assert moved["chunk_steps_differing"] == [7] and moved["samples_differing"] == 1
    assert moved["max_abs_diff"] == np.inf
