"""Finding, promoting and pruning checkpoints across the primary and its fallbacks.

Everything here starts from the manifest, never from a directory listing: a file the manifest does not
name (a temp file left by a killed save, someone else's data in /tmp) is never loaded, moved or deleted.

Promote and prune act only inside the folders they were given (`Scope`): the primary, the `--fallback`
folders, and the fallbacks the primary's own manifest records for this very primary. A manifest copied
or moved with its folder still names the old path: its locations are re-rooted to where it sits now
(and the command says so), while a location anywhere else, or a file whose size or sha256 is not the
manifest's, is refused before anything is touched. Every action is planned first (`--dry-run` prints
the plan); a deletion is logged in the manifest (`deleting`) before the file goes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, PreflightError
from pipeline.storage import manifest
from pipeline.storage.atomic import _fsync_dir
from pipeline.storage.digest import sha256_file
from pipeline.storage.manifest import Entry, Saved
from pipeline.storage.quota import preflight

log = logging.getLogger("pipeline.storage")


Found = Saved  # the name `latest_checkpoint` has always returned: the same class as a save's


class Refused(PreflightError):
    """Planned actions that would leave the given folders or touch a file the manifest does not match;
    nothing was done. One line per refusal."""


@dataclass(frozen=True)
class Scope:
    """The folders a maintenance command may act in, and how the manifest's locations map into them."""

    primary: Path
    roots: frozenset[Path]
    recorded: str | None  # the primary the manifest was written for; another path: a copied folder

    @property
    def moved(self) -> bool:
        return self.recorded is not None and Path(self.recorded) != self.primary

    def where(self, location: str) -> Path | None:
        """The folder `location` means here (re-rooted for a copied folder), or None when outside."""
        loc = Path(location)
        if not loc.is_absolute():
            loc = self.primary / loc
        elif self.recorded is not None and loc == Path(self.recorded):
            loc = self.primary
        loc = loc.resolve()
        return loc if loc in self.roots else None

    def note(self) -> str:
        if not self.moved:
            return ""
        return (
            f"{self.primary}: its manifest was written for {self.recorded} (the folder was copied or moved): "
            "locations re-rooted here; fallbacks recorded for the original are left alone"
        )


def scope_of(primary: Path, fallbacks: Iterable[Path] = ()) -> Scope:
    primary = Path(primary).resolve()
    events = manifest.read(primary)
    recorded = next((str(e["primary"]) for e in events if isinstance(e.get("primary"), str)), None)
    given = [Path(f) for f in fallbacks]
    if recorded is None or Path(recorded) == primary:  # the primary's own record of its fallbacks
        given += [Path(f) for e in events if e["event"] == "init" for f in e.get("fallbacks", [])]
    roots = {primary} | {f.resolve() for f in given} | {manifest.fallback_dir(f, primary) for f in given}
    return Scope(primary, frozenset(roots), recorded)


def scoped(scope: Scope, fallbacks: Iterable[Path] = ()) -> tuple[list[Entry], list[str]]:
    """The primary's entries with their locations mapped into the scope; (entries, lines for those
    outside it). Only manifests inside the scope are read."""
    events = list(manifest.read(scope.primary))
    seen = {json.dumps(e, sort_keys=True) for e in events}
    recorded = scope.recorded or str(scope.primary)
    for folder in sorted(scope.roots - {scope.primary}):
        if folder.is_dir() and manifest.manifest_path(folder).exists():
            for event in manifest.read(folder):
                key = json.dumps(event, sort_keys=True)
                if event.get("primary") in (recorded, str(scope.primary)) and key not in seen:
                    seen.add(key)
                    events.append(event)
    entries, outside = [], []
    for entry in manifest.fold(events).values():
        here = scope.where(entry.location)
        if here is None:
            outside.append(f"{entry.name}: location {entry.location} is outside the given folders")
            entry.location = ""
        else:
            entry.location = str(here)
        entries.append(entry)
    return entries, outside


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
    if sha256_file(path) != entry.sha256:
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


def promote(
    primary: str | Path, fallbacks: Iterable[str | Path] = (), margin: float = 0.1, dry_run: bool = False
) -> list[dict]:
    """Move fallback checkpoints back to the primary where it now has room; one result row each.

    Copy to a temp file beside the primary, fsync, verify sha256, rename, copy the sidecar, record
    `promoted` in both manifests, then delete the fallback copy. A crash at any point leaves a complete
    copy that the manifest points at. A fallback outside the given folders refuses the whole command.
    """
    scope = scope_of(Path(primary), [Path(f) for f in fallbacks])
    entries, _ = scoped(scope)
    moving = [e for e in sorted(entries, key=lambda e: e.saved) if e.state != "deleted"]
    moving = [e for e in moving if not e.location or Path(e.location) != scope.primary]
    refused = [
        f"refused: {e.name}: its location is outside the given folders" for e in moving if not e.location
    ]
    if refused:
        raise Refused("\n".join(refused + ["nothing was moved (name the fallback folder with --fallback)"]))
    if dry_run:
        return [{"name": e.name, "from": e.location, "to": str(scope.primary), "moved": False,
                 "reason": "would move (dry run)"} for e in moving]  # fmt: skip
    scope.primary.mkdir(parents=True, exist_ok=True)
    return [_promote_one(scope.primary, entry, margin) for entry in moving]


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
        if sha256 is not None and sha256_file(tmp) != sha256:
            raise OSError(f"copy of {source} to {tmp} does not match its sha256")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


@dataclass
class Plan:
    """What retention will do, decided before anything is touched."""

    scope: Scope
    supersede: list[Entry]
    delete: list[Entry]

    def lines(self) -> list[str]:
        return [f"would mark superseded: {e.name}" for e in self.supersede] + [
            f"would delete: {e.name} ({e.path})" for e in self.delete
        ]


def plan_retention(primary: str | Path, keep: int, fallbacks: Iterable[str | Path] = ()) -> Plan:
    """The newest `keep` stay; the rest are marked superseded and deleted. Refused (nothing done) when
    one of them lies outside the given folders or its file no longer matches its manifest line."""
    if keep < 1:
        raise InputError(f"retention: keep must be >= 1, got {keep}", field="keep")
    scope = scope_of(Path(primary), [Path(f) for f in fallbacks])
    entries, _ = scoped(scope)
    live = sorted((e for e in entries if e.state == "present"), key=lambda e: e.saved)
    supersede = live[: max(len(live) - keep, 0)]
    delete = supersede + [e for e in entries if e.state == "superseded"]
    refused = [line for e in delete if (line := _refusal(e))]
    if refused:
        raise Refused("\n".join(refused + ["nothing was deleted or marked"]))
    return Plan(scope, supersede, delete)


def _refusal(entry: Entry) -> str:
    if not entry.location:
        return f"refused: {entry.name}: its location is outside the given folders (not deleted)"
    problem = check(entry)
    if problem and not problem.endswith("missing"):  # a file already gone has nothing to delete
        return f"refused: {entry.name}: {problem}; not deleted"
    return ""


def apply_retention(
    primary: str | Path, keep: int, fallbacks: Iterable[str | Path] = (), dry_run: bool = False
) -> list[str]:
    """Keep the newest `keep` checkpoints: mark the rest superseded, then delete only those marked,
    each deletion logged (`deleting`) before the files go. A mark or log that no manifest could take
    (every folder full) means no deletion. Returns the names deleted (or, dry, that would be)."""
    plan = plan_retention(primary, keep, fallbacks)
    if dry_run:
        return [e.name for e in plan.delete]
    scope, deleted = plan.scope, []
    for entry in plan.supersede:
        if _record(scope, entry, _event("superseded", scope.primary, entry)):
            entry.state = "superseded"
    for entry in plan.delete:
        if entry.state != "superseded" or not _record(scope, entry, _event("deleting", scope.primary, entry)):
            continue
        for path in (entry.path, entry.sidecar_path):
            path.unlink(missing_ok=True)
        _record(scope, entry, _event("deleted", scope.primary, entry))
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


def _record(scope: Scope, entry: Entry, event: dict[str, Any]) -> bool:
    """Append to the primary's and the entry's manifests; if neither takes it, to another manifest in
    the scope. True when at least one manifest that `scoped` reads now holds the event."""
    written = False
    for folder in dict.fromkeys([scope.primary, Path(entry.location)]):
        try:
            manifest.append(folder, event)
            written = True
        except OSError as exc:
            log.warning("checkpoint manifest in %s not updated: %s", folder, exc)
    spare = [f for f in sorted(scope.roots) if manifest.manifest_path(f).exists()]
    for folder in spare if not written else []:
        try:
            manifest.append(folder, event)
            return True
        except OSError:
            continue
    return written


TEMP = re.compile(r"^\.[A-Za-z0-9_][A-Za-z0-9._-]*\.(safetensors|json|jsonl)\.[A-Za-z0-9_.]+\.tmp$")


def stale_temps(
    primary: str | Path, older_than_s: float = 6 * 3600, fallbacks: Iterable[str | Path] = ()
) -> list[Path]:
    """Temp files a killed save left in the primary and its fallback folders in scope (our naming only,
    and untouched for `older_than_s`: a save still writing on another node is never one of them)."""
    scope = scope_of(Path(primary), [Path(f) for f in fallbacks])
    cutoff = time.time() - older_than_s
    out = []
    for folder in sorted(scope.roots):
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
