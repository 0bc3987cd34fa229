"""The audit history: one dated markdown record (and its JSON twin) per gate, and `timeline.md`.

Many gates may finish at once on a shared filesystem. Each writes its own record files atomically
(unique names: date, model, dataset, run id), then rebuilds `timeline.md` from the JSON twins under a
lock. The timeline is derived data: `python -m pipeline.audit rebuild-timeline [DIR]` repairs it.

The record is evidence: every string that comes from data, a config or a stage (feature names,
messages, paths, hosts, waivers) is escaped (`text`, `code`) so that it can neither start a line nor
open a section, a table cell, a link or HTML; a hostile key shows as itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from omegaconf import DictConfig

from pipeline.errors import RecordError
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


_BREAKS = re.compile(r"\r\n|[\n\r\v\f\x85\u2028\u2029]")
_SPECIAL = re.compile(r"([\\`*_<>#|~&]|!(?=\[)|\](?=[(\[:]))")
_BRACKETS = re.compile(r"([\\`*_<>#|~&\[\]]|!(?=\[))")
_LEADING = re.compile(r"^(\s*)(\d+)([.)])|^(\s*)([-+=])")


class AuditWriteError(RecordError):
    """One of the record's writes failed; `written` lists the files that did get written."""

    def __init__(self, message: str, *, path: Path, written: list[Path]):
        super().__init__(message, path=path)
        self.written = written


def flat(value: Any) -> str:
    """One line of printable text: a line break shows as `\\n`, a control character as `\\xNN`."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = _BREAKS.sub("\\\\n", text)
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)


def md_text(value: Any, limit: int | None = None, brackets: bool = False) -> str:
    """Data as inline markdown that renders as itself: no heading, list, quote, HTML, link or cell.
    `brackets`: escape every `[`/`]` too (text inside a link or image's own brackets)."""
    plain = flat(value)
    if limit is not None and len(plain) > limit:
        plain = plain[: limit - 1] + "…"
    out = (_BRACKETS if brackets else _SPECIAL).sub(r"\\\1", plain)
    return _LEADING.sub(lambda m: f"{m[1] or ''}{m[2] or ''}\\{m[3]}" if m[2] else f"{m[4]}\\{m[5]}", out)


def code(value: Any, table: bool = False) -> str:
    """Data as a code span whose fence is longer than any backtick run inside it (CommonMark)."""
    plain = flat(value)
    fence = "`" * (max((len(r) for r in re.findall(r"`+", plain)), default=0) + 1)
    pad = " " if plain.startswith("`") or plain.endswith("`") else ""
    span = f"{fence}{pad}{plain}{pad}{fence}"
    return span.replace("|", "\\|") if table else span


def unescape(cell: str) -> str:
    """A timeline cell as it was before `md_text` escaped it (the reverse of the backslash escapes)."""
    return re.sub(r"\\(.)", r"\1", cell)


def audit_mode(value: object) -> int | None:
    """`audit_mode` (`0660`, `"0o664"`, `664`) as permission bits; None: as the umask allows."""
    if value is None or value == "":
        return None
    digits = str(value).lower().removeprefix("0o")
    if not digits.isdigit() or any(d in "89" for d in digits) or int(digits, 8) > 0o777:
        raise ValueError(f"expected octal permission bits such as 0664, got {value!r}")
    return int(digits, 8)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "none"


def label(section: DictConfig | dict[str, Any]) -> str:
    """A file-name-safe name for a model or dataset: its `name`, else its path's last component."""
    name = section.get("name") or (Path(str(section.get("path"))).name if section.get("path") else "none")
    return safe_name(str(name))


def record_stem(record: GateRecord) -> str:
    """The record's file name: date, model, dataset, run id, each cut to 60 characters (a file name
    stays under the 255 bytes filesystems allow, whatever a model is called)."""
    names = (record.sources["model"]["name"], record.sources["dataset"]["name"], record.run_id)
    return "_".join([safe_name(record.created[:10]), *(safe_name(str(n))[:60] for n in names), "audit"])


def write_record(audit_dir: Path, record: GateRecord, mode: int | None = None) -> Path:
    """The JSON twin, the markdown record and the timeline row, each durably written (or an
    `AuditWriteError` naming the write that failed and the files already written). Returns the
    markdown's path. `mode`: the files' permission bits (default: as the umask allows)."""
    audit_dir = Path(audit_dir)
    stem = record_stem(record)
    written: list[Path] = []
    steps = (
        (audit_dir / f"{stem}.json", lambda p: atomic_write_json(p, record.to_dict(), mode)),
        (audit_dir / f"{stem}.md", lambda p: atomic_write_text(p, render_markdown(record, audit_dir), mode)),
        (audit_dir / TIMELINE, lambda p: _timeline_with(audit_dir, stem, mode)),
    )
    for path, write in steps:
        try:
            write(path)
        except (OSError, RecordError) as exc:
            done = ", ".join(map(str, written)) or "none"
            raise AuditWriteError(
                f"audit record: writing {path} failed: {getattr(exc, 'strerror', None) or exc}; "
                f"written: {done}",
                path=path,
                written=written,
            ) from exc
        written.append(path)
    return written[1]


def _timeline_with(audit_dir: Path, stem: str, mode: int | None) -> Path:
    """Rebuild the timeline and check that this record's row is in it (its twin was readable)."""
    path = rebuild_timeline(audit_dir, mode)
    if f"]({quote(stem + '.md')})" not in path.read_text(encoding="utf-8"):
        raise RecordError(f"{path}: no row for {stem} after the rebuild", path=path)
    return path


def rebuild_timeline(audit_dir: Path, mode: int | None = None) -> Path:
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
        return atomic_write_text(audit_dir / TIMELINE, "\n".join(lines) + "\n", mode)


def _timeline_row(path: Path, data: dict[str, Any]) -> tuple[tuple[str, str], str]:
    src = data["sources"]
    cells = [_cell(data["created"]), code(data["run_id"], table=True)]
    cells += [_cell(v) for v in (src["model"]["name"], src["dataset"]["name"], data["verdict"], data["gate"])]
    cells.append(f"[{md_text(path.stem)}]({quote(path.with_suffix('.md').name)})")
    return (data["created"], data["run_id"]), "| " + " | ".join(cells) + " |"


def parse_timeline(text: str) -> list[dict[str, str]]:
    """The rows of a timeline.md as dicts (used by tests and by tools that read the history)."""
    keys = [k.strip() for k in TIMELINE_HEADER[0].strip("|").split("|")]
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(TIMELINE_HEADER[0]):
            cells = [unescape(c.strip()) for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if len(cells) != len(keys):
                raise ValueError(f"timeline row has {len(cells)} cells, expected {len(keys)}: {line}")
            rows.append(dict(zip(keys, cells, strict=True)))
    return rows


def _cell(value: Any, limit: int = 140) -> str:
    """A table cell: escaped one-line text, cut at `limit` characters."""
    return "—" if value is None else md_text(value, limit)


def render_markdown(record: GateRecord, audit_dir: Path) -> str:
    src = record.sources
    gate = "clear to train" if record.gate == "clear" else "blocked — " + "; ".join(record.reasons)
    checks = [c for s in record.stages for c in s.checks]
    lines = [
        f"# {md_text(src['model']['name'])} on {md_text(src['dataset']['name'])} — model–dataset audit",
        "",
        f"run {code(record.run_id)} · {md_text(record.created)} · gate record schema "
        f"v{md_text(record.schema_version)}",
        "",
        "## Sources",
        f"- base_contract: {code(src['model'].get('path'))}",
        f"- training_config: {code(src['training'].get('path'))}",
        f"- dataset: {code(src['dataset'].get('path'))} ({code(src['dataset']['name'])})",
        f"- container: {code(src['container'].get('kind'))} {code(src['container'].get('image'))}",
        f"- known_good_reference: {code(src.get('known_good_reference') or 'n/a')}",
        "",
        "## Verdict",
        f"- overall: {code(record.verdict)}",
        f"- gate: {code(gate[:2000])}",
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
        *(f"- {md_text(item)}" for item in _physical(record.stages)),
        "",
        "## Next",
        *(f"- {item}" for item in _next_steps(record, checks)),
    ]
    if record.waivers:
        lines += ["", "## Waivers", *(_waiver_line(w) for w in record.waivers)]
    return "\n".join(lines) + "\n"


def _waiver_line(waiver: dict[str, Any]) -> str:
    who = ", ".join(md_text(waiver.get(k)) for k in ("who", "date"))
    return (
        f"- {code(waiver.get('check'))} ({md_text(waiver.get('status'))}): "
        f"{md_text(waiver.get('justification'))} — {who}"
    )


def _stage_row(result: StageResult) -> str:
    prov = result.provenance
    cells = (result.stage, result.status, prov.get("host", ""), prov.get("slurm_job_id") or "")
    return "| " + " | ".join(_cell(c) for c in cells) + f" | {_cell(result.timings.get('wall_s', ''))} |"


def _check_row(check: Check) -> str:
    values = (check.feature, check.category, check.expected, check.configured, check.actual)
    return (
        "| "
        + " | ".join(_cell(v) for v in values)
        + f" | {_cell(check.verdict)} | {_cell(check.severity)} | {code(check.id, table=True)} |"
    )


def _evidence(stages: tuple[StageResult, ...], audit_dir: Path) -> list[str]:
    lines: list[str] = []
    for result in stages:
        for check in result.checks:
            if check.message or check.evidence:
                lines += [f"### {code(check.id)}", md_text(check.message or ""), ""]
                if check.evidence:
                    lines += [*_fenced(json.dumps(check.evidence, indent=1, default=str)[:4000]), ""]
        for name, path in result.artifacts.items():
            link = quote(_relative(Path(path), audit_dir))
            shown = md_text(name, brackets=True)
            png = str(path).endswith(".png")
            lines.append(f"![{shown}]({link})" if png else f"- {shown}: [{shown}]({link})")
    return lines


def _fenced(body: str) -> list[str]:
    """A JSON block whose fence is longer than any backtick run in it, so data cannot close it."""
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", body)), default=0) + 1)
    return [f"{fence}json", body, fence]


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
        chain = code(f"sbatch --dependency=afterok:{job} train.sbatch") if job else "the training job"
        return [f"Clear to train: chain {chain} on the gate."]
    steps = [
        f"Resolve {code(c.id)} ({_cell(c.message, 200)}), or waive it in configs/waivers.yaml with a "
        "justification, who and date."
        for c in checks
        if c.blocking
    ]
    steps += [
        f"Make {code(c.id)} verifiable or set `gate.unverifiable=warn`: {_cell(c.message, 200)}"
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
