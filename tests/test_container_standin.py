"""The Apptainer path end to end, through containers/standin/apptainer: a STAND-IN for the apptainer
binary (Apptainer cannot be installed here) that mounts a real SIF's partition with squashfuse and runs
the job in that root with bubblewrap. The image is a real SIF built by siftool (tests/sif_images.py);
it has no Python, so the stand-in binds the host interpreter read-only and the probe proves where it
ran by reading /.singularity.d/labels.json, which exists only inside the image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import gate_of, other_stages, run_dir_of
from tests.in_process_launch import launch_here
from tests.sif_images import build_image, sha256sum

STANDIN = Path(__file__).resolve().parents[1] / "containers" / "standin" / "apptainer"
LABELS = {"org.hpc-preflight.version": "0.1.0", "org.hpc-preflight.git-sha": "5eed" * 10}


@pytest.fixture()
def standin(monkeypatch):
    missing = [t for t in ("squashfuse", "bwrap", "fusermount3") if shutil.which(t) is None]
    if missing:
        pytest.skip(
            f"the apptainer stand-in needs {', '.join(missing)} (apt-get install squashfuse bubblewrap fuse3)"
        )
    monkeypatch.setenv("APPTAINER_STANDIN_BIND", sys.prefix)  # the venv the job's python runs from
    return STANDIN


def through_standin(image: Path, *extra: str) -> tuple[str, ...]:
    return (
        "~demo",
        other_stages("container_check"),
        "container=apptainer",
        f"container.binary={STANDIN}",
        f"container.image={image}",
        f"container.python={sys.executable}",
        "container.require_labels=[org.hpc-preflight.git-sha]",
        *extra,
    )


def image_rows(gate: dict) -> dict[str, dict]:
    stage = next(s for s in gate["stages"] if s["stage"] == "container_check")
    return {c["id"].removeprefix("container_check."): c for c in stage["checks"]}


def test_launch_refuses_apptainer_without_the_binary_before_submitting(tmp_path):
    image = build_image(tmp_path, LABELS).path
    proc = launch_here(
        tmp_path,
        "launcher=local",
        "~demo",
        "container=apptainer",
        f"container.image={image}",
        "container.binary=no-such-apptainer",
    )
    assert proc.returncode == 2 and "container.binary: 'no-such-apptainer' is not on PATH" in proc.stdout
    assert not (tmp_path / "preflight").exists()


def test_a_digest_that_is_not_the_promoted_one_blocks_the_gate_local(tmp_path, standin):
    image = build_image(tmp_path, LABELS).path
    proc = launch_here(
        tmp_path, "launcher=local", *through_standin(image, "container.expect_sha256=" + "0" * 64)
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    gate = gate_of(run_dir_of(tmp_path, proc))
    rows = image_rows(gate)
    assert gate["gate"] == "blocked"
    assert [r for r in gate["reasons"] if r.startswith("container_check.")] == [
        f"container_check.image.promoted: {rows['image.promoted']['message']}"
    ]
    assert rows["image.promoted"]["actual"] == sha256sum(image)
    assert rows["image.inside"]["verdict"] == "match"


@pytest.mark.slurm
def test_a_slurm_stage_job_runs_inside_the_sif_root_through_the_standin(tmp_path, standin, slurm):
    image = build_image(tmp_path, LABELS).path
    digest = sha256sum(image)
    proc = launch_here(
        tmp_path, "launcher=slurm", "wait=true", *through_standin(image, f"container.expect_sha256={digest}")
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gate = gate_of(run_dir_of(tmp_path, proc))
    assert gate["gate"] == "clear", gate["reasons"]
    stage = next(s for s in gate["stages"] if s["stage"] == "container_check")
    rows = image_rows(gate)
    inside = rows["image.inside"]["evidence"]
    assert stage["provenance"]["slurm_job_id"] and stage["provenance"]["container"] == str(image)
    assert inside["labels_in_root"] == LABELS and inside["rootfs"] in ("squashfuse", "unsquashfs")
    assert inside["env"] == {"APPTAINER_CONTAINER": str(image)}
    login = rows["image.same_as_login"]["evidence"]
    assert login["node_sha256"] == login["login_sha256"] == digest == rows["image.promoted"]["actual"]
    assert rows["gl_renderer"]["verdict"] == "match" and rows["python"]["verdict"] == "match"
    assert os.path.basename(image) in rows["image.readable"]["message"]


@pytest.mark.parametrize("rootfs", ["squashfuse", "unsquashfs"])
def test_the_standin_runs_a_command_in_the_image_root_and_cleans_up(tmp_path, standin, rootfs):
    """unsquashfs: the fallback where FUSE is unavailable (here: squashfuse left off PATH)."""
    built = build_image(tmp_path, LABELS, image_id="only-inside-the-image")
    env = dict(os.environ)
    if rootfs == "unsquashfs":
        tools = tmp_path / "tools"
        tools.mkdir()
        for tool in ("bwrap", "unsquashfs", "fusermount3", "env"):
            (tools / tool).symlink_to(shutil.which(tool))
        (tools / "python3").symlink_to(os.path.realpath(sys.executable))
        env["PATH"] = str(tools)
    script = "echo $APPTAINER_STANDIN_ROOTFS; cat /etc/image-id; touch /etc/x 2>/dev/null || echo read-only"
    proc = subprocess.run(
        [str(standin), "exec", str(built.path), "/bin/sh", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [rootfs, "only-inside-the-image", "read-only"]
    assert "apptainer-standin-" not in Path("/proc/mounts").read_text()
