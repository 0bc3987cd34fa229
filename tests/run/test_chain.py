"""The command typed after `--` is the training job, chained as typed: on Slurm a generated script ending in
`exec "$@"` submitted `afterok:<gate>` with the argv as its arguments (never spliced into shell text), the
dry run printing both; locally run after a clear gate only with `chain.run_local=true`, printed otherwise,
never started after a blocked one."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.errors import ConfigError
from pipeline.run import chain
from pipeline.run.executors import chain_argv
from tests.conftest import other_stages, run_dir_of, slurm_launch
from tests.in_process_launch import launch_here

# items a shell would split, expand, run or re-quote; JSON as `--rename_map` takes it
TRICKY = [
    "a b",
    "it's",
    '--rename_map={"observation.images.front": "observation.images.camera1"}',
    "$(touch pwned)",
    "${oc.env:HOME}",
    "$HOME",
    "semi;colon",
    "back\\slash",
    "",
]
PRINT_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def test_the_generated_script_runs_the_argv_as_typed_and_no_item_is_shell_text(tmp_path):
    cfg = OmegaConf.create(
        {
            "run_id": "r1",
            "training": {"command": None, "env": {"PREFLIGHT_X": "$(touch pwned) 'q'", "GONE": None}},
        }
    )
    script = tmp_path / "train.sbatch"
    script.write_text(chain.script_text(cfg))
    assert script.read_text().rstrip().endswith('exec "$@"')
    code = (
        "import json, os, sys; "
        "print(json.dumps([sys.argv[1:], os.environ['PREFLIGHT_X'], 'GONE' in os.environ]))"
    )
    command = [sys.executable, "-c", code, *TRICKY]
    argv = chain_argv(script, "4242", ["--partition=gpu"], command)
    assert argv[:4] == ["sbatch", "--parsable", "--partition=gpu", "--dependency=afterok:4242"]
    assert argv[4:] == [str(script), *command]
    # what sbatch does with it: runs the script with the items after it as its arguments
    env = {**os.environ, "GONE": "set"}
    out = subprocess.run(
        ["bash", *argv[4:]], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [TRICKY, "$(touch pwned) 'q'", False]
    assert not (tmp_path / "pwned").exists()


def test_a_training_env_name_that_is_not_a_variable_name_is_refused():
    cfg = OmegaConf.create({"training": {"env": {"A;touch x": "1"}}})
    with pytest.raises(ConfigError, match=r"training\.env\.A;touch x: expected an environment variable name"):
        chain.script_text(cfg)


def test_locally_a_clear_gate_prints_the_command_and_a_blocked_one_does_not_start_it():
    cfg = OmegaConf.create({"training": {"command": ["python", "-c", "print(1)", "a b"]}, "chain": {}})
    said: list[str] = []
    assert chain.after_local_gate(cfg, 0, said.append) == 0
    assert said[-1].endswith("python -c 'print(1)' 'a b'") and "chain.run_local=true" in said[-1]
    assert chain.after_local_gate(cfg, 3, said.append) == 3
    assert said[-1] == "training command not started: the gate did not clear"


def _sbatch_argv(stdout: str) -> list[str]:
    lines = [line for line in stdout.splitlines() if line.startswith("sbatch argv: ")]
    assert len(lines) == 1, stdout
    return shlex.split(lines[0].removeprefix("sbatch argv: "))


def test_the_dry_run_shows_the_chained_job_with_the_typed_argv_exactly(tmp_path):
    command = ["python", "-c", PRINT_ARGV, *TRICKY]
    args = ("launcher=slurm", "dry_run=true", "~demo", other_stages("container_check"))
    proc = launch_here(tmp_path, *args, '+chain.args=["--time=5"]', "--", *command)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    argv = _sbatch_argv(proc.stdout)
    script = argv[argv.index("--dependency=afterok:JOBID_gate") + 1]
    assert argv[:3] == ["sbatch", "--parsable", "--time=5"] and script.endswith("/train.sbatch")
    assert argv[argv.index(script) + 1 :] == command
    shown = proc.stdout.split("---- chained training job", 1)[1]
    assert '\nexec "$@"\n' in shown and "#!/bin/bash" in shown
    assert not Path(script).exists() and "dry run: nothing submitted" in proc.stdout


LOCAL = ("launcher=local", "~demo", "min_free_mb=1", "chain.run_local=true")


def test_locally_run_local_runs_the_command_after_a_clear_gate(tmp_path):
    marker = tmp_path / "trained.json"
    code = f"import json, sys; open({str(marker)!r}, 'w').write(json.dumps(sys.argv[1:]))"
    proc = launch_here(
        tmp_path, *LOCAL, other_stages("container_check"), "--", sys.executable, "-c", code, *TRICKY
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gate: clear" in proc.stdout and "training command (gate clear)" in proc.stdout
    assert json.loads(marker.read_text()) == TRICKY


def test_locally_a_blocked_gate_never_starts_the_command(tmp_path):
    marker = tmp_path / "trained"
    code = f"open({str(marker)!r}, 'w').write('trained')"
    crash = ("plugins=[preflight_crash_stage]", other_stages("container_check"))
    proc = launch_here(tmp_path, *LOCAL, *crash, "--", sys.executable, "-c", code)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "training command not started: the gate did not clear" in proc.stdout
    assert not marker.exists()


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm")
def test_on_slurm_the_chained_job_waits_on_the_gate_then_gets_the_typed_argv(tmp_path):
    from tests.test_slurm import final

    marker = tmp_path / "argv.json"
    code = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"
    command = [sys.executable, "-c", code, str(marker), *TRICKY]
    args = ("launcher=slurm", "~demo", other_stages("container_check"))
    proc = slurm_launch(tmp_path, *args, "+chain.args=['--job-name=chained-argv-test']", "--", *command)
    chained = re.search(r"chained job: (\d+) \(afterok:(\d+)\)", proc.stdout)
    ids = [str(job["job_id"]) for name, job in _jobs(tmp_path, proc).items() if name != "chained"]
    try:
        assert proc.returncode == 0 and chained, proc.stdout + proc.stderr
        train, gate = chained.groups()
        shown = subprocess.run(
            ["scontrol", "show", "job", train], capture_output=True, text=True, check=True, env=os.environ
        ).stdout
        # read right after submission: the gate waits for container_check, so it cannot have ended yet
        dependency = re.search(r"Dependency=(\S+)", shown)
        assert dependency and dependency.group(1).startswith(f"afterok:{gate}"), shown
        assert "JobState=PENDING" in shown and "JobName=chained-argv-test" in shown, shown
        script = run_dir_of(tmp_path, proc) / "train.sbatch"
        assert re.search(rf"Command={re.escape(str(script))}\b", shown), shown
        chained_row = _jobs(tmp_path, proc)["chained"]  # preflight-status shows it with its dependency
        assert chained_row["job_id"] == train and chained_row["depends_on"] == f"afterok:{gate}"
        status = subprocess.run(
            [sys.executable, "-m", "pipeline.status", str(run_dir_of(tmp_path, proc))],
            capture_output=True, text=True, check=True, env={**os.environ, "COLUMNS": "250"},
        ).stdout  # fmt: skip
        row = next(line for line in status.splitlines() if "chained training job" in line)
        assert train in row and "afterok:gate" in row, status
        assert final(train)["State"] == "COMPLETED"  # after the clear gate, with the argv as typed
        assert json.loads(marker.read_text()) == TRICKY
    finally:
        found = [*ids, *(chained.groups()[:1] if chained else ())]
        if found:  # the test's own jobs only
            subprocess.run(["scancel", *found], check=False, env=os.environ)


def _jobs(cwd: Path, proc: subprocess.CompletedProcess[str]) -> dict:
    runs = cwd / "preflight" / "runs"
    if not runs.is_dir():
        return {}
    jobs = run_dir_of(cwd, proc) / "jobs.json"
    return json.loads(jobs.read_text()) if jobs.is_file() else {}
