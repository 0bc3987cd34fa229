"""What a dataset format holds by design: the fields some checks need and some formats never store.

A robomimic HDF5 file has no per-row timestamps and lists no episode lengths apart from its rows; `.npz`
episodes keep camera frames as arrays, not as videos. A check that needs such a field cannot run on any
file of that format, which is the format's nature, not a fault of the data: its row is `skipped`, naming
the format and what would enable it. `unverifiable`, which blocks, stays for a check that could run and
could not decide (a LeRobot dataset whose videos were not downloaded). Each reader says what its format
carries (`DatasetContract.carries`); rows ask that, never the format's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

TIMESTAMPS = "timestamps"
EPISODE_LENGTHS = "episode_lengths"
FRAMES = "frames"
FPS = "fps"
CARRIED = {  # each field in a row's words
    TIMESTAMPS: "per-row timestamps",
    FPS: "declared frame rate",
    EPISODE_LENGTHS: "episode lengths listed apart from the rows",
    FRAMES: "camera frames as videos or image files",
}


@dataclass(frozen=True)
class Carries:
    """The fields a format holds (LeRobot's: all of them), and for each one it lacks, what would enable
    the checks that need it."""

    format: str = "LeRobot"
    fields: frozenset[str] = frozenset(CARRIED)
    enable: Mapping[str, str] = field(default_factory=dict)

    def __contains__(self, name: object) -> bool:
        return name in self.fields

    def skipped(self, name: str, checks: str) -> str:
        """A skipped row's message: the format, the field it lacks, the checks left out, the way in."""
        how = self.enable.get(name)
        text = f"the {self.format} format carries no {CARRIED[name]} by design: {checks} not checked"
        return f"{text}; {how}" if how else text


__all__ = ["CARRIED", "EPISODE_LENGTHS", "FPS", "FRAMES", "TIMESTAMPS", "Carries"]
