"""The contract stage single-job and as a job array on the same large dataset (issue 35): do the two
records agree, and what does the array cost or save?

    python benchmarks/bench_shards.py [--episodes 10000] [--length 100] [--episodes-per-file 1000]
        [--shard-rows 250000] [--dir /tmp/bench-shards] [--keep]

A LeRobot v3.0 dataset from `make_large_dataset.py` (no cameras: the array splits the data pass), a
contract card holding the dataset's own mean/std and a training YAML for it; then two launches as a user
runs them (`python -m pipeline.launch stage=contract launcher=local`, every other stage but
container_check skipped, `reuse=none`): `stages.contract.shard_rows=0` (one pass in the stage's job) and
`stages.contract.shard_rows=<N>` (the local executor's array, whole data files per task). The records'
rows are compared as the CI test compares them (`tests/stages/contract/test_shards_launch.py`): the same
ids, verdicts, severities and words; numbers within 0.2 % (the merged moments equal one pass's within
float rounding, the quantiles lie within the sketch's rank error).

Prints the comparison and one JSON line: the task count, each launch's wall seconds and exit code, the
rows compared, and every (row, field, sharded, single) that differs (none expected).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def inputs(base: Path, episodes: int, length: int, per_file: int) -> tuple[list[str], dict[str, Any]]:
    """The dataset (made once), the card and the training YAML, as launch overrides."""
    sys.path.insert(0, str(REPO))
    from benchmarks.make_large_dataset import Shape, make

    root = base / f"ds-{episodes}x{length}-{per_file}"
    made: dict[str, Any] = {"reused": True}
    if not (root / "meta/info.json").is_file():
        shutil.rmtree(root, ignore_errors=True)
        started = time.perf_counter()
        make(root, Shape(episodes=episodes, length=length, cameras=0, episodes_per_file=per_file))
        made = {"made_s": round(time.perf_counter() - started, 1)}
    stats = json.loads((root / "meta/stats.json").read_text())
    dims = {k: len(stats[k]["mean"]) for k in ("observation.state", "action")}
    card = "source: bench_shards\nnormalization_mapping: {STATE: MEAN_STD, ACTION: MEAN_STD}\nfeatures:\n"
    card += f"  observation.state: {{type: STATE, shape: [{dims['observation.state']}]}}\n"
    card += f"  action: {{type: ACTION, shape: [{dims['action']}]}}\nstats:\n"
    card += "".join(
        f"  {k}: {{mean: {stats[k]['mean']}, std: {stats[k]['std']}}}\n"
        for k in ("observation.state", "action")
    )
    (base / "model").mkdir(exist_ok=True)
    (base / "model/contract.yaml").write_text(card)
    (base / "train.yaml").write_text(
        "policy:\n  normalization_mapping: {STATE: MEAN_STD, ACTION: MEAN_STD}\n"
    )
    from pipeline import stages

    skip = [n for n in stages.load() if n not in ("container_check", "contract")]
    overrides = [
        f"dataset.path={root}",
        f"model.path={base / 'model/contract.yaml'}",
        f"training.path={base / 'train.yaml'}",
        f"skip=[{','.join(skip)}]",
        "reuse=none",
        "launcher=local",
        "launcher.poll_s=0.5",
        "stage=full",
    ]
    return overrides, made


def launch(cwd: Path, overrides: list[str], timeout: float) -> tuple[list[dict], list[dict], dict]:
    """One launch in its own folder: the contract rows, the `contract.shards` row(s), wall and exit code."""
    shutil.rmtree(cwd, ignore_errors=True)
    cwd.mkdir(parents=True)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.launch", *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = round(time.perf_counter() - started, 1)
    runs = sorted((cwd / "preflight/runs").glob("*/stages/contract.json"), key=lambda p: p.stat().st_mtime)
    if proc.returncode not in (0, 3) or not runs:
        raise SystemExit(
            f"launch in {cwd} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    checks = json.loads(runs[-1].read_text())["checks"]
    rows = [c for c in checks if c["id"] != "contract.shards"]
    shards = [c for c in checks if c["id"] == "contract.shards"]
    return rows, shards, {"wall_s": wall, "exit": proc.returncode}


def differences(rows: list[dict], single: list[dict]) -> list[list[Any]]:
    """[row id, field, sharded, single] wherever the two records differ (the CI test's `close`)."""
    sys.path.insert(0, str(REPO))
    from tests.stages.contract.test_shards_launch import close

    if [r["id"] for r in rows] != [r["id"] for r in single]:
        return [["ids", "", [r["id"] for r in rows], [r["id"] for r in single]]]
    pairs = zip(rows, single, strict=True)
    skip = {"timings"}
    return [
        [x["id"], k, x[k], y.get(k)]
        for x, y in pairs
        for k in x
        if k not in skip and not close(x[k], y.get(k))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=10000)
    parser.add_argument("--length", type=int, default=100)
    parser.add_argument("--episodes-per-file", type=int, default=1000)
    parser.add_argument("--shard-rows", type=int, default=250_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-shards"))
    parser.add_argument("--keep", action="store_true", help="keep the dataset for the next run")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per launch")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    overrides, made = inputs(args.dir, args.episodes, args.length, args.episodes_per_file)
    single, none, one = launch(
        args.dir / "single", [*overrides, "stages.contract.shard_rows=0"], args.timeout
    )
    sharded_args = [*overrides, f"stages.contract.shard_rows={args.shard_rows}"]
    rows, shards, many = launch(args.dir / "sharded", sharded_args, args.timeout)
    found = differences(rows, single)
    for row, other in zip(rows, single, strict=False):
        mark = "=" if not [d for d in found if d[0] == row["id"]] else "!"
        print(f"{mark} {row['id']}: {row['verdict']} | {other['verdict']}", file=sys.stderr)
    result = {
        "episodes": args.episodes,
        "rows_per_episode": args.length,
        "dataset": made,
        "shard_rows": args.shard_rows,
        "tasks": [s.get("actual") for s in shards],
        "shards_row": [s.get("message") for s in shards],
        "single": one | {"shards_rows": len(none)},
        "sharded": many,
        "rows_compared": len(rows),
        "verdicts_equal": [r["verdict"] for r in rows] == [r["verdict"] for r in single],
        "differences": found,
    }
    print(json.dumps(result))
    for name in ("single", "sharded"):
        shutil.rmtree(args.dir / name, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
