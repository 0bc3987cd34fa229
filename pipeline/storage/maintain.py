"""Finding, promoting and pruning checkpoints across the primary and its fallbacks.

Everything here starts from the manifest, never from a directory listing: a file the manifest does not
name (a temp file left by a killed save, someone else's data in /tmp) is never loaded, moved or deleted.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.storage import manifest
from pipeline.storage.atomic import _fsync_dir
from pipeline.storage.manifest import Entry
from pipeline.storage.quota import preflight
from pipeline.storage.tensorfile import file_sha256

log = logging.getLogger("pipeline.storage")


@dataclass(frozen=True)
class Found:
    """A complete, verified checkpoint (what `latest_checkpoint` returns)."""

    name: str
    path: Path
    sidecar: Path
    location: Path
    primary: Path
    sha256: str
    size: int
    saved: float

    @property
    def fallback(self) -> bool:
        return self.location != self.primary


def check(entry: Entry) -> str:
    """'' when the entry's files are complete and its sha256 matches, else what is wrong."""
    try:
        path, sidecar = entry.path, entry.sidecar_path
    except InputError as exc:
        return str(exc)
    if not sidecar.is_file():
        return f"sidecar {sidecar} missing"
    if not path.is_file():
        return f"{path} missing"
    size = path.stat().st_size
    if size != entry.size:
        return f"{path} is {size} bytes, the manifest says {entry.size} (truncated?)"
    if file_sha256(path) != entry.sha256:
        return f"{path} sha256 differs from the manifest (corrupt)"
    return ""


def latest_checkpoint(primary: str | Path, fallbacks: Iterable[str | Path] = ()) -> Found | None:
    """The newest complete checkpoint of `primary`, wherever it went; sha256 verified, else the next."""
    primary = Path(primary).resolve()
    entries = manifest.collect(primary, [Path(f) for f in fallbacks])
    for entry in sorted(entries.values(), key=lambda e: e.saved, reverse=True):
        if entry.state == "deleted":
            continue
        problem = check(entry)
        if problem:
            log.warning("checkpoint %s skipped: %s", entry.name, problem)
            continue
        return Found(
            entry.name,
            entry.path,
            entry.sidecar_path,
            Path(entry.location),
            primary,
            entry.sha256,
            entry.size,
            entry.saved,
        )
    return None


def load_checkpoint(found: Found, framework: str = "pt") -> dict[str, Any]:
    """The tensors of a verified checkpoint (safetensors: nothing is unpickled)."""
    if framework == "pt":
        from safetensors.torch import load_file
    elif framework == "np":
        from safetensors.numpy import load_file
    else:
        raise InputError(
            f"load_checkpoint: framework must be 'pt' or 'np', got {framework!r}", field="framework"
        )
    return dict(load_file(str(found.path)))


def promote(primary: str | Path, fallbacks: Iterable[str | Path] = (), margin: float = 0.1) -> list[dict]:
    """Move fallback checkpoints back to the primary where it now has room; one result row each.

    Copy to a temp file beside the primary, fsync, verify sha256, rename, copy the sidecar, record
    `promoted` in both manifests, then delete the fallback copy. A crash at any point leaves a complete
    copy that the manifest points at.
    """
    primary = Path(primary).resolve()
    primary.mkdir(parents=True, exist_ok=True)
    rows = []
    entries = manifest.collect(primary, [Path(f) for f in fallbacks])
    for entry in sorted(entries.values(), key=lambda e: e.saved):
        if entry.state == "deleted" or Path(entry.location) == primary:
            continue
        rows.append(_promote_one(primary, entry, margin))
    return rows


def _promote_one(primary: Path, entry: Entry, margin: float) -> dict[str, Any]:
    row = {"name": entry.name, "from": entry.location, "to": str(primary), "moved": False}
    problem = check(entry)
    if problem:
        return row | {"reason": f"not moved: {problem}"}
    reason, _ = preflight(primary, entry.size, margin, 64 * 2**10, check_quota=True)
    if reason:
        return row | {"reason": f"not moved, no room yet: {reason}"}
    target, sidecar = primary / entry.path.name, primary / entry.sidecar_path.name
    try:
        _copy_verified(entry.path, target, entry.sha256)
        _copy_verified(entry.sidecar_path, sidecar, None)
        event = {
            "event": "promoted",
            "name": entry.name,
            "location": str(primary),
            "from": entry.location,
            "primary": str(primary),
            "time": time.time(),
        }
        manifest.append(primary, event)
    except OSError as exc:
        return row | {"reason": f"not moved: {exc}"}
    try:
        manifest.append(Path(entry.location), event)
        entry.path.unlink()
        entry.sidecar_path.unlink()
    except OSError as exc:
        log.warning("promoted %s; the fallback copy in %s stays: %s", entry.name, entry.location, exc)
    return row | {"moved": True, "reason": "promoted"}


def _copy_verified(source: Path, target: Path, sha256: str | None) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{time.time_ns()}.tmp")
    try:
        with source.open("rb") as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst, 16 * 2**20)
            dst.flush()
            os.fsync(dst.fileno())
        if sha256 is not None and file_sha256(tmp) != sha256:
            raise OSError(f"copy of {source} to {tmp} does not match its sha256")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def apply_retention(primary: str | Path, keep: int, fallbacks: Iterable[str | Path] = ()) -> list[str]:
    """Keep the newest `keep` checkpoints: mark the rest superseded, then delete only those marked.

    A mark that no manifest could take (every folder full) means no deletion: nothing is removed that
    the manifest does not say is superseded.
    """
    if keep < 1:
        raise InputError(f"retention: keep must be >= 1, got {keep}", field="keep")
    primary = Path(primary).resolve()
    extra = [Path(f) for f in fallbacks]
    entries = manifest.collect(primary, extra)
    spare = [f for f in manifest.fallback_folders(primary, extra) if manifest.manifest_path(f).exists()]
    live = sorted((e for e in entries.values() if e.state == "present"), key=lambda e: e.saved)
    for entry in live[: max(len(live) - keep, 0)]:
        if _record(primary, entry, _event("superseded", primary, entry), spare):
            entry.state = "superseded"
    deleted = []
    for entry in entries.values():
        if entry.state != "superseded":
            continue
        for path in (entry.path, entry.sidecar_path):
            path.unlink(missing_ok=True)
        _record(primary, entry, _event("deleted", primary, entry), spare)
        deleted.append(entry.name)
    return deleted


def _event(kind: str, primary: Path, entry: Entry) -> dict[str, Any]:
    return {
        "event": kind,
        "name": entry.name,
        "primary": str(primary),
        "location": entry.location,
        "time": time.time(),
    }


def _record(primary: Path, entry: Entry, event: dict[str, Any], spare: Iterable[Path] = ()) -> bool:
    """Append to the primary's and the entry's manifests; if neither takes it, to a fallback's.
    True when at least one manifest that `collect` reads now holds the event."""
    written = False
    for folder in dict.fromkeys([primary, Path(entry.location)]):
        try:
            manifest.append(folder, event)
            written = True
        except OSError as exc:
            log.warning("checkpoint manifest in %s not updated: %s", folder, exc)
    for folder in spare if not written else []:
        try:
            manifest.append(folder, event)
            return True
        except OSError:
            continue
    return written


TEMP = re.compile(r"^\.[A-Za-z0-9_][A-Za-z0-9._-]*\.(safetensors|json|jsonl)\.[A-Za-z0-9_.]+\.tmp$")


def stale_temps(primary: str | Path, older_than_s: float = 6 * 3600) -> list[Path]:
    """Temp files a killed save left in the primary and its fallback folders (our naming only, and
    untouched for `older_than_s`: a save still writing on another node is never one of them)."""
    primary = Path(primary).resolve()
    cutoff = time.time() - older_than_s
    out = []
    for folder in [primary, *manifest.fallback_folders(primary)]:
        if folder.is_dir():
            out += [p for p in folder.iterdir() if TEMP.match(p.name) and p.stat().st_mtime < cutoff]
    return sorted(out)


def status_rows(primary: str | Path, fallbacks: Iterable[str | Path] = (), verify: bool = True) -> list[dict]:
    """Where every checkpoint of `primary` is and whether it is intact (for `status`)."""
    primary = Path(primary).resolve()
    rows = []
    entries = manifest.collect(primary, [Path(f) for f in fallbacks])
    for entry in sorted(entries.values(), key=lambda e: e.saved):
        problem = check(entry) if verify and entry.state != "deleted" else ""
        rows.append(
            {
                "name": entry.name,
                "where": "primary" if Path(entry.location) == primary else "fallback",
                "location": entry.location,
                "size": entry.size,
                "state": entry.state if not problem else f"{entry.state}, BAD: {problem}",
                "saved": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.saved)),
            }
        )
    return rows
