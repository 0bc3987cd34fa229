"""Real SIF images for the tests, built the way Apptainer lays them out, without Apptainer.

A busybox root filesystem (with `/.singularity.d/labels.json`, as `apptainer build` writes it) goes into
a squashfs with `mksquashfs`; `siftool new` + `siftool add` then assemble the SIF: a definition file
(datatype 1), Apptainer's `inspect-metadata.json` generic-JSON object (datatype 6), the primary system
partition (datatype 4, `--parttype 2 --partfs 1 --partarch 2`) and, when asked, a signature object
(datatype 5). The signature's bytes are a placeholder, not an OpenPGP signature: the tests only check
that its presence is reported. A missing tool skips the test and names the tool.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

TOOLS = ("siftool", "mksquashfs", "busybox")
DEFFILE = "Bootstrap: scratch\n\n%labels\n    org.hpc-preflight.version 0.1.0\n"


@dataclass(frozen=True)
class BuiltImage:
    path: Path
    squashfs: Path
    squashfs_sha256: str
    labels: dict[str, str]
    image_id: str


def require_tools(*tools: str) -> None:
    missing = [t for t in (tools or TOOLS) if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} to build a real SIF (apt-get install siftool squashfs-tools "
                    "busybox-static)")  # fmt: skip


def _run(*argv: str | Path) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def _rootfs(root: Path, labels: dict[str, str], image_id: str) -> None:
    for folder in ("bin", "etc", "proc", "dev", "sys", "tmp", ".singularity.d/env"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    shutil.copy2(shutil.which("busybox") or "", root / "bin" / "busybox")
    (root / "bin" / "sh").symlink_to("busybox")
    (root / "etc" / "image-id").write_text(image_id + "\n")
    (root / ".singularity.d" / "labels.json").write_text(json.dumps(labels, indent=2))
    (root / ".singularity.d" / "runscript").write_text('#!/bin/sh\nexec "$@"\n')
    (root / ".singularity.d" / "runscript.help").write_text("Runs the preflight stage jobs.\n")


def build_image(
    folder: Path,
    labels: dict[str, str] | None = None,
    *,
    name: str = "image.sif",
    signature: bool = False,
    image_id: str = "preflight-test-image",
) -> BuiltImage:
    """A ~1 MiB SIF from a busybox rootfs; `labels` land in the image and in inspect-metadata.json."""
    require_tools()
    labels = dict(labels if labels is not None else {"org.hpc-preflight.version": "0.1.0"})
    work = folder / f"{name}.build"
    root = work / "rootfs"
    _rootfs(root, labels, image_id)
    squashfs = work / "rootfs.squashfs"
    _run("mksquashfs", root, squashfs, "-noappend", "-all-root", "-no-progress", "-quiet")
    deffile = work / "Singularity"
    deffile.write_text(DEFFILE)
    meta = work / "inspect-metadata.json"
    attributes = {
        "labels": labels,
        "deffile": DEFFILE,
        "runscript": '#!/bin/sh\nexec "$@"\n',
        "helpfile": "Runs the preflight stage jobs.\n",
    }
    meta.write_text(json.dumps({"data": {"attributes": attributes}, "type": "container"}))
    sif = folder / name
    _run("siftool", "new", sif)
    _run("siftool", "add", sif, deffile, "--datatype", "1", "--groupid", "1")
    _run(
        "siftool",
        "add",
        sif,
        meta,
        "--datatype",
        "6",
        "--groupid",
        "1",
        "--filename",
        "inspect-metadata.json",
    )
    _run("siftool", "add", sif, squashfs, "--datatype", "4", "--groupid", "1",
         "--parttype", "2", "--partfs", "1", "--partarch", "2")  # fmt: skip
    if signature:
        blob = work / "signature.asc"
        blob.write_text("placeholder signature bytes (not OpenPGP)\n")
        _run("siftool", "add", sif, blob, "--datatype", "5", "--link", "3", "--signhash", "1",
             "--signentity", "433FE984155206BD962725E20E8713472A879943")  # fmt: skip
    digest = hashlib.sha256(squashfs.read_bytes()).hexdigest()
    return BuiltImage(sif, squashfs, digest, labels, image_id)


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
