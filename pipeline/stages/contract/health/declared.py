"""What a LeRobot dataset declares against what its data files hold, each row saying what LeRobot does.

`health.meta.dtypes`: info.json's dtype of each parquet feature against the stored column type (from the
files' footers, no row read). LeRobot loads the data with info.json's features, so `datasets` casts a
numeric column to the declared dtype (float64 stored where float32 is declared: cast on load, soft); a
column no cast turns into the declared type (text where numbers are declared) fails the load (hard).

`health.meta.required`: the columns LeRobotDataset reads on every sample or to locate episodes
(`index`, `task_index`, `timestamp`, `frame_index`, `episode_index`): one missing fails at load or at the
first sample, naming the key (hard). Columns the data holds and info.json does not declare are LeRobot's
to ignore (`health.meta.columns` names them).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from pipeline.readers.lerobot_data import LeRobotData
from pipeline.record.records import Check
from pipeline.stages.contract.health.common import ROWS, listed

REQUIRED = ("index", "task_index", "timestamp", "frame_index", "episode_index")
NOT_IN_PARQUET = ("video", "image")  # decoded from mp4 (video) or held as encoded bytes (image)
NUMERIC = (
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
)


def stored_dtype(kind: pa.DataType) -> str:
    """A column's element type in numpy's names: a list column by its values (`list<double>` float64)."""
    while pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        kind = kind.value_type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    try:
        return str(kind.to_pandas_dtype().__name__)
    except (NotImplementedError, AttributeError, TypeError):
        return str(kind)


def dtype_row(data: LeRobotData, schema: dict[str, pa.DataType]) -> Check:
    """Declared against stored dtype per parquet feature: a numeric cast is soft, no cast is hard."""
    cast: dict[str, dict[str, str]] = {}
    broken: dict[str, dict[str, str]] = {}
    for key, spec in data.features.items():
        declared = spec.get("dtype") if isinstance(spec, dict) else None
        if key not in schema or declared in (None, *NOT_IN_PARQUET):
            continue
        stored = stored_dtype(schema[key])
        if stored == declared:
            continue
        entry = {"declared": str(declared), "stored": stored}
        (cast if declared in NUMERIC and stored in NUMERIC else broken)[key] = entry
    text = [f"{k} stored {v['stored']}, declared {v['declared']}" for k, v in {**broken, **cast}.items()]
    evidence: dict[str, Any] = {"cast": cast, "fails": broken, "episodes": []}
    if broken:
        message = (
            f"{listed(text, 5)}: LeRobot loads the data with info.json's features and no cast turns "
            f"{listed(list(broken), 5)} into the declared type: the load fails naming the column"
        )
        return ROWS("health.meta.dtypes", "features", "mismatch", message, evidence=evidence)
    if cast:
        message = (
            f"{listed(text, 5)}: LeRobot casts them to info.json's dtype on load (nothing fails; the values "
            "the model sees are the declared type's, e.g. float64 rounded to float32)"
        )
        return ROWS("health.meta.dtypes", "features", "mismatch", message, severity="soft", evidence=evidence)
    message = "every parquet feature is stored as the dtype info.json declares"
    return ROWS("health.meta.dtypes", "features", "match", message, severity="soft", evidence=evidence)


def required_row(data: LeRobotData, schema: dict[str, pa.DataType]) -> Check:
    """The columns LeRobotDataset reads on every sample, present in the data files."""
    missing = [c for c in REQUIRED if c not in schema]
    evidence = {"missing": missing, "declared": [c for c in missing if c in data.features], "episodes": []}
    if not missing:
        message = f"the data holds every column LeRobot reads per sample ({', '.join(REQUIRED)})"
        return ROWS("health.meta.required", "columns", "match", message, evidence=evidence)
    message = (
        f"the data files lack {', '.join(missing)}: LeRobotDataset reads "
        + ", ".join(f"item[{c!r}]" for c in missing)
        + " (and loads the files with info.json's features), so it fails at load or at the first sample "
        f"naming {'that key' if len(missing) == 1 else 'those keys'}"
        + (f"; info.json declares {evidence['declared']}" if evidence["declared"] else "")
    )
    return ROWS(
        "health.meta.required",
        "columns",
        "mismatch",
        message,
        expected=list(REQUIRED),
        actual={"missing": missing},
        evidence=evidence,
    )


def declared_rows(data: LeRobotData, schema: dict[str, pa.DataType]) -> list[Check]:
    if not data.data_files():  # a metadata-only copy: the column rows say it once
        return []
    return [dtype_row(data, schema), required_row(data, schema)]
