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


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n")


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
