"""Promotion records: which image a team promoted, by digest (`python -m pipeline.images` writes them).

Teams pin the training image by hand today (`sha256sum` against a promotion log). A promotion record
is that log entry as a file the gate reads: `image` (the path it was promoted at), `sha256` (of the
whole SIF file), `labels` (as the image carries them), `date` and `who`. YAML or JSON (safe loader).

"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import InputError
from pipeline.readers.sif import normalize_sha256, partition_sha256, read_sif, sha256_file
from pipeline.storage import atomic_write_text
from pipeline.storage.files import load_yaml

REQUIRED = ("image", "sha256", "date", "who")


def read_promotion(path: str | Path) -> dict[str, Any]:
    """The record, validated: every required field present, the digest a sha256, labels a mapping."""
    path = Path(path)
    data = load_yaml(path, "a promotion record (image, sha256, labels, date, who)")
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping with {', '.join(REQUIRED)}", path=path)
    missing = [key for key in REQUIRED if not data.get(key)]
    if missing:
        raise InputError(
            f"{path}: promotion record misses {', '.join(missing)} (expected {', '.join(REQUIRED)}, labels)",
            path=path,
            field=missing[0],
        )
    try:
        digest = normalize_sha256(data["sha256"], "sha256")
    except InputError as exc:
        raise InputError(f"{path}: {exc}", path=path, field="sha256") from exc
    labels = data.get("labels") or {}
    if not isinstance(labels, dict):
        raise InputError(f"{path}: labels: expected a mapping of label: value", path=path, field="labels")
    return {
        "image": str(data["image"]),
        "sha256": digest,
        "labels": {str(k): str(v) for k, v in labels.items()},
        "date": str(data["date"]),
        "who": str(data["who"]),
        "path": str(path),
    }


def promotion_record(image: str | Path, who: str, date: str | None = None) -> dict[str, Any]:
    """What `promote` writes: the image's digest and labels as read from the file itself."""
    sif = read_sif(image)
    return {
        "image": str(Path(image).resolve()),
        "sha256": sha256_file(image),
        "labels": sif.labels(),
        "date": date or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "who": who,
    }


def write_promotion(record: dict[str, Any], out: str | Path) -> Path:
    text = yaml.safe_dump(record, sort_keys=False) if str(out).endswith((".yaml", ".yml")) else None
    return atomic_write_text(Path(out), text or json.dumps(record, indent=2) + "\n")


def inspect(image: str | Path) -> dict[str, Any]:
    sif = read_sif(image)
    attrs = sif.attributes()
    return {
        **sif.summary(),
        "sha256": sha256_file(image),
        "partition_sha256": partition_sha256(sif),
        "labels": sif.labels(),
        "deffile": attrs.get("deffile"),
    }
