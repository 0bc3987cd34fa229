"""The one frame reader: camera frames as the training loader gives them, decoded with PyAV.

LeRobot v2.x keeps one mp4 per episode and camera (`video_path` template); v3.0 packs many episodes
into shared files, an episode's frames lying between its `videos/<key>/from_timestamp` and
`to_timestamp` (both found through `LeRobotData`, the one metadata reader). A frame is looked up by
timestamp within `tolerance_s` (LeRobot's 1e-4 s): frame `t` of an episode is the decoded frame whose
presentation time is `from_timestamp + t`. Frames come back RGB uint8 HWC, what the loader decodes;
`processor_view` gives what the policy sees (float 0-1 CHW). Image features stored in the parquet
(`dtype: image`, encoded bytes) and HDF5/npz arrays come out of the same API.

Streamed: only the asked frames are decoded, after one seek per episode; a video is never held whole,
and an episode's timestamps are read from its own data file only (`episode_rows`).
Every way a video can be bad (missing, truncated, no moov atom, a codec FFmpeg cannot decode, shorter
than its episode, timestamps that match no frame) is an `InputError` naming the file, episode and what
was expected.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.errors import FrameTimeError, InputError
from pipeline.readers.episode_rows import EpisodeRows
from pipeline.readers.lerobot_data import LeRobotData

TOLERANCE_S = 1e-4
OPEN_FILES = 8  # video containers a FrameReader keeps open (least recently used closed first)


def processor_view(frames: np.ndarray) -> np.ndarray:
    """RGB uint8 [..., H, W, C] -> float32 [..., C, H, W] in 0-1: what LeRobot's loader hands the policy."""
    return np.moveaxis(frames, -1, -3).astype(np.float32) / 255.0


def array_frames(array: Any, where: str) -> np.ndarray:
    """An HDF5/npz image array ([n,H,W,C] or [n,C,H,W]; uint8, or float in 0-1) as RGB uint8 [n,H,W,C]."""
    a = np.asarray(array)
    if a.ndim != 4 or not (a.shape[-1] in (1, 3, 4) or a.shape[1] in (1, 3, 4)):
        raise InputError(f"{where}: expected images [n,H,W,C] or [n,C,H,W], got shape {a.shape}", path=where)
    if a.shape[-1] not in (1, 3, 4):
        a = np.moveaxis(a, 1, -1)
    if a.dtype == np.uint8:
        return np.ascontiguousarray(a)
    if np.issubdtype(a.dtype, np.floating) and a.size and (np.nanmin(a) < 0 or np.nanmax(a) > 1):
        raise InputError(f"{where}: float images must lie in 0-1, got {np.nanmin(a)}..{np.nanmax(a)}")
    return np.clip(np.rint(a.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)


def decode_image(blob: bytes, where: str) -> np.ndarray:
    """One encoded image (PNG, JPEG: what `dtype: image` columns hold) as RGB uint8 HWC."""
    import av  # PyAV loads FFmpeg: imported where a frame is decoded, not by every job that imports us

    try:
        with av.open(io.BytesIO(blob)) as container:
            frame = next(container.decode(video=0))
            return frame.to_ndarray(format="rgb24")
    except (av.error.FFmpegError, StopIteration, ValueError) as exc:
        raise InputError(f"{where}: not a decodable image ({exc})", path=where) from exc


def decode_at(
    path: Path,
    times: Sequence[float],
    *,
    tolerance_s: float = TOLERANCE_S,
    threads: int = 0,
    what: str = "",
    opened: Callable[[Path], Any] | None = None,
) -> np.ndarray:
    """The frames presented at `times` (seconds in the file, ascending) as RGB uint8 [n,H,W,3].

    One seek to the first time, then decoding forward until the last one: never the whole file.
    `opened(path)`, when given, supplies a container kept open across calls (FrameReader's)."""
    import av  # PyAV loads FFmpeg: imported where a frame is decoded, not by every job that imports us

    label = f"{path}{' (' + what + ')' if what else ''}"
    if not path.is_file():
        raise InputError(f"{label}: video file missing (expected an mp4 for this camera)", path=path)
    wanted = np.asarray(times, dtype=np.float64)
    if wanted.size == 0:
        return np.zeros((0, 0, 0, 3), np.uint8)
    try:
        if opened is not None:
            return _decode(opened(path), wanted, tolerance_s, threads, label)
        with av.open(str(path)) as container:
            return _decode(container, wanted, tolerance_s, threads, label)
    except av.error.FFmpegError as exc:
        raise InputError(
            f"{label}: not a decodable video ({exc.__class__.__name__}: {exc}); expected a complete mp4 "
            "whose codec FFmpeg decodes",
            path=path,
        ) from exc


def _decode(container: Any, wanted: np.ndarray, tol: float, threads: int, label: str) -> np.ndarray:
    from av.video.reformatter import VideoReformatter  # with PyAV, where a frame is decoded

    if not container.streams.video:
        raise InputError(f"{label}: no video stream", path=label)
    stream = container.streams.video[0]
    if not stream.codec_context.is_open:  # a container kept open (FrameReader) decodes as it started
        stream.thread_type = "AUTO"
        stream.thread_count = threads
    base = float(stream.time_base)
    # one reformatter for the whole episode: `frame.to_ndarray(format=...)` builds a new swscale context
    # per frame, which costs ~10x the decoding itself on small frames; the pixels are identical
    rgb = VideoReformatter()
    _seek(container, stream, wanted, tol, label)
    out: list[np.ndarray] = []
    last = -np.inf
    for frame in container.decode(stream):
        if frame.pts is None:
            continue
        t = frame.pts * base
        if len(out) < wanted.size and wanted[len(out)] < t - tol:
            raise FrameTimeError(
                f"{label}: no frame at {wanted[len(out)]:.6f} s within {tol} s (nearest {last:.6f} s and "
                f"{t:.6f} s); expected one frame per episode timestamp",
                path=label,
            )
        while len(out) < wanted.size and abs(wanted[len(out)] - t) <= tol:
            out.append(rgb.reformat(frame, format="rgb24").to_ndarray())
        last = t
        if len(out) == wanted.size:
            return np.stack(out)
    raise FrameTimeError(
        f"{label}: video ends at {last:.6f} s with {len(out)} of {wanted.size} frames found; expected a "
        f"frame at {wanted[len(out)]:.6f} s (video shorter than its episode, or truncated)",
        path=label,
    )


def _seek(container: Any, stream: Any, wanted: np.ndarray, tol: float, label: str) -> None:
    """One seek to the keyframe at or before the first time wanted, refused first where the times are not
    finite or begin past the file's end (metadata LeRobot never writes: a NaN or 1e300 from_timestamp
    reached `int(NaN)`, or an int64 overflow inside PyAV's seek)."""
    bad = wanted[~np.isfinite(wanted)]
    if bad.size:
        raise InputError(
            f"{label}: frame time {bad[0]} s is not finite; expected seconds inside the video (the "
            "episode's from_timestamp in meta/episodes plus its row timestamps)",
            path=label,
            field="timestamp",
        )
    base = float(stream.time_base)
    end = None if stream.duration is None else float(stream.duration * stream.time_base)
    if not end and container.duration:
        end = container.duration / 1_000_000  # AV_TIME_BASE: microseconds
    if end and end > 0 and wanted[0] > end + tol:  # a header with no (or a zero) duration says nothing
        raise InputError(
            f"{label}: first frame wanted at {wanted[0]:.6f} s, past the video's end at {end:.6f} s; "
            "expected the episode's span inside its video file (from_timestamp in meta/episodes)",
            path=label,
            field="timestamp",
        )
    try:
        container.seek(max(int((wanted[0] - tol) / base), 0), stream=stream, backward=True)
    except OverflowError as exc:
        raise InputError(
            f"{label}: frame time {wanted[0]} s cannot be sought in this file ({exc}); expected seconds "
            "inside the video",
            path=label,
            field="timestamp",
        ) from exc


class FrameReader:
    """Camera frames of a LeRobot dataset by camera key, episode and (optional) frame indices."""

    def __init__(self, data: LeRobotData, tolerance_s: float = TOLERANCE_S, threads: int = 0) -> None:
        self.data = data
        self.tolerance_s = tolerance_s
        self.threads = threads
        self._timestamps: dict[int, np.ndarray] = {}  # per episode asked: a few, never the dataset's
        self._open: dict[Path, Any] = {}  # video file -> its container, the OPEN_FILES used last

    def close(self) -> None:
        for container in self._open.values():
            container.close()
        self._open = {}

    def __enter__(self) -> FrameReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _container(self, path: Path) -> Any:
        """The file's container, opened once for the reader's life: a sampler reads several windows of
        one file, and an open per window (~4 ms, a frame-threaded decoder started again) cost a fifth of
        the alignment pass's decoding. The least recently used beyond OPEN_FILES is closed."""
        import av

        container = self._open.pop(path, None)
        if container is None:
            container = av.open(str(path))
        self._open[path] = container  # most recently used last
        while len(self._open) > OPEN_FILES:
            self._open.pop(next(iter(self._open))).close()
        return container

    def cameras(self) -> list[str]:
        """Camera keys in info.json order: videos first as LeRobot lists them, then parquet images."""
        return self.data.video_keys() + self.data.image_keys()

    @cached_property
    def rows(self) -> EpisodeRows:
        """Single episodes' rows, located through the per-episode metadata: a sampler asking for a few
        episodes reads those, never every row's index (issue 35)."""
        return EpisodeRows(self.data)

    def timestamps(self, episode: int) -> np.ndarray:
        """The episode's `timestamp` column from the parquet rows (seconds from the episode start)."""
        found = self._timestamps.get(episode)
        if found is None:
            found = self.rows.arrays(episode, ["timestamp"])["timestamp"].astype(np.float64)
            self._timestamps[episode] = found
        return found

    def frames(self, key: str, episode: int, index: Sequence[int] | None = None) -> np.ndarray:
        """Frames `index` (all when None) of one camera and episode, RGB uint8 [n,H,W,3]."""
        ts = self.timestamps(episode)
        pick = np.arange(ts.size) if index is None else np.asarray(index, dtype=np.int64)
        if pick.size and (pick.min() < 0 or pick.max() >= ts.size):
            raise InputError(f"{self.data.root}: episode {episode} has {ts.size} frames, asked {pick.max()}")
        if key in self.data.image_keys():
            return self._images(key, episode, pick)
        if key not in self.data.video_keys():
            where = self.data.root / "meta/info.json"
            raise InputError(f"{where}: no camera {key!r} (have {self.cameras()})", path=where, field=key)
        path, start, end = self.data.video_location(key, episode)
        times = start + ts[pick]
        if end is not None and times.size and times.max() > end + self.tolerance_s:
            raise InputError(
                f"{path}: episode {episode} timestamps reach {times.max():.6f} s past its to_timestamp "
                f"{end:.6f} s (meta/episodes); expected them inside the episode's span",
                path=path,
            )
        order = np.argsort(times, kind="stable")
        decoded = decode_at(
            path,
            times[order],
            tolerance_s=self.tolerance_s,
            threads=self.threads,
            what=f"camera {key}, episode {episode}",
            opened=self._container,
        )
        out = np.empty_like(decoded)
        out[order] = decoded
        return out

    def _images(self, key: str, episode: int, pick: np.ndarray) -> np.ndarray:
        try:
            blobs = self.rows.table(episode, [key]).column(key).to_pylist()
        except (pa.ArrowInvalid, KeyError) as exc:
            where = self.data.root / "data"
            raise InputError(f"{where}: no readable image column {key!r}: {exc}", path=where) from exc
        out = []
        for i in pick:
            value = blobs[int(i)]
            blob = value.get("bytes") if isinstance(value, dict) else value
            if not isinstance(blob, bytes | bytearray):
                raise InputError(f"{self.data.root}: {key} episode {episode} frame {i}: no image bytes")
            out.append(decode_image(bytes(blob), f"{self.data.root} {key} episode {episode} frame {i}"))
        return np.stack(out) if out else np.zeros((0, 0, 0, 3), np.uint8)


def probe(path: Path, what: str = "") -> dict[str, Any]:
    """A video's stream facts without decoding: codec, fps, width, height, frame count and duration."""
    import av  # PyAV loads FFmpeg: imported where a frame is decoded, not by every job that imports us

    label = f"{path}{' (' + what + ')' if what else ''}"
    if not path.is_file():
        raise InputError(f"{label}: video file missing (expected an mp4 for this camera)", path=path)
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputError(f"{label}: no video stream", path=path)
            s = container.streams.video[0]
            duration = None if s.duration is None else float(s.duration * s.time_base)
            return {
                "codec": s.codec_context.name,
                "fps": None if s.average_rate is None else float(s.average_rate),
                "width": s.codec_context.width,
                "height": s.codec_context.height,
                "frames": int(s.frames),
                "duration_s": duration,
            }
    except av.error.FFmpegError as exc:
        raise InputError(
            f"{label}: not a readable video ({exc}); expected a complete mp4", path=path
        ) from exc


def frame_times(path: Path, start: float = 0.0, end: float | None = None, what: str = "") -> np.ndarray:
    """The presentation times (s) of a video's frames in [start, end], sorted, from the container's
    packets (PyAV demux, nothing decoded): what LeRobot's decoder matches each row's timestamp to."""
    import av  # PyAV loads FFmpeg: imported where a video is read

    label = f"{path}{' (' + what + ')' if what else ''}"
    if not path.is_file():
        raise InputError(f"{label}: video file missing (expected an mp4 for this camera)", path=path)
    times: list[float] = []
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputError(f"{label}: no video stream", path=path)
            stream = container.streams.video[0]
            base = float(stream.time_base)
            if start > 0:
                container.seek(max(int((start - 1.0) / base), 0), stream=stream, backward=True)
            for packet in container.demux(stream):
                if packet.pts is None:
                    continue
                times.append(packet.pts * base)
                if end is not None and times[-1] > end + 1.0:  # past the span (B-frames reorder pts)
                    break
    except av.error.FFmpegError as exc:
        raise InputError(
            f"{label}: not a readable video ({exc}); expected a complete mp4", path=path
        ) from exc
    out = np.sort(np.asarray(times, dtype=np.float64))
    return out[(out >= start - 1e-3) & (out <= (np.inf if end is None else end + 1e-3))]


class ImageStats:
    """Per-channel mean/std/min/max in 0-1 over streamed uint8 frames, exact, from 256-bin histograms
    (a bincount per channel: cheaper than float sums of squares, and memory stays 3 x 256 counters)."""

    def __init__(self) -> None:
        self.hist = np.zeros((3, 256), np.int64)

    def add(self, frames: np.ndarray) -> None:
        flat = frames.reshape(-1, frames.shape[-1])
        for c in range(3):
            self.hist[c] += np.bincount(flat[:, c], minlength=256)

    def result(self) -> dict[str, np.ndarray]:
        """LeRobot's image stats shape, (3, 1, 1) per statistic, values in 0-1."""
        levels = np.arange(256) / 255.0
        n = self.hist.sum(1)
        mean = self.hist @ levels / n
        std = np.sqrt(np.maximum(self.hist @ levels**2 / n - mean**2, 0.0))
        seen = self.hist > 0
        lo = np.argmax(seen, 1) / 255.0
        hi = (255 - np.argmax(seen[:, ::-1], 1)) / 255.0
        out = {"mean": mean, "std": std, "min": lo, "max": hi}
        return {k: v.reshape(3, 1, 1) for k, v in out.items()} | {"count": np.array([int(n[0])])}
