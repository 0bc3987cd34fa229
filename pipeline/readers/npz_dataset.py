"""Episodes stored as `.npz` files (OGBench-style and similar), loaded with `allow_pickle=False`.

Each array whose first axis is time becomes a feature: [T] and [T, d] numeric arrays are vectors,
[T, H, W, C] uint8 arrays are images (summarized from a few frames). Arrays of another length than the
episode's (e.g. `actions` one shorter than `obs_*`, or a per-episode `success` flag) are fine: each
feature is streamed on its own. A file that needs pickle, or whose feature widths differ from the first
file's, is an InputError naming the file and the array.

The format stores what each episode's author put in it: a `timestamp` array [T] is the per-row time where
there is one; no length is listed apart from the arrays, and camera frames are arrays, not videos. The
contract says so (`carries`), so the rows that need those fields are skipped, not unverifiable.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.base import DatasetContract, Feature, inside, read_json, role_of
from pipeline.readers.carries import EPISODE_LENGTHS, FPS, FRAMES, TIMESTAMPS, Carries
from pipeline.readers.scan import ScanOptions, finish, image_summary
from pipeline.storage.files import npz_member, regular_file

ROLES = {
    "obs_state": "state",
    "observations": "state",
    "state": "state",
    "qpos": "state",
    "actions": "action",
    "action": "action",
}


def _files(path: Path) -> list[Path]:
    if not path.is_dir():
        regular_file(path, "an .npz episode")
        return [path]
    found = [inside(path, p.relative_to(path), "episode file") for p in sorted(path.rglob("*.npz"))]
    for file in found:
        regular_file(file, "an .npz episode")
    return found


def _load(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: npz_member(data, k, path) for k in data.files}
    except ValueError as exc:
        raise InputError(
            f"{path}: holds an object array that would need pickle ({exc}); refused", path=path, field="npz"
        ) from exc
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:  # truncated or not a zip
        raise InputError(f"{path}: not a readable .npz archive: {exc}", path=path, field="npz") from exc


def _episode_meta(root: Path, first: Path) -> dict | None:
    """A `meta.json` beside an episode (e.g. its step count and success flag), when there is one; it is
    inside the dataset root like every other file (a symlink out is refused)."""
    meta = first.parent / "meta.json"
    if not (meta.exists() or meta.is_symlink()):
        return None
    if root.is_dir():
        inside(root, meta.relative_to(root.resolve()), "meta.json")
    data = read_json(meta, "episode metadata")
    return data if isinstance(data, dict) else None


def _role(key: str, arr: np.ndarray) -> str:
    if arr.ndim == 4 or (arr.dtype == np.uint8 and arr.ndim == 3):
        return "image"
    return ROLES.get(key, role_of(key))


def read(path: Path, options: ScanOptions) -> DatasetContract:
    files = _files(path)
    if not files:
        raise InputError(f"{path}: no .npz episodes", path=path, field="dataset.path")
    first = _load(files[0])
    contract = DatasetContract("C", "npz_episodes", str(path))
    contract.claimed = {"total_episodes": len(files), "episode_meta": _episode_meta(path, files[0])}
    for key, arr in first.items():
        if (
            arr.ndim == 0
            or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_)
            or arr.shape[0] < 2
        ):
            continue
        shape = tuple(int(s) for s in arr.shape[1:]) or (1,)
        role = _role(key, arr)
        contract.features[key] = Feature(key, role, shape, None, str(arr.dtype))
        if role == "image":
            contract.images[key] = image_summary(arr[: options.image_frames])
    contract.files = [str(f) for f in files]
    contract.carries = _carries("timestamp" in contract.features)
    dims = {k: f.dim for k, f in contract.features.items() if f.role != "image" and f.dim}

    def blocks() -> Iterator[dict[str, np.ndarray]]:
        for number, file in enumerate(files):
            data = first if number == 0 else _load(file)
            block: dict[str, np.ndarray] = {}
            for key, dim in dims.items():
                if key not in data:
                    raise InputError(
                        f"{file}: lacks array '{key}' that {files[0].name} has", path=file, field=key
                    )
                arr = np.asarray(data[key])
                if int(np.prod(arr.shape[1:], dtype=np.int64) or 1) != dim:
                    raise InputError(
                        f"{file}: array '{key}' has shape {arr.shape}, expected [T, {dim}]",
                        path=file,
                        field=key,
                    )
                block[key] = arr.reshape(arr.shape[0], dim).astype(np.float32, copy=False)
            lengths = {len(v) for v in block.values()}
            block["episode_index"] = np.full(min(lengths) if lengths else 0, number)
            yield block

    return finish(contract, blocks, options)


def _carries(timed: bool) -> Carries:
    """What `.npz` episodes hold by design: a per-row time only where the episodes have a `timestamp`
    array, and no declared rate; no length apart from the arrays' first axis; camera frames as arrays."""
    return Carries(
        "npz episodes",
        frozenset({TIMESTAMPS} if timed else set()),
        {
            TIMESTAMPS: "a `timestamp` array [T] in each episode would enable them",
            FPS: "the timestamps are taken as they are; nothing in the format declares the rate to compare",
            EPISODE_LENGTHS: "each episode's length is its arrays' first axis; nothing lists it apart to "
            "compare",
            FRAMES: "camera frames are uint8 arrays inside each episode, not videos or image files; the "
            "frame rows read LeRobot's, so a LeRobot conversion would enable them",
        },
    )
