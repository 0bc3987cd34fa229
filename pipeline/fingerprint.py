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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import InputError

SMALL_FILE_BYTES = 4 * 1024 * 1024
EDGE_BYTES = 1024 * 1024
MAX_FILES = 200_000
IMAGE_PINS = ("expect_sha256", "promotion_record", "require_promotion", "require_labels", "require_signature")


def digest_value(value: Any) -> str:
    """sha256 of a JSON-able value in canonical form (a config section, a list of packages)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _hash_file(path: Path, size: int, hasher: Any) -> None:
    with open(path, "rb") as handle:
        if size <= SMALL_FILE_BYTES:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                hasher.update(chunk)
            return
        hasher.update(handle.read(EDGE_BYTES))
        handle.seek(size - EDGE_BYTES)
        hasher.update(handle.read(EDGE_BYTES))


def digest_path(path: str | Path | None) -> str:
    """Fingerprint of a file or folder; `missing:` or `none` keeps an absent input comparable."""
    if path is None or str(path) == "":
        return "none"
    root = Path(path)
    if not root.exists():
        return f"missing:{root}"
    hasher = hashlib.sha256()
    files = [root] if root.is_file() else _walk(root)
    for file in files:
        try:
            size = file.stat().st_size
            rel = "." if file == root else file.relative_to(root).as_posix()
            hasher.update(f"{rel}\0{size}\0".encode())
            _hash_file(file, size, hasher)
        except OSError as exc:  # unreadable file (permissions, a dangling link): name it
            raise InputError(f"{file}: cannot read it to fingerprint the input: {exc}", path=file) from exc
    return "sha256:" + hasher.hexdigest()


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(Path(folder) / n for n in sorted(names) if not n.startswith("."))
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
