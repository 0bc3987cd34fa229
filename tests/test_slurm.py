"""The spine on a real one-node Slurm cluster (slurmctld, slurmd, slurmdbd + MariaDB, munge), as
started by scripts/slurm_local.sh. Every ordering claim is read back from the scheduler itself."""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import PROBE_SEED, gate_of, other_stages, run_dir_of, slurm_launch
from tests.in_process_launch import launch_here
from tests.test_launch import summary

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm")]
BASE = ("launcher=slurm", "~demo")


def sacct(
    job_id: str, fields: str = "JobID,State,ExitCode,Start,End", duplicates: bool = False
) -> list[dict]:
    cmd = ["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", fields, *(["-D"] if duplicates else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    keys = fields.split(",")
    return [dict(zip(keys, line.split("|"), strict=True)) for line in out.splitlines() if line.strip()]


def final(job_id: str, timeout: float = 300) -> dict:
    """The job's accounting row once it has ended (sacct lags the controller by a moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = sacct(job_id)
        if rows and rows[-1]["State"].split()[0] not in ("PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD"):
            return rows[-1]
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not end within {timeout} s: {sacct(job_id)}")


def jobs_of(run_dir: Path) -> dict[str, str]:
    return {name: str(job["job_id"]) for name, job in json.loads((run_dir / "jobs.json").read_text()).items()}


def watched(tmp_path: Path, text: str = "v1") -> Path:
    data = tmp_path / "dataset.txt"
    data.write_text(text)
    return data


@dataclass(frozen=True)
class FirstRun:
    """One launch of container_check + the watch plugin stage, as it stood right after it returned."""

    cwd: Path
    args: tuple[str, ...]
    proc: subprocess.CompletedProcess[str]
    run_dir: Path
    ids: dict[str, str]
    gate: dict


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    """The ordering test reads it; the relaunch test then launches again with the same run id in the same
    folder (jobs.json and gate.json are snapshotted here, so test order does not matter)."""
    cwd = tmp_path_factory.mktemp("first_run")
    args = (
        *BASE,
        "wait=true",
        "run_id=resume-test",
        "plugins=[preflight_watch_stage]",
        f"dataset.path={watched(cwd)}",
        other_stages("container_check"),
    )
    proc = slurm_launch(cwd, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = run_dir_of(cwd, proc)
    return FirstRun(cwd, args, proc, run_dir, jobs_of(run_dir), gate_of(run_dir))


def test_stages_depend_on_container_check_and_the_gate_runs_after_all(first_run: FirstRun):
    ids = first_run.ids
    assert re.search(rf"^gate job: {ids['gate']}$", first_run.proc.stdout, re.M)
    deps = {name: _dependency(job) for name, job in ids.items()}
    assert deps["watch"].startswith(f"afterok:{ids['container_check']}")
    assert f"afterany:{ids['container_check']}" in deps["gate"] and f"{ids['watch']}" in deps["gate"]
    rows = {name: final(job) for name, job in ids.items()}
    assert all(r["State"] == "COMPLETED" for r in rows.values()), rows
    assert rows["watch"]["Start"] >= rows["container_check"]["End"]
    assert rows["gate"]["Start"] >= max(rows["watch"]["End"], rows["container_check"]["End"])
    gate = first_run.gate
    assert gate["gate"] == "clear" and gate["sources"]["executor"] == "slurm"
    assert {s["stage"]: s["provenance"]["slurm_job_id"] for s in gate["stages"]} == {
        "container_check": ids["container_check"],
        "watch": ids["watch"],
    }


def _dependency(job_id: str) -> str:
    """The dependency clause as submitted (scontrol forgets it once satisfied; the script keeps it)."""
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    script = re.search(r"Command=(\S+)", out)
    text = Path(script.group(1)).read_text() if script and Path(script.group(1)).exists() else ""
    found = re.search(r"#SBATCH --dependency=(\S+)", text) or re.search(r"Dependency=(\S+)", out)
    return found.group(1) if found else ""


@dataclass(frozen=True)
class BlockedRun:
    """One Slurm launch of the watch stage and a stage that crashes, a training job chained on its gate."""

    cwd: Path
    common: tuple[str, ...]
    proc: subprocess.CompletedProcess[str]
    marker: Path


@pytest.fixture(scope="module")
def blocked_run(tmp_path_factory: pytest.TempPathFactory) -> BlockedRun:
    """The crash test reads its jobs and the chained job's fate; the local-mode test compares its gate
    record with a local launch of the same stages (a chained job is no part of the gate record)."""
    cwd = tmp_path_factory.mktemp("blocked_run")
    marker, script = cwd / "trained", cwd / "train.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --time=2\ntouch {marker}\n")
    common = (
        "~demo",
        "plugins=[preflight_watch_stage,preflight_crash_stage]",
        f"dataset.path={watched(cwd)}",
        other_stages("container_check"),
    )
    (cwd / "s").mkdir()
    proc = slurm_launch(cwd / "s", "launcher=slurm", "wait=true", *common, f"+chain.sbatch={script}")
    return BlockedRun(cwd, common, proc, marker)


def test_crashed_stage_blocks_exit_3_and_the_chained_job_never_runs(blocked_run: BlockedRun):
    proc = blocked_run.proc
    assert proc.returncode == 3, proc.stdout + proc.stderr
    run_dir = run_dir_of(blocked_run.cwd / "s", proc)
    ids = jobs_of(run_dir)
    assert final(ids["crash"])["State"] == "FAILED"
    assert final(ids["gate"])["ExitCode"] == "3:0"
    chained = re.search(r"chained job: (\d+) \(afterok:(\d+)\)", proc.stdout)
    assert chained and chained.group(2) == ids["gate"]
    assert final(chained.group(1))["State"].startswith("CANCELLED")
    assert not blocked_run.marker.exists()
    crash = next(s for s in gate_of(run_dir)["stages"] if s["stage"] == "crash")
    assert crash["status"] == "error" and crash["provenance"]["slurm_job_id"] == ids["crash"]


def test_chained_job_runs_after_a_clear_gate(tmp_path):
    marker = tmp_path / "trained"
    script = tmp_path / "train.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --time=2\necho $SLURM_JOB_ID > {marker}\n")
    proc = slurm_launch(tmp_path, *BASE, other_stages("container_check"), f"+chain.sbatch={script}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    chained = re.search(r"chained job: (\d+)", proc.stdout).group(1)
    gate_row, train_row = final(jobs_of(run_dir_of(tmp_path, proc))["gate"]), final(chained)
    assert train_row["State"] == "COMPLETED" and train_row["Start"] >= gate_row["End"]
    assert marker.read_text().strip() == chained


def test_requeued_stage_resumes_from_its_saved_state(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFLIGHT_TEST_RESUME_STEPS", "12")
    proc = slurm_launch(tmp_path, *BASE, "plugins=[preflight_resume_stage]", other_stages("container_check"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = run_dir_of(tmp_path, proc)
    ids = jobs_of(run_dir)
    progress = run_dir / "state" / "resume" / "main" / "progress.json"
    deadline = time.monotonic() + 180
    while not (progress.exists() and json.loads(progress.read_text() or '{"step": 0}')["step"] >= 3):
        assert time.monotonic() < deadline, "resume stage never made progress"
        time.sleep(0.5)
    # what Slurm sends before a time limit or a preemption: submitit checkpoints and requeues the job
    subprocess.run(["scancel", "--signal=USR2", ids["resume"]], check=True)
    assert final(ids["resume"], timeout=400)["State"] == "COMPLETED"
    assert final(ids["gate"])["State"] == "COMPLETED"
    history = [r["State"] for r in sacct(ids["resume"], duplicates=True)]
    assert "REQUEUED" in history or "PREEMPTED" in history, history
    resume = next(s for s in gate_of(run_dir)["stages"] if s["stage"] == "resume")
    assert resume["checks"][0]["evidence"]["resumed_from"] >= 3
    assert int(resume["checks"][0]["evidence"]["restart_count"]) >= 1


def test_relaunch_with_the_same_run_id_reruns_only_what_changed(first_run: FirstRun):
    cwd, args, run_dir = first_run.cwd, first_run.args, first_run.run_dir
    assert set(first_run.ids) == {"container_check", "watch", "gate"}
    second = slurm_launch(cwd, *args)
    assert second.returncode == 0 and set(jobs_of(run_dir)) == {"gate"}, second.stdout
    (cwd / "dataset.txt").write_text("v2")
    third = slurm_launch(cwd, *args)
    assert third.returncode == 0 and set(jobs_of(run_dir)) == {"watch", "gate"}, third.stdout
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["jobs"]["container_check"]["reused"] and not plan["jobs"]["watch"]["reused"]
    watch = next(s for s in gate_of(run_dir)["stages"] if s["stage"] == "watch")
    assert watch["checks"][0]["actual"] == "v2"


def test_local_mode_gives_the_same_gate_record_as_slurm(blocked_run: BlockedRun):
    cwd = blocked_run.cwd
    (cwd / "l").mkdir()
    on_slurm = blocked_run.proc
    PROBE_SEED.plant(cwd / "l" / "preflight")  # its container_check reuses the node probes, as on Slurm
    local = launch_here(cwd / "l", "launcher=local", "launcher.poll_s=0.2", *blocked_run.common)
    assert on_slurm.returncode == local.returncode == 3
    slurm_gate, local_gate = (
        gate_of(run_dir_of(cwd / "s", on_slurm)),
        gate_of(run_dir_of(cwd / "l", local)),
    )
    assert summary(slurm_gate) == summary(local_gate)


def test_refused_submission_cancels_what_was_queued_and_names_the_job(tmp_path):
    proc = slurm_launch(
        tmp_path, *BASE, other_stages("container_check"), "stages.gate.resources.partition=nosuchpart"
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "sbatch refused job gate" in proc.stdout and "nosuchpart" in proc.stdout
    check_id = jobs_of(run_dir_of(tmp_path, proc))["container_check"]
    assert final(check_id)["State"].startswith("CANCELLED") or final(check_id)["State"] == "COMPLETED"
