"""Build a demo folder once and share it: concurrent launches race safely, later ones reuse it.

Each builder writes into a private temporary folder beside the target and renames it into place; the
loser of a race discards its copy and uses the winner's. A folder is current when its marker says it
was built from the same settings (the caller's `current` test).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.errors import FULL_ERRNOS, disk_full


def build_once(
    root: Path,
    name: str,
    current: Callable[[Path], bool],
    build: Callable[[Path], object],
    needed: int | None = None,
) -> Path:
    """`root/name`, built by `build(folder)` unless `current(root/name)` already holds; a full disk is
    one `InputError` naming `root`, the `needed` bytes (an estimate) and the free ones."""
    root, target = Path(root), Path(root) / name
    if current(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        try:
            build(scratch)
        except OSError as exc:
            if exc.errno not in FULL_ERRNOS:
                raise
            kept = f"the partial build was removed; {target} was left as it was"
            raise disk_full(root, exc, needed=needed, kept=kept) from None
        if target.exists():
            stale = root / f".stale-{name}-{os.getpid()}-{time.time_ns()}"
            try:
                target.rename(stale)
                shutil.rmtree(stale, ignore_errors=True)
            except OSError:
                pass
        try:
            scratch.rename(target)
        except OSError:  # another launch renamed its copy first: use the winner's
            pass
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not current(target):
        raise RuntimeError(f"demo build {name!r} under {root} did not complete")
    return target
