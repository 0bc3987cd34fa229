"""What the contract's main job merges of its array tasks' partials when a launch of the same run id left
some behind, a task was killed mid-write, a data file changed after its task read it, or a partial is
malformed: only this launch's finished partials for these inputs, else the one-pass fallback with the
task and the file named (the relaunch end to end is in test_shards_launch.py). The tasks run here one
after another, as the array would run them; `plan.json` holds the launch id a launch writes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from benchmarks.make_large_dataset import Shape, make
from pipeline.readers import read_dataset
from pipeline.readers.base import DatasetContract
from pipeline.record.records import Check
from pipeline.stages import StageContext
from pipeline.stages.contract import scan_options, shards
from pipeline.stages.contract.config import ContractConfig
from tests.stages.contract.helpers import null_action

SHAPE = Shape(episodes=40, length=30, state_dim=4, action_dim=3, cameras=0, episodes_per_file=7)
CONFIG = ContractConfig(shard_rows=300)
COUNT = 4  # tasks: 6 data files of 210/150 rows at 300 rows a task
PARTIAL, DONE = "scan_partial.npz", "scan_partial.done.json"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stale") / "ds"
    make(root, SHAPE)
    return root


def relaunch(run: Path, launch: str) -> None:
    """What a launch of the run id leaves for its jobs: a plan with its own launch id."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "plan.json").write_text(json.dumps({"launch_id": launch, "jobs": {}}))


def task(root: Path, run: Path, i: int, fingerprints: dict[str, str] | None = None) -> None:
    cfg = OmegaConf.create({"dataset": {"path": str(root)}})
    ctx = StageContext(run, "contract", f"task-{i:04d}", fingerprints=fingerprints or {})
    shards.run_part(cfg, ctx, scan_options(CONFIG), COUNT)


def main_job(
    root: Path, run: Path, fingerprints: dict[str, str] | None = None
) -> tuple[DatasetContract, Check]:
    ctx = StageContext(run, "contract", fingerprints=fingerprints or {})
    return shards.read_sharded(root, scan_options(CONFIG), ctx, COUNT, CONFIG.shard_rows)


def fell_back(row: Check, *words: str) -> None:
    assert (row.id, row.verdict, row.actual) == ("contract.shards", "unverifiable", 1), row.message
    assert "one pass" in row.message
    for word in words:
        assert word in row.message, (word, row.message)


def first_launch(root: Path, run: Path, fingerprints: dict[str, str] | None = None) -> None:
    relaunch(run, "first")
    for i in range(COUNT):
        task(root, run, i, fingerprints)
    assert main_job(root, run, fingerprints)[1].verdict == "match"


KILL = """
import os, signal, sys
from pathlib import Path
from omegaconf import OmegaConf
from pipeline.stages import StageContext
from pipeline.stages.contract import scan_options, shards
from pipeline.stages.contract.config import ContractConfig

root, run, prefix = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
fsync = os.fsync

def dying_fsync(fd):  # the kernel's SIGKILL (time limit, OOM) while this file is being written
    if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(prefix):
        os.kill(os.getpid(), signal.SIGKILL)
    fsync(fd)

os.fsync = dying_fsync
cfg = OmegaConf.create({"dataset": {"path": str(root)}})
ctx = StageContext(run, "contract", "task-0002")
shards.run_part(cfg, ctx, scan_options(ContractConfig(shard_rows=300)), 4)
"""


@pytest.mark.parametrize("killed_in", [PARTIAL, DONE])
def test_a_task_killed_mid_write_leaves_nothing_that_merges(
    dataset: Path, tmp_path: Path, killed_in: str
) -> None:
    run = tmp_path / "run"
    first_launch(dataset, run)
    relaunch(run, "second")
    for i in (0, 1, 3):
        task(dataset, run, i)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-c", KILL, str(dataset), str(run), f".{killed_in}."]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    merged, row = main_job(dataset, run)
    fell_back(row, "task-0002", f"task-0002/{DONE}: no done marker")
    single = read_dataset(str(dataset), scan_options(CONFIG))
    assert np.array_equal(merged.recomputed["action"]["max"], single.recomputed["action"]["max"])
    assert (merged.rows, merged.episodes) == (1200, 40)


def test_a_partial_of_an_earlier_launch_or_other_inputs_is_not_merged(dataset: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    first_launch(dataset, run, {"dataset": "aaaa"})
    relaunch(run, "second")  # task 1 never ran in this launch (cancelled, or its node died at start)
    for i in (0, 2, 3):
        task(dataset, run, i, {"dataset": "aaaa"})
    _, row = main_job(dataset, run, {"dataset": "aaaa"})
    fell_back(
        row, "task-0001", "a stale partial, written by launch first of this run id, not this one (second)"
    )
    task(dataset, run, 1, {"dataset": "aaaa"})
    assert main_job(dataset, run, {"dataset": "aaaa"})[1].verdict == "match"
    _, row = main_job(dataset, run, {"dataset": "bbbb"})  # the inputs changed since the tasks ran
    fell_back(row, "task-0000", "written for other inputs: dataset aaaa then, bbbb now")


def test_the_stale_partial_relaunch_names_the_changed_file(dataset: Path, tmp_path: Path) -> None:
    """The relaunch of the issue: a data file changed, its task stops on it (a null action) and leaves
    `input_error.json` as the part job does; the partial of the first launch is still there. The main
    job must not merge it: its one pass meets the same file, and the stage's error names both."""
    root, run = tmp_path / "ds", tmp_path / "run"
    make(root, SHAPE)
    first_launch(root, run)
    changed = sorted((root / "data").rglob("*.parquet"))[3]  # task 2 reads it and the next
    null_action(changed, 5)
    relaunch(run, "second")
    for i in (0, 1, 3):
        task(root, run, i)
    folder = run / "parts/contract/task-0002"
    message = f"{changed}: column 'action' has 1 null rows (expected 3 numbers per row)"
    (folder / "input_error.json").write_text(
        json.dumps({"part": "task-0002", "input_error": {"message": message}})
    )
    with pytest.raises(Exception) as caught:
        main_job(root, run)
    assert type(caught.value).__name__ == "InputError"
    text = str(caught.value)
    assert text.startswith(message) and "task-0002 stopped on a bad input" in text and "one pass" in text


def test_a_data_file_changed_after_its_task_read_it_is_named(dataset: Path, tmp_path: Path) -> None:
    root, run = tmp_path / "ds", tmp_path / "run"
    make(root, SHAPE)
    first_launch(root, run)
    changed = sorted((root / "data").rglob("*.parquet"))[5]  # task 3 reads it alone
    table = pq.read_table(changed)
    state = pa.array([[v * 2 for v in r] for r in table.column("observation.state").to_pylist()],
                     table.schema.field("observation.state").type)  # fmt: skip
    pq.write_table(table.set_column(0, table.schema.field(0), state), changed)
    merged, row = main_job(root, run)
    name = str(changed.relative_to(root))
    fell_back(row, "task-0003", f"{name} changed since the task read it")
    single = read_dataset(str(root), scan_options(CONFIG))
    assert np.array_equal(
        merged.recomputed["observation.state"]["max"], single.recomputed["observation.state"]["max"]
    )


# ------------------------------------------------------------------------------ malformed partials
def rewrite_meta(partial: Path, change) -> None:
    """The partial with its metadata changed by `change(meta)`, and its done marker (when the task
    writes one) naming the new bytes, as a partial that a task wrote so would be."""
    with np.load(partial, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["meta.json"]))
    arrays["meta.json"] = np.array(change(meta))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    partial.write_bytes(buffer.getvalue())
    marker = partial.with_name(DONE)
    if marker.exists():
        done = json.loads(marker.read_text())
        data = buffer.getvalue()
        marker.write_text(
            json.dumps({**done, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})
        )


def test_a_partial_nested_too_deep_falls_back_naming_it(dataset: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    first_launch(dataset, run)
    partial = run / "parts/contract/task-0001" / PARTIAL
    rewrite_meta(
        partial, lambda meta: json.dumps(meta)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    )
    _, row = main_job(dataset, run)
    fell_back(row, "task-0001", f"{partial}: meta.json JSON nested too deep to parse")
    first_launch(dataset, run)
    deep: object = 1
    for _ in range(19):  # parses, but deeper than anything a task writes
        deep = [deep]
    rewrite_meta(partial, lambda meta: json.dumps({**meta, "dynamics": {"a": deep}}))
    _, row = main_job(dataset, run)
    fell_back(
        row, "task-0001", f"{partial}: meta.json/dynamics/a/0/0", "metadata nested deeper than 16 levels"
    )


def test_a_partial_naming_an_array_it_lacks_falls_back_naming_it(dataset: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    first_launch(dataset, run)
    partial = run / "parts/contract/task-0001" / PARTIAL

    def lacking(meta: dict) -> str:
        meta["stats"]["action"]["mean"] = {"__array__": "stats::action::gone"}
        return json.dumps(meta)

    rewrite_meta(partial, lacking)
    merged, row = main_job(dataset, run)
    fell_back(
        row, "task-0001", f"{partial}: meta.json/stats/action/mean refers to array 'stats::action::gone'"
    )
    assert "which the file does not hold" in row.message and merged.rows == 1200


FIFO = """
import sys
from pathlib import Path
from omegaconf import OmegaConf
from pipeline.stages import StageContext
from pipeline.stages.contract import scan_options, shards
from pipeline.stages.contract.config import ContractConfig

root, run = Path(sys.argv[1]), Path(sys.argv[2])
ctx = StageContext(run, "contract")
_, row = shards.read_sharded(root, scan_options(ContractConfig(shard_rows=300)), ctx, 4, 300)
print(row.verdict, row.message)
"""


def test_a_partial_that_is_a_fifo_falls_back_never_opened(dataset: Path, tmp_path: Path) -> None:
    """Opening a FIFO for reading waits for a writer forever: the main job must never open it. Run in
    a child so that a main job that does open it fails this test instead of hanging it."""
    run = tmp_path / "run"
    first_launch(dataset, run)
    partial = run / "parts/contract/task-0001" / PARTIAL
    partial.unlink()
    os.mkfifo(partial)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-c", FIFO, str(dataset), str(run)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("unverifiable array partials not merged (task-0001: "), proc.stdout
    assert f"{partial}: is a FIFO (named pipe), expected a regular file" in proc.stdout


def test_a_partial_whose_arrays_do_not_fit_falls_back_naming_the_field(dataset: Path, tmp_path: Path) -> None:
    """An array the merge would add to one pass's (a histogram of other buckets, a level-2 row of a
    dim the feature lacks) is named before the merge runs, never a broadcast error or an IndexError."""
    run = tmp_path / "run"
    first_launch(dataset, run)
    partial = run / "parts/contract/task-0003" / PARTIAL

    def retarget(meta: dict) -> str:
        meta["stats"]["action"]["hist"] = meta["stats"]["action"]["count"]  # a (3,) array, not (3, buckets)
        return json.dumps(meta)

    rewrite_meta(partial, retarget)
    _, row = main_job(dataset, run)
    fell_back(row, "task-0003", f"{partial}: meta.json/stats/action/hist is shape (3,) int64, expected")


# ------------------------------------------------------------------------------ signed markers
def test_with_an_audit_key_only_markers_the_key_signed_are_merged(dataset: Path, tmp_path: Path) -> None:
    """A marker's sha256 proves only that the partial is the bytes written with it: anyone who can write
    the run folder can write both. With `audit.key_file`, the tasks sign their markers and a partial
    with this launch's stamp and a recomputed sha256 but no valid HMAC falls back to one pass."""
    key_file = tmp_path / "team.key"
    key_file.write_text("k" * 32)
    key_file.chmod(0o600)
    run, key = tmp_path / "run", shards.audit_key(OmegaConf.create({"audit": {"key_file": str(key_file)}}))
    relaunch(run, "first")
    for i in range(COUNT):
        cfg = OmegaConf.create({"dataset": {"path": str(dataset)}, "audit": {"key_file": str(key_file)}})
        shards.run_part(cfg, StageContext(run, "contract", f"task-{i:04d}"), scan_options(CONFIG), COUNT)
    ctx = StageContext(run, "contract")
    assert shards.read_sharded(dataset, scan_options(CONFIG), ctx, COUNT, 300, key)[1].verdict == "match"
    partial = run / "parts/contract/task-0001" / PARTIAL
    rewrite_meta(partial, lambda meta: json.dumps({**meta, "rows": meta["rows"] + 1}))  # sha256 recomputed
    _, row = shards.read_sharded(dataset, scan_options(CONFIG), ctx, COUNT, 300, key)
    fell_back(row, "task-0001", "has an HMAC that audit.key_file did not make")
    marker = partial.with_name(DONE)
    marker.write_text(json.dumps({k: v for k, v in json.loads(marker.read_text()).items() if k != "hmac"}))
    _, row = shards.read_sharded(dataset, scan_options(CONFIG), ctx, COUNT, 300, key)
    fell_back(row, "task-0001", "is not signed, though audit.key_file is set")
