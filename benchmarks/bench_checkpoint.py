"""The atomic, verified checkpoint save against a plain safetensors save of the same tensors, same run.

    python benchmarks/bench_checkpoint.py [--mib 128] [--repeats 5] [--disk DIR] [--json OUT]

Variants, interleaved `repeats` times per location, medians compared:
  plain        safetensors.torch.save_file(tensors, path)             (what a training loop does)
  plain+fsync  the same, then fsync of the file                        (a durable plain save)
  library      pipeline.storage.save_checkpoint(tensors, metadata, primary=...): preflight (statvfs +
               quota probe), temp file, write while a thread computes sha256, fsync, rename, folder
               fsync, JSON sidecar, manifest line under the lock
Locations: a tmpfs (mounted here when root, else /dev/shm) and a disk folder (default: beside the repo).
Prints one JSON line: ratios library/plain and library/(plain+fsync) per location, and the time of
sha256 alone over the same bytes (the floor of any verified save: hashing runs beside the write, so on
an idle multi-core node the library costs about max(write, hash); on a busy one, their sum).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipeline.storage import save_checkpoint


def tensors(mib: int) -> dict[str, torch.Tensor]:
    """A policy-like state dict: a few large matrices and many small vectors, `mib` MiB in all."""
    torch.manual_seed(0)
    big = mib * 2**20 // 4 // 8
    out = {f"layers.{i}.weight": torch.randn(big) for i in range(8)}
    out.update({f"layers.{i}.bias": torch.randn(256) for i in range(64)})
    return out


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def plain(state: dict[str, torch.Tensor], path: Path, fsync: bool) -> None:
    save_file(state, str(path))
    if fsync:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def tmpfs_folder(mib: int) -> Iterator[Path]:
    """A fresh tmpfs when root can mount one (its size fits two checkpoints), else /dev/shm."""
    target = Path(tempfile.mkdtemp(prefix="bench-ckpt-tmpfs-"))
    mounted = (
        os.geteuid() == 0
        and shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={4 * mib + 64}m", "tmpfs", str(target)], capture_output=True
        ).returncode
        == 0
    )
    if not mounted:
        target.rmdir()
        target = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir="/dev/shm"))
    try:
        yield target
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(target)], capture_output=True)
            target.rmdir()
        else:
            shutil.rmtree(target, ignore_errors=True)


def measure(folder: Path, state: dict[str, torch.Tensor], repeats: int) -> dict[str, object]:
    times: dict[str, list[float]] = {"plain": [], "plain+fsync": [], "library": [], "sha256 alone": []}
    primary = folder / "ckpt"
    variants = {
        "plain": lambda: plain(state, folder / "plain.safetensors", fsync=False),
        "plain+fsync": lambda: plain(state, folder / "plain_fsync.safetensors", fsync=True),
        "library": lambda: save_checkpoint(state, {"step": 1}, primary=primary, name="bench"),
    }
    for fn in variants.values():
        fn()  # warm-up: page cache, first-time imports, the manifest's init line
    data = (folder / "plain.safetensors").read_bytes()
    variants["sha256 alone"] = lambda: hashlib.sha256(data).hexdigest()
    for _ in range(repeats):
        for key, fn in variants.items():
            times[key].append(timed(fn))
    median = {k: statistics.median(v) for k, v in times.items()}
    return {
        "folder": str(folder),
        "median_s": {k: round(v, 4) for k, v in median.items()},
        "ratio_vs_plain": round(median["library"] / median["plain"], 3),
        "ratio_vs_plain_fsync": round(median["library"] / median["plain+fsync"], 3),
        "ratio_sha256_alone_vs_plain": round(median["sha256 alone"] / median["plain"], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--disk", type=Path, default=Path(__file__).resolve().parents[1] / ".bench-ckpt")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    state = tensors(args.mib)
    result: dict[str, object] = {"mib": args.mib, "repeats": args.repeats, "cpus": os.cpu_count()}
    with tmpfs_folder(args.mib) as folder:
        result["tmpfs"] = measure(folder, state, args.repeats)
    args.disk.mkdir(parents=True, exist_ok=True)
    disk = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.disk))
    try:
        result["disk"] = measure(disk, state, args.repeats)
    finally:
        shutil.rmtree(disk, ignore_errors=True)
    line = json.dumps(result)
    print(line)
    if args.json:
        args.json.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
