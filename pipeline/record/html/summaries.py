"""Each record's index row kept beside the index (`index.rows.json`), so a gate updates the index per
record instead of reading every twin of the history again (at a thousand records that read was about
half of a launch's record-writing time).

A summary is keyed by its twin's file stamp (inode, size, mtime, ctime) and the digest `history.verify`
found for it: a twin written, edited or replaced since is summarized again, once; a twin that is gone
drops its summary; a summary whose verdict, gate, run or date is not its parsed record's is redone.
What a summary holds is only what the index shows (escaped like any other value when rendered); whether
the twin can be trusted is never cached: it comes from `history.verify` at each update (a chain gap
appears without its twin changing), and each row's link is chosen afresh. A summaries file that is
missing, unreadable or of another shape is simply rebuilt from the twins. `preflight-status --html`
rebuilds it whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipeline.record import history, integrity
from pipeline.record.html.entries import Entry
from pipeline.storage import atomic_write_text

SUMMARIES = "index.rows.json"
VERSION = 1
MAX_BYTES = 64 * 1024 * 1024  # a row is under a kilobyte: far more than any history's summaries


def stamp(path: Path) -> list[int] | None:
    """What changes whenever a twin is written again, edited or replaced; None: it cannot be looked at."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return [info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def summarize(entry: Entry, row_of: Any) -> dict[str, Any]:
    """The cached part of an entry's index row: its cells, order and lineage; or why it has none."""
    found = stamp(entry.path)
    if entry.data is None:
        return {
            "stamp": found,
            "digest": entry.twin.digest,
            "unreadable": str(entry.problem or "not a gate record"),
        }
    try:
        row = row_of(entry)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a shape no gate writes
        why = f"skipped: not a record the index can read ({type(exc).__name__}: {exc})"
        return {"stamp": found, "digest": entry.twin.digest, "unreadable": why}
    changed = entry.problem if entry.problem != entry.twin.problem else None
    return {
        "stamp": found,
        "digest": entry.twin.digest,
        "row": row,
        "order": list(entry.order()),
        "lineage": list(entry.lineage()),
        "changed": changed,  # the file changed between verify and this read
    }


def load(audit_dir: Path) -> dict[str, dict[str, Any]]:
    """The kept summaries by twin name; {} where there are none this version can use."""
    try:
        data = integrity.load_json(Path(audit_dir) / SUMMARIES, MAX_BYTES, inside=Path(audit_dir))
    except integrity.Unreadable:
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("rows"), dict):
        return {}
    return {str(k): v for k, v in data["rows"].items() if _usable(v)}


def _usable(summary: Any) -> bool:
    if not isinstance(summary, dict) or not isinstance(summary.get("stamp"), list):
        return False
    if "unreadable" in summary:
        return isinstance(summary["unreadable"], str)
    return (
        isinstance(summary.get("row"), dict)
        and _strings(summary.get("order"))
        and _strings(summary.get("lineage"))
        and (summary.get("changed") is None or isinstance(summary["changed"], str))
    )


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def current(
    twins: list[history.Twin], kept: dict[str, dict[str, Any]], row_of: Any
) -> tuple[dict[str, dict[str, Any]], dict[str, Entry]]:
    """A summary for every twin: the kept one where its stamp still matches, else a fresh one (the twin
    read once). Returns the summaries by twin name and the entries that were read."""
    summaries: dict[str, dict[str, Any]] = {}
    read: dict[str, Entry] = {}
    for twin in twins:
        name = twin.path.name
        old = kept.get(name)
        if old is not None and _still(twin, old):
            summaries[name] = old
            continue
        entry = Entry(twin)
        read[name] = entry
        summaries[name] = summarize(entry, row_of)
    return summaries, read


def _still(twin: history.Twin, old: dict[str, Any]) -> bool:
    """A kept summary still describes its twin: the same file (stamp), the same content as verified
    (digest), and, for a record the history parsed, the cells that decide how a row reads (verdict, gate,
    run, date) the record's own: a summaries file edited by hand cannot show a blocked record as clear."""
    if old["stamp"] is None or old["stamp"] != stamp(twin.path) or old.get("digest") != twin.digest:
        return False
    record, row = twin.record, old.get("row")
    if record is None or not isinstance(row, dict):
        return True
    said = (row.get("verdict"), row.get("gate"), row.get("run_id"), row.get("created"))
    return said == (str(record.verdict), str(record.gate), str(record.run_id), str(record.created))


def save(audit_dir: Path, summaries: dict[str, dict[str, Any]], mode: int | None = None) -> Path:
    """Written compact (json's C encoder: an indented dump of a thousand rows costs more than the rest of
    a gate's index update) and atomically, by a caller that holds the audit lock."""
    text = json.dumps({"version": VERSION, "rows": summaries}, separators=(",", ":"), allow_nan=False)
    return atomic_write_text(Path(audit_dir) / SUMMARIES, text + "\n", mode)
