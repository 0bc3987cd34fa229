"""A dataset alone runs its contract and gate in the launcher's process (`pipeline/run/inprocess.py`); the
records are the DAG's. Each comparison launches the same real dataset twice as a user types it, once
with `launcher.in_process=false` (the local runner's job processes) and once in process, each in its own
folder, and compares what they wrote field by field, masking only what differs by nature: the run id,
the folder, times, job ids (pids), and the digests over those. The launcher's entry runs in the test
process (tests/in_process_launch.py): what is compared is what the launch wrote and said, not its
process; the DAG's jobs stay processes of the local runner."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from pipeline.errors import ConfigError
from pipeline.run import inprocess
from pipeline.run.plan import JobSpec
from tests.conftest import DemoCache, gate_of, run_dir_of
from tests.in_process_launch import launch_here

DATASET = "SamueleSandrini__record-test"  # v3.0, 1492 rows, no videos: unverifiable rows, blocked by default
ALONE = ("stage=contract", "launcher=local", "wait=true")
TIMES = {"created", "started", "wall_s", "span_s", "parts_wall_s"}
BY_NATURE = TIMES | {"digest", "chain", "hmac", "previous", "pid", "job_id"}
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+\-]\d\d:\d\d")


def _dataset(real_data: Path) -> Path:
    folder = real_data / DATASET
    if not folder.is_dir():
        pytest.skip(f"real dataset not present: {folder}")
    return folder


def _masked(value: Any, run_id: str, cwd: Path) -> Any:
    """`value` with what differs by nature between two launches replaced by a placeholder."""
    if isinstance(value, dict):
        hidden = BY_NATURE | {"jobs"}
        return {
            _masked(k, run_id, cwd): "<by nature>" if k in hidden else _masked(v, run_id, cwd)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v, run_id, cwd) for v in value]
    if isinstance(value, str):
        return STAMP.sub("<time>", value.replace(str(cwd), "<cwd>").replace(run_id, "<run>"))
    return value


def _ours(path: Path) -> bool:
    """Not the jobs' own logs and pickles (`submitit/`), which by nature differ between the paths."""
    return "submitit" not in path.parts


def _both(tmp_path: Path, dataset: Path, *overrides: str) -> dict[str, dict[str, Any]]:
    """The two launches of the same inputs, each in its own folder; what each wrote, masked."""
    seen = {}
    for path, setting in (("dag", "launcher.in_process=false"), ("inprocess", "launcher.in_process=true")):
        cwd = tmp_path / path
        cwd.mkdir()
        proc = launch_here(cwd, *ALONE, f"dataset.path={dataset}", setting, *overrides, seed_demo=False)
        run_dir = run_dir_of(cwd, proc)
        run_id, audit = run_dir.name, cwd / "audit_logs"
        twin = next(audit.glob(f"*_{run_id}_audit.json"))
        seen[path] = {
            "code": proc.returncode,
            "said": [line for line in proc.stdout.splitlines() if line.startswith(("gate:", "  - "))],
            "stage": _masked(json.loads((run_dir / "stages" / "contract.json").read_text()), run_id, cwd),
            "gate": _masked(gate_of(run_dir), run_id, cwd),
            "twin": _masked(json.loads(twin.read_text()), run_id, cwd),
            "markdown": _masked(twin.with_suffix(".md").read_text(), run_id, cwd),
            "timeline": _masked((audit / "timeline.md").read_text(), run_id, cwd),
            "audit files": sorted(_masked(str(p.relative_to(audit)), run_id, cwd) for p in audit.rglob("*")),
            "run files": sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if _ours(p)),
            "plan": _masked(json.loads((run_dir / "plan.json").read_text()), run_id, cwd),
            "jobs": _masked(json.loads((run_dir / "jobs.json").read_text()), run_id, cwd),
            "pages": [(audit / "index.html").is_file(), twin.with_suffix(".html").is_file()],
        }
        assert "in process" in proc.stdout if path == "inprocess" else "in process" not in proc.stdout
    for path in seen:  # the launch id is each launch's own random token
        seen[path]["plan"].pop("launch_id")
    return seen


def _same(seen: dict[str, dict[str, Any]]) -> None:
    dag, here = seen["dag"], seen["inprocess"]
    for field in dag:
        if field == "markdown":  # the stage table's job id and wall time cells
            strip = re.compile(r"\| \d+ \| [\d.]+ \|")
            assert strip.sub("|", dag[field]) == strip.sub("|", here[field])
        else:
            assert dag[field] == here[field], field


def test_a_blocked_real_dataset_gives_the_dags_records_and_exit_3(tmp_path, real_data):
    seen = _both(tmp_path, _dataset(real_data))
    assert seen["dag"]["code"] == 3 and seen["dag"]["gate"]["gate"] == "blocked"
    _same(seen)


def test_a_clear_real_dataset_gives_the_dags_records_and_exit_0(tmp_path, real_data):
    seen = _both(tmp_path, _dataset(real_data), "gate.unverifiable=warn")
    assert seen["dag"]["code"] == 0 and seen["dag"]["gate"]["gate"] == "clear"
    _same(seen)


def test_a_result_from_the_history_is_reused_in_process(tmp_path, demo_cache: DemoCache):
    """The reuse decision is the plan's, before either path runs a job: a second in-process launch
    takes the first one's clear contract from the audit history and runs only the gate here."""
    demo_cache.seed(tmp_path)
    first = launch_here(tmp_path, "stage=contract", "launcher=local", "run_id=one")
    assert first.returncode == 0 and "in process" in first.stdout, first.stdout + first.stderr
    second = launch_here(tmp_path, "stage=contract", "launcher=local", "run_id=two")
    assert second.returncode == 0, second.stdout + second.stderr
    run_dir = tmp_path / "preflight" / "runs" / "two"
    plan = json.loads((run_dir / "plan.json").read_text())["jobs"]["contract"]
    assert plan["reused"] and plan["reused_from"] == "one"
    assert json.loads((run_dir / "jobs.json").read_text())["contract"]["state"] == "COMPLETED (reused)"
    stage = next(s for s in gate_of(run_dir)["stages"] if s["stage"] == "contract")
    assert stage["provenance"]["reused_from"] == "one"


# --- the rule, on plans built by hand (no launch) ----------------------------------------------------


def _cfg(**launcher: Any) -> Any:
    return OmegaConf.create({"launcher": {"name": "local", **launcher}, "container": {"kind": "none"}})


CONTRACT = JobSpec("contract", "stage", "contract")
GATE = JobSpec("gate", "gate", None, deps=(("contract", "afterany"),))


def test_the_rule_takes_a_dataset_alone_and_nothing_else():
    assert inprocess.chosen([CONTRACT, GATE], _cfg(), "local", adopted=False)
    reused = JobSpec("container_check", "stage", "container_check", reused=True)
    assert inprocess.chosen([reused, CONTRACT, GATE], _cfg(), "local", adopted=False)
    probe = JobSpec("container_check", "stage", "container_check")
    part = JobSpec("determinism.twin_a", "part", "determinism", "twin_a")
    array = JobSpec("contract", "stage", "contract", array=4)
    for jobs in ([probe, CONTRACT, GATE], [part, GATE], [array, GATE]):
        assert not inprocess.chosen(jobs, _cfg(), "local", adopted=False)
    assert not inprocess.chosen([CONTRACT, GATE], _cfg(), "debug", adopted=False)
    assert not inprocess.chosen([CONTRACT, GATE], _cfg(), "local", adopted=True)
    assert not inprocess.chosen([CONTRACT, GATE], _cfg(in_process=False), "local", adopted=False)
    image = OmegaConf.create({"launcher": {"name": "local"}, "container": {"kind": "apptainer"}})
    assert not inprocess.chosen([CONTRACT, GATE], image, "local", adopted=False)


def test_a_non_boolean_setting_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match="launcher.in_process"):
        inprocess.chosen([CONTRACT, GATE], _cfg(in_process="yes"), "local", adopted=False)
