"""Two plugin stages that wait for each other: the plan has no order, and launch must say so (exit 2)."""

from pipeline.record.records import StageResult
from pipeline.stages import Stage, register


def run(cfg, ctx):
    return StageResult.from_checks(ctx.stage, [])


register(Stage(name="chicken", run=run, after=("egg",), description="test stage in a cycle"))
register(Stage(name="egg", run=run, after=("chicken",), description="test stage in a cycle"))
