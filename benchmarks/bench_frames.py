"""The frame reader (`FrameReader.frames`) against bare PyAV decoding of the same frames, in one run.

    python benchmarks/bench_frames.py [--episodes 8] [--frames 150] [--size 96] [--codec libsvtav1]

Writes a LeRobot v3.0-shaped dataset with one camera (all episodes in one shared AV1 file, as LeRobot
writes them), then decodes every frame of every episode twice:

- baseline: `av.open` + `container.decode` over the whole file, `to_ndarray("rgb24")` per frame;
- reader:   `FrameReader(root).frames(key, episode, timestamps)` per episode (a seek per episode).

Both are timed best-of-3 in this process, with decoder threads 1 and auto; peak RSS growth is read
from `resource.getrusage`. Prints one JSON line: frames/s of each, their ratio, and memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers.frames import FrameReader

KEY = "observation.images.front"
TEMPLATE = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


def write(root: Path, episodes: int, frames: int, size: int, codec: str, fps: int = 30) -> Path:
    video = root / TEMPLATE.format(video_key=KEY, chunk_index=0, file_index=0)
    video.parent.mkdir(parents=True)
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
    with av.open(str(video), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for i in range(episodes * frames):
            image = np.roll(base, i, axis=1)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    rows = []
    for e in range(episodes):
        start = e * frames / fps
        rows.append(
            {
                "episode_index": e,
                "length": frames,
                f"videos/{KEY}/chunk_index": 0,
                f"videos/{KEY}/file_index": 0,
                f"videos/{KEY}/from_timestamp": start,
                f"videos/{KEY}/to_timestamp": start + frames / fps,
            }
        )
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    spec = {"dtype": "video", "shape": [size, size, 3]}
    info = {"codebase_version": "v3.0", "fps": fps, "video_path": TEMPLATE, "features": {KEY: spec}}
    (root / "meta" / "info.json").write_text(json.dumps(info))
    return video


def bare(video: Path, threads: str) -> int:
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO" if threads == "auto" else "SLICE"
        return sum(1 for frame in container.decode(stream) if frame.to_ndarray(format="rgb24") is not None)


def reader(root: Path, episodes: int, frames: int, fps: int = 30) -> int:
    frame_reader = FrameReader(root)
    times = np.arange(frames) / fps
    return sum(len(frame_reader.frames(KEY, e, times)) for e in range(episodes))


def best(fn, *args) -> tuple[float, int]:
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        count = fn(*args)
        runs.append(time.perf_counter() - started)
    return min(runs), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--codec", default="libsvtav1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        video = write(root, args.episodes, args.frames, args.size, args.codec)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        bare_s, n_bare = best(bare, video, "auto")
        bare1_s, _ = best(bare, video, "1")
        mid = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        reader_s, n_reader = best(reader, root, args.episodes, args.frames)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = {
        "bench": "frames",
        "codec": args.codec,
        "frames": n_reader,
        "size": args.size,
        "bare_fps": round(n_bare / bare_s, 1),
        "bare_fps_one_thread": round(n_bare / bare1_s, 1),
        "reader_fps": round(n_reader / reader_s, 1),
        "reader_vs_bare": round(bare_s / reader_s, 3),
        "peak_rss_growth_mb_bare": round((mid - before) / 1024, 1),
        "peak_rss_growth_mb_reader": round((after - mid) / 1024, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
