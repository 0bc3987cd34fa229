"""Readers for (C), the dataset as it really is: pick the format, stream it once.

`read_dataset(path, options)` picks the format (LeRobot v2.0/v2.1/v3.0 directory, robomimic/robosuite
HDF5, `.npz` episodes); each format reader streams its rows through the shared `Scan`
(`pipeline.readers.scan`). The caller passes the scan's thresholds (`ScanOptions`, or a mapping / config
with `rank_error` and `dynamics_rows`): they live in the contract stage's config, not here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.readers.base import DatasetContract
from pipeline.readers.scan import ScanOptions

__all__ = ["ScanOptions", "dataset_format", "read_dataset"]


def read_dataset(path: str | Path, options: ScanOptions | Mapping[str, Any] | Any) -> DatasetContract:
    """(C) for the dataset at `path`, scanned with the caller's `options` (see `ScanOptions.of`)."""
    path = Path(path)
    opts = ScanOptions.of(options)
    reader = importlib.import_module(_FORMATS[dataset_format(path)])  # h5py only for an HDF5 dataset
    return reader.read(path, opts)


def dataset_format(path: str | Path) -> str:
    """Which reader takes the dataset at `path` (`lerobot`, `hdf5`, `npz`), from names only, nothing
    read: the cheap "can a reader take this" that launch asks; else the reader's own InputError."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: dataset path does not exist", path=path, field="dataset.path")
    if path.is_dir() and (path / "meta" / "info.json").exists():
        return "lerobot"
    if path.suffix in (".hdf5", ".h5") or (path.is_dir() and any(path.glob("*.hdf5"))):
        return "hdf5"
    if path.suffix == ".npz" or (path.is_dir() and any(path.rglob("*.npz"))):
        return "npz"
    raise InputError(
        f"{path}: not a dataset this stage reads (expected a LeRobot directory with "
        "meta/info.json, an .hdf5 file, or .npz episodes)",
        path=path,
        field="dataset.path",
    )


_FORMATS = {
    "lerobot": "pipeline.readers.lerobot_dataset",
    "hdf5": "pipeline.readers.hdf5_dataset",
    "npz": "pipeline.readers.npz_dataset",
}
