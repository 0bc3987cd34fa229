"""robomimic / robosuite HDF5 demonstrations, read with h5py one demo and one chunk at a time.

Layouts seen in the wild: robomimic (`data/demo_N/{actions, obs/<key>, ...}`, `data.attrs["total"]`,
`env_args`) and raw robosuite (`data/demo_N/{states, actions, ...}`, `data.attrs["env"]`, no `obs`).
Every numeric dataset under a demo (including `obs/<key>`) is a feature keyed by its path inside the demo;
a dataset missing from a demo, or with another width, is an InputError naming the demo and the key.
Image datasets (uint8, [T, H, W, C]) are summarized from a few frames for the encoding checks.

Neither layout stores per-row timestamps, and raw robosuite lists no episode lengths apart from the rows
(robomimic's per-demo `num_samples` does): the contract says so (`carries`), with the control frequency
robomimic's `env_args` (or robosuite's `env_info`) names taken as the fps where one is stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from pipeline.errors import InputError
from pipeline.readers.base import DatasetContract, Feature, inside, role_of
from pipeline.readers.carries import EPISODE_LENGTHS, FPS, FRAMES, TIMESTAMPS, Carries
from pipeline.readers.scan import ScanOptions, finish, image_summary
from pipeline.storage.files import regular_file

CHUNK = 65536


def _demos(handle: h5py.File, path: Path) -> list[str]:
    if "data" not in handle or not isinstance(handle["data"], h5py.Group):
        raise InputError(f"{path}: no 'data' group (expected data/demo_N/...)", path=path, field="data")
    demos = sorted(
        (k for k in handle["data"] if isinstance(handle["data"][k], h5py.Group)), key=lambda k: (len(k), k)
    )
    if not demos:
        raise InputError(f"{path}: 'data' holds no demo groups", path=path, field="data")
    return demos


def _datasets(group: h5py.Group) -> dict[str, h5py.Dataset]:
    found: dict[str, h5py.Dataset] = {}
    group.visititems(
        lambda name, obj: found.__setitem__(name, obj) if isinstance(obj, h5py.Dataset) else None
    )
    return found


def _role(key: str, shape: tuple[int, ...], dtype: np.dtype) -> str:
    if len(shape) == 4 or (dtype == np.uint8 and len(shape) >= 3):
        return "image"
    leaf = key.split("/")[-1]
    if leaf in ("actions", "action"):
        return "action"
    if leaf in ("states",) or key.startswith("obs/") and ("proprio" in leaf or leaf.endswith("joint_pos")):
        return "state"
    return role_of(leaf)


def read(path: Path, options: ScanOptions) -> DatasetContract:
    if path.is_dir():
        files = sorted(path.glob("*.hdf5"))
        if len(files) != 1:
            raise InputError(f"{path}: expected exactly one .hdf5 file, found {len(files)}", path=path)
        path = inside(path, files[0].name, "hdf5 file")
    regular_file(path, "an HDF5 file")
    try:
        return _read(path, options)
    except (OSError, KeyError, RuntimeError, ValueError, TypeError) as exc:  # h5py's errors on bad bytes
        raise InputError(
            f"{path}: not a readable HDF5 file: {type(exc).__name__}: {exc}", path=path, field="hdf5"
        ) from exc


def _read(path: Path, options: ScanOptions) -> DatasetContract:
    with h5py.File(path, "r") as handle:
        demos = _demos(handle, path)
        first = _datasets(handle["data"][demos[0]])
        contract = DatasetContract(
            "C", "robomimic_hdf5" if "obs" in handle["data"][demos[0]] else "robosuite_hdf5", str(path)
        )
        attrs = dict(handle["data"].attrs)
        fps, said = _control_freq(attrs, contract.notes)
        lengths = _listed_lengths(handle, demos)
        contract.claimed = {
            "total_frames": _total(attrs, path),
            "total_episodes": len(demos),
            "env": _text(attrs.get("env")),
            "has_env_args": "env_args" in attrs,
            "fps": fps,
            **({"episode_lengths": lengths} if lengths is not None else {}),
        }
        contract.carries = _carries(contract.kind, fps, said, lengths is not None)
        for key, ds in first.items():
            if ds.ndim == 0 or not np.issubdtype(ds.dtype, np.number) or (ds.ndim == 2 and ds.shape[1] == 0):
                continue
            shape = tuple(int(s) for s in ds.shape[1:]) or (1,)
            role = _role(key, ds.shape, ds.dtype)
            contract.features[key] = Feature(key, role, shape, None, str(ds.dtype))
            if role == "image":
                contract.images[key] = image_summary(ds[: options.image_frames])
        _check_demos(handle, path, demos, contract)
    dims = {k: f.dim for k, f in contract.features.items() if f.role != "image" and f.dim}

    def blocks() -> Iterator[dict[str, np.ndarray]]:
        with h5py.File(path, "r") as h:
            for number, demo in enumerate(demos):
                group = h["data"][demo]
                length = min(group[k].shape[0] for k in dims)
                for start in range(0, length, CHUNK):
                    stop = min(start + CHUNK, length)
                    block = {k: np.asarray(group[k][start:stop]).reshape(stop - start, -1) for k in dims}
                    block["episode_index"] = np.full(stop - start, number)
                    yield block

    return finish(contract, blocks, options)


def _check_demos(handle: h5py.File, path: Path, demos: list[str], contract: DatasetContract) -> None:
    for demo in demos:
        group = handle["data"][demo]
        for key, feature in contract.features.items():
            if key not in group:
                raise InputError(
                    f"{path}: demo '{demo}' lacks dataset '{key}' that demo '{demos[0]}' has",
                    path=path,
                    field=f"data/{demo}/{key}",
                )
            shape = tuple(group[key].shape[1:]) or (1,)
            if shape != feature.shape:
                raise InputError(
                    f"{path}: data/{demo}/{key} has shape {shape} per step, expected {feature.shape}",
                    path=path,
                    field=f"data/{demo}/{key}",
                )


def _total(attrs: dict[str, Any], path: Path) -> int | None:
    """`data.attrs["total"]`, the frame count robomimic records; a non-integer names the attribute."""
    if "total" not in attrs:
        return None
    value = attrs["total"]
    if not np.issubdtype(np.asarray(value).dtype, np.integer) or np.asarray(value).size != 1:
        raise InputError(
            f"{path}: attribute data.attrs['total'] must be an integer frame count, got {value!r}",
            path=path,
            field="data.attrs.total",
        )
    return int(np.asarray(value).reshape(-1)[0])


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _control_freq(attrs: dict[str, Any], notes: list[str]) -> tuple[float | None, str]:
    """The control frequency the demos were recorded at, and where it was read: robomimic's
    `env_args` JSON (`env_kwargs.control_freq`), else raw robosuite's `env_info` JSON (`control_freq`).
    An attribute that is not JSON, or a rate that is not a positive number, is noted and not used."""
    for name, where in (("env_args", ("env_kwargs", "control_freq")), ("env_info", ("control_freq",))):
        if name not in attrs:
            continue
        try:
            value: Any = json.loads(_text(attrs[name]) or "")
        except (ValueError, RecursionError):
            notes.append(f"data.attrs['{name}'] is not JSON: no control frequency read from it")
            continue
        for step in where:
            value = value.get(step) if isinstance(value, dict) else None
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e6:
            notes.append(f"data.attrs['{name}'] {'.'.join(where)} = {value!r} is not a rate in Hz: not used")
            continue
        return float(value), f"data.attrs['{name}'] {'.'.join(where)}"
    return None, ""


def _listed_lengths(handle: h5py.File, demos: list[str]) -> dict[int, int] | None:
    """Each demo's `num_samples` attribute (robomimic writes it), by the episode number the scan gives the
    demo; None unless every demo has an integer one."""
    out = {}
    for number, demo in enumerate(demos):
        value = np.asarray(handle["data"][demo].attrs.get("num_samples", np.nan))
        if value.size != 1 or not np.issubdtype(value.dtype, np.integer):
            return None
        out[number] = int(value.reshape(-1)[0])
    return out


def _carries(kind: str, fps: float | None, said: str, listed: bool) -> Carries:
    """What this file holds by design: never per-row timestamps; lengths apart from the rows only where
    every demo has robomimic's `num_samples`; camera observations as arrays, not videos."""
    rate = (
        f"the rows are evenly spaced by design at the control frequency {fps:g} Hz ({said}), taken as "
        "the fps; per-row timestamps (a LeRobot conversion writes them) would enable these checks"
        if fps
        else "no control frequency is stored either (robomimic's data.attrs['env_args'] "
        "env_kwargs.control_freq would give the fps); per-row timestamps (a LeRobot conversion writes "
        "them) would enable these checks"
    )
    return Carries(
        "robomimic HDF5" if kind == "robomimic_hdf5" else "robosuite HDF5 (raw demos)",
        frozenset({EPISODE_LENGTHS} if listed else set()) | frozenset({FPS} if fps else set()),
        {
            TIMESTAMPS: rate,
            FPS: "robomimic's data.attrs['env_args'] env_kwargs.control_freq would declare it",
            EPISODE_LENGTHS: "each demo's length is its rows; robomimic's per-demo attribute num_samples "
            "would give a second count to compare",
            FRAMES: "camera observations are arrays inside each demo, not videos or image files; the frame "
            "rows read LeRobot's, so a LeRobot conversion would enable them",
        },
    )
