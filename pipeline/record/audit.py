"""The audit history: one dated markdown record (and its JSON twin) per gate, and `timeline.md`.

Many gates may finish at once on a shared filesystem. Each writes its own record files atomically
(unique names: date, model, dataset, run id), then rebuilds `timeline.md` from the JSON twins under a
lock. The timeline is derived data: `python -m pipeline.record.audit rebuild-timeline [DIR]` repairs it.

A record is self-contained: the plots and files its stages left in the run folder are copied next to
it, into `<record stem>_files/` (each under `MAX_COPY_BYTES`, all together under `MAX_COPY_TOTAL`), and
linked relatively, so `audit_logs/` can be committed or moved without the run folder. The markdown
itself is `pipeline.record.markdown`; the escaping every data-derived string goes through is
`pipeline.record.text` (re-exported here).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from omegaconf import DictConfig

from pipeline.errors import RecordError
from pipeline.record import history, integrity
from pipeline.record.markdown import DEFAULT_PHYSICAL_CHECKS, Files, render_markdown
from pipeline.record.records import GateRecord
from pipeline.record.text import cell, code, flat, md_text, unescape
from pipeline.storage import atomic_write_bytes, atomic_write_json, atomic_write_text, file_lock
from pipeline.storage.files import kind_of

__all__ = [  # the history's API, plus the renderer and escaping re-exported for existing callers
    "DEFAULT_PHYSICAL_CHECKS",
    "AuditWriteError",
    "audit_mode",
    "code",
    "flat",
    "inputs_label",
    "label",
    "md_text",
    "parse_timeline",
    "rebuild_timeline",
    "record_stem",
    "render_markdown",
    "unescape",
    "write_record",
]

log = logging.getLogger(__name__)
TIMELINE = "timeline.md"
LOCK = ".timeline.lock"
TIMELINE_HEADER = (
    "| created | run | model | dataset | inputs | verdict | gate | record |",
    "|---|---|---|---|---|---|---|---|",
)
MAX_COPY_BYTES = 8 * 2**20  # one artifact copied next to the record at most this big
MAX_COPY_TOTAL = 32 * 2**20  # all of one record's copies together
# fingerprints that are not the run's inputs (a stage's own config, the software): left out of `inputs`
NOT_INPUTS = ("config", "container", "container_pins")


class AuditWriteError(RecordError):
    """One of the record's writes failed; `written` lists the files that did get written."""

    def __init__(self, message: str, *, path: Path, written: list[Path]):
        super().__init__(message, path=path)
        self.written = written


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


# path components that name a checkpoint's place in a training run, not the model: a LeRobot checkpoint
# is `<run>/checkpoints/<step>/pretrained_model`, so its record is named after `<run>` (and the step)
GENERIC_PARTS = frozenset(
    ("pretrained_model", "checkpoints", "checkpoint", "last", "model", "data", "dataset")
)


def path_name(path: str) -> str:
    """The name a path gives a model or dataset: its last component that is not a generic one (a step
    number is kept after the run's name: `act_run-000020`)."""
    parts = [p for p in Path(path).parts if p not in ("/", "")]
    step = ""
    for part in reversed(parts):
        if part.isdigit() and not step:
            step = part
        elif part.lower() not in GENERIC_PARTS and not part.isdigit():
            return f"{part}-{step}" if step else part
    return parts[-1] if parts else "none"


def label(section: DictConfig | dict[str, Any]) -> str:
    """A file-name-safe name for a model or dataset: its `name`, else what its path says it is."""
    name = section.get("name") or (path_name(str(section.get("path"))) if section.get("path") else "none")
    return safe_name(str(name))


def record_stem(record: GateRecord) -> str:
    """The record's file name: date, model, dataset, run id, each cut to 60 characters (a file name
    stays under the 255 bytes filesystems allow, whatever a model is called)."""
    names = (record.sources["model"]["name"], record.sources["dataset"]["name"], record.run_id)
    return "_".join([safe_name(record.created[:10]), *(safe_name(str(n))[:60] for n in names), "audit"])


def write_record(
    audit_dir: Path, record: GateRecord, mode: int | None = None, key: bytes | None = None
) -> Path:
    """The JSON twin (sealed and chained, see `pipeline.record.history`), the record's files, the markdown
    record and the timeline row, each durably written (or an `AuditWriteError` naming the write that
    failed and the files already written). Returns the markdown's path. `mode`: the files' permission
    bits (default: as the umask allows); `key`: the team's HMAC key (`audit.key_file`)."""
    audit_dir = Path(audit_dir)
    written: list[Path] = []
    files: dict[str, tuple[str, str]] = {}
    try:
        stem, copies = _write_twin(audit_dir, record, files, mode, key)
    except (OSError, RecordError, TimeoutError) as exc:
        twin = audit_dir / f"{record_stem(record)}.json"
        raise AuditWriteError(
            f"audit record: writing {twin} failed: {getattr(exc, 'strerror', None) or exc}; written: none",
            path=twin,
            written=written,
        ) from exc
    written.append(audit_dir / f"{stem}.json")
    markdown = audit_dir / f"{stem}.md"
    steps = [
        *copies,
        (markdown, lambda p: atomic_write_text(p, _markdown(record, audit_dir, files), mode)),
        (audit_dir / TIMELINE, lambda p: _timeline_with(audit_dir, stem, mode)),
    ]
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
    return markdown


def _write_twin(
    audit_dir: Path,
    record: GateRecord,
    files: dict[str, tuple[str, str]],
    mode: int | None,
    key: bytes | None,
) -> tuple[str, list[tuple[Path, Any]]]:
    """Under the audit lock (so the chain never forks): a stem no earlier record has (a relaunch the same
    day never overwrites an earlier record's files), the twin naming the chain's head. Returns the stem
    and the artifact copy steps (the twin lists where each copy goes, so a reuse finds them)."""
    with file_lock(audit_dir / LOCK):
        stem = free_stem(audit_dir, record_stem(record))
        copies = artifact_copies(record, audit_dir, stem, files, mode)
        body = {**record.to_dict(), history.FILES: {src: link for src, (link, _) in files.items() if link}}
        twin = history.seal(body, history.chain_head(audit_dir), key)
        atomic_write_json(audit_dir / f"{stem}.json", twin, mode)
    return stem, copies


def free_stem(audit_dir: Path, stem: str) -> str:
    """`stem`, or `stem` with `-2`, `-3`, ... before `_audit` where a record of that name exists."""
    base, candidate, n = stem.removesuffix("_audit"), stem, 1
    while (audit_dir / f"{candidate}.json").exists() or (audit_dir / f"{candidate}.md").exists():
        n += 1
        candidate = f"{base}-{n}_audit"
    return candidate


def _markdown(record: GateRecord, audit_dir: Path, files: Files) -> str:
    return render_markdown(record, audit_dir, files, inputs=inputs_label(record.to_dict()) or None)


def files_dir(audit_dir: Path, stem: str) -> Path:
    """Where a record's plots and files are copied: beside it, named after it."""
    return Path(audit_dir) / f"{stem}_files"


def artifact_copies(
    record: GateRecord, audit_dir: Path, stem: str, files: dict[str, tuple[str, str]], mode: int | None
) -> list[tuple[Path, Any]]:
    """One write step per artifact worth copying (a regular file within the size caps); `files` gets
    each artifact's link (the copy, relative to the audit folder) or, for one not copied, why."""
    steps: list[tuple[Path, Any]] = []
    total, used, refused = 0, set(), set()
    for result in record.stages:
        for name, source in result.artifacts.items():
            size = _regular_size(Path(source))
            if size is None:
                files[str(source)] = ("", "not copied: no such file when the gate ran")
                continue
            if size > MAX_COPY_BYTES or total + size > MAX_COPY_TOTAL:
                cap = MAX_COPY_BYTES if size > MAX_COPY_BYTES else MAX_COPY_TOTAL
                note = (
                    f"not copied: {size / 2**20:.1f} MiB, over the {cap // 2**20} MiB cap; in the run folder"
                )
                files[str(source)] = ("", note)
                continue
            target = files_dir(audit_dir, stem) / safe_name(result.stage) / _copy_name(name, source)
            planted = not_a_folder(audit_dir, target.parent)
            if planted:
                files[str(source)] = ("", f"not copied: {planted}")
                refused.add(planted)
                continue
            total += size
            while target in used:  # two names that are alike once file-name safe
                target = target.with_name(f"{target.stem}-{len(used)}{target.suffix}")
            used.add(target)
            files[str(source)] = (target.relative_to(audit_dir).as_posix(), "")
            steps.append((target, lambda p, src=Path(source): _copy(audit_dir, p, src, mode)))
    for line in sorted(refused):
        log.warning("audit record: the record's files are not copied: %s", line)
    return steps


def not_a_folder(audit_dir: Path, folder: Path) -> str:
    """Why the record's files cannot go into `folder` (below `audit_dir`), or "": each of its parts that
    exists must be a real folder, never a link (a `<record>_files` link planted before the gate would
    carry the copies wherever it points)."""
    part = Path(audit_dir)
    for name in folder.relative_to(audit_dir).parts:
        part = part / name
        try:
            info = part.lstat()
        except FileNotFoundError:
            return ""  # made by the copy, as a real folder
        except OSError as exc:
            return f"{part}: {exc.strerror or exc}"
        if stat.S_ISLNK(info.st_mode):
            to = os.readlink(part)
            return f"{part} is a symlink (to {to}), not a folder inside the audit folder; refused"
        if not stat.S_ISDIR(info.st_mode):
            what = "a file" if stat.S_ISREG(info.st_mode) else kind_of(info.st_mode)
            return f"{part} is {what}, not a folder; refused"
    return ""


def _copy(audit_dir: Path, target: Path, source: Path, mode: int | None) -> Path:
    """One artifact's copy, its folder checked again just before (a link planted since is refused)."""
    planted = not_a_folder(audit_dir, target.parent)
    if planted:
        raise RecordError(planted, path=target.parent)
    return atomic_write_bytes(target, source.read_bytes(), mode)


def _regular_size(path: Path) -> int | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _copy_name(name: str, source: str) -> str:
    """The artifact's name (unique within its stage) and the source's suffix, file-name safe."""
    suffix = Path(source).suffix
    return safe_name(name) + ("." + safe_name(suffix[1:]) if suffix and not name.endswith(suffix) else "")


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
        for path in sorted(audit_dir.glob(history.TWIN_GLOB)):
            try:  # bounded, regular files only: a FIFO or /dev/zero link there cannot hang the gate
                data = integrity.load_json(path, history.MAX_TWIN_BYTES, inside=audit_dir)
                rows.append(_timeline_row(path, data))
            except (integrity.Unreadable, KeyError, TypeError, AttributeError, ValueError):
                unreadable.append(path.name)  # a shape no gate writes: named, never a failed gate
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
    cells = [cell(data["created"]), code(data["run_id"], table=True)]
    cells += [cell(v) for v in (src["model"]["name"], src["dataset"]["name"], inputs_label(data) or None)]
    cells += [cell(v) for v in (data["verdict"], data["gate"])]
    cells.append(f"[{md_text(path.stem)}]({quote(path.with_suffix('.md').name)})")
    return (str(data["created"]), str(data["run_id"])), "| " + " | ".join(cells) + " |"


def inputs_label(data: dict[str, Any]) -> str:
    """What tells two records of the same model and dataset apart: the config variant (e.g. the demo's
    `default` / `faulty`) and a short digest of the input fingerprints (model, training config, dataset,
    release, cache) the stages ran on."""
    prints: dict[str, str] = {}
    for stage_prints in (data.get("fingerprints") or {}).values():
        prints.update({k: v for k, v in (stage_prints or {}).items() if k not in NOT_INPUTS})
    digest = hashlib.sha256(json.dumps(prints, sort_keys=True).encode()).hexdigest()[:8] if prints else ""
    variant = (data.get("sources") or {}).get("variant")
    return " · ".join(str(part) for part in (variant, digest) if part)


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
