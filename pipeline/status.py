"""`python -m pipeline.status <run_id>`: where a run stands, from its folder and from `sacct`.

The same table is what `launch wait=true` shows live while it follows a run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pipeline.jobs import result_path


def stage_status(run_dir: Path, stage: str | None) -> str:
    if stage is None:
        gate = run_dir / "gate.json"
        return json.loads(gate.read_text())["gate"] if gate.exists() else ""
    path = result_path(run_dir, stage)
    return json.loads(path.read_text())["status"] if path.exists() else ""


def build_table(run_dir: Path, rows: list[dict[str, Any]], title: str) -> Table:
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
        )
        result = stage_status(run_dir, job["stage"]) if job["kind"] != "part" else ""
        table.add_row(
            job["name"], str(row.get("job_id") or "-"), deps, resources, row.get("state") or "", result
        )
    return table


def table_rows(specs: list[dict[str, Any]], jobs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per planned job (`JobSpec.to_dict()`), with its job id and state where it has one."""
    return [
        {
            "spec": spec,
            "job_id": jobs.get(spec["name"], {}).get("job_id"),
            "state": "REUSED" if spec["reused"] else jobs.get(spec["name"], {}).get("state", ""),
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.status", description=__doc__)
    parser.add_argument("run", help="a run id (under --output-root/runs) or a run directory")
    parser.add_argument("--output-root", default="preflight", help="the launch's output_root")
    args = parser.parse_args(argv)
    run_dir = Path(args.run) if Path(args.run).is_dir() else Path(args.output_root) / "runs" / args.run
    if not (run_dir / "plan.json").exists():
        print(f"{run_dir}: no plan.json; is this a run directory?", file=sys.stderr)
        return 2
    plan = json.loads((run_dir / "plan.json").read_text())
    jobs = json.loads((run_dir / "jobs.json").read_text()) if (run_dir / "jobs.json").exists() else {}
    live = sacct_states([str(j["job_id"]) for j in jobs.values()]) if plan.get("executor") == "slurm" else {}
    for job in jobs.values():
        job["state"] = live.get(str(job.get("job_id")), job.get("state", ""))
    rows = table_rows(list(plan["jobs"].values()), jobs)
    Console().print(build_table(run_dir, rows, f"run {run_dir.name} ({plan.get('executor')})"))
    gate = run_dir / "gate.json"
    if gate.exists():
        record = json.loads(gate.read_text())
        print(f"gate: {record['gate']} ({record['verdict']})")
        for reason in record["reasons"]:
            print(f"  - {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
