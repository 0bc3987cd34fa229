"""The atomic, verified checkpoint save against a plain safetensors save of the same tensors, same run.

    python benchmarks/bench_checkpoint.py [--mib 256] [--repeats 7] [--disk DIR] [--json OUT]

Variants, interleaved `repeats` times per location (order rotated each time), medians compared:
  plain        safetensors.torch.save_file(tensors, path)              (what a training loop does)
  plain+fsync  the same, then fsync of the file and of its folder       (the durable plain save)
  library      pipeline.storage.save_checkpoint(tensors, metadata, primary=...): preflight (statvfs +
               quota probe), temp file, write while a thread computes sha256, fsync, re-read check of
               size, header and each tensor's ends, rename, folder fsync, JSON sidecar, manifest line
  write alone  the library's streamed write of the same bytes, fsynced, with no hash and no check
  sha256 alone hashlib.sha256 over the same bytes (CPU that every save recording a sha256 pays)
Locations: a tmpfs (mounted here when root, else /dev/shm) and a disk folder (default: beside the repo).
Prints one JSON line: per location the median seconds, bytes/s and CPU seconds (all threads) of each
variant, and the ratios library/plain and library/(plain+fsync) of the medians.

Reading the numbers: the library does the write and the sha256 on two threads, so its wall time is about
max(write, hash) when a second core is free and their sum when it is not. `cores_free` (two sha256
threads against one, measured before and after the repeats) says which case this run had; the CPU-second
ratio is the part of the cost that no scheduling changes.
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
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipeline.storage import save_checkpoint, tensorfile


def tensors(mib: int) -> dict[str, torch.Tensor]:
    """A policy-like state dict: 24 large matrices and 24 small vectors, `mib` MiB in all."""
    torch.manual_seed(0)
    big = mib * 2**20 // 4 // 24
    out = {f"layers.{i}.weight": torch.randn(big // 1024, 1024) for i in range(24)}
    out.update({f"layers.{i}.bias": torch.randn(1024) for i in range(24)})
    return out


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process: every thread, user and system)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def plain(state: dict[str, torch.Tensor], path: Path, fsync: bool) -> None:
    save_file(state, str(path))
    if fsync:
        _fsync(path)
        _fsync(path.parent)


def write_alone(state: dict[str, torch.Tensor], path: Path) -> None:
    """The library's write of the same bytes (no hash, no check, no sidecar), fsynced: with
    `sha256 alone`, the two halves the library's time is made of."""
    head, pieces = tensorfile.layout(state)[:2]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for piece in [memoryview(head), *pieces]:
            done = 0
            while done < len(piece):
                done += os.write(fd, piece[done:])
        os.fsync(fd)
    finally:
        os.close(fd)


def cores_free(data: bytes) -> float:
    """Two sha256 threads' throughput over one's: about 2.0 with a second core free, 1.0 without."""
    half = memoryview(data)[: len(data) // 2]
    one, _ = timed(lambda: hashlib.sha256(half).digest())
    threads = [threading.Thread(target=hashlib.sha256, args=(half,)) for _ in range(2)]
    two, _ = timed(lambda: ([t.start() for t in threads], [t.join() for t in threads]))
    return round(2 * one / two, 2)


@contextmanager
def tmpfs_folder(mib: int) -> Iterator[Path]:
    """A fresh tmpfs when root can mount one (its size fits two checkpoints), else /dev/shm."""
    target = Path(tempfile.mkdtemp(prefix="bench-ckpt-tmpfs-"))
    mounted = (
        os.geteuid() == 0
        and shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={5 * mib + 64}m", "tmpfs", str(target)], capture_output=True
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
    primary = folder / "ckpt"
    variants: dict[str, Callable[[], object]] = {
        "plain": lambda: plain(state, folder / "plain.safetensors", fsync=False),
        "plain+fsync": lambda: plain(state, folder / "plain_fsync.safetensors", fsync=True),
        "library": lambda: save_checkpoint(state, {"step": 1}, primary=primary, name="bench"),
    }
    for fn in variants.values():
        fn()  # warm-up: page cache, first-time imports, the manifest's init line
    data = (folder / "plain.safetensors").read_bytes()
    variants["write alone"] = lambda: write_alone(state, folder / "write_alone.safetensors")
    variants["sha256 alone"] = lambda: hashlib.sha256(data).hexdigest()
    free = [cores_free(data)]
    wall: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    order = list(variants)
    for rep in range(repeats):
        for key in order[rep % len(order) :] + order[: rep % len(order)]:  # rotated: no variant always
            w, c = timed(variants[key])  # runs right after the same neighbour
            wall[key].append(w)
            cpu[key].append(c)
    free.append(cores_free(data))
    med = {k: statistics.median(v) for k, v in wall.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    return {
        "folder": str(folder),
        "bytes": len(data),
        "cores_free": free,
        "median_s": {k: round(v, 4) for k, v in med.items()},
        "bytes_per_s": {k: round(len(data) / v) for k, v in med.items()},
        "cpu_s": {k: round(v, 4) for k, v in cpu_med.items()},
        "ratio_vs_plain": round(med["library"] / med["plain"], 3),
        "ratio_vs_plain_fsync": round(med["library"] / med["plain+fsync"], 3),
        "cpu_ratio_vs_plain": round(cpu_med["library"] / cpu_med["plain"], 3),
        "ratio_sha256_alone_vs_plain": round(med["sha256 alone"] / med["plain"], 3),
        "ratio_write_alone_vs_plain": round(med["write alone"] / med["plain"], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--disk", type=Path, default=Path(__file__).resolve().parents[1] / ".bench-ckpt")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    state = tensors(args.mib)
    result: dict[str, object] = {"mib": args.mib, "tensors": len(state), "repeats": args.repeats}
    result |= {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    with tmpfs_folder(args.mib) as folder:
        result["tmpfs"] = measure(folder, state, args.repeats)
    args.disk.mkdir(parents=True, exist_ok=True)
    disk = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.disk))
    try:
        result["disk"] = measure(disk, state, args.repeats)
    finally:
        shutil.rmtree(disk, ignore_errors=True)
    result["load_after"] = os.getloadavg()[0]
    line = json.dumps(result)
    print(line)
    if args.json:
        args.json.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
