"""Fingerprints of a run's inputs: what lets a re-launch or a later run reuse a result instead of rerunning.

A reused result says "nothing changed since it was checked", so a fingerprint must prove identity, not
guess it. Model and checkpoint files and training configs (`Input.whole`) and every file up to
`fingerprint.whole_file_mb` are hashed whole (sha256, streamed). Hashing a multi-GB checkpoint on every
launch would make the gate slow, so whole-file digests are kept in a `HashCache` keyed by the file's
identity (device, inode, size, mtime_ns, ctime_ns): ctime is set by the kernel on every change and
cannot be set back by a user, so a stale entry can only miss (a rehash), never match other bytes.
Data files too large to hash whole (a dataset's video shards) are taken by that same identity plus
sampled blocks; the fingerprint says so (`Fingerprint.basis`), and the record repeats it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.inputs import SECTIONS, Input
from pipeline.record.hashcache import HashCache
from pipeline.storage.files import kind_of

WHOLE_FILE_BYTES = 64 * 2**20  # default `fingerprint.whole_file_mb`
BLOCK_BYTES = 64 * 1024
SAMPLED_BLOCKS = 16  # besides the first and last block
MAX_FILES = 200_000
IMAGE_PINS = ("expect_sha256", "promotion_record", "require_promotion", "require_labels", "require_signature")


@dataclass(frozen=True)
class Fingerprint:
    """What reuse compares (`value`) and how it was measured (`basis`, for the record)."""

    value: str
    basis: str


def digest_value(value: Any) -> str:
    """sha256 of a JSON-able value in canonical form (a config section, a list of packages)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def printable(path: Path | str) -> str:
    """A path for a message: a non-UTF-8 name (bytes Python keeps as surrogates) shown as \\x escapes,
    so printing it cannot raise UnicodeEncodeError on the console."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def sampled_blocks(path: Path, size: int) -> bytes:
    """sha256 of the first and last block and `SAMPLED_BLOCKS` evenly spaced ones (never more than
    `size` bytes are read: a file that grows while it is read cannot keep the read going)."""
    hasher = hashlib.sha256()
    offsets = {0, max(0, size - BLOCK_BYTES)}
    offsets |= {size * (i + 1) // (SAMPLED_BLOCKS + 1) for i in range(SAMPLED_BLOCKS)}
    with open(path, "rb") as handle:
        for offset in sorted(offsets):
            handle.seek(offset)
            hasher.update(handle.read(min(BLOCK_BYTES, size - offset)))
    return hasher.digest()


class Fingerprinter:
    """Fingerprints files and folders; one per launch, so a file read for two stages is read once."""

    def __init__(self, cache: HashCache | None = None, whole_file_bytes: int = WHOLE_FILE_BYTES):
        self.cache = cache or HashCache(None)
        self.whole_file_bytes = whole_file_bytes
        self._memo: dict[tuple[str, bool], Fingerprint] = {}

    def path(self, path: str | Path | None, whole: bool = False) -> Fingerprint:
        """A file's or folder's fingerprint; `missing:` or `none` keeps an absent input comparable."""
        if path is None or str(path) == "":
            return Fingerprint("none", "not set")
        root = Path(path)
        if not root.exists():
            return Fingerprint(f"missing:{root}", "does not exist")
        memo = (str(root.resolve()), whole)
        if memo not in self._memo:
            self._memo[memo] = self._measure(root, whole)
        return self._memo[memo]

    def _measure(self, root: Path, whole: bool) -> Fingerprint:
        tally = Tally()
        hasher = hashlib.sha256()
        inner = root.resolve()
        for file in _walk(root) if root.is_dir() else [root]:
            try:
                hasher.update(self._entry(root, inner, file, whole, tally))
            except (OSError, RuntimeError) as exc:  # unreadable, a dangling link, a loop: name it
                name = printable(file)
                raise InputError(
                    f"{name}: cannot read it to fingerprint the input: {exc}", path=name, field="fingerprint"
                ) from exc
        return Fingerprint("sha256:" + hasher.hexdigest(), tally.basis())

    def _entry(self, root: Path, inner: Path, file: Path, whole: bool, tally: Tally) -> bytes:
        """One file's contribution: its name, then its sha256 (or identity + sampled blocks). A FIFO or
        device is recorded by kind and never opened (opening a FIFO blocks, a device never ends); a
        symlink is recorded by its target text and followed only while it stays inside the root."""
        rel = b"." if file == root else os.fsencode(file.relative_to(root))  # non-UTF-8 names as bytes
        info = file.lstat()
        head = b""
        if stat.S_ISLNK(info.st_mode):
            head = rel + b"\0link\0" + os.fsencode(os.readlink(file)) + b"\0"
            resolved = file.resolve(strict=True)  # a dangling link or a loop: OSError/RuntimeError
            if resolved != inner and inner not in resolved.parents:
                tally.other += 1
                return head  # outside the input: the readers refuse it; the link text is its fingerprint
            info, file = resolved.stat(), resolved
        if not stat.S_ISREG(info.st_mode):
            tally.other += 1
            return head + rel + f"\0{kind_of(info.st_mode)}\0".encode()
        if whole or info.st_size <= self.whole_file_bytes:
            tally.whole(info.st_size)
            return head + rel + b"\0sha256\0" + bytes.fromhex(self.cache.sha256(file, info))
        tally.sampled(info.st_size)
        identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        return head + rel + f"\0sampled\0{identity}\0".encode() + sampled_blocks(file, info.st_size)


@dataclass
class Tally:
    """How a fingerprint was measured, for the record: `sha256 of 3 files, 1.2 GB`."""

    whole_files: int = 0
    whole_bytes: int = 0
    sampled_files: int = 0
    sampled_bytes: int = 0
    other: int = 0  # FIFOs, devices, links out of the input: taken by kind or link text, never opened

    def whole(self, size: int) -> None:
        self.whole_files, self.whole_bytes = self.whole_files + 1, self.whole_bytes + size

    def sampled(self, size: int) -> None:
        self.sampled_files, self.sampled_bytes = self.sampled_files + 1, self.sampled_bytes + size

    def basis(self) -> str:
        parts = []
        if self.whole_files or not (self.sampled_files or self.other):
            parts.append(f"sha256 of {_files(self.whole_files)}, {human_bytes(self.whole_bytes)}")
        if self.sampled_files:
            size = human_bytes(self.sampled_bytes)
            parts.append(f"{_files(self.sampled_files)} ({size}) by identity + sampled blocks")
        if self.other:
            parts.append(f"{self.other:,} not a regular file (by kind or link text, never opened)")
        return "; ".join(parts)


def _files(count: int) -> str:
    return f"{count:,} file" + ("" if count == 1 else "s")


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def _walk(root: Path) -> list[Path]:
    """Every file under `root` except dot files, not descending into symlinked folders (os.walk's
    default), so a link to `/` cannot turn the walk into a crawl of the machine."""
    found: list[Path] = []
    for folder, dirs, names in os.walk(root):
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in links)
        found.extend(Path(folder) / n for n in sorted([*names, *links]) if not n.startswith("."))
        if len(found) > MAX_FILES:
            raise InputError(
                f"{root}: more than {MAX_FILES} files to fingerprint; point the input at a narrower folder",
                path=root,
            )
    return found


def digest_path(path: str | Path | None, whole: bool = True) -> str:
    """One path's fingerprint value, with no cache (a one-off: the image digest a launch records)."""
    return Fingerprinter().path(path, whole).value


@functools.lru_cache(maxsize=1)
def environment_digest() -> str:
    """The software a `container=none` job runs with: interpreter plus every installed distribution."""
    import sys

    return digest_value([sys.executable, sorted(_distributions(sys.path))])


def _distributions(paths: Iterable[str]) -> Iterator[str]:
    """`name-version` of each distribution on `paths`, from its metadata folder's name (a wheel's
    `.dist-info` is named so): reading every METADATA file instead took 0.2 s of each launch. A folder
    whose name holds no version (a source checkout's `.egg-info`) is read."""
    import importlib.metadata as metadata

    for entry in paths:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            stem, dot, kind = name.rpartition(".")
            if not dot or kind not in ("dist-info", "egg-info"):
                continue
            if "-" in stem:
                yield stem
            else:
                dist = metadata.PathDistribution(Path(entry or ".") / name)
                yield f"{dist.metadata['Name']}-{dist.version}"


# keys of a stage's config that decide whether it runs, not what it finds
NOT_FINGERPRINTED = ("reuse",)


def input_fingerprints(
    cfg: Mapping[str, Any],
    inputs: Iterable[Input | str],
    stage_cfg: Any,
    hasher: Fingerprinter | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """One fingerprint per declared input, the stage's own config section, and the software it runs in;
    returns (values, bases): what reuse compares and how each was measured."""
    hasher = hasher or Fingerprinter()
    section = {k: v for k, v in dict(stage_cfg or {}).items() if k not in NOT_FINGERPRINTED}
    image = (cfg.get("container") or {}).get("image")
    found = {
        "config": Fingerprint(digest_value(section), "the stage's config section"),
        "container": hasher.path(image, whole=True)
        if image
        else Fingerprint(environment_digest(), "the interpreter and every installed distribution"),
    }
    pins = {k: v for k, v in (cfg.get("container") or {}).items() if k in IMAGE_PINS and v}
    if pins:  # a changed pin (or promotion record) must rerun container_check on resume
        record = hasher.path(pins.get("promotion_record"), whole=True).value
        found["container_pins"] = Fingerprint(digest_value([pins, record]), "the image pins")
    for declared in inputs:
        declared = SECTIONS[declared] if isinstance(declared, str) else declared
        for key, path in declared.resolve(cfg):
            found[declared.print_name(key)] = hasher.path(path, declared.whole)
    return {k: v.value for k, v in found.items()}, {k: v.basis for k, v in found.items()}
