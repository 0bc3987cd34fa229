"""Faults on real filesystems (a small tmpfs, filled or remounted read-only; needs root to mount): the
launcher ends in one line with a documented exit code, never says "clear" without the whole record,
and leaves nothing half-written. A local launch runs the launcher's entry in this process
(tests/in_process_launch.py), its jobs processes of the local executor; the Slurm case is a real
`python -m pipeline.launch`, its gate a Slurm job."""

import contextlib
import json
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.cli.runguard import validate_run_folders
from pipeline.errors import ConfigError
from pipeline.record.runfolder import RunFolder
from tests.conftest import other_stages, slurm_launch
from tests.in_process_launch import launch_here
from tests.storage.conftest import fill
from tests.storage.conftest import tmpfs as mounted_tmpfs

BASE = ("launcher=local", "~demo", "min_free_mb=1", "stages.container_check.min_free_gb=0.001")


@pytest.fixture
def tmpfs(tmp_path):
    """`tmpfs(name, size_kib)`: a real tmpfs of that size under tmp_path (tests/storage/conftest.py
    mounts it, or skips naming what is missing); unmounted at the end."""
    with contextlib.ExitStack() as stack:
        yield lambda name, size_kib: stack.enter_context(mounted_tmpfs(tmp_path / name, f"{size_kib}k"))


def leftovers(root: Path) -> list[Path]:
    """Half-written files: our tmp files, submitit's save_tmp files and 0-byte pickles."""
    found = [*root.rglob(".*.tmp"), *root.rglob("*.save_tmp")]
    return found + [p for p in root.rglob("*.pkl") if p.stat().st_size == 0]


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text
    return text


@pytest.mark.parametrize("run_id", ["../../x", "a/b", ".hidden", "..", "x\x00y", "a b", "-rf", "é"])
def test_a_run_id_is_a_name_not_a_path(tmp_path, run_id):
    cfg = OmegaConf.create({"run_id": run_id, "output_root": str(tmp_path), "min_free_mb": 0})
    with pytest.raises(ConfigError, match="run_id") as caught:
        validate_run_folders(cfg)
    assert caught.value.key == "run_id"
    for good in ("20261202-101500-abc123", "run_1.b-2"):
        assert RunFolder.of(tmp_path, good).root.parent == (tmp_path / "runs").resolve()


def test_a_run_id_with_dots_is_refused_at_launch_and_writes_nothing(tmp_path):
    proc = launch_here(tmp_path, *BASE, "run_id=../../escaped", other_stages("container_check"))
    text = one_line_error(proc)
    assert proc.returncode == 2 and "config error: run_id: '../../escaped' is not a run id" in text
    assert not (tmp_path / "preflight").exists() and not (tmp_path.parent / "escaped").exists()


def test_full_output_root_is_refused_at_launch(tmp_path, tmpfs):
    root = tmpfs("out", 512)
    fill(root)
    proc = launch_here(tmp_path, *BASE, f"output_root={root}", other_stages("container_check"))
    text = one_line_error(proc)
    assert proc.returncode == 2 and f"config error: output_root: {root} has 0.0 MiB free" in text
    assert sorted(p.name for p in root.iterdir()) == ["filler.bin"]


def test_output_root_that_fills_before_the_first_write_is_one_line_and_leaves_nothing(tmp_path, tmpfs):
    root = tmpfs("out", 512)
    fill(root)
    only = other_stages("container_check")
    proc = launch_here(tmp_path, *BASE, "min_free_mb=0", f"output_root={root}", only)
    text = one_line_error(proc)
    assert proc.returncode == 2 and ": filesystem full (needed size unknown, " in text, text
    assert " bytes free); nothing was queued and " in text and "was removed (nothing was submitted)" in text
    assert sorted(p.name for p in root.iterdir()) == ["filler.bin"] and not leftovers(root)


def test_read_only_output_root_and_audit_dir_are_refused_at_launch(tmp_path, tmpfs):
    for key in ("output_root", "audit_dir"):
        folder = tmpfs(key, 1024)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        proc = launch_here(tmp_path, *BASE, f"{key}={folder}", other_stages("container_check"))
        text = one_line_error(proc)
        assert proc.returncode == 2 and f"config error: {key}: {folder} is on a read-only filesystem" in text
        assert list(folder.iterdir()) == []
    assert not (tmp_path / "preflight").exists()


@pytest.mark.parametrize("keep_kib, written", [(0, "none"), (12, "json")])  # the twin: ~10 KiB
def test_audit_folder_filled_mid_gate_is_never_clear(tmp_path, tmpfs, keep_kib, written):
    """A plugin stage fills the audit folder's filesystem before the gate: every check passes, and the
    launcher must still not say clear (exit 1, naming the write that failed and what was written)."""
    audit = tmpfs("audit", 2048)
    plug = (
        "plugins=[preflight_fill_stage]",
        f"+stages.fill.target={audit}",
        f"+stages.fill.keep_kib={keep_kib}",
    )
    proc = launch_here(
        tmp_path, *BASE, f"audit_dir={audit}", "run_id=full1", *plug, other_stages("container_check")
    )
    text = one_line_error(proc)
    run = tmp_path / "preflight" / "runs" / "full1"
    assert proc.returncode == 1, text
    assert "gate: clear" not in text and "gate: no complete record: audit record: writing" in text
    assert "No space left on device" in text and "no gate.json, so no clear" in text
    assert f"{run / 'gate.incomplete.json'}" in text.split("files written: ")[1]
    assert not (run / "gate.json").exists()
    assert (
        json.loads((run / "gate.incomplete.json").read_text())["gate"] == "clear"
    )  # what it would have said
    twins = list(audit.glob("*_audit.json"))
    if written == "none":
        assert "written: none" in text and not twins
    else:
        assert f"written: {twins[0]}" in text and not list(audit.glob("*_audit.md"))
    assert not leftovers(audit) and not leftovers(run)
    if written == "json":  # room again: the same run id completes the record and is clear
        (audit / "filler.bin").unlink()
        again = (f"audit_dir={audit}", "run_id=full1", other_stages("container_check"))
        proc = launch_here(tmp_path, *BASE, *again)
        assert proc.returncode == 0 and "gate: clear" in proc.stdout, proc.stdout + proc.stderr
        assert (run / "gate.json").exists() and not (run / "gate_failure.json").exists()
        assert list(audit.glob("*_audit.md")) and (audit / "timeline.md").exists()


def test_output_root_filled_mid_run_is_one_line_exit_1_and_leaves_no_partial_file(tmp_path, tmpfs):
    root = tmpfs("out", 4096)
    plug = ("plugins=[preflight_fill_stage]", f"+stages.fill.target={root}")
    proc = launch_here(
        tmp_path, *BASE, f"output_root={root}", "run_id=r1", *plug, other_stages("container_check")
    )
    text = one_line_error(proc)
    assert proc.returncode == 1, text
    assert "gate: clear" not in text
    assert "No space left on device" in text or "full filesystem" in text, text
    assert not (root / "runs" / "r1" / "gate.json").exists()
    assert not leftovers(root), leftovers(root)


@pytest.mark.slurm
def test_on_slurm_a_gate_without_its_audit_record_fails_so_afterok_never_fires(tmp_path, tmpfs, slurm):
    """The one Slurm case: the gate job's own exit code (what `afterok` reads) is 1, not 0."""
    from tests.test_slurm import final

    audit = tmpfs("audit", 2048)
    proc = slurm_launch(
        tmp_path,
        "launcher=slurm",
        "wait=true",
        *BASE[1:],
        f"audit_dir={audit}",
        "run_id=s1",
        "plugins=[preflight_fill_stage]",
        f"+stages.fill.target={audit}",
        other_stages("container_check"),
    )
    text = one_line_error(proc)
    assert proc.returncode == 1 and "gate: no complete record" in text and "gate: clear" not in text, text
    gate_id = json.loads((tmp_path / "preflight" / "runs" / "s1" / "jobs.json").read_text())["gate"]["job_id"]
    row = final(str(gate_id))
    assert row["State"] == "FAILED" and row["ExitCode"] == "1:0", row
