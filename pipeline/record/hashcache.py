"""Whole-file sha256 digests remembered by file identity, so an unchanged checkpoint is read once per change.

The key is (device, inode) and an entry holds (size, mtime_ns, ctime_ns, sha256): a lookup matches only
when all of them are equal now. The kernel sets ctime on every write, rename or chmod and no user call
can set it back, so a file rewritten in place (same size, mtime restored with `touch -d`) misses the
cache and is hashed again. One race remains: a write within the same timestamp tick as the stat that
an entry was made from. An entry is therefore kept only for files whose mtime and ctime are older than
`RACY_NS` when hashing starts (git's "racy clean" rule); a file changed in the last two seconds is
simply hashed again next time.

The cache lives in the audit history (`.hashcache.json`), next to the records whose fingerprints it
serves. With `audit.key_file` it carries an HMAC: an entry planted by someone without the key (mapping a
changed file's identity to the old digest) is never used. A cache that cannot be read or written costs
a rehash, never a launch.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from pipeline.record import integrity
from pipeline.storage import atomic_write_json, file_lock
from pipeline.storage.digest import sha256_file

log = logging.getLogger(__name__)
CACHE_FILE = ".hashcache.json"
LOCK_FILE = ".hashcache.lock"
MAX_CACHE_BYTES = 64 * 2**20
MAX_ENTRIES = 400_000
RACY_NS = 2_000_000_000


class HashCache:
    """The cache of one launch: loaded from `folder` (None: in memory only), saved back by `save()`."""

    def __init__(self, folder: Path | None, key: bytes | None = None):
        self.folder, self.key = folder, key
        self.entries: dict[str, list[Any]] = self._load() if folder else {}
        self.fresh: dict[str, list[Any]] = {}
        self.hits = self.misses = self.bytes_read = 0

    def sha256(self, path: Path, info: os.stat_result) -> str:
        """The file's whole sha256, from the cache when its identity is unchanged."""
        ident = f"{info.st_dev}:{info.st_ino}"
        stamp = [info.st_size, info.st_mtime_ns, info.st_ctime_ns]
        entry = self.fresh.get(ident) or self.entries.get(ident)
        if entry is not None and entry[:3] == stamp:
            self.hits += 1
            return str(entry[3])
        started = time.time_ns()
        hexdigest = sha256_file(path, size=info.st_size)
        self.misses += 1
        self.bytes_read += info.st_size
        if max(info.st_mtime_ns, info.st_ctime_ns) < started - RACY_NS:
            self.fresh[ident] = [*stamp, hexdigest]
        return hexdigest

    def _payload(self, entries: dict[str, list[Any]]) -> dict[str, Any]:
        body = {"version": 1, "entries": entries}
        return {**body, "hmac": integrity.sign(self.key, integrity.digest(body))} if self.key else body

    def _load(self) -> dict[str, list[Any]]:
        assert self.folder is not None
        path = self.folder / CACHE_FILE
        if not path.exists():
            return {}
        try:
            data = integrity.load_json(path, MAX_CACHE_BYTES, inside=self.folder)
            entries = data["entries"]
            if not isinstance(entries, dict):
                raise integrity.Unreadable("entries is not an object")
        except (integrity.Unreadable, KeyError, TypeError) as exc:
            log.warning("hash cache %s ignored (everything is hashed again): %s", path, exc)
            return {}
        body = {"version": data.get("version"), "entries": entries}
        if self.key and not integrity.signed(self.key, integrity.digest(body), data.get("hmac")):
            log.warning("hash cache %s ignored: no valid HMAC for audit.key_file", path)
            return {}
        return {k: v for k, v in entries.items() if isinstance(v, list) and len(v) == 4}

    def save(self) -> None:
        """Merge this launch's new entries into the file on disk (under its lock, atomically)."""
        if self.folder is None or not self.fresh:
            return
        try:
            with file_lock(self.folder / LOCK_FILE):
                merged = {**self._load(), **self.fresh}
                if len(merged) > MAX_ENTRIES:  # keep this launch's, then the most recent others
                    keep = list(merged.items())[-MAX_ENTRIES:]
                    merged = {**dict(keep), **self.fresh}
                atomic_write_json(self.folder / CACHE_FILE, self._payload(merged))
        except (OSError, TimeoutError) as exc:
            log.warning("hash cache not saved in %s (next launch hashes again): %s", self.folder, exc)
