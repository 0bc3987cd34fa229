"""The markdown record: what a person reads before a training run starts (or instead of it).

Above the fold, in this order: title, sources, the verdict with one line per reason (each a link to its
row), a summary of the rows per stage and category, and the rows that are not `match`. Then the stages
(job ids, wall time including part jobs, reuse), the full reconciliation table and the evidence of
matching rows folded in `<details>`, the physical checks, and what to do next.

Every data-derived string goes through `md_text`/`code` (`pipeline.record.text`); the only HTML is the
renderer's own (`<a id>` anchors of `[a-z0-9-]`, `<details>` with fixed summaries).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pipeline.record.profile_md import profile_section
from pipeline.record.records import VERDICTS, Check, GateRecord, StageResult
from pipeline.record.remedy import corrected_markdown, remedy_markdown
from pipeline.record.text import anchor, anchors, cell, code, details, fenced, md_text

DEFAULT_PHYSICAL_CHECKS = (
    "Cameras are not swapped and arms are not swapped on the physical rig.",
    "Record-and-playback on the same hardware replays faithfully (decouples model from calibration).",
    "A small BC sanity run (about 10 demos of a simple task) trains a sane policy, or a working "
    "baseline model on the same data does.",
)
# the order findings are listed in: what blocks first, then what the gate let through (soft mismatch: 3)
_RANK = {"error": 0, "mismatch": 1, "unverifiable": 2, "waived": 4, "skipped": 5}
FULL_HEADER = (
    "| feature | category | expected (A) | configured (B) | actual (C) | deployed (D) | verdict | severity "
    "| check |",
    "|---|---|---|---|---|---|---|---|---|",
)
FINDINGS_HEADER = (
    "| check | verdict | severity | feature | expected (A) | configured (B) | actual (C) | deployed (D) "
    "| message |",
    "|---|---|---|---|---|---|---|---|---|",
)

# files: an artifact's path in the record -> (its copy relative to the audit folder, or "" for the
# original in the run folder; a note on why it was not copied, or "")
Files = Mapping[str, tuple[str, str]]


def render_markdown(
    record: GateRecord, audit_dir: Path, files: Files | None = None, inputs: str | None = None
) -> str:
    """The record as markdown. `files`: where `write_record` copied the artifacts (links to the run
    folder otherwise); `inputs`: the short input fingerprint shown next to the run id."""
    checks = [c for s in record.stages for c in s.checks]
    findings = sorted((c for c in checks if c.verdict != "match"), key=lambda c: _rank(c))
    slugs = anchors([c.id for c in findings])  # the rows reasons can name: a reason never names a match
    lines = [
        *_head(record, inputs),
        *_verdict(record, checks, slugs),
        "",
        "## Summary",
        *_summary(checks),
        "",
        f"## Findings: {len(findings)} row(s) not `match`",
        *_findings(findings, slugs),
        "",
        "## Stages",
        "| stage | status | host | job | wall s |",
        "|---|---|---|---|---|",
        *(_stage_row(s) for s in record.stages),
        *_reused(record.stages),
        *_history(record.history),
        "",
        *_health(checks),
        *profile_section(record.stages, lambda n, p: _artifact_line(n, p, Path(audit_dir), files or {})),
        "## Reconciliation",
        *details(f"All {len(checks)} rows, {len(checks) - len(findings)} of them match", _full_table(checks)),
        "",
        "## Evidence",
        *_evidence(record.stages, Path(audit_dir), files or {}),
        "",
        "## Physical checks to confirm with user (the pipeline cannot run these)",
        *(f"- {md_text(item)}" for item in _physical(record.stages)),
        "",
        *corrected_markdown(record.stages),
        "## Next",
        *(f"- {item}" for item in next_steps(record, checks)),
    ]
    if record.waivers:
        lines += ["", "## Waivers", *(_waiver_line(w) for w in record.waivers)]
    return "\n".join(lines) + "\n"


def _health(checks: list[Check]) -> list[str]:
    """The contract's dataset-health section: the rows that are not `match`, then the worst episodes."""
    rows = [c for c in checks if c.category == "health"]
    if not rows:
        return []
    summary = next((c for c in rows if c.id.endswith(".health.episodes")), None)
    lines = ["## Dataset health", md_text(summary.message) if summary else "", ""]
    flagged = [c for c in rows if c.verdict != "match"]
    if flagged:
        lines += ["| check | verdict | severity | what |", "|---|---|---|---|"]
        lines += [f"| {code(c.id)} | {c.verdict} | {c.severity} | {cell(c.message)} |" for c in flagged]
    worst = (summary.evidence.get("worst") if summary else None) or []
    if worst:
        lines += ["", "| episode | reasons | flagged frames |", "|---|---|---|"]
        lines += [
            f"| {w['episode']} | {cell(', '.join(w['reasons']))} | {w['flagged_frames']} |" for w in worst
        ]
    return [*lines, ""]


def _rank(check: Check) -> int:
    """error, hard mismatch, unverifiable, soft mismatch, waived."""
    if check.verdict == "mismatch" and not check.blocking:
        return 3
    return _RANK.get(check.verdict, 5)


def _head(record: GateRecord, inputs: str | None) -> list[str]:
    src = record.sources
    run = f"run {code(record.run_id)} · {md_text(record.created)}"
    if inputs:
        run += f" · inputs {code(inputs)}"
    return [
        f"# {md_text(src['model']['name'])} on {md_text(src['dataset']['name'])} — model–dataset audit",
        "",
        f"{run} · gate record schema v{md_text(record.schema_version)}",
        "",
        "## Sources",
        f"- base_contract: {code(src['model'].get('path'))}",
        f"- training_config: {code(src['training'].get('path'))}",
        *_command_line(src["training"]),
        f"- dataset: {code(src['dataset'].get('path'))} ({code(src['dataset']['name'])})",
        f"- container: {code(src['container'].get('kind'))}"
        + (f" {code(src['container']['image'])}" if src["container"].get("image") else ""),
        f"- known_good_reference: {code(src.get('known_good_reference') or 'n/a')}",
        *_deploy_lines(src.get("deploy") or []),
        "",
    ]


def _deploy_lines(deploy: list[dict[str, Any]]) -> list[str]:
    """D, where the trained policy will run, and where the launch named it (none: no line)."""
    lines = []
    for item in deploy:
        what = shlex.join(item["line"]) if item.get("line") else item.get("path")
        lines.append(f"- deployed (D): {code(what)} (from {code(item.get('from'))})")
    return lines


def _command_line(training: dict[str, Any]) -> list[str]:
    """The training command the gate stands in front of, as typed (shell-quoted for reading only)."""
    if not training.get("command"):
        return []
    by = training.get("composed_by") or "n/a"
    return [f"- training_command: {code(shlex.join(training['command']))} (training config composed by {by})"]


def reason_check(reason: str, ids: list[str]) -> str | None:
    """The check a gate reason (`<check id>: <message>`) names: the longest id it starts with."""
    found = [i for i in ids if reason.startswith(f"{i}: ") or reason == i]
    return max(found, key=len) if found else None


def _verdict(record: GateRecord, checks: list[Check], slugs: dict[str, str]) -> list[str]:
    lines = ["## Verdict", f"- overall: {code(record.verdict)}"]
    if record.gate == "clear":
        return [*lines, "- gate: **clear to train**"]
    lines.append(f"- gate: **blocked**, {len(record.reasons)} reason(s):")
    ids = [c.id for c in checks]
    for reason in record.reasons:
        found = reason_check(reason, ids)
        if found is None or found not in slugs:
            lines.append(f"  - {md_text(reason, 300)}")
        else:
            rest = reason[len(found) :].removeprefix(": ")
            lines.append(f"  - [{code(found)}](#{slugs[found]}): {md_text(rest, 160)}")
    return lines


def _summary(checks: list[Check]) -> list[str]:
    """Counts per stage (in the order the stages ran) and, per category of each stage, its rows and
    those not `match`; then the totals."""
    stages: dict[str, dict[str, int]] = {}
    categories: dict[str, dict[str, dict[str, int]]] = {}
    for check in checks:
        stages.setdefault(check.stage, dict.fromkeys(VERDICTS, 0))[check.verdict] += 1
        by_cat = categories.setdefault(check.stage, {}).setdefault(check.category, dict.fromkeys(VERDICTS, 0))
        by_cat[check.verdict] += 1
    # a `skipped` column only where a row was skipped (a launch that left a source out)
    shown = [v for v in VERDICTS if v != "skipped" or any(c.verdict == v for c in checks)]
    lines = [
        "| stage | " + " | ".join(shown) + " | rows per category |",
        "|---|" + "---:|" * len(shown) + "---|",
    ]
    for stage, counts in stages.items():
        numbers = " | ".join(_count(counts[v]) for v in shown)
        per_cat = "; ".join(_category(cat, n) for cat, n in categories[stage].items())
        lines.append(f"| {cell(stage)} | {numbers} | {cell(per_cat, 400)} |")
    total = {v: sum(c[v] for c in stages.values()) for v in shown}
    lines.append("| **all** | " + " | ".join(f"**{total[v]}**" for v in shown) + " | |")
    return lines


def _category(category: str, counts: dict[str, int]) -> str:
    """`layout 10 (1 mismatch)`: the category's rows, and how many are not `match`."""
    others = ", ".join(f"{n} {v}" for v, n in counts.items() if n and v != "match")
    return f"{category} {sum(counts.values())}" + (f" ({others})" if others else "")


def _count(n: int) -> str:
    return str(n) if n else "·"


def _findings(findings: list[Check], slugs: dict[str, str]) -> list[str]:
    if not findings:
        return ["Every row matches."]
    owned: set[str] = set()
    lines = list(FINDINGS_HEADER)
    for c in findings:
        values = (c.verdict, c.severity, c.feature, c.expected, c.configured, c.actual, c.deployed)
        cells = [_check_cell(c.id, slugs, owned), *(cell(v, 60) for v in values), cell(c.message, 100)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _check_cell(check_id: str, slugs: dict[str, str], owned: set[str]) -> str:
    """The check id as code; the first row of an id carries its anchor (the target reasons link to)."""
    if check_id in owned:
        return code(check_id, table=True)
    owned.add(check_id)
    return anchor(slugs[check_id]) + code(check_id, table=True)


def _full_table(checks: list[Check]) -> list[str]:
    """Every row; the anchors live in the findings table (a link cannot open a folded block)."""
    lines = list(FULL_HEADER)
    for c in checks:
        values = (c.feature, c.category, c.expected, c.configured, c.actual, c.deployed)
        lines.append(
            "| "
            + " | ".join(cell(v) for v in values)
            + f" | {cell(c.verdict)} | {cell(c.severity)} | {code(c.id, table=True)} |"
        )
    return lines


def _stage_row(result: StageResult) -> str:
    prov = result.provenance
    status = result.status
    if prov.get("reused_from"):
        status += f" · reused from run {prov['reused_from']}"
    if result.status == "skipped" and prov.get("reason"):
        status += f" · {prov['reason']}"
    cells = (result.stage, status, prov.get("host", ""))
    return (
        "| " + " | ".join(cell(c) for c in cells) + f" | {_jobs_cell(prov)} | {_wall_cell(result.timings)} |"
    )


def _reused(stages: tuple[StageResult, ...]) -> list[str]:
    """Per reused stage: the run and date that measured its rows, and how this launch proved that every
    input is the same (each fingerprint and what it compared)."""
    lines = []
    for result in stages:
        prov = result.provenance
        if not prov.get("reused_from"):
            continue
        lines += [
            "",
            f"`{md_text(result.stage)}` is reused: its rows were measured in run {code(prov['reused_from'])}"
            f" on {md_text(str(prov.get('reused_created') or '?')[:10])}, not in this run; these inputs were"
            " proven the same:",
            *(
                f"- {code(k)}: {md_text(_short_digest(v))}"
                for k, v in (prov.get("reused_compared") or {}).items()
            ),
        ]
    return lines


def _short_digest(text: str) -> str:
    """`how: sha256:<64 hex>` shown with the digest's first 12 digits (the JSON keeps it whole)."""
    how, sep, value = text.rpartition(": ")
    return f"{how}{sep}{value[:19]}…" if value.startswith("sha256:") and len(value) > 19 else text


def _history(lines: tuple[str, ...]) -> list[str]:
    """Audit-history entries this launch did not trust (never reused; the stages they held reran)."""
    if not lines:
        return []
    return ["", "History entries not trusted (never reused):", *(f"- {md_text(line)}" for line in lines)]


def _jobs_cell(prov: Mapping[str, Any]) -> str:
    """The stage job's id, then each part job's (`provenance.jobs`, added by the gate from jobs.json)."""
    jobs = prov.get("jobs") or {}
    main = prov.get("slurm_job_id") or jobs.get("main")
    parts = [f"{part} {job}" for part, job in jobs.items() if part != "main"]
    text = str(main or "—") + (f"; parts: {', '.join(parts)}" if parts else "")
    return cell(text, 400)


def _wall_cell(timings: Mapping[str, Any]) -> str:
    """The stage's wall time; with part jobs, from the first part's start to the stage's end."""
    wall = timings.get("wall_s")
    if timings.get("parts") and timings.get("span_s") is not None:
        return f"{_num(timings['span_s'])} (own {_num(wall)}, {int(timings['parts'])} part jobs)"
    return _num(wall) if wall is not None else ""


def _num(value: Any) -> str:
    """A number as the renderer formats it (no escaping needed); anything else escaped as data."""
    if not isinstance(value, (int, float)):
        return cell(value)
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"  # 1234 s, not 1.23e+03


def _evidence(stages: tuple[StageResult, ...], audit_dir: Path, files: Files) -> list[str]:
    """Messages and evidence of the rows that are not `match` in full; those of matching rows folded;
    then each stage's plots (shown) and files (linked)."""
    shown, folded, kept = [], [], []
    for result in stages:
        for check in result.checks:
            if check.message or check.evidence:
                (folded if check.verdict == "match" else shown).extend(_evidence_block(check))
        for name, path in result.artifacts.items():
            kept.append(_artifact_line(name, path, audit_dir, files))
    if folded:
        shown += details("Evidence of the rows that match", folded)
    return [*shown, *kept]


def _evidence_block(check: Check) -> list[str]:
    lines = [f"### {code(check.id)}", md_text(check.message or ""), *remedy_markdown(check), ""]
    if check.evidence:
        lines += [*fenced(json.dumps(check.evidence, indent=1, default=str)[:4000]), ""]
    return lines


def _artifact_line(name: str, path: str, audit_dir: Path, files: Files) -> str:
    link, note = files.get(str(path)) or ("", "")
    link = link or _relative(Path(path), audit_dir)
    shown = md_text(name, brackets=True)
    suffix = f" ({md_text(note)})" if note else ""
    if str(path).endswith(".png") and not note:
        return f"![{shown}]({quote(link)})"
    return f"- {shown}: [{shown}]({quote(link)}){suffix}"


def _relative(path: Path, start: Path) -> str:
    try:
        return os.path.relpath(path, start)
    except ValueError:
        return str(path)


def _physical(stages: tuple[StageResult, ...]) -> list[str]:
    items = [item for s in stages for item in s.physical_checks]
    return list(dict.fromkeys(items or DEFAULT_PHYSICAL_CHECKS))


def next_steps(record: GateRecord, checks: list[Check]) -> list[str]:
    """What to do: an error (a crash, an unreadable input) is fixed and re-launched; only a mismatch can
    be resolved or waived; an unverifiable row is made verifiable (or the gate told to warn)."""
    if record.gate == "clear":
        job = record.sources.get("gate_job_id")
        chain = code(f"sbatch --dependency=afterok:{job} train.sbatch") if job else "the training job"
        return [f"Clear to train: chain {chain} on the gate."]
    steps = [
        f"Fix {code(c.id)} ({cell(c.message, 200)}) and re-launch with the same run_id; an error is "
        "fixed, not waived."
        for c in checks
        if c.verdict == "error"
    ]
    steps += [
        f"Resolve {code(c.id)} ({cell(c.message, 200)}), or waive it in configs/waivers.yaml with a "
        "justification, who and date."
        for c in checks
        if c.verdict == "mismatch" and c.blocking
    ]
    steps += [
        f"Make {code(c.id)} verifiable or set `gate.unverifiable=warn`: {cell(c.message, 200)}"
        for c in checks
        if c.verdict == "unverifiable"
    ]
    return steps or ["Fix the reasons above and re-launch with the same run_id."]


def _waiver_line(waiver: dict[str, Any]) -> str:
    who = ", ".join(md_text(waiver.get(k)) for k in ("who", "date"))
    return (
        f"- {code(waiver.get('check'))} ({md_text(waiver.get('status'))}): "
        f"{md_text(waiver.get('justification'))} — {who}"
    )
