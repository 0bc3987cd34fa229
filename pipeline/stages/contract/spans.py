"""Every episode's span in its camera's video, against the video files' headers (issue 35).

Why every episode and every file: a v3.0 video file packs hundreds of episodes, and a file cut short or
an episode whose span holds another frame count than its rows breaks training only on the episodes it
touches; the few frames the health row decodes would miss them. Nothing is decoded here: the spans
come from meta/episodes and each file's frame count from its header, read in parallel (opening a file
waits on the disk, and PyAV releases the GIL while FFmpeg parses the header). A dataset of DROID's size
has thousands of files per camera: the files read are capped at `stages.contract.frames.span_files`,
and the row says how many were read of how many, never silently fewer.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader, probe
from pipeline.readers.lerobot_paths import unwritten

HEADER_THREADS = 8  # files opened at once: the header read waits on the filesystem more than the CPU


def frame_counts(paths: Sequence[Path], threads: int | None = None) -> dict[Path, int | InputError]:
    """Each file's frame count from its header (or the InputError saying why it cannot be read)."""

    def one(path: Path) -> int | InputError:
        try:
            return int(probe(path)["frames"])
        except InputError as exc:
            return exc

    workers = max(1, min(threads or HEADER_THREADS, len(paths), (os.cpu_count() or 1) * 4))
    if workers == 1:
        return {p: one(p) for p in paths}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(paths, pool.map(one, paths), strict=True))


def spans(reader: FrameReader, key: str, max_files: int) -> dict[str, Any]:
    """Every episode, from the metadata and the files' headers (nothing decoded): its span in the video
    holds as many frames as its rows, and its file holds frames up to the span's end. `problems` lists
    what is wrong; `capped` says the headers read were fewer than the files."""
    data = reader.data
    eps = data.episodes()
    fps = data.info.get("fps")
    usable = isinstance(fps, int | float) and not isinstance(fps, bool) and math.isfinite(fps) and fps > 0
    if eps is None or eps.length is None or not usable:
        return {"problems": [], "checked": 0, "why": "meta/episodes records no lengths (or info.json no fps)"}
    off, missing, invalid, files = [], [], [], {}
    for ep, length in zip(eps.index.tolist(), eps.length.tolist(), strict=True):
        try:
            path, held, last = _span(data, key, int(ep), int(length), float(fps))
        except InputError as exc:  # a value LeRobot never writes is named as such, not as a lost video
            (invalid if unwritten(exc) else missing).append(str(exc) if unwritten(exc) else int(ep))
            continue
        if held is not None and held != int(length):
            off.append(
                [int(ep), held if held < 10**15 else float(held), int(length)]
            )  # 1e300: not 300 digits
        files[path] = max(files.get(path, 0.0), last)
    read = list(files)[:max_files]
    short = []
    for path, have in frame_counts(read).items():
        if isinstance(have, InputError):
            missing.append(str(path.name))
        elif have and have + 0.5 < files[path]:
            short.append([str(path), have, round(files[path])])
    return {
        "problems": _invalid(invalid) + _problems(missing, off, short),
        "checked": len(eps.index),
        "files_probed": len(read),
        "files": len(files),
        "capped": len(read) < len(files),
        "span_files": max_files,
    }


def _span(data: Any, key: str, ep: int, length: int, fps: float) -> tuple[Path, int | None, float]:
    """An episode's video file, the frames its span holds (None: the whole file, v2.x) and the frame its
    file must reach; a span too long for any video (its frame count overflows) is an InputError."""
    path, start, end = data.video_location(key, ep)
    last = (start if end is None else end) * fps + (length if end is None else 0)
    if not math.isfinite(last):
        where = data.root / "meta/episodes"
        field = f"videos/{key}/to_timestamp"
        raise InputError(
            f"{where}: episode {ep}: field '{field}' is {end!r}, {last:g} frames at {fps:g} fps; expected "
            "seconds inside the episode's video file",
            path=where,
            field=field,
        )
    return path, None if end is None else round((end - start) * fps), last


def _invalid(invalid: list[str]) -> list[str]:
    """Episodes whose video location in the metadata is no location (a NaN or null number, a NaN or
    negative timestamp, a template of unknown fields): how many, and the first one's whole error."""
    if not invalid:
        return []
    return [f"{len(invalid)} episode(s) with a video location LeRobot never writes, the first: {invalid[0]}"]


def _problems(missing: list[Any], off: list[list[int]], short: list[list[Any]]) -> list[str]:
    problems = []
    if missing:
        problems.append(f"videos missing or unreadable for {len(missing)} episode(s)/file(s): {missing[:5]}")
    if off:
        problems.append(f"{len(off)} episode span(s) hold another frame count than their rows: {off[:3]}")
    if short:
        problems.append(f"{len(short)} video file(s) end before their last episode: {short[:2]}")
    return problems


def cap_note(found: dict[str, Any]) -> str:
    """The row's words for a capped header read ('' when every file was read)."""
    if not found.get("capped"):
        return ""
    return (
        f"headers of {found['files_probed']} of {found['files']} video files read "
        f"(stages.contract.frames.span_files={found['span_files']}); the rest unchecked"
    )
