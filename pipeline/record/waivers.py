"""Waivers: a named mismatch the user has decided to accept, with who, why and until when.

`configs/waivers.yaml` holds a list under `waivers:`; each entry is validated at launch (so a typo
fails before anything is submitted) and applied by the gate, which lists every waiver it used.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.record.records import Check, StageResult
from pipeline.storage.files import load_yaml

REQUIRED = ("check", "justification", "who", "date")


def load_waivers(path: Path | None) -> list[dict[str, Any]]:
    """The waivers file's entries, validated. It is read with the readers' bounded safe loader: a
    FIFO, an oversized file, a YAML bomb or a document nested too deep is refused at once, naming it."""
    if path is None or not (Path(path).exists() or Path(path).is_symlink()):
        return []
    try:
        data = load_yaml(Path(path), "a waivers file") or {}
    except InputError as exc:
        raise InputError(str(exc), path=path, field="waivers") from exc
    entries = data.get("waivers", []) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise InputError(
            f"{path}: expected a mapping with a list under 'waivers'", path=path, field="waivers"
        )
    return [_validate(path, i, entry) for i, entry in enumerate(entries)]


def _validate(path: Path, index: int, entry: Any) -> dict[str, Any]:
    where = f"{path}: waivers[{index}]"
    if not isinstance(entry, dict):
        raise InputError(
            f"{where}: expected a mapping with {', '.join(REQUIRED)}", path=path, field="waivers"
        )
    missing = [key for key in REQUIRED if not str(entry.get(key) or "").strip()]
    if missing:
        raise InputError(
            f"{where}: missing {', '.join(missing)} (a waiver needs {', '.join(REQUIRED)})",
            path=path,
            field=f"waivers[{index}].{missing[0]}",
        )
    out = {key: str(entry[key]) for key in REQUIRED}
    for key in ("date", "expires"):
        if entry.get(key) is None:
            continue
        try:
            out[key] = dt.date.fromisoformat(str(entry[key])).isoformat()
        except ValueError as exc:
            raise InputError(
                f"{where}.{key}: {entry[key]!r} is not a date (expected YYYY-MM-DD)",
                path=path,
                field=f"waivers[{index}].{key}",
            ) from exc
    return out


def apply_waivers(
    results: list[StageResult], waivers: list[dict[str, Any]], today: dt.date
) -> tuple[list[StageResult], list[dict[str, Any]]]:
    """Turn each waived mismatch into `waived`; returns the new results and the waivers used/expired."""
    active = {
        w["check"]: w for w in waivers if not w.get("expires") or dt.date.fromisoformat(w["expires"]) >= today
    }
    used: dict[str, dict[str, Any]] = {}
    out = []
    for result in results:
        hits = {c.id for c in result.checks if c.verdict == "mismatch" and c.id in active}
        if not hits:
            out.append(result)
            continue
        used |= {cid: {**active[cid], "status": "applied"} for cid in hits}
        out.append(result.with_checks(_waived(c, active[c.id]) if c.id in hits else c for c in result.checks))
    expired = [{**w, "status": "expired"} for w in waivers if w["check"] not in active]
    unused = [{**w, "status": "unused"} for w in waivers if w["check"] in active and w["check"] not in used]
    return out, [*used.values(), *expired, *unused]


def _waived(check: Check, waiver: dict[str, Any]) -> Check:
    return dataclasses.replace(check, verdict="waived", evidence={**check.evidence, "waiver": waiver})
