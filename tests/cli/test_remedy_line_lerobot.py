"""The corrected line with lerobot's own composition (lerobot venv only, scripts/test_lerobot.sh): a
camera ACT that `lerobot-train` trained on the demo dataset, named by Hub id, finetuned by a line that
overrides the normalization modes it was built with. The gate blocks on the override and prints a
corrected line; that line, launched through the gate as printed (B composed by lerobot again), clears
the contract. With the dataset's cameras renamed and no `--rename_map`, the map is offered where the
base's own camera stats decide which camera is which (trained with `--dataset.use_imagenet_stats=false`:
the demo's front and wrist views differ), and the corrected line that carries it clears every row the
first gate said it would; what remains (the renamed cameras' stats, which lerobot-train looks up under
the policy's names) is exactly what it predicted, each row with its data remedy; where the
base holds ImageNet's stats for every camera (lerobot's default) nothing decides it without the
teacher-forced probe, and the row says so instead of guessing a map."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.record.remedy import CORRECTED
from tests.cli.test_training_command import hub_snapshot
from tests.conftest import DemoCache, gate_of, launch, run_dir_of
from tests.stages.teacher_forced.test_rename_map import rename_cameras
from tests.trainers.helpers import LEROBOT_ONLY, OFFLINE
from tests.trainers.test_lerobot_camera_act import lerobot_train

pytestmark = LEROBOT_ONLY
BASE_ID, IMAGENET_ID = "acme/cam_act", "acme/cam_act_imagenet"
DATA_ID, RENAMED_ID = "acme/demo_cams", "acme/demo_renamed"
FRONT, WRIST = "observation.images.front", "observation.images.wrist"
OVERRIDE = '--policy.normalization_mapping={"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ACTION": "MIN_MAX"}'
TAIL = ["--steps=5", "--policy.device=cpu", "--policy.push_to_hub=false"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, demo_cache: DemoCache) -> Path:
    """A Hugging Face cache with the camera ACT as BASE_ID and HF_LEROBOT_HOME with the demo dataset as
    DATA_ID and, renamed top/hand, as RENAMED_ID."""
    root = tmp_path_factory.mktemp("hub")
    dataset = demo_cache.seed(root / "seed") / "dataset"
    hub_snapshot(
        root / "hub", BASE_ID, lerobot_train(dataset, root / "train", "--dataset.use_imagenet_stats=false")
    )
    hub_snapshot(root / "hub", IMAGENET_ID, lerobot_train(dataset, root / "train_imagenet"))
    home = root / "lerobot"
    shutil.copytree(dataset, home / DATA_ID)
    shutil.copytree(dataset, home / RENAMED_ID)
    rename_cameras(home / RENAMED_ID, {FRONT: "observation.images.top", WRIST: "observation.images.hand"})
    return root


def gate_line(cwd: Path, hub: Path, line: list[str]) -> tuple[subprocess.CompletedProcess[str], dict]:
    cwd.mkdir()
    env = {"HF_HUB_CACHE": str(hub / "hub"), "HF_LEROBOT_HOME": str(hub / "lerobot"), **OFFLINE}
    os.environ.update(env)  # the launch runs its jobs with the environment it was given
    proc = launch(cwd, "stage=contract", "launcher=local", "wait=true", "--", *line, seed_demo=False)
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "composed by lerobot" in proc.stdout
    stage = next(s for s in gate_of(run_dir_of(cwd, proc))["stages"] if s["stage"] == "contract")
    return proc, {c["id"]: c for c in stage["checks"]}


def blocking(rows: dict[str, dict]) -> set[str]:
    return {k for k, c in rows.items() if c["verdict"] == "mismatch" and c["severity"] == "hard"}


def corrected(proc: subprocess.CompletedProcess[str]) -> list[str]:
    lines = proc.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("corrected line (not run"))
    return shlex.split(lines[head + 1])


@pytest.mark.parametrize("data_id", [DATA_ID, RENAMED_ID], ids=["override", "override_renamed"])
def test_the_corrected_line_of_a_hub_base_camera_finetune_clears(hub: Path, tmp_path: Path, data_id: str):
    typed = ["lerobot-train", f"--policy.path={BASE_ID}", f"--dataset.repo_id={data_id}", OVERRIDE, *TAIL]
    first, rows = gate_line(tmp_path / "typed", hub, typed)
    assert first.returncode == 3 and {"contract.normalization.mode:STATE"} <= blocking(rows)
    line = corrected(first)
    assert rows[CORRECTED]["evidence"]["argv"] == line and OVERRIDE not in line
    if data_id == RENAMED_ID:
        (rename,) = [a for a in line if a.startswith("--rename_map=")]
        assert json.loads(rename.split("=", 1)[1]) == {
            "observation.images.top": FRONT,
            "observation.images.hand": WRIST,
        }
    second, again = gate_line(tmp_path / "corrected", hub, line)
    remaining = {r["id"] for r in rows[CORRECTED]["evidence"]["remaining"]}
    assert blocking(again) == remaining and not set(rows[CORRECTED]["evidence"]["cleared"]) & remaining
    if data_id == DATA_ID:
        assert second.returncode == 0 and not remaining
    else:  # lerobot-train normalizes with the dataset's stats looked up by the policy's (renamed) name
        assert remaining == {f"contract.normalization.renamed:{k}" for k in (FRONT, WRIST)}
        assert all(again[k]["remedy"]["kind"] == "data" for k in remaining), [again[k] for k in remaining]


def test_renamed_cameras_a_base_with_imagenet_stats_cannot_tell_apart_get_no_map(hub: Path, tmp_path: Path):
    typed = ["lerobot-train", f"--policy.path={IMAGENET_ID}", f"--dataset.repo_id={RENAMED_ID}", *TAIL]
    first, rows = gate_line(tmp_path / "typed", hub, typed)
    assert first.returncode == 3
    renamed = [rows[k] for k in blocking(rows) if k.startswith("contract.layout.key:observation.images.")]
    assert renamed and all(r["remedy"]["kind"] == "undecided" for r in renamed), [
        r.get("remedy") for r in renamed
    ]
    assert all("probe" in r["remedy"]["decide"] for r in renamed)
    assert not any(a.startswith("--rename_map") for a in rows[CORRECTED]["evidence"].get("argv") or [])
