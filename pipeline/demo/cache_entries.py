"""How the demo cache's entries are read, judged and thrown away (`memo.py`, `cameras.py`).

The cache (`$PREFLIGHT_CACHE` or `~/.cache/hpc-preflight`) is shared by every build on the machine and
outlives the code that wrote it, so an entry can be anything: a FIFO where an archive was (opening it
blocks forever), arrays of another size than the build asks for (used as they are, the demo's own
models would then look broken), a policy saved with other shapes. An entry is trusted only once it is a
regular file (or folder) whose contents have the shapes the build expects; anything else is a `Damaged`
entry, which `discard` names on one log line and removes, and the caller makes it again, so the build
goes on exactly as on a clean cache.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.errors import InputError, one_line
from pipeline.storage.files import NPY_ERRORS, kind_of, npz_member, regular_file

log = logging.getLogger("pipeline.demo.cache")


class Damaged(Exception):
    """A cache entry that is not what the build would make; the message says what was wrong."""


def kept(path: Path, folder: bool = False) -> bool:
    """Whether an entry is there to be read: False when nothing is at `path` (not kept yet); a `Damaged`
    when something is, but not a regular file (or, with `folder`, a directory). Nothing is opened."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise Damaged(f"a symlink to {os.readlink(path)!r}, which does not exist") from None
        return False
    except OSError as exc:  # a symlink loop, no permission
        raise Damaged(f"cannot stat it: {exc}") from exc
    wanted, name = (stat.S_ISDIR, "a folder") if folder else (stat.S_ISREG, "a regular file")
    if not wanted(info.st_mode):
        found = "a regular file" if stat.S_ISREG(info.st_mode) else kind_of(info.st_mode)
        raise Damaged(f"is {found}, expected {name}; not opened")
    return True


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of a kept `.npz` (a regular file, never unpickled, each member's header checked against
    its bytes before it is read), or `Damaged` saying why it cannot be read."""
    try:
        regular_file(path, "a demo cache archive (.npz)")
        with np.load(path, allow_pickle=False) as archive:
            return {name: npz_member(archive, name, path) for name in archive.files}
    except InputError as exc:
        raise Damaged(one_line(exc).removeprefix(f"{path}: ")) from exc
    except (*NPY_ERRORS, KeyError) as exc:
        raise Damaged(f"not a readable .npz archive: {type(exc).__name__}: {one_line(exc)}") from exc


def expect_array(name: str, array: np.ndarray, shape: Sequence[int | None], dtype: object = None) -> None:
    """`Damaged` unless `array` has `shape` (None: any length on that axis) and, if given, `dtype`."""
    want = tuple(shape)
    fits = array.ndim == len(want) and all(w in (None, d) for w, d in zip(want, array.shape, strict=True))
    shown = ", ".join("*" if w is None else str(w) for w in want)
    if not fits:
        raise Damaged(f"array {name!r} has shape {list(array.shape)}, expected [{shown}]")
    if dtype is not None and array.dtype != np.dtype(dtype):  # type: ignore[call-overload]
        raise Damaged(f"array {name!r} is {array.dtype}, expected {np.dtype(dtype)}")  # type: ignore[call-overload]


def expect_names(found: Sequence[str], wanted: Sequence[str]) -> None:
    """`Damaged` unless the entry holds exactly the `wanted` arrays (a missing or a stray one means it was
    made for other settings, or written by other code)."""
    missing, extra = sorted(set(wanted) - set(found)), sorted(set(found) - set(wanted))
    if missing or extra:
        parts = [f"lacks {_few(missing)}"] if missing else []
        parts += [f"holds unexpected {_few(extra)}"] if extra else []
        raise Damaged(" and ".join(parts) + f" ({len(wanted)} arrays expected)")


def _few(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def discard(path: Path, problem: BaseException | str) -> None:
    """Log one line naming the entry and what was wrong, then remove it (a folder with its contents, a
    FIFO or file by unlinking, never opening it), so the caller makes and keeps a good one."""
    log.warning("demo cache: %s: %s; discarded, made again", path, one_line(problem))
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass  # a concurrent build discarded it first
    except OSError as exc:  # an unwritable cache: the build goes on and writes over it if it can
        log.warning("demo cache: %s could not be removed: %s", path, one_line(exc))
