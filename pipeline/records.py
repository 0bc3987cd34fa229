"""Moved: the record types and the row builder are `pipeline.record` (`from pipeline.record import Check,
Rows, StageResult, GateRecord`). This path keeps working for one release and warns where it went."""

from __future__ import annotations

import warnings

from pipeline.record.records import *  # noqa: F403

warnings.warn(
    "pipeline.records moved to pipeline.record (from pipeline.record import Check, Rows, StageResult)",
    DeprecationWarning,
    stacklevel=2,
)
