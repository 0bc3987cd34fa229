"""Readers for the three sources of truth, one module per format behind one small interface.

- `read_model(path, options) -> Contract` (A): LeRobot current/legacy, v1 stats, openpi, OpenVLA, card.
- `read_training(path) -> Contract` (B): LeRobot train_config.json, Hydra/YAML training configs.
- `read_dataset(path, options) -> DatasetContract` (C): LeRobot v2.0/v2.1/v3.0, HDF5, npz episodes,
  with stats recomputed from the data in bounded memory (`pipeline.readers.stats`); `options` are the
  caller's `ScanOptions` (thresholds from the contract stage's config).
- `LeRobotData(root)`: the one LeRobot data API (info, stats, episodes, frames) everything else uses.

Nothing is unpickled: JSON/YAML with safe loaders, safetensors headers validated by hand, numpy with
`allow_pickle=False`. Bad input raises `pipeline.errors.InputError` naming the file and the field.
Readers import no stage.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each reader is imported on first use (numpy, pyarrow, h5py behind them): a launch that names one
# format imports that format's reader only.
_LAZY = {
    "Contract": "pipeline.readers.base",
    "DatasetContract": "pipeline.readers.base",
    "Feature": "pipeline.readers.base",
    "LeRobotData": "pipeline.readers.lerobot_data",
    "ScanOptions": "pipeline.readers.scan",
    "read_dataset": "pipeline.readers.dataset",
    "read_model": "pipeline.readers.model",
    "read_training": "pipeline.readers.training",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Contract",
    "DatasetContract",
    "Feature",
    "LeRobotData",
    "ScanOptions",
    "read_dataset",
    "read_model",
    "read_training",
]
