"""The launcher end to end on this machine (local executor): what a user sees without a cluster. The clear
launch is a real `python -m pipeline.launch`; the others run the launcher's entry in the test process
(tests/in_process_launch.py), their jobs processes of the local executor (or, for `launcher=debug`,
of the launcher's own process, as there)."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from pipeline.record import audit
from pipeline.record.records import SCHEMA_PATH
from tests.conftest import Launched, gate_of, launch, other_stages, run_dir_of
from tests.in_process_launch import launch_here
from tests.sif_images import build_image

SCHEMA = json.loads(SCHEMA_PATH.read_text())
CRASH = ("~demo", "plugins=[preflight_crash_stage]", other_stages("container_check"))


@pytest.fixture(scope="module")
def clear_run(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    """A clear local launch of container_check alone (~20 s): its records and its status share it."""
    cwd = tmp_path_factory.mktemp("clear")
    return Launched(cwd, launch(cwd, "launcher=local", "~demo", other_stages("container_check")))


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    """A local launch whose plugin stage crashes: its record, and the local half of local vs debug."""
    cwd = tmp_path_factory.mktemp("crash")
    return Launched(cwd, launch_here(cwd, "launcher=local", *CRASH))


def test_local_run_is_clear_and_leaves_every_record(clear_run):
    tmp_path, proc = clear_run.cwd, clear_run.proc
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = run_dir_of(tmp_path, proc)
    gate = gate_of(run_dir)
    jsonschema.validate(gate, SCHEMA)
    assert gate["gate"] == "clear" and [s["stage"] for s in gate["stages"]] == ["container_check"]
    assert f"gate job: {json.loads((run_dir / 'jobs.json').read_text())['gate']['job_id']}" in proc.stdout
    for name in ("config.yaml", "plan.json", "jobs.json", "stages/container_check.json", "submitit"):
        assert (run_dir / name).exists(), name
    rows = audit.parse_timeline((tmp_path / "audit_logs" / "timeline.md").read_text())
    assert [r["gate"] for r in rows] == ["clear"]
    assert not (tmp_path / "outputs").exists() and not list(tmp_path.glob("*.log"))


def test_crashing_stage_is_an_error_and_blocks_with_exit_3(crash_run):
    proc = crash_run.proc
    assert proc.returncode == 3, proc.stdout + proc.stderr
    gate = gate_of(run_dir_of(crash_run.cwd, proc))
    crash = next(s for s in gate["stages"] if s["stage"] == "crash")
    assert crash["status"] == "error"
    assert "planted crash" in crash["checks"][0]["message"]
    assert "RuntimeError" in crash["checks"][0]["evidence"]["traceback"]
    assert gate["gate"] == "blocked" and any(r.startswith("crash.error") for r in gate["reasons"])


def test_debug_executor_gives_the_same_record_as_local(crash_run, tmp_path):
    local = crash_run.proc
    debug = launch_here(tmp_path, "launcher=debug", *CRASH)
    assert local.returncode == debug.returncode == 3, debug.stdout + debug.stderr
    assert summary(gate_of(run_dir_of(crash_run.cwd, local))) == summary(gate_of(run_dir_of(tmp_path, debug)))


def summary(gate: dict) -> tuple:
    return (
        gate["verdict"],
        gate["gate"],
        tuple(gate["reasons"]),
        tuple((c["id"], c["verdict"]) for s in gate["stages"] for c in s["checks"]),
    )


@pytest.mark.parametrize(
    "override, key",
    [
        ("stage=nonexistent", "stage"),
        ("stages.container_check.resources.mem_gb=-4", "stages.container_check.resources.mem_gb"),
        ("stages.gate.resources.time_min=0", "stages.gate.resources.time_min"),
        ("container=apptainer", "container.image"),
        ("skip=[nosuchstage]", "skip"),
        ("plugins=[no_such_module_xyz]", "plugins"),
        ("launcher.name=cloud", "launcher.name"),
        (
            "stages.determinism.part_resources.ddp.cpus_per_task=0",
            "stages.determinism.part_resources.ddp.cpus_per_task",
        ),
        ("+stages.determinism.part_resources.ddp.gpu=1", "stages.determinism.part_resources.ddp"),
    ],
)
def test_bad_config_fails_before_anything_is_submitted(tmp_path, override, key):
    proc = launch_here(tmp_path, "launcher=local", "~demo", override)
    assert proc.returncode != 0
    assert key in proc.stdout + proc.stderr
    assert not (tmp_path / "preflight").exists()


def test_missing_image_is_named(tmp_path):
    overrides = ("container=apptainer", "container.image=/no/such.sif")
    proc = launch_here(tmp_path, "launcher=local", "~demo", *overrides)
    assert proc.returncode == 2 and "container.image: /no/such.sif does not exist" in proc.stdout


def test_bad_waiver_file_is_named(tmp_path):
    (tmp_path / "w.yaml").write_text(
        "waivers:\n  - check: a.b\n    justification: fine\n    date: 2026-12-01\n"
    )
    proc = launch_here(tmp_path, "launcher=local", "~demo", "waivers_file=w.yaml")
    assert proc.returncode == 2 and "waivers[0]: missing who" in proc.stdout


def test_dry_run_prints_sbatch_scripts_with_dependencies_and_submits_nothing(tmp_path):
    proc = launch_here(
        tmp_path,
        "launcher=slurm",
        "~demo",
        "dry_run=true",
        "plugins=[preflight_crash_stage]",
        other_stages("container_check"),
        "+stages.crash.resources.partition=gpu",
        "+stages.crash.resources.gpus_per_node=2",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.count("#!/bin/bash") == 3
    assert "#SBATCH --dependency=afterok:JOBID_container_check" in out
    assert "#SBATCH --dependency=afterany:JOBID_container_check:JOBID_crash" in out
    assert "#SBATCH --partition=gpu" in out and "#SBATCH --gpus-per-node=2" in out
    assert "dry run: nothing submitted" in out
    assert not (tmp_path / "preflight").exists()


def fake_apptainer(folder: Path) -> Path:
    """Apptainer cannot be installed on this machine: this FAKE records its argv and runs the command
    that follows the image, so the wrapping (argv, binds, no shell strings) is what is tested."""
    script = folder / "apptainer"
    script.write_text(f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_APPTAINER_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
image = next(i for i, a in enumerate(args) if a.endswith(".sif"))
os.environ["APPTAINER_CONTAINER"] = args[image]  # as Apptainer sets it
os.execvp(sys.executable, [sys.executable, *args[image + 2:]])
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_container_apptainer_wraps_every_job_fake_apptainer(tmp_path, monkeypatch):
    shim = fake_apptainer(tmp_path)
    image = build_image(tmp_path, name="my image;rm -rf x.sif").path  # a real SIF: container_check reads it
    log = tmp_path / "argv.log"
    monkeypatch.setenv("FAKE_APPTAINER_LOG", str(log))
    proc = launch_here(
        tmp_path,
        "launcher=local",
        "~demo",
        "container=apptainer",
        f"container.binary={shim}",
        f"container.image='{image}'",
        "container.binds=[/data/shared]",
        other_stages("container_check"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 2  # container_check and gate
    run_dir = run_dir_of(tmp_path, proc)
    for argv in calls:
        assert argv[:2] == ["exec", "--nv"]
        assert f"{run_dir}:{run_dir}" in argv and "/data/shared:/data/shared" in argv
        assert argv[argv.index(str(image)) + 1] == "python"
    gate = gate_of(run_dir)
    assert gate["sources"]["container"] == {"kind": "apptainer", "image": str(image)}
    assert gate["stages"][0]["fingerprints"]["container"].startswith("sha256:")


def test_status_shows_the_stage_states_of_a_run(clear_run):
    run_dir = run_dir_of(clear_run.cwd, clear_run.proc)
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.status", run_dir.name],
        cwd=clear_run.cwd,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    assert "container_check" in out and "COMPLETED" in out and "gate: clear (pass)" in out


def test_an_image_that_is_not_a_sif_is_named_at_launch(tmp_path):
    fake = tmp_path / "image.sif"
    fake.write_bytes(b"#!/bin/sh\necho this is a shell script, not an image\n" * 4)
    shim = fake_apptainer(tmp_path)
    overrides = ("container=apptainer", f"container.binary={shim}", f"container.image={fake}")
    proc = launch_here(tmp_path, "launcher=local", "~demo", *overrides)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"container.image: {fake}: not a SIF file: expected 'SIF_MAGIC' at offset 32" in proc.stdout
    assert not (tmp_path / "preflight" / "runs").exists()  # nothing queued, no run folder


def test_a_missing_input_fails_before_the_demo_is_built(tmp_path):
    proc = launch_here(tmp_path, "stage=full", "launcher=local", "model.path=/nonexistent")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "model.path: /nonexistent: model path does not exist" in proc.stdout
    assert not (tmp_path / "preflight").exists()  # no demo built for the inputs left at their default
