"""The demo in an image: `python -m pipeline.demo image` builds a real SIF (siftool + mksquashfs, no
Apptainer) and promotes it; launched through the Apptainer STAND-IN (containers/standin/apptainer,
squashfuse + bubblewrap: Apptainer itself cannot be installed here), container_check measures it from
inside; demo=faulty pins a stale promotion record and the row names both digests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from pipeline.demo.provider import pin_image
from tests.conftest import gate_of, other_stages, run_dir_of
from tests.in_process_launch import launch_here
from tests.sif_images import require_tools
from tests.test_container_standin import STANDIN, image_rows, standin  # noqa: F401 - a fixture

REPO = Path(__file__).resolve().parents[2]


def demo_image(cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.demo", "image"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def through_demo_image(image: str, *extra: str) -> tuple[str, ...]:
    return (
        "launcher=local",
        other_stages("container_check"),
        "container=apptainer",
        f"container.binary={STANDIN}",
        f"container.image={image}",
        f"container.python={sys.executable}",
        *extra,
    )


def test_the_demo_image_is_pinned_by_its_record_and_faulty_names_both_digests_from_inside(
    tmp_path,
    standin,  # noqa: F811
):
    require_tools()
    built = demo_image(tmp_path)
    assert built.returncode == 0, built.stderr
    image = built.stdout.strip()
    record = yaml.safe_load(Path(image).with_name("preflight-demo.promoted.yaml").read_text())
    pinned = OmegaConf.create({"container": {"image": image, "promotion_record": None}})
    pin_image(pinned)  # the default demo: its own image pinned by its own record
    assert pinned.container.promotion_record == str(Path(image).with_name("preflight-demo.promoted.yaml"))
    faulty = launch_here(tmp_path, *through_demo_image(image, "demo=faulty"))
    assert faulty.returncode == 3, faulty.stdout + faulty.stderr
    gate = gate_of(run_dir_of(tmp_path, faulty))
    rows = image_rows(gate)
    row = rows["image.promoted"]
    assert rows["image.inside"]["verdict"] == "match"  # measured from inside the image
    assert row["verdict"] == "mismatch" and row["severity"] == "hard"
    assert row["actual"] == record["sha256"] and row["expected"] != record["sha256"]
    assert row["actual"][:12] in row["message"] and row["expected"][:12] in row["message"]  # both named
    assert [r for r in gate["reasons"] if r.startswith("container_check.")] == [
        f"container_check.image.promoted: {row['message']}"
    ]


def test_without_the_tools_the_demo_says_so_in_one_line(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bare)}
    done = demo_image(tmp_path, env)
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.startswith("demo: runs without an image: needs siftool, mksquashfs, busybox")
    assert len(done.stderr.splitlines()) == 1
