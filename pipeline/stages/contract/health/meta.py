"""Metadata and file rows: info.json's required fields, tasks declared against tasks used, features
declared against the columns the data holds, stray files in data/, column types, and the camera videos.

Videos that were never downloaded are one named row (`unverifiable`) and every vector check still runs:
a dataset checked without its videos is common and is not a fault of the data. A video missing for some
episodes while others have theirs is a hard row: the loader fails on the first sample that needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.errors import InputError
from pipeline.readers.episode_rows import EpisodeRows
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.readers.lerobot_paths import unwritten
from pipeline.readers.scan import INDEX_COLUMNS
from pipeline.record.records import Check
from pipeline.stages.contract.health.common import ROWS, listed, trained
from pipeline.stages.contract.health.declared import declared_rows

REQUIRED = (
    "codebase_version",
    "fps",
    "features",
    "total_episodes",
    "total_frames",
    "data_path",
    "chunks_size",
)


def meta_rows(src: Any, data: LeRobotData | None) -> list[Check]:
    """The metadata and file rows of a LeRobot dataset (`data`); none for other formats."""
    if data is None:
        return []
    try:
        schema = data.column_types()
    except InputError as exc:
        return [ROWS("health.meta.columns", "data", "error", str(exc), evidence={"path": exc.path})]
    return [
        _required(data),
        _tasks(data, src.c.health),
        _columns(data, schema),
        _types(schema),
        *declared_rows(data, schema),  # declared against stored dtypes, the columns LeRobot reads
        _stray(data),
        *_data_locations(data),
        *_videos(src, data, _trained(src)),
    ]


def _trained(src: Any) -> list[int]:
    """The followed episodes training reads (all of them unless `dataset.episodes` names some): a video
    missing for an episode not trained on is never loaded."""
    followed = [int(e) for e in (src.c.health.get("episodes") or {}).get("index", [])]
    return [e for e, keep in zip(followed, trained(src, followed), strict=True) if keep]


def _data_locations(data: LeRobotData) -> list[Check]:
    """Where each episode's rows lie, as LeRobot reads it (v3.0 meta/episodes `data/chunk_index` and
    `data/file_index` through info.json's `data_path`; v2.x the template alone): a NaN or null number or a
    template of unknown fields is a row naming it, since the loader, the frame sampler and teacher_forced
    stop on it, while the scan here reads every file whatever the metadata says. Nothing when sound."""
    try:
        eps = data.episodes()
    except InputError:
        return []  # the episode rows name an unreadable meta/episodes
    if eps is None or not eps.index.size:
        return []
    try:  # the first episode's lookup reads every episode's numbers, and fills the template
        EpisodeRows(data).located(int(eps.index[0]))
    except InputError as exc:
        evidence = {"field": exc.field, "path": exc.path, "episodes": []}
        return [ROWS("health.meta.locations", "meta/episodes", "mismatch", str(exc), evidence=evidence)]
    return []


def _required(data: LeRobotData) -> Check:
    fields = REQUIRED
    missing = [f for f in fields if data.info.get(f) is None]
    message = (
        f"meta/info.json lacks {', '.join(missing)} (LeRobot {data.version} requires them)"
        if missing
        else f"meta/info.json has every field LeRobot {data.version} requires"
    )
    return ROWS(
        "health.meta.info",
        "info.json",
        "mismatch" if missing else "match",
        message,
        expected=list(fields),
        actual={"missing": missing},
        evidence={"episodes": []},
    )


def _tasks(data: LeRobotData, facts: dict[str, Any]) -> Check:
    declared = data.tasks()
    used = [int(t) for t in facts.get("tasks_used", [])]
    if declared is None or not used:
        why = (
            "no task list in meta"
            if declared is None
            else "no task_index column in the data"
            if data.data_files()
            else f"no data file under {data.root / 'data'}"
        )
        return ROWS(
            "health.meta.tasks", "task_index", "unverifiable", f"tasks not compared: {why}", severity="soft"
        )
    undeclared = [t for t in used if t >= len(declared) or t < 0]
    unused = [i for i in range(len(declared)) if i not in set(used)]
    message = (
        f"task_index {listed(undeclared)} used in the data but meta lists {len(declared)} task(s): a "
        "language-conditioned model gets no (or another) instruction"
        if undeclared
        else f"every task used is declared ({len(used)} used of {len(declared)})"
        + (f"; declared but never used: {listed(unused)}" if unused else "")
    )
    return ROWS(
        "health.meta.tasks",
        "task_index",
        "mismatch" if undeclared else "match",
        message,
        expected=len(declared),
        actual={"used": used[:50], "unused": unused[:50]},
        evidence={"episodes": []},
    )


def _columns(data: LeRobotData, schema: dict[str, pa.DataType]) -> Check:
    if not data.data_files():  # a metadata-only copy: no column is absent, none was there to read
        message = f"no data file under {data.root / 'data'}: declared features not compared with columns"
        return ROWS("health.meta.columns", "features", "unverifiable", message, severity="soft")
    in_parquet = {k for k, v in data.features.items() if isinstance(v, dict) and v.get("dtype") != "video"}
    absent = sorted(in_parquet - set(schema))
    undeclared = sorted(set(schema) - set(data.features) - {"__index_level_0__"})
    parts = []
    if absent:
        parts.append(f"declared in info.json but absent from the data: {listed(absent)}")
    if undeclared:
        parts.append(f"in the data but not declared (LeRobot ignores them): {listed(undeclared)}")
    message = "; ".join(parts) or "every declared feature is a column of the data, and no other column"
    return ROWS(
        "health.meta.columns",
        "features",
        "mismatch" if absent else "match",
        message,
        severity="hard" if absent else "soft",
        evidence={"absent": absent, "undeclared": undeclared, "episodes": []},
    )


def _types(schema: dict[str, pa.DataType]) -> Check:
    wrong = {
        c: str(schema[c])
        for c in INDEX_COLUMNS
        if c in schema and not (pa.types.is_integer(schema[c]) or pa.types.is_floating(schema[c]))
    }
    message = (
        f"index column(s) of another type: {listed([f'{c} is {t}' for c, t in wrong.items()])} "
        "(expected numbers): their time and index checks were skipped"
        if wrong
        else "timestamp, frame_index, episode_index, index and task_index are numbers"
    )
    return ROWS(
        "health.meta.types",
        "columns",
        "mismatch" if wrong else "match",
        message,
        expected="integer or float columns",
        actual=wrong,
        evidence={"episodes": []},
    )


def _stray(data: LeRobotData) -> Check:
    base = data.root / "data"
    stray = (
        sorted(
            str(p.relative_to(data.root)) for p in base.rglob("*") if p.is_file() and p.suffix != ".parquet"
        )
        if base.is_dir()
        else []
    )
    message = f"files in data/ that are not parquet: {listed(stray)}" if stray else "data/ holds parquet only"
    return ROWS(
        "health.meta.files",
        "data",
        "mismatch" if stray else "match",
        message,
        severity="soft",
        evidence={"files": stray[:100], "episodes": []},
    )


def _videos(src: Any, data: LeRobotData, episodes: list[int]) -> list[Check]:
    """Camera videos per episode. Some missing breaks the loader (hard). None present at all is a
    dataset downloaded without its videos (LeRobot allows it): unverifiable where the model reads a
    camera, nothing missing for a model that reads none (a state-only policy)."""
    keys = data.video_keys()
    if not keys or not episodes:
        return []
    missing: dict[str, list[int]] = {}
    bad: list[str] = []  # locations LeRobot never writes (NaN chunk, a template of unknown fields): named
    present: dict[Path, bool] = {}  # a v3.0 file holds many episodes: looked at once (20k stats: ~1 s)
    for key in keys:
        for episode in episodes:
            try:
                path, _, _ = data.video_location(key, episode)
            except InputError as exc:
                if unwritten(exc):
                    bad.append(str(exc))
                    continue
                path = None
            if path is not None and path not in present:
                present[path] = Path(path).is_file()
            if path is None or not present[path]:
                missing.setdefault(key, []).append(episode)
    if bad:
        message = f"{len(bad)} camera video location(s) LeRobot never writes, the first: {bad[0]}"
        return [ROWS("health.videos", "videos", "mismatch", message, evidence={"invalid": bad[:20]})]
    total, count = len(keys) * len(episodes), sum(len(v) for v in missing.values())
    read = [k for k in missing if src.reads_camera(k)]
    evidence = {
        "missing": missing,
        "episodes": sorted({e for v in missing.values() for e in v}),
        "read": read,
    }
    if count == total:
        message = (
            f"no camera video is present ({len(keys)} camera(s) x {len(episodes)} episode(s)): "
            "frames not checked; every vector check ran"
        )
        verdict = "unverifiable" if read else "match"
        if not read:
            message += f"; the model reads none of {keys}: nothing it reads is missing"
        evidence = {"cameras": keys, "episodes": [], "read": read, "informational": not read}
        return [ROWS("health.videos", "videos", verdict, message, severity="soft", evidence=evidence)]
    message = (
        f"{count} of {total} camera video(s) missing: "
        f"{listed([f'{k} episode(s) {listed(v, 5)}' for k, v in missing.items()])}; the loader fails on them"
        if missing
        else f"every camera video is present ({len(keys)} camera(s) x {len(episodes)} episode(s))"
    )
    verdict = "mismatch" if missing else "match"
    return [ROWS("health.videos", "videos", verdict, message, evidence=evidence)]
