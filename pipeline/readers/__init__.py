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

from pipeline.readers.base import Contract, DatasetContract, Feature
from pipeline.readers.dataset import read_dataset
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.readers.model import read_model
from pipeline.readers.scan import ScanOptions
from pipeline.readers.training import read_training

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
