"""Checkpoint provenance: the sha256 of every checkpoint file, compared with what the team pinned.

Reference 004's first hour went into proving the evaluated checkpoint was the merged one (hashes vs the
merge log). Here that is the first thing the stage does for every model: stream each file through
sha256 (8 MiB chunks, bounded memory), then compare with `expected_sha256` (a file's digest, or for a
directory the digest of its `path sha256` listing, see `tree_digest`) or a manifest / merge-log file of
`path sha256` lines (either order, `sha256sum` output works). Manifest paths are relative to the
checkpoint root and may not leave it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pipeline.errors import InputError
from pipeline.readers.sif import normalize_sha256
from pipeline.storage.digest import sha256_file
from pipeline.storage.files import read_text

HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


def hash_tree(root: Path) -> dict[str, str]:
    """`relative path -> sha256` of every file under a checkpoint directory (or the one file)."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        return {
            root.name: sha256_file(root, what="a checkpoint file")
        }  # a FIFO or device: named there, never opened
    if not root.is_dir():
        raise InputError(f"{root}: checkpoint not found (expected a file or a directory)", path=root)
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    return {p.relative_to(root).as_posix(): sha256_file(p, what="a checkpoint file") for p in files}


def tree_digest(hashes: dict[str, str]) -> str:
    """One digest for a directory: sha256 of its sorted `path sha256` lines (what expected_sha256 pins)."""
    listing = "".join(f"{path} {hashes[path]}\n" for path in sorted(hashes))
    return hashlib.sha256(listing.encode()).hexdigest()


def read_manifest(path: Path) -> dict[str, str]:
    """`path sha256` (or `sha256  path`) lines; '#' comments and blank lines skipped."""
    path = Path(path)
    lines = read_text(path, "a checkpoint manifest of 'path sha256' lines").splitlines()  # bounded, UTF-8
    out: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        digests = [p for p in parts if HEX64.match(p)]
        names = [p.lstrip("*") for p in parts if not HEX64.match(p)]
        if len(parts) != 2 or len(digests) != 1:
            raise InputError(
                f"{path}: line {number}: expected 'path sha256' (64 hex digits), got {line.strip()!r}",
                path=path,
                field=f"line {number}",
            )
        out[_inside(names[0], path, number)] = digests[0].lower()
    return out


def _inside(name: str, manifest: Path, number: int) -> str:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise InputError(
            f"{manifest}: line {number}: path {name!r} leaves the checkpoint root",
            path=manifest,
            field=f"line {number}",
        )
    return rel.as_posix().removeprefix("./")


@dataclass
class Provenance:
    """What one model's hashes showed: `ok` None means nothing was pinned to compare against."""

    path: str
    hashes: dict[str, str]
    digest: str
    ok: bool | None
    expected: str | None = None
    mismatched: dict[str, dict[str, str | None]] = field(default_factory=dict)
    unlisted: list[str] = field(default_factory=list)

    def evidence(self) -> dict[str, object]:
        return {
            "path": self.path,
            "sha256": self.hashes,
            "tree_sha256": self.digest,
            "expected": self.expected,
            "mismatched": self.mismatched,
            "unlisted": self.unlisted,
        }


def verify(path: Path, expected_sha256: str | None, manifest: Path | None) -> Provenance:
    """Hash the checkpoint and compare: a digest for a file or the tree, and/or the listed files."""
    path = Path(path)
    hashes = hash_tree(path)
    digest = next(iter(hashes.values())) if path.is_file() else tree_digest(hashes)
    ok: bool | None = None
    mismatched: dict[str, dict[str, str | None]] = {}
    unlisted: list[str] = []
    if expected_sha256:  # `<hex>` or `sha256:<hex>`, as container_check takes an image pin
        expected_sha256 = normalize_sha256(expected_sha256, "expected_sha256")
        ok = digest == expected_sha256
        if not ok:
            mismatched["<checkpoint>"] = {"expected": expected_sha256, "actual": digest}
    if manifest is not None:
        listed = read_manifest(manifest)
        for name, want in listed.items():
            have = hashes.get(name if path.is_dir() else PurePosixPath(name).name)
            if have != want:
                mismatched[name] = {"expected": want, "actual": have}
        unlisted = sorted(set(hashes) - set(listed)) if path.is_dir() else []
        ok = (ok is not False) and not mismatched
    where = str(manifest) if manifest is not None else expected_sha256
    return Provenance(str(path), hashes, digest, ok, where, mismatched, unlisted)
