"""The release: per-episode files (.npz read with allow_pickle=False, or HDF5) and subset manifests.

A manifest is JSON lines, one episode per line: `{"archive_file": ..., "transition_count": ...}`; a
budget's manifest lists the episodes its cache was built from, in cache order. `archive_file` comes from
a file someone else wrote, so it is resolved inside `<root>/<episode_dir>` and refused when it escapes.
Every problem is an `InputError` naming the file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import InputError
from pipeline.storage.files import MAX_JSONL_BYTES, NPY_ERRORS, npz_member, read_text

HDF5_SUFFIXES = (".h5", ".hdf5")


@dataclass(frozen=True)
class Entry:
    """One manifest line: which episode file, and how many cache rows it claims."""

    archive_file: str
    transition_count: int
    path: Path


def manifest_path(root: Path, template: str, budget: int) -> Path:
    return Path(root) / template.format(budget=budget)


def read_manifest(root: Path, template: str, budget: int, episode_dir: str) -> list[Entry]:
    """The budget's manifest, every line validated (fields, types, containment)."""
    path = manifest_path(root, template, budget)
    if not path.exists() and not path.is_symlink():
        raise InputError(
            f"{path}: manifest for budget {budget} does not exist", path=str(path), field="manifest"
        )
    base = (Path(root) / episode_dir).resolve()
    entries: list[Entry] = []
    text = read_text(path, f"the subset manifest of budget {budget} (JSON lines)", MAX_JSONL_BYTES)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{where}: not JSON ({exc})", path=str(path), field=f"line {lineno}") from None
        entries.append(_entry(row, where, path, base))
    if not entries:
        raise InputError(f"{path}: manifest lists no episodes", path=str(path), field="archive_file")
    return entries


def _entry(row: object, where: str, path: Path, base: Path) -> Entry:
    if not isinstance(row, Mapping):
        raise InputError(f"{where}: expected an object per line", path=str(path), field="line")
    name, count = row.get("archive_file"), row.get("transition_count")
    if not isinstance(name, str) or not name:
        raise InputError(
            f"{where}: archive_file missing or not a string", path=str(path), field="archive_file"
        )
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise InputError(
            f"{where}: transition_count must be an integer >= 0, got {count!r}",
            path=str(path),
            field="transition_count",
        )
    target = (base / name).resolve()
    if not target.is_relative_to(base):
        raise InputError(
            f"{where}: archive_file {name!r} resolves to {target}, outside the release's {base}",
            path=str(path),
            field="archive_file",
        )
    return Entry(name, count, target)


@contextmanager
def open_episode(entry: Entry, required: tuple[str, ...]) -> Iterator[Mapping[str, np.ndarray]]:
    """The episode's arrays (npz without pickles, or HDF5 datasets), with `required` keys checked."""
    path = entry.path
    if not path.is_file():
        raise InputError(f"{path}: episode file does not exist", path=str(path), field="archive_file")
    if path.suffix in HDF5_SUFFIXES:
        import h5py

        try:
            handle = h5py.File(path, "r")
        except OSError as exc:
            raise InputError(
                f"{path}: not a readable HDF5 file ({exc})", path=str(path), field="file"
            ) from None
        with handle:
            data = _Arrays(path, {k: handle[k] for k in handle.keys() if isinstance(handle[k], h5py.Dataset)})
            _require(data, required)
            yield data
        return
    try:
        handle = np.load(path, allow_pickle=False)
    except NPY_ERRORS as exc:
        raise InputError(f"{path}: not a readable .npz ({exc})", path=str(path), field="file") from None
    with handle:
        data = _Arrays(path, handle)
        _require(data, required)
        yield data


class _Arrays(Mapping[str, np.ndarray]):
    """Read-once view of an episode: a truncated member is an InputError naming file and key."""

    def __init__(self, path: Path, source: Mapping[str, object]) -> None:
        self.path, self._source, self._cache = path, source, {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._cache:
            try:
                source = self._source
                value = npz_member(source, key, self.path) if hasattr(source, "zip") else source[key]
                self._cache[key] = np.asarray(value)
            except KeyError:
                raise InputError(f"{self.path}: no array {key!r}", path=str(self.path), field=key) from None
            except NPY_ERRORS as exc:
                raise InputError(
                    f"{self.path}: array {key!r} unreadable ({exc})", path=str(self.path), field=key
                ) from None
        return self._cache[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._source.keys())  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self._source)  # type: ignore[arg-type]

    def __contains__(self, key: object) -> bool:
        return key in self._source


def _require(data: _Arrays, required: tuple[str, ...]) -> None:
    lengths = {}
    for key in required:
        arr = data[key]
        if arr.ndim < 1:
            raise InputError(f"{data.path}: {key!r} is a scalar", path=str(data.path), field=key)
        lengths[key] = len(arr)
    first = required[0] if required else None
    odd = [k for k in required if lengths[k] != lengths[first]]
    if odd:
        raise InputError(
            f"{data.path}: {odd[0]!r} has {lengths[odd[0]]} rows but {first!r} has {lengths[first]}",
            path=str(data.path),
            field=odd[0],
        )
