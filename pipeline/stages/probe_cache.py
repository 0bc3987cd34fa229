"""container_check's measurements of a node (torch and CUDA, the GL renderer), kept per node and image.

Importing torch and opening a GL context cost seconds in every launch's first job, yet they measure the
same thing until the host, the image or the installed software changes. So a measurement is kept in one
small JSON file under the output root (`runfolder.probe_cache_file`), under the digest of exactly what it
depends on: the host's identity (name, machine id, boot id: a driver update needs a reboot), the image's
digest, the interpreter and every installed distribution with its version, and the environment the
probes read (visible GPUs, library path, GL platform). While that digest matches, the measurement is
taken from the file and the row says so, with the time it was measured; another torch, another image or
another node gives another digest and is measured again. Only the facts are kept, never a verdict: the
row is judged again against today's config. A failed probe is not kept (it may be passing trouble), and
an entry that is not exactly what this module writes is ignored and measured again.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.record.fingerprint import digest_value, environment_digest
from pipeline.storage import atomic_write_json, file_lock
from pipeline.storage.files import parse_json, read_text

SCHEMA = "preflight.probe_cache/1"
MAX_BYTES = 1 << 20  # a cache past this is not ours: ignored, and rewritten with this launch's entry
MAX_ENTRIES = 64  # newest kept: one per node, image and software a team launches on
# what the torch and GL probes read from the environment besides the software
PROBE_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "PYOPENGL_PLATFORM",
    "__EGL_VENDOR_LIBRARY_FILENAMES",
)
_IDENTITY_FILES = ("/etc/machine-id", "/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class Probed:
    """One probe's facts, and whether they were measured now or taken from the cache (and when)."""

    facts: dict[str, Any]
    measured_at: str  # ISO 8601, UTC
    reused: bool
    digest: str

    def evidence(self) -> dict[str, Any]:
        return {"reused": self.reused, "measured_at": self.measured_at, "digest": self.digest}

    def note(self) -> str:
        """What the row's message adds: nothing when measured now."""
        if not self.reused:
            return ""
        return f" (measured {self.measured_at[:19]}Z, reused: same host, image and installed packages)"


def host_identity() -> dict[str, str]:
    """The node as the probes see it: its name, machine id and boot id (where readable)."""
    found = {"hostname": socket.gethostname()}
    for name in _IDENTITY_FILES:
        try:
            found[name] = Path(name).read_text(encoding="ascii", errors="replace").strip()[:128]
        except OSError:
            found[name] = ""
    return found


def probe_digest(kind: str, image: str | None, **extra: Any) -> str:
    """The key a measurement is kept under: everything it depends on, nothing it does not."""
    return digest_value(
        {
            "kind": kind,
            "host": host_identity(),
            "image": image,
            "software": environment_digest(),  # the interpreter and every installed distribution
            "env": {name: os.environ.get(name) for name in PROBE_ENV},
            **extra,
        }
    )


def probed(
    path: Path | None, digest: str, measure: Callable[[], tuple[dict[str, Any], bool]], reuse: bool = True
) -> Probed:
    """The facts kept under `digest` in the cache at `path`, else `measure()`d now and kept if it says
    the probe succeeded. `path` None or `reuse` false: measured now, and kept for later launches."""
    if path is not None and reuse:
        entry = read_cache(path).get(digest)
        if entry is not None:
            return Probed(entry["facts"], entry["measured_at"], True, digest)
    facts, ok = measure()
    now = dt.datetime.now(dt.UTC).isoformat()
    if path is not None and ok:
        _keep(path, digest, facts, now)
    return Probed(facts, now, False, digest)


def read_cache(path: Path) -> dict[str, dict[str, Any]]:
    """The valid entries of the cache file; a missing, oversized or malformed file has none."""
    try:
        doc = parse_json(read_text(path, "a probe cache", MAX_BYTES), path, "a probe cache")
    except (InputError, OSError):
        return {}
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("entries"), dict):
        return {}
    return {k: e for k, e in doc["entries"].items() if _valid(e)}


def _valid(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("facts"), dict)
        and isinstance(entry.get("measured_at"), str)
        and _parses(entry["measured_at"])
    )


def _parses(stamp: str) -> bool:
    try:
        dt.datetime.fromisoformat(stamp)
    except ValueError:
        return False
    return True


def _keep(path: Path, digest: str, facts: dict[str, Any], measured_at: str) -> None:
    """Add one entry (under a lock, atomically: jobs on many nodes share the file); a cache that cannot
    be written is no failure of the check, only a measurement the next launch repeats."""
    try:
        with file_lock(path.with_name(path.name + ".lock"), timeout_s=10):
            entries = read_cache(path)
            entries[digest] = {"facts": facts, "measured_at": measured_at}
            newest = sorted(entries.items(), key=lambda item: item[1]["measured_at"])[-MAX_ENTRIES:]
            atomic_write_json(path, {"schema": SCHEMA, "entries": dict(newest)})
    except (OSError, TimeoutError):
        return
