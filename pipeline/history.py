"""What the audit history remembers: earlier clear gates' stage results, read from the JSON twins.

Two readers use it. The plan reuses a stage's result from an earlier clear record when every input
fingerprint of the stage (model, training config, dataset, software, the stage's own config) is the
same (`reuse=history`), so an unchanged stage is not run again under a new run id. The determinism
stage compares its smoke loss curve with the curves earlier clear runs of the same training config
stored in their records.

Only results that stood on their own qualify: from a record whose gate was `clear`, with no `error`,
no blocking row, no `unverifiable` row (that gate may have had `gate.unverifiable=warn`, this one may
not) and no `waived` row (a waiver is this repository's decision at that date; it is not carried to a
new run). A result that was itself reused names the run that produced it, so a chain of reuses points
at the origin and one curve is never counted twice.

Concurrent gates write the same folder: each twin is written atomically (temp file + rename), so a
reader sees a whole old file or a whole new one, and needs no lock. A twin that is still partial
(copied in by hand, a filesystem that lost a write) or corrupt is skipped with one logged line.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import RecordError
from pipeline.records import GateRecord, StageResult

log = logging.getLogger(__name__)
TWIN_GLOB = "*_audit.json"
MAX_TWIN_BYTES = 64 * 1024 * 1024  # a record is a few MiB at most; a bigger file is not one of ours
REUSED_FROM = "reused_from"


@dataclass(frozen=True)
class Earlier:
    """One earlier stage result and the run that produced it (the origin, through any reuse)."""

    run_id: str
    created: str
    result: StageResult


def read_twins(audit_dir: Path | str) -> Iterator[GateRecord]:
    """Every readable JSON twin in `audit_dir`, newest first; an unreadable one is logged and skipped.
    Each file is parsed once per version (name, mtime, size): a launch asks once per stage."""
    folder = Path(audit_dir)
    if not folder.is_dir():
        return iter(())
    records = []
    for path in sorted(folder.glob(TWIN_GLOB)):
        try:
            info = path.stat()
            found = _load(path, info.st_mtime_ns, info.st_size)
        except OSError as exc:
            found = f"{type(exc).__name__}: {exc}"
        if isinstance(found, str):
            log.warning("history: skipping %s: %s", path, found)
        else:
            records.append(found)
    return iter(sorted(records, key=lambda r: (r.created, r.run_id), reverse=True))


@functools.lru_cache(maxsize=4096)
def _load(path: Path, mtime_ns: int, size: int) -> GateRecord | str:
    """The record, or why it cannot be read (a string, so a bad file is also parsed only once)."""
    del mtime_ns  # part of the cache key only
    try:
        if size > MAX_TWIN_BYTES:
            raise RecordError(f"larger than {MAX_TWIN_BYTES} bytes")
        return GateRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecordError) as exc:
        return f"{type(exc).__name__}: {exc}"


def qualifies(result: StageResult) -> bool:
    """A result that another run may stand on (see the module docstring for why each rule)."""
    if result.status == "error" or not result.fingerprints:
        return False
    return not any(c.blocking or c.verdict in ("unverifiable", "waived", "error") for c in result.checks)


def origin(record: GateRecord, result: StageResult) -> str:
    """The run that produced `result`: itself, or the run it was reused from."""
    return str(result.provenance.get(REUSED_FROM) or record.run_id)


def clear_results(audit_dir: Path | str, stage: str, exclude_run: str | None = None) -> list[Earlier]:
    """Qualifying results of `stage` from clear records, newest first, one per origin run."""
    found: list[Earlier] = []
    seen: set[str] = set()
    for record in read_twins(audit_dir):
        if record.gate != "clear" or record.run_id == exclude_run:
            continue
        for result in record.stages:
            run = origin(record, result)
            if result.stage == stage and run not in seen and run != exclude_run and qualifies(result):
                seen.add(run)
                found.append(Earlier(run, record.created, result))
    return found


def reusable_result(
    audit_dir: Path | str, stage: str, fingerprints: Mapping[str, str], exclude_run: str | None = None
) -> Earlier | None:
    """The newest qualifying result of `stage` whose input fingerprints are exactly these."""
    if not fingerprints:
        return None
    wanted = dict(fingerprints)
    return next(
        (e for e in clear_results(audit_dir, stage, exclude_run) if e.result.fingerprints == wanted), None
    )


def same_inputs(
    audit_dir: Path | str,
    stage: str,
    fingerprints: Mapping[str, str],
    keys: tuple[str, ...],
    exclude_run: str | None = None,
) -> list[Earlier]:
    """Qualifying earlier results of `stage` whose fingerprints equal these on `keys` (e.g. training)."""
    if any(k not in fingerprints for k in keys):
        return []
    return [
        e
        for e in clear_results(audit_dir, stage, exclude_run)
        if all(e.result.fingerprints.get(k) == fingerprints[k] for k in keys)
    ]
