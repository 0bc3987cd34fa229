"""A plugin stage with a typed config: launch validates its section (types and ranges) before submitting."""

from dataclasses import dataclass

from pipeline.errors import ConfigError
from pipeline.record.records import Rows, StageResult
from pipeline.stages import Stage, register
from pipeline.stages.config import StageConfig


@dataclass
class TypedConfig(StageConfig):
    limit: float = 1.0

    def validate(self, key: str) -> None:
        super().validate(key)
        if self.limit <= 0:
            raise ConfigError(f"{key}.limit", f"expected a number > 0, got {self.limit}")


def run(cfg, ctx):
    row = Rows("typed", "storage")("limit", "limit", "match", actual=ctx.config.limit)
    return StageResult.from_checks("typed", [row])


register(Stage(name="typed", run=run, config=TypedConfig, description="test stage with a typed config"))
