"""The record's "Dataset profile" section: what the data is, per dim, from the contract stage's
`profile.json` (never counted among the findings), and a link to its plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.record.records import StageResult
from pipeline.record.text import cell, code
from pipeline.storage.files import read_text

SHOWN = 60  # dims in the table (all of them are in profile.json)
FORMATS = (("min", ".4g"), ("max", ".4g"), ("at_limits", ".0%"), ("held_longest", "d"), ("step_p50", ".3g"),
           ("step_p99", ".3g"))  # fmt: skip


def profile_section(stages: tuple[StageResult, ...], link: Any) -> list[str]:
    """`link(name, path)`: the record's line for an artifact (a shown plot)."""
    for result in stages:
        path = result.artifacts.get("profile")
        if not path:
            continue
        try:
            doc = json.loads(read_text(Path(path), "the contract stage's profile.json"))
            rows = [r for r in doc["rows"] if isinstance(r, dict)]
        except (InputError, ValueError, KeyError, TypeError) as exc:
            return ["## Dataset profile", f"profile not readable ({type(exc).__name__}): {code(path)}", ""]
        lines = [
            "## Dataset profile",
            f"What the data is ({cell(doc.get('episodes'))} episodes; not findings): kind, range, share of "
            "rows at its limits, longest hold, step size.",
            "",
            "| feature | dim | kind | levels | min | max | at limits | held longest | step p50 | step p99 |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [_row(r) for r in rows[:SHOWN]]
        if len(rows) > SHOWN:
            lines.append(f"\n{len(rows) - SHOWN} more dims in profile.json")
        plot = result.artifacts.get("profile_plot")
        return [*lines, "", *([link("profile_plot", plot)] if plot else []), ""]
    return []


def _row(r: dict[str, Any]) -> str:
    """One dim's line; every value is data (a feature name can hold anything) and is escaped, and a key
    the profile lacks shows as a dash rather than failing the record."""
    name = f"{r.get('dim')} ({r['name']})" if r.get("name") else r.get("dim")
    levels = r.get("levels") if r.get("kind") == "discrete" and isinstance(r.get("levels"), list) else None
    cells = [
        code(r.get("feature"), table=True),
        cell(name),
        cell(r.get("kind")),
        ", ".join(_num(v, ".4g") for v in levels) if levels else "",  # numbers we format: nothing to escape
        *(_num(r.get(key), spec) for key, spec in FORMATS),
    ]
    return "| " + " | ".join(cells) + " |"


def _num(value: Any, spec: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—"
    return format(value, spec)
