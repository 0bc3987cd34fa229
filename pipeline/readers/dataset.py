"""Readers for (C), the dataset as it really is: pick the format, stream it once.

`read_dataset(path, options)` picks the format (LeRobot v2.0/v2.1/v3.0 directory, robomimic/robosuite
HDF5, `.npz` episodes); each format reader streams its rows through the shared `Scan`
(`pipeline.readers.scan`). The caller passes the scan's thresholds (`ScanOptions`, or a mapping / config
with `rank_error` and `dynamics_rows`): they live in the contract stage's config, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.readers.base import DatasetContract
from pipeline.readers.hdf5_dataset import read as read_hdf5
from pipeline.readers.lerobot_dataset import read as read_lerobot
from pipeline.readers.npz_dataset import read as read_npz
from pipeline.readers.scan import ScanOptions

__all__ = ["ScanOptions", "read_dataset"]


def read_dataset(path: str | Path, options: ScanOptions | Mapping[str, Any] | Any) -> DatasetContract:
    """(C) for the dataset at `path`, scanned with the caller's `options` (see `ScanOptions.of`)."""
    path = Path(path)
    opts = ScanOptions.of(options)
    if not path.exists():
        raise InputError(f"{path}: dataset path does not exist", path=path, field="dataset.path")
    if path.is_dir() and (path / "meta" / "info.json").exists():
        return read_lerobot(path, opts)
    if path.suffix in (".hdf5", ".h5") or (path.is_dir() and any(path.glob("*.hdf5"))):
        return read_hdf5(path, opts)
    if path.suffix == ".npz" or (path.is_dir() and any(path.rglob("*.npz"))):
        return read_npz(path, opts)
    raise InputError(
        f"{path}: not a dataset this stage reads (expected a LeRobot directory with "
        "meta/info.json, an .hdf5 file, or .npz episodes)",
        path=path,
        field="dataset.path",
    )
