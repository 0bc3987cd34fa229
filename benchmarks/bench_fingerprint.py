"""Fingerprint cost on a checkpoint and a many-file dataset: a first launch (every file hashed, the hash
cache filled) against a second one (a warm cache), each as a ratio to `sha256sum` of the same bytes in
the same run. Prints one JSON line.

    python benchmarks/bench_fingerprint.py [--checkpoint-mib 2048] [--files 10000] [--file-kib 16]

The cache keeps an entry only for a file older than its racy window (ctime cannot be set back), so the
benchmark waits that long after writing the files before the first launch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from pipeline.record import hashcache
from pipeline.record.fingerprint import Fingerprinter
from pipeline.record.hashcache import HashCache


def write_inputs(root: Path, checkpoint_mib: int, files: int, file_kib: int) -> tuple[Path, Path]:
    model, dataset = root / "model", root / "dataset" / "data"
    model.mkdir(parents=True)
    dataset.mkdir(parents=True)
    block = os.urandom(2**20)
    with open(model / "model.safetensors", "wb") as handle:
        for _ in range(checkpoint_mib):
            handle.write(block)
    (model / "config.json").write_text('{"type": "act"}')
    for i in range(files):
        (dataset / f"episode_{i:06d}.parquet").write_bytes(block[(i % 64) * 1024 :][: file_kib * 1024])
    return model, dataset.parent


def launch(audit: Path, model: Path, dataset: Path) -> dict[str, float]:
    """One launch's fingerprinting: a new cache from the folder, both inputs, then the save."""
    started = time.perf_counter()
    cache = HashCache(audit)
    hasher = Fingerprinter(cache)
    hasher.path(model, whole=True)
    hasher.path(dataset)
    cache.save()
    return {"s": time.perf_counter() - started, "hits": cache.hits, "bytes_read": cache.bytes_read}


def sha256sum(paths: list[Path]) -> float:
    """`sha256sum` over every file of both inputs (xargs, so argv stays bounded)."""
    listing = "\0".join(str(p) for p in paths).encode()
    started = time.perf_counter()
    subprocess.run(["xargs", "-0", "sha256sum"], input=listing, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint-mib", type=int, default=2048)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--file-kib", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        model, dataset = write_inputs(root, args.checkpoint_mib, args.files, args.file_kib)
        time.sleep(hashcache.RACY_NS / 1e9 + 0.5)  # the files must be older than the racy window
        paths = sorted(p for p in root.rglob("*") if p.is_file())
        baseline = sha256sum(paths)  # also warms the page cache, so both launches read from memory
        audit = root / "audit"
        audit.mkdir()
        first = launch(audit, model, dataset)
        second = launch(audit, model, dataset)
        print(
            json.dumps(
                {
                    "bench": "fingerprint",
                    "checkpoint_mib": args.checkpoint_mib,
                    "files": args.files + 2,
                    "sha256sum_s": round(baseline, 3),
                    "first_launch_s": round(first["s"], 3),
                    "warm_cache_s": round(second["s"], 3),
                    "first_vs_sha256sum": round(first["s"] / baseline, 3),
                    "warm_vs_sha256sum": round(second["s"] / baseline, 3),
                    "warm_cache_hits": second["hits"],
                    "warm_bytes_read": second["bytes_read"],
                }
            )
        )


if __name__ == "__main__":
    main()
