"""The audit history: one dated markdown record (and its JSON twin) per gate, and `timeline.md`.

Many gates may finish at once on a shared filesystem. Each writes its own record files atomically
(unique names: date, model, dataset, run id), then rebuilds `timeline.md` from the JSON twins under a
lock. The timeline is derived data: `python -m pipeline.audit rebuild-timeline [DIR]` repairs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.records import Check, GateRecord, StageResult
from pipeline.storage import atomic_write_json, atomic_write_text, file_lock

TIMELINE = "timeline.md"
LOCK = ".timeline.lock"
DEFAULT_PHYSICAL_CHECKS = (
    "Cameras are not swapped and arms are not swapped on the physical rig.",
    "Record-and-playback on the same hardware replays faithfully (decouples model from calibration).",
    "A small BC sanity run (about 10 demos of a simple task) trains a sane policy, or a working "
    "baseline model on the same data does.",
)
TIMELINE_HEADER = (
    "| created | run | model | dataset | verdict | gate | record |",
    "|---|---|---|---|---|---|---|",
)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "none"


def label(section: DictConfig | dict[str, Any]) -> str:
    """A file-name-safe name for a model or dataset: its `name`, else its path's last component."""
    name = section.get("name") or (Path(str(section.get("path"))).name if section.get("path") else "none")
    return safe_name(str(name))


def record_stem(record: GateRecord) -> str:
    names = (record.sources["model"]["name"], record.sources["dataset"]["name"], record.run_id)
    return "_".join([record.created[:10], *(safe_name(str(n)) for n in names), "audit"])


def write_record(audit_dir: Path, record: GateRecord) -> Path:
    audit_dir = Path(audit_dir)
    stem = record_stem(record)
    atomic_write_json(audit_dir / f"{stem}.json", record.to_dict())
    path = atomic_write_text(audit_dir / f"{stem}.md", render_markdown(record, audit_dir))
    rebuild_timeline(audit_dir)
    return path


def rebuild_timeline(audit_dir: Path) -> Path:
    """Regenerate the index from every JSON record on disk; the lock orders concurrent rebuilds."""
    audit_dir = Path(audit_dir)
    with file_lock(audit_dir / LOCK):
        rows, unreadable = [], []
        for path in sorted(audit_dir.glob("*_audit.json")):
            try:
                rows.append(_timeline_row(path, json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, KeyError, TypeError):
                unreadable.append(path.name)
        rows.sort()
        lines = [
            "# Audit timeline",
            "",
            "Chronological index of gate records (rebuilt by every gate).",
            "",
            *TIMELINE_HEADER,
            *(row[1] for row in rows),
        ]
        if unreadable:
            lines += ["", "Unreadable records (inspect by hand): " + ", ".join(unreadable)]
        return atomic_write_text(audit_dir / TIMELINE, "\n".join(lines) + "\n")


def _timeline_row(path: Path, data: dict[str, Any]) -> tuple[tuple[str, str], str]:
    src = data["sources"]
    cells = [
        _cell(v)
        for v in (
            data["created"],
            f"`{data['run_id']}`",
            src["model"]["name"],
            src["dataset"]["name"],
            data["verdict"],
            data["gate"],
        )
    ]
    cells.append(f"[{path.stem}]({path.with_suffix('.md').name})")
    return (data["created"], data["run_id"]), "| " + " | ".join(cells) + " |"


def parse_timeline(text: str) -> list[dict[str, str]]:
    """The rows of a timeline.md as dicts (used by tests and by tools that read the history)."""
    keys = [k.strip() for k in TIMELINE_HEADER[0].strip("|").split("|")]
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(TIMELINE_HEADER[0]):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if len(cells) != len(keys):
                raise ValueError(f"timeline row has {len(cells)} cells, expected {len(keys)}: {line}")
            rows.append(dict(zip(keys, cells, strict=True)))
    return rows


def _cell(value: Any, limit: int = 140) -> str:
    if value is None:
        return "—"
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_markdown(record: GateRecord, audit_dir: Path) -> str:
    src = record.sources
    gate = "clear to train" if record.gate == "clear" else "blocked — " + "; ".join(record.reasons)
    checks = [c for s in record.stages for c in s.checks]
    lines = [
        f"# {src['model']['name']} on {src['dataset']['name']} — model–dataset audit",
        "",
        f"run `{record.run_id}` · {record.created} · gate record schema v{record.schema_version}",
        "",
        "## Sources",
        f"- base_contract: `{src['model'].get('path')}`",
        f"- training_config: `{src['training'].get('path')}`",
        f"- dataset: `{src['dataset'].get('path')}` (`{src['dataset']['name']}`)",
        f"- container: `{src['container'].get('kind')}` `{src['container'].get('image')}`",
        f"- known_good_reference: `{src.get('known_good_reference') or 'n/a'}`",
        "",
        "## Verdict",
        f"- overall: `{record.verdict}`",
        f"- gate: `{_cell(gate, 2000)}`",
        "",
        "## Stages",
        "| stage | status | host | job | wall s |",
        "|---|---|---|---|---|",
        *(_stage_row(s) for s in record.stages),
        "",
        "## Reconciliation",
        "| feature | category | expected (A) | configured (B) | actual (C) | verdict | severity | check |",
        "|---|---|---|---|---|---|---|---|",
        *(_check_row(c) for c in checks),
        "",
        "## Evidence",
        *_evidence(record.stages, audit_dir),
        "",
        "## Physical checks to confirm with user (the pipeline cannot run these)",
        *(f"- {item}" for item in _physical(record.stages)),
        "",
        "## Next",
        *(f"- {item}" for item in _next_steps(record, checks)),
    ]
    if record.waivers:
        lines += [
            "",
            "## Waivers",
            *(
                f"- `{w['check']}` ({w['status']}): {w['justification']} — {w['who']}, {w['date']}"
                for w in record.waivers
            ),
        ]
    return "\n".join(lines) + "\n"


def _stage_row(result: StageResult) -> str:
    prov = result.provenance
    return (
        f"| {result.stage} | {result.status} | {prov.get('host', '')} | {prov.get('slurm_job_id') or ''} "
        f"| {result.timings.get('wall_s', '')} |"
    )


def _check_row(check: Check) -> str:
    values = (check.feature, check.category, check.expected, check.configured, check.actual)
    return (
        "| "
        + " | ".join(_cell(v) for v in values)
        + f" | {check.verdict} | {check.severity} | `{check.id}` |"
    )


def _evidence(stages: tuple[StageResult, ...], audit_dir: Path) -> list[str]:
    lines: list[str] = []
    for result in stages:
        for check in result.checks:
            if check.message or check.evidence:
                lines += [f"### `{check.id}`", check.message, ""]
                if check.evidence:
                    lines += ["```json", json.dumps(check.evidence, indent=1, default=str)[:4000], "```", ""]
        for name, path in result.artifacts.items():
            link = _relative(Path(path), audit_dir)
            lines.append(f"![{name}]({link})" if path.endswith(".png") else f"- {name}: [{link}]({link})")
    return lines


def _relative(path: Path, start: Path) -> str:
    try:
        return os.path.relpath(path, start)
    except ValueError:
        return str(path)


def _physical(stages: tuple[StageResult, ...]) -> list[str]:
    items = [item for s in stages for item in s.physical_checks]
    return list(dict.fromkeys(items or DEFAULT_PHYSICAL_CHECKS))


def _next_steps(record: GateRecord, checks: list[Check]) -> list[str]:
    if record.gate == "clear":
        job = record.sources.get("gate_job_id")
        chain = f"`sbatch --dependency=afterok:{job} train.sbatch`" if job else "the training job"
        return [f"Clear to train: chain {chain} on the gate."]
    steps = [
        f"Resolve `{c.id}` ({_cell(c.message, 200)}), or waive it in configs/waivers.yaml with a "
        "justification, who and date."
        for c in checks
        if c.blocking
    ]
    steps += [
        f"Make `{c.id}` verifiable or set `gate.unverifiable=warn`: {_cell(c.message, 200)}"
        for c in checks
        if c.verdict == "unverifiable"
    ]
    return steps or ["Fix the reasons above and re-launch with the same run_id."]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.audit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rebuild = sub.add_parser("rebuild-timeline", help="regenerate timeline.md from the JSON records")
    rebuild.add_argument("audit_dir", nargs="?", default="audit_logs")
    args = parser.parse_args(argv)
    path = rebuild_timeline(Path(args.audit_dir))
    rows = parse_timeline(path.read_text(encoding="utf-8"))
    print(f"{path}: {len(rows)} record(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
