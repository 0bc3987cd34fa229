"""The alignment pass's decoding (issue 34) vs bare PyAV decoding of the same frames, same run.

    python benchmarks/bench_alignment.py [--episodes 10] [--frames 300] [--side 96] [--repeat 3]
    python benchmarks/bench_alignment.py --seeds 5     # plus: full-size clean demo datasets of 5 seeds

Writes a LeRobot v3.0 dataset with one AV1 camera (`bench_frames.build`) and a moving state column,
then alternates, `--repeat` times in this process:

- align: `alignment.windows_of` for the camera: one window of `frames.align_frames` consecutive frames
         per sampled episode (placed from the rows, one seek each, through the frame reader), decoded
         and reduced to image motion;
- bare:  `av.open` + seek + decode of exactly the same frames to RGB ndarrays, nothing else
         (`frame.to_ndarray(format="rgb24")`, and again with one reformatter: the ceiling).

Prints one JSON line: frames decoded against the dataset's total (only sampled frames are decoded),
frames/s of both (best round) and their ratio. With `--seeds N`, also builds the demo's clean dataset
(full size: demo.episodes x demo.steps, cameras rendered) for seeds 0..N-1 and reports every camera's
lag row: no hard row is expected.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from bench_frames import KEY, TEMPLATE, build

from pipeline.demo.videos import restore_scheduling
from pipeline.readers.frames import FrameReader
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.stages.contract.alignment import States, windows_of
from pipeline.stages.contract.config import FramesConfig


def add_state(root: Path, episodes: int, frames: int) -> None:
    """A random-walk state column in bursts (the window placement reads it), declared in info.json."""
    table = pq.read_table(root / "data/file-000.parquet")
    rng = np.random.default_rng(0)
    steps = rng.normal(size=(episodes * frames, 3)) * (rng.random((episodes * frames, 1)) < 0.5)
    state = np.cumsum(steps, axis=0).astype(np.float32)
    table = table.append_column("observation.state", pa.array(state.tolist(), pa.list_(pa.float32())))
    pq.write_table(table, root / "data/file-000.parquet")
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["observation.state"] = {"dtype": "float32", "shape": [3]}
    (root / "meta/info.json").write_text(json.dumps(info))


def align(root: Path, cfg: FramesConfig) -> tuple[int, float, list[tuple[int, int, int]]]:
    start = time.perf_counter()
    reader = FrameReader(LeRobotData(root))
    cols = reader.data.frames(["observation.state", "episode_index"], dtype=np.float64)
    state = cols["observation.state"]
    states = States(cols["episode_index"].astype(np.int64), state, state.std(axis=0), ("observation.state",))
    windows, skipped = windows_of(cfg, reader, KEY, states)
    assert not skipped, skipped
    spans = [(w.episode, w.start, w.stop - w.start) for w in windows]
    return sum(n for _, _, n in spans), time.perf_counter() - start, spans


def bare(
    root: Path, spans: list[tuple[int, int, int]], frames: int, fps: int, one_context: bool
) -> tuple[int, float]:
    """The same frames with PyAV alone: seek to each window's first frame, decode until it is full;
    `frame.to_ndarray(format=...)` as PyAV's docs write it, or with one reformatter for the whole run
    (what the reader does: the ceiling)."""
    from av.video.reformatter import VideoReformatter

    rgb = VideoReformatter()
    start = time.perf_counter()
    n = 0
    with av.open(str(root / TEMPLATE.format(video_key=KEY, chunk_index=0, file_index=0))) as c:
        stream = c.streams.video[0]
        stream.thread_type = "AUTO"
        base = float(stream.time_base)
        for episode, first, width in spans:
            t0 = (episode * frames + first) / fps
            c.seek(int(t0 / base), stream=stream, backward=True)
            got = 0
            for frame in c.decode(stream):
                if frame.pts * base < t0 - 1e-4:
                    continue
                if one_context:
                    rgb.reformat(frame, format="rgb24").to_ndarray()
                else:
                    frame.to_ndarray(format="rgb24")
                got += 1
                if got == width:
                    break
            n += got
    return n, time.perf_counter() - start


def throughput(args: argparse.Namespace) -> dict:
    root = Path(tempfile.mkdtemp(prefix="bench_alignment_")) / "ds"
    build(root, args.episodes, args.frames, args.side, fps=30)
    restore_scheduling()  # the in-process AV1 encode left this thread real-time (demo/videos.py)
    add_state(root, args.episodes, args.frames)
    cfg = FramesConfig()
    best: dict[str, float] = {}
    counts: dict[str, int] = {}
    for _ in range(args.repeat):
        n, seconds, spans = align(root, cfg)
        counts["align"], best["align"] = n, min(best.get("align", np.inf), seconds)
        for name, one in (("bare", False), ("bare_one_context", True)):
            n, seconds = bare(root, spans, args.frames, 30, one)
            counts[name], best[name] = n, min(best.get(name, np.inf), seconds)
    assert counts["align"] == counts["bare"] == counts["bare_one_context"], counts
    fps = {k: round(counts[k] / best[k], 1) for k in best}
    total = args.episodes * args.frames
    return {
        "bench": "alignment",
        "codec": "av1",
        "side": args.side,
        "frames_decoded": counts["align"],
        "frames_total": total,
        "decoded_share": round(counts["align"] / total, 4),
        "frames_per_s": fps,
        "ratio_align_vs_bare": round(fps["align"] / fps["bare"], 3),
        "ratio_align_vs_bare_one_context": round(fps["align"] / fps["bare_one_context"], 3),
        "repeat": args.repeat,
    }


def seeds(count: int) -> dict:
    """Full-size clean demo datasets (no training): every camera's lag row per seed."""
    from omegaconf import OmegaConf

    from pipeline.demo.cameras import render_episodes
    from pipeline.demo.dataset import generate_episodes, write_dataset
    from pipeline.readers import ScanOptions, read_dataset
    from pipeline.readers.base import Contract
    from pipeline.record.runfolder import CONF_DIR
    from pipeline.stages.config import typed
    from pipeline.stages.contract.alignment import alignment_rows
    from pipeline.stages.contract.config import ContractConfig
    from pipeline.stages.contract.rows import Sources

    demo = OmegaConf.load(CONF_DIR / "demo" / "default.yaml")
    cfg = typed(ContractConfig, {}, "stages.contract")
    out: dict = {}
    for seed in range(count):
        recorded = generate_episodes(int(demo.episodes), int(demo.steps), seed)
        for episode, frames in zip(recorded, render_episodes(recorded, int(demo.cameras.size)), strict=True):
            episode.update(frames)
        root = Path(tempfile.mkdtemp(prefix=f"bench_alignment_seed{seed}_")) / "dataset"
        write_dataset(root, recorded)
        src = Sources(
            Contract("A", "contract_card", "base"),
            Contract("B", "training", "t"),
            read_dataset(root, ScanOptions.of(cfg)),
            cfg,
        )
        rows = alignment_rows(src)
        out[str(seed)] = {
            r.id.removeprefix("contract."): [
                r.verdict,
                r.severity,
                r.evidence.get("peak_lag"),
                r.evidence.get("peak_r"),
            ]
            for r in rows
        }
    hard = sum(v[0] == "mismatch" and v[1] == "hard" for rows in out.values() for v in rows.values())
    return {"seeds": out, "hard_rows": hard}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--side", type=int, default=96)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seeds", type=int, default=0)
    args = p.parse_args()
    result = throughput(args)
    if args.seeds:
        result["clean_demo"] = seeds(args.seeds)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
