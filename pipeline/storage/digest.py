"""The project's one streamed sha256, in a module that imports only the standard library: the SIF reader
uses it inside images whose Python has no third-party packages (the container_check probe)."""

from __future__ import annotations

import hashlib
from pathlib import Path

HASH_CHUNK = 8 * 2**20  # bytes per read while hashing (larger gained nothing measurable)


def sha256_read(
    path: str | Path, offset: int = 0, size: int | None = None, what: str | None = None
) -> tuple[str, int]:
    """(streamed sha256 as `sha256sum` prints it, bytes read) of a file, or of `size` bytes from `offset`.
    Never more than `size` bytes, nor, where `what` names the file, more than it held when it was checked
    to be a regular file (a FIFO or a device is refused by name, never opened): a file growing while it is
    read cannot keep the read going. The one streamed hash of the project."""
    if what is not None:
        from pipeline.storage.files import regular_file  # only when a file is checked (files imports yaml)

        held = max(regular_file(Path(path), what).st_size - offset, 0)
        size = held if size is None else min(size, held)
    hasher, done = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        handle.seek(offset)
        while size is None or done < size:
            chunk = handle.read(HASH_CHUNK if size is None else min(HASH_CHUNK, size - done))
            if not chunk:
                break
            hasher.update(chunk)
            done += len(chunk)
    return hasher.hexdigest(), done


def sha256_file(path: str | Path, offset: int = 0, size: int | None = None, what: str | None = None) -> str:
    """`sha256_read`'s digest alone."""
    return sha256_read(path, offset, size, what)[0]
