"""What a stage reads from disk, declared once: launch validation and fingerprints both come from here.

A stage that reads a path its declaration does not name can be validated at launch and yet reused from
the audit history after that path's bytes changed (the teacher_forced models once were: only their path
strings reached the fingerprint). So every path a stage reads is an `Input` in its `Stage.inputs`: a
config key (a `[*]` stands for every item of a list, e.g. `stages.teacher_forced.models[*].path`), the
kind of file it must be (the readers' own detection, asked at launch), and whether its files are hashed
whole whatever their size (models and configs: the bytes a training run loads must be proven identical).

`derive` maps the configured value to the path actually read, where the stage reads a fixed place
beside it (the demo's teacher-forced models beside its dataset); it returns None where there is none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# what launch asks of a path: a reader's detection, that it exists, or nothing (`optional`: a file the
# stage writes where it is absent, e.g. a sample manifest; fingerprinted when present)
KINDS = ("model", "training", "dataset", "folder", "checkpoint", "file", "exists", "optional")
_PART = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[\*\])?$")


@dataclass(frozen=True)
class Input:
    """One path (or list of paths) a stage reads, by its key in the composed config."""

    key: str
    kind: str = "exists"
    whole: bool = False  # every file hashed whole (sha256), whatever its size
    name: str | None = None  # the fingerprint's name; default `model` for `model.path`, else the key
    derive: Callable[[str], str | None] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"input {self.key}: unknown kind {self.kind!r}; known: {KINDS}")
        if not all(_PART.match(part) for part in self.key.split(".")):
            raise ValueError(f"input {self.key!r}: expected dotted names, `[*]` after a list's name")

    def print_name(self, concrete: str) -> str:
        """`model` for `model.path` (the names records have always used), else the concrete key."""
        if self.name:
            return self.name if concrete == self.key else f"{self.name}{concrete[len(self.key) :]}"
        head, _, tail = concrete.partition(".")
        return head if tail == "path" else concrete

    def resolve(self, cfg: Mapping[str, Any]) -> Iterator[tuple[str, str | None]]:
        """(concrete key, path) for each place the key names; a path is None where the config sets
        none (an absent input stays comparable: its fingerprint is `none`)."""
        for concrete, value in _walk(cfg, self.key.split("."), ""):
            path = str(value) if value not in (None, "") else None
            if path is not None and self.derive is not None:
                path = self.derive(path)
            yield concrete, path

    def blank(self, cfg: Mapping[str, Any]) -> Iterator[str]:
        """The concrete keys set to an empty (or blank) string: typed, so not the same as unset."""
        for concrete, value in _walk(cfg, self.key.split("."), ""):
            if isinstance(value, str) and not value.strip():
                yield concrete


# the built-in shorthands (`inputs=("model", "dataset")`): a top-level section's `path`
SECTIONS: dict[str, Input] = {
    "model": Input("model.path", "model", whole=True),
    "training": Input("training.path", "training", whole=True),
    "dataset": Input("dataset.path", "dataset"),
    "release": Input("release.path", "folder"),
    "cache": Input("cache.path", "folder"),
}


def _walk(node: Any, parts: list[str], prefix: str) -> Iterator[tuple[str, Any]]:
    if not parts:
        yield prefix, node
        return
    match = _PART.match(parts[0])
    assert match is not None
    name, every = match.group(1), bool(match.group(2))
    here = f"{prefix}.{name}" if prefix else name
    child = node.get(name) if hasattr(node, "get") else None
    if not every:
        if child is not None or len(parts) == 1:
            yield from _walk(child, parts[1:], here)
        return
    for index, item in enumerate(child or ()):
        yield from _walk(item, parts[1:], f"{here}[{index}]")
