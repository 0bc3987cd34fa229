"""LeRobot frames through the one data API (`LeRobotData.frames`, vectorised) vs row-by-row `to_pylist`.

    python benchmarks/bench_lerobot_frames.py [--rows 200000] [--dim 14] [--dir DIR]

Writes a LeRobot v3.0-shaped dataset (two `dim`-wide float32 list columns, `observation.state` and
`action`, plus `episode_index`), then reads both vector columns to float32 [n, dim] arrays twice:

- baseline: `np.asarray(table.column(c).to_pylist(), dtype=float32)` per file (what the determinism stage
  did before the one API);
- api:      `LeRobotData(root).frames(columns, dtype=float32)`.

Checks that both give the same arrays and prints one JSON line: seconds of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

COLUMNS = ("observation.state", "action")


def write(root: Path, rows: int, dim: int) -> None:
    (root / "meta").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    features = {c: {"dtype": "float32", "shape": [dim]} for c in COLUMNS}
    features["episode_index"] = {"dtype": "int64", "shape": [1]}
    (root / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v3.0", "features": features}))
    rng = np.random.default_rng(0)
    columns = {}
    for column in COLUMNS:
        values = rng.normal(size=(rows, dim)).astype(np.float32)
        columns[column] = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), dim)
    columns["episode_index"] = pa.array(np.repeat(np.arange(rows // 500 + 1), 500)[:rows])
    pq.write_table(pa.table(columns), root / "data/chunk-000/file-000.parquet", row_group_size=50_000)


def baseline(root: Path) -> dict[str, np.ndarray]:
    parts: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
    for path in sorted((root / "data").glob("chunk-*/*.parquet")):
        table = pq.read_table(path, columns=list(COLUMNS))
        for column in COLUMNS:
            parts[column].append(np.asarray(table.column(column).to_pylist(), dtype=np.float32))
    return {c: np.concatenate(v) for c, v in parts.items()}


def api(root: Path) -> dict[str, np.ndarray]:
    from pipeline.readers import LeRobotData

    return LeRobotData(root).frames(list(COLUMNS), dtype=np.float32)


def timed(fn, root: Path) -> tuple[float, dict[str, np.ndarray]]:  # noqa: ANN001 - a reader above
    started = time.perf_counter()
    out = fn(root)
    return time.perf_counter() - started, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=14)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(dir=args.dir)) / "dataset"
    try:
        write(root, args.rows, args.dim)
        api(root)  # warm the page cache and imports for both
        base_s, base = timed(baseline, root)
        api_s, fast = timed(api, root)
        for column in COLUMNS:
            np.testing.assert_array_equal(base[column], fast[column])
        print(
            json.dumps(
                {
                    "bench": "lerobot_frames",
                    "rows": args.rows,
                    "dim": args.dim,
                    "baseline_to_pylist_s": round(base_s, 4),
                    "api_s": round(api_s, 4),
                    "speedup": round(base_s / api_s, 1),
                }
            )
        )
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
