"""The plan: which jobs a launch submits, what each depends on, and which results can be reused.

Dependencies follow DESIGN.md: every stage runs `afterok` on the stages it declares in `after`
(container_check for all but itself); a stage's parts run before its main job, which waits for them
with `afterany` so that a crashed part is recorded rather than cancelling the merge; the gate runs
`afterany` on every stage, so it always runs and records what happened.

Reuse (`reuse`): `run` keeps a stage's result from an earlier launch of the same run id when its
input fingerprints are unchanged; `history` (the default) also takes it from an earlier clear gate
record in `audit_dir` with exactly these fingerprints (`pipeline.record.history` says which records can be
trusted and which results qualify), copied into this run with `provenance.reused_from`; `none` (or
`off`) runs every stage, as does `stages.<name>.reuse=false` for one stage. Stages that measure the
moment rather than their inputs (free space, quota, the node's devices) are never taken from another
run. A reused result is labelled as the past: its rows name the run and date that measured them, its
provenance the fingerprints that proved the inputs identical and how each was compared, and its plots
are copied into this run (from the earlier record's own copies), so they outlive the earlier run folder.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline.errors import ConfigError
from pipeline.record import history, integrity
from pipeline.record.fingerprint import Fingerprinter, input_fingerprints
from pipeline.record.hashcache import HashCache
from pipeline.record.records import Check, StageResult
from pipeline.record.runfolder import RunFolder
from pipeline.stages import Stage, missing_keys, skip_reason
from pipeline.stages.config import RESOURCE_KEYS, typed

GATE = "gate"
ARRAY_PART = "task"  # a stage's job array is part "task"; task i runs as part "task-<i:04d>"
REUSE_MODES = ("history", "run", "none", "off")
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
    basis: dict[str, str] = field(default_factory=dict)  # how each fingerprint was measured
    # why no job runs for this stage (its inputs were not given); `reused` is then true too: this launch
    # runs nothing for it, and `write_reused` writes its `skipped` result
    skipped: str | None = None
    # that run's result, written into this run folder by `write_reused` (not part of plan.json)
    earlier: StageResult | None = field(default=None, repr=False, compare=False)
    twin: history.Twin | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("earlier")
        data.pop("twin")
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
    """`stage=full` is every registered stage but those in `skip`; otherwise the one named, and
    container_check before it where the training line is a lerobot-train line (unless skipped): the
    chained training must be able to start (its runtime probe, `stages/training_runtime.py`)."""
    skip = set(cfg.get("skip") or ())
    wanted = [n for n in registry if n not in skip] if cfg.stage.name == "full" else [cfg.stage.name]
    probe = "container_check"
    if probe in registry and probe not in skip and probe not in wanted and _lerobot_line(cfg):
        wanted.insert(0, probe)
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


def _lerobot_line(cfg: DictConfig) -> bool:
    from pipeline.readers.lerobot_command import is_lerobot_train, training_argv

    return is_lerobot_train(training_argv(cfg))


def reuse_mode(cfg: DictConfig, stage: str | None = None) -> str:
    """`reuse` (`off` is `none`), or `none` for a stage whose `stages.<name>.reuse` is false."""
    mode = str(cfg.get("reuse") or "history")
    if mode not in REUSE_MODES:
        raise ConfigError("reuse", f"expected one of {', '.join(REUSE_MODES)}, got {mode!r}")
    section = (cfg.get("stages") or {}).get(stage) if stage else None
    if mode == "off" or (hasattr(section, "get") and section.get("reuse") is False):
        return "none"
    return mode


def audit_key(cfg: DictConfig) -> bytes | None:
    return integrity.load_key((cfg.get("audit") or {}).get("key_file"))


def history_notes(cfg: DictConfig) -> list[str]:
    """One line per history entry this launch could not trust (for the record)."""
    if reuse_mode(cfg) != "history" or not cfg.get("audit_dir"):
        return []
    return history.ignored(history.verify(Path(str(cfg.audit_dir)), audit_key(cfg)))


def from_history(cfg: DictConfig, name: str, prints: dict[str, str]) -> history.Earlier | None:
    """An earlier clear run's result of this stage from exactly these inputs, if the history has one."""
    if name in NOT_FROM_HISTORY or not cfg.get("audit_dir"):
        return None
    audit = Path(str(cfg.audit_dir))
    return history.reusable_result(audit, name, prints, str(cfg.get("run_id")), audit_key(cfg))


def write_reused(folder: RunFolder, jobs: list[JobSpec]) -> list[Path]:
    """Copy each result taken from the history into this run (`stages/<stage>.json`), labelled as the
    past: each row names the run that measured it, the provenance how this launch proved the inputs
    identical, and the plots are copied here from the earlier record's copies."""
    written = []
    for job in jobs:
        if job.earlier is None or job.stage is None:
            continue
        if job.skipped:
            written.append(folder.write_result(job.stage, job.earlier))
            continue
        earlier = job.earlier
        created = str(earlier.provenance.get("reused_created") or "")
        prov = {
            **earlier.provenance,
            history.REUSED_FROM: job.reused_from,
            "reused_created": created or _created(job),
            "reused_compared": {k: f"{job.basis.get(k, '?')}: {v}" for k, v in job.fingerprints.items()},
        }
        result = dataclasses.replace(
            earlier,
            provenance=prov,
            checks=tuple(_as_past(c, str(job.reused_from), prov["reused_created"]) for c in earlier.checks),
            artifacts=_copy_artifacts(folder, job),
        )
        written.append(folder.write_result(job.stage, result))
    return written


def _created(job: JobSpec) -> str:
    record = job.twin.record if job.twin else None
    return record.created[:10] if record else "an earlier date"


def _as_past(check: Check, run: str, date: str) -> Check:
    """A reused row keeps its verdict; its sentence says which run measured it, and when."""
    prefix = f"[measured in run {run} on {date[:10]}] "
    message = check.message if check.message.startswith("[measured in run") else prefix + check.message
    return dataclasses.replace(check, message=message, evidence={**check.evidence, "measured_in_run": run})


def _copy_artifacts(folder: RunFolder, job: JobSpec) -> dict[str, str]:
    """The earlier result's artifacts, copied into this run: from the earlier record's own copies in the
    audit history (they outlive its run folder), else from that run folder; a missing one keeps its path
    (the record then says it was not found)."""
    assert job.earlier is not None and job.stage is not None
    twin = job.twin
    copied = {}
    for name, source in job.earlier.artifacts.items():
        candidates = [twin.path.parent / twin.files[source]] if twin and source in twin.files else []
        candidates.append(Path(source))
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            copied[name] = source
            continue
        target = folder.artifacts_dir(job.stage) / "reused" / f"{name}{Path(source).suffix}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found, target)
        copied[name] = str(target)
    return copied


def reusable(folder: RunFolder, name: str, fingerprints: dict[str, str]) -> bool:
    """A stage's last result stands when it reached a verdict from exactly these inputs."""
    try:
        old = folder.load_result(name)
    except (OSError, ValueError, TypeError):
        return False
    return old.status != "error" and old.fingerprints == fingerprints


def reused_job(
    cfg: DictConfig, folder: RunFolder, name: str, prints: tuple[dict[str, str], dict[str, str]], res: dict
) -> JobSpec | None:
    """The stage's job when a result from these inputs stands: this run's own, else the history's."""
    mode = reuse_mode(cfg, name)
    values, basis = prints
    if mode != "none" and reusable(folder, name, values):
        return JobSpec(name, "stage", name, resources=res, fingerprints=values, reused=True, basis=basis)
    earlier = from_history(cfg, name, values) if mode == "history" else None
    if earlier is None:
        return None
    return JobSpec(
        name,
        "stage",
        name,
        resources=res,
        fingerprints=values,
        reused=True,
        reused_from=earlier.run_id,
        basis=basis,
        earlier=earlier.result,
        twin=earlier.twin,
    )


def array_size(cfg: DictConfig, stage: Stage) -> int:
    """Tasks of the stage's job array, decided now from its typed config (0: no array)."""
    if stage.array is None:
        return 0
    section = (cfg.get("stages") or {}).get(stage.name)
    scfg = typed(stage.config, section, f"stages.{stage.name}") if stage.config else section
    return int(stage.array(scfg, cfg))


def fingerprinter(cfg: DictConfig) -> Fingerprinter:
    """One per launch, with the hash cache kept in the audit history (when that folder exists)."""
    audit = Path(str(cfg.audit_dir)) if cfg.get("audit_dir") else None
    cache = HashCache(audit if audit is not None and audit.is_dir() else None, audit_key(cfg))
    whole_mb = float((cfg.get("fingerprint") or {}).get("whole_file_mb") or 64)
    return Fingerprinter(cache, int(whole_mb * 2**20))


def build_plan(cfg: DictConfig, registry: Mapping[str, Stage], folder: RunFolder) -> list[JobSpec]:
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    chosen = selected_stages(cfg, registry)
    reuse_mode(cfg)  # a bad value fails before any file is hashed
    hasher = fingerprinter(cfg)
    jobs: list[JobSpec] = []
    live: set[str] = set()  # stage main jobs that will actually run
    for stage in chosen:
        missing = missing_keys(stage, cfg)
        if missing:
            jobs.append(skipped_job(stage, missing, resources(cfg, stage.name)))
            continue
        both = input_fingerprints(plain, stage.declared_inputs, plain["stages"].get(stage.name), hasher)
        prints = both[0]
        res = resources(cfg, stage.name)
        kept = reused_job(cfg, folder, stage.name, both, res)
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
        jobs += [*parts, JobSpec(stage.name, "stage", stage.name, None, deps, res, prints, basis=both[1])]
        live.add(stage.name)
    hasher.cache.save()
    gate_deps = tuple((name, "afterany") for name in sorted(live, key=[s.name for s in chosen].index))
    jobs.append(JobSpec(GATE, "gate", None, None, gate_deps, resources(cfg, GATE)))
    return jobs


def skipped_job(stage: Stage, missing: tuple[str, ...], res: dict[str, Any]) -> JobSpec:
    """A stage left out for want of input: no job, and a `skipped` result naming the keys that would run
    it (written at launch), so the record shows it as skipped, never as passed."""
    reason = skip_reason(stage, missing)
    result = StageResult(stage.name, "skipped", provenance={"reason": reason, "needs": list(missing)})
    return JobSpec(
        stage.name, "stage", stage.name, resources=res, reused=True, skipped=reason, earlier=result
    )


def plan_document(jobs: list[JobSpec], **extra: Any) -> dict[str, Any]:
    return {**extra, "jobs": {job.name: job.to_dict() for job in jobs}}
