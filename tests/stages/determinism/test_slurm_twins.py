"""On the local Slurm cluster: the twins are two jobs whose run times overlap (read back from sacct),
and the compare result lands in the gate record."""

from __future__ import annotations

import pytest

from tests.conftest import gate_of, run_dir_of
from tests.in_process_launch import launch_here
from tests.stages.determinism.helpers import reference_overrides
from tests.test_slurm import final, jobs_of

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm")]


def test_twins_are_separate_overlapping_jobs_and_the_gate_is_clear(tmp_path, tiny_dataset):
    proc = launch_here(
        tmp_path,
        "launcher=slurm",
        "wait=true",
        "stage=determinism",
        "~demo",
        f"dataset.path={tiny_dataset}",
        *reference_overrides(),
        "stages.determinism.steps=3",
        "stages.determinism.job_pair=false",  # the pair under the job's conditions: tested locally
        "launcher.poll_s=0.5",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = run_dir_of(tmp_path, proc)
    ids = jobs_of(run_dir)
    a, b = final(ids["determinism.twin_a"]), final(ids["determinism.twin_b"])
    assert a["State"] == b["State"] == "COMPLETED" and ids["determinism.twin_a"] != ids["determinism.twin_b"]
    assert a["Start"] < b["End"] and b["Start"] < a["End"], (a, b)  # the two jobs ran at the same time
    gate = gate_of(run_dir)
    stage = next(s for s in gate["stages"] if s["stage"] == "determinism")
    checks = {c["id"]: c for c in stage["checks"]}
    assert gate["gate"] == "clear" and checks["determinism.twins"]["verdict"] == "match"
    evidence = checks["determinism.twins"]["evidence"]
    assert evidence["twin_a"]["slurm_job_id"] == ids["determinism.twin_a"]
    assert evidence["twin_b"]["slurm_job_id"] == ids["determinism.twin_b"]
    assert checks["determinism.control"]["verdict"] == "match"
