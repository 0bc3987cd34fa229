"""`health.time.video_grid`: every row's timestamp is a video query where a camera is a video.

LeRobot decodes each sample's camera frames at the row's `timestamp` (v3.0: plus the episode's
`from_timestamp` in its file) and asserts a frame within `tolerance_s` (1e-4 s). A LeRobot video holds
frame k of its episode at k / fps, so the data alone says which queries will miss: a timestamp off that
grid by more than 1e-4 s (host-clock stamps), or past the episode's last frame; and one on the grid at
another frame than the row's own (timestamp != frame_index / fps) is handed another row's image. The
facts come from the data pass (`readers.health`, per episode); where the video files are here, the
flagged episodes are checked against the frames' own timestamps read from the container (PyAV demux,
nothing decoded), and the file's verdict wins. Either way a miss is a fault of the data (mismatch, hard),
not an error of the check.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader, frame_times
from pipeline.readers.health import TOLERANCE_S
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.record.records import Check
from pipeline.stages.contract.health.common import ROWS, column, episode_ids, listed
from pipeline.stages.contract.rows import Sources

VERIFIED = 8  # flagged episodes checked against their video files where those are here


def grid_rows(src: Sources, facts: dict[str, Any], keep: np.ndarray) -> list[Check]:
    cams = [k for k, f in src.c.features.items() if f.role == "image" and f.dtype == "video"]
    fps = facts.get("fps")
    if not cams or not fps or "grid_miss" not in facts["episodes"]:
        return []
    ids = np.asarray(episode_ids(facts))
    rows, t_last = column(facts, "rows"), column(facts, "t_last").astype(np.float64)
    past = t_last - (rows - 1) / fps  # > 0: the last rows ask for frames after the episode's last
    miss = ((column(facts, "grid_miss") > 0) | (past > TOLERANCE_S)) & keep
    other = (column(facts, "grid_other") > 0) & ~miss & keep
    off = np.maximum(column(facts, "grid_off"), np.maximum(past, 0.0))
    if not miss.any() and not other.any():
        message = (
            f"every row's timestamp is frame_index / fps on the video grid (1/{fps:g} s, within LeRobot's "
            f"tolerance_s {TOLERANCE_S:g}): each camera query ({listed(cams, 3)}) finds its own frame"
        )
        return [ROWS("health.time.video_grid", "timestamp", "match", message)]
    flagged = {int(e): float(o) for e, o in zip(ids[miss], off[miss], strict=True)}
    shifted = [int(e) for e in ids[other]]
    checked = _against_files(
        src, cams[0], list(flagged)[:VERIFIED] + shifted[: max(0, VERIFIED - len(flagged))]
    )
    if checked is not None:
        flagged = {e: g for e, g in checked.items() if g > TOLERANCE_S}
        shifted = [e for e in shifted if e not in checked]
    return [_row(cams, fps, flagged, shifted, facts, ids, checked)]


def _against_files(src: Sources, cam: str, episodes: list[int]) -> dict[int, float] | None:
    """Per episode, the largest distance from a row's query time to the nearest frame of the camera's
    video file (None where the files are not here: the grid's verdict stands)."""
    if not src.c.kind.startswith("lerobot") or not episodes:
        return None
    reader = FrameReader(LeRobotData(src.c.path))
    out: dict[int, float] = {}
    try:
        for episode in episodes:
            path, start, end = reader.data.video_location(cam, episode)
            if not path.is_file():
                return None
            times = frame_times(path, start, end, f"camera {cam}, episode {episode}")
            wanted = start + reader.timestamps(episode)
            if not times.size:
                out[episode] = float("inf")
                continue
            at = np.clip(np.searchsorted(times, wanted), 1, max(times.size - 1, 1))
            nearest = np.minimum(
                np.abs(wanted - times[at - 1]), np.abs(wanted - times[np.minimum(at, times.size - 1)])
            )
            out[episode] = float(nearest.max())
    except InputError:
        return None  # an unreadable video is `frames.health`'s row; the grid's verdict stands
    finally:
        reader.close()
    return out


def _row(
    cams: list[str],
    fps: float,
    flagged: dict[int, float],
    shifted: list[int],
    facts: dict[str, Any],
    ids: np.ndarray,
    checked: dict[int, float] | None,
) -> Check:
    how = (
        f"checked against the frames' timestamps in the video files ({len(checked)} episode(s), PyAV "
        "demux, nothing decoded)"
        if checked is not None
        else f"checked against the video grid k / fps (1/{fps:g} s), not the files (no video files here)"
    )
    index = {int(e): i for i, e in enumerate(ids)}
    parts = []
    if flagged:
        worst = max(flagged, key=lambda e: flagged[e])
        count = sum(int(column(facts, "grid_miss")[index[e]]) for e in flagged)
        parts.append(
            f"{len(flagged)} episode(s) ({listed(list(flagged), 8)}) have row timestamps with no frame "
            f"within LeRobot's tolerance_s {TOLERANCE_S:g} s (largest offset {flagged[worst]:.4g} s, "
            f"episode {worst}; {count} row(s) off the grid): every camera query ({listed(cams, 3)}) at "
            "those rows misses and LeRobot's video decoder raises"
        )
    if shifted:
        parts.append(
            f"{len(shifted)} episode(s) ({listed(shifted, 8)}) stamp rows on the grid at another frame than "
            "their own (timestamp != frame_index / fps): the loader hands them another row's image"
        )
    evidence = {
        "episodes": sorted({*flagged, *shifted}),
        "largest_offset_s": flagged,
        "other_frame": shifted,
        "tolerance_s": TOLERANCE_S,
        "against": "files" if checked is not None else "grid",
        "cameras": cams,
    }
    message = "; ".join(parts) + f"; {how}" if parts else f"every query finds its frame; {how}"
    return ROWS(
        "health.time.video_grid",
        "timestamp",
        "mismatch" if parts else "match",
        message,
        expected=f"timestamp = frame_index / fps within {TOLERANCE_S:g} s",
        actual={"episodes_missing": len(flagged), "episodes_other_frame": len(shifted)},
        evidence=evidence,
    )
