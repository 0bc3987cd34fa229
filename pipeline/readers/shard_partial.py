"""One array task's partial of the contract's data pass, on disk, and what the main job accepts of it.

Why a stamp and a marker: a relaunch of the same run id reuses the run folder, so the partial a task
left in an earlier launch is still there when this launch's task fails on a changed file, is killed
mid-write (time limit, OOM) or never starts. Merging it would report facts about data that is no longer
there under the new fingerprints. So a task first removes what an earlier launch left in its folder, then
writes its partial atomically (tmp + fsync + rename) and only after it a `done` marker (atomically too)
holding the partial's sha256 and the stamp: this launch's id, the stage's input fingerprints, its task
index and count. The main job merges a partial only when its marker exists, names this stamp and the
partial's exact bytes, and every data file the task read still has the size and modification time the
task saw; anything else is an InputError naming the file and what was wrong, and the caller reads the
data in one pass.

The partial itself is one `.npz` (arrays, and the JSON-able rest as one string, `meta.json`), read with
allow_pickle=False, regular files only (a FIFO would block the main job forever), every array's header
checked against its bytes, the metadata's nesting bounded, and its shape checked before any merge.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.sketch_kernel import BUCKETS, CELLS
from pipeline.storage import atomic_write_bytes, atomic_write_json
from pipeline.storage.files import NPY_ERRORS, npz_member, parse_json, read_bytes, read_text

PARTIAL = "scan_partial.npz"
DONE = "scan_partial.done.json"  # written after the partial: the task ran to its end, these bytes
MAC = "hmac"  # the marker's signature with audit.key_file, where one is set
SEP = "::"  # joins nested keys in the npz (feature names hold dots and slashes)
MAX_DEPTH = 16  # nesting of a partial's metadata (what a task writes is 6 deep)
VECTORS = ("count", "mean", "m2", "lo", "hi", "nonfinite", "total")  # one value per dim
CELL_ROWS = {"l2": 3, "l3": 4}  # (dim, bucket[, cell], missed) rows, with their counts' rows


# --------------------------------------------------------------------------------------- write
def pack(obj: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    """Arrays into `arrays` under their key path; returns the JSON-able rest with the paths marked."""
    if isinstance(obj, np.ndarray):
        arrays[prefix] = obj
        return {"__array__": prefix}
    if isinstance(obj, Mapping):
        return {str(k): pack(v, f"{prefix}{SEP}{k}", arrays) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [pack(v, f"{prefix}{SEP}{i}", arrays) for i, v in enumerate(obj)]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def identity(root: Path, names: Sequence[str]) -> dict[str, list[int]]:
    """Each data file's size and modification time (ns), taken before the task reads it."""
    out = {}
    for name in names:
        info = os.stat(root / name)
        out[name] = [info.st_size, info.st_mtime_ns]
    return out


def clear(path: Path) -> None:
    """What an earlier launch's task left at `path`: its marker first, so no marker outlives its partial."""
    path.with_name(DONE).unlink(missing_ok=True)
    path.unlink(missing_ok=True)


def write(
    meta: Mapping[str, Any],
    arrays: dict[str, np.ndarray],
    path: Path,
    stamp: Mapping,
    key: bytes | None = None,
) -> Path:
    """The partial (atomically), then its marker (atomically): a task killed before the marker's rename
    leaves nothing the main job merges. With the team's key (`audit.key_file`) the marker is signed."""
    arrays["meta.json"] = np.array(json.dumps({**meta, "stamp": stamp}))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    atomic_write_bytes(path, data)
    marker: dict[str, Any] = {
        "stamp": dict(stamp),
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
    }
    if key is not None:
        marker[MAC] = _mac(key, marker)
    atomic_write_json(path.with_name(DONE), marker)
    return path


def _mac(key: bytes, marker: Mapping[str, Any]) -> str:
    """The marker's HMAC as the audit history signs a record (sha256 over its canonical JSON)."""
    body = {k: marker[k] for k in ("stamp", "sha256", "bytes")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return "hmac-sha256:" + hmac.new(key, text, hashlib.sha256).hexdigest()


def _signed(marker: Mapping[str, Any], key: bytes, path: Path) -> None:
    """Without the key's HMAC, a marker proves only that the partial is the bytes someone wrote with it:
    anyone who can write the run folder can write both. With it, only a key holder's task."""
    found = marker.get(MAC)
    if not isinstance(found, str):
        why = "is not signed, though audit.key_file is set"
    elif not hmac.compare_digest(found, _mac(key, marker)):
        why = "has an HMAC that audit.key_file did not make (forged, or signed with another key)"
    else:
        return
    raise InputError(f"{path}: the done marker {why}; the partial is not merged", path=path, field=MAC)


# --------------------------------------------------------------------------------------- read
def read(path: Path, stamp: Mapping[str, Any] | None = None, key: bytes | None = None) -> dict[str, Any]:
    """A task's partial, accepted only with its marker (for `stamp`, when given, and these bytes; signed
    with `key`, when given); nothing unpickled, never a non-regular file opened. Anything else is an
    InputError naming it."""
    marker = _marker(path.with_name(DONE))
    if key is not None:
        _signed(marker, key, path.with_name(DONE))
    if stamp is not None:
        _same_stamp(marker["stamp"], stamp, path.with_name(DONE))
    data = read_bytes(path, "an array task's partial (.npz)")
    if len(data) != marker["bytes"] or hashlib.sha256(data).hexdigest() != marker["sha256"]:
        raise InputError(
            f"{path}: {len(data)} bytes that are not the {marker['bytes']} its done marker {DONE} names "
            "(written over or cut short after the task finished); not merged",
            path=path,
            field=PARTIAL,
        )
    arrays = _arrays(data, path)
    if "meta.json" not in arrays:
        raise InputError(f"{path}: holds no meta.json array; not merged", path=path, field="meta.json")
    meta = parse_json(str(arrays.pop("meta.json")), path, "a partial's metadata", "meta.json")
    part = unpack(meta, arrays, path)
    _check(part, path)
    if stamp is not None:
        _same_stamp(part["stamp"], stamp, path)
    return part


def _marker(path: Path) -> dict[str, Any]:
    """The task's done marker: without it the partial is not this task's finished work."""
    try:
        marker = parse_json(read_text(path, "a partial's done marker"), path, "a partial's done marker")
    except InputError as exc:
        why = "no done marker: the task did not finish writing it" if not path.exists() else str(exc)
        raise InputError(f"{path}: {why}; the partial is not merged", path=path, field=DONE) from None
    ok = isinstance(marker, dict) and isinstance(marker.get("stamp"), dict)
    if not ok or not isinstance(marker.get("sha256"), str) or not isinstance(marker.get("bytes"), int):
        raise InputError(
            f"{path}: expected {{stamp: {{...}}, sha256: str, bytes: int}}, got {str(marker)[:120]}",
            path=path,
            field=DONE,
        )
    return marker


def _same_stamp(found: Mapping[str, Any], want: Mapping[str, Any], path: Path) -> None:
    """This launch, these inputs, this task: each difference said in words."""
    want = json.loads(json.dumps(want))  # tuples as lists, as the file holds them
    old, new = (
        v if isinstance(v, dict) else {} for v in (found.get("fingerprints"), want.get("fingerprints"))
    )
    task, wanted = (found.get("task"), found.get("tasks")), (want.get("task"), want.get("tasks"))
    if found.get("launch") != want.get("launch"):
        why = f"written by launch {found.get('launch')} of this run id, not this one ({want.get('launch')})"
    elif found.get("fingerprints") != want.get("fingerprints"):
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        why = "written for other inputs: " + ", ".join(
            f"{k} {old.get(k)} then, {new.get(k)} now" for k in keys
        )
    elif task != wanted:
        why = "written as task {} of {}, not {} of {}".format(*task, *wanted)
    else:
        return
    raise InputError(f"{path}: a stale partial, {why}; not merged", path=path, field="stamp")


def _arrays(data: bytes, path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {k: npz_member(npz, k, path) for k in npz.files}
    except NPY_ERRORS as exc:
        raise InputError(f"{path}: not a readable partial (.npz): {exc}", path=path, field=PARTIAL) from exc


def unpack(
    obj: Any, arrays: Mapping[str, np.ndarray], path: Path, at: str = "meta.json", depth: int = 0
) -> Any:
    """The metadata with its array references filled in; a reference to an array the file lacks, or
    nesting deeper than any task writes, is an InputError naming the key path."""
    if depth > MAX_DEPTH:
        raise InputError(
            f"{path}: {at[:200]}: metadata nested deeper than {MAX_DEPTH} levels (a task writes 6)",
            path=path,
            field=at,
        )
    if isinstance(obj, dict):
        if set(obj) == {"__array__"}:
            key = obj["__array__"]
            if not isinstance(key, str) or key not in arrays:
                raise InputError(
                    f"{path}: {at} refers to array {key!r}, which the file does not hold; not merged",
                    path=path,
                    field=at,
                )
            return arrays[key]
        return {k: unpack(v, arrays, path, f"{at}/{k}", depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unpack(v, arrays, path, f"{at}/{i}", depth + 1) for i, v in enumerate(obj)]
    return obj


# --------------------------------------------------------------------------------------- shape
def _bad(path: Path, field: str, expected: str, value: Any) -> InputError:
    shown = f"shape {value.shape} {value.dtype}" if isinstance(value, np.ndarray) else repr(value)[:80]
    return InputError(f"{path}: {field} is {shown}, expected {expected}; not merged", path=path, field=field)


def _check(part: Any, path: Path) -> None:
    """The shape `merge` relies on, checked before it runs, so that a partial it cannot add is named."""
    if not isinstance(part, dict):
        raise _bad(path, "meta.json", "an object", part)
    tops = {"files": list, "rows": int, "stats": dict, "dynamics": dict, "identity": dict, "stamp": dict}
    for key, kind in tops.items():
        if not isinstance(part.get(key), kind) or isinstance(part.get(key), bool):
            raise _bad(path, f"meta.json/{key}", f"a {kind.__name__}", part.get(key))
    if not all(isinstance(f, str) for f in part["files"]):
        raise _bad(path, "meta.json/files", "a list of file names", part["files"])
    episodes = part.get("episodes")
    if not isinstance(episodes, np.ndarray) or episodes.ndim != 1 or episodes.dtype.kind not in "iu":
        raise _bad(path, "meta.json/episodes", "a 1-D integer array", episodes)
    if part.get("health") is not None and not isinstance(part["health"], dict):
        raise _bad(path, "meta.json/health", "an object or null", part["health"])
    for name, feature in part["stats"].items():
        _check_feature(feature, path, f"meta.json/stats/{name}")


def _check_feature(feature: Any, path: Path, at: str) -> None:
    if not isinstance(feature, dict):
        raise _bad(path, at, "an object of arrays", feature)
    count = feature.get("count")
    if not isinstance(count, np.ndarray) or count.ndim != 1:
        raise _bad(path, f"{at}/count", "a 1-D array (one count per dim)", count)
    dim = count.shape[0]
    shapes = {k: (dim,) for k in VECTORS} | {"hist": (dim, BUCKETS)}
    for key, shape in shapes.items():
        value = feature.get(key)
        if not isinstance(value, np.ndarray) or value.shape != shape or value.dtype.kind not in "iuf":
            raise _bad(path, f"{at}/{key}", f"a numeric array of shape {shape}", value)
    for key, width in CELL_ROWS.items():
        rows, counts = feature.get(key), feature.get(f"{key}_counts")
        if not isinstance(rows, np.ndarray) or rows.ndim != 2 or rows.shape[1] != width:
            raise _bad(path, f"{at}/{key}", f"an integer array of shape (n, {width})", rows)
        if not isinstance(counts, np.ndarray) or counts.shape != (len(rows), CELLS):
            raise _bad(path, f"{at}/{key}_counts", f"an array of shape ({len(rows)}, {CELLS})", counts)
        index = rows[:, : width - 1]
        if (
            rows.dtype.kind not in "iu"
            or (index < 0).any()
            or (index >= [dim, BUCKETS, CELLS][: width - 1]).any()
        ):
            raise _bad(path, f"{at}/{key}", f"(dim < {dim}, bucket < {BUCKETS}, cell < {CELLS}) rows", rows)


def _when(ns: Any) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat() if isinstance(ns, int) else "?"


def changed(part: Mapping[str, Any], root: Path) -> str | None:
    """The first data file the task read that is not as it saw it (size, modification time), in words."""
    for name in part["files"]:
        seen = part["identity"].get(name)
        try:
            info = os.stat(root / name)
        except OSError as exc:
            return f"{name} is gone since the task read it ({exc.strerror})"
        now = [info.st_size, info.st_mtime_ns]
        if seen != now:
            then = seen if isinstance(seen, list) and len(seen) == 2 else ["?", None]
            return (
                f"{name} changed since the task read it (size {then[0]} then, {now[0]} now; modified "
                f"{_when(then[1])} then, {_when(now[1])} now)"
            )
    return None
