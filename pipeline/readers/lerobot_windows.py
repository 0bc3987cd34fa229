"""The frames one LeRobot training sample reads, as LeRobot 0.4.4 computes them per policy type.

LeRobot's dataset turns a policy config's `observation_delta_indices`, `action_delta_indices` and
`reward_delta_indices` into `delta_timestamps`: the frames, relative to the sampled one, that each
sample loads (None: the sampled frame alone). They are properties of each policy's config class, not
fields of `config.json`, so a generic rule (longest chunk + observation steps - 1) is wrong for some
types: diffusion's actions start at the first observation step (window `horizon`, not
`horizon + n_obs_steps - 1`), TD-MPC reads `horizon + 1` observations. This module restates 0.4.4's
properties from the fields they read (checked against the package itself where it is installed,
tests/readers/test_lerobot_windows.py); an unknown type or a missing field gives None, and the caller
falls back to the generic rule and says so.

The indices are ranges, never lists built in full: a `chunk_size` of 10**12 is a window of 10**12
frames (every episode too short for it), not a MemoryError. `checked_config` refuses what LeRobot's
own config classes would: a `type` that is not a string, a window field that is not an integer
(JSON `true` is no step count) or below its least value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.readers.lerobot_paths import shown

Pieces = tuple[range, ...] | None  # the indices, as runs of evenly spaced frames (lazy: never listed)
Deltas = tuple[Pieces, Pieces, Pieces]  # observation, action, reward
LISTED = 4096  # indices kept as a list in the hints (what the row shows); longer: first, last, count
# the fields that size a window, with the least value LeRobot's config classes accept
LEAST = {
    "n_obs_steps": 1,
    "chunk_size": 1,
    "horizon": 1,
    "n_action_steps": 1,
    "action_horizon": 1,
    "action_chunk_size": 1,
    "n_action_pred_token": 1,
    "drop_n_last_frames": 0,
    "frame_gap": 1,
    "max_rewind_steps": 0,
}


def _chunk(c: Mapping[str, int]) -> Deltas:
    return None, (range(c["chunk_size"]),), None


def _diffusion(c: Mapping[str, int]) -> Deltas:
    start = 1 - c["n_obs_steps"]
    return (range(start, 1),), (range(start, start + c["horizon"]),), None


def _vqbet(c: Mapping[str, int]) -> Deltas:
    start = 1 - c["n_obs_steps"]
    return (
        (range(start, 1),),
        (range(start, c["n_action_pred_token"] + c["action_chunk_size"] - 1),),
        None,
    )


def _tdmpc(c: Mapping[str, int]) -> Deltas:
    return (range(c["horizon"] + 1),), (range(c["horizon"]),), (range(c["horizon"]),)


def _groot(c: Mapping[str, int]) -> Deltas:
    return None, (range(min(c["chunk_size"], 16)),), None


def _smolvla(c: Mapping[str, int]) -> Deltas:
    return (range(1),), (range(c["chunk_size"]),), None


def _sarm(c: Mapping[str, int]) -> Deltas:
    half, gap = c["n_obs_steps"] // 2, c["frame_gap"]
    around = range(-gap * half, gap * half + 1, gap)  # -gap*half .. 0 .. gap*half
    return (around, range(-gap, -gap * (c["max_rewind_steps"] + 1), -gap)), None, None


def _single(c: Mapping[str, int]) -> Deltas:
    return None, None, None


DELTAS: dict[str, Callable[[Mapping[str, int]], Deltas]] = {
    "act": _chunk,
    "pi0": _chunk,
    "pi05": _chunk,
    "pi0_fast": _chunk,
    "wall_x": _chunk,
    "xvla": _chunk,
    "smolvla": _smolvla,
    "groot": _groot,
    "diffusion": _diffusion,
    "vqbet": _vqbet,
    "tdmpc": _tdmpc,
    "sarm": _sarm,
    "sac": _single,
    "reward_classifier": _single,
}
KINDS = ("observation", "action", "reward")


def checked_config(config: Any, path: Path) -> dict[str, Any]:
    """A policy's config.json as LeRobot's config classes accept it, else an InputError naming the file,
    the field and the value: an object, a string `type`, and integer window fields at or above their
    least value (`true` is JSON's boolean, not a step count; null counts as absent)."""
    if not isinstance(config, dict):
        raise InputError(
            f"{path}: expected a JSON object (a LeRobot policy config), got {type(config).__name__}",
            path=path,
            field="<root>",
        )
    kind = config.get("type")
    if kind is not None and not isinstance(kind, str):
        raise InputError(
            f"{path}: field 'type' is {shown(kind)}; expected a policy type name, a string such as 'act'",
            path=path,
            field="type",
        )
    for name, least in LEAST.items():
        value = config.get(name)
        whole = isinstance(value, int) and not isinstance(value, bool)
        if value is not None and (not whole or value < least):
            raise InputError(
                f"{path}: field '{name}' is {shown(value)}; expected an integer >= {least} (frames or steps "
                "of the training window)",
                path=path,
                field=name,
            )
    return config


def delta_indices(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """`{kind: indices}` for the kinds this policy type loads more than the sampled frame of, as
    LeRobot 0.4.4 computes them from the config; None for an unknown type or a missing/non-integer field.
    Indices longer than LISTED are given as `{"first", "last", "count", "min", "max"}`, never listed."""
    rule = DELTAS.get(str(config.get("type")))
    if rule is None:
        return None
    ints = {k: v for k, v in config.items() if isinstance(v, int) and not isinstance(v, bool)}
    try:
        found = rule(ints)
    except (KeyError, ValueError):  # a field missing, or a zero step (range() refuses it)
        return None
    return {kind: _listed(found[i]) for i, kind in enumerate(KINDS) if found[i] is not None}


def _listed(pieces: tuple[range, ...]) -> Any:
    kept = [r for r in pieces if r]  # `len` overflows past 2**63 frames; the ends never do
    ends = [(r[0], r[-1]) for r in kept]
    count = sum((r[-1] - r[0]) // r.step + 1 for r in kept)
    if count <= LISTED:
        return [i for r in pieces for i in r]
    flat = [i for pair in ends for i in pair]
    return {"first": ends[0][0], "last": ends[-1][1], "count": count, "min": min(flat), "max": max(flat)}


def span(deltas: Mapping[str, Any]) -> int:
    """Frames from the earliest to the latest one a sample reads, the sampled frame (0) included,
    computed from the ends of each kind's indices (a listed or a summarised one alike)."""
    low, high = 0, 0
    for indices in deltas.values():
        if isinstance(indices, Mapping):
            low, high = min(low, indices["min"]), max(high, indices["max"])
        elif indices:
            low, high = min(low, *indices), max(high, *indices)
    return high - low + 1
