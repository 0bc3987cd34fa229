"""What runs inside each Slurm (or local) job: one stage, one part of a stage, or the gate.

The callables are `submitit.helpers.Checkpointable`: when Slurm signals a preemption or a time-out,
submitit requeues the same call and the stage resumes from what it saved in `ctx.state_dir`.
They carry only the run directory and a name; everything else is read from the run directory
(`config.yaml`, `plan.json`), so a job never depends on the login node's memory.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as metadata
import os
import platform
import socket
import time
import traceback
from pathlib import Path
from typing import Any

import submitit
from omegaconf import DictConfig

from pipeline import stages
from pipeline.errors import InputError, one_line
from pipeline.record.records import Check, PartDone, StageResult
from pipeline.record.runfolder import RunFolder
from pipeline.run.input_checks import check_stage
from pipeline.stages import Stage, StageContext, error_check
from pipeline.storage import atomic_write_json

VERSIONED = ("hpc-preflight", "torch", "numpy", "submitit", "hydra-core", "mujoco", "safetensors", "pyarrow")


def provenance(plan: dict[str, Any]) -> dict[str, Any]:
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT"),
        "container": os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER"),
        "image_digest": plan.get("image_digest"),
        "git_sha": plan.get("git_sha"),
        "python": platform.python_version(),
        "versions": versions,
    }


def _crash_check(stage: Stage, exc: BaseException) -> Check:
    check = error_check(stage.name, exc, stage.category)
    evidence = {**check.evidence, "traceback": traceback.format_exc()[-4000:]}
    return dataclasses.replace(
        check, message=f"stage crashed: {type(exc).__name__}: {exc}", evidence=evidence
    )


def _prepare(
    folder: RunFolder, name: str, part: str | None
) -> tuple[DictConfig, dict[str, Any], Stage, StageContext]:
    """What every job reads first: the run's config and plan, the registered stage, its context."""
    cfg = folder.load_config()
    stages.import_plugins(cfg.get("plugins") or ())  # a job imports its own stage only (`get`)
    plan = folder.load_plan()
    ctx = StageContext(
        run_dir=folder.root,
        stage=name,
        part=part,
        fingerprints=plan["jobs"][name]["fingerprints"],
        config=stages.stage_config(cfg, name),
        cpus=(plan["jobs"][name].get("resources") or {}).get("cpus_per_task"),
    )
    return cfg, plan, stages.get(name), ctx


def run_stage(run_dir: Path, name: str) -> str:
    """Run one stage's main job and write its result; only a crash exits non-zero."""
    folder = RunFolder(run_dir)
    cfg, plan, stage, ctx = _prepare(folder, name, None)
    started = time.time()
    crash: BaseException | None = None
    try:
        result = stage.run(cfg, ctx)
    except InputError as exc:
        result = StageResult.from_checks(name, [error_check(name, exc, stage.category)])
    except Exception as exc:  # noqa: BLE001 - recorded, then re-raised so the job shows as failed
        result, crash = StageResult.from_checks(name, [_crash_check(stage, exc)]), exc
    result = dataclasses.replace(
        result,
        provenance={**provenance(plan), **result.provenance},
        fingerprints=ctx.fingerprints,
        timings={**result.timings, "started": started, "wall_s": round(time.time() - started, 3)},
    )
    path = folder.write_result(name, result)
    if crash is not None:
        raise crash
    return str(path)


def run_part(run_dir: Path, name: str, part: str) -> str:
    """Run one part of a stage (e.g. a determinism twin); the stage's main job merges the parts. A bad
    input (the stage's inputs are checked again first) leaves `input_error.json` instead of `done.json`."""
    folder = RunFolder(run_dir)
    cfg, plan, stage, ctx = _prepare(folder, name, part)
    assert stage.run_part is not None
    folder.part_input_error_file(name, part).unlink(missing_ok=True)  # a requeue or relaunch asks again
    started = time.time()
    try:
        check_stage(cfg, stage)  # an input changed since launch: every part says so, none "crashes"
        stage.run_part(cfg, ctx)
    except InputError as exc:
        # like a stage's InputError, a result rather than a crash: the merge reads this one line
        failed = folder.part_input_error_file(name, part)
        error = {"message": one_line(exc), "path": exc.path, "field": exc.field}
        atomic_write_json(failed, {"part": part, "input_error": error, "provenance": provenance(plan)})
        return str(failed)
    done = folder.part_done_file(name, part)
    record = PartDone(part, started, time.time(), provenance(plan))
    atomic_write_json(done, record.to_dict())
    return str(done)


class StageJob(submitit.helpers.Checkpointable):
    def __init__(self, run_dir: str, stage: str, part: str | None = None) -> None:
        self.run_dir, self.stage, self.part = run_dir, stage, part

    def __call__(self) -> str:
        if self.part is not None:
            return run_part(Path(self.run_dir), self.stage, self.part)
        return run_stage(Path(self.run_dir), self.stage)


class ArrayTaskJob:
    """One task of a stage's job array (`executor.map_array(job, range(n))`): part `<part>-<task:04d>`."""

    def __init__(self, run_dir: str, stage: str, part: str) -> None:
        self.run_dir, self.stage, self.part = run_dir, stage, part

    def __call__(self, task: int) -> str:
        return run_part(Path(self.run_dir), self.stage, f"{self.part}-{int(task):04d}")


class GateJob(submitit.helpers.Checkpointable):
    """Exits with the gate's code (0 clear, 3 blocked): that exit code is what `afterok` reads."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir

    def __call__(self) -> int:
        from pipeline.run.gate import run_gate

        code = run_gate(Path(self.run_dir))
        if code != 0:
            raise SystemExit(code)
        return code
