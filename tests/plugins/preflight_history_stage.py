"""A cheap stage that counts its runs (one line per run in `counter`), so a test can tell a result
reused from the audit history from one computed again."""

from dataclasses import dataclass
from pathlib import Path

from pipeline.record.records import Rows, StageResult
from pipeline.stages import Stage, register
from pipeline.stages.config import StageConfig


@dataclass
class CountedConfig(StageConfig):
    counter: str = ""  # a file that gets one line per run of the stage
    note: str = ""  # any text: a changed note is a changed stage config (fingerprint)


def run(cfg, ctx):
    with open(Path(ctx.config.counter), "a", encoding="utf-8") as handle:
        handle.write(f"{cfg.run_id}\n")
    row = Rows("counted", "diagnostics")("ran", "counted", "match", f"ran in {cfg.run_id}")
    return StageResult.from_checks("counted", [row])


register(
    Stage(
        name="counted", run=run, after=(), config=CountedConfig, description="counts its runs (history tests)"
    )
)
