"""A stage that reads the dataset path: re-launching after the file changed must rerun it (only it)."""

from pathlib import Path

from pipeline.record.records import Check, StageResult
from pipeline.stages import Stage, register


def run(cfg, ctx):
    text = Path(cfg.dataset.path).read_text()
    check = Check(
        id="watch.dataset",
        stage="watch",
        category="storage",
        feature="dataset",
        verdict="match",
        actual=text.strip(),
        message=f"read {len(text)} bytes",
    )
    return StageResult.from_checks("watch", [check])


register(
    Stage(
        name="watch",
        run=run,
        inputs=("dataset",),
        category="storage",
        description="test stage whose result depends on dataset.path",
    )
)
