"""From blocked to a line that clears: the faulty demo in its one-line form blocks and prints a corrected
lerobot-train line; launched as printed, that line clears every row it claimed to clear, and each row
that remains holds a data remedy (no flag mends it). Two launches, the fewest that test it: the second
is the user pasting the printed line."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from pipeline.record.remedy import CORRECTED
from tests.conftest import DemoCache, gate_of, run_dir_of
from tests.in_process_launch import launch_here

MODES = '{"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ENV": "QUANTILES", "ACTION": "MEAN_STD"}'
CLAIMED = {
    "contract.normalization.mode:STATE",
    "contract.normalization.mode:ACTION",
    "contract.health.time.order",
    "contract.health.episodes.duplicates",
    "contract.frames.swapped:observation.images.front|observation.images.wrist",
}


def contract_rows(cwd: Path, proc: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    stage = next(s for s in gate_of(run_dir_of(cwd, proc))["stages"] if s["stage"] == "contract")
    return {c["id"]: c for c in stage["checks"]}


def blocking(rows: dict[str, dict]) -> dict[str, dict]:
    return {k: c for k, c in rows.items() if c["verdict"] == "mismatch" and c["severity"] == "hard"}


def test_the_corrected_line_clears_what_it_claims_and_the_rest_hold_data_remedies(
    tmp_path: Path, demo_cache: DemoCache
) -> None:
    demo = demo_cache.seed(tmp_path / "seed", "demo=faulty")
    typed = [
        "lerobot-train",
        f"--policy.path={demo / 'model'}",
        "--dataset.repo_id=local/demo_cube_single",
        f"--dataset.root={demo / 'dataset'}",
        "--policy.normalization_mapping",
        MODES,
        "--steps=300",
    ]
    first_cwd, second_cwd = tmp_path / "typed", tmp_path / "corrected"
    first_cwd.mkdir(), second_cwd.mkdir()
    common = ("stage=contract", "launcher=local", "wait=true", "--")
    first = launch_here(first_cwd, *common, *typed, seed_demo=False)
    assert first.returncode == 3, first.stdout[-3000:] + first.stderr[-2000:]
    lines = first.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("corrected line (not run"))
    corrected = shlex.split(lines[head + 1])
    rows = contract_rows(first_cwd, first)
    verdict = rows[CORRECTED]
    assert verdict["evidence"]["argv"] == corrected and verdict["severity"] == "soft"
    assert set(verdict["evidence"]["cleared"]) == CLAIMED
    assert "--policy.normalization_mapping" not in " ".join(corrected) and MODES not in corrected
    assert all(c in blocking(rows) for c in CLAIMED)  # the line as typed still blocks on them
    assert all(blocking(rows)[c]["remedy"]["kind"] == "line" for c in CLAIMED)

    second = launch_here(second_cwd, *common, *corrected, seed_demo=False)
    assert second.returncode == 3, second.stdout[-3000:] + second.stderr[-2000:]
    again = blocking(contract_rows(second_cwd, second))
    assert not CLAIMED & set(again), sorted(CLAIMED & set(again))
    remaining = {r["id"] for r in verdict["evidence"]["remaining"]}
    assert set(again) == remaining, (sorted(again), sorted(remaining))
    assert all(row["remedy"]["kind"] == "data" for row in again.values()), {
        k: row.get("remedy") for k, row in again.items()
    }
    status = subprocess.run(
        [sys.executable, "-m", "pipeline.status", run_dir_of(first_cwd, first).name],
        cwd=first_cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert shlex.join(corrected) in status.stdout, status.stdout[-2000:] + status.stderr[-2000:]
