"""A record's remedies and corrected training line as plain values for the page template (Jinja2
autoescapes every one of them: a flag value is data, and shows as itself)."""

from __future__ import annotations

import shlex
from typing import Any

from pipeline.record.remedy import CORRECTED, remedy_text


def remedy_view(remedy: Any) -> dict[str, str] | None:
    """The remedy under a finding: its kind and its one line (flags, data change, or what decides it)."""
    if not isinstance(remedy, dict) or not remedy.get("kind"):
        return None
    return {"kind": str(remedy.get("kind")), "text": remedy_text(remedy)}


def corrected_view(data: dict[str, Any]) -> dict[str, Any] | None:
    """The corrected line (to copy, never run), its verdict and the rows that remain with their remedy."""
    row = next(
        (c for s in data.get("stages") or () for c in s.get("checks") or () if c.get("id") == CORRECTED),
        None,
    )
    if not isinstance(row, dict):
        return None
    evidence = row.get("evidence") or {}
    argv, typed = evidence.get("argv"), evidence.get("typed")
    changed = isinstance(argv, list) and argv != typed
    return {
        "verdict": str(row.get("message") or "") if not changed else _verdict(evidence),
        "line": shlex.join(str(a) for a in argv) if changed else "",
        "remaining": [
            {"id": str(r.get("id")), "remedy": remedy_text(r.get("remedy"))}
            for r in evidence.get("remaining") or ()
            if isinstance(r, dict)
        ],
    }


def _verdict(evidence: dict[str, Any]) -> str:
    cleared, remaining = evidence.get("cleared") or [], evidence.get("remaining") or []
    if not remaining:
        return f"with this line: clear ({len(cleared)} row(s) cleared)"
    return f"with this line: {len(cleared)} row(s) cleared, {len(remaining)} remain (each remedy below)"
