"""Checksums that are checked: a cache file that no longer matches the cache's own SHA256SUMS blocks, a
pinned folder digest is compared, and a SHA256SUMS line that leaves the folder is a named error."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import InputError
from pipeline.stages.render_cache.checksums import checksum_rows, tree_sha256


def cache(root: Path) -> Path:
    root.mkdir()
    np.save(root / "pix_b0002_frames.npy", np.zeros((4, 8, 8, 3), np.uint8))
    np.save(root / "pix_b0002_goals.npy", np.ones((4, 8, 8, 3), np.uint8))
    listing = subprocess.run(
        ["sha256sum", "pix_b0002_frames.npy", "pix_b0002_goals.npy"], cwd=root, capture_output=True, text=True
    )
    (root / "SHA256SUMS").write_text(listing.stdout)  # written by the real tool, as a release would be
    return root


def test_a_cache_matching_its_sha256sums_and_its_pin_matches(tmp_path):
    root = cache(tmp_path / "cache")
    rows = checksum_rows(root, "cache", "sha256:" + tree_sha256(root))
    assert [r.verdict for r in rows] == ["match", "match"] and "2 file(s) listed" in rows[0].message


def test_a_frames_file_that_no_longer_matches_its_sha256sums_blocks(tmp_path):
    root = cache(tmp_path / "cache")
    frames = np.load(root / "pix_b0002_frames.npy")
    frames[2, 3, 3] = 255  # one pixel, same shape, same size
    np.save(root / "pix_b0002_frames.npy", frames)
    pinned = hashlib.sha256(b"what the release notes said").hexdigest()
    listed, pin = checksum_rows(root, "cache", pinned)
    assert listed.verdict == "mismatch" and listed.severity == "hard"
    assert "1 file(s) differ from SHA256SUMS (pix_b0002_frames.npy)" in listed.message
    assert pin.verdict == "mismatch" and pin.expected == pinned


def test_a_sha256sums_line_leaving_the_folder_is_named(tmp_path):
    root = cache(tmp_path / "cache")
    (root / "SHA256SUMS").write_text("0" * 64 + "  ../../etc/passwd\n")
    with pytest.raises(InputError, match=r"SHA256SUMS: line 1: expected '<sha256>  <relative path>'"):
        checksum_rows(root, "cache", None)
