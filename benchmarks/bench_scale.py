"""The gate's cost curve over dataset size (issue 35): the contract stage's data work and teacher_forced's
data work at 1k, 10k, 50k episodes, each phase against the bare decode of the same bytes.

    python benchmarks/bench_scale.py [--episodes 1000 10000 50000] [--dir /work/scale-data]
        [--phases bare_parquet health_rows ...] [--compare OTHER_CHECKOUT] [--keep]
        [-- make_large_dataset options, e.g. --length 350 --cameras 1]

Per size, a dataset from `make_large_dataset.py` (kept under `--dir` between runs with `--keep`), then
every phase in a fresh subprocess, so each peak RSS is that phase's own (the interpreter and imports
included: the `baseline` phase measures those alone):

- metadata:     info.json, meta/episodes (lengths), stats.json, tasks, every data file's footer;
- bare_parquet: `ParquetFile.read_row_group` of the vector columns over every data file (the ceiling);
- stats:        `read_dataset` with health off: the contract stage's stats pass (moments, sketches,
                dynamics sample, counts);
- stats_health: the same pass with the health facts on (`health_episodes` = the stage's default);
- health_rows:  that pass plus `health_rows` (the rows, from the facts and the episode metadata);
- fault_rows:   that pass plus the rows that judge its facts against each other: the state/action
                pairs (dead sensors, unused commands) and the constants the normalizer floors (a
                training config's MEAN_STD named, so every one of them runs);
- frames:       the contract's frame sampling (4 episodes x 8 frames per camera: timestamps, one seek
                per episode) without the video headers; the timestamps are read from the sampled
                episodes' data files only (`readers/episode_rows.py`);
- bare_pyav:    PyAV alone decoding the same episodes' spans of the same files (the ceiling);
- headers:      the contract's video-header pass (`frames._spans`: every episode's span against its
                file's header);
- bare_headers: `av.open` + stream facts of every video file, nothing else;
- tf_data:      teacher_forced's data work (`sample_index`): one streamed pass for the per-episode facts
                and the action's moments, the draw of 512 samples, and the sampled episodes' rows
                (`rows_held`; the model's scoring is the same 512 samples at any size).

Prints a table and one JSON line: per size and phase wall seconds, CPU seconds (every thread), peak RSS
(MB), rows/s or frames/s, the ratio of its rate to its bare counterpart's and its wall and CPU time as
multiples of the bare phase's (`x_bare_wall`, `x_bare_cpu`, where both did the same work); the growth
exponent of each phase's wall time between the smallest and largest size (1.0 is linear) and the peak
RSS added per episode between them.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VECTORS = ["observation.state", "action"]
PHASES = (
    "baseline",
    "metadata",
    "bare_parquet",
    "stats",
    "stats_health",
    "health_rows",
    "fault_rows",
    "frames",
    "bare_pyav",
    "headers",
    "bare_headers",
    "tf_data",
)
BARE = {
    "stats": "bare_parquet",
    "stats_health": "bare_parquet",
    "frames": "bare_pyav",
    "headers": "bare_headers",
    "health_rows": "bare_parquet",
    "fault_rows": "bare_parquet",
}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _options(health: bool) -> dict[str, Any]:
    from pipeline.stages.contract.config import ContractConfig

    cfg = ContractConfig()
    return {
        "rank_error": cfg.rank_error,
        "dynamics_rows": cfg.dynamics_rows,
        # an older checkout sampled at most `max_episodes` (--compare); this one follows every episode
        "health_episodes": getattr(cfg.health, "max_episodes", 1) if health else 0,
        "health_gap_factor": cfg.health.gap_factor,
    }


def phase_metadata(root: Path) -> dict[str, Any]:
    from pipeline.readers.lerobot_data import LeRobotData

    data = LeRobotData(root)
    eps = data.episodes()
    data.stats(), data.tasks(), data.column_types()
    return {"work": len(eps.index) if eps is not None else 0, "unit": "episodes"}


def phase_bare_parquet(root: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    rows = 0
    for path in sorted((root / "data").rglob("*.parquet")):
        handle = pq.ParquetFile(path)
        for i in range(handle.num_row_groups):
            rows += handle.read_row_group(i, columns=VECTORS + ["episode_index"]).num_rows
    return {"work": rows, "unit": "rows"}


def _contract(root: Path, health: bool) -> Any:
    from pipeline.readers import read_dataset

    return read_dataset(str(root), _options(health))


def phase_stats(root: Path) -> dict[str, Any]:
    return {"work": _contract(root, False).rows, "unit": "rows"}


def phase_stats_health(root: Path) -> dict[str, Any]:
    return {"work": _contract(root, True).rows, "unit": "rows"}


def phase_health_rows(root: Path) -> dict[str, Any]:
    from pipeline.readers.base import Contract
    from pipeline.stages.contract.config import ContractConfig
    from pipeline.stages.contract.health import health_rows
    from pipeline.stages.contract.rows import Sources

    c = _contract(root, True)
    a = Contract("A", "contract_card", str(root), features=dict(c.features), stats=dict(c.stats))
    b = Contract("B", "training_yaml", str(root))
    rows = health_rows(Sources(a, b, c, ContractConfig()))
    return {"work": c.rows, "unit": "rows", "checks": len(rows)}


def phase_fault_rows(root: Path) -> dict[str, Any]:
    from pipeline.readers.base import Contract
    from pipeline.stages.contract import channels
    from pipeline.stages.contract.config import ContractConfig
    from pipeline.stages.contract.rows import Sources

    c = _contract(root, True)
    a = Contract("A", "contract_card", str(root), features=dict(c.features), stats=dict(c.stats))
    b = Contract("B", "training_yaml", str(root), norm_map={"STATE": "MEAN_STD", "ACTION": "MEAN_STD"})
    src = Sources(a, b, c, ContractConfig())
    rows = channels.channel_rows(src)
    return {"work": c.rows, "unit": "rows", "checks": len(rows)}


def _sampled(root: Path) -> tuple[Any, list[int], dict[int, list[int]]]:
    import numpy as np

    from pipeline.readers.frames import FrameReader
    from pipeline.readers.lerobot_data import LeRobotData
    from pipeline.stages.contract.config import ContractConfig
    from pipeline.stages.contract.frames import _episodes

    cfg = ContractConfig().frames
    reader = FrameReader(LeRobotData(root))
    eps = _episodes(reader, cfg.episodes)
    idx = {}
    for ep in eps:
        n = reader.timestamps(ep).size
        idx[ep] = sorted({*np.linspace(0, n - 1, min(cfg.per_episode, n)).round().astype(int).tolist()})
    return reader, eps, idx


def phase_frames(root: Path) -> dict[str, Any]:
    from pipeline.readers.frames import probe

    reader, eps, idx = _sampled(root)
    frames = 0
    for key in reader.data.video_keys():
        for ep in eps:
            probe(reader.data.video_location(key, ep)[0])
            frames += len(reader.frames(key, ep, idx[ep]))
    return {"work": frames, "unit": "frames"}


def phase_bare_pyav(root: Path) -> dict[str, Any]:
    """PyAV alone over the same spans: one seek to the episode's start, decode to its last sampled frame."""
    import av

    reader, eps, idx = _sampled(root)
    frames = 0
    for key in reader.data.video_keys():
        for ep in eps:
            path, start, _ = reader.data.video_location(key, ep)
            stop = start + max(idx[ep]) / float(reader.data.info["fps"])
            with av.open(str(path)) as container:
                stream = container.streams.video[0]
                container.seek(int(start / stream.time_base), stream=stream, backward=True)
                for frame in container.decode(stream):
                    frame.to_ndarray(format="rgb24")
                    frames += 1
                    if frame.pts * stream.time_base >= stop - 1e-4:
                        break
    return {"work": frames, "unit": "frames"}


def phase_headers(root: Path) -> dict[str, Any]:
    from pipeline.readers.frames import FrameReader
    from pipeline.readers.lerobot_data import LeRobotData
    from pipeline.stages.contract.config import ContractConfig
    from pipeline.stages.contract.spans import spans

    reader = FrameReader(LeRobotData(root))
    probed, capped = 0, False
    for key in reader.data.video_keys():
        found = spans(reader, key, ContractConfig().frames.span_files)
        probed += found.get("files_probed", 0)
        capped = capped or bool(found.get("capped"))
    return {"work": probed, "unit": "files", "capped": capped}


def phase_bare_headers(root: Path) -> dict[str, Any]:
    import av

    files = sorted((root / "videos").rglob("*.mp4"))
    for path in files:
        with av.open(str(path)) as container:
            int(container.streams.video[0].frames)
    return {"work": len(files), "unit": "files"}


def phase_tf_data(root: Path) -> dict[str, Any]:
    from pipeline.stages.teacher_forced import sample_index

    index = sample_index.read_index(root, ["action"])
    if index is None:
        raise SystemExit(f"{root}: rows not one contiguous run per episode (the whole read would run)")
    rows = sample_index.select_index(index, 512, 0)
    frames = sample_index.load(root, VECTORS, index, sample_index.episodes_of(index, rows))
    held = 0 if frames is None else len(frames)
    return {"work": index.rows, "unit": "rows", "rows_held": held}


def phase_baseline(root: Path) -> dict[str, Any]:
    import av  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import pipeline.readers  # noqa: F401
    import pipeline.stages.contract  # noqa: F401

    return {"work": 0, "unit": "-"}


def child(phase: str, root: Path) -> None:
    """One phase in this fresh process: its wall time and this process's peak RSS, one JSON line."""
    if phase != "baseline":
        phase_baseline(root)  # imports are not the phase's cost
    started, cpu = time.perf_counter(), _cpu_s()
    out = globals()[f"phase_{phase}"](root)
    out.update({"wall_s": round(time.perf_counter() - started, 3), "peak_rss_mb": round(_peak_mb(), 1)})
    out["cpu_s"] = round(_cpu_s() - cpu, 3)  # every thread's: on a shared machine, steadier than the wall
    print(json.dumps(out))


def run_phase(phase: str, root: Path, timeout: float, code: Path = REPO) -> dict[str, Any]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", phase, "--root", str(root)]
    argv += ["--code", str(code)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=code)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-600:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def dataset(base: Path, episodes: int, extra: list[str]) -> tuple[Path, dict[str, Any]]:
    """The dataset of this size under `base`, made unless a finished one is there (`meta/info.json`)."""
    root = base / f"scale-{episodes}"
    if (root / "meta/info.json").is_file():
        return root, {"reused": True}
    shutil.rmtree(root, ignore_errors=True)
    argv = [sys.executable, str(REPO / "benchmarks/make_large_dataset.py"), "--episodes", str(episodes)]
    done = subprocess.run([*argv, "--out", str(root), *extra], capture_output=True, text=True, check=True)
    return root, json.loads(done.stdout.strip().splitlines()[-1])


def measure(
    root: Path, timeout: float, phases: tuple[str, ...] = PHASES, code: Path = REPO
) -> dict[str, dict[str, Any]]:
    results = {phase: run_phase(phase, root, timeout, code) for phase in phases}
    for phase, r in results.items():
        if "wall_s" in r and r.get("work"):
            r["per_s"] = round(r["work"] / max(r["wall_s"], 1e-9), 1)
        bare = results.get(BARE.get(phase, ""), {})
        if "per_s" in r and bare.get("per_s"):
            r["ratio_to_bare"] = round(r["per_s"] / bare["per_s"], 4)
        # the same work's time as a multiple of the bare phase's: wall (the "<= 3x"), and CPU
        # (every thread's), steadier than the wall on a machine other jobs share
        for what in ("wall_s", "cpu_s"):
            if r.get(what) and bare.get(what) and r.get("work") == bare.get("work"):
                r[f"x_bare_{what[:-2]}"] = round(r[what] / bare[what], 2)
    return results


def growth(sizes: dict[int, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per phase: the exponent of wall time between the smallest and largest size (1.0: linear), and
    the peak RSS added per episode between them (the marginal bytes an episode costs)."""
    small, large = min(sizes), max(sizes)
    out: dict[str, Any] = {}
    if small == large:
        return out
    for phase in PHASES:
        a, b = sizes[small].get(phase, {}), sizes[large].get(phase, {})
        if not a.get("wall_s") or not b.get("wall_s"):
            continue
        exponent = math.log(b["wall_s"] / a["wall_s"]) / math.log(large / small)
        extra_mb = b["peak_rss_mb"] - a["peak_rss_mb"]
        out[phase] = {
            "wall_exponent": round(exponent, 2),
            "rss_ratio": round(b["peak_rss_mb"] / a["peak_rss_mb"], 2),
            "rss_bytes_per_episode": round(extra_mb * 2**20 / (large - small), 1),
        }
    return out


def table(sizes: dict[int, dict[str, dict[str, Any]]]) -> str:
    head = ("episodes", "phase", "wall s", "CPU s", "peak RSS MB", "per s", "ratio to bare", "x bare wall")
    lines = ["| " + " | ".join(head) + " | x bare CPU |", "|---:|---|" + "---:|" * 7]
    for n, results in sizes.items():
        for phase, r in results.items():
            rate = f"{r['per_s']:.0f} {r['unit']}" if "per_s" in r else "-"
            wall, cpu, rss = r.get("wall_s", "error"), r.get("cpu_s", "-"), r.get("peak_rss_mb", "-")
            ratio, x_wall, x_cpu = (r.get(k, "-") for k in ("ratio_to_bare", "x_bare_wall", "x_bare_cpu"))
            cells = (n, phase, wall, cpu, rss, rate, ratio, x_wall, x_cpu)
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--dir", type=Path, default=Path("/work/scale-data"))
    parser.add_argument("--keep", action="store_true", help="keep the datasets for the next run")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per phase")
    parser.add_argument("--child", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--code", type=Path, default=REPO, help=argparse.SUPPRESS)
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument(
        "--compare", type=Path, help="another checkout: its code runs the same phases, in the same run"
    )
    args, extra = parser.parse_known_args()
    if args.child:
        sys.path.insert(0, str(args.code))
        child(args.child, args.root)
        return
    sizes: dict[int, dict[str, dict[str, Any]]] = {}
    made: dict[int, dict[str, Any]] = {}
    for n in args.episodes:
        root, made[n] = dataset(args.dir, n, [e for e in extra if e != "--"])
        sizes[n] = measure(root, args.timeout, tuple(args.phases))
        if args.compare:
            before = measure(root, args.timeout, tuple(args.phases), args.compare.resolve())
            sizes[n].update({f"{k}@compare": v for k, v in before.items()})
        print(f"{n} episodes: {json.dumps(sizes[n])}", file=sys.stderr, flush=True)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(table(sizes), file=sys.stderr)
    print(json.dumps({"datasets": made, "sizes": sizes, "growth": growth(sizes)}))


if __name__ == "__main__":
    main()
