"""Launch-time guards for a run's folders: a run id that is a name, folders that accept writes and have
room, one launch per run id at a time.

Kept apart from `launch` so that the config checks there stay about the config: these are about the
filesystem the run will write to (full, read-only, shared with a concurrent launch).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from omegaconf import DictConfig

from pipeline.errors import FULL_ERRNOS, ConfigError, InputError, disk_full
from pipeline.record.audit import audit_mode
from pipeline.record.runfolder import RunFolder
from pipeline.storage import LockHeld, exclusive_lock

MIN_FREE_KEY = "min_free_mb"


def validate_run_folders(cfg: DictConfig) -> None:
    """Before anything is written: the run id is a name, `audit_mode` parses, and the run, audit and
    checkpoint folders are writable with at least `min_free_mb` free (a full or read-only filesystem is
    a one-line error naming the key, not a half-written run)."""
    if cfg.get("run_id") is not None:
        RunFolder.of(cfg.output_root, str(cfg.run_id))  # raises ConfigError("run_id") for a path
    try:
        audit_mode(cfg.get("audit_mode"))
    except ValueError as exc:
        raise ConfigError("audit_mode", str(exc)) from None
    floor = cfg.get(MIN_FREE_KEY, 64)
    if not isinstance(floor, (int, float)) or isinstance(floor, bool) or floor < 0:
        raise ConfigError(MIN_FREE_KEY, f"expected a number of MiB >= 0, got {floor!r}")
    for key in ("output_root", "audit_dir", "checkpoint_dir"):
        if cfg.get(key):
            check_writable(key, Path(str(cfg[key])), float(floor))


def check_writable(key: str, path: Path, min_free_mb: float) -> None:
    """The folder, or the nearest existing folder above it, accepts new files and has room."""
    existing = path.resolve()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(key, f"{existing} is not a directory")
    stat = os.statvfs(existing)
    if stat.f_flag & os.ST_RDONLY:
        raise ConfigError(key, f"{existing} is on a read-only filesystem")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(key, f"{existing} is not writable by this user")
    free_mb = stat.f_bavail * stat.f_frsize / 2**20
    if free_mb < min_free_mb:
        raise ConfigError(
            key, f"{existing} has {free_mb:.1f} MiB free, less than {MIN_FREE_KEY}={min_free_mb:g} MiB"
        )


@contextlib.contextmanager
def run_lock(folder: RunFolder, created: list[Path]) -> Iterator[None]:
    """One launch per run id at a time: a second one is refused with the holder's pid (exit 2). The
    lock is `lockf` on `<run>/.launch.lock`: the kernel drops it when the holder dies, even by SIGKILL."""
    try:
        held = exclusive_lock(folder.lock_file)
        held.__enter__()
    except LockHeld as exc:
        raise ConfigError(
            "run_id",
            f"run {folder.run_id} is being launched by pid {exc.pid or 'unknown'} (lock {exc.path}); "
            "wait for it to end, or choose another run_id",
        ) from None
    except OSError as exc:
        folder.discard(created)
        if exc.errno in FULL_ERRNOS:
            kept = f"nothing was queued and {folder.root} was removed"
            raise disk_full(folder.root, exc, needed=None, kept=kept) from None
        raise InputError(f"cannot lock the run folder {folder.lock_file}: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        held.__exit__(None, None, None)
