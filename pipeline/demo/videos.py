"""The demo's camera recordings in LeRobot v3.0's layout: one AV1 mp4 per camera shared by every episode,
the image stats LeRobot computes, and the per-episode columns `meta/episodes` needs to find each
episode's frames.

Encoding follows LeRobot's `encode_video_frames` (libsvtav1, yuv420p, a keyframe every 2 frames so a
seek lands near any frame, crf 30); presentation time of frame i of the file is i / fps, and an episode
spans [from_timestamp, to_timestamp) of its file. Image stats are per channel in 0-1, shape (3, 1, 1),
from sampled frames of each episode (LeRobot's `sample_indices`: ~len^0.75 evenly spaced frames, at
least 100, at most all), aggregated over episodes weighted by their sample counts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.readers.frames import ImageStats

CODEC = {"libsvtav1": "av1"}
ENCODER = "libsvtav1"
OPTIONS = {"g": "2", "crf": "30", "preset": "12"}
STATS = ("mean", "std", "min", "max")


def video_path(key: str) -> str:
    return f"videos/{key}/chunk-000/file-000.mp4"


def restore_scheduling() -> bool:
    """Put the calling thread back on the normal scheduler; True when it had been moved off it.

    Why: run as root, SVT-AV1 (libsvtav1 5.x inside PyAV's wheel) switches the thread that encodes, and
    some of its own threads, to SCHED_FIFO priority 99, and leaves it so. Every process started from that
    thread afterwards inherits it: a trainer's OpenMP threads spinning at real-time priority on 2 cores
    took minutes per step and starved everything else (a test run stalled that way), and an encoder whose
    threads wait on each other at FIFO 99 can livelock (one demo build hung that way)."""
    if not hasattr(os, "sched_getscheduler") or os.sched_getscheduler(0) == os.SCHED_OTHER:
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True


def _without_realtime(argv: list[str]) -> list[str]:
    """Run `argv` unable to raise its scheduling priority (root without CAP_SYS_NICE), so the encoder's
    attempt to go real-time fails (it says so and encodes at normal priority)."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return argv
    return [setpriv, "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", *argv]


def encode(path: Path, frames: np.ndarray, fps: int, attempts: int = 3) -> None:
    """RGB uint8 [N, H, W, 3] to an AV1 mp4 at `fps`, in a child process with a time limit.

    Why a child: the encoder moves its caller to real-time scheduling (see `restore_scheduling`); in a
    child started without the right to do so, it cannot. The time limit stays: a stuck encoder is
    killed and the camera encoded again. It still sticks now and then on a loaded machine (2 of 4 fresh
    faulty builds beside other work, measured), so the limit is ~25x a working encode's time rather
    than the old 60 s + 20 ms a frame, which spent 144 s waiting on a camera of 4200 frames."""
    path.parent.mkdir(parents=True, exist_ok=True)
    given = path.with_name(path.name + ".frames.npy")
    np.save(given, np.ascontiguousarray(frames, np.uint8))
    argv = _without_realtime(
        [sys.executable, "-m", "pipeline.demo.videos", str(given), str(path), str(int(fps))]
    )
    limit = 20.0 + 0.005 * len(frames)  # ~0.2 ms a 64 px frame when it works
    try:
        for attempt in range(1, attempts + 1):
            try:
                subprocess.run(argv, check=True, timeout=limit, capture_output=True, text=True)
                return
            except subprocess.TimeoutExpired:
                if attempt == attempts:
                    stuck = f"{path}: the AV1 encoder did not finish in {limit:.0f} s, {attempts} times"
                    raise RuntimeError(stuck) from None
            except subprocess.CalledProcessError as exc:
                raise RuntimeError(f"{path}: encoding failed: {exc.stderr.strip()[-400:]}") from exc
    finally:
        given.unlink(missing_ok=True)


def _encode_here(path: Path, frames: np.ndarray, fps: int) -> None:
    """The demo's AV1 encoder proper, here (see `encode` for why it runs in a child)."""
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole configuration otherwise
    write_mp4(path, frames, fps, ENCODER, OPTIONS)
    restore_scheduling()


def write_mp4(path: Path, frames: np.ndarray, fps: int, encoder: str, options: dict[str, str]) -> None:
    """RGB uint8 [N, H, W, 3] to an mp4 (pts = frame number, time base 1 / fps), written to a temporary
    name first and renamed, so a reader never sees half a file."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with av.open(str(tmp), "w", format="mp4") as out:
        stream = out.add_stream(encoder, rate=fps, options=options)
        stream.width, stream.height = int(frames.shape[2]), int(frames.shape[1])
        stream.pix_fmt = "yuv420p"
        stream.time_base = Fraction(1, fps)
        for i, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    os.replace(tmp, path)


def sample_indices(length: int) -> np.ndarray:
    """LeRobot's frame sample for image stats: ~length^0.75 evenly spaced, between 100 and length."""
    count = min(length, max(100, min(int(length**0.75), 10_000)))
    return np.round(np.linspace(0, length - 1, count)).astype(int)


def episode_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    acc = ImageStats()
    acc.add(frames[sample_indices(len(frames))])
    return acc.result()


def aggregate(per_episode: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Episodes' image stats combined as LeRobot's `aggregate_stats` does (count-weighted moments)."""
    counts = np.array([float(s["count"][0]) for s in per_episode])
    w = counts[:, None, None, None] / counts.sum()
    means = np.stack([s["mean"] for s in per_episode])
    mean = (w * means).sum(0)
    var = (w * (np.stack([s["std"] for s in per_episode]) ** 2 + (means - mean) ** 2)).sum(0)
    return {
        "mean": mean,
        "std": np.sqrt(var),
        "min": np.stack([s["min"] for s in per_episode]).min(0),
        "max": np.stack([s["max"] for s in per_episode]).max(0),
        "count": np.array([int(counts.sum())]),
    }


def feature(frames: np.ndarray, fps: int) -> dict[str, Any]:
    """The camera's `info.json` feature entry (shape HWC, as LeRobot writes it)."""
    h, w = int(frames.shape[1]), int(frames.shape[2])
    return {
        "dtype": "video",
        "shape": [h, w, 3],
        "names": ["height", "width", "channels"],
        "info": {
            "video.height": h,
            "video.width": w,
            "video.codec": CODEC[ENCODER],
            "video.pix_fmt": "yuv420p",
            "video.is_depth_map": False,
            "video.fps": fps,
            "video.channels": 3,
            "has_audio": False,
        },
    }


def write_cameras(
    root: Path, cameras: Sequence[Mapping[str, np.ndarray]], fps: int
) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """Every camera's shared mp4; returns (info features, meta/episodes columns, stats.json blocks)."""
    features: dict[str, Any] = {}
    columns: dict[str, Any] = {}
    stats: dict[str, dict[str, np.ndarray]] = {}
    lengths = np.array([len(next(iter(c.values()))) for c in cameras])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) / fps
    for key in cameras[0]:
        frames = [c[key] for c in cameras]
        encode(root / video_path(key), np.concatenate(frames), fps)
        features[key] = feature(frames[0], fps)
        per_episode = [episode_stats(f) for f in frames]
        stats[key] = aggregate(per_episode)
        columns[f"videos/{key}/chunk_index"] = np.zeros(len(frames), np.int64)
        columns[f"videos/{key}/file_index"] = np.zeros(len(frames), np.int64)
        columns[f"videos/{key}/from_timestamp"] = starts.astype(np.float64)
        columns[f"videos/{key}/to_timestamp"] = (starts + lengths / fps).astype(np.float64)
        for stat in (*STATS, "count"):
            columns[f"stats/{key}/{stat}"] = [np.asarray(s[stat]).tolist() for s in per_episode]
    return features, columns, stats


if __name__ == "__main__":  # python -m pipeline.demo.videos FRAMES.npy OUT.mp4 FPS (see `encode`)
    _encode_here(Path(sys.argv[2]), np.load(sys.argv[1], allow_pickle=False), int(sys.argv[3]))
