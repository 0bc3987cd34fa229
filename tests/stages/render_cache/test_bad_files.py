"""render_cache's readers on bad files a shared release or cache can hold: an .npz whose header declares
terabytes, a garbage .npy header, a non-UTF-8 manifest, a manifest that is a FIFO. Each is one InputError
naming the file (the stage turns it into a named row); nothing is allocated, nothing blocks."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import InputError
from pipeline.stages.render_cache.cache import load_meta
from pipeline.stages.render_cache.release import Entry, open_episode, read_manifest

TEMPLATE = "subsets/subset-{budget:04d}.jsonl"


def forged_npz(path: Path, shape: tuple[int, ...]) -> Path:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("qpos.npy", header.getvalue() + b"\0" * 64)
    return path


def test_an_npz_declaring_terabytes_is_named_before_any_allocation(tmp_path):
    episode = forged_npz(tmp_path / "ep.npz", (10**7, 10**6))
    with pytest.raises(InputError, match=r"array 'qpos' declares shape \(10000000, 1000000\) float32"):
        with open_episode(Entry("ep.npz", 1, episode), ("qpos",)) as arrays:
            arrays["qpos"]
    with pytest.raises(InputError, match="holds 64 bytes; not read"):
        load_meta(forged_npz(tmp_path / "meta.npz", (10**9,)), keys=("qpos",))


def test_a_garbage_npy_header_is_named(tmp_path):
    episode = tmp_path / "ep.npz"
    with zipfile.ZipFile(episode, "w") as archive:
        archive.writestr("qpos.npy", b"this is not an npy header at all")
    with pytest.raises(InputError, match="array 'qpos' has no valid .npy header"):
        with open_episode(Entry("ep.npz", 1, episode), ("qpos",)) as arrays:
            arrays["qpos"]


def test_a_non_utf8_manifest_is_named(tmp_path):
    manifest = tmp_path / "subsets" / "subset-0002.jsonl"
    manifest.parent.mkdir()
    manifest.write_bytes(b'{"archive_file": "\xff\xfe.npz", "transition_count": 3}\n')
    with pytest.raises(InputError, match="not UTF-8 text"):
        read_manifest(tmp_path, TEMPLATE, 2, "data")


def test_a_manifest_that_is_a_fifo_is_named_never_opened(tmp_path):
    (tmp_path / "subsets").mkdir()
    os.mkfifo(tmp_path / "subsets" / "subset-0002.jsonl")
    script = (
        "from pipeline.stages.render_cache.release import read_manifest\n"
        f"read_manifest(__import__('pathlib').Path({str(tmp_path)!r}), {TEMPLATE!r}, 2, 'data')"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "is a FIFO (named pipe), expected a regular file" in done.stderr


def test_a_truncated_episode_archive_and_meta_are_named(tmp_path):
    np.savez(tmp_path / "full.npz", qpos=np.arange(1000.0).reshape(100, 10))
    data = (tmp_path / "full.npz").read_bytes()
    (tmp_path / "ep.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"ep.npz: not a readable .npz"):
        with open_episode(Entry("ep.npz", 1, tmp_path / "ep.npz"), ("qpos",)) as arrays:
            arrays["qpos"]
    with pytest.raises(InputError, match="meta unreadable or truncated"):
        load_meta(tmp_path / "ep.npz", keys=("qpos",))
