"""A camera ACT that `lerobot-train` itself trains for a few steps on the demo dataset (both cameras,
ImageNet image stats as LeRobot writes them), then `stage=full` on its outputs as a user would run it
(its checkpoint, its train_config.json, the dataset, the shipped train_cmd): clear, no hard finding.
Optional: only where `lerobot` is importable (scripts/test_lerobot.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import DemoCache, gate_of, launch, run_dir_of
from tests.trainers.helpers import LEROBOT_ONLY, OFFLINE, blocking, hard_findings, train_cmd_override

pytestmark = LEROBOT_ONLY
SMALL = [  # a small ACT (one layer each way, no downloaded backbone weights) on the CPU, 4 steps
    "--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false", "--policy.dim_model=32",
    "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1", "--policy.dim_feedforward=64",
    "--policy.pretrained_backbone_weights=null", "--num_workers=0", "--eval_freq=0", "--wandb.enable=false",
    "--steps=4", "--save_freq=4", "--batch_size=4", "--log_freq=1", "--seed=0",
]  # fmt: skip


def lerobot_train(dataset: Path, out: Path, *extra: str) -> Path:
    """`lerobot-train` (the venv's console script) on the dataset, with `extra` flags; its last
    `pretrained_model/`."""
    script = Path(sys.executable).parent / "lerobot-train"
    argv = [str(script), "--dataset.repo_id=local/demo", f"--dataset.root={dataset}",
            "--dataset.video_backend=pyav", f"--output_dir={out}", *SMALL, *extra]  # fmt: skip
    proc = subprocess.run(argv, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "checkpoints" / "last" / "pretrained_model"


def test_stage_full_on_a_camera_act_lerobot_trained_is_clear(tmp_path: Path, demo_cache: DemoCache) -> None:
    dataset = demo_cache.seed(tmp_path / "seed") / "dataset"
    model = lerobot_train(dataset, tmp_path / "train")
    config = json.loads((model / "config.json").read_text())
    cameras = [k for k, f in config["input_features"].items() if f["type"] == "VISUAL"]
    assert len(cameras) == 2, config["input_features"]  # the policy reads both cameras
    os.environ.update(OFFLINE)  # the jobs inherit the launch's environment
    cwd = tmp_path / "run"
    cwd.mkdir()
    proc = launch(
        cwd,
        "stage=full",
        "launcher=local",
        f"model.path={model}",
        f"dataset.path={dataset}",
        f"training.path={model / 'train_config.json'}",
        train_cmd_override(),
        "stages.determinism.steps=3",
        "stages.determinism.job_pair=false",
        timeout=2400,  # teacher_forced decodes both cameras and probes them on the CPU
    )
    gate = gate_of(run_dir_of(cwd, proc))
    assert not blocking(gate) and proc.returncode in (0, 3), proc.stdout[-4000:] + proc.stderr[-4000:]
    assert not hard_findings(gate)
    by_stage = {s["stage"]: s for s in gate["stages"]}
    assert by_stage["teacher_forced"]["status"] in ("pass", "warn")
    reloads = {c["id"]: c["verdict"] for c in by_stage["determinism"]["checks"] if ".reload." in c["id"]}
    assert reloads and set(reloads.values()) == {"match"}, reloads
    forward = next(c for c in by_stage["determinism"]["checks"] if c["id"].endswith("reload.forward"))
    assert set(cameras) <= set(forward["evidence"]["inputs"])  # the reloaded policy was fed both cameras
