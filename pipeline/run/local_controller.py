"""submitit's local job controller, started so that it makes its own job folder before anything else.

submitit starts the controller, and only then makes the job's folder (named after the controller's pid)
in the launcher. On a busy machine the launcher's `Popen` returns 60-170 ms after the child exec'd
(measured, 2 cores), long enough for the controller to open its log in a folder not made yet: the job
ends FAILED with no log and a `FileNotFoundError`. The controller knows its own pid, so it makes the
folder itself, then runs submitit's controller unchanged.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from submitit.core.utils import JobPaths
from submitit.local.local import Controller


def main(folder: str) -> None:
    JobPaths(folder, job_id=str(os.getpid())).folder.mkdir(parents=True, exist_ok=True)
    Controller(Path(folder)).run()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m pipeline.run.local_controller <submitit folder with %j>")
    main(sys.argv[1])
