"""The local executor's job controller makes its own job folder: nothing in the launcher has to win a
race against it (on a busy machine the launcher lost it and jobs ended FAILED with no log)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from pipeline.run.local_runner import _LocalExecutor


def test_the_controller_makes_its_job_folder_before_it_opens_its_log(tmp_path: Path) -> None:
    executor = _LocalExecutor(folder=tmp_path / "submitit" / "%j")
    executor.update_parameters(timeout_min=1)
    # no submission pickle and no folder made by the launcher: only the controller can make it
    command = shlex.join([sys.executable, "-c", "print('task ran')"])
    job = executor._submit_command(command)
    assert job._process.wait(timeout=60) == 0
    log = tmp_path / "submitit" / job.job_id / f"{job.job_id}_0_log.out"
    assert log.read_text() == "task ran\n"
