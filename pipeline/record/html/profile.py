"""The dataset profile the contract stage may leave (`artifacts["profile"]`, a JSON of schema
`preflight.profile/1`, and `artifacts["profile_plot"]`, a PNG): a table of its rows and the plot.

The profile is a file of the run, read as the history reads its files (bounded, regular, not too deep);
one that cannot be read, or is not a profile, is one line on the page saying so, never a failed page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.record import integrity
from pipeline.record.html import values

SCHEMA = "preflight.profile/1"
MAX_BYTES = 16 * 2**20
MAX_ROWS = 2000  # rows shown; a profile of more says how many it left out
# the columns a profile row has, in this order; any other key a row carries follows, as first seen
KNOWN = (
    "feature",
    "dim",
    "name",
    "kind",
    "levels",
    "min",
    "max",
    "at_limits",
    "held_longest",
    "step_p50",
    "step_p99",
)


def profile_section(data: dict[str, Any], audit_dir: Path, files: dict[str, str]) -> dict[str, Any] | None:
    """None where the record has no profile; else its header, columns, rows, plot link or problem."""
    contract = next((s for s in data.get("stages") or () if s.get("stage") == "contract"), None)
    found = (contract or {}).get("artifacts") or {}
    if "profile" not in found and "profile_plot" not in found:
        return None
    section: dict[str, Any] = {
        "problem": "",
        "columns": [],
        "rows": [],
        "left_out": 0,
        "dataset": "",
        "episodes": "",
        "plot": "",
    }
    outside = []
    if "profile_plot" in found:
        section["plot"] = values.link(str(found["profile_plot"]), audit_dir, files)
        outside += [] if section["plot"] else ["plot"]
    if "profile" in found:
        path = values.local_file(str(found["profile"]), audit_dir, files)
        if path is None:
            outside.append("profile")
        else:
            section.update(_read(path, audit_dir))
    if outside:  # one line, whatever else the section says
        names = " and ".join(outside)
        note = f"the {names} named by the record resolve{'s' if len(outside) == 1 else ''} outside the "
        section["problem"] = "; ".join(filter(None, [section["problem"], note + "audit folder; not shown"]))
    return section


def _read(path: Path, audit_dir: Path) -> dict[str, Any]:
    """The profile at `path` (resolved, inside the audit folder), read as the history reads its files."""
    try:
        profile = integrity.load_json(path, MAX_BYTES, inside=Path(audit_dir))
    except integrity.Unreadable as exc:
        return {"problem": f"profile {path.name}: {exc}"}
    if not isinstance(profile, dict) or profile.get("schema") != SCHEMA:
        got = profile.get("schema") if isinstance(profile, dict) else type(profile).__name__
        return {"problem": f"profile {path.name}: schema is {got!r}, expected {SCHEMA!r}; not shown"}
    rows = [r for r in profile.get("rows") or () if isinstance(r, dict)]
    columns = list(
        dict.fromkeys([k for k in KNOWN if any(k in r for r in rows)] + [k for r in rows for k in r])
    )
    shown = rows[:MAX_ROWS]
    return {
        "dataset": values.text(profile.get("dataset"), None),
        "episodes": values.text(profile.get("episodes"), None),
        "columns": columns,
        "rows": [[_cell(r.get(c)) for c in columns] for r in shown],
        "left_out": len(rows) - len(shown),
    }


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else values.text(value, 120)
