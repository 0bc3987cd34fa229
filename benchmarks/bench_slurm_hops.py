"""Scheduling overhead of the spine on the local Slurm cluster.

Measures, in one run:
  1. per dependency hop: a chain of N trivial `afterok` jobs; hop = Start(job i+1) - End(job i) from sacct
     (sacct has 1 s resolution, so the mean over hops is the number to read);
  2. launch -> gate exit for the foundation's stages (container_check + gate), with launcher=slurm
     wait=true, against the same launch with launcher=local as the baseline: the ratio is what Slurm costs.
Prints one JSON line. Needs `scripts/slurm_local.sh up` and SLURM_CONF exported.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def sbatch(*args: str) -> str:
    out = subprocess.run(
        ["sbatch", "--parsable", "--time=1", "--output=/dev/null", *args, "--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip().split(";")[0]


def ended(job_id: str) -> dict[str, str]:
    while True:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State,Start,End"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if out and out.split("|")[0] not in ("PENDING", "RUNNING"):
            state, start, end = out.splitlines()[-1].split("|")
            return {"state": state, "start": start, "end": end}
        time.sleep(0.5)


def hop_latency(n: int) -> list[float]:
    ids = [sbatch()]
    for _ in range(n - 1):
        ids.append(sbatch(f"--dependency=afterok:{ids[-1]}"))
    rows = [ended(i) for i in ids]
    stamp = dt.datetime.fromisoformat
    pairs = zip(rows, rows[1:], strict=False)
    return [(stamp(b["start"]) - stamp(a["end"])).total_seconds() for a, b in pairs]


def launch_seconds(launcher: str) -> float:
    with tempfile.TemporaryDirectory() as cwd:
        from pipeline import stages

        skip = ",".join(n for n in stages.load() if n != "container_check")
        start = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipeline.launch",
                f"launcher={launcher}",
                "wait=true",
                "~demo",
                f"skip=[{skip}]",
            ],
            cwd=cwd,
            capture_output=True,
            text=True,
            env={**os.environ},
        )
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(proc.stdout + proc.stderr)
        run_dir = next((Path(cwd) / "preflight" / "runs").iterdir())
        stage = json.loads((run_dir / "stages" / "container_check.json").read_text())
        return elapsed, stage["timings"]["wall_s"]


def main() -> None:
    hops = hop_latency(int(os.environ.get("HOPS", "6")))
    local_s, local_stage = launch_seconds("local")
    slurm_s, slurm_stage = launch_seconds("slurm")
    print(
        json.dumps(
            {
                "hop_s_mean": round(sum(hops) / len(hops), 2),
                "hop_s_max": max(hops),
                "hops": hops,
                "launch_to_gate_exit_s": {"slurm": round(slurm_s, 2), "local": round(local_s, 2)},
                "container_check_wall_s": {"slurm": slurm_stage, "local": local_stage},
                "slurm_over_local": round(slurm_s / local_s, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
