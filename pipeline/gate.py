"""The gate job: merge every stage result into one decision and record it.

The gate runs `afterany` on the stages, so it also runs when a stage crashed or was cancelled; a
stage without a readable result becomes an `error` check, never a silent pass.

"clear" never stands without a record: the gate first removes any earlier decision of this run, writes
the audit record (JSON twin, markdown, timeline row), and only then `gate.json`. A write that fails
(a full or read-only filesystem) ends the job with exit 1 and one line naming the write and the files
that did get written; the decision itself is kept as `gate.incomplete.json` where that is possible.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline import audit
from pipeline.records import GateRecord, RecordError, Rows, StageResult
from pipeline.runfolder import NO_GATE_EXIT, RunFolder
from pipeline.status import sacct_states
from pipeline.waivers import apply_waivers


def run_gate(run_dir: Path) -> int:
    """The gate job: 0 clear, 3 blocked, 1 when the complete record could not be written."""
    folder = RunFolder(run_dir)
    folder.clear_gate()
    cfg = folder.load_config()
    plan = folder.load_plan()
    record = merge(cfg, plan, collect_results(folder, plan))
    try:
        markdown = audit.write_record(Path(cfg.audit_dir), record, audit.audit_mode(cfg.get("audit_mode")))
    except audit.AuditWriteError as exc:
        return _failed(folder, record, str(exc), exc.written)
    written = [markdown.with_suffix(".json"), markdown, markdown.parent / audit.TIMELINE]
    try:
        folder.write_gate(record)
    except OSError as exc:
        return _failed(folder, record, f"writing {folder.gate_file} failed: {exc.strerror or exc}", written)
    print(f"record: {markdown}")
    return folder.report_gate()


def _failed(folder: RunFolder, record: GateRecord, message: str, written: list[Path]) -> int:
    line = folder.record_gate_failure(record, message, written)
    print(f"gate: no complete record: {line}", file=sys.stderr, flush=True)
    return NO_GATE_EXIT


def stage_names(plan: dict[str, Any]) -> list[str]:
    return [name for name, job in plan["jobs"].items() if job["kind"] == "stage"]


def collect_results(folder: RunFolder, plan: dict[str, Any]) -> list[StageResult]:
    states = _job_states(folder, plan)
    return [_read_result(folder, name, states.get(name)) for name in stage_names(plan)]


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
    )


def sources(cfg: DictConfig, plan: dict[str, Any]) -> dict[str, Any]:
    section = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(section, dict)
    return {
        "model": {"name": audit.label(cfg.model), "path": section["model"].get("path")},
        "training": {"path": section["training"].get("path")},
        "dataset": {"name": audit.label(cfg.dataset), "path": section["dataset"].get("path")},
        "container": {k: section["container"].get(k) for k in ("kind", "image")},
        "known_good_reference": section.get("known_good", {}).get("path")
        if section.get("known_good")
        else None,
        "executor": plan.get("executor"),
        "git_sha": plan.get("git_sha"),
        "gate_job_id": plan.get("gate_job_id"),
    }
