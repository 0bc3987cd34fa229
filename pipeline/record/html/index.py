"""The index of the history: one row per record (newest first), each linking its page.

A twin of a shape no gate writes (`stages: [1]`) is one line under "Unreadable records", never a
failed index: the index is updated by every gate, so one bad file must not stop the next gate.

The rows come from each record's summary (`summaries.py`): a gate reads only the twins that are new or
changed since the last update, `preflight-status --html` summarizes every twin again. Whether a row's
record can be trusted, and which file its row links, are decided at each update, never cached.

Its size is bounded whatever the history holds: a row is a few short cells (a long training command is
cut), a page is linked and never inlined, and past `MAX_ROWS` records the oldest are counted, not
listed (timeline.md lists them all).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.record import history
from pipeline.record.html.entries import Entry

MAX_ROWS = 5000
COMMAND = 160  # characters of a training command shown in a row


def summary_context(
    twins: list[history.Twin], found: dict[str, dict[str, Any]], audit_dir: Path, page_name: Any
) -> dict[str, Any]:
    """The rows, newest first, and the values the filters offer, from each twin's summary."""
    readable = [(t, found[t.path.name]) for t in twins if "row" in found[t.path.name]]
    readable.sort(key=lambda pair: tuple(pair[1]["order"]), reverse=True)
    unreadable = [
        {"name": t.path.name, "problem": str(found[t.path.name]["unreadable"])}
        for t in twins
        if "unreadable" in found[t.path.name]
    ]
    rows = [_shown(twin, summary, audit_dir, page_name) for twin, summary in readable[:MAX_ROWS]]
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


def _shown(twin: history.Twin, summary: dict[str, Any], audit_dir: Path, page_name: Any) -> dict[str, Any]:
    """A kept row with what is decided now: its link (the page where it exists, else the markdown) and
    why its record cannot be trusted (from this update's verify)."""
    page = page_name(twin.path.stem)
    href = page if (Path(audit_dir) / page).exists() else twin.path.with_suffix(".md").name
    cells = {str(k): str(v) for k, v in summary["row"].items()}
    return {**cells, "href": href, "problem": str(twin.problem or summary.get("changed") or "")}


def row_cells(entry: Entry) -> dict[str, str]:
    """What an index row shows of a record, without its link and trust (decided at each update)."""
    data = entry.data or {}
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
    }
