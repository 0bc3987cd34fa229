"""The session's ledger of embedded-demo builds, so that a build the session already paid for is a
failure instead of a silent half minute (with cameras a full demo build is ~35 s on one core).

Every in-process build goes through `pipeline.demo.build._build_parts` (module fixtures, the session's
`DemoCache`), which `install` wraps; a launch's own build (a subprocess) is read back from the marker it
leaves (a `demo.json` new or rewritten during the launch). A second build of the same settings digest in
one session is a duplicate: the test during whose setup or call it happened fails, naming both builders.
Tests of the build itself that must build fresh use settings of their own, or `allow_rebuild`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class BuildLedger:
    """Digest -> the first builder; the duplicates found since the session began."""

    built: dict[str, str] = field(default_factory=dict)
    duplicates: list[str] = field(default_factory=list)
    current: str = "session setup"  # the test running now (its setup, call or teardown)
    allowed: int = 0  # >0 inside `allow_rebuild`

    def record(self, digest: str, variant: str, how: str) -> None:
        where = f"{self.current} ({how})"
        if digest not in self.built:
            self.built[digest] = where
        elif not self.allowed:
            first = self.built[digest]
            self.duplicates.append(f"{where} rebuilt the {variant} demo {digest}, already built by {first}")

    def taken_since(self, seen: int) -> list[str]:
        return self.duplicates[seen:]

    @contextmanager
    def allow_rebuild(self) -> Iterator[None]:
        """For a test of the build itself: the builds inside are recorded but never duplicates."""
        self.allowed += 1
        try:
            yield
        finally:
            self.allowed -= 1


LEDGER = BuildLedger()
# the session's `DemoCache` (tests/conftest.py), held here and not in the conftest: pytest imports that as
# `conftest` while test modules import `tests.conftest`, two module objects, and a global set in one of
# them was never seen by `launch` in the other (so no launch was ever seeded: each built its own demo)
SESSION_DEMOS: Any = None


def install(ledger: Callable[[], BuildLedger]) -> Callable[[], None]:
    """Wrap the demo build's one body so every in-process build is recorded; returns the undo."""
    from pipeline.demo import build as module

    original = module._build_parts

    def recorded(cfg: dict[str, Any], out: Path, phase: Any) -> Any:
        ledger().record(module.digest(cfg), str(cfg["variant"]), f"built in-process into {out.parent}")
        return original(cfg, out, phase)

    module._build_parts = recorded  # type: ignore[assignment]

    def undo() -> None:
        module._build_parts = original  # type: ignore[assignment]

    return undo


def markers(output_root: Path) -> dict[Path, int]:
    """Each demo marker under `output_root` and its mtime in ns: what a launch found before it started."""
    return {m: m.stat().st_mtime_ns for m in sorted((output_root / "demo").glob("*/demo.json"))}


def launch_builds(output_root: Path, before: dict[Path, int]) -> list[tuple[str, str]]:
    """(digest, variant) of every demo a launch under `output_root` built: a marker that was not there
    before it (`markers`), or was rewritten. A seed copied just before the launch keeps its marker
    unchanged, however close in time the copy was (a tiny demo copies within the mtime's rounding)."""
    out = []
    for marker, mtime in markers(output_root).items():
        if before.get(marker) == mtime:
            continue
        try:
            data = json.loads(marker.read_text())
        except (OSError, ValueError):
            continue
        out.append((str(data.get("digest")), str(data.get("settings", {}).get("variant"))))
    return out
