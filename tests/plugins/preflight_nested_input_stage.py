"""A stage whose input is nested in its own config section (a list of weight files), declared once in
its `Stage` entry: launch checks it and the plan fingerprints it with no other file knowing the stage."""

from dataclasses import dataclass, field
from pathlib import Path

from pipeline.inputs import Input
from pipeline.record.records import Rows, StageResult
from pipeline.stages import Stage, register
from pipeline.stages.config import StageConfig


@dataclass
class Weight:
    path: str | None = None


@dataclass
class NestedConfig(StageConfig):
    weights: list[Weight] = field(default_factory=list)


def run(cfg, ctx):
    sizes = [Path(w.path).stat().st_size for w in ctx.config.weights if w.path]
    row = Rows("nested", "diagnostics")("read", "weights", "match", f"read {len(sizes)} weight file(s)")
    return StageResult.from_checks("nested", [row])


register(
    Stage(
        name="nested",
        run=run,
        after=(),
        config=NestedConfig,
        inputs=(Input("stages.nested.weights[*].path", "file", whole=True),),
        description="reads weight files named inside its own section (input declaration tests)",
    )
)
