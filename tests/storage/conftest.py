"""A real small filesystem for ENOSPC: a tmpfs mounted by the test (needs root and `mount`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _mount(target: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for ENOSPC needs root (mount -t tmpfs)")
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("mount/umount not on PATH: cannot mount a tmpfs for ENOSPC")
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs failed here (no CAP_SYS_ADMIN?): {done.stderr.strip()}")


@contextlib.contextmanager
def tmpfs(target: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `target` for the block (skips the test where it cannot mount)."""
    _mount(target, size)
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """`small_fs("4m")` mounts a fresh tmpfs of that size and returns its folder; unmounted after."""
    mounted: list[Path] = []

    def make(size: str = "4m", name: str = "small") -> Path:
        target = tmp_path / name
        _mount(target, size)
        mounted.append(target)
        return target

    yield make
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


def fill(folder: Path, leave: int = 0) -> Path:
    """Write a filler file until the filesystem is full (ENOSPC), then give back `leave` bytes."""
    filler = folder / "filler.bin"
    block = b"\xa5" * 65536
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while os.write(fd, block) > 0:
            pass
    except OSError:
        pass  # ENOSPC: the filesystem is full
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(filler.stat().st_size - leave, 0))
    return filler


def remount(folder: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(folder)], check=True, capture_output=True)
