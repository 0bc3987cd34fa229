"""Proprio functions (`stages.render_cache.proprio_fn: module:function`): `f(episode, t) -> vector`.

The cache's proprio array must equal `f(release episode, t)` row for row; the function is the spec of
what a policy sees as proprioception, so the check recomputes it rather than trusting the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from pipeline.errors import ConfigError, InputError
from pipeline.stages.config import resolve_callable

OGBENCH_PROPRIO_DIMS = 19  # joint pos 6, joint vel 6, effector xyz 3, yaw cos/sin 2, gripper 1, contact 1


def ogbench_cube(episode: Mapping[str, np.ndarray], t: int) -> np.ndarray:
    """OGBench manipspace's proprio block: the first 19 dims of the state observation, as float32."""
    return np.asarray(episode["observation"][t][:OGBENCH_PROPRIO_DIMS], dtype=np.float32)


def resolve(spec: str, key: str = "stages.render_cache.proprio_fn") -> Callable[..., np.ndarray]:
    """The configured proprio function; a bad name is a config error (checked at launch)."""
    try:
        return resolve_callable(spec, key)
    except InputError as exc:
        raise ConfigError(key, str(exc).removeprefix(f"{key}: ")) from None
