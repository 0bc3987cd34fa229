"""A camera ACT that real `lerobot-train` trained on the demo data, kept in a local Hugging Face cache as
`local/act_cam`, finetuned onto the same data with its cameras renamed (front -> top, wrist -> hand):
with the right `--rename_map`, `stage=full` feeds every stage the renamed cameras and blocks only on the
rows that say what lerobot 0.4.4 does with the cameras' stats, the reload's and the contract's (kept
under the dataset's names, so its normalizer passes the cameras through unnormalized, at training as at
inference); with the map crossed the record never clears silently. Optional: only where `lerobot` is
importable (scripts/test_lerobot.sh)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.cli.test_training_command import hub_snapshot
from tests.conftest import DemoCache, gate_of, launch, run_dir_of
from tests.stages.teacher_forced.pixels import FRONT, WRIST
from tests.stages.teacher_forced.test_rename_map import HAND, TOP, rename_cameras
from tests.trainers.helpers import LEROBOT_ONLY, OFFLINE, environment_rows
from tests.trainers.test_lerobot_camera_act import lerobot_train

pytestmark = LEROBOT_ONLY
BASE_ID, DATA_ID = "local/act_cam", "local/top_hand"
RIGHT = {TOP: FRONT, HAND: WRIST}
CROSSED = {TOP: WRIST, HAND: FRONT}
FLAGS = [  # a short finetune on the CPU
    "--policy.device=cpu", "--policy.push_to_hub=false", "--num_workers=0", "--eval_freq=0",
    "--wandb.enable=false", "--batch_size=4", "--dataset.video_backend=pyav", "--steps=4", "--save_freq=4",
    "--log_freq=1", "--seed=0",
]  # fmt: skip
STATS_ROW = "determinism.reload.stats_populated"


@pytest.fixture(scope="module")
def hf(tmp_path_factory: pytest.TempPathFactory, demo_cache: DemoCache) -> Path:
    """The hub cache with the trained base as local/act_cam, and the renamed dataset as local/top_hand."""
    root = tmp_path_factory.mktemp("rename_map")
    dataset = demo_cache.seed(root / "seed") / "dataset"
    base = lerobot_train(dataset, root / "train")
    hub_snapshot(root / "hf" / "hub", BASE_ID, base)
    shutil.copytree(dataset, root / "hf" / "lerobot" / DATA_ID)
    rename_cameras(root / "hf" / "lerobot" / DATA_ID, {FRONT: TOP, WRIST: HAND})
    return root / "hf"


def finetune(hf: Path, cwd: Path, rename: dict[str, str], mp: pytest.MonkeyPatch, *overrides: str) -> dict:
    """The finetune line launched as a user in an activated venv would (its lerobot-train on PATH)."""
    env = {**OFFLINE, "HF_HUB_CACHE": str(hf / "hub"), "HF_LEROBOT_HOME": str(hf / "lerobot")}
    for name, value in env.items():
        mp.setenv(name, value)
    mp.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    line = ["lerobot-train", f"--policy.path={BASE_ID}", f"--dataset.repo_id={DATA_ID}",
            f"--rename_map={json.dumps(rename)}", *FLAGS]  # fmt: skip
    cwd.mkdir()
    proc = launch(cwd, "launcher=local", "wait=true", *overrides, "--", *line, timeout=2400, seed_demo=False)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return gate_of(run_dir_of(cwd, proc))


def rows(gate: dict) -> dict[str, dict]:
    return {c["id"]: c for s in gate["stages"] for c in s["checks"]}


def test_the_right_map_blocks_only_on_what_lerobot_does_with_the_renamed_cameras_stats(
    hf, tmp_path, monkeypatch
):
    gate = finetune(hf, tmp_path / "run", RIGHT, monkeypatch, "stage=full", "stages.determinism.steps=3",
                    "stages.determinism.job_pair=false")  # fmt: skip
    found = rows(gate)
    blocking = {r.partition(": ")[0] for r in gate["reasons"]} - environment_rows()
    renamed = {f"contract.normalization.renamed:{key}": data for data, key in RIGHT.items()}
    assert blocking <= {STATS_ROW, *renamed}, gate["reasons"]
    for row_id, data in renamed.items():  # the contract says it from the inputs, without the reload
        assert found[row_id]["verdict"] == "mismatch" and found[row_id]["evidence"]["dataset_key"] == data
    assert "teacher_forced.input.model" not in found  # fed the renamed cameras
    assert found["container_check.training_runtime"]["verdict"] == "match"  # pyav typed: it decodes
    assert found["determinism.reload.forward"]["verdict"] == "match", found["determinism.reload.forward"]
    stats = found[STATS_ROW]
    assert (
        stats["verdict"] == "mismatch"
        and "passes an input without stats through unnormalized" in stats["message"]
    )
    assert "at training as at inference" in stats["message"]
    assert f"held under the dataset's names {sorted([HAND, TOP])}" in stats["message"]


def test_the_crossed_map_is_never_a_silent_clear(hf, tmp_path, monkeypatch):
    gate = finetune(hf, tmp_path / "run", CROSSED, monkeypatch, "stage=teacher_forced")
    said = rows(gate)["teacher_forced.rename_map.model"]  # a 4-step ACT: the exchange probe cannot tell
    assert said["verdict"] == "mismatch" and said["evidence"]["fed"] == {FRONT: HAND, WRIST: TOP}, said
    assert "no stage could tell" in said["message"] or "crossed" in said["message"]
