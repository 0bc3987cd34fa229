"""What one record's page shows, as plain values for the template: the banner, the summary per stage,
the findings (worst first, each with its values per source, its fix and its folded evidence), every row
for the filtered table, the stages, the plots, the dataset profile, the sources and their fingerprints.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from pipeline.record.html import values
from pipeline.record.html.entries import Entry
from pipeline.record.html.profile import profile_section
from pipeline.record.html.remedy import corrected_view, remedy_view
from pipeline.record.markdown import DEFAULT_PHYSICAL_CHECKS, reason_check
from pipeline.record.records import VERDICTS
from pipeline.record.text import anchors

# findings order: what blocks first (error, hard mismatch), unverifiable, what the gate let through
RANK = {"error": 0, "mismatch": 1, "unverifiable": 2, "soft": 3, "waived": 4, "skipped": 5}
REASON = 240  # characters of a reason in the banner's list (its finding has the whole message)
PROFILE_ARTIFACTS = ("profile", "profile_plot")  # shown in the profile section, not with the plots


def rank(check: dict[str, Any]) -> int:
    verdict = check.get("verdict")
    if verdict == "mismatch" and check.get("severity") != "hard":
        return RANK["soft"]
    return RANK.get(str(verdict), len(RANK))


def checks_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for s in data.get("stages") or () for c in s.get("checks") or () if isinstance(c, dict)]


def page_context(entry: Entry, audit_dir: Path) -> dict[str, Any]:
    """Everything the page template needs of one record (`entry.data` must be set)."""
    data = entry.data or {}
    checks = checks_of(data)
    columns = values.source_columns(checks)
    findings = sorted((c for c in checks if c.get("verdict") != "match"), key=rank)
    slugs = anchors([str(c.get("id")) for c in findings])
    waivers = {str(w.get("check")): w for w in data.get("waivers") or () if isinstance(w, dict)}
    return {
        "stem": entry.stem,
        "head": head(entry),
        "problem": entry.problem,
        "reasons": reasons(data, checks, slugs),
        "summary": summary(data),
        "columns": columns,
        "findings": [finding(c, columns, slugs, waivers, data) for c in findings],
        "rows": [row(c, columns, slugs) for c in checks],
        "filters": {
            "verdicts": [v for v in VERDICTS if any(c.get("verdict") == v for c in checks)],
            "categories": sorted({str(c.get("category")) for c in checks}),
        },
        "stages": [stage_row(s) for s in data.get("stages") or ()],
        "plots": artifacts(data, audit_dir, entry.files),
        "profile": profile_section(data, audit_dir, entry.files),
        "sources": sources(data.get("sources") or {}),
        "fingerprints": fingerprints(data.get("fingerprints") or {}),
        "history": [str(line) for line in data.get("history") or ()],
        "physical": physical(data),
        "waivers": list(waivers.values()),
        "corrected": corrected_view(data),
    }


def head(entry: Entry) -> dict[str, str]:
    """The banner's values, each a string whatever the twin holds."""
    data = entry.data or {}
    return {
        "gate": values.text(data.get("gate")),
        "verdict": values.text(data.get("verdict")),
        "run_id": values.text(data.get("run_id")),
        "created": values.text(data.get("created")),
        "model": entry.source_name("model") or "—",
        "dataset": entry.source_name("dataset") or "—",
        "variant": str((data.get("sources") or {}).get("variant") or ""),
        "same": "training command" if entry.command() else "model and dataset",
    }


def reasons(
    data: dict[str, Any], checks: list[dict[str, Any]], slugs: dict[str, str]
) -> list[dict[str, str]]:
    """Each reason the gate blocked, with the anchor of the finding it names (where it names one)."""
    ids = [str(c.get("id")) for c in checks]
    out = []
    for reason in data.get("reasons") or ():
        found = reason_check(str(reason), ids)
        if found is not None and found in slugs:
            rest = values.text(str(reason)[len(found) :].removeprefix(": "), REASON)
            out.append({"check": found, "slug": slugs[found], "text": rest})
        else:
            out.append({"check": "", "slug": "", "text": values.text(str(reason), REASON)})
    return out


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per stage (in the order they ran): its status, and its rows counted per verdict and category."""
    out = []
    for result in data.get("stages") or ():
        counts = dict.fromkeys(VERDICTS, 0)
        categories: dict[str, int] = {}
        for check in result.get("checks") or ():
            counts[check.get("verdict")] = counts.get(check.get("verdict"), 0) + 1
            categories[str(check.get("category"))] = categories.get(str(check.get("category")), 0) + 1
        out.append(
            {
                "stage": str(result.get("stage")),
                "status": str(result.get("status")),
                "counts": counts,
                "categories": ", ".join(f"{k} {n}" for k, n in categories.items()),
            }
        )
    return out


def cells(check: dict[str, Any], columns: list[tuple[str, str]]) -> list[str]:
    return [values.text(check.get(key)) for key, _ in columns]


def finding(
    check: dict[str, Any],
    columns: list[tuple[str, str]],
    slugs: dict[str, str],
    waivers: dict[str, dict[str, Any]],
    data: dict[str, Any],
) -> dict[str, Any]:
    whole = {title: values.pretty(check.get(key), values.EVIDENCE) for key, title in columns}
    return {
        **row(check, columns, slugs),
        "message": str(check.get("message") or ""),
        "fix": fix_line(check, waivers.get(str(check.get("id"))), data),
        "remedy": remedy_view(check.get("remedy")),
        "whole": whole,
    }


def row(check: dict[str, Any], columns: list[tuple[str, str]], slugs: dict[str, str]) -> dict[str, Any]:
    evidence = check.get("evidence")
    return {
        "id": str(check.get("id")),
        "slug": slugs.get(str(check.get("id")), ""),
        "stage": str(check.get("stage")),
        "feature": values.text(check.get("feature")),
        "category": str(check.get("category")),
        "verdict": str(check.get("verdict")),
        "severity": str(check.get("severity")),
        "blocking": check.get("verdict") == "error"
        or (check.get("verdict") == "mismatch" and check.get("severity") == "hard"),
        "cells": cells(check, columns),
        "message": str(check.get("message") or ""),
        "evidence": values.pretty(evidence) if evidence else "",
    }


def fix_line(check: dict[str, Any], waiver: dict[str, Any] | None, data: dict[str, Any]) -> str:
    """What to do about one finding, as the markdown's "Next" says it."""
    cid, verdict = str(check.get("id")), check.get("verdict")
    if verdict == "error":
        return f"Fix {cid} and re-launch with the same run_id; an error is fixed, not waived."
    if verdict == "mismatch" and check.get("severity") == "hard":
        return f"Resolve {cid}, or waive it in configs/waivers.yaml with a justification, who and date."
    if verdict == "mismatch":
        return f"Soft: the gate let it through. Resolve {cid} or waive it with a justification."
    if verdict == "unverifiable":
        how = "block" if data.get("gate") == "blocked" else "warn"
        return f"Make {cid} verifiable (the gate treats it as {how}) or set gate.unverifiable=warn."
    if verdict == "waived" and waiver:
        who = ", ".join(str(waiver.get(k) or "?") for k in ("who", "date"))
        return f"Waived: {waiver.get('justification') or ''} ({who})."
    if verdict == "skipped":
        return "Skipped: the launch lacked the source this row needs; the message names the keys."
    return ""


def stage_row(result: dict[str, Any]) -> dict[str, Any]:
    prov = result.get("provenance") or {}
    timings = result.get("timings") or {}
    jobs = prov.get("jobs") or {}
    main = prov.get("slurm_job_id") or jobs.get("main")
    parts = [f"{part} {job}" for part, job in jobs.items() if part != "main"]
    return {
        "stage": str(result.get("stage")),
        "status": str(result.get("status")),
        "reused_from": str(prov.get("reused_from") or ""),
        "reused_created": str(prov.get("reused_created") or "")[:10],
        "reason": str(prov.get("reason") or "") if result.get("status") == "skipped" else "",
        "host": str(prov.get("host") or ""),
        "jobs": str(main or "—") + (f"; parts: {', '.join(parts)}" if parts else ""),
        "wall": values.number(timings.get("span_s") or timings.get("wall_s"))
        if timings.get("wall_s") is not None
        else "",
    }


def artifacts(data: dict[str, Any], audit_dir: Path, files: dict[str, str]) -> list[dict[str, str]]:
    """Each stage's plots (shown) and other files (linked), the profile's aside."""
    out = []
    for result in data.get("stages") or ():
        for name, path in (result.get("artifacts") or {}).items():
            if result.get("stage") == "contract" and name in PROFILE_ARTIFACTS:
                continue
            out.append(
                {
                    "stage": str(result.get("stage")),
                    "name": str(name),
                    "href": values.link(str(path), audit_dir, files),
                    "image": str(path).lower().endswith(".png"),
                    "copied": str(path) in files,
                }
            )
    return out


def sources(src: dict[str, Any]) -> list[dict[str, Any]]:
    """Every source the record names, each with its fields (a training command shell-quoted)."""
    out = []
    for name, value in src.items():
        if isinstance(value, dict):
            fields = [(str(k), _field(k, v)) for k, v in value.items() if v not in (None, "", [])]
        else:
            fields = [("", values.text(value, None))]
        out.append({"name": str(name), "fields": fields})
    return out


def _field(key: str, value: Any) -> str:
    if key == "command" and isinstance(value, list):
        return shlex.join(str(a) for a in value)
    return values.text(value, None)


def fingerprints(prints: dict[str, Any]) -> list[dict[str, str]]:
    """One row per input fingerprint, naming the stages that measured it."""
    by_input: dict[tuple[str, str], list[str]] = {}
    for stage, found in prints.items():
        for key, value in (found or {}).items():
            by_input.setdefault((str(key), str(value)), []).append(str(stage))
    return [{"input": k, "value": v, "stages": ", ".join(s)} for (k, v), s in sorted(by_input.items())]


def physical(data: dict[str, Any]) -> list[str]:
    items = [str(i) for s in data.get("stages") or () for i in s.get("physical_checks") or ()]
    return list(dict.fromkeys(items or DEFAULT_PHYSICAL_CHECKS))
