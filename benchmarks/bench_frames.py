"""Frame reader and image-stats pass throughput vs bare PyAV decoding of the same frames, same run.

    python benchmarks/bench_frames.py [--episodes 4] [--frames 150] [--side 96] [--repeat 3] [--dir DIR]

Writes a LeRobot v3.0 dataset with one AV1 camera (libsvtav1, what LeRobot records with) of
`--episodes` x `--frames` frames in one shared file, then runs each phase `--repeat` times, each in a
fresh subprocess (own peak RSS, no allocator state carried over), alternated so all see the same load:

- bare:   `av.open` + one decode of the whole file to RGB ndarrays, nothing else (the ceiling);
- reader: `FrameReader.frames(key, episode)` for every episode (timestamps from the parquet, one seek
          per episode, frames matched within tolerance_s);
- stats:  the reader plus per-channel mean/std/min/max in 0-1 over every frame (the image-stats pass).

Then the reader at 1, 2 and auto (0) decode threads. Prints one JSON line: frames/s (best of the
rounds), ratio reader/bare and stats/bare, peak RSS of each phase, and the thread scaling.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.demo.videos import restore_scheduling

KEY = "observation.images.front"
TEMPLATE = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


def build(root: Path, episodes: int, frames: int, side: int, fps: int = 30) -> None:
    """A v3.0 dataset: one AV1 file holding every episode of one camera, parquet rows, meta/episodes."""
    video = root / TEMPLATE.format(video_key=KEY, chunk_index=0, file_index=0)
    video.parent.mkdir(parents=True)
    y, x = np.mgrid[0:side, 0:side]
    with av.open(str(video), "w", format="mp4") as out:
        s = out.add_stream("libsvtav1", rate=fps, options={"preset": "12", "crf": "30"})
        s.width = s.height = side
        s.pix_fmt = "yuv420p"
        s.time_base = Fraction(1, fps)
        for i in range(episodes * frames):
            img = np.stack([(x + i) % 256, (y * 2 + i) % 256, np.full_like(x, i % 256)], -1).astype(np.uint8)
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts = i
            out.mux(s.encode(f))
        out.mux(s.encode())
    v = f"videos/{KEY}/"
    starts = [e * frames / fps for e in range(episodes + 1)]
    (root / "meta/episodes").mkdir(parents=True)
    cols = {"episode_index": list(range(episodes)), "length": [frames] * episodes}
    cols |= {v + "chunk_index": [0] * episodes, v + "file_index": [0] * episodes}
    cols |= {v + "from_timestamp": starts[:-1], v + "to_timestamp": starts[1:]}
    pq.write_table(pa.table(cols), root / "meta/episodes/file-000.parquet")
    (root / "data").mkdir()
    rows = {
        "episode_index": np.repeat(np.arange(episodes), frames),
        "timestamp": np.tile(np.arange(frames) / fps, episodes),
    }
    pq.write_table(pa.table(rows), root / "data/file-000.parquet")
    info = {
        "codebase_version": "v3.0",
        "fps": fps,
        "video_path": TEMPLATE,
        "features": {KEY: {"dtype": "video", "shape": [side, side, 3]}},
    }
    (root / "meta/info.json").write_text(json.dumps(info))


def phase(root: Path, name: str, threads: int) -> dict:
    """One timed phase in this process: frames decoded, seconds, peak RSS."""
    from pipeline.readers.frames import FrameReader, ImageStats
    from pipeline.readers.lerobot_data import LeRobotData

    start = time.perf_counter()
    n = 0
    if name == "bare":
        with av.open(str(root / TEMPLATE.format(video_key=KEY, chunk_index=0, file_index=0))) as c:
            stream = c.streams.video[0]
            stream.thread_type, stream.thread_count = "AUTO", threads
            for frame in c.decode(stream):
                frame.to_ndarray(format="rgb24")
                n += 1
    else:
        data = LeRobotData(root)
        reader = FrameReader(data, threads=threads)
        stats = ImageStats()
        for ep in data.episodes().index.tolist():
            frames = reader.frames(KEY, ep)
            n += len(frames)
            if name == "stats":
                stats.add(frames)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"frames": n, "seconds": seconds, "peak_rss_mb": round(peak, 1)}


def run_phase(root: Path, name: str, threads: int) -> dict:
    cmd = [sys.executable, __file__, "--phase", name, "--threads", str(threads), "--dir", str(root)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--frames", type=int, default=150)
    p.add_argument("--side", type=int, default=96)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", type=Path)
    p.add_argument("--phase")
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.phase:
        print(json.dumps(phase(args.dir, args.phase, args.threads)))
        return
    root = Path(tempfile.mkdtemp(prefix="bench_frames_")) / "ds" if args.dir is None else args.dir
    if not (root / "meta/info.json").is_file():
        build(root, args.episodes, args.frames, args.side)
        restore_scheduling()  # the in-process AV1 encode left this thread real-time (demo/videos.py)
    results: dict[str, list[dict]] = {"bare": [], "reader": [], "stats": []}
    for _ in range(args.repeat):
        for name in results:
            results[name].append(run_phase(root, name, 0))
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in results.items()}
    fps = {k: round(r["frames"] / r["seconds"], 1) for k, r in best.items()}
    assert best["bare"]["frames"] == best["reader"]["frames"], best
    scaling = {}
    for threads in (1, 2, 0):
        r = run_phase(root, "reader", threads)
        scaling["auto" if threads == 0 else str(threads)] = round(r["frames"] / r["seconds"], 1)
    print(
        json.dumps(
            {
                "bench": "frames",
                "codec": "av1",
                "side": args.side,
                "frames": best["bare"]["frames"],
                "episodes": args.episodes,
                "frames_per_s": fps,
                "ratio_reader_vs_bare": round(fps["reader"] / fps["bare"], 3),
                "ratio_stats_vs_bare": round(fps["stats"] / fps["bare"], 3),
                "peak_rss_mb": {k: r["peak_rss_mb"] for k, r in best.items()},
                "reader_frames_per_s_by_threads": scaling,
                "repeat": args.repeat,
            }
        )
    )


if __name__ == "__main__":
    main()
