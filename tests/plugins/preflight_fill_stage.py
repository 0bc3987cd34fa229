"""A plugin stage that fills a filesystem before the gate runs: the gate then meets a full audit folder
mid-run, as it would on a shared disk that another job filled (a real ENOSPC on a real tmpfs)."""

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.record.records import Rows, StageResult
from pipeline.stages import Stage, register
from pipeline.stages.config import StageConfig


@dataclass
class FillConfig(StageConfig):
    target: str = ""  # a folder on the filesystem to fill
    keep_kib: int = 0  # room left free after filling


def run(cfg, ctx):
    target = Path(ctx.config.target)
    stat = os.statvfs(target)
    size = max(stat.f_bavail * stat.f_frsize - ctx.config.keep_kib * 1024, 0)
    with open(target / "filler.bin", "wb") as handle:
        handle.truncate(0)
        chunk = b"\0" * (1 << 16)
        while size > 0:
            size -= handle.write(chunk[: min(size, len(chunk))])
        handle.flush()
        os.fsync(handle.fileno())
    left = os.statvfs(target)
    row = Rows("fill", "storage")("filled", str(target), "match", actual=left.f_bavail * left.f_frsize)
    return StageResult.from_checks("fill", [row])


register(Stage(name="fill", run=run, config=FillConfig, description="fills a filesystem (fault tests)"))
