"""Checkpoint maintenance never touches another folder (issue: reliability round three, data loss):
a real copy of a checkpoint folder, a manifest line pointing elsewhere, a file that no longer matches,
--dry-run, and the malformed manifests that must be one named line. Run through the real command."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.storage import save_checkpoint
from pipeline.storage.manifest import MANIFEST
from tests.storage.test_cli import cli


def tree_hash(folder: Path) -> str:
    """Every file's name and bytes under `folder`: equal before and after means nothing changed."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def saved_three(primary: Path) -> None:
    for step in (1, 2, 3):
        save_checkpoint({"w": np.full(1024, step, np.float32)}, {"step": step}, primary=primary)


def test_pruning_a_copied_folder_never_touches_the_original(tmp_path):
    original, copy = tmp_path / "original", tmp_path / "copy"
    saved_three(original)
    shutil.copytree(original, copy)
    before = tree_hash(original)
    done = cli("prune", str(copy), "--keep", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "(the folder was copied or moved): locations re-rooted here" in done.stdout
        and "deleted 2" in done.stdout
    )
    assert tree_hash(original) == before  # the original: not one byte
    assert [p.name for p in copy.glob("*.safetensors")] == ["step_000000003.safetensors"]


def test_a_location_pointing_at_another_folder_is_refused_and_nothing_changes(tmp_path):
    mine, other = tmp_path / "mine", tmp_path / "other"
    saved_three(mine)
    saved_three(other)
    lines = (mine / MANIFEST).read_text().splitlines()
    forged = [json.loads(line) for line in lines]
    for event in forged:
        if event.get("event") == "saved" and event["name"].endswith("1"):
            event["location"] = str(other)  # planted: prune would delete the other folder's files
    (mine / MANIFEST).write_text("".join(json.dumps(e) + "\n" for e in forged))
    before_mine, before_other = tree_hash(mine), tree_hash(other)
    for command in (["prune", str(mine), "--keep", "1"], ["promote", str(mine)]):
        done = cli(*command)
        assert done.returncode == 3, done.stdout + done.stderr
        assert "refused: step_000000001: its location is outside the given folders" in done.stdout
    assert tree_hash(other) == before_other and tree_hash(mine) == before_mine


def test_a_file_that_no_longer_matches_its_manifest_line_is_refused(tmp_path):
    primary = tmp_path / "ckpt"
    saved_three(primary)
    victim = primary / "step_000000001.safetensors"
    victim.write_bytes(victim.read_bytes()[:-4] + b"XXXX")  # same size, other bytes
    before = tree_hash(primary)
    done = cli("prune", str(primary), "--keep", "1")
    assert done.returncode == 3 and "sha256 differs from the manifest" in done.stdout, done.stdout
    assert "nothing was deleted or marked" in done.stdout and tree_hash(primary) == before


def test_dry_run_lists_the_plan_and_touches_nothing_then_deletions_are_logged_first(tmp_path):
    primary = tmp_path / "ckpt"
    saved_three(primary)
    before = tree_hash(primary)
    done = cli("prune", str(primary), "--keep", "1", "--dry-run")
    assert done.returncode == 0 and done.stdout.count("would delete: step_00000000") == 2, done.stdout
    assert tree_hash(primary) == before
    assert cli("prune", str(primary), "--keep", "1").returncode == 0
    events = [json.loads(line)["event"] for line in (primary / MANIFEST).read_text().splitlines()]
    assert events.index("deleting") < events.index("deleted")


BAD_LINES = {
    "binary": b"\xff\xfe\x00\x01 not text",
    "missing_location": b'{"event": "saved", "name": "a", "file": "a.safetensors", "sidecar": "a.json", '
    b'"sha256": "00", "size": 1, "time": 1}\n',
    "size_not_int": b'{"event": "saved", "name": "a", "location": ".", "file": "a.safetensors", '
    b'"sidecar": "a.json", "sha256": "00", "size": "big", "time": 1}\n',
    "time_string": b'{"event": "superseded", "name": "a", "time": "yesterday"}\n',
    "fallbacks_string": b'{"event": "init", "primary": "/x", "fallbacks": "/tmp", "time": 1}\n',
}
EXPECTED = {
    "binary": "not UTF-8 text",
    "missing_location": "line 1: field 'location' of a 'saved' event: expected text",
    "size_not_int": "line 1: field 'size' of a 'saved' event: expected an integer",
    "time_string": "line 1: field 'time' of a 'superseded' event: expected a number",
    "fallbacks_string": "line 1: field 'fallbacks' of a 'init' event: expected a list of folders",
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
@pytest.mark.parametrize("command", ["status", "prune", "promote"])
def test_a_malformed_manifest_is_one_named_line(tmp_path, case, command):
    primary = tmp_path / "ckpt"
    primary.mkdir()
    (primary / MANIFEST).write_bytes(BAD_LINES[case])
    done = cli(command, str(primary), *(["--keep", "1"] if command == "prune" else []))
    assert done.returncode == 2, done.stdout + done.stderr
    assert str(primary / MANIFEST) in done.stdout and EXPECTED[case] in done.stdout
    assert "Traceback" not in done.stdout + done.stderr and len(done.stdout.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_manifest_that_is_a_fifo_or_dev_zero_is_named_not_read(tmp_path, kind):
    primary = tmp_path / "ckpt"
    primary.mkdir()
    if kind == "fifo":
        os.mkfifo(primary / MANIFEST)
    else:
        (primary / MANIFEST).symlink_to("/dev/zero")
    for command in (["status"], ["prune", "--keep", "1"], ["promote"]):
        done = cli(command[0], str(primary), *command[1:])
        assert done.returncode == 2, done.stdout + done.stderr
        assert "expected a regular file (a checkpoint manifest" in done.stdout
