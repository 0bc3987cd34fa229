"""A job's process (`python -m pipeline.run.job_main <folder>`) ends with the exit code the interpreter's
own exit would give and the same outputs (submitit's result pickle, atexit handlers run, output
flushed), but without the interpreter's teardown. No cluster: the job runs as a submitit "local" job
process, with the environment variables its local controller would set."""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from submitit.core.utils import DelayedSubmission

from pipeline.run.executors import JOB_MAIN, job_command

# the repository and this folder: the job unpickles this module's functions by name
IMPORTABLE = (str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent))


def run_job(folder: Path, function: Callable[[], Any]) -> subprocess.CompletedProcess[str]:
    folder.mkdir(parents=True, exist_ok=True)
    DelayedSubmission(function).dump(folder / "7_submitted.pkl")
    env = {
        **os.environ,
        "SUBMITIT_EXECUTOR": "local",
        "SUBMITIT_LOCAL_JOB_ID": "7",
        "SUBMITIT_LOCAL_NTASKS": "1",
        "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
        "SUBMITIT_LOCAL_NODEID": "0",
        "SUBMITIT_LOCAL_GLOBALID": "0",
        "SUBMITIT_LOCAL_LOCALID": "0",
        "PYTHONPATH": os.pathsep.join([*IMPORTABLE, os.environ.get("PYTHONPATH", "")]),
    }
    argv = [sys.executable, "-u", "-m", JOB_MAIN, str(folder)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def answer(marker: str) -> int:
    atexit.register(lambda: Path(marker).write_text("atexit ran"))
    print("printed by the job")
    return 42


def blocked() -> None:
    raise SystemExit(3)


def crashed() -> None:
    raise ValueError("the stage broke")


def test_a_job_that_returns_exits_0_with_its_result_kept_and_its_atexit_run(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    proc = run_job(tmp_path / "ok", lambda: answer(str(marker)))
    assert proc.returncode == 0, proc.stderr
    assert "printed by the job" in proc.stdout
    with open(tmp_path / "ok" / "7_0_result.pkl", "rb") as f:
        assert pickle.load(f) == ("success", 42)
    assert marker.read_text() == "atexit ran"


def test_a_system_exit_keeps_its_code_and_an_exception_exits_1_with_its_traceback(tmp_path: Path) -> None:
    assert run_job(tmp_path / "blocked", blocked).returncode == 3  # the gate's "blocked": what afterok reads
    proc = run_job(tmp_path / "crashed", crashed)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ValueError: the stage broke" in proc.stderr


def test_the_job_command_runs_job_main_on_the_quoted_folder() -> None:
    assert job_command("/venv/bin/python", Path("/runs/a b/%j")) == (
        "/venv/bin/python -u -m pipeline.run.job_main '/runs/a b/%j'"
    )
