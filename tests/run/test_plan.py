"""The DAG a launch submits: dependency kinds, parts, reuse of unchanged results."""

from pathlib import Path

from omegaconf import OmegaConf

from pipeline.record.records import Check, StageResult
from pipeline.record.runfolder import RunFolder
from pipeline.run.executors import dependency_clause
from pipeline.run.plan import build_plan
from pipeline.stages import Stage
from pipeline.storage import atomic_write_json

REPO = Path(__file__).resolve().parents[2]


def noop(cfg, ctx):
    return StageResult.from_checks(ctx.stage, [])


REGISTRY = {
    "container_check": Stage("container_check", noop, after=()),
    "contractish": Stage("contractish", noop, inputs=("dataset",)),
    "twins": Stage("twins", noop, parts=("a", "b"), run_part=noop),
}


def config(tmp_path, **extra):
    base = OmegaConf.load(REPO / "pipeline" / "conf" / "config.yaml")
    base = OmegaConf.masked_copy(base, ["resources_default", "skip"])
    data = tmp_path / "data.txt"
    if not data.exists():
        data.write_text("x")
    return OmegaConf.merge(
        base,
        {
            "stage": {"name": "full"},
            "stages": {},
            "container": {"image": None},
            "dataset": {"path": str(data)},
            "model": {"path": None},
            "training": {"path": None},
        },
        extra,
    )


def test_full_plan_dependencies(tmp_path):
    jobs = {j.name: j for j in build_plan(config(tmp_path), REGISTRY, RunFolder(tmp_path))}
    assert list(jobs) == ["container_check", "contractish", "twins.a", "twins.b", "twins", "gate"]
    assert jobs["container_check"].deps == ()
    assert jobs["contractish"].deps == (("container_check", "afterok"),)
    assert jobs["twins.a"].deps == (("container_check", "afterok"),)
    assert jobs["twins"].deps == (
        ("container_check", "afterok"),
        ("twins.a", "afterany"),
        ("twins.b", "afterany"),
    )
    assert jobs["gate"].deps == tuple((n, "afterany") for n in ("container_check", "contractish", "twins"))
    ids = {"container_check": "11", "twins.a": "12", "twins.b": "13"}
    assert dependency_clause(jobs["twins"], ids) == "afterok:11,afterany:12:13"


def test_one_stage_runs_alone_with_the_gate(tmp_path):
    jobs = build_plan(config(tmp_path, stage={"name": "contractish"}), REGISTRY, RunFolder(tmp_path))
    assert [(j.name, j.deps) for j in jobs] == [("contractish", ()), ("gate", (("contractish", "afterany"),))]


def test_unchanged_result_is_reused_and_a_changed_input_is_not(tmp_path):
    cfg = config(tmp_path, skip=["twins"])
    first = {j.name: j for j in build_plan(cfg, REGISTRY, RunFolder(tmp_path))}
    for name in ("container_check", "contractish"):
        result = StageResult.from_checks(
            name,
            [Check(id="x", stage=name, category="units", feature="f", verdict="match")],
            fingerprints=first[name].fingerprints,
        )
        atomic_write_json(tmp_path / "stages" / f"{name}.json", result.to_dict())
    again = {j.name: j for j in build_plan(cfg, REGISTRY, RunFolder(tmp_path))}
    assert again["container_check"].reused and again["contractish"].reused and again["gate"].deps == ()
    (tmp_path / "data.txt").write_text("changed")
    changed = {j.name: j for j in build_plan(cfg, REGISTRY, RunFolder(tmp_path))}
    assert changed["container_check"].reused and not changed["contractish"].reused
    assert changed["contractish"].deps == ()  # its container_check result stands; nothing to wait for
    assert changed["gate"].deps == (("contractish", "afterany"),)


def test_an_errored_result_is_never_reused(tmp_path):
    cfg = config(tmp_path, skip=["twins", "contractish"])
    spec = build_plan(cfg, REGISTRY, RunFolder(tmp_path))[0]
    result = StageResult.from_checks(
        "container_check",
        [Check(id="e", stage="container_check", category="container", feature="f", verdict="error")],
        fingerprints=spec.fingerprints,
    )
    atomic_write_json(tmp_path / "stages" / "container_check.json", result.to_dict())
    assert not build_plan(cfg, REGISTRY, RunFolder(tmp_path))[0].reused


def test_a_part_can_ask_for_its_own_resources(tmp_path):
    cfg = config(
        tmp_path,
        stages={"twins": {"resources": {"cpus_per_task": 2}, "part_resources": {"b": {"gpus_per_node": 4}}}},
    )
    jobs = {j.name: j for j in build_plan(cfg, REGISTRY, RunFolder(tmp_path))}
    assert jobs["twins.b"].resources["gpus_per_node"] == 4 and jobs["twins.b"].resources["cpus_per_task"] == 2
    assert jobs["twins.a"].resources["gpus_per_node"] == 0 and jobs["twins"].resources["gpus_per_node"] == 0
