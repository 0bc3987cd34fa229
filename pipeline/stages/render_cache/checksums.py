"""Checksums that are checked: a cache's or release's own `SHA256SUMS`, and the team's pin on a whole folder.

A frames file that no longer matches the checksum list shipped beside it is not the cache the release
notes describe, whatever its shape; and a sampled re-render cannot prove every byte. So every file the
list names is hashed (streamed) and compared, and `stages.render_cache.cache_sha256` / `release_sha256`
(in the stage's config, so a changed pin changes its fingerprint and is never answered by reuse) pin the
whole folder: the sha256 of its sorted `path sha256` lines (every regular file but dot files),
the number a team writes in its release notes. A mismatch is hard.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath

from pipeline.errors import InputError
from pipeline.readers.sif import normalize_sha256
from pipeline.record.records import Check, Rows
from pipeline.storage.digest import sha256_file
from pipeline.storage.files import read_text

ROWS = Rows("render_cache", "cache")
SUMS = "SHA256SUMS"
LINE = re.compile(r"^([0-9a-fA-F]{64})\s+\*?(.+)$")


def read_sums(root: Path) -> dict[str, str]:
    """`relative path -> sha256` from `root/SHA256SUMS` (sha256sum's format); paths stay inside root."""
    path = root / SUMS
    out: dict[str, str] = {}
    for number, line in enumerate(read_text(path, "a SHA256SUMS list").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = LINE.match(line.strip())
        name = PurePosixPath(match.group(2)) if match else None
        if match is None or name is None or name.is_absolute() or ".." in name.parts:
            raise InputError(
                f"{path}: line {number}: expected '<sha256>  <relative path>', got {line.strip()[:80]!r}",
                path=path,
                field=f"line {number}",
            )
        out[name.as_posix().removeprefix("./")] = match.group(1).lower()
    return out


def tree_sha256(root: Path) -> str:
    """The pin of a whole folder: sha256 of its sorted `path sha256` lines (dot files left out)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and not any(s.startswith(".") for s in p.parts))
    listing = "".join(
        f"{p.relative_to(root).as_posix()} {sha256_file(p, what='a cache file')}\n" for p in files
    )
    return hashlib.sha256(listing.encode()).hexdigest()


def checksum_rows(root: Path, tag: str, pinned: str | None) -> list[Check]:
    """The `SHA256SUMS` row (when the folder ships one) and the pin row (when one is configured)."""
    rows = []
    if (root / SUMS).exists() or (root / SUMS).is_symlink():
        rows.append(_sums_row(root, tag))
    if pinned:
        want = normalize_sha256(pinned, f"stages.render_cache.{tag}_sha256")
        have = tree_sha256(root)
        rows.append(
            ROWS.judge(
                f"checksums.{tag}.pinned",
                tag,
                have == want,
                f"{tag} folder {root}: sha256 of its file listing {have[:12]}… "
                + ("equals" if have == want else f"is not the pinned {want[:12]}…")
                + f" (stages.render_cache.{tag}_sha256)",
                expected=want,
                actual=have,
            )
        )
    return rows


def _sums_row(root: Path, tag: str) -> Check:
    listed = read_sums(root)
    differ, missing = [], []
    for name, want in listed.items():
        path = root / name
        if not path.is_file():
            missing.append(name)
        elif sha256_file(path, what="a cache file") != want:
            differ.append(name)
    bad = differ + missing
    message = (
        f"{tag}: {len(listed)} file(s) listed in {SUMS}, all match"
        if not bad
        else f"{tag}: {len(differ)} file(s) differ from {SUMS} ({', '.join(differ[:3]) or '-'}) and "
        f"{len(missing)} listed file(s) are missing ({', '.join(missing[:3]) or '-'})"
    )
    evidence = {
        "listed": len(listed),
        "differ": differ[:50],
        "missing": missing[:50],
        "sums": str(root / SUMS),
    }
    return ROWS.judge(f"checksums.{tag}", tag, not bad, message, evidence=evidence)
