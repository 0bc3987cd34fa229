"""`python -m pipeline.status [run_id]`: where a run stands, from its folder and from `sacct` (no run id:
the latest run under the output root).

The same table is what `launch wait=true` shows live while it follows a run.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from pipeline.errors import InputError, PreflightError, one_line
from pipeline.progress import make_console
from pipeline.record import history, integrity
from pipeline.record.records import RecordError
from pipeline.record.remedy import corrected_lines_of
from pipeline.record.runfolder import RunFolder


def stage_status(folder: RunFolder, stage: str | None, row: dict[str, Any] | None = None) -> str:
    """A stage's result status, or for the gate row the gate's decision; empty while there is none
    (or while the file there is an earlier job's: see `produced_by`), `corrupt` when the file is
    unreadable (a relaunch of the run id redoes it)."""
    path = folder.gate_file if stage is None else folder.result_file(stage)
    if row is not None and not produced_by(folder, path, row):
        return ""
    if stage is not None:
        return folder.result_status(stage)
    try:
        record = folder.load_gate()
    except (RecordError, ValueError, TypeError):
        return "corrupt"
    return record.gate if record else ""


def produced_by(folder: RunFolder, path: Path, row: dict[str, Any]) -> bool:
    """Whether the result at `path` is the work of the job `row` records (jobs.json), not of a job of an
    earlier launch of this run id: a relaunch must not show the old gate's `clear` beside its new gate
    job's SUBMITTED. The result's provenance names the Slurm job that wrote it; on either executor a
    result older than its job's submission (submitit's `<id>_submitted.pkl`) is an earlier job's."""
    job_id = str(row.get("job_id") or "")
    if not job_id or str(row.get("state") or "").startswith("REUSED"):
        return True  # a reused result, or nothing recorded to compare with
    try:
        written = path.stat().st_mtime_ns
    except OSError:
        return True  # nothing there (or unreadable): result_status says so
    if path != folder.gate_file:
        with contextlib.suppress(OSError, ValueError, TypeError, RecordError):
            writer = folder.load_result(path.stem).provenance.get("slurm_job_id")
            if writer and str(writer) != job_id.split("_")[0]:
                return False
    try:
        return written >= folder.submitted_file(job_id).stat().st_mtime_ns
    except OSError:
        return True  # submitit's record of the submission is gone: nothing says the result is older


CHAINED = "chained"  # jobs.json's row of the training job chained on the gate (not a planned check job)


def chained_row(jobs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The chained training job as a table row (its dependency on the gate), where one was submitted."""
    row = jobs.get(CHAINED)
    if not row:
        return []
    kind = str(row.get("depends_on") or "afterok").partition(":")[0]  # `afterok:<gate job id>`
    spec = {"name": "chained training job", "deps": [["gate", kind]], "resources": None, "kind": CHAINED,
            "stage": None}  # fmt: skip
    return [{"spec": spec, "job_id": row.get("job_id"), "state": row.get("state", "")}]


def build_table(folder: RunFolder, rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title)
    for column in ("job", "job id", "depends on", "resources", "state", "result"):
        table.add_column(column)
    for row in rows:
        job = row["spec"]
        deps = ", ".join(f"{kind}:{name}" for name, kind in job["deps"]) or "-"
        res = job["resources"]
        resources = (
            f"{res['cpus_per_task']} cpu, {res['mem_gb']} GB, {res['gpus_per_node'] or 0} gpu, "
            f"{res['time_min']} min" + (f", {res['partition']}" if res.get("partition") else "")
            if res
            else "its own sbatch options"
        )
        result = stage_status(folder, job["stage"], row) if job["kind"] not in ("part", CHAINED) else ""
        table.add_row(
            job["name"], str(row.get("job_id") or "-"), deps, resources, row.get("state") or "", result
        )
    return table


def reused_state(spec: dict[str, Any]) -> str:
    """`REUSED` (inputs unchanged since an earlier launch of this run id) or `REUSED from <run>` (an
    earlier clear run in the audit history)."""
    if spec.get("skipped"):
        return "SKIPPED"  # no input to judge: no job ran (`JobSpec.skipped` says which keys would run it)
    return f"REUSED from {spec['reused_from']}" if spec.get("reused_from") else "REUSED"


def table_rows(specs: list[dict[str, Any]], jobs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per planned job (`JobSpec.to_dict()`), with its job id and state where it has one."""
    return [
        {
            "spec": spec,
            "job_id": jobs.get(spec["name"], {}).get("job_id"),
            "state": reused_state(spec) if spec["reused"] else jobs.get(spec["name"], {}).get("state", ""),
        }
        for spec in specs
    ]


def sacct_states(job_ids: list[str]) -> dict[str, str]:
    """Current or final state by job id (`FAILED exit 3:0`); a failing `sacct` means no information."""
    if not job_ids:
        return {}
    try:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", ",".join(job_ids)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    rows = [line.split("|") for line in out.splitlines() if line.count("|") == 2]
    return {job: f"{state} exit {code}" for job, state, code in rows}


def show(folder: RunFolder) -> None:
    """The run's job table (states from `sacct` on Slurm, else from `jobs.json`) and its gate."""
    plan = folder.load_plan()
    try:
        jobs = folder.load_jobs()
    except RecordError as exc:  # a torn jobs.json: show the plan without job ids
        print(f"status: {one_line(exc)}", file=sys.stderr)
        jobs = {}
    live = sacct_states([str(j["job_id"]) for j in jobs.values()]) if plan.get("executor") == "slurm" else {}
    for job in jobs.values():
        job["state"] = live.get(str(job.get("job_id")), job.get("state", ""))
    rows = table_rows(list(plan["jobs"].values()), jobs) + chained_row(jobs)
    make_console().print(build_table(folder, rows, f"run {folder.run_id} ({plan.get('executor')})"))
    if folder.gate_file.exists():
        folder.report_gate()
        for line in corrected_lines_of(folder):  # the corrected training line, never run
            print(line)


def verify_history(audit_dir: Path, key_file: str | None) -> int:
    """Every twin of `audit_dir` checked (content digest, chain, HMAC with a key): one line per twin;
    0 when all can be trusted, 3 when one cannot."""
    if not audit_dir.is_dir():
        raise InputError(f"{audit_dir}: not a folder (expected an audit_dir)", path=audit_dir)
    twins = history.verify(audit_dir, integrity.load_key(key_file))
    for twin in twins:
        print(f"{twin.path.name}: {twin.problem}" if twin.problem else f"{twin.path.name}: ok")
    bad = sum(1 for t in twins if t.problem)
    print(f"{audit_dir}: {len(twins)} record(s), {bad} not trusted" + (" (never reused)" if bad else ""))
    return 3 if bad else 0


def build_html(audit_dir: Path, key_file: str | None) -> int:
    """Every record's page and `index.html` rendered again from the JSON twins of `audit_dir`."""
    if not audit_dir.is_dir():
        raise InputError(f"{audit_dir}: not a folder (expected an audit_dir)", path=audit_dir)
    from pipeline.record.html import rebuild_html  # Jinja2: only for the pages

    try:
        pages, index = rebuild_html(audit_dir, key=integrity.load_key(key_file))
    except OSError as exc:
        why = exc.strerror or exc
        raise InputError(f"{audit_dir}: writing the pages failed: {why}", path=audit_dir) from None
    print(f"{index}: {pages} record page(s) and the index written")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.status", description=__doc__)
    parser.add_argument(
        "run", nargs="?", help="a run id (under --output-root/runs) or a run directory; none: the latest run"
    )
    parser.add_argument(
        "--output-root",
        default=None,
        help="the launch's output_root (default: as the shipped config sets)",
    )
    parser.add_argument(
        "--verify-history",
        metavar="AUDIT_DIR",
        nargs="?",
        const="audit_logs",
        help="check every record of an audit_dir (digest, chain, HMAC); exit 3 if one fails",
    )
    parser.add_argument(
        "--html",
        metavar="AUDIT_DIR",
        nargs="?",
        const="audit_logs",
        help="render every record's HTML page and index.html of an audit_dir again from its JSON twins",
    )
    parser.add_argument(
        "--key-file", default=None, help="the team's audit.key_file, for --verify-history and --html"
    )
    args = parser.parse_args(argv)
    try:
        if args.verify_history is not None:
            return verify_history(Path(args.verify_history), args.key_file)
        if args.html is not None:
            return build_html(Path(args.html), args.key_file)
        if args.run is None:
            folder = RunFolder.latest(args.output_root)
            print(f"latest run under {folder.root.parent}: {folder.run_id}")
            show(folder)
            return 0
        show(RunFolder.find(args.run, args.output_root))
    except PreflightError as exc:
        print(f"status: {one_line(exc)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
