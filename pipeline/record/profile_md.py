"""The record's "Dataset profile" section: what the data is, per dim, from the contract stage's
`profile.json` (never counted among the findings), and a link to its plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.record.records import StageResult

SHOWN = 60  # dims in the table (all of them are in profile.json)


def profile_section(stages: tuple[StageResult, ...], link: Any) -> list[str]:
    """`link(name, path)`: the record's line for an artifact (a shown plot)."""
    for result in stages:
        path = result.artifacts.get("profile")
        if not path:
            continue
        try:
            doc = json.loads(Path(path).read_text())
            rows = list(doc["rows"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return ["## Dataset profile", f"profile not readable ({type(exc).__name__}): {path}", ""]
        lines = [
            "## Dataset profile",
            f"What the data is ({doc.get('episodes')} episodes; not findings): kind, range, share of rows "
            "at its limits, longest hold, step size.",
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
    name = f"{r['dim']} ({r['name']})" if r.get("name") else str(r["dim"])
    levels = ", ".join(f"{v:.4g}" for v in r["levels"]) if r.get("levels") and r["kind"] == "discrete" else ""
    return (
        f"| `{r['feature']}` | {name} | {r['kind']} | {levels} | {r['min']:.4g} | {r['max']:.4g} | "
        f"{r['at_limits']:.0%} | {r['held_longest']} | {r['step_p50']:.3g} | {r['step_p99']:.3g} |"
    )
