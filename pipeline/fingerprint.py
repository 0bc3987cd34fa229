"""Fingerprints of a run's inputs, so a re-launch reruns only the stages whose inputs changed.

Hashing a multi-terabyte dataset on the login node is not an option, so a folder's fingerprint is its
file list with sizes, the full content of small files (metadata, configs, stats) and the first and
last MiB of large ones. That catches what users actually change (new stats, re-exported episodes,
a new checkpoint) at the cost of one read per small file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.readers.files import kind_of

SMALL_FILE_BYTES = 4 * 1024 * 1024
EDGE_BYTES = 1024 * 1024
MAX_FILES = 200_000
IMAGE_PINS = ("expect_sha256", "promotion_record", "require_promotion", "require_labels", "require_signature")


def digest_value(value: Any) -> str:
    """sha256 of a JSON-able value in canonical form (a config section, a list of packages)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _hash_file(path: Path, size: int, hasher: Any) -> None:
    """Small files whole, large ones by their edges; never more than `size` bytes (a file that grows
    while it is read, or a /proc-style file, cannot keep the read going)."""
    with open(path, "rb") as handle:
        if size <= SMALL_FILE_BYTES:
            hasher.update(handle.read(size))
            return
        hasher.update(handle.read(EDGE_BYTES))
        handle.seek(size - EDGE_BYTES)
        hasher.update(handle.read(EDGE_BYTES))


def _entry(root: Path, inner: Path, file: Path, hasher: Any) -> None:
    """One file's contribution: its name and size, then its bytes if it is a regular file inside the
    root. A FIFO or device is recorded by kind and never opened (opening a FIFO blocks, a device never
    ends); a symlink is recorded by its target text and followed only while it stays inside the root."""
    rel = b"." if file == root else os.fsencode(file.relative_to(root))  # non-UTF-8 names hash as bytes
    info = file.lstat()
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(file)
        hasher.update(rel + b"\0link\0" + os.fsencode(target) + b"\0")
        resolved = file.resolve(strict=True)  # a dangling link or a loop: OSError/RuntimeError, named
        if resolved != inner and inner not in resolved.parents:
            return  # outside the input: the readers refuse it; the link text is its fingerprint
        info = resolved.stat()
        file = resolved
    if not stat.S_ISREG(info.st_mode):
        hasher.update(rel + f"\0{kind_of(info.st_mode)}\0".encode())
        return
    hasher.update(rel + f"\0{info.st_size}\0".encode())
    _hash_file(file, info.st_size, hasher)


def printable(path: Path | str) -> str:
    """A path for a message: a non-UTF-8 name (bytes Python keeps as surrogates) shown as \\x escapes,
    so printing it cannot raise UnicodeEncodeError on the console."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def digest_path(path: str | Path | None) -> str:
    """Fingerprint of a file or folder; `missing:` or `none` keeps an absent input comparable."""
    if path is None or str(path) == "":
        return "none"
    root = Path(path)
    if not root.exists():
        return f"missing:{root}"
    inner = root.resolve()
    hasher = hashlib.sha256()
    files = _walk(root) if root.is_dir() else [root]
    for file in files:
        try:
            _entry(root, inner, file, hasher)
        except (OSError, RuntimeError) as exc:  # unreadable, a dangling link, a symlink loop: name it
            name = printable(file)
            raise InputError(
                f"{name}: cannot read it to fingerprint the input: {exc}", path=name, field="fingerprint"
            ) from exc
    return "sha256:" + hasher.hexdigest()


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


@functools.lru_cache(maxsize=1)
def environment_digest() -> str:
    """The software a `container=none` job runs with: interpreter plus every installed distribution."""
    import importlib.metadata as metadata
    import sys

    dists = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    return digest_value([sys.executable, dists])


def input_fingerprints(cfg: Mapping[str, Any], inputs: tuple[str, ...], stage_cfg: Any) -> dict[str, str]:
    """One digest per declared input, the stage's own config section, and the software it runs in."""
    image = (cfg.get("container") or {}).get("image")
    prints = {
        "config": digest_value(stage_cfg),
        "container": digest_path(image) if image else environment_digest(),
    }
    pins = {k: v for k, v in (cfg.get("container") or {}).items() if k in IMAGE_PINS and v}
    if pins:  # a changed pin (or promotion record) must rerun container_check on resume
        prints["container_pins"] = digest_value([pins, digest_path(pins.get("promotion_record"))])
    for kind in inputs:
        prints[kind] = digest_path((cfg.get(kind) or {}).get("path"))
    return prints
