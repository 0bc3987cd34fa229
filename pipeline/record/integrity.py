"""Digests and keys for what the audit history keeps: canonical JSON, the team's HMAC key, bounded reads.

The audit history is a folder many people can write. Its files are read as untrusted: only regular
files (a FIFO named `*_audit.json` would block a launch forever, a symlink to `/dev/zero` reads without
end since a device's `st_size` is 0), never past a cap whatever `st_size` says, never through a link
that leaves the folder, and JSON parsed with a nesting limit. Content is proven with a sha256 of its
canonical form; with `audit.key_file` set, with an HMAC only key holders can make.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError
from pipeline.storage.files import kind_of

MAX_DEPTH = 64  # a record is a handful of levels deep; evidence a few more
MAX_KEY_BYTES = 4096
OPEN, CLOSE = b"[{", b"]}"
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


class Unreadable(Exception):
    """Why a file of the history could not be taken (one line, for the record and the log)."""


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def sign(key: bytes, text: str) -> str:
    return "hmac-sha256:" + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def signed(key: bytes, text: str, signature: object) -> bool:
    return isinstance(signature, str) and hmac.compare_digest(sign(key, text), signature)


def load_key(path: str | Path | None) -> bytes | None:
    """`audit.key_file`: the team's secret (any bytes, surrounding whitespace ignored); None: no key."""
    if not path:
        return None
    try:
        raw = read_bounded(Path(path), MAX_KEY_BYTES)
    except Unreadable as exc:
        raise ConfigError("audit.key_file", f"{path}: {exc}") from None
    key = raw.strip()
    if len(key) < 16:
        raise ConfigError("audit.key_file", f"{path}: {len(key)} bytes; a key needs at least 16")
    return key


def read_bounded(path: Path, max_bytes: int, inside: Path | None = None) -> bytes:
    """A regular file's bytes, at most `max_bytes`; a link is followed only while it stays `inside`."""
    if inside is not None and path.is_symlink():
        target = path.resolve()
        if not target.is_relative_to(inside.resolve()):
            raise Unreadable(f"a symlink to {target}, outside {inside}; not followed")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of blocking
    except OSError as exc:
        raise Unreadable(f"cannot open it: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(f"is {kind_of(info.st_mode)}, not a regular file; not read")
        data = os.read(fd, max_bytes + 1)
        while len(data) <= max_bytes and (more := os.read(fd, max_bytes + 1 - len(data))):
            data += more
    except OSError as exc:
        raise Unreadable(f"cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise Unreadable(f"larger than {max_bytes} bytes; not one of ours")
    return data


def json_depth(raw: bytes) -> int:
    """The deepest nesting of `[`/`{` outside strings (linear, vectorised, no recursion)."""
    import numpy as np  # imported here: every job and the launch import this module, few read a record

    chars = np.frombuffer(_STRING.sub(b'""', raw), dtype=np.uint8)
    opening, closing = np.frombuffer(OPEN, dtype=np.uint8), np.frombuffer(CLOSE, dtype=np.uint8)
    steps = np.isin(chars, opening).astype(np.int32) - np.isin(chars, closing).astype(np.int32)
    return int(np.cumsum(steps).max(initial=0))


def load_json(path: Path, max_bytes: int, inside: Path | None = None) -> Any:
    """A JSON file of the shared history: bounded, regular, not too deep, UTF-8; else `Unreadable`."""
    raw = read_bounded(path, max_bytes, inside)
    if json_depth(raw) > MAX_DEPTH:
        raise Unreadable(f"JSON nested deeper than {MAX_DEPTH} levels; not parsed")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Unreadable(f"not valid JSON: {exc}") from None
