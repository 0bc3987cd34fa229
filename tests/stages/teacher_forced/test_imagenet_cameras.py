"""Exchanged cameras under a camera policy whose processor carries ImageNet image stats (issue 31, item
4): LeRobot replaces every camera's stats with ImageNet's (`use_imagenet_stats`), so the base's stats
are the same for both cameras and cannot tell them apart; the counterfactual probes, which ask the
model, still name both. The stats are the real ones lerobot 0.4.4 saved in the pack's `act/`
preprocessor; the model normalizes each camera with them, as LeRobot's normalizer step does."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tests.stages.teacher_forced.helpers import by_id, run_stage
from tests.stages.teacher_forced.pixels import (
    CAMERAS,
    FRONT,
    WEIGHTS,
    WRIST,
    PixelModel,
    _padded,
    write_dataset,
    write_model,
)

STATS = "policy_preprocessor_step_3_normalizer_processor.safetensors"
SWAP = f"exchanged:{FRONT}|{WRIST}"


class ImageNetPixelModel(PixelModel):
    """The pixel model's function computed from LeRobot-normalized cameras: (x - mean) / std per
    channel with the stats in its preprocessor state file (every camera's the same, ImageNet's)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        saved = load_file(Path(path) / STATS)
        self.stats = {k: (saved[f"{k}.mean"].reshape(3), saved[f"{k}.std"].reshape(3)) for k in self.cameras}

    def predict(self, batch: dict) -> np.ndarray:
        out = np.asarray(batch["observation.state"], np.float64)
        for key in self.cameras:
            mean, std = self.stats[key]
            normalized = (batch[key] - mean[:, None, None]) / std[:, None, None]
            channels = normalized.mean(axis=(-2, -1)) * std + mean  # the model's weights undo the scale
            out = out + _padded(channels @ np.asarray(WEIGHTS[key]), self.dims)
        return out.astype(np.float32)


def load_imagenet_pixel_model(path: str, device: str) -> ImageNetPixelModel:
    return ImageNetPixelModel(path)


@pytest.fixture
def model(real_data: Path, tmp_path: Path) -> str:
    """A camera policy folder with the real ImageNet camera stats (the pack's front camera's, for both
    of this dataset's cameras, as lerobot's make_dataset writes the same stats for every camera)."""
    path = write_model(tmp_path / "model", list(CAMERAS))
    real = load_file(real_data / "lerobot-0.4.4/act/pretrained_model" / STATS)
    imagenet = {s: real[f"observation.images.front.{s}"] for s in ("mean", "std")}
    assert all(np.array_equal(imagenet[s], real[f"observation.images.top.{s}"]) for s in imagenet)
    save_file({f"{k}.{s}": v for k in CAMERAS for s, v in imagenet.items()}, Path(path) / STATS)
    return path


def _probes(data: Path, model: str, run: Path) -> dict:
    models = [{"name": "base", "path": model, "loader": f"{__name__}:load_imagenet_pixel_model"}]
    rows = by_id(run_stage(str(data), run, plots=False, models=models, samples=96))
    return {k.removeprefix("probe.base."): r for k, r in rows.items() if k.startswith("probe.base.")}


def _hard(probes: dict) -> set[str]:
    return {k for k, r in probes.items() if r.verdict == "mismatch" and r.severity == "hard"}


def test_exchanged_cameras_are_named_although_the_image_stats_tie(model, tmp_path):
    probes = _probes(write_dataset(tmp_path / "data", exchanged=True), model, tmp_path / "run")
    assert _hard(probes) == {SWAP}, {k: r.message for k, r in probes.items() if r.verdict != "match"}
    row = probes[SWAP]
    assert row.feature == f"{FRONT}|{WRIST}" and f"{FRONT} and {WRIST} exchanged" in row.message
    assert row.evidence["ci"][1] < 0 and row.actual <= -0.1


def test_the_same_cameras_as_recorded_give_no_camera_finding(model, tmp_path):
    shutil.rmtree(tmp_path / "data", ignore_errors=True)
    probes = _probes(write_dataset(tmp_path / "data"), model, tmp_path / "run")
    assert _hard(probes) == set() and probes[SWAP].verdict == "match"
