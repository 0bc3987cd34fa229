"""The gate job: merge every stage result into one decision and record it.

The gate runs `afterany` on the stages, so it also runs when a stage crashed or was cancelled; a
stage without a readable result becomes an `error` check, never a silent pass.

"clear" never stands without a record: the gate first removes any earlier decision of this run, writes
the audit record (JSON twin, markdown, timeline row, its HTML page and the history's index.html), and
only then `gate.json`. A write that fails
(a full or read-only filesystem) ends the job with exit 1 and one line naming the write and the files
that did get written; the decision itself is kept as `gate.incomplete.json` where that is possible.
With `gate.junit=PATH` the same record is also written as JUnit XML (before `gate.json`, so a
failed write is one of those failures too).

The gate also adds what only the run folder knows to each stage's result: the id of every job the stage
ran as (its main job and its part jobs, from `jobs.json`) and its wall time including the part jobs
(`done.json` of each part): the record then says where and how long a stage really ran.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline.errors import ConfigError
from pipeline.record import audit, integrity
from pipeline.record.html import write_html
from pipeline.record.junit import write_junit
from pipeline.record.records import GateRecord, PartDone, RecordError, Rows, StageResult
from pipeline.record.remedy import corrected_lines
from pipeline.record.runfolder import NO_GATE_EXIT, PART_DONE, RunFolder, demo_dir
from pipeline.record.text import quoted_argv
from pipeline.record.waivers import apply_waivers
from pipeline.run.status import sacct_states


def run_gate(run_dir: Path) -> int:
    """The gate job: 0 clear, 3 blocked, 1 when the complete record could not be written."""
    folder = RunFolder(run_dir)
    folder.clear_gate()
    cfg = folder.load_config()
    plan = folder.load_plan()
    record = merge(cfg, plan, collect_results(folder, plan))
    mode = audit.audit_mode(cfg.get("audit_mode"))
    try:
        key = integrity.load_key((cfg.get("audit") or {}).get("key_file"))
        markdown = audit.write_record(Path(cfg.audit_dir), record, mode, key)
    except audit.AuditWriteError as exc:
        return _failed(folder, record, str(exc), exc.written)
    except ConfigError as exc:  # the key file went missing or bad since launch
        return _failed(folder, record, str(exc), [])
    written = [markdown.with_suffix(".json"), markdown, markdown.parent / audit.TIMELINE]
    try:  # the page beside the record and the history's index.html: derived from the twins, like the timeline
        written += write_html(Path(cfg.audit_dir), markdown, mode, key)
    except OSError as exc:
        return _failed(folder, record, write_problem(exc), written)
    junit = junit_path(cfg)
    if junit is not None:
        try:
            written.append(write_junit(junit, record, mode))
        except OSError as exc:
            return _failed(folder, record, f"writing {junit} failed: {exc.strerror or exc}", written)
    try:
        folder.write_gate(record)
    except OSError as exc:
        return _failed(folder, record, f"writing {folder.gate_file} failed: {exc.strerror or exc}", written)
    page = markdown.with_suffix(".html")
    print(f"record: {markdown}; page: {page}" + (f"; junit: {junit}" if junit else ""))
    code = folder.report_gate()
    for line in corrected_lines(record.stages):  # in the gate job's log too: printed, never run
        print(line)
    return code


def write_problem(exc: OSError) -> str:
    """One line naming the file the page or index write failed on and why (an `index.html` someone made
    a folder is said to be one: a rename onto it fails with "Is a directory")."""
    target = exc.filename2 or exc.filename
    if target is None:
        return f"writing the record's page or the index failed: {exc.strerror or exc}"
    if isinstance(exc, IsADirectoryError) or Path(target).is_dir():
        return f"writing {target} failed: it is a folder, not a file (remove or rename it)"
    return f"writing {target} failed: {exc.strerror or exc}"


def junit_path(cfg: DictConfig) -> Path | None:
    """`gate.junit`: where the JUnit XML goes (launch made it absolute); None: no JUnit file."""
    junit = (cfg.get("gate") or {}).get("junit")
    return Path(junit).expanduser() if junit else None


def _failed(folder: RunFolder, record: GateRecord, message: str, written: list[Path]) -> int:
    line = folder.record_gate_failure(record, message, written)
    print(f"gate: no complete record: {line}", file=sys.stderr, flush=True)
    return NO_GATE_EXIT


def stage_names(plan: dict[str, Any]) -> list[str]:
    return [name for name, job in plan["jobs"].items() if job["kind"] == "stage"]


def collect_results(folder: RunFolder, plan: dict[str, Any]) -> list[StageResult]:
    states = _job_states(folder, plan)
    return [
        with_jobs(folder, plan, states, _read_result(folder, name, states.get(name)))
        for name in stage_names(plan)
    ]


def with_jobs(
    folder: RunFolder, plan: dict[str, Any], jobs: dict[str, dict[str, Any]], result: StageResult
) -> StageResult:
    """The result plus the ids of the jobs it ran as (`provenance.jobs`: `main` and each part, from
    jobs.json) and, where it has part jobs, their timings: `parts` (how many), `parts_wall_s` (their
    wall times summed) and `span_s` (from the first part's start to the stage's end)."""
    if plan["jobs"].get(result.stage, {}).get("reused"):
        return result  # this launch ran no job for it: the result's own provenance says where it ran
    ids = {"main": (jobs.get(result.stage) or {}).get("job_id")}
    for name, spec in plan["jobs"].items():
        if spec.get("kind") == "part" and spec.get("stage") == result.stage:
            ids[str(spec.get("part"))] = (jobs.get(name) or {}).get("job_id")
    provenance = {**result.provenance, "jobs": {k: str(v) for k, v in ids.items() if v is not None}}
    return dataclasses.replace(
        result, provenance=provenance, timings={**result.timings, **_parts(folder, result)}
    )


def _parts(folder: RunFolder, result: StageResult) -> dict[str, float]:
    """Timings of the parts that finished (`done.json` with `started` and `finished`)."""
    spans = []
    for done in sorted(folder.parts_dir(result.stage).glob(f"*/{PART_DONE}")):
        try:
            part = PartDone.from_dict(json.loads(done.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError, RecordError):
            continue
        spans.append((part.started, part.finished))
    started, wall = result.timings.get("started"), result.timings.get("wall_s")
    if not spans or started is None or wall is None:
        return {}
    end = max(started + wall, *(f for _, f in spans))
    return {
        "parts": float(len(spans)),
        "parts_wall_s": round(sum(f - s for s, f in spans), 3),
        "span_s": round(end - min(started, *(s for s, _ in spans)), 3),
    }


def _read_result(folder: RunFolder, stage: str, job: dict[str, Any] | None) -> StageResult:
    path = folder.result_file(stage)
    try:
        return folder.load_result(stage)
    except FileNotFoundError:
        state = (job or {}).get("state", "unknown")
        message = f"no result at {path}: the stage job ({(job or {}).get('job_id')}) ended {state}"
    except (RecordError, TypeError, ValueError) as exc:
        message = f"unreadable result {path}: {exc}"
    check = Rows(stage, "container")(
        "result", stage, "error", message, evidence={"path": str(path), "job": job}
    )
    return StageResult.from_checks(stage, [check])


def _job_states(folder: RunFolder, plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Job ids and end states, for the evidence of a stage that left no result (best effort)."""
    try:
        jobs = folder.load_jobs()
    except RecordError:
        jobs = {}
    if plan.get("executor") == "slurm" and shutil.which("sacct"):
        states = sacct_states([str(job.get("job_id")) for job in jobs.values()])
        for job in jobs.values():
            job["state"] = states.get(str(job.get("job_id")), job.get("state"))
    return jobs


def merge(cfg: DictConfig, plan: dict[str, Any], results: Iterable[StageResult]) -> GateRecord:
    today = dt.datetime.now(dt.timezone.utc)
    results, applied = apply_waivers(list(results), plan.get("waivers", []), today.date())
    checks = [c for r in results for c in r.checks]
    block_unverifiable = cfg.gate.unverifiable == "block"
    reasons = [
        f"{c.id}: {c.message or c.verdict}"
        for c in checks
        if c.blocking or (block_unverifiable and c.verdict == "unverifiable")
    ]
    if any(c.verdict == "mismatch" for c in checks):
        verdict = "mismatch"
    elif any(c.verdict in ("unverifiable", "error") for c in checks):
        verdict = "unverifiable"
    else:
        verdict = "pass"
    if not results:
        reasons.append("no stage ran: nothing was verified")
    return GateRecord(
        run_id=str(cfg.run_id),
        created=today.isoformat(timespec="seconds"),
        verdict=verdict,
        gate="blocked" if reasons else "clear",
        reasons=tuple(reasons),
        stages=tuple(results),
        sources=sources(cfg, plan),
        fingerprints={r.stage: r.fingerprints for r in results},
        waivers=tuple(applied),
        history=tuple(str(line) for line in plan.get("history") or ()),
    )


def sources(cfg: DictConfig, plan: dict[str, Any]) -> dict[str, Any]:
    section = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(section, dict)
    return {
        "model": {"name": audit.label(cfg.model), "path": section["model"].get("path")},
        "training": training_source(section["training"]),
        "dataset": {"name": audit.label(cfg.dataset), "path": section["dataset"].get("path")},
        "container": {k: section["container"].get(k) for k in ("kind", "image")},
        "known_good_reference": section.get("known_good", {}).get("path")
        if section.get("known_good")
        else None,
        "executor": plan.get("executor"),
        "git_sha": plan.get("git_sha"),
        "gate_job_id": plan.get("gate_job_id"),
        "variant": demo_variant(cfg),
        **({"deploy": deploy} if (deploy := deploy_source(section)) else {}),
    }


def deploy_source(section: dict[str, Any]) -> list[dict[str, Any]]:
    """D, where the trained policy will run, as the launch named it: the training line's env, the deploy
    line, a D file (what each provides is in the contract's `deploy.*.source` rows)."""
    found: list[dict[str, Any]] = []
    training = [str(a) for a in (section.get("training") or {}).get("command") or []]
    env = [a for a in training if a.startswith(("--env.", "--eval_freq"))]
    if any(a.startswith("--env.type") for a in env):
        found.append({"from": "training.command", "line": env})
    deploy = section.get("deploy") or {}
    if deploy.get("command"):
        found.append({"from": "deploy.command", "line": [str(a) for a in deploy["command"]]})
    if deploy.get("path"):
        found.append({"from": "deploy.path", "path": str(deploy["path"])})
    return found


def training_source(training: dict[str, Any]) -> dict[str, Any]:
    """B's path, and where it came from a training command after `--`: that argv and who composed B."""
    source = {"path": training.get("path")}
    if training.get("command"):
        source.update(command=quoted_argv(list(training["command"])), composed_by=training.get("composed_by"))
    return source


def demo_variant(cfg: DictConfig) -> str | None:
    """The demo's `variant` (`default`, `faulty`) when an input is the embedded demo's, so the history
    tells the two apart; None for the user's own inputs."""
    variant = (cfg.get("demo") or {}).get("variant")
    if not variant or not cfg.get("output_root"):
        return None
    root = demo_dir(cfg.output_root).resolve()
    for key in ("model", "dataset", "training", "release", "cache"):
        path = (cfg.get(key) or {}).get("path")
        if path and Path(str(path)).resolve().is_relative_to(root):
            return str(variant)
    return None
