"""render_cache launched as a user would: the demo's faults block locally, and on the local Slurm cluster a
sharded run is one job array whose merged result equals the unsharded one."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.record.records import StageResult
from tests.conftest import gate_of, run_dir_of
from tests.in_process_launch import launch_here

TINY = (
    "demo.render_cache.episodes=2",
    "demo.render_cache.steps=4",
    "demo.render_cache.budgets=[1,2]",
    "demo.render_cache.hires=0",
    "demo.render_cache.raw_frames=0",
)
FAULTY = (
    "demo=faulty",
    "demo.render_cache.episodes=3",
    "demo.render_cache.steps=3",
    "demo.render_cache.budgets=[2,3]",
    "demo.render_cache.hires=0",
    "demo.render_cache.raw_frames=0",
    "demo.render_cache.faults.shift_row=4",
    "demo.render_cache.faults.camera_row=7",
)


def seed(cwd: Path, variant: str, render_demo: Path) -> Path:
    """The render_cache demo the launch would build, already built: the session's (conftest's
    clean_demo/faulty_demo, built from the same settings as TINY/FAULTY), copied where the launch looks.

    Only that one: `stage=render_cache` reads the release and the cache, so the demo provider builds no
    main demo (model, dataset, training) for it, and seeding one cost a copy, or a whole faulty build
    where this test was the session's first to want one. Each test asserts the launch built none."""
    target = cwd / "preflight" / "demo" / f"render_cache-{variant}"
    shutil.copytree(render_demo, target)
    return target


def no_main_demo(cwd: Path, variant: str) -> bool:
    return not (cwd / "preflight" / "demo" / variant).exists()


@pytest.mark.render
def test_faulty_demo_blocks_with_the_row_meant_for_each_fault(
    gl: None, tmp_path: Path, faulty_demo: Path
) -> None:
    """Both launches run the launcher's entry in this process (the stage's job is still a process of its
    own, started by the local executor): what is read is the launch's exit code and files."""
    seed(tmp_path, "faulty", faulty_demo)
    args = ("launcher=local", "launcher.poll_s=0.2", "stage=render_cache", "run_id=rc-faulty", *FAULTY)
    proc = launch_here(tmp_path, *args, seed_demo=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert no_main_demo(tmp_path, "faulty"), proc.stdout
    run_dir = run_dir_of(tmp_path, proc)
    reasons = " ".join(gate_of(run_dir)["reasons"])
    for row in (
        "render_cache.subsets.nested",
        "render_cache.frames.b3.order",
        "render_cache.frames.b3.rerender",
    ):
        assert row in reasons, reasons
    assert "render_cache.frames.b3.pairing" not in reasons
    plan = json.loads((run_dir / "plan.json").read_text())["jobs"]["render_cache"]
    assert set(plan["fingerprints"]) >= {"release", "cache"}
    again = launch_here(tmp_path, *args, seed_demo=False)  # same run id, same inputs: the result is reused
    assert again.returncode == 3, again.stdout + again.stderr
    assert json.loads((run_dir / "plan.json").read_text())["jobs"]["render_cache"]["reused"]


def sacct_ids(job_id: str) -> list[str]:
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,Start,End"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


@pytest.mark.slurm
@pytest.mark.render
def test_sharded_run_is_one_job_array_and_equals_unsharded(
    slurm: None, gl: None, tmp_path: Path, clean_demo: Path, clean_checks: list
) -> None:
    """The merged rows equal the unsharded check's (conftest `clean_checks`, the same demo checked in one
    go, once for the session), paths aside, as the local executor's test compares them."""
    seeded = seed(tmp_path, "default", clean_demo)
    proc = launch_here(
        tmp_path,
        "launcher=slurm",
        "wait=true",
        "stage=render_cache",
        "stages.render_cache.shards=2",
        *TINY,
        seed_demo=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert no_main_demo(tmp_path, "default"), proc.stdout
    run_dir = run_dir_of(tmp_path, proc)
    jobs = json.loads((run_dir / "jobs.json").read_text())
    array_id = str(jobs["render_cache.task"]["job_id"])
    assert "_" not in array_id
    deadline = time.monotonic() + 120
    while (rows := sacct_ids(array_id)) and len(rows) < 4 and time.monotonic() < deadline:
        time.sleep(2)
    assert sorted(r[0] for r in rows) == [f"{array_id}_{i}" for i in range(4)], rows
    assert all(r[1] == "COMPLETED" for r in rows), rows
    gate_start = sacct_ids(str(jobs["gate"]["job_id"]))[0][2]
    assert gate_start >= max(r[3] for r in rows)  # ISO times: the gate started after every task ended
    merged = StageResult.from_dict(json.loads((run_dir / "stages" / "render_cache.json").read_text()))
    rcfg = OmegaConf.create((run_dir / "config.yaml").read_text())
    assert Path(rcfg.release.path) == seeded / "release" and Path(rcfg.cache.path) == seeded / "cache"
    assert [c.to_dict() for c in merged.checks] == unsharded_here(clean_checks, clean_demo, seeded)


@pytest.mark.render
def test_local_executor_runs_the_same_array_tasks(
    gl: None, tmp_path: Path, clean_demo: Path, clean_checks: list
) -> None:
    """Four array tasks, each in its own process and renderer, merged by the stage's job: the merged
    rows equal the unsharded check's (conftest `clean_checks`, the same demo checked in one go)."""
    seeded = seed(tmp_path, "default", clean_demo)
    proc = launch_here(
        tmp_path,
        "launcher=local",
        "launcher.poll_s=0.2",
        "stage=render_cache",
        "stages.render_cache.shards=2",
        *TINY,
        seed_demo=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert no_main_demo(tmp_path, "default"), proc.stdout
    run_dir = run_dir_of(tmp_path, proc)
    tasks = sorted(p.parent.name for p in (run_dir / "parts" / "render_cache").glob("task-*/partial.json"))
    assert tasks == [f"task-{i:04d}" for i in range(4)]
    plan = json.loads((run_dir / "plan.json").read_text())["jobs"]
    assert plan["render_cache.task"]["array"] == 4
    assert plan["render_cache"]["deps"] == [["render_cache.task", "afterany"]]
    merged = StageResult.from_dict(json.loads((run_dir / "stages" / "render_cache.json").read_text()))
    assert Path(OmegaConf.create((run_dir / "config.yaml").read_text()).release.path) == seeded / "release"
    assert [c.to_dict() for c in merged.checks] == unsharded_here(clean_checks, clean_demo, seeded)


def unsharded_here(clean_checks: list, clean_demo: Path, seeded: Path) -> list[dict]:
    """The unsharded rows of `clean_demo` as they read for its copy `seeded`: the same rows, paths aside."""
    return json.loads(json.dumps([c.to_dict() for c in clean_checks]).replace(str(clean_demo), str(seeded)))
