"""`python -m pipeline.status`: readable in a pipe, and a result shown only beside the job that wrote it."""

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from pipeline.record.records import StageResult
from pipeline.record.runfolder import RunFolder
from pipeline.run.status import produced_by, stage_status
from tests.conftest import PLUGINS, other_stages
from tests.in_process_launch import launch_here

BASE = ("launcher=local", "~demo", "min_free_mb=1")


def status(cwd: Path, run_id: str | None, env: dict[str, str] | None = None) -> str:
    run = [run_id] if run_id is not None else []
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.status", *run, "--output-root", str(cwd / "preflight")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env or {**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def row_of(table: str, job: str) -> list[str]:
    """The cells of `job`'s row in a rich table."""
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().split("│")[1:-1]]
        if cells and cells[0] == job:
            return cells
    raise AssertionError(f"no row for {job} in\n{table}")


def wait_for(predicate, what: str, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_status_in_a_pipe_is_not_cut_to_80_columns(piped_container_check):
    proc = piped_container_check.proc  # BASE, run_id=p1, container_check alone (tests/conftest.py)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    out = status(piped_container_check.cwd, "p1", env)
    assert "…" not in out, out
    assert row_of(out, "container_check")[0] == "container_check"
    assert row_of(out, "gate")[2] == "afterany:container_check" and row_of(out, "gate")[-1] == "clear"
    # no run id: the latest run under the output root, as `git status` shows where you are
    runs = piped_container_check.cwd / "preflight" / "runs"
    if not (runs / "p0").exists():  # an older run beside it (the launch is the session's)
        shutil.copytree(runs / "p1", runs / "p0")
    latest = status(piped_container_check.cwd, None)
    assert latest.splitlines()[0] == f"latest run under {runs}: p1", latest
    assert row_of(latest, "gate")[-1] == "clear"


def test_status_without_a_run_says_where_it_looked(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.status", "--output-root", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        f"status: {tmp_path / 'nowhere' / 'runs'}: no run found "
        "(give a run id or a run directory, or --output-root)"
    ), proc.stderr


def test_relaunch_does_not_show_the_earlier_jobs_result_beside_the_new_job(tmp_path):
    control = tmp_path / "control"
    control.mkdir()
    (control / "release").touch()
    args = (*BASE, "run_id=r1", "plugins=[preflight_slow_stage]", f"+stages.slow.control={control}")
    first = launch_here(tmp_path, *args, other_stages())
    assert first.returncode == 0, first.stdout + first.stderr
    assert row_of(status(tmp_path, "r1"), "slow")[-1] == "pass"
    (control / "release").unlink()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")])}
    relaunch = subprocess.Popen(  # changed stage config: the slow stage is submitted again
        [sys.executable, "-m", "pipeline.launch", *args, "+stages.slow.wait_s=1700", other_stages()],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run = tmp_path / "preflight" / "runs" / "r1"
    try:
        wait_for(lambda: len((control / "starts.log").read_text().split()) == 2, "the new slow job to start")
        wait_for(lambda: json.loads((run / "jobs.json").read_text())["slow"]["state"] == "RUNNING", "jobs")
        while_running = status(tmp_path, "r1")
        slow = row_of(while_running, "slow")
        assert slow[-2] == "RUNNING" and slow[-1] == "", while_running  # the old `pass` is not shown
        assert json.loads((run / "stages" / "slow.json").read_text())["status"] == "pass"  # still there
        (control / "release").touch()
        out, _ = relaunch.communicate(timeout=600)
        assert relaunch.returncode == 0, out
    finally:
        (control / "release").touch()
        if relaunch.poll() is None:
            relaunch.kill()
    done = status(tmp_path, "r1")
    assert row_of(done, "slow")[-1] == "pass" and row_of(done, "gate")[-1] == "clear"


def _submitted(folder: RunFolder, job_id: str) -> Path:
    path = folder.root / "submitit" / job_id / f"{job_id}_submitted.pkl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_a_result_older_than_its_jobs_submission_is_not_shown(tmp_path):
    folder = RunFolder(tmp_path / "runs" / "r1")
    folder.write_result("check", StageResult.from_checks("check", []))
    pkl = _submitted(folder, "4242")
    old = folder.result_file("check").stat().st_mtime_ns - 10**9
    os.utime(folder.result_file("check"), ns=(old, old))
    row = {"job_id": "4242", "state": "PENDING"}
    assert not produced_by(folder, folder.result_file("check"), row)
    assert stage_status(folder, "check", row) == "" and stage_status(folder, "check") == "pass"
    assert stage_status(folder, "check", {"job_id": "4242", "state": "REUSED"}) == "pass"
    os.utime(pkl, ns=(old - 10**9, old - 10**9))  # submitted before the result was written: its own
    assert stage_status(folder, "check", row) == "pass"


def test_a_slurm_result_written_by_another_job_id_is_not_shown(tmp_path):
    folder = RunFolder(tmp_path / "runs" / "r1")
    result = replace(StageResult.from_checks("check", []), provenance={"slurm_job_id": "100"})
    folder.write_result("check", result)
    assert stage_status(folder, "check", {"job_id": "101", "state": "RUNNING"}) == ""
    assert stage_status(folder, "check", {"job_id": "100", "state": "COMPLETED"}) == "pass"


def test_the_chained_training_job_is_a_row_with_its_dependency(piped_container_check, tmp_path):
    """jobs.json's `chained` row (written when the training job is chained on the gate) is shown."""
    run = tmp_path / "preflight" / "runs" / "p1"
    shutil.copytree(piped_container_check.cwd / "preflight" / "runs" / "p1", run)
    jobs = json.loads((run / "jobs.json").read_text())
    jobs["chained"] = {"job_id": "4242", "state": "PENDING", "depends_on": "afterok:4241"}
    (run / "jobs.json").write_text(json.dumps(jobs))
    cells = row_of(status(tmp_path, "p1"), "chained training job")
    assert cells[1:3] == ["4242", "afterok:gate"] and cells[4] == "PENDING", cells
