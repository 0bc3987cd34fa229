"""How a row's remedy and the corrected training line read wherever people look (console, markdown,
JUnit, the HTML page, preflight-status): one wording, from the record alone.

The contract stage writes them (`pipeline.stages.contract.remedies`, `corrected`); everything here reads
a record's rows, so a record written elsewhere, or before remedies existed, reads the same (no remedy,
no corrected line)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.record.records import Check, RecordError
from pipeline.record.text import code, fenced, md_text

CORRECTED = "contract.training.corrected"  # the row holding the corrected line and its verdict


def corrected_row(stages: Iterable[Any]) -> Check | None:
    for stage in stages:
        for check in getattr(stage, "checks", ()):
            if check.id == CORRECTED:
                return check
    return None


def corrected_argv(stages: Iterable[Any]) -> list[str] | None:
    """The corrected argv where the remedies changed the typed line, else None."""
    row = corrected_row(stages)
    if row is None or row.evidence.get("argv") == row.evidence.get("typed"):
        return None
    argv = row.evidence.get("argv")
    return [str(item) for item in argv] if isinstance(argv, list) else None


def verdict_line(row: Check) -> str:
    """`with this line: clear`, or how many rows remain (the row's message names them and why)."""
    remaining = row.evidence.get("remaining") or []
    cleared = row.evidence.get("cleared") or []
    if not remaining:
        return f"with this line: clear ({len(cleared)} row(s) cleared)"
    return f"with this line: {len(cleared)} row(s) cleared, {len(remaining)} remain (data remedies below)"


def corrected_lines(stages: Iterable[Any]) -> list[str]:
    """The console's last lines: the corrected line, quoted to paste (never run), and its verdict."""
    stages = list(stages)
    row, argv = corrected_row(stages), corrected_argv(stages)
    if row is None or argv is None:
        return []
    lines = [f"corrected line (not run; the contract judged it: {verdict_line(row)}):", shlex.join(argv)]
    for left in row.evidence.get("remaining") or []:
        lines.append(f"  remains: {left.get('id')}: {remedy_text(left.get('remedy'))}")
    return lines


def corrected_lines_of(folder: Any) -> list[str]:
    """`corrected_lines` of a run folder's gate record (none where it has no readable record)."""
    try:
        record = folder.load_gate()
    except RecordError:
        return []
    return corrected_lines(record.stages) if record is not None else []


def remedy_text(remedy: Mapping[str, Any] | None) -> str:
    """One line for a remedy: the flags to set or drop, the data change (and lerobot's command), or
    what would decide it."""
    if not remedy:
        return "no remedy read from its evidence"
    kind = remedy.get("kind")
    if kind == "line":
        flags = [f"--{k}={v}" for k, v in (remedy.get("set") or {}).items()]
        flags += [f"drop --{k}" for k in remedy.get("drop") or []]
        text = "on the line: " + "; ".join(shlex.quote(f) if not f.startswith("drop") else f for f in flags)
    elif kind == "data":
        text = "on the data: " + str(remedy.get("summary"))
    else:
        return "undecided: " + str(remedy.get("decide") or remedy.get("summary"))
    command = remedy.get("command")
    if command:
        text += f" (lerobot: {shlex.join(str(c) for c in command)})"
    return text


def remedy_markdown(check: Check) -> list[str]:
    """The remedy under a row's evidence in the markdown record (escaped: flags are data)."""
    if not check.remedy:
        return []
    return ["", f"**Remedy** ({md_text(check.remedy.get('kind'))}): {md_text(remedy_text(check.remedy))}"]


def corrected_markdown(stages: Iterable[Any]) -> list[str]:
    """The record's section for the corrected line: its verdict, the line to paste, what remains."""
    stages = list(stages)
    row = corrected_row(stages)
    if row is None:
        return []
    argv = corrected_argv(stages)
    lines = ["## Corrected training line", md_text(verdict_line(row) if argv else row.message), ""]
    if argv:
        lines += [*fenced(shlex.join(argv), "bash"), ""]
    for left in row.evidence.get("remaining") or []:
        lines.append(f"- {code(left.get('id'))}: {md_text(remedy_text(left.get('remedy')))}")
    return [*lines, ""]
