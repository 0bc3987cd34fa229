"""The contract's data pass launched as a job array (issue 35), as a user would: a LeRobot v3.0 dataset of
6 data files (`benchmarks/make_large_dataset.py`), a contract card and a training YAML for it, and
`stages.contract.shard_rows` tiny, so that the plan splits the pass into 4 array tasks. The dry run
shows the array and the main job's dependency on it; the local executor and the local Slurm cluster
run it, and their contract records equal the unsharded run's, row for row."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.make_large_dataset import Shape, make
from pipeline.record.records import StageResult
from tests.conftest import gate_of, other_stages, run_dir_of
from tests.in_process_launch import launch_here
from tests.stages.contract.helpers import null_action

SHAPE = Shape(episodes=40, length=30, state_dim=4, action_dim=3, cameras=0, episodes_per_file=7)
SHARDED = "stages.contract.shard_rows=300"
NUMBER = re.compile(r"-?\d+\.\d+(?:e-?\d+)?")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    """dataset, model and training paths as launch overrides."""
    root = tmp_path_factory.mktemp("shards_launch")
    make(root / "ds", SHAPE)
    stats = json.loads((root / "ds/meta/stats.json").read_text())
    card = "source: a test card\nnormalization_mapping: {STATE: MEAN_STD, ACTION: MEAN_STD}\nfeatures:\n"
    card += "  observation.state: {type: STATE, shape: [4]}\n  action: {type: ACTION, shape: [3]}\nstats:\n"
    card += "".join(
        f"  {k}: {{mean: {stats[k]['mean']}, std: {stats[k]['std']}}}\n"
        for k in ("observation.state", "action")
    )
    (root / "model").mkdir()
    (root / "model/contract.yaml").write_text(card)
    (root / "train.yaml").write_text(
        "policy:\n  normalization_mapping: {STATE: MEAN_STD, ACTION: MEAN_STD}\n"
    )
    return (
        f"dataset.path={root / 'ds'}",
        f"model.path={root / 'model/contract.yaml'}",
        f"training.path={root / 'train.yaml'}",
        other_stages("container_check", "contract"),
        "reuse=none",
    )


def close(a: Any, b: Any) -> bool:
    """Equal, except numbers within 0.2 % (in messages too, printed to 3 digits): the merged moments
    equal one pass's within float rounding and its quantiles lie within the sketch's rank error
    (`tests/readers/test_scan_shards.py` holds them to those bounds); verdicts, ids, severities, keys
    and every word must be the same."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 2e-3 * max(abs(a), abs(b), 1e-3)
    if isinstance(a, str) and isinstance(b, str):
        words = NUMBER.sub("#", a) == NUMBER.sub("#", b)
        return words and close([float(x) for x in NUMBER.findall(a)], [float(x) for x in NUMBER.findall(b)])
    return a == b


def differences(rows: list[dict], whole: list[dict]) -> list[tuple[str, str, Any, Any]]:
    """(row id, field, sharded, one pass) wherever the two records differ."""
    if [r["id"] for r in rows] != [r["id"] for r in whole]:
        return [("ids", "", [r["id"] for r in rows], [r["id"] for r in whole])]
    pairs = zip(rows, whole, strict=True)
    return [(x["id"], k, x[k], y.get(k)) for x, y in pairs for k in x if not close(x[k], y.get(k))]


def contract_rows(cwd: Path, proc) -> tuple[list[dict], dict]:
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    run_dir = run_dir_of(cwd, proc)
    result = StageResult.from_dict(json.loads((run_dir / "stages" / "contract.json").read_text()))
    plan = json.loads((run_dir / "plan.json").read_text())["jobs"]
    rows = [c.to_dict() for c in result.checks if c.id != "contract.shards"]
    shards = [c.to_dict() for c in result.checks if c.id == "contract.shards"]
    return rows, {"plan": plan, "shards": shards, "run_dir": run_dir}


@pytest.fixture(scope="module")
def unsharded(inputs: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The one-pass record: the stage's own `run` on the same inputs, in this process (no launch)."""
    from omegaconf import OmegaConf

    from pipeline.stages import StageContext
    from pipeline.stages.contract import run
    from pipeline.stages.contract.config import ContractConfig

    paths = dict(o.split("=", 1) for o in inputs[:3])
    cfg = OmegaConf.create({k.split(".")[0]: {"path": v} for k, v in paths.items()})
    ctx = StageContext(tmp_path_factory.mktemp("one_pass"), "contract", config=ContractConfig(shard_rows=0))
    result = run(cfg, ctx)
    assert not [c for c in result.checks if c.id == "contract.shards"]
    return [c.to_dict() for c in result.checks]


def test_dry_run_shows_the_array_and_its_dependency(tmp_path: Path, inputs: tuple[str, ...]) -> None:
    proc = launch_here(tmp_path, "launcher=slurm", "dry_run=true", SHARDED, *inputs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# ---- contract.task (depends on: afterok:container_check) ----" in proc.stdout
    assert "#SBATCH --array=0-3%4" in proc.stdout
    assert "# ---- contract (depends on: afterok:container_check, afterany:contract.task) ----" in proc.stdout
    assert "#SBATCH --dependency=afterok:JOBID_container_check,afterany:JOBID_contract.task" in proc.stdout


@dataclass(frozen=True)
class LocalArray:
    """A local-executor array launch on a copy of the dataset, read as soon as it finished: the relaunch
    test then changes a data file of that copy and relaunches the same run id."""

    cwd: Path
    data: Path
    own: tuple[str, ...]
    rows: list[dict]
    found: dict
    parts: list[str]


@pytest.fixture(scope="module")
def local_array(tmp_path_factory: pytest.TempPathFactory, inputs: tuple[str, ...]) -> LocalArray:
    """One local array launch for both local tests (one launch of the same inputs cost each its own)."""
    cwd = tmp_path_factory.mktemp("sharded")
    data = cwd / "ds"
    shutil.copytree(inputs[0].split("=", 1)[1], data)
    own = (
        "launcher=local",
        "launcher.poll_s=0.2",
        SHARDED,
        "run_id=again",
        f"dataset.path={data}",
        *inputs[1:],
    )
    rows, found = contract_rows(cwd, launch_here(cwd, *own))
    parts = sorted(
        p.parent.name for p in (found["run_dir"] / "parts/contract").glob("task-*/scan_partial.npz")
    )
    return LocalArray(cwd, data, own, rows, found, parts)


def test_local_executor_array_equals_one_pass(local_array: LocalArray, unsharded: list[dict]) -> None:
    found = local_array.found
    assert found["plan"]["contract.task"]["array"] == 4
    assert found["plan"]["contract"]["deps"][-1] == ["contract.task", "afterany"]
    assert local_array.parts == [f"task-{i:04d}" for i in range(4)]
    assert [(s["verdict"], s["actual"]) for s in found["shards"]] == [("match", 4)]
    assert differences(local_array.rows, unsharded) == []


def test_a_relaunch_after_a_data_file_changed_never_merges_the_first_launch_partial(
    local_array: LocalArray,
) -> None:
    """The relaunch of the same run id after a data file changed: the task whose file it is stops on it
    (a null action), and the main job must not merge that task's partial of the first launch: the gate
    blocks as a one-pass run on the same data does, its row naming the file and the task. The first
    launch is the local array test's."""
    assert [(s["verdict"], s["actual"]) for s in local_array.found["shards"]] == [("match", 4)]
    changed = sorted((local_array.data / "data").rglob("*.parquet"))[3]  # task 2 reads it and the next
    null_action(changed, 5)
    second = launch_here(local_array.cwd, *local_array.own)
    assert second.returncode == 3, second.stdout + second.stderr
    run_dir = local_array.found["run_dir"]
    task = run_dir / "parts/contract/task-0002"
    assert (task / "input_error.json").is_file() and not (task / "scan_partial.npz").exists()
    assert gate_of(run_dir)["gate"] == "blocked"
    result = json.loads((run_dir / "stages" / "contract.json").read_text())
    [row] = [c for c in result["checks"] if c["verdict"] == "error"]
    assert f"{changed}: column 'action' has 1 null rows" in row["message"]
    assert "task-0002 stopped on a bad input" in row["message"], row["message"]


@pytest.mark.slurm
def test_slurm_array_equals_one_pass(
    slurm: None, tmp_path: Path, inputs: tuple[str, ...], unsharded: list[dict]
) -> None:
    """The array and the merge as jobs on the scheduler; container_check, which every stage waits on, is
    left out (none of its rows is compared), so the array's tasks start at once."""
    cwd = tmp_path / "slurm"
    cwd.mkdir()
    own = tuple(other_stages("contract") if o.startswith("skip=") else o for o in inputs)
    proc = launch_here(cwd, "launcher=slurm", "wait=true", SHARDED, *own)
    rows, found = contract_rows(cwd, proc)
    jobs = json.loads((found["run_dir"] / "jobs.json").read_text())
    assert "contract.task" in jobs and found["plan"]["contract.task"]["array"] == 4
    assert [(s["verdict"], s["actual"]) for s in found["shards"]] == [("match", 4)]
    assert differences(rows, unsharded) == []
