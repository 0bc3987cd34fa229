"""The finetune contract for cameras: which dataset key provides each camera the base reads.

LeRobot's finetuning (`--policy.path`) refreshes the output features from the dataset but keeps the
base's `input_features` (its issue #4517), and its rename step maps dataset keys onto policy keys before
the normalizer. A base camera that no dataset key provides after that map (a camera renamed onto a key the
base does not have, or recorded under another name) trains on a blank or missing input without an error,
so each of the base's cameras gets one row naming its spec, the dataset's and the rename map in force.
The vector features' counterparts are `layout.key` / `layout.shape` (`layout.py`).
"""

from __future__ import annotations

from pipeline.record.records import Check, Rows
from pipeline.stages.contract.rows import (
    DECLARES_INPUTS,
    NAME,
    Sources,
    a_label,
    chw,
    provider,
    rename_evidence,
    rename_text,
    spec,
)

ROWS = Rows(NAME, "layout")


def camera_rows(src: Sources) -> list[Check]:
    """One row per camera A reads (A's formats that list their inputs only: others read every camera)."""
    if src.a.kind not in DECLARES_INPUTS and not src.a.hints.get("fresh"):
        return []
    return [_camera_row(src, key) for key, f in src.a.features.items() if f.role == "image"]


def _camera_row(src: Sources, key: str) -> Check:
    a = src.a.features[key]
    c, how = provider(src, key)
    cams = [k for k, f in src.c.features.items() if f.role == "image"]
    evidence = {"A": spec(a), "C": spec(c, key=True), "matched_by": how, "dataset_cameras": cams}
    evidence.update(rename_evidence(src))
    fields = {"expected": list(chw(a) or ()) or None, "actual": list(chw(c) or ()) if c else None}
    if c is None:
        given = ", ".join(spec(f, key=True) for f in src.c.features.values() if f.role == "image")
        message = (
            f"{key}: the {a_label(src)} reads {spec(a)}, no dataset key provides it (dataset cameras: "
            f"{given or 'none'}){rename_text(src)}; LeRobot keeps the base's input_features when "
            "finetuning, so this camera is missing or blank in training"
        )
        return ROWS(f"layout.key:{key}", key, "mismatch", message, evidence=evidence, **fields)
    a_shape, c_shape = chw(a), chw(c)
    via = f" (renamed from '{c.key}')" if how == "rename_map" else ""
    if a_shape is None or c_shape is None or a_shape == c_shape:
        message = f"{key}: the {a_label(src)} reads {spec(a)}, the dataset gives {spec(c, key=True)}{via}"
        return ROWS(f"layout.key:{key}", key, "match", message, evidence=evidence, **fields)
    channels = a_shape[0] != c_shape[0]
    message = (
        f"{key}: the {a_label(src)} reads {spec(a)}, the dataset gives {spec(c, key=True)}{via}"
        + (
            ": another channel count, which no resize mends"
            if channels
            else ": another size (policies that resize their inputs accept it; one whose layers were "
            "built for the base's size does not)"
        )
        + rename_text(src)
    )
    severity = "hard" if channels else "soft"
    return ROWS(f"layout.key:{key}", key, "mismatch", message, severity=severity, evidence=evidence, **fields)
