"""The index of the history: one row per record (newest first), each linking its page.

A twin of a shape no gate writes (`stages: [1]`) is one line under "Unreadable records", never a
failed index: the index is rebuilt by every gate, so one bad file must not stop the next gate.

Its size is bounded whatever the history holds: a row is a few short cells (a long training command is
cut), a page is linked and never inlined, and past `MAX_ROWS` records the oldest are counted, not
listed (timeline.md lists them all).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.record.html.entries import Entry

MAX_ROWS = 5000
COMMAND = 160  # characters of a training command shown in a row


def index_context(all_entries: list[Entry], audit_dir: Path, page_name: Any) -> dict[str, Any]:
    """The rows, newest first, and the values the filters offer (`page_name`: stem -> page file)."""
    readable = [e for e in all_entries if e.data is not None]
    readable.sort(key=lambda e: e.order(), reverse=True)
    unreadable = [
        {"name": e.path.name, "problem": str(e.problem or "not a gate record")}
        for e in all_entries
        if e.data is None
    ]
    rows = []
    for entry in readable[:MAX_ROWS]:
        try:
            rows.append(index_row(entry, audit_dir, page_name))
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a shape no gate writes
            why = f"skipped: not a record the index can read ({type(exc).__name__}: {exc})"
            unreadable.append({"name": entry.path.name, "problem": why})
    return {
        "rows": rows,
        "left_out": max(0, len(readable) - MAX_ROWS),
        "unreadable": unreadable,
        "filters": {
            "models": sorted({r["model"] for r in rows}),
            "datasets": sorted({r["dataset"] for r in rows}),
            "verdicts": sorted({r["verdict"] for r in rows}),
        },
        "untrusted": sum(1 for r in rows if r["problem"]),
    }


def index_row(entry: Entry, audit_dir: Path, page_name: Any) -> dict[str, Any]:
    data = entry.data or {}
    page = page_name(entry.stem)
    href = page if (Path(audit_dir) / page).exists() else entry.path.with_suffix(".md").name
    command = entry.command()
    reused = [
        f"{s.get('stage')} ← {(s.get('provenance') or {}).get('reused_from')}"
        for s in data.get("stages") or ()
        if (s.get("provenance") or {}).get("reused_from")
    ]
    return {
        "created": str(data.get("created") or ""),
        "run_id": str(data.get("run_id") or ""),
        "model": entry.source_name("model"),
        "dataset": entry.source_name("dataset"),
        "command": command if len(command) <= COMMAND else command[: COMMAND - 1] + "…",
        "variant": str((data.get("sources") or {}).get("variant") or ""),
        "verdict": str(data.get("verdict") or ""),
        "gate": str(data.get("gate") or ""),
        "reused": "; ".join(reused),
        "href": href,
        "problem": str(entry.problem or ""),
    }
