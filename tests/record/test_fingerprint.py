"""Fingerprints read only regular files inside the input: a FIFO, a device or a link out of the root is
recorded by what it is (kind, link text) and never opened, so the launch cannot hang on it (issue 14)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.errors import InputError
from pipeline.record.fingerprint import digest_path


def _dataset(root: Path) -> Path:
    (root / "ds" / "meta").mkdir(parents=True)
    (root / "ds" / "meta" / "info.json").write_text('{"a": 1}')
    (root / "ds" / "data.bin").write_bytes(b"\x00" * 100)
    return root / "ds"


def test_regular_files_hash_their_content(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    first = digest_path(ds)
    assert first == digest_path(ds)
    (ds / "meta" / "info.json").write_text('{"a": 2}')
    assert digest_path(ds) != first


def test_fifo_is_recorded_not_opened(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    before = digest_path(ds)
    os.mkfifo(ds / "meta" / "stats.json")  # opening it for reading would block forever
    after = digest_path(ds)
    assert after.startswith("sha256:") and after != before


def test_link_to_a_device_or_out_of_the_root_is_not_followed(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text("1")
    (ds / "meta" / "stats.json").symlink_to("/dev/zero")
    (ds / "meta" / "other.json").symlink_to(outside)
    first = digest_path(ds)
    outside.write_text("2")  # the content behind a link out of the root is not part of the input
    assert digest_path(ds) == first
    (ds / "meta" / "other.json").unlink()
    (ds / "meta" / "other.json").symlink_to(tmp_path / "ds" / "data.bin")  # a new target is a change
    assert digest_path(ds) != first


def test_link_inside_the_root_is_followed(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    (ds / "alias.bin").symlink_to(ds / "data.bin")
    first = digest_path(ds)
    (ds / "data.bin").write_bytes(b"\x01" * 100)
    assert digest_path(ds) != first


def test_symlinked_folder_is_not_walked(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    (ds / "everything").symlink_to("/")
    assert digest_path(ds).startswith("sha256:")


def test_non_utf8_file_name_hashes(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    before = digest_path(ds)
    (ds / os.fsdecode(b"ep\xff.parquet")).write_bytes(b"x")
    assert digest_path(ds) not in (before, "")


def test_dangling_link_is_named(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    (ds / "gone.parquet").symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError) as info:
        digest_path(ds)
    assert info.value.path == str(ds / "gone.parquet")


def test_root_that_is_a_link_to_a_file(tmp_path: Path) -> None:
    image = tmp_path / "image.sif"
    image.write_bytes(b"sif")
    link = tmp_path / "current.sif"
    link.symlink_to(image)
    first = digest_path(link)
    image.write_bytes(b"sif2")
    assert digest_path(link) != first
