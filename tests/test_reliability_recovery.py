"""Recovery: a corrupt result is a result to redo; a killed launcher's jobs are adopted, not duplicated;
one launch per run id at a time."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline.storage import LockHeld, exclusive_lock
from tests.conftest import PLUGINS, other_stages
from tests.in_process_launch import launch_here

BASE = ("launcher=local", "~demo", "min_free_mb=1")


def status(cwd: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.status", run_id, "--output-root", str(cwd / "preflight")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_truncated_stage_result_and_gate_record_are_redone(tmp_path):
    """The launcher's entry in this process (tests/in_process_launch.py): `launcher=debug` runs the jobs
    in the launcher, so no job process is started either way."""
    args = ("launcher=debug", "~demo", "min_free_mb=1", "run_id=r1", other_stages("container_check"))
    assert launch_here(tmp_path, *args).returncode == 0
    run = tmp_path / "preflight" / "runs" / "r1"
    result, gate = run / "stages" / "container_check.json", run / "gate.json"
    result.write_text(result.read_text()[:100])
    gate.write_text(gate.read_text()[:50])
    shown = status(tmp_path, "r1")
    assert shown.returncode == 0 and "Traceback" not in shown.stdout + shown.stderr
    assert "corrupt" in shown.stdout and f"gate: unreadable record {gate}" in shown.stdout
    proc = launch_here(tmp_path, *args)
    assert proc.returncode == 0 and "gate: clear" in proc.stdout, proc.stdout + proc.stderr
    rows = json.loads((run / "jobs.json").read_text())
    assert rows["container_check"]["state"] == "COMPLETED"  # rerun, not reused
    assert (
        json.loads(result.read_text())["status"] == "pass" and json.loads(gate.read_text())["gate"] == "clear"
    )


def test_the_lock_names_its_holder_and_dies_with_it(tmp_path):
    path = tmp_path / ".launch.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from pipeline.storage import exclusive_lock\nwith exclusive_lock({str(path)!r}):\n"
            "    print('held', flush=True)\n    import time; time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        try:
            with exclusive_lock(path):
                raise AssertionError("a second holder got the lock")
        except LockHeld as exc:
            assert exc.pid == holder.pid
    finally:
        holder.kill()
        holder.wait()
    with exclusive_lock(path):  # SIGKILL released it
        pass


def wait_for(predicate, what: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] != "Z"


def popen_launch(cwd: Path, *overrides: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline.launch", *overrides],
        cwd=cwd,
        env={**env, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_sigkilled_launcher_job_is_adopted_not_duplicated_and_the_lock_keeps_launches_apart(tmp_path):
    control = tmp_path / "control"
    control.mkdir()
    args = (
        *BASE,
        "run_id=k1",
        "plugins=[preflight_slow_stage]",
        f"+stages.slow.control={control}",
        other_stages("container_check"),
    )
    starts = control / "starts.log"
    first = popen_launch(tmp_path, *args)
    job_pid = 0
    try:
        wait_for(lambda: starts.exists() and starts.read_text().strip(), "the slow stage to start")
        job_pid = int(starts.read_text().split()[0])
        second = launch_here(tmp_path, *args)  # while the first one holds the run (a process of its own)
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"config error: run_id: run k1 is being launched by pid {first.pid}" in second.stdout
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert alive(job_pid)  # the stage outlived its launcher
        run = tmp_path / "preflight" / "runs" / "k1"
        recorded = json.loads((run / "jobs.json").read_text())["slow"]
        assert recorded["pid"] == recorded["job_id"] and isinstance(recorded["started"], int)
        assert alive(int(recorded["pid"]))  # submitit's job process, the stage's parent
        third = popen_launch(tmp_path, *args)

        def adopted() -> bool:
            if third.poll() is not None:
                raise AssertionError(f"the relaunch ended early: {third.communicate()[0]}")
            return "adopted" in json.loads((run / "jobs.json").read_text())["slow"]["state"]

        wait_for(adopted, "the relaunch to adopt the running job", timeout_s=900)
        (control / "release").touch()
        out, _ = third.communicate(timeout=600)
        assert third.returncode == 0, out
        assert f"slow: adopting job {recorded['pid']}" in out and "gate: clear" in out
        assert starts.read_text().split() == [str(job_pid)]  # one copy of the stage ever ran
        assert json.loads((run / "gate.json").read_text())["gate"] == "clear"
        assert json.loads((run / "stages" / "slow.json").read_text())["status"] == "pass"
    finally:
        (control / "release").touch()
        if first.poll() is None:
            first.kill()
        if job_pid and alive(job_pid):
            os.kill(job_pid, signal.SIGKILL)
