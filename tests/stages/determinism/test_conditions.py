"""The training job's environment, read from what the user gives (never by running their script)."""

from __future__ import annotations

import pytest

from pipeline.errors import InputError
from pipeline.stages.config import typed
from pipeline.stages.determinism import conditions, runner
from pipeline.stages.determinism.config import DeterminismConfig
from tests.stages.determinism.helpers import stage_cfg

SCRIPT = """#!/bin/bash
#SBATCH --cpus-per-task=16
#SBATCH --gpus-per-node=8
#SBATCH --export=ALL,NCCL_DEBUG=WARN
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK PYTHONHASHSEED="${{SEED}}"
export CUBLAS_WORKSPACE_CONFIG=:4096:8   # deterministic cuBLAS
unset PREFLIGHT_DETERMINISTIC
touch {marker}
# export HIDDEN=1
srun python train.py
"""


def settings(**changes: object) -> DeterminismConfig:
    return typed(DeterminismConfig, changes, "stages.determinism")


def test_sbatch_exports_are_parsed_as_argv_and_never_executed(tmp_path):
    path = tmp_path / "train.sbatch"
    path.write_text(SCRIPT.format(marker=tmp_path / "ran"))
    values, unresolved, res = conditions.parse_sbatch(path)
    assert values == {
        "NCCL_DEBUG": "WARN",
        "OMP_NUM_THREADS": "16",  # $SLURM_CPUS_PER_TASK from the #SBATCH line
        "PYTHONHASHSEED": "${SEED}",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "PREFLIGHT_DETERMINISTIC": None,
    }
    assert unresolved == {"PYTHONHASHSEED": "${SEED}"}
    assert res == {"cpus_per_task": 16, "gpus": "8", "export": "ALL"}
    assert not (tmp_path / "ran").exists()


def test_job_env_wins_over_training_env_over_the_script_and_unresolved_keeps_the_stage_value(tmp_path):
    path = tmp_path / "train.sbatch"
    path.write_text(SCRIPT.format(marker=tmp_path / "ran"))
    cfg = stage_cfg(
        extra={
            "chain": {"sbatch": str(path)},
            "training": {"env": {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": 8}},
        },
        job_env={"NCCL_DEBUG": None},
    )
    config = runner.stage_config(cfg)
    job = conditions.job_conditions(cfg, config)
    assert job.values["NCCL_DEBUG"] is None and job.values["OMP_NUM_THREADS"] == "8"
    assert job.sources == [f"chain.sbatch ({path})", "training.env", "stages.determinism.job_env"]
    pair = conditions.pair_values(config, job)
    assert pair == {
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "PYTHONHASHSEED": "0",  # ${SEED} cannot be expanded here: taken as fixed, the stage's value
        "OMP_NUM_THREADS": "8",
        "PREFLIGHT_DETERMINISTIC": None,
    }
    assert set(conditions.differing(config, job)) == {"OMP_NUM_THREADS", "PREFLIGHT_DETERMINISTIC"}


def test_the_bare_pair_environment_drops_what_the_job_does_not_set(monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # inherited by the part job: must not leak into the pair
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    config = settings()
    env, values = conditions.pair_env(config, conditions.JobConditions())
    for name in ("PYTHONHASHSEED", "OMP_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG", "PREFLIGHT_DETERMINISTIC"):
        assert name not in env and values[name] is None
    assert "PATH" in env


@pytest.mark.parametrize(
    "job, differ",
    [
        ({"PYTHONHASHSEED": "random"}, True),  # "random" is what unset means
        ({"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}, True),
        (
            {
                "PYTHONHASHSEED": "0",
                "OMP_NUM_THREADS": "1",
                "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
                "PREFLIGHT_DETERMINISTIC": "1",
            },
            False,
        ),
    ],
)
def test_a_job_that_sets_everything_as_the_stage_does_needs_no_second_pair(job, differ):
    config = settings(job_env=job)
    found = conditions.differing(config, conditions.job_conditions(stage_cfg(job_env=job), config))
    assert bool(found) is differ
    if job.get("PYTHONHASHSEED") == "random":
        assert found["PYTHONHASHSEED"] == {"stage": "0", "job": "random"}


def test_a_training_env_that_is_not_a_mapping_names_the_key(tmp_path):
    cfg = stage_cfg(extra={"training": {"env": ["PYTHONHASHSEED=0"]}})
    with pytest.raises(InputError, match=r"training.env: expected a mapping"):
        conditions.job_conditions(cfg, runner.stage_config(cfg))
    with pytest.raises(InputError, match="chain.sbatch: cannot read"):
        conditions.parse_sbatch(tmp_path / "missing.sbatch")


def test_crash_cause_reads_torch_refusal_or_the_last_exception():
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        torch.zeros(4).put_(torch.tensor([0, 0]), torch.ones(2))
    except RuntimeError as exc:
        log = f"Traceback (most recent call last):\n  ...\nRuntimeError: {exc}\n"
    finally:
        torch.use_deterministic_algorithms(before)
    cause = runner.crash_cause(log)
    assert cause["kind"] == "nondeterministic_op" and cause["op"] == "put_"
    assert "use_deterministic_algorithms(True)" in cause["message"]
    other = runner.crash_cause("loading\nTraceback ...\nValueError: bad shape (3,) for x\n")
    assert other == {"kind": "exception", "message": "ValueError: bad shape (3,) for x"}
    assert runner.crash_cause("killed\n") is None
