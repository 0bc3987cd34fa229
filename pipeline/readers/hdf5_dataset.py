"""robomimic / robosuite HDF5 demonstrations, read with h5py one demo and one chunk at a time.

Layouts seen in the wild: robomimic (`data/demo_N/{actions, obs/<key>, ...}`, `data.attrs["total"]`,
`env_args`) and raw robosuite (`data/demo_N/{states, actions, ...}`, `data.attrs["env"]`, no `obs`).
Every numeric dataset under a demo (including `obs/<key>`) is a feature keyed by its path inside the demo;
a dataset missing from a demo, or with another width, is an InputError naming the demo and the key.
Image datasets (uint8, [T, H, W, C]) are summarized from a few frames for the encoding checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from pipeline.errors import InputError
from pipeline.readers.base import DatasetContract, Feature, inside, role_of
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
        contract.claimed = {
            "total_frames": _total(attrs, path),
            "total_episodes": len(demos),
            "env": _text(attrs.get("env")),
            "has_env_args": "env_args" in attrs,
        }
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
