"""save_checkpoint on a real full filesystem (a tmpfs the test mounts), a read-only one, and a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.errors import InputError
from pipeline.storage import (
    CheckpointSaveError,
    latest_checkpoint,
    load_checkpoint,
    manifest,
    promote,
    save_checkpoint,
)
from pipeline.storage.maintain import stale_temps
from tests.storage.conftest import fill, remount

MIB = 2**20


def weights(value: float, mib: float = 1.0) -> dict[str, torch.Tensor]:
    return {"layer.weight": torch.full((int(mib * MIB) // 4,), float(value), dtype=torch.float32)}


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_full_primary_falls_back_records_it_and_promote_brings_it_back(small_fs, tmp_path):
    primary = small_fs("4m") / "ckpt"
    scratch = tmp_path / "node_scratch"
    scratch.mkdir()
    told = tmp_path / "told.txt"
    hook = [sys.executable, "-c", f"import sys; open({str(told)!r}, 'w').write(sys.argv[1])"]

    first = save_checkpoint(weights(1.0), {"step": 1}, primary=primary, fallbacks=[scratch], notify=hook)
    assert not first.fallback and first.path.parent == primary.resolve()
    filler = fill(primary.parent)

    second = save_checkpoint(weights(2.0), {"step": 2}, primary=primary, fallbacks=[scratch], notify=hook)
    assert second.fallback and scratch.resolve() in second.path.parents
    assert "preflight" in second.attempts[0].reason and not second.attempts[0].ok
    assert not (primary / second.path.name).exists() and leftovers(primary) == []
    assert "FALLBACK" in told.read_text() and str(primary.resolve()) in told.read_text()

    events = manifest.read(second.location)  # the fallback folder's manifest records the move
    moved = [e for e in events if e["event"] == "fallback"]
    assert moved and moved[0]["location"] == str(primary.resolve()) and "preflight" in moved[0]["reason"]
    (saved_event,) = [e for e in events if e["event"] == "saved" and e["name"] == "step_000000002"]
    checked = saved_event["preflight"]
    assert checked["free"] > 0 and (checked["quota_tool"] or checked["notes"])  # what quota said, or why not

    found = latest_checkpoint(primary)  # the primary's manifest names the fallback folder
    assert found is not None and found.name == "step_000000002" and found.fallback
    assert torch.equal(load_checkpoint(found)["layer.weight"], weights(2.0)["layer.weight"])

    assert promote(primary)[0]["moved"] is False  # still full: stays where it is, says why
    filler.unlink()
    rows = promote(primary)
    assert rows == [dict(rows[0], moved=True)]
    back = latest_checkpoint(primary)
    assert back is not None and back.name == "step_000000002" and not back.fallback
    assert not second.path.exists()
    assert any(e["event"] == "promoted" for e in manifest.read(primary))


def test_enospc_during_the_write_removes_the_partial_file(small_fs, tmp_path):
    """The preflight is told 1 KiB; the writer then writes 6 MiB into 4 MiB: the real ENOSPC path."""
    primary = small_fs("4m") / "ckpt"
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def writer(path: Path) -> None:
        with path.open("wb") as handle:
            for _ in range(6):
                handle.write(b"\x01" * MIB)

    saved = save_checkpoint(
        None, {"step": 7}, primary=primary, fallbacks=[scratch], writer=writer, expected_bytes=1024
    )
    assert saved.fallback and saved.size == 6 * MIB
    assert saved.attempts[0].reason.startswith("ENOSPC")
    assert leftovers(primary) == [] and not (primary / saved.path.name).exists()
    assert os.statvfs(primary).f_bavail * os.statvfs(primary).f_frsize > 3 * MIB  # the space came back
    found = latest_checkpoint(primary, fallbacks=[scratch])
    assert found is not None and found.path == saved.path


def test_read_only_primary_is_a_clear_error_or_a_recorded_fallback(small_fs, tmp_path):
    mount = small_fs("4m")
    primary = mount / "ckpt"
    save_checkpoint(weights(1.0, 0.25), {"step": 1}, primary=primary)
    remount(mount, "ro")
    try:
        told: list[dict] = []
        with pytest.raises(CheckpointSaveError, match=r"ckpt is on a read-only filesystem"):
            save_checkpoint(weights(2.0, 0.25), {"step": 2}, primary=primary, notify=told.append)
        assert told and told[0]["location"] is None and "could not be saved anywhere" in told[0]["message"]
        assert (
            "Kept: no partial file; 1 earlier checkpoint(s) untouched, the newest step_" in told[0]["message"]
        )
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        saved = save_checkpoint(weights(2.0, 0.25), {"step": 2}, primary=primary, fallbacks=[scratch])
        assert saved.fallback and "read-only" in saved.attempts[0].reason
        found = latest_checkpoint(primary, fallbacks=[scratch])
        assert found is not None and found.name == "step_000000002"
    finally:
        remount(mount, "rw")


def test_missing_fallback_folder_is_named_before_anything_is_written(tmp_path):
    with pytest.raises(InputError, match=r"fallbacks\[1\]: fallback folder .*/nope does not exist") as err:
        save_checkpoint(
            weights(1.0, 0.01), {"step": 1}, primary=tmp_path / "p", fallbacks=[tmp_path, tmp_path / "nope"]
        )
    assert err.value.field == "fallbacks[1]"
    assert not (tmp_path / "p").exists()
    with pytest.raises(InputError, match="never a shell string"):
        save_checkpoint(weights(1.0, 0.01), primary=tmp_path / "p", notify="mail -s ckpt me")


def test_corrupt_newest_is_never_chosen_and_retention_deletes_only_superseded(tmp_path):
    primary = tmp_path / "ckpt"
    stranger = primary / "notes.safetensors"
    for step in (1, 2, 3):
        save_checkpoint({"w": np.full(64, step, np.float32)}, {"step": step}, primary=primary, keep=2)
    stranger.write_bytes(b"not ours")
    names = sorted(p.name for p in primary.glob("step_*.safetensors"))
    assert names == ["step_000000002.safetensors", "step_000000003.safetensors"]
    newest = primary / "step_000000003.safetensors"
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF
    newest.write_bytes(bytes(data))
    found = latest_checkpoint(primary)
    assert found is not None and found.name == "step_000000002"
    assert load_checkpoint(found, "np")["w"][0] == 2.0
    assert stranger.exists()  # never named by the manifest, never touched


KILLED_SAVER = textwrap.dedent(
    """
    import sys, torch
    from pipeline.storage import save_checkpoint
    primary = sys.argv[1]
    step = 1
    while True:
        w = torch.full((16 * 2**20,), float(step))  # 64 MiB per checkpoint
        save_checkpoint({"w": w}, {"step": step}, primary=primary)
        print(step, flush=True)
        step += 1
    """
)


def test_sigkill_mid_save_leaves_the_previous_checkpoint_intact(tmp_path):
    primary = tmp_path / "ckpt"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_SAVER, str(primary)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "1"
        deadline = time.monotonic() + 120
        while not leftovers(primary):  # a save of step >= 2 is being written right now
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.001)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    partial = leftovers(primary)
    assert partial, "the kill landed between saves; the test needs it mid-write"
    found = latest_checkpoint(primary)
    assert found is not None
    step = json.loads(found.sidecar.read_text())["metadata"]["step"]
    tensors = load_checkpoint(found)
    assert tensors["w"].shape == (16 * 2**20,) and float(tensors["w"][0]) == float(step)
    # prune removes our leftover temp files once they are old enough, nothing else
    assert stale_temps(primary) == []
    assert [p.name for p in stale_temps(primary, older_than_s=-1)] == partial
    # what the kill interrupted belongs to the next step (its tensor file, sidecar or manifest line)
    assert all(n.startswith((f".step_{step + 1:09d}.", ".checkpoints.manifest")) for n in partial), partial


def test_retention_reaches_into_the_fallback_folder(small_fs, tmp_path):
    primary, scratch = small_fs("1m") / "ckpt", tmp_path / "scratch"
    scratch.mkdir()
    first = save_checkpoint(weights(1.0, 0.25), {"step": 1}, primary=primary, fallbacks=[scratch], keep=2)
    fill(primary.parent)
    later = [
        save_checkpoint(weights(s, 0.25), {"step": s}, primary=primary, fallbacks=[scratch], keep=2)
        for s in (2, 3, 4)
    ]
    assert all(s.fallback for s in later)
    assert not first.path.exists() and not later[0].path.exists()  # superseded, then deleted
    assert later[1].path.exists() and later[2].path.exists()
    states = {name: entry.state for name, entry in manifest.collect(primary).items()}
    assert states == {
        "step_000000001": "deleted",  # its mark went to the fallback manifest while the primary was full
        "step_000000002": "deleted",
        "step_000000003": "present",
        "step_000000004": "present",
    }
