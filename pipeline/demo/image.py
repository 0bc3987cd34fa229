"""A real SIF image for the demo (and the tests), built the way Apptainer lays one out, without Apptainer.

The demo runs its stage jobs inside an image so that the record shows `container_check`'s identity rows
(readable, promoted, labels, inside) measured from inside it. Apptainer cannot be installed everywhere
(not on Debian 12), so the image is assembled with Debian's tools: a busybox root filesystem (with
`/.singularity.d/labels.json`, as `apptainer build` writes it) in a squashfs by `mksquashfs`, then
`siftool new` + `siftool add`: a definition file (datatype 1), Apptainer's `inspect-metadata.json`
(datatype 6), the primary system partition (datatype 4) and, when asked, a signature object (datatype 5,
placeholder bytes, not OpenPGP). The image has no Python: the stand-in runtime
(`containers/standin/apptainer`) binds the host's interpreter and the project into it.

`ensure` builds the demo's image once and writes its promotion record beside it; `demo=faulty` pins a
stale record instead (`pipeline.demo.provider`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import InputError

TOOLS = ("siftool", "mksquashfs", "busybox")
DEFFILE = "Bootstrap: scratch\n\n%labels\n    org.hpc-preflight.version 0.1.0\n"
DEMO_LABELS = {"org.hpc-preflight.version": "0.1.0", "org.hpc-preflight.image": "demo"}
IMAGE_NAME = "preflight-demo.sif"
RECORD_NAME = "preflight-demo.promoted.yaml"


@dataclass(frozen=True)
class BuiltImage:
    path: Path
    squashfs: Path
    squashfs_sha256: str
    labels: dict[str, str]
    image_id: str


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def _run(*argv: str | Path) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise InputError(f"{argv[0]}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}")
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


def _metadata(work: Path, labels: dict[str, str]) -> Path:
    meta = work / "inspect-metadata.json"
    attributes = {
        "labels": labels,
        "deffile": DEFFILE,
        "runscript": '#!/bin/sh\nexec "$@"\n',
        "helpfile": "Runs the preflight stage jobs.\n",
    }
    meta.write_text(json.dumps({"data": {"attributes": attributes}, "type": "container"}))
    return meta


def build_image(
    folder: Path,
    labels: dict[str, str] | None = None,
    *,
    name: str = "image.sif",
    signature: bool = False,
    image_id: str = "preflight-test-image",
) -> BuiltImage:
    """A ~1 MiB SIF from a busybox rootfs; `labels` land in the image and in inspect-metadata.json."""
    labels = dict(labels if labels is not None else {"org.hpc-preflight.version": "0.1.0"})
    work = folder / f"{name}.build"
    shutil.rmtree(work, ignore_errors=True)
    _rootfs(work / "rootfs", labels, image_id)
    squashfs = work / "rootfs.squashfs"
    _run("mksquashfs", work / "rootfs", squashfs, "-noappend", "-all-root", "-no-progress", "-quiet")
    deffile = work / "Singularity"
    deffile.write_text(DEFFILE)
    meta = _metadata(work, labels)
    sif = folder / name
    sif.unlink(missing_ok=True)
    _run("siftool", "new", sif)
    _run("siftool", "add", sif, deffile, "--datatype", "1", "--groupid", "1")
    _run("siftool", "add", sif, meta, "--datatype", "6", "--groupid", "1", "--filename", meta.name)
    _run("siftool", "add", sif, squashfs, "--datatype", "4", "--groupid", "1",
         "--parttype", "2", "--partfs", "1", "--partarch", "2")  # fmt: skip
    if signature:
        blob = work / "signature.asc"
        blob.write_text("placeholder signature bytes (not OpenPGP)\n")
        _run("siftool", "add", sif, blob, "--datatype", "5", "--link", "3", "--signhash", "1",
             "--signentity", "433FE984155206BD962725E20E8713472A879943")  # fmt: skip
    digest = hashlib.sha256(squashfs.read_bytes()).hexdigest()
    return BuiltImage(sif, squashfs, digest, labels, image_id)


def record_of(image: Path) -> Path:
    """Where the demo image's promotion record lies: beside it."""
    return image.with_name(RECORD_NAME)


def ensure(folder: Path) -> Path:
    """The demo's image under `folder` (built once; rebuilt where its record is missing), promoted."""
    from pipeline.readers.promotion import promotion_record, write_promotion

    image = folder / IMAGE_NAME
    if image.is_file() and record_of(image).is_file():
        return image
    missing = missing_tools()
    if missing:
        raise InputError(
            f"needs {', '.join(missing)} to build the demo's image (scripts/install_system.sh installs them)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    built = build_image(folder, DEMO_LABELS, name=IMAGE_NAME, image_id="preflight-demo")
    shutil.rmtree(folder / f"{IMAGE_NAME}.build", ignore_errors=True)
    write_promotion(promotion_record(built.path, "the demo builder", "2026-12-01"), record_of(built.path))
    return built.path
