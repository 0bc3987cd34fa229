"""The checkpoint manifest: one JSON line per event, so nobody loses track of where a checkpoint went.

A manifest lives beside the primary location and in every fallback folder that received a checkpoint.
Each append rewrites the file atomically under the folder's lock (tmp + fsync + rename), so a reader on
another node sees the old manifest or the new one, and two writers lose no line. Events:

    init        the primary's fallback list (written at the first save, while there is still room)
    saved       a checkpoint is complete at `location` (sha256 and size of its tensor file)
    fallback    a location was refused (`reason`) and the save moved on; `saved` follows elsewhere
    promoted    a fallback checkpoint was moved back to the primary
    superseded  retention no longer keeps it; only such checkpoints may be deleted
    deleting    its files are about to be removed (logged before they are)
    deleted     its files were removed

Paths are stored relative to their `location` folder and resolved back inside it, never outside.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.storage.atomic import atomic_write_bytes, file_lock
from pipeline.storage.files import read_text

MANIFEST = "checkpoints.manifest.jsonl"
LOCK = ".checkpoints.manifest.lock"
EVENTS = ("init", "saved", "fallback", "promoted", "superseded", "deleting", "deleted")


def manifest_path(folder: Path) -> Path:
    return Path(folder) / MANIFEST


# what each event must carry (name -> (types, what a message says was expected))
TEXT, NUMBER, INT = ((str,), "text"), ((int, float), "a number"), ((int,), "an integer")
REQUIRED: dict[str, dict[str, tuple[tuple[type, ...], str]]] = {
    "saved": {"name": TEXT, "location": TEXT, "file": TEXT, "sidecar": TEXT, "sha256": TEXT, "size": INT},
    "promoted": {"name": TEXT, "location": TEXT},
    "superseded": {"name": TEXT},
    "deleting": {"name": TEXT},
    "deleted": {"name": TEXT},
}
MAX_MANIFEST_BYTES = 256 * 2**20


def _checked(event: dict[str, Any], path: Path, number: int) -> dict[str, Any]:
    """An event whose fields have the types the code reads them as; else one named line."""
    fields = {**REQUIRED.get(event["event"], {}), "time": NUMBER}
    if event["event"] == "init":
        fields["fallbacks"] = ((list,), "a list of folders")
    for name, (types, what) in fields.items():
        value = event.get(name)
        if name == "time" and value is None:
            continue
        if not isinstance(value, types) or isinstance(value, bool):
            raise InputError(
                f"{path}: line {number}: field '{name}' of a '{event['event']}' event: expected {what}, "
                f"got {str(value)[:40]!r}",
                path=path,
                field=f"line {number}.{name}",
            )
    return event


def read(folder: Path) -> list[dict[str, Any]]:
    """Every event of the manifest in `folder` (none when there is no manifest yet): a regular UTF-8
    file of bounded size (a FIFO or /dev/zero is named, never read), each line's fields typed."""
    path = manifest_path(folder)
    if not path.exists() and not path.is_symlink():
        return []
    text = read_text(path, "a checkpoint manifest (JSON lines)", MAX_MANIFEST_BYTES)
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{path}: line {number} is not valid JSON ({exc.msg}); expected one manifest event per line",
                path=path,
                field=f"line {number}",
            ) from exc
        if not isinstance(event, dict) or event.get("event") not in EVENTS:
            raise InputError(
                f"{path}: line {number} has no known 'event' (expected one of {', '.join(EVENTS)})",
                path=path,
                field=f"line {number}.event",
            )
        events.append(_checked(event, path, number))
    return events


def append(folder: Path, *events: dict[str, Any]) -> Path:
    """Append events to the manifest in `folder`: atomically, under the folder's lock."""
    path = manifest_path(folder)
    stamped = [{"time": time.time(), "pid": os.getpid(), **e} for e in events]
    lines = "".join(json.dumps(e, sort_keys=True, allow_nan=False) + "\n" for e in stamped)
    with file_lock(Path(folder) / LOCK):
        try:
            old = path.read_bytes()
        except FileNotFoundError:
            old = b""
        atomic_write_bytes(path, old + lines.encode("utf-8"))
    return path


@dataclass
class Saved:
    """A complete checkpoint and where it is: returned by `save_checkpoint` (with the attempts it made)
    and by `latest_checkpoint` (sha256 verified). One class for both, so the two never drift apart."""

    name: str
    path: Path
    sidecar: Path
    location: Path
    primary: Path
    sha256: str
    size: int
    saved: float = 0.0
    attempts: list[Any] = field(default_factory=list)

    @property
    def fallback(self) -> bool:
        return Path(self.location) != Path(self.primary)


@dataclass
class Entry:
    """Where one checkpoint is now, folded from every event that names it."""

    name: str
    location: str
    file: str
    sidecar: str
    sha256: str
    size: int
    saved: float
    state: str = "present"  # present | superseded | deleted
    history: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return inside(Path(self.location), self.file)

    @property
    def sidecar_path(self) -> Path:
        return inside(Path(self.location), self.sidecar)


def inside(root: Path, relative: str) -> Path:
    """`root/relative`, refusing a manifest path that escapes its folder (.., absolute, symlink)."""
    root = Path(root).resolve()
    candidate = (root / relative).resolve()
    if candidate.parent != root:
        raise InputError(
            f"{root / MANIFEST}: file '{relative}' resolves to {candidate}, outside its checkpoint folder",
            path=root / MANIFEST,
            field="file",
        )
    return candidate


def fold(events: Iterable[dict[str, Any]]) -> dict[str, Entry]:
    """Replay events in order: the current location and state of every checkpoint, by name."""
    out: dict[str, Entry] = {}
    for event in sorted(events, key=lambda e: e.get("time", 0.0)):
        kind, name = event["event"], event.get("name")
        if kind == "saved":
            out[name] = Entry(
                name=name,
                location=event["location"],
                file=event["file"],
                sidecar=event["sidecar"],
                sha256=event["sha256"],
                size=int(event["size"]),
                saved=float(event.get("saved", event["time"])),
            )
        elif kind == "promoted" and name in out:
            out[name].location = event["location"]
        elif kind in ("superseded", "deleted") and name in out:
            out[name].state = kind
        if name in out:
            out[name].history.append(f"{kind}@{event.get('location', '')}")
    return out


def fallback_dir(folder: Path, primary: Path) -> Path:
    """A fallback folder's subfolder for this primary, so runs sharing /tmp never collide by name."""
    primary = Path(primary).resolve()
    digest = hashlib.sha256(str(primary).encode()).hexdigest()[:10]
    return Path(folder).resolve() / f"ckpt-{primary.name or 'root'}-{digest}"


def fallback_folders(primary: Path, extra: Iterable[Path] = ()) -> list[Path]:
    """The primary's fallbacks: those in its `init` events, those any event moved a checkpoint to,
    and any the caller names (a node whose primary manifest could not be written)."""
    seen: list[Path] = []
    for event in read(primary):
        for folder in event.get("fallbacks", []) + [event.get("location")]:
            if folder and Path(folder) != Path(primary) and Path(folder) not in seen:
                seen.append(Path(folder))
    for folder in extra:
        sub = fallback_dir(folder, primary)
        if sub not in seen:
            seen.append(sub)
    return seen


def collect(primary: Path, fallbacks: Iterable[Path] = ()) -> dict[str, Entry]:
    """Every checkpoint of `primary`, from its own manifest and the fallback manifests that name it."""
    primary = Path(primary).resolve()
    events = list(read(primary))
    seen = {json.dumps(e, sort_keys=True) for e in events}
    for folder in fallback_folders(primary, fallbacks):
        if not manifest_path(folder).exists():
            continue
        for event in read(folder):
            key = json.dumps(event, sort_keys=True)
            if event.get("primary") == str(primary) and key not in seen:
                seen.add(key)
                events.append(event)
    return fold(events)
