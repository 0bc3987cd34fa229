"""Camera frames of a LeRobot dataset, decoded the way the training loader decodes them (PyAV).

The gate checks pixels only if it reads them: this reader gives the frames a policy is trained on, by
episode and timestamp. LeRobot v2.x keeps one mp4 per episode and camera (`video_path` with
`episode_chunk`/`episode_index`, timestamps from 0); v3.0 keeps many episodes in one file per camera and
chunk, an episode's frames starting at `meta/episodes` `videos/<key>/from_timestamp`. A frame is the
decoded frame within `tolerance_s` of the asked timestamp (LeRobot's default 1e-4 s), as RGB uint8
(H, W, 3); `processor_view` gives what a policy's processor sees (float32 0-1, (3, H, W)).

Streamed: one seek per episode, frames decoded forward only as far as the last timestamp asked, never a
whole video in memory. Every failure (a missing file, no moov atom, a truncated stream, a codec FFmpeg
cannot decode, a timestamp with no frame, a video shorter than its episode) is one `InputError` naming
the file, the camera, the episode and what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pipeline.errors import InputError
from pipeline.readers.lerobot_data import LeRobotData

TOLERANCE_S = 1e-4


@dataclass(frozen=True)
class Span:
    """Where one episode's frames of one camera are: the file and the video time of its first frame."""

    key: str
    episode: int
    path: Path
    start_s: float
    end_s: float | None = None


class FrameReader:
    """The video cameras of one LeRobot dataset (v2.x or v3.0)."""

    def __init__(self, root: str | Path, tolerance_s: float = TOLERANCE_S) -> None:
        self.data = LeRobotData(root)
        self.tolerance_s = tolerance_s
        self._v3: dict[int, dict[str, object]] | None = None

    @property
    def cameras(self) -> list[str]:
        """Video features in info.json order (the order a processor stacks them in)."""
        return [
            k
            for k, spec in self.data.features.items()
            if isinstance(spec, dict) and spec.get("dtype") == "video"
        ]

    @property
    def fps(self) -> float:
        return float(self.data.info.get("fps") or 0)

    def span(self, key: str, episode: int) -> Span:
        template = self.data.info.get("video_path")
        if not isinstance(template, str):
            raise InputError(
                f"{self.data.root / 'meta/info.json'}: no 'video_path' template for camera {key!r}",
                path=self.data.root / "meta/info.json",
                field="video_path",
            )
        if str(self.data.version).startswith("v3"):
            row = self._episode_row(episode)
            chunk, index = row.get(f"videos/{key}/chunk_index"), row.get(f"videos/{key}/file_index")
            start, end = row.get(f"videos/{key}/from_timestamp"), row.get(f"videos/{key}/to_timestamp")
            if chunk is None or index is None or start is None:
                raise InputError(
                    f"{self.data.root / 'meta/episodes'}: episode {episode} has no videos/{key}/ pointers",
                    path=self.data.root / "meta/episodes",
                    field=f"videos/{key}",
                )
            relative = template.format(video_key=key, chunk_index=int(chunk), file_index=int(index))
            return Span(key, episode, self.data.file(relative, f"video of {key}"), float(start), _num(end))
        chunk = episode // int(self.data.info.get("chunks_size") or 1000)
        relative = template.format(video_key=key, episode_chunk=chunk, episode_index=episode)
        return Span(key, episode, self.data.file(relative, f"video of {key}"), 0.0)

    def _episode_row(self, episode: int) -> dict[str, object]:
        if self._v3 is None:
            self._v3 = {}
            for path in sorted((self.data.root / "meta" / "episodes").glob("chunk-*/file-*.parquet")):
                for row in pq.read_table(self.data.file(path.relative_to(self.data.root))).to_pylist():
                    self._v3[int(row.get("episode_index", len(self._v3)))] = row
        if episode not in self._v3:
            raise InputError(
                f"{self.data.root / 'meta/episodes'}: no episode {episode}",
                path=self.data.root,
                field="episode",
            )
        return self._v3[episode]

    def frames(self, key: str, episode: int, timestamps: Sequence[float]) -> np.ndarray:
        """RGB uint8 frames (N, H, W, 3) of `key` at the episode's `timestamps` (seconds from its start)."""
        span = self.span(key, episode)
        wanted = np.asarray(timestamps, dtype=np.float64) + span.start_s
        return decode_at(span, wanted, self.tolerance_s)


def _num(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def decode_at(span: Span, wanted: np.ndarray, tolerance_s: float) -> np.ndarray:
    """The frames at video times `wanted` (any order); one seek, then forward decoding."""
    import av

    where = f"{span.path}: camera {span.key}, episode {span.episode}"
    if not span.path.is_file():
        raise InputError(f"{where}: video file not found", path=span.path, field=span.key)
    order = np.argsort(wanted)
    out: list[np.ndarray | None] = [None] * len(wanted)
    try:
        with av.open(str(span.path)) as container:
            stream = container.streams.video[0]
            if len(wanted):
                start = float(wanted[order[0]])
                container.seek(max(0, int((start - 0.5) / stream.time_base)), stream=stream, backward=True)
            _fill(container.decode(stream), wanted, order, out, tolerance_s)
    except av.error.FFmpegError as exc:
        raise InputError(
            f"{where}: cannot decode the video ({exc})", path=span.path, field=span.key
        ) from None
    missing = [float(wanted[i]) for i, frame in enumerate(out) if frame is None]
    if missing:
        raise InputError(
            f"{where}: no frame within {tolerance_s} s of video time {missing[0]:.4f} s "
            f"({len(missing)} timestamp(s) without a frame; the video is shorter than its episode or the "
            "timestamps do not map to frames)",
            path=span.path,
            field=span.key,
        )
    return np.stack(out) if out else np.zeros((0, 0, 0, 3), np.uint8)  # type: ignore[arg-type]


def _fill(frames, wanted: np.ndarray, order: np.ndarray, out: list, tolerance_s: float) -> None:
    """Walk decoded frames forward, taking for each wanted time the frame within tolerance."""
    position = 0
    for frame in frames:
        if position >= len(order) or frame.time is None:
            if position >= len(order):
                return
            continue
        while position < len(order) and frame.time > wanted[order[position]] + tolerance_s:
            position += 1  # passed it without a frame close enough: stays None, named by the caller
        if position < len(order) and abs(frame.time - wanted[order[position]]) <= tolerance_s:
            image = frame.to_ndarray(format="rgb24")
            while position < len(order) and abs(frame.time - wanted[order[position]]) <= tolerance_s:
                out[order[position]] = image
                position += 1


def processor_view(frames: np.ndarray) -> np.ndarray:
    """What a policy's processor gets from the loader: float32 in [0, 1], channels first."""
    return np.ascontiguousarray(frames.transpose(0, 3, 1, 2), dtype=np.float32) / 255.0
