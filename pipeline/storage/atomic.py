"""Writes that survive a crash or a concurrent writer on a shared filesystem.

Every file the pipeline leaves behind goes through `atomic_write_*`: a reader sees the old file or the
new one, never half of either (tmp file in the same folder + fsync + rename + fsync of the folder).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def current_umask() -> int:
    """The process umask, read without changing it where Linux allows (`os.umask` is process-wide and
    racy with threads)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> Path:
    """`mode`: the file's permission bits; default `0o666` less the umask, as `open()` would create it
    (mkstemp's 0600 would hide a shared audit history from teammates)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, (0o666 & ~current_umask()) if mode is None else mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno and exc.filename is None:  # ENOSPC names no file
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), mode)


def atomic_write_json(path: Path, data: Any, mode: int | None = None) -> Path:
    text = json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n"
    return atomic_write_text(path, text, mode)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on a directory
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def file_lock(path: Path, timeout_s: float = 120.0) -> Iterator[None]:
    """An exclusive advisory lock (POSIX `lockf`, which NFSv4 and Lustre honour across nodes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o664)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    raise TimeoutError(f"could not lock {path} within {timeout_s:.0f} s") from exc
                time.sleep(0.02)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.lockf(fd, fcntl.LOCK_UN)
        os.close(fd)


class LockHeld(OSError):
    """Another process holds the lock; `pid` is the holder as it wrote itself into the lock file."""

    def __init__(self, path: Path, pid: int | None):
        super().__init__(errno.EAGAIN, f"{path} is locked by pid {pid if pid else 'unknown'}")
        self.path, self.pid = Path(path), pid


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """A non-blocking exclusive lock (`lockf`) whose holder writes its pid into the lock file, so that a
    second process is told who holds it (`LockHeld.pid`) instead of waiting. The kernel releases it when
    the holder dies, even by SIGKILL."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            raise LockHeld(path, int(text) if text.isdigit() else None) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.lockf(fd, fcntl.LOCK_UN)
        os.close(fd)
