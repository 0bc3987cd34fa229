"""A stage that reports progress through `pipeline.progress`, so a test can read the lines in its job log."""

from dataclasses import dataclass

from pipeline.progress import progress
from pipeline.record.records import Rows, StageResult
from pipeline.stages import Stage, register
from pipeline.stages.config import StageConfig


@dataclass
class ProgressConfig(StageConfig):
    steps: int = 8


def run(cfg, ctx):
    with progress("progress_demo work", ctx.config.steps, every_s=1e9) as advance:
        for _ in range(ctx.config.steps):
            advance()
    row = Rows("progress_demo", "storage")("steps", "work", "match")
    return StageResult.from_checks("progress_demo", [row])


register(
    Stage(name="progress_demo", run=run, config=ProgressConfig, description="reports progress (log test)")
)
