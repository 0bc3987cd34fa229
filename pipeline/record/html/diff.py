"""What changed since the previous record of the same training command (or model + dataset): the rows
whose verdict changed, the inputs whose fingerprint changed, the stages rerun or reused, and one sentence
that says it ("blocked today, clear on 2026-12-01: dataset changed (sha256:…), 3 rows went from match to
mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pipeline.record.html.entries import Entry
from pipeline.record.html.page import checks_of

MAX_ROWS = 300  # changed rows listed; the rest counted
NOT_INPUTS = ("config", "container", "container_pins")  # fingerprints of the software, not the inputs


def inputs_of(data: dict[str, Any]) -> dict[str, str]:
    """Input fingerprints by name (the stages of one run agree on an input's digest)."""
    prints: dict[str, str] = {}
    for found in (data.get("fingerprints") or {}).values():
        prints.update({str(k): str(v) for k, v in (found or {}).items()})
    return prints


def diff(current: Entry, before: Entry, audit_dir: Path) -> dict[str, Any]:
    """The page's "what changed" section (both entries must have data); it links the earlier record's
    page, or its markdown where that record has no page yet (written before pages were)."""
    now, then = current.data or {}, before.data or {}
    old = {str(c.get("id")): c for c in checks_of(then)}
    new = {str(c.get("id")): c for c in checks_of(now)}
    changed = [
        {
            "id": k,
            "feature": str(c.get("feature")),
            "before": str(old[k].get("verdict")),
            "now": str(c.get("verdict")),
        }
        for k, c in new.items()
        if k in old and old[k].get("verdict") != c.get("verdict")
    ]
    prints_now, prints_then = inputs_of(now), inputs_of(then)
    page = f"{before.stem}.html"
    inputs = [
        {"input": k, "before": prints_then.get(k, "—"), "now": prints_now.get(k, "—")}
        for k in sorted(set(prints_now) | set(prints_then))
        if prints_now.get(k) != prints_then.get(k)
    ]
    return {
        "href": quote(page if (Path(audit_dir) / page).exists() else f"{before.stem}.md"),
        "run_id": str(then.get("run_id")),
        "created": str(then.get("created")),
        "gate": str(then.get("gate")),
        "headline": headline(now, then, inputs, changed),
        "rows": changed[:MAX_ROWS],
        "rows_left_out": max(0, len(changed) - MAX_ROWS),
        "added": sorted(set(new) - set(old))[:MAX_ROWS],
        "gone": sorted(set(old) - set(new))[:MAX_ROWS],
        "inputs": inputs,
        "stages": stages(now, then),
    }


def headline(
    now: dict[str, Any], then: dict[str, Any], inputs: list[dict[str, str]], changed: list[dict[str, str]]
) -> str:
    """One sentence: the gate now and then, which inputs changed, which verdicts moved."""
    when = str(then.get("created") or "")[:10]
    head = f"{now.get('gate')} now, {then.get('gate')} on {when} (run {then.get('run_id')})"
    real = [i for i in inputs if i["input"] not in NOT_INPUTS]
    if 0 < len(real) <= 2:
        what = "; ".join(f"{i['input']} changed ({_short(i['before'])} → {_short(i['now'])})" for i in real)
    elif real:  # the sources first (model, dataset, ...), then the nested inputs (a stage's models)
        names = sorted((i["input"] for i in real), key=lambda n: ("." in n or "[" in n, n))
        more = f", and {len(names) - 5} more" if len(names) > 5 else ""
        what = f"{len(names)} inputs changed ({', '.join(names[:5])}{more})"
    elif inputs:
        what = "the same inputs, other software (" + ", ".join(i["input"] for i in inputs) + ")"
    else:
        what = "the same inputs"
    if changed:
        counts = Counter((c["before"], c["now"]) for c in changed)
        moved = ", ".join(f"{n} row(s) went from {a} to {b}" for (a, b), n in counts.most_common())
    else:
        moved = "no row changed its verdict"
    return f"{head}: {what}, and {moved}."


def _short(value: str) -> str:
    return value[:19] + "…" if value.startswith("sha256:") and len(value) > 19 else value


def stages(now: dict[str, Any], then: dict[str, Any]) -> list[dict[str, str]]:
    """Each stage of this record: rerun or reused (and from which run), its status then and now."""
    before = {str(s.get("stage")): str(s.get("status")) for s in then.get("stages") or ()}
    out = []
    for result in now.get("stages") or ():
        prov = result.get("provenance") or {}
        how = f"reused from run {prov['reused_from']}" if prov.get("reused_from") else "rerun"
        if result.get("status") == "skipped":
            how = "skipped"
        name = str(result.get("stage"))
        out.append(
            {"stage": name, "how": how, "before": before.get(name, "—"), "now": str(result.get("status"))}
        )
    return out
