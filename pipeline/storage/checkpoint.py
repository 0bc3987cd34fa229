"""Checkpoint saves that survive a full disk, a spent quota and a killed process.

`save_checkpoint(tensors, metadata, primary=..., fallbacks=[...])` writes safetensors (torch tensors or
numpy arrays; or a caller's writer function) plus a small JSON sidecar (metadata, sha256 and size of the
tensor file). Each location is tried in turn: a preflight (free space and quota against the exact size
plus a margin), then a temp file in the target folder hashed while written, fsync, a re-read check
(what is checked and why: `tensorfile`), rename, fsync of the folder. On ENOSPC,
EDQUOT, a read-only or unwritable folder, or a failed preflight, the partial file is removed and the
next location is tried; never silently: the manifest beside the primary and the one in the fallback
folder record it, and the notify hook reports it. A process killed mid-save leaves only a temp file
(`.<name>.*.tmp`) that no reader picks up: the previous checkpoint stays the latest.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, PreflightError, one_line
from pipeline.storage import manifest, tensorfile
from pipeline.storage.atomic import atomic_write_json
from pipeline.storage.maintain import Refused, apply_retention
from pipeline.storage.manifest import Saved, fallback_dir
from pipeline.storage.quota import preflight

log = logging.getLogger("pipeline.storage")
FALLBACK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,200}$")
CHUNK = 64 * 2**20
Writer = Callable[[Path], None]
Notify = Callable[[dict[str, Any]], None] | Sequence[str] | None


class CheckpointSaveError(PreflightError):
    """No location could take the checkpoint; the message lists every location and why."""

    def __init__(self, message: str, attempts: list[Attempt]):
        super().__init__(message, field="primary")
        self.attempts = attempts


@dataclass
class Attempt:
    folder: str
    ok: bool
    reason: str = ""
    room: dict[str, Any] | None = None


def save_checkpoint(
    tensors: Mapping[str, Any] | None,
    metadata: Mapping[str, Any] | None = None,
    *,
    primary: str | Path,
    fallbacks: Sequence[str | Path] = (),
    name: str | None = None,
    writer: Writer | None = None,
    expected_bytes: int | None = None,
    margin: float = 0.1,
    reserve_bytes: int = 64 * 2**10,
    check_quota: bool = True,
    notify: Notify = None,
    keep: int | None = None,
) -> Saved:
    """Save to `primary`, else to the first fallback that takes it; returns where it went.

    A name already saved in that folder is replaced (names default to `step_<metadata["step"]>`).
    `writer(path)` replaces the safetensors serialization (it must write the whole file at `path`);
    give `expected_bytes` with it for the preflight. `keep=K` marks all but the newest K superseded in
    the manifest and deletes those (only those). Raises `CheckpointSaveError` when no location could.
    """
    metadata = dict(metadata or {})
    _check_notify(notify)
    primary = Path(primary).resolve()
    given = _existing(fallbacks)
    folders = [primary] + [fallback_dir(f, primary) for f in given]
    name = _name(name, metadata)
    data = tensorfile.layout(tensors) if writer is None else None  # no copy: each tensor's own memory
    size = data.size if data is not None else _expected(expected_bytes, tensors, primary)
    _record_init(primary, [str(f) for f in folders[1:]])
    attempts: list[Attempt] = []
    for folder in folders:
        attempt, saved = _try(
            folder, primary, name, data, writer, metadata, size, margin, reserve_bytes, check_quota
        )
        attempts.append(attempt)
        if saved is None:
            more = "trying the next location" if folder is not folders[-1] else "no location left"
            log.warning("checkpoint %s refused by %s: %s; %s", name, folder, attempt.reason, more)
            continue
        saved.attempts = attempts
        if saved.fallback:
            _record_fallback(saved, attempts)
            _announce(notify, saved, attempts)
        if keep is not None:
            try:
                apply_retention(primary, keep, fallbacks=given)
            except Refused as exc:  # the save stands; retention touched nothing and says why
                log.warning("retention after %s refused: %s", name, one_line(exc))
        return saved
    _record_fallback(None, attempts, primary=primary, name=name)
    lines = "; ".join(f"{a.folder}: {a.reason}{_room(a)}" for a in attempts)
    message = (
        f"checkpoint {name!r} ({size} bytes) could not be saved anywhere: {lines}. "
        f"Kept: no partial file; {_kept(primary, given)}"
    )
    tell(notify, message, {"name": name, "location": None, "primary": str(primary), "reasons": lines})
    raise CheckpointSaveError(message, attempts)


def _room(attempt: Attempt) -> str:
    """', N bytes free' after a write that failed (a preflight refusal already says both numbers)."""
    free = (attempt.room or {}).get("available")
    return "" if free is None or "needs" in attempt.reason else f" ({free} bytes free)"


def _kept(primary: Path, given: Sequence[Path]) -> str:
    """What the user still has: the checkpoints already saved, the newest named."""
    try:
        live = [e for e in manifest.collect(primary, given).values() if e.state == "present"]
    except (PreflightError, OSError) as exc:
        return f"the earlier checkpoints untouched (manifest not read: {exc})"
    if not live:
        return "no earlier checkpoint of this run"
    newest = max(live, key=lambda e: e.saved)
    return f"{len(live)} earlier checkpoint(s) untouched, the newest {newest.name} in {newest.location}"


def _existing(fallbacks: Sequence[str | Path]) -> list[Path]:
    """Fallback folders must exist already: a typo found at the first save, not at the critical one."""
    if isinstance(fallbacks, (str, Path)):
        raise InputError(
            "save_checkpoint: fallbacks must be a list of folders, not one string", field="fallbacks"
        )
    out = []
    for index, folder in enumerate(fallbacks):
        path = Path(os.path.expandvars(str(folder))).expanduser()
        if not path.is_dir():
            raise InputError(
                f"fallbacks[{index}]: fallback folder {path} does not exist or is not a directory "
                "(create it, or remove it from fallbacks)",
                path=path,
                field=f"fallbacks[{index}]",
            )
        out.append(path)
    return out


def _name(name: str | None, metadata: Mapping[str, Any]) -> str:
    if name is None:
        step = metadata.get("step")
        name = f"step_{int(step):09d}" if isinstance(step, int) else f"ckpt_{time.time_ns()}"
    if not NAME.match(name):
        raise InputError(
            f"save_checkpoint: name {name!r} must be letters, digits, '.', '_' or '-' (no leading dot)",
            field="name",
        )
    return name


def _expected(expected: int | None, tensors: Mapping[str, Any] | None, primary: Path) -> int:
    """The size a writer function will produce: given, else the tensors' bytes, else the last save."""
    if expected is not None:
        return int(expected)
    if tensors:
        return sum(int(getattr(t, "nbytes", 0)) for t in tensors.values()) + 2**16
    entries = manifest.collect(primary)
    return max((e.size for e in entries.values()), default=0)


def _record_init(primary: Path, fallbacks: list[str]) -> None:
    """Write the fallback list beside the primary while there is still room (first save, or a change)."""
    try:
        inits = [e for e in manifest.read(primary) if e["event"] == "init"]
        if not inits or inits[-1].get("fallbacks") != fallbacks:
            manifest.append(primary, {"event": "init", "primary": str(primary), "fallbacks": fallbacks})
    except OSError as exc:
        log.warning("checkpoint manifest beside %s not updated: %s", primary, exc)


def _try(folder, primary, name, data, writer, metadata, size, margin, reserve, check_quota):
    """One location: preflight, write, sidecar, manifest. (Attempt, Saved | None); never half a file."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        reason, space = preflight(folder, size, margin, reserve, check_quota)
    except OSError as exc:
        return Attempt(str(folder), False, _why(exc)), None
    if reason:
        return Attempt(str(folder), False, reason, space.as_dict()), None
    final, sidecar = folder / f"{name}.safetensors", folder / f"{name}.json"
    try:
        sha, written = _write(final, data, writer)
        now = time.time()
        card = {"name": name, "file": final.name, "sha256": sha, "size": written, "saved": now}
        atomic_write_json(
            sidecar,
            {
                **card,
                "format": "safetensors",
                "host": socket.gethostname(),
                "primary": str(primary),
                "metadata": metadata,
            },
        )
        event = {
            "event": "saved",
            "location": str(folder),
            "primary": str(primary),
            "sidecar": sidecar.name,
            "time": now,
            "preflight": {"free": space.free, "quota_tool": space.quota_tool, "notes": space.notes},
            **card,
        }
        manifest.append(folder, event)
    except OSError as exc:
        if exc.errno not in FALLBACK_ERRNOS:
            raise
        _remove(final, sidecar)
        return Attempt(str(folder), False, _why(exc), space.as_dict()), None
    if folder != primary:
        _mirror(primary, event)
    saved = Saved(name, final, sidecar, folder, primary, sha, written, now)
    return Attempt(str(folder), True, "", space.as_dict()), saved


def _why(exc: OSError) -> str:
    code = errno.errorcode.get(exc.errno or 0, "OSError")
    return f"{code}: {exc.strerror or exc} ({exc.filename or ''})".replace(" ()", "")


def _remove(*paths: Path) -> None:
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove %s after a failed save: %s", path, exc)


def _mirror(primary: Path, event: dict[str, Any]) -> None:
    """The primary's manifest also records a fallback save; best effort (the primary may be full)."""
    try:
        manifest.append(primary, event)
    except OSError as exc:
        log.warning(
            "checkpoint manifest beside %s not updated (%s); the fallback manifest in %s has it",
            primary,
            exc,
            event["location"],
        )


def _write(final: Path, data: tensorfile.Layout | None, writer: Writer | None) -> tuple[str, int]:
    """Temp file in the target folder, fsync, rename; returns (sha256, size)."""
    tmp = final.with_name(f".{final.name}.{os.getpid()}.{time.time_ns()}.tmp")
    try:
        if data is not None:
            sha = _write_bytes(tmp, data)
        else:
            assert writer is not None
            writer(tmp)
            sha = _fsync_and_hash(tmp)
        size = tmp.stat().st_size
        os.replace(tmp, final)
    except BaseException:
        _remove(tmp)
        raise
    # the folder is fsynced by the sidecar's atomic write that follows at once (same folder, after
    # this rename), so the rename is durable before any manifest names the file
    return sha, size


def _write_bytes(tmp: Path, data: tensorfile.Layout) -> str:
    """Stream the safetensors layout into a new temp file, hashed on the way, fsync it, then check it
    through a fresh descriptor (what is checked, and why that suffices: `tensorfile`'s doc)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        sha = tensorfile.write_hashed(fd, data.head, data.pieces)  # fsyncs too
    finally:
        os.close(fd)
    tensorfile.verify_written(tmp, data)
    return sha


def _fsync_and_hash(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb+") as handle:
        os.fsync(handle.fileno())
        while chunk := handle.read(CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def _check_notify(notify: Notify) -> None:
    if isinstance(notify, (str, bytes)):
        raise InputError(
            "save_checkpoint: notify must be an argv list (e.g. ['notify-send', 'ckpt']) or a callable, "
            "never a shell string",
            field="notify",
        )


def _record_fallback(
    saved: Saved | None, attempts: list[Attempt], primary: Path | None = None, name: str = ""
) -> None:
    """One `fallback` event per refused location, in the fallback folder's manifest (must succeed)
    and beside the primary (best effort: the primary is often the full one)."""
    primary = saved.primary if saved else primary
    name = saved.name if saved else name
    now = time.time()
    events = [
        {
            "event": "fallback",
            "name": name,
            "location": a.folder,
            "primary": str(primary),
            "time": now,
            "to": str(saved.location) if saved else None,
            "reason": a.reason,
        }
        for a in attempts
        if not a.ok
    ]
    for folder in ([saved.location] if saved else []) + [primary]:
        try:
            manifest.append(folder, *events)
        except OSError as exc:
            log.warning("checkpoint manifest in %s not updated: %s", folder, exc)


def _announce(notify: Notify, saved: Saved, attempts: list[Attempt]) -> None:
    """Tell someone a checkpoint went to a fallback: a log line, the argv hook, or the callable."""
    refused = "; ".join(f"{a.folder}: {a.reason}" for a in attempts if not a.ok)
    message = (
        f"checkpoint {saved.name} saved to FALLBACK {saved.location} (primary {saved.primary}: {refused})"
    )
    payload = {"name": saved.name, "location": str(saved.location), "path": str(saved.path)}
    tell(notify, message, {**payload, "primary": str(saved.primary), "reasons": refused})


def tell(notify: Notify, message: str, payload: dict[str, Any]) -> None:
    """A warning log line always; then the configured hook (argv list gets the message as its last
    argument; a callable gets the payload). A failing hook is logged, never raised into training."""
    log.warning(message)
    if notify is None:
        return
    try:
        if callable(notify):
            notify({**payload, "message": message})
        else:
            subprocess.run([*notify, message], timeout=60, check=False, capture_output=True)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("checkpoint notify hook %r failed: %s", notify, exc)
