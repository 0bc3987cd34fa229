"""Every error a user can cause at an entry point is one line naming the key or file, exit 2, no
traceback, and no run folder left behind (`launch`, `status`, `python -m pipeline.demo`). A launch
refused before any job runs is the launcher's entry run in this process (tests/in_process_launch.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.errors import ConfigError, InputError, one_line
from pipeline.record.fingerprint import digest_path
from pipeline.record.runfolder import RunFolder
from tests.conftest import other_stages
from tests.in_process_launch import launch_here


def assert_one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2, out
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    for needle in needles:
        assert needle in out, out
    return out


def python_m(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def test_plugin_raising_at_import_is_one_line_exit_2(tmp_path):
    proc = launch_here(tmp_path, "launcher=local", "~demo", "plugins=[preflight_import_fails_stage]")
    assert_one_line(proc, "plugins", "preflight_import_fails_stage", "planted import-time failure")
    assert not (tmp_path / "preflight").exists()


def test_stage_dependency_cycle_is_a_config_error(tmp_path):
    proc = launch_here(tmp_path, "launcher=local", "~demo", "plugins=[preflight_cycle_stages]")
    assert_one_line(proc, "stages: dependency cycle", "chicken", "egg")
    assert not (tmp_path / "preflight").exists()


def test_typed_stage_config_is_validated_at_launch_naming_the_key(tmp_path):
    proc = launch_here(
        tmp_path, "launcher=local", "~demo", "plugins=[preflight_typed_stage]", "+stages.typed.limit=-1"
    )
    assert_one_line(proc, "stages.typed.limit", "expected a number > 0")
    proc = launch_here(
        tmp_path, "launcher=local", "~demo", "plugins=[preflight_typed_stage]", "+stages.typed.limit=lots"
    )
    assert_one_line(proc, "stages.typed.limit")
    assert not (tmp_path / "preflight").exists()


def test_unreadable_input_is_named_by_its_path(tmp_path):
    data = tmp_path / "data"
    (data / "meta").mkdir(parents=True)
    (data / "meta" / "info.json").write_text("{}")  # a LeRobot folder to the launch check; then hashed
    (data / "gone.parquet").symlink_to(tmp_path / "no-such-target")
    with pytest.raises(InputError) as info:
        digest_path(data)
    assert info.value.path == str(data / "gone.parquet")
    from tests.malformed.triple import make_triple

    t = make_triple(tmp_path / "triple")  # a model and training config, so the contract stage runs
    paths = (f"model.path={t.model}", f"training.path={t.training}", f"dataset.path={data}")
    proc = launch_here(tmp_path, "launcher=local", "~demo", other_stages("contract"), *paths)
    assert_one_line(proc, str(data / "gone.parquet"))
    assert not (tmp_path / "preflight").exists()


def test_status_of_a_missing_or_corrupt_run_is_one_line(tmp_path):
    assert_one_line(python_m(tmp_path, "pipeline.status", "no-such-run"), "no-such-run", "plan.json")
    run = tmp_path / "preflight" / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "plan.json").write_text('{"jobs": ')
    assert_one_line(python_m(tmp_path, "pipeline.status", "r1"), str(run / "plan.json"), "unreadable plan")


def test_demo_with_an_unknown_variant_is_one_line(tmp_path):
    proc = python_m(tmp_path, "pipeline.demo", "build", "--variant", "nosuch", "--out", str(tmp_path / "d"))
    assert_one_line(proc, "nosuch")
    assert not (tmp_path / "d").exists()


def test_run_folder_discard_removes_only_what_the_launch_created(tmp_path):
    (tmp_path / "preflight" / "keep").mkdir(parents=True)
    folder = RunFolder.of(tmp_path / "preflight", "r1")
    created = folder.missing_parents()
    assert created == [folder.root, tmp_path / "preflight" / "runs"]
    folder.write_config(__import__("omegaconf").OmegaConf.create({"a": 1}))
    folder.discard(created)
    assert sorted(p.name for p in (tmp_path / "preflight").iterdir()) == ["keep"]
    existing = RunFolder.of(tmp_path / "preflight", "r2")
    existing.write_plan({"jobs": {}})
    existing.discard(existing.missing_parents())  # a resumed run is never removed
    assert existing.plan_file.exists()


def test_one_line_joins_multiline_messages():
    assert one_line(ConfigError("stages.x", "bad\n  value\n")) == "stages.x: bad | value"
    assert one_line(ValueError()) == "ValueError"


@pytest.mark.slurm
def test_refused_submission_leaves_no_run_folder(tmp_path, slurm):
    proc = launch_here(
        tmp_path,
        "launcher=slurm",
        "~demo",
        other_stages("container_check"),
        "resources_default.partition=no_such_partition_xyz",
    )
    out = proc.stdout + proc.stderr  # stderr also has sbatch's own lines, echoed by submitit
    assert proc.returncode == 2 and "Traceback" not in out, out
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("submission failed: sbatch refused job container_check"), out
    assert "Invalid partition" in last, out
    assert not (tmp_path / "preflight" / "runs").exists(), out


@pytest.mark.slurm
def test_refused_chained_sbatch_prints_sbatch_stderr_and_what_keeps_running(tmp_path, slurm):
    script = tmp_path / "train.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --partition=no_such_partition_xyz\necho train\n")
    proc = launch_here(
        tmp_path, "launcher=slurm", "~demo", other_stages("container_check"), f"+chain.sbatch={script}"
    )
    out = proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in out, out
    assert last.startswith(f"submission failed: sbatch refused the chained job {script}: "), out
    assert "partition" in last.lower() and "keep running" in last and "scancel " in last, out
    ids = last.split("scancel ")[1].split()
    assert len(ids) == 2 and all(i.isdigit() for i in ids)  # container_check and the gate stay queued
    subprocess.run(["scancel", *ids], check=False, env=os.environ)
