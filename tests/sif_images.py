"""Real SIF images for the tests: the demo's builder (`pipeline.demo.image`, siftool + mksquashfs +
busybox, no Apptainer), skipping the test and naming the tool where one is missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.demo import image as demo_image
from pipeline.demo.image import DEFFILE, TOOLS, BuiltImage

__all__ = ["DEFFILE", "TOOLS", "BuiltImage", "build_image", "require_tools", "sha256sum", "siftool_list"]


def require_tools(*tools: str) -> None:
    missing = [t for t in (tools or TOOLS) if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} to build a real SIF (apt-get install siftool squashfs-tools "
                    "busybox-static)")  # fmt: skip


def build_image(folder: Path, labels: dict[str, str] | None = None, **kwargs) -> BuiltImage:
    require_tools()
    return demo_image.build_image(folder, labels, **kwargs)


def _run(*argv: str | Path) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def siftool_list(path: Path) -> list[tuple[int, str, str, str, str]]:
    """`siftool list` parsed: (id, group, link, start-end, type) per object."""
    rows = []
    for line in _run("siftool", "list", path).splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 5 and cells[0].isdigit():
            rows.append((int(cells[0]), cells[1], cells[2], cells[3], cells[4]))
    return rows


def sha256sum(path: Path) -> str:
    return _run("sha256sum", path).split()[0]
