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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Indices = list[int] | None
Deltas = tuple[Indices, Indices, Indices]  # observation, action, reward


def _chunk(c: Mapping[str, int]) -> Deltas:
    return None, list(range(c["chunk_size"])), None


def _diffusion(c: Mapping[str, int]) -> Deltas:
    start = 1 - c["n_obs_steps"]
    return list(range(start, 1)), list(range(start, start + c["horizon"])), None


def _vqbet(c: Mapping[str, int]) -> Deltas:
    start = 1 - c["n_obs_steps"]
    return (
        list(range(start, 1)),
        list(range(start, c["n_action_pred_token"] + c["action_chunk_size"] - 1)),
        None,
    )


def _tdmpc(c: Mapping[str, int]) -> Deltas:
    return list(range(c["horizon"] + 1)), list(range(c["horizon"])), list(range(c["horizon"]))


def _groot(c: Mapping[str, int]) -> Deltas:
    return None, list(range(min(c["chunk_size"], 16))), None


def _smolvla(c: Mapping[str, int]) -> Deltas:
    return [0], list(range(c["chunk_size"])), None


def _sarm(c: Mapping[str, int]) -> Deltas:
    half, gap = c["n_obs_steps"] // 2, c["frame_gap"]
    around = [-gap * i for i in range(half, 0, -1)] + [0] + [gap * i for i in range(1, half + 1)]
    return around + [-gap * (i + 1) for i in range(c["max_rewind_steps"])], None, None


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


def delta_indices(config: Mapping[str, Any]) -> dict[str, list[int]] | None:
    """`{kind: indices}` for the kinds this policy type loads more than the sampled frame of, as
    LeRobot 0.4.4 computes them from the config; None for an unknown type or a missing/non-integer field."""
    rule = DELTAS.get(str(config.get("type")))
    if rule is None:
        return None
    ints = {k: v for k, v in config.items() if isinstance(v, int) and not isinstance(v, bool)}
    try:
        found = rule(ints)
    except KeyError:
        return None
    return {kind: list(found[i]) for i, kind in enumerate(KINDS) if found[i] is not None}


def span(deltas: Mapping[str, list[int]]) -> int:
    """Frames from the earliest to the latest one a sample reads, the sampled frame (0) included."""
    every = [0, *(i for indices in deltas.values() for i in indices)]
    return max(every) - min(every) + 1
