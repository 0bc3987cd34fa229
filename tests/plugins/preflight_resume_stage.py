"""A slow stage that saves its progress in ctx.state_dir, so a requeued job resumes where it stopped."""

import json
import os
import time

from pipeline.record.records import Check, StageResult
from pipeline.stages import Stage, register

STEPS = int(os.environ.get("PREFLIGHT_TEST_RESUME_STEPS", "20"))


def run(cfg, ctx):
    progress = ctx.state_dir / "progress.json"
    start = json.loads(progress.read_text())["step"] if progress.exists() else 0
    for step in range(start, STEPS):
        time.sleep(1.0)
        progress.write_text(json.dumps({"step": step + 1}))
    check = Check(
        id="resume.progress",
        stage="resume",
        category="storage",
        feature="progress",
        verdict="match",
        actual=STEPS,
        message=f"resumed from step {start}",
        evidence={"resumed_from": start, "restart_count": os.environ.get("SLURM_RESTART_COUNT")},
    )
    return StageResult.from_checks("resume", [check])


register(Stage(name="resume", run=run, category="storage", description="test stage that can be requeued"))
