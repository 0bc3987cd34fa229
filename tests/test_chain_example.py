"""The README's one-step chain, on the local cluster as shipped: `slurm/train_after_gate.sbatch` is
accepted and its job depends on the gate (read back from `scontrol show job`, since `sacct` on Slurm
22.05 has no Dependency field); resources go in as sbatch options (`+chain.args`), and a chain sbatch
refuses prints sbatch's own message in one line with the scancel that stops the queued checks."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, other_stages
from tests.in_process_launch import launch_here

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm")]
SCRIPT = REPO / "slurm" / "train_after_gate.sbatch"


def scontrol(job_id: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True, env=os.environ
    ).stdout


def test_shipped_chain_script_is_accepted_and_waits_for_the_gate(tmp_path: Path) -> None:
    proc = launch_here(
        tmp_path,
        "launcher=slurm",
        "~demo",
        other_stages("container_check"),
        f"+chain.sbatch={SCRIPT}",
        "+chain.args=['--job-name=train-after-gate-test']",
    )
    out = proc.stdout + proc.stderr
    ids = re.findall(r"│ \S+\s+│ (\d+)\s+│", proc.stdout)  # the stage jobs' ids in the table
    chained = re.search(r"chained job: (\d+) \(afterok:(\d+)\)", proc.stdout)
    try:
        assert proc.returncode == 0 and "Traceback" not in out, out
        assert chained, out
        train, gate = chained.groups()
        assert re.search(rf"gate job: {gate}\b", proc.stdout), out
        shown = scontrol(train)
        dependency = re.search(r"Dependency=(\S+)", shown)
        # read right after submission: the gate waits for container_check, so it cannot have ended yet
        assert dependency and dependency.group(1).startswith(f"afterok:{gate}"), shown
        assert "JobName=train-after-gate-test" in shown, shown  # chain.args reached sbatch
    finally:
        found = [*ids, *(chained.groups()[:1] if chained else ())]
        if found:  # the test's own jobs only
            subprocess.run(["scancel", *found], check=False, env=os.environ)


def test_chain_sbatch_refusal_is_sbatch_message_in_one_line(tmp_path: Path) -> None:
    """The old example's 8 GPUs on a cluster without GPUs: sbatch's own words, exit 2, no traceback."""
    proc = launch_here(
        tmp_path,
        "launcher=slurm",
        "~demo",
        other_stages("container_check"),
        f"+chain.sbatch={SCRIPT}",
        "+chain.args=['--gpus-per-node=8']",
    )
    out = proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    ids = last.split("scancel ")[1].split() if "scancel " in last else []
    if ids:  # the checks this launch queued
        subprocess.run(["scancel", *ids], check=False, env=os.environ)
    assert proc.returncode == 2 and "Traceback" not in out, out
    assert last.startswith(f"submission failed: sbatch refused the chained job {SCRIPT}: "), out
    assert "Invalid generic resource" in last and "keep running" in last, out
    assert len(ids) == 2 and all(i.isdigit() for i in ids), last
