"""Rows that need a declaration to compare against: names, action mode, image encoding, legacy
placeholder buffers, and the known-good cross-check."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml
from omegaconf import OmegaConf
from safetensors.numpy import save_file

from pipeline.readers import read_dataset, read_model, read_training
from pipeline.stages import contract
from tests.stages.contract.helpers import OPTIONS, STAGE_CFG, card_from, hard, run, training_yaml

RECORD = "SamueleSandrini__record-test"
QUANTILES = {"STATE": "QUANTILES", "ACTION": "QUANTILES"}
NAMES = [
    "shoulder_pan.pos",
    "shoulder_lift.pos",
    "elbow_flex.pos",
    "wrist_flex.pos",
    "wrist_roll.pos",
    "gripper.pos",
]


def test_declared_names_permuted(real_data: Path, tmp_path: Path) -> None:
    model = card_from(real_data / RECORD, tmp_path / "card", QUANTILES)
    swapped = [NAMES[0], NAMES[2], NAMES[1], *NAMES[3:]]
    training = training_yaml(tmp_path, QUANTILES, features={"observation.state": {"names": swapped}})
    row = hard(run(model, training, real_data / RECORD))["contract.layout.names:observation.state"]
    assert row.evidence["problems"]["C"]["permuted_dims"] == [1, 2]


def test_action_mode_declared(real_data: Path, tmp_path: Path) -> None:
    """SO-101 actions track the next state (checked: corr 0.99 vs 0.13 with the step)."""
    model = card_from(real_data / RECORD, tmp_path / "card", QUANTILES)
    checks = {
        c.id: c
        for c in run(model, training_yaml(tmp_path, QUANTILES, action_mode="delta"), real_data / RECORD)
    }
    row = checks["contract.units.action_mode"]
    assert row.verdict == "mismatch" and row.actual == "absolute" and row.evidence["corr_next_state"] > 0.9
    checks = {
        c.id: c
        for c in run(model, training_yaml(tmp_path, QUANTILES, action_mode="absolute"), real_data / RECORD)
    }
    assert checks["contract.units.action_mode"].verdict == "match"


def test_image_scale_and_channel_order_from_npz(real_data: Path, tmp_path: Path) -> None:
    """hybrid-rl obs_rgb: uint8, per-channel means 67.0 / 85.8 / 104.6 (R < G < B, checked with numpy)."""
    data = real_data / "ch33nchan__hybrid-rl/data/raw/mj_pick_place_phase_boost/episode_desc_000"
    means = read_dataset(data, OPTIONS).images["obs_rgb"]["channel_means"]
    bgr_stats = {"mean": [m / 255 for m in reversed(means)], "max": [1.0, 1.0, 1.0]}
    card = {
        "source": "test",
        "normalization_mapping": {"STATE": "MEAN_STD"},
        "image_scale": "0-1",
        "features": {
            "obs_rgb": {"type": "VISUAL", "shape": [128, 128, 3], "stats": bgr_stats},
            "obs_state": {"type": "STATE", "shape": [9]},
        },
    }
    (tmp_path / "contract.yaml").write_text(yaml.safe_dump(card))
    checks = {c.id: c for c in run(tmp_path, training_yaml(tmp_path, {"STATE": "MEAN_STD"}), data)}
    assert checks["contract.encoding.channels:obs_rgb"].actual == "BGR?"
    scale = checks["contract.encoding.image_scale:obs_rgb"]
    assert scale.verdict == "mismatch" and scale.actual == "0-255" and scale.expected == "0-1"


def test_legacy_placeholder_buffers(tmp_path: Path, real_data: Path) -> None:
    """Pre-processor LeRobot checkpoints keep stats as buffers; `inf` means they were never filled."""
    model = tmp_path / "legacy"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "input_shapes": {"observation.state": [6]},
                "output_shapes": {"action": [6]},
                "input_normalization_modes": {"observation.state": "mean_std"},
                "output_normalization_modes": {"action": "mean_std"},
            }
        )
    )
    save_file(
        {
            "normalize_inputs.buffer_observation_state.mean": np.full(6, np.inf, np.float32),
            "normalize_inputs.buffer_observation_state.std": np.full(6, np.inf, np.float32),
            "unnormalize_outputs.buffer_action.mean": np.zeros(6, np.float32),
            "unnormalize_outputs.buffer_action.std": np.ones(6, np.float32),
        },
        str(model / "model.safetensors"),
    )
    a = read_model(model)
    assert a.kind == "lerobot_legacy" and a.norm_map == {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    checks, _ = contract.reconcile(
        a, read_training(training_yaml(tmp_path, {})), read_dataset(real_data / RECORD, OPTIONS), STAGE_CFG
    )
    blocking = {c.id for c in checks if c.blocking}
    assert "contract.reload.placeholders:observation.state" in blocking
    assert "contract.reload.placeholders:action" not in blocking


def test_known_good_cross_check(real_data: Path, tmp_path: Path) -> None:
    """A reference that shares the dataset: a finding it also has is upstream, otherwise model-specific."""
    good = card_from(real_data / RECORD, tmp_path / "good", QUANTILES)
    bad = tmp_path / "bad"
    bad.mkdir()
    card = yaml.safe_load((good / "contract.yaml").read_text())
    card["normalization_mapping"] = {"STATE": "MEAN_STD", "ACTION": "QUANTILES"}
    (bad / "contract.yaml").write_text(yaml.safe_dump(card))
    b, c = read_training(training_yaml(tmp_path, QUANTILES)), read_dataset(real_data / RECORD, OPTIONS)
    checks, _ = contract.reconcile(read_model(bad), b, c, STAGE_CFG)
    cfg = OmegaConf.create({"known_good": {"path": str(good)}})
    row = contract._known_good(cfg, STAGE_CFG, b, c, checks)[0]
    assert row.category == "diagnostics"
    assert row.actual == {"contract.normalization.mode:STATE": "specific to the audited model"}
