"""A dataset alone, as a user types it, against `lerobot-doctor check --ci` on the same folder.

    python benchmarks/bench_vs_doctor.py [--dataset DIR | --rows N] [--doctor PATH] [--repeats 3] [--dag]

Ours is the launch a user types to check a dataset (`python -m pipeline.launch stage=contract
launcher=local wait=true dataset.path=DIR`), each run in a fresh scratch folder (a first launch: nothing
to reuse from an audit history). The doctor is `lerobot-doctor check --ci DIR`, which lives in its own
venv, never in the project's (`python3 -m venv /work/doctor-venv && /work/doctor-venv/bin/pip install
lerobot-doctor==0.2.0`); its path is `--doctor`, else `$LEROBOT_DOCTOR`, else `lerobot-doctor` on PATH,
else /work/doctor-venv/bin/lerobot-doctor. Without it the benchmark prints a JSON line saying why it
skipped. `--dag` also times the same launch with `launcher.in_process=false` (the DAG of job processes
the in-process path replaced).

The dataset: `--dataset DIR`, else the real 899-row v3.0 dataset from ../shared/data/real (rerun's
apple_storage subset), else with `--rows N` one from `make_large_dataset.py` (`N/50` episodes of 50
rows, one camera), built under `--dir` and kept there.

Every repeat runs each command once, interleaved (ours, the doctor[, the DAG]) so that a burst of load
on a shared machine falls on all of them; the walls are the medians of `--repeats`. One JSON line: the
dataset and its rows, each wall (s), each run's exit code, and `ratio` = ours / the doctor's (the
target is <= 2).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("PREFLIGHT_REAL_DATA") or REPO.parent / "shared" / "data" / "real")
SMALL = REAL / "rerun-io__rerun" / "tests" / "assets" / "lerobot" / "v30_apple_storage"
DOCTOR_VENV = Path("/work/doctor-venv/bin/lerobot-doctor")
LENGTH = 50


def doctor(given: str | None) -> str | None:
    """The doctor's executable, or None where none is installed."""
    for candidate in (given, os.environ.get("LEROBOT_DOCTOR"), shutil.which("lerobot-doctor")):
        if candidate:
            return candidate if Path(candidate).is_file() else None
    return str(DOCTOR_VENV) if DOCTOR_VENV.is_file() else None


def rows_of(dataset: Path) -> int | None:
    """The rows the dataset's data files hold (parquet footers), whatever its info.json says."""
    import pyarrow.parquet as pq

    files = sorted((dataset / "data").rglob("*.parquet"))
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files) if files else None


def built(rows: int, base: Path) -> Path:
    """A `make_large_dataset.py` dataset of `rows` rows (episodes of LENGTH rows), kept under `base`."""
    root = base / f"rows-{rows}"
    if not (root / "meta" / "info.json").is_file():
        shutil.rmtree(root, ignore_errors=True)
        argv = [sys.executable, str(REPO / "benchmarks" / "make_large_dataset.py"), "--out", str(root)]
        argv += ["--episodes", str(max(1, rows // LENGTH)), "--length", str(LENGTH)]
        subprocess.run(argv, check=True, capture_output=True, text=True, env=_env())
    return root


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def timed(argv: list[str], cwd: Path) -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=1800)
    return time.perf_counter() - started, proc.returncode


def ours(dataset: Path, *extra: str) -> tuple[float, int]:
    """One launch, as a user types it, in a fresh folder (its own run folder and audit history)."""
    with tempfile.TemporaryDirectory(prefix="bench-vs-doctor-") as scratch:
        argv = [sys.executable, "-m", "pipeline.launch", "stage=contract", "launcher=local", "wait=true"]
        return timed([*argv, f"dataset.path={dataset}", *extra], Path(scratch))


def measure(dataset: Path, exe: str, repeats: int, dag: bool) -> dict[str, Any]:
    walls: dict[str, list[float]] = {"ours_s": [], "doctor_s": [], **({"dag_s": []} if dag else {})}
    codes: dict[str, set[int]] = {name: set() for name in walls}
    for _ in range(repeats):
        runs = {
            "ours_s": lambda: ours(dataset),
            "doctor_s": lambda: timed([exe, "check", "--ci", str(dataset)], dataset.parent),
            "dag_s": lambda: ours(dataset, "launcher.in_process=false"),
        }
        for name in walls:
            wall, code = runs[name]()
            walls[name].append(wall)
            codes[name].add(code)
            print(f"{name[:-2]}: {wall:.2f} s (exit {code})", file=sys.stderr, flush=True)
    out: dict[str, Any] = {name: round(statistics.median(values), 3) for name, values in walls.items()}
    out["ratio"] = round(out["ours_s"] / out["doctor_s"], 2)
    if dag:
        out["dag_over_ours"] = round(out["dag_s"] / out["ours_s"], 2)
    out["exit_codes"] = {name: sorted(found) for name, found in codes.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=None)
    parser.add_argument("--rows", type=int, default=None, help="build a dataset of this many rows instead")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "bench-vs-doctor")
    parser.add_argument("--doctor", default=None, help="the lerobot-doctor executable")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dag", action="store_true", help="also time launcher.in_process=false")
    args = parser.parse_args()
    exe = doctor(args.doctor)
    if exe is None:
        why = "lerobot-doctor not found (--doctor, $LEROBOT_DOCTOR, PATH, /work/doctor-venv)"
        print(json.dumps({"skipped": why}))
        return
    dataset = args.dataset or (built(args.rows, args.dir) if args.rows else SMALL)
    if not (dataset / "meta" / "info.json").is_file():
        print(json.dumps({"skipped": f"no LeRobot dataset at {dataset} (meta/info.json)"}))
        return
    result = {"dataset": str(dataset), "rows": rows_of(dataset), "repeats": args.repeats}
    print(json.dumps({**result, **measure(dataset.resolve(), exe, args.repeats, args.dag)}))


if __name__ == "__main__":
    main()
