"""D's values as lerobot's parser would take them, checked where they are read.

A rate of 0 divides by zero when a chunk's span is computed, `fast` is no rate, a camera 0 pixels wide
is no camera (not "a size not typed"), a shape of `[Infinity]` is no shape, a rename map that is a list
maps nothing: lerobot refuses each of them when the line runs (draccus: "invalid value", "invalid
choice"), so the gate refuses them too, naming the flag or the file's field, at launch (exit 2) and, for
a job given one, as an `error` row. Nothing here imports lerobot: the launch checks D in milliseconds.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from typing import Any

from pipeline.errors import InputError
from pipeline.readers import lerobot_command
from pipeline.readers.deploy_tables import ENV_TYPES

FIELD = "deploy.command"
SIZE_FLAGS = ("observation_height", "observation_width")  # an env's image size flags (lerobot 0.4.4)


def rate(raw: Any, what: str, field: str) -> float:
    """A rate in frames per second: a finite number > 0."""
    value = _number(raw, what, field, "a rate in fps")
    if not math.isfinite(value) or value <= 0:
        raise InputError(
            f"{field}: {what}={shown(raw)} is no rate; expected a number of fps > 0", field=field
        )
    return value


def size(raw: Any, what: str, field: str) -> int:
    """A count of pixels or of dims: a whole number > 0 (lerobot's int fields take no `2.5`, no `abc`)."""
    if isinstance(raw, str):
        try:
            value: Any = int(raw.strip())
        except ValueError:
            raise InputError(
                f"{field}: {what}={shown(raw)} is not a whole number; expected a size > 0", field=field
            ) from None
    else:
        value = _number(raw, what, field, "a size")
        if not math.isfinite(value) or value != int(value):
            raise InputError(
                f"{field}: {what}={shown(raw)} is not a whole number; expected a size > 0", field=field
            )
        value = int(value)
    if value <= 0:
        raise InputError(f"{field}: {what}={shown(raw)}; expected a size > 0", field=field)
    return value


def shape(raw: Any, what: str, field: str) -> tuple[int, ...]:
    """A shape: a non-empty list of whole numbers > 0 (no `Infinity`, no `-1`)."""
    if not isinstance(raw, (list, tuple)) or not raw:
        raise InputError(
            f"{field}: {what}={shown(raw)} is not a shape; expected a list such as [3, 480, 640]", field=field
        )
    return tuple(size(n, f"{what}[{i}]", field) for i, n in enumerate(raw))


def key_map(raw: Any, what: str, field: str) -> dict[str, str]:
    """A rename map: an object of key -> key."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(v, str) for v in raw.values()):
        raise InputError(f"{field}: {what}={shown(raw)} is not a mapping of key -> key", field=field)
    return {str(k): v for k, v in raw.items()}


def env_type(raw: Any, what: str, field: str) -> str:
    """An env type as typed: a name lerobot's parser takes (draccus refuses `--env.type=` and an unknown
    name as an invalid choice). Where lerobot is installed its own registry answers, in the job (a newer
    lerobot knows more envs); where it is not, lerobot 0.4.4's registered names do."""
    if not isinstance(raw, str) or not raw.strip():
        raise InputError(
            f"{field}: {what}={shown(raw)} names no env type; lerobot's parser refuses it", field=field
        )
    if raw not in ENV_TYPES and importlib.util.find_spec("lerobot") is None:
        raise InputError(
            f"{field}: {what}={shown(raw)} is no env type lerobot 0.4.4 knows ({', '.join(ENV_TYPES)}); "
            "its parser refuses it as an invalid choice (lerobot is not installed here to ask a newer one)",
            field=field,
        )
    return raw


def env_flags(flags: Mapping[str, Any], field: str) -> None:
    """An env's rate and image size flags, where given."""
    if "fps" in flags:
        rate(flags["fps"], "--env.fps", field)
    for name in SIZE_FLAGS:
        if name in flags:
            size(flags[name], f"--env.{name}", field)


def camera(name: str, cam: Any, field: str) -> tuple[tuple[int, int, int] | None, float | None]:
    """One `--robot.cameras` entry: (channel-first shape where both sizes are typed, its fps or None)."""
    if not isinstance(cam, Mapping):
        raise InputError(
            f"{field}: --robot.cameras: camera {name!r} is {shown(cam)}, not a camera config (a mapping)",
            field=field,
        )
    h, w = cam.get("height"), cam.get("width")
    hw = [
        None if v is None else size(v, f"--robot.cameras {name}.{k}", field)
        for k, v in (("height", h), ("width", w))
    ]
    fps = None if cam.get("fps") is None else rate(cam["fps"], f"--robot.cameras {name}.fps", field)
    return ((3, hw[0], hw[1]) if hw[0] and hw[1] else None), fps


def shown(value: object, limit: int = 80) -> str:
    """A value as a message quotes it: its repr, cut (a camera map of 10,000 entries is one flag)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(raw: Any, what: str, field: str, expected: str) -> float:
    if isinstance(raw, bool):
        raise InputError(f"{field}: {what}={shown(raw)} is not a number; expected {expected}", field=field)
    try:
        return float(raw)
    except (TypeError, ValueError, OverflowError):
        raise InputError(
            f"{field}: {what}={shown(raw)} is not a number; expected {expected}", field=field
        ) from None


def flag_map(raw: str | None, key: str) -> dict[str, str]:
    """A deploy line's rename map flag (`--rename_map`, `--dataset.rename_map`): JSON or YAML key -> key."""
    value = flag_mapping(raw, key)
    if not all(isinstance(v, str) for v in value.values()):
        raise InputError(f"{FIELD}: --{key}={shown(raw)} is not a mapping of key -> key", field=FIELD)
    return {str(k): str(v) for k, v in value.items()}


def flag_mapping(raw: str | None, key: str) -> dict[str, Any]:
    """A deploy line's structured flag (`--robot.cameras`) as draccus reads it: a mapping, else refused."""
    if not raw:
        return {}
    value = lerobot_command._value(raw, key)
    if not isinstance(value, dict):
        raise InputError(f"{FIELD}: --{key}={shown(raw)} is not a mapping", field=FIELD)
    return value
