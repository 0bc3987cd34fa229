"""Writes that survive a crash, a concurrent writer, a full disk or a spent quota.

Every file the pipeline leaves behind goes through `atomic_write_*` (a reader sees the old file or the
new one, never half of either). Checkpoints go through `save_checkpoint`, which also falls back to
other locations when the primary is full or over quota, and records where each one went
(`latest_checkpoint`, `python -m pipeline.storage status|promote|prune`).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from pipeline.storage.atomic import (
    LockHeld,
    _fsync_dir,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    current_umask,
    exclusive_lock,
    file_lock,
)

# The checkpoint side (numpy, safetensors) is imported on first use: most importers only write files.
_LAZY = {
    **dict.fromkeys(("CheckpointSaveError", "Saved", "save_checkpoint"), "pipeline.storage.checkpoint"),
    **dict.fromkeys(
        ("Found", "apply_retention", "latest_checkpoint", "load_checkpoint", "promote", "status_rows"),
        "pipeline.storage.maintain",
    ),
}


def user_cache() -> Path:
    """What this user keeps between launches (demo builds, rendered frames, compiled page templates):
    `$PREFLIGHT_CACHE`, else ~/.cache/hpc-preflight."""
    return Path(os.environ.get("PREFLIGHT_CACHE") or Path.home() / ".cache" / "hpc-preflight")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CheckpointSaveError",
    "LockHeld",
    "Found",
    "Saved",
    "_fsync_dir",
    "apply_retention",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "current_umask",
    "exclusive_lock",
    "file_lock",
    "latest_checkpoint",
    "load_checkpoint",
    "promote",
    "save_checkpoint",
    "status_rows",
]
