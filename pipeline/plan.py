"""The plan: which jobs a launch submits, what each depends on, and which results can be reused.

Dependencies follow DESIGN.md: every stage runs `afterok` on the stages it declares in `after`
(container_check for all but itself); a stage's parts run before its main job, which waits for them
with `afterany` so that a crashed part is recorded rather than cancelling the merge; the gate runs
`afterany` on every stage, so it always runs and records what happened.

Reuse (`reuse`): `run` keeps a stage's result from an earlier launch of the same run id when its
input fingerprints are unchanged; `history` (the default) also takes it from an earlier clear gate
record in `audit_dir` with exactly these fingerprints (`pipeline.history` says which results
qualify), copied into this run with `provenance.reused_from`; `none` runs every stage. Stages that
measure the moment rather than their inputs (free space, quota, the node's devices) are never taken
from another run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline import history
from pipeline.errors import ConfigError
from pipeline.fingerprint import input_fingerprints
from pipeline.records import StageResult
from pipeline.runfolder import RunFolder
from pipeline.stages import Stage
from pipeline.stages.config import RESOURCE_KEYS, typed

GATE = "gate"
ARRAY_PART = "task"  # a stage's job array is part "task"; task i runs as part "task-<i:04d>"
REUSE_MODES = ("history", "run", "none")
# their verdict depends on the moment (free space, quota, the node's GPUs), which no fingerprint covers
NOT_FROM_HISTORY = frozenset({"container_check", "checkpoint_storage"})


@dataclass(frozen=True)
class JobSpec:
    name: str
    kind: str  # "stage" | "part" | "gate"
    stage: str | None
    part: str | None = None
    deps: tuple[tuple[str, str], ...] = ()  # (job name, "afterok" | "afterany")
    resources: dict[str, Any] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    reused: bool = False
    array: int = 0  # > 0: one Slurm job array of this many tasks (sbatch --array=0-<array-1>)
    reused_from: str | None = None  # the earlier run (from the audit history) whose result stands
    # that run's result, written into this run folder by `write_reused` (not part of plan.json)
    earlier: StageResult | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("earlier")
        data["deps"] = [list(d) for d in self.deps]
        return data


def _plain(section: Any) -> dict[str, Any]:
    data = OmegaConf.to_container(section, resolve=True) if isinstance(section, DictConfig) else section
    return dict(data or {})


def resources(cfg: DictConfig, name: str, part: str | None = None) -> dict[str, Any]:
    """Non-null values win, most specific first: `stages.<name>.part_resources.<part>` (e.g. a DDP part
    that needs N GPUs), then `stages.<name>.resources`, then `resources_default`."""
    stage = cfg.stages.get(name) or {}
    layers = [
        _plain((stage.get("part_resources") or {}).get(part)) if part else {},
        _plain(stage.get("resources")),
        _plain(cfg.resources_default),
    ]
    return {k: next((layer[k] for layer in layers if layer.get(k) is not None), None) for k in RESOURCE_KEYS}


def selected_stages(cfg: DictConfig, registry: Mapping[str, Stage]) -> list[Stage]:
    """`stage=full` is every registered stage but those in `skip`; otherwise the one named."""
    skip = set(cfg.get("skip") or ())
    wanted = [n for n in registry if n not in skip] if cfg.stage.name == "full" else [cfg.stage.name]
    ordered: list[Stage] = []

    def visit(name: str, trail: tuple[str, ...]) -> None:
        if name in trail:
            raise ConfigError(
                "stages", f"dependency cycle: {' -> '.join((*trail, name))} (see each stage's `after`)"
            )
        if name not in wanted or any(s.name == name for s in ordered):
            return
        for dep in registry[name].after:
            if dep in registry:
                visit(dep, (*trail, name))
        ordered.append(registry[name])

    for name in wanted:
        visit(name, ())
    return ordered


def reuse_mode(cfg: DictConfig) -> str:
    mode = str(cfg.get("reuse") or "history")
    if mode not in REUSE_MODES:
        raise ConfigError("reuse", f"expected one of {', '.join(REUSE_MODES)}, got {mode!r}")
    return mode


def from_history(cfg: DictConfig, name: str, prints: dict[str, str]) -> history.Earlier | None:
    """An earlier clear run's result of this stage from exactly these inputs, if the history has one."""
    if name in NOT_FROM_HISTORY or not cfg.get("audit_dir"):
        return None
    return history.reusable_result(Path(str(cfg.audit_dir)), name, prints, exclude_run=str(cfg.get("run_id")))


def write_reused(folder: RunFolder, jobs: list[JobSpec]) -> list[Path]:
    """Copy each result taken from the history into this run (`stages/<stage>.json`), naming its run."""
    written = []
    for job in jobs:
        if job.earlier is not None and job.stage is not None:
            prov = {**job.earlier.provenance, history.REUSED_FROM: job.reused_from}
            written.append(folder.write_result(job.stage, dataclasses.replace(job.earlier, provenance=prov)))
    return written


def reusable(folder: RunFolder, name: str, fingerprints: dict[str, str]) -> bool:
    """A stage's last result stands when it reached a verdict from exactly these inputs."""
    try:
        old = folder.load_result(name)
    except (OSError, ValueError, TypeError):
        return False
    return old.status != "error" and old.fingerprints == fingerprints


def reused_job(
    cfg: DictConfig, folder: RunFolder, name: str, prints: dict[str, str], res: dict[str, Any], mode: str
) -> JobSpec | None:
    """The stage's job when a result from these inputs stands: this run's own, else the history's."""
    if mode != "none" and reusable(folder, name, prints):
        return JobSpec(name, "stage", name, resources=res, fingerprints=prints, reused=True)
    earlier = from_history(cfg, name, prints) if mode == "history" else None
    if earlier is None:
        return None
    return JobSpec(
        name,
        "stage",
        name,
        resources=res,
        fingerprints=prints,
        reused=True,
        reused_from=earlier.run_id,
        earlier=earlier.result,
    )


def array_size(cfg: DictConfig, stage: Stage) -> int:
    """Tasks of the stage's job array, decided now from its typed config (0: no array)."""
    if stage.array is None:
        return 0
    section = (cfg.get("stages") or {}).get(stage.name)
    scfg = typed(stage.config, section, f"stages.{stage.name}") if stage.config else section
    return int(stage.array(scfg))


def build_plan(cfg: DictConfig, registry: Mapping[str, Stage], folder: RunFolder) -> list[JobSpec]:
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    chosen = selected_stages(cfg, registry)
    mode = reuse_mode(cfg)
    jobs: list[JobSpec] = []
    live: set[str] = set()  # stage main jobs that will actually run
    for stage in chosen:
        prints = input_fingerprints(plain, stage.inputs, plain["stages"].get(stage.name))
        res = resources(cfg, stage.name)
        kept = reused_job(cfg, folder, stage.name, prints, res, mode)
        if kept is not None:
            jobs.append(kept)
            continue
        before = tuple((dep, "afterok") for dep in stage.after if dep in live)
        parts = [
            JobSpec(
                f"{stage.name}.{part}",
                "part",
                stage.name,
                part,
                before,
                resources(cfg, stage.name, part),
                prints,
            )
            for part in stage.parts
        ]
        tasks = array_size(cfg, stage)
        if tasks > 1:
            parts.append(
                JobSpec(
                    f"{stage.name}.{ARRAY_PART}",
                    "part",
                    stage.name,
                    ARRAY_PART,
                    before,
                    resources(cfg, stage.name, ARRAY_PART),
                    prints,
                    array=tasks,
                )
            )
        deps = before + tuple((p.name, "afterany") for p in parts)
        jobs += [*parts, JobSpec(stage.name, "stage", stage.name, None, deps, res, prints)]
        live.add(stage.name)
    gate_deps = tuple((name, "afterany") for name in sorted(live, key=[s.name for s in chosen].index))
    jobs.append(JobSpec(GATE, "gate", None, None, gate_deps, resources(cfg, GATE)))
    return jobs


def plan_document(jobs: list[JobSpec], **extra: Any) -> dict[str, Any]:
    return {**extra, "jobs": {job.name: job.to_dict() for job in jobs}}
