"""The history that remembers: a stage's result taken from an earlier clear gate record in audit_dir.

The planner cases use constructed JSON twins; the launch case runs the real launcher (local executor; its
entry in this process, tests/in_process_launch.py, its jobs as processes) three times on one audit_dir
with a cheap plugin stage that counts its runs.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.errors import ConfigError
from pipeline.record import history
from pipeline.record.audit import record_stem
from pipeline.record.records import Check, GateRecord, StageResult
from pipeline.record.runfolder import RunFolder
from pipeline.run.plan import build_plan, write_reused
from pipeline.stages import Stage
from pipeline.storage import atomic_write_json
from tests.conftest import gate_of, other_stages
from tests.in_process_launch import launch_here

REPO = Path(__file__).resolve().parents[2]


def noop(cfg, ctx):
    return StageResult.from_checks(ctx.stage, [])


REGISTRY = {
    "container_check": Stage("container_check", noop, after=()),
    "contractish": Stage("contractish", noop, inputs=("dataset",)),
}


def config(tmp_path: Path, **extra):
    base = OmegaConf.load(REPO / "pipeline" / "conf" / "config.yaml")
    base = OmegaConf.masked_copy(base, ["resources_default", "skip", "reuse"])
    data = tmp_path / "data.txt"
    if not data.exists():
        data.write_text("x")
    section = {"stage": {"name": "full"}, "stages": {}, "container": {"image": None}, "run_id": "now"}
    section |= {"dataset": {"path": str(data)}, "model": {"path": None}, "training": {"path": None}}
    return OmegaConf.merge(base, section, {"audit_dir": str(tmp_path / "audit")}, extra)


def result(stage: str, prints: dict[str, str], verdict: str = "match", **provenance) -> StageResult:
    row = Check(id=f"{stage}.x", stage=stage, category="units", feature="f", verdict=verdict)
    return StageResult.from_checks(stage, [row], fingerprints=prints, provenance=provenance)


def twin(
    audit: Path, run_id: str, results: list[StageResult], gate: str = "clear", created: str = ""
) -> Path:
    record = GateRecord(
        run_id=run_id,
        created=created or f"2026-12-01T00:00:{len(list(audit.glob('*.json'))) if audit.exists() else 0:02d}",
        verdict="pass",
        gate=gate,
        reasons=() if gate == "clear" else ("x: blocked",),
        stages=tuple(results),
        sources={"model": {"name": "m"}, "dataset": {"name": "d"}},
        fingerprints={r.stage: r.fingerprints for r in results},
    )
    sealed = history.seal(record.to_dict(), history.chain_head(audit), None)
    return atomic_write_json(audit / f"{record_stem(record)}.json", sealed)


def plan_of(cfg, folder: RunFolder) -> dict:
    return {j.name: j for j in build_plan(cfg, REGISTRY, folder)}


def test_a_clear_record_with_the_same_fingerprints_is_reused_and_named(tmp_path):
    cfg = config(tmp_path)
    first = plan_of(cfg, RunFolder(tmp_path / "run"))
    prints = first["contractish"].fingerprints
    audit = tmp_path / "audit"
    twin(
        audit,
        "old",
        [result("contractish", prints), result("container_check", first["container_check"].fingerprints)],
    )
    jobs = plan_of(cfg, RunFolder(tmp_path / "run"))
    assert jobs["contractish"].reused and jobs["contractish"].reused_from == "old"
    assert jobs["gate"].deps == (("container_check", "afterany"),)  # the reused stage is not waited on
    assert not jobs["container_check"].reused  # it measures the moment: never from another run
    assert "earlier" not in jobs["contractish"].to_dict()
    folder = RunFolder(tmp_path / "run")
    write_reused(folder, list(jobs.values()))
    copied = folder.load_result("contractish")
    assert copied.provenance["reused_from"] == "old" and copied.fingerprints == prints
    assert not plan_of(OmegaConf.merge(cfg, {"reuse": "run"}), RunFolder(tmp_path / "other"))[
        "contractish"
    ].reused
    # reuse=none: not even this run folder's own result stands
    assert plan_of(cfg, folder)["contractish"].reused
    assert not plan_of(OmegaConf.merge(cfg, {"reuse": "none"}), folder)["contractish"].reused


def test_only_clean_results_of_clear_gates_with_exact_fingerprints_qualify(tmp_path, caplog):
    cfg = config(tmp_path)
    prints = plan_of(cfg, RunFolder(tmp_path / "run"))["contractish"].fingerprints
    audit = tmp_path / "audit"
    twin(audit, "blocked", [result("contractish", prints)], gate="blocked")
    for verdict in ("unverifiable", "waived", "error"):
        twin(audit, verdict, [result("contractish", prints, verdict)])
    twin(audit, "other-data", [result("contractish", {**prints, "dataset": "sha256:else"})])
    twin(audit, "now", [result("contractish", prints)])  # this run's own earlier record: not "history"
    (audit / "2026-12-02_m_d_partial_audit.json").write_text('{"run_id": "partial", "stag')
    (audit / "2026-12-02_m_d_alien_audit.json").write_text(json.dumps({"run_id": "x", "surprise": 1}))
    with caplog.at_level(logging.WARNING, logger="pipeline.record.history"):
        jobs = plan_of(cfg, RunFolder(tmp_path / "run"))
    assert not jobs["contractish"].reused
    skipped = [r.getMessage() for r in caplog.records]
    assert any("partial_audit.json" in m for m in skipped) and any("alien_audit.json" in m for m in skipped)


def test_a_chain_of_reuses_names_the_origin_and_counts_it_once(tmp_path):
    audit = tmp_path / "audit"
    prints = {"training": "sha256:t", "config": "sha256:c"}
    twin(audit, "origin", [result("s", prints)])
    twin(audit, "later", [result("s", prints, reused_from="origin")])
    found = history.clear_results(audit, "s")
    assert [e.run_id for e in found] == ["origin"]
    assert history.reusable_result(audit, "s", prints).run_id == "origin"
    assert history.reusable_result(tmp_path / "nowhere", "s", prints) is None


def test_a_bad_reuse_value_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as info:
        build_plan(config(tmp_path, reuse="sometimes"), REGISTRY, RunFolder(tmp_path / "run"))
    assert info.value.key == "reuse"


def test_a_second_launch_reuses_the_first_runs_result_and_reuse_none_runs_it_again(tmp_path):
    counter = tmp_path / "counter.txt"
    common = (
        "launcher=local",
        "launcher.poll_s=0.2",
        "~demo",
        "plugins=[preflight_history_stage]",
        other_stages(),
        f"+stages.counted.counter={counter}",
    )
    runs = tmp_path / "preflight" / "runs"
    first = launch_here(tmp_path, *common, "run_id=one")
    assert first.returncode == 0, first.stdout + first.stderr
    second = launch_here(tmp_path, *common, "run_id=two")
    assert second.returncode == 0, second.stdout + second.stderr
    assert counter.read_text().split() == ["one"]  # the stage did not run in `two`
    assert "REUSED from one" in second.stdout, second.stdout  # the job table names the run
    plan = json.loads((runs / "two" / "plan.json").read_text())["jobs"]["counted"]
    assert plan["reused"] and plan["reused_from"] == "one"
    job = json.loads((runs / "two" / "jobs.json").read_text())["counted"]
    assert job["job_id"] is None and job["pid"] is None and "reused" in job["state"]  # never started
    stage = next(s for s in gate_of(runs / "two")["stages"] if s["stage"] == "counted")
    assert stage["provenance"]["reused_from"] == "one"
    assert stage["checks"][0]["message"].startswith("[measured in run one on ")  # the past, said so
    assert stage["checks"][0]["message"].endswith("ran in one")
    twins = sorted((tmp_path / "audit_logs").glob("*_two_audit.json"))
    assert json.loads(twins[0].read_text())["stages"][0]["provenance"]["reused_from"] == "one"
    dry = launch_here(tmp_path, *common, "run_id=dry", "dry_run=true")
    assert "# counted: result reused from run one (inputs unchanged), not submitted" in dry.stdout, dry.stdout
    third = launch_here(tmp_path, *common, "run_id=three", "reuse=none")
    assert third.returncode == 0, third.stdout + third.stderr
    assert counter.read_text().split() == ["one", "three"]
