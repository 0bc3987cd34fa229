"""A stage's job array in the plan, the dry run and the local executor (no Slurm, no rendering)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from pipeline.record.records import StageResult
from pipeline.record.runfolder import RunFolder
from pipeline.run.executors import ArrayJobs, dependency_clause, sbatch_preview
from pipeline.run.plan import build_plan
from pipeline.stages import Stage
from pipeline.stages.config import StageConfig

REPO = Path(__file__).resolve().parents[3]


@dataclass
class Sharded(StageConfig):
    shards: int = 1


def noop(cfg, ctx):
    return StageResult.from_checks(ctx.stage, [])


def registry() -> dict[str, Stage]:
    return {
        "sharded": Stage(
            "sharded", noop, after=(), run_part=noop, config=Sharded, array=lambda c, cfg: c.shards * 2
        )
    }


def config(shards: int):
    base = OmegaConf.load(REPO / "pipeline" / "conf" / "config.yaml")
    base = OmegaConf.masked_copy(base, ["resources_default", "skip", "launcher"])
    launcher = OmegaConf.load(REPO / "pipeline" / "conf" / "launcher" / "slurm.yaml")
    return OmegaConf.merge(
        base,
        {"launcher": launcher, "stage": {"name": "full"}, "stages": {"sharded": {"shards": shards}}},
        {"container": {"kind": "none", "image": None}},
    )


def test_array_size_is_decided_at_launch_and_the_merge_waits_afterany(tmp_path: Path) -> None:
    jobs = {j.name: j for j in build_plan(config(3), registry(), RunFolder(tmp_path))}
    assert list(jobs) == ["sharded.task", "sharded", "gate"]
    assert jobs["sharded.task"].array == 6 and jobs["sharded.task"].part == "task"
    assert jobs["sharded"].deps == (("sharded.task", "afterany"),)
    assert dependency_clause(jobs["sharded"], {"sharded.task": "41"}) == "afterany:41"
    script = sbatch_preview(jobs["sharded.task"], config(3), RunFolder(tmp_path), {})
    assert "#SBATCH --array=0-5" in script
    assert "--array" not in sbatch_preview(
        jobs["sharded"], config(3), RunFolder(tmp_path), {"sharded.task": "41"}
    )


def test_one_shard_is_no_array(tmp_path: Path) -> None:
    jobs = {j.name: j for j in build_plan(config(0), registry(), RunFolder(tmp_path))}
    assert list(jobs) == ["sharded", "gate"] and jobs["sharded"].array == 0


class _Task:
    def __init__(self, job_id: str, state: str) -> None:
        self.job_id, self.state = job_id, state

    def done(self) -> bool:
        return self.state == "COMPLETED"


def test_array_jobs_is_one_job_for_dependants() -> None:
    jobs = ArrayJobs([_Task("77_0", "COMPLETED"), _Task("77_1", "RUNNING")])
    assert jobs.job_id == "77" and jobs.task_ids == ["77_0", "77_1"]
    assert jobs.state == "RUNNING" and not jobs.done()
    jobs.jobs[1].state = "FAILED"
    assert jobs.state == "FAILED"
