"""Streamed sha256 of an image (pipeline.readers.sif.sha256_file), the digest container_check measures
inside every job, against `hashlib.file_digest` (CPython's own streaming) and `sha256sum` as baselines,
on one file in the same run. Also times `read_sif` (header + descriptors) on it. Prints one JSON line.

    python benchmarks/bench_sif_hash.py [--mib 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from pipeline.readers.sif import DESCRIPTOR, HEADER, read_sif, sha256_file


def make_image(path: Path, mib: int) -> None:
    """A valid SIF with one primary squashfs-typed partition of `mib` MiB of random bytes."""
    data_off, size = 4096 + DESCRIPTOR.size, mib * 2**20
    header = HEADER.pack(
        b"",
        b"SIF_MAGIC\0",
        b"01\0",
        b"02\0",
        os.urandom(16),
        0,
        0,
        0,
        1,
        4096,
        DESCRIPTOR.size,
        data_off,
        size,
    )
    extra = struct.pack("<ii3s", 1, 2, b"02\0").ljust(384, b"\0")
    desc = DESCRIPTOR.pack(0x4004, True, 1, 0xF0000001, 0, data_off, size, size, 0, 0, 0, 0, b"", extra)
    with open(path, "wb") as handle:
        handle.write(header.ljust(4096, b"\0") + desc)
        for _ in range(mib):
            handle.write(os.urandom(2**20))


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.sif"
        make_image(path, args.mib)
        ours = timed(lambda: sha256_file(path), args.repeats)
        with open(path, "rb") as handle:
            baseline = timed(lambda: (handle.seek(0), hashlib.file_digest(handle, "sha256")), args.repeats)
        tool = timed(
            lambda: subprocess.run(["sha256sum", str(path)], capture_output=True, check=True), args.repeats
        )
        parse = timed(lambda: read_sif(path), max(args.repeats, 20))
    print(
        json.dumps(
            {
                "mib": args.mib,
                "repeats": args.repeats,
                "sha256_file_s": round(ours, 4),
                "file_digest_s": round(baseline, 4),
                "sha256sum_s": round(tool, 4),
                "ratio_vs_file_digest": round(ours / baseline, 3),
                "ratio_vs_sha256sum": round(ours / tool, 3),
                "mib_per_s": round(args.mib / ours, 1),
                "read_sif_ms": round(parse * 1000, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
