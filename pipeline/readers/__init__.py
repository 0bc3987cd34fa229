"""Readers for the three sources of truth, one module per format behind one small interface.

- `read_model(path, options) -> Contract` (A): LeRobot current/legacy, v1 stats, openpi, OpenVLA, card.
- `read_training(path) -> Contract` (B): LeRobot train_config.json, Hydra/YAML training configs.
- `read_dataset(path, options) -> DatasetContract` (C): LeRobot v2.0/v2.1/v3.0, HDF5, npz episodes,
  with stats recomputed from the data in bounded memory (`pipeline.readers.stats`).

Nothing is unpickled: JSON/YAML with safe loaders, safetensors headers validated by hand, numpy with
`allow_pickle=False`. Bad input raises `pipeline.stages.InputError` naming the file and the field.
"""

from pipeline.readers.base import Contract, DatasetContract, Feature
from pipeline.readers.dataset import read_dataset
from pipeline.readers.model import read_model
from pipeline.readers.training import read_training

__all__ = ["Contract", "DatasetContract", "Feature", "read_dataset", "read_model", "read_training"]
