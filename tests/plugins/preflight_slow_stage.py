"""A stage that runs until the test releases it: the launcher can be killed while it runs, and a
relaunch must adopt it rather than start a second copy. Each start appends its pid to `starts.log`."""

import os
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.record.records import Rows, StageResult
from pipeline.stages import Stage, register
from pipeline.stages.config import StageConfig


@dataclass
class SlowConfig(StageConfig):
    control: str = ""  # folder: the stage logs its starts here and ends when `release` appears there
    wait_s: float = 1800.0  # a safety net only: the test releases it


def run(cfg, ctx):
    control = Path(ctx.config.control)
    with open(control / "starts.log", "a") as log:
        log.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + ctx.config.wait_s
    while not (control / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    released = (control / "release").exists()
    row = Rows("slow", "storage")("released", "control", "match" if released else "unverifiable")
    return StageResult.from_checks("slow", [row])


register(Stage(name="slow", run=run, config=SlowConfig, description="waits for the test (SIGKILL tests)"))
