"""The determinism stage end to end through the launcher (local executor), as a user runs it.

Every run trains for real on CPU: the reference trainer on a tiny LeRobot v3.0 dataset, or the test
trainer standing in for a user's own script.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from pipeline.errors import InputError
from pipeline.stages import StageContext, determinism
from pipeline.stages.determinism.config import DeterminismConfig
from tests.conftest import FAULTY_FULL_GROUP, Launched, gate_of, run_dir_of
from tests.in_process_launch import launch_here
from tests.stages.determinism.helpers import (
    REFERENCE_CMD,
    REFERENCE_LOADER,
    TINY_TRAINER,
    gate_reasons,
    reference_overrides,
    run_stage,
    stage_cfg,
    trainer_cmd,
)

BASE = (
    "launcher=local",
    "stage=determinism",
    "~demo",
    "stages.determinism.steps=3",
    "launcher.poll_s=0.2",
    *reference_overrides(),
)
# the parts a launch with the default job_pair plans (ddp_procs=1: no ddp part)
LAUNCHED_PARTS = ("twin_a", "twin_b", "control", "bare_a", "bare_b")


def checks(run_dir: Path) -> dict[str, dict]:
    stage = next(s for s in gate_of(run_dir)["stages"] if s["stage"] == "determinism")
    return {c["id"].removeprefix("determinism."): c for c in stage["checks"]}


def test_identical_twins_and_differing_control_pass_with_ddp_ranks_agreeing(tmp_path, tiny_dataset):
    proc = launch_here(tmp_path, *BASE, f"dataset.path={tiny_dataset}", "stages.determinism.ddp_procs=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = run_dir_of(tmp_path, proc)
    found = checks(run_dir)
    assert gate_of(run_dir)["gate"] == "clear"
    assert {k: c["verdict"] for k, c in found.items() if not k.startswith("reload.")} == {
        "twins": "match",
        "control": "match",
        "device": "match",
        "ddp": "match",
        "conditions": "match",  # round two: the pair under the training job's environment agrees too
        "horizon": "match",
        "envelope": "match",  # no earlier runs yet: an informative row keeping the curve
    }
    assert all(c["verdict"] == "match" for k, c in found.items() if k.startswith("reload."))
    twin = found["twins"]["evidence"]["twin_a"]
    assert twin["env_set"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert twin["env_set"]["PYTHONHASHSEED"] == "0"
    assert twin["settings"]["deterministic_algorithms"] is True and twin["device"]["torch"]
    assert found["ddp"]["evidence"]["steps"] == {"0": 3, "1": 3}
    plan = json.loads((run_dir / "plan.json").read_text())["jobs"]
    assert {n for n in plan if n.startswith("determinism.")} == {
        "determinism.twin_a",
        "determinism.twin_b",
        "determinism.control",
        "determinism.ddp",
        "determinism.bare_a",  # round two: the pair under the training job's environment
        "determinism.bare_b",
    }
    assert all(plan[f"determinism.{p}"]["resources"]["cpus_per_task"] == 1 for p in ("twin_a", "twin_b"))
    bare = found["conditions"]["evidence"]["bare_a"]
    assert "PYTHONHASHSEED" in bare["env_unset"] and bare["conditions"] == "job"


@pytest.mark.xdist_group(FAULTY_FULL_GROUP)
def test_demo_faulty_is_blocked_at_its_first_divergent_step(faulty_full: Launched):
    """demo=faulty: the reference trainer shuffles from OS entropy; the stage names where twins part.

    Read from the session's full faulty launch (tests/conftest.py `faulty_full`, the golden record's),
    which runs this stage on the faulty demo among the others: a launch of its own cost a demo trainer
    pair and a launch more for the same rows."""
    proc = faulty_full.proc
    assert proc.returncode == 3, proc.stdout + proc.stderr
    run_dir = run_dir_of(faulty_full.cwd, proc)
    twins = checks(run_dir)["twins"]
    assert twins["verdict"] == "mismatch" and twins["severity"] == "hard"
    assert "first divergent step 1: loss" in twins["message"] and "ULP" in twins["message"]
    assert twins["evidence"]["divergences"]["loss"]["step"] == 1
    assert "--fault" in twins["evidence"]["twin_a"]["argv"]
    assert (
        twins["evidence"]["twin_a"]["argv"][twins["evidence"]["twin_a"]["argv"].index("--fault") + 1]
        == "unseeded_shuffle"
    )
    gate = gate_of(run_dir)
    assert gate["gate"] == "blocked"
    assert any(
        r.startswith("determinism.twins: same-seed twins diverge: first divergent step 1")
        for r in gate["reasons"]
    )


def test_crashed_twin_is_an_error_a_seed_blind_control_unverifiable_and_warn_only_lists_ops(tmp_path):
    """One run of the stage's parts (in-process, as the part jobs run them: what is tested is the merge,
    not the launch, which the twins test above covers), three findings: twin_b exits 1, the control
    reuses the twins' seed, and the user's trainer hits an op with no deterministic CPU implementation
    under warn_only."""
    cfg = stage_cfg(
        train_cmd=trainer_cmd(TINY_TRAINER, "--crash-if-out-contains", "twin_b", "--nondet-op"),
        steps=3,
        control_seed=0,
        warn_only=True,
        **{"reload.enabled": False},
    )
    result, found = run_stage(tmp_path, cfg, LAUNCHED_PARTS)
    assert found["twins"].verdict == "error" and "twin_b exited 1" in found["twins"].message
    assert "planted crash" in found["twins"].evidence["twin_b"]["log_tail"]
    assert found["control"].verdict == "unverifiable"  # twin_a vs a control with the same seed
    ops = found["nondeterministic_ops"]
    assert ops.verdict == "mismatch" and ops.severity == "soft"
    assert found["nondeterministic_ops"].actual == ["put_"]
    # the gate a launch writes: blocked (exit 3), by these two rows only
    assert set(gate_reasons(result)) == {"determinism.twins", "determinism.control"}


def stage_config(tmp_path: Path, dataset: Path, **changes) -> DictConfig:
    cfg = OmegaConf.create(
        {
            "demo": {"variant": "default"},
            "model": {"path": None},
            "training": {"path": None},
            "dataset": {"path": str(dataset)},
            "stages": {"determinism": OmegaConf.structured(DeterminismConfig)},
        }
    )
    cfg.stages.determinism.train_cmd, cfg.stages.determinism.reload.loader = REFERENCE_CMD, REFERENCE_LOADER
    for key, value in changes.items():
        OmegaConf.update(cfg, f"stages.determinism.{key}", value)
    return cfg


def test_a_shell_string_train_cmd_is_an_input_error_naming_the_key(tmp_path, tiny_dataset):
    cfg = stage_config(tmp_path, tiny_dataset, train_cmd="python train.py --seed {seed}")
    ctx = StageContext(run_dir=tmp_path, stage="determinism")
    with pytest.raises(InputError, match=r"stages.determinism.train_cmd: .*shell string is not accepted"):
        determinism.run(cfg, ctx)
    with pytest.raises(InputError, match="shell string"):
        determinism.runner.run_part(cfg, StageContext(run_dir=tmp_path, stage="determinism", part="twin_a"))
    assert "InputError" in json.loads((ctx.part_dir("twin_a") / "part.json").read_text())["log_tail"]


def test_parts_that_never_ran_are_errors_not_a_pass(tmp_path, tiny_dataset):
    ctx = StageContext(run_dir=tmp_path, stage="determinism")
    result = determinism.run(stage_config(tmp_path, tiny_dataset), ctx)
    verdicts = {c.id: c.verdict for c in result.checks}
    assert verdicts["determinism.twins"] == verdicts["determinism.control"] == "error"
    assert verdicts["determinism.reload.checkpoint"] == "error" and result.status == "error"


LEROBOT_TRAIN = ["{python}", "-m", "pipeline.trainers.lerobot_train", "--seed", "{seed}", "--out", "{out}"]
NO_LEROBOT = pytest.mark.skipif(
    importlib.util.find_spec("lerobot") is not None, reason="lerobot is importable here: nothing to refuse"
)


@NO_LEROBOT
@pytest.mark.parametrize("key", ["train_cmd", "ddp_cmd"])
def test_the_lerobot_train_wrapper_without_lerobot_is_refused_before_planning(key, tiny_dataset):
    """The wrapper declares `REQUIRES = ("lerobot",)`: a command that runs it where lerobot is not
    importable is a ConfigError naming the key (the part jobs used to run and fail one by one)."""
    from pipeline import stages
    from pipeline.errors import ConfigError

    section = {"train_cmd": ["{python}", "my_train.py", "--seed", "{seed}"], key: LEROBOT_TRAIN}
    cfg = OmegaConf.create({"dataset": {"path": str(tiny_dataset)}, "stages": {"determinism": section}})
    with pytest.raises(ConfigError) as info:
        stages.missing_keys(stages.get("determinism"), cfg)
    assert info.value.key == f"stages.determinism.{key}"
    assert "pipeline.trainers.lerobot_train" in str(info.value) and "lerobot: not importable" in str(
        info.value
    )


@NO_LEROBOT
def test_the_lerobot_train_wrapper_without_lerobot_is_exit_2_at_launch(tmp_path, tiny_dataset):
    cmd = "stages.determinism.train_cmd=[" + ",".join(f"'{i}'" for i in LEROBOT_TRAIN) + "]"
    proc = launch_here(tmp_path, "launcher=local", "stage=full", "~demo", f"dataset.path={tiny_dataset}", cmd)
    lines = [line for line in proc.stdout.splitlines() if "error" in line]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and "stages.determinism.train_cmd" in lines[0], proc.stdout
    assert "lerobot: not importable" in lines[0] and "nothing was submitted" in lines[0], proc.stdout
    runs = tmp_path / "preflight" / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "a refused launch left a run folder (parts ran)"
