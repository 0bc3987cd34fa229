"""What the audit history remembers, and which of it can be trusted: the JSON twins of earlier gates.

Two readers use it. The plan reuses a stage's result from an earlier clear record when every input
fingerprint of the stage is the same (`reuse=history`); the determinism stage compares its smoke loss
curve with the curves of earlier clear runs of the same training config.

Only results that stood on their own qualify: from a record whose gate was `clear`, with no `error`,
no blocking row, no `unverifiable` row and no `waived` row. A result that was itself reused names the
run that produced it, so a chain of reuses points at the origin and one curve is never counted twice.

Only twins that prove themselves qualify (`verify`). Each twin carries the sha256 of its canonical
content and names the digest of the twin written before it in the same folder (a chain, written under
the audit lock, so a legitimate history never forks): a twin edited after it was written fails its
digest, a deleted one leaves a gap its successor names, an inserted one forks the chain. With
`audit.key_file` each twin also carries an HMAC of its digest; then a twin without a valid one (forged
by someone with write access but not the key) is never used. A twin that fails is named in the new
record and the stage it might have served reruns.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import RecordError
from pipeline.record import integrity
from pipeline.record.records import GateRecord, StageResult

log = logging.getLogger(__name__)
TWIN_GLOB = "*_audit.json"
MAX_TWIN_BYTES = 64 * 1024 * 1024  # a record is a few MiB at most; a bigger file is not one of ours
REUSED_FROM = "reused_from"
INTEGRITY = "integrity"
FILES = "files"  # artifact path -> its copy beside the record (relative to the audit folder)


@dataclass(frozen=True)
class Twin:
    """One `*_audit.json` and what it proved: `problem` is None only for a twin that can be trusted."""

    path: Path
    record: GateRecord | None = None
    digest: str | None = None
    previous: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    problem: str | None = None


@dataclass(frozen=True)
class Earlier:
    """One earlier stage result, the run that produced it (the origin, through any reuse), its twin."""

    run_id: str
    created: str
    result: StageResult
    twin: Twin | None = None


def seal(body: Mapping[str, Any], previous: str | None, key: bytes | None) -> dict[str, Any]:
    """The twin as written: `body` plus its integrity block (digest over body + previous, HMAC)."""
    sealed = integrity.digest({**body, "previous": previous})
    block: dict[str, Any] = {"previous": previous, "digest": sealed}
    if key:
        block["hmac"] = integrity.sign(key, sealed)
    return {**body, INTEGRITY: block}


def _open(path: Path, key: bytes | None) -> Twin:
    """A twin's content checked on its own (digest, HMAC, schema); the chain is checked by `verify`."""
    try:
        data = integrity.load_json(path, MAX_TWIN_BYTES, inside=path.parent)
        if not isinstance(data, dict):
            raise integrity.Unreadable("not a JSON object")
    except integrity.Unreadable as exc:
        return Twin(path, problem=f"unreadable: {exc}")
    block = data.pop(INTEGRITY, None)
    if not isinstance(block, dict) or not isinstance(block.get("digest"), str):
        return Twin(path, problem="carries no digest (written by hand, or before records were sealed)")
    previous = block.get("previous") if isinstance(block.get("previous"), str) else None
    if integrity.digest({**data, "previous": previous}) != block["digest"]:
        return Twin(path, problem="edited after it was written (its digest does not match its content)")
    if key and not integrity.signed(key, block["digest"], block.get("hmac")):
        why = "an HMAC that does not verify" if block.get("hmac") else "no HMAC"
        return Twin(path, previous=previous, digest=block["digest"], problem=f"{why} for audit.key_file")
    files = data.pop(FILES, {})
    try:
        record = GateRecord.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError, RecordError) as exc:
        return Twin(path, digest=block["digest"], previous=previous, problem=f"not a gate record: {exc}")
    files = {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}
    return Twin(path, record, block["digest"], previous, files)


def twin_record(path: Path, key: bytes | None = None) -> GateRecord:
    """The record of one twin whose content proves itself (digest, HMAC with a key); else RecordError."""
    twin = _open(Path(path), key)
    if twin.problem or twin.record is None:
        raise RecordError(f"{path}: {twin.problem}", path=path)
    return twin.record


@functools.lru_cache(maxsize=4096)
def _cached(path: Path, stamp: tuple[int, ...], key: bytes | None) -> Twin:
    del stamp  # part of the cache key only: a changed file is read again
    twin = _open(path, key)
    if twin.problem:
        log.warning("history: %s not trusted: %s", path, twin.problem)
    return twin


def _paths(folder: Path) -> list[Path]:
    try:
        return sorted(folder.glob(TWIN_GLOB))
    except OSError as exc:
        log.warning("history: cannot list %s: %s", folder, exc)
        return []


def verify(audit_dir: Path | str, key: bytes | None = None) -> list[Twin]:
    """Every twin in `audit_dir`, content and chain checked; each file parsed once per version."""
    folder = Path(audit_dir)
    if not folder.is_dir():
        return []
    twins = []
    for path in _paths(folder):
        try:
            info = path.lstat()
            stamp = (info.st_mode, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            twins.append(_cached(path, stamp, key))
        except OSError as exc:
            twins.append(Twin(path, problem=f"unreadable: {exc.strerror or exc}"))
    return _chain(twins)


def _chain(twins: list[Twin]) -> list[Twin]:
    """Gaps (a named predecessor that no twin has: deleted) and forks (two twins after one: inserted)."""
    digests = {t.digest for t in twins if t.digest}  # an untrusted twin still fills its place
    followers: dict[str | None, list[Twin]] = defaultdict(list)
    for twin in twins:
        if twin.problem is None:
            followers[twin.previous].append(twin)
    checked = []
    for twin in twins:
        problem = twin.problem
        if problem is None and twin.previous is not None and twin.previous not in digests:
            problem = f"chain gap: the record written before it ({twin.previous[:19]}...) is missing"
        elif problem is None and len(followers[twin.previous]) > 1:
            others = ", ".join(t.path.name for t in followers[twin.previous] if t is not twin)
            problem = f"chain fork: {others} follows the same record: one of them was inserted"
        checked.append(twin if problem == twin.problem else _replace(twin, problem))
    return checked


def _replace(twin: Twin, problem: str) -> Twin:
    return Twin(twin.path, twin.record, twin.digest, twin.previous, twin.files, problem)


def chain_head(audit_dir: Path | str) -> str | None:
    """The digest a new twin names as its predecessor: the newest sealed twin nothing follows yet."""
    sealed = [t for t in verify(audit_dir) if t.digest and t.record is not None]
    named = {t.previous for t in sealed}
    tips = [t for t in sealed if t.digest not in named] or sealed
    if not tips:
        return None
    newest = max(tips, key=lambda t: (t.record.created, t.record.run_id) if t.record else ("", ""))
    return newest.digest


def ignored(twins: Iterable[Twin], limit: int = 20) -> list[str]:
    """One line per twin that cannot be trusted, for the record (the rest counted)."""
    lines = [f"history entry {t.path.name} ignored: {t.problem}" for t in twins if t.problem]
    if len(lines) > limit:
        more = len(lines) - limit
        lines = [*lines[:limit], f"... and {more} more (preflight-status --verify-history lists them)"]
    return lines


def qualifies(result: StageResult) -> bool:
    """A result that another run may stand on (see the module docstring for why each rule)."""
    if result.status == "error" or not result.fingerprints:
        return False
    return not any(c.blocking or c.verdict in ("unverifiable", "waived", "error") for c in result.checks)


def origin(record: GateRecord, result: StageResult) -> str:
    """The run that produced `result`: itself, or the run it was reused from."""
    return str(result.provenance.get(REUSED_FROM) or record.run_id)


def clear_results(
    audit_dir: Path | str, stage: str, exclude_run: str | None = None, key: bytes | None = None
) -> list[Earlier]:
    """Qualifying results of `stage` from trusted clear records, newest first, one per origin run."""
    trusted = [t for t in verify(audit_dir, key) if t.problem is None and t.record is not None]
    trusted.sort(key=lambda t: (t.record.created, t.record.run_id) if t.record else ("", ""), reverse=True)
    found: list[Earlier] = []
    seen: set[str] = set()
    for twin in trusted:
        record = twin.record
        assert record is not None
        if record.gate != "clear" or record.run_id == exclude_run:
            continue
        for result in record.stages:
            run = origin(record, result)
            if result.stage == stage and run not in seen and run != exclude_run and qualifies(result):
                seen.add(run)
                found.append(Earlier(run, record.created, result, twin))
    return found


def reusable_result(
    audit_dir: Path | str,
    stage: str,
    fingerprints: Mapping[str, str],
    exclude_run: str | None = None,
    key: bytes | None = None,
) -> Earlier | None:
    """The newest qualifying result of `stage` whose input fingerprints are exactly these."""
    if not fingerprints:
        return None
    wanted = dict(fingerprints)
    found = clear_results(audit_dir, stage, exclude_run, key)
    return next((e for e in found if e.result.fingerprints == wanted), None)


def same_inputs(
    audit_dir: Path | str,
    stage: str,
    fingerprints: Mapping[str, str],
    keys: tuple[str, ...],
    exclude_run: str | None = None,
    key: bytes | None = None,
) -> list[Earlier]:
    """Qualifying earlier results of `stage` whose fingerprints equal these on `keys` (e.g. training)."""
    if any(k not in fingerprints for k in keys):
        return []
    return [
        e
        for e in clear_results(audit_dir, stage, exclude_run, key)
        if all(e.result.fingerprints.get(k) == fingerprints[k] for k in keys)
    ]
