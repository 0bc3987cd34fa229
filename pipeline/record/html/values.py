"""How a record's values read on a page: short text for a table cell, whole JSON for the evidence, links
to the files the record copied beside itself. Escaping is not done here: the templates autoescape every
value, so these functions only shape text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

CELL = 300  # characters of a value shown in a table cell (the folded evidence has it whole)
EVIDENCE = 20_000  # characters of one row's evidence on the page (the JSON twin keeps it all)
# the columns of the reconciliation, in the order the sources are named; D only where a row has one
SOURCE_COLUMNS = (
    ("expected", "expected (A)"),
    ("configured", "configured (B)"),
    ("actual", "actual (C)"),
    ("deployed", "deployed (D)"),
)


def text(value: Any, limit: int | None = CELL) -> str:
    """A value as one piece of text: a string as itself, None as an em dash, the rest as JSON."""
    if value is None:
        return "—"
    shown = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if limit is not None and len(shown) > limit:
        return shown[: limit - 1] + "…"
    return shown


def pretty(value: Any, limit: int = EVIDENCE) -> str:
    """Evidence as indented JSON, cut at `limit` characters with a note where the rest is."""
    shown = json.dumps(value, indent=1, default=str, ensure_ascii=False)
    if len(shown) > limit:
        return shown[:limit] + f"\n… cut at {limit} characters; the JSON twin holds the rest"
    return shown


def source_columns(checks: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """A, B, C always; any further source (D) where at least one row carries a value for it."""
    return [
        (key, title)
        for key, title in SOURCE_COLUMNS
        if key in ("expected", "configured", "actual") or any(c.get(key) is not None for c in checks)
    ]


def inside(path: str | Path, audit_dir: Path) -> Path | None:
    """`path` (relative to the audit folder, or absolute) resolved, every link followed, where it stays
    inside the audit folder; else None. Resolved, never compared as text: `a/../../x`, a link that
    leaves the folder and `//host/x` all end outside it."""
    root = Path(audit_dir).resolve()
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError, ValueError):  # a link loop, a NUL byte
        return None
    return target if target != root and target.is_relative_to(root) else None


def link(path: str, audit_dir: Path, files: dict[str, str]) -> str:
    """A relative URL to an artifact: its copy beside the record (what the twin lists), else the file
    itself; "" where that resolves outside the audit folder (the page says it is not linked). Built from
    the resolved path below the audit folder and percent-quoted, so it holds no `..`, no leading `/` and
    nothing that reads as a scheme (`javascript:` becomes `javascript%3A`) or a query."""
    target = inside(files.get(str(path)) or str(path), audit_dir)
    if target is None:
        return ""
    return quote(target.relative_to(Path(audit_dir).resolve()).as_posix())


def local_file(path: str, audit_dir: Path, files: dict[str, str]) -> Path | None:
    """The artifact's copy beside the record where there is one, else the file itself; None where that
    resolves outside the audit folder (never read)."""
    return inside(files.get(str(path)) or str(path), audit_dir)


def number(value: Any) -> str:
    """Seconds and counts as the markdown formats them."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return text(value)
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
