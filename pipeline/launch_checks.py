"""Launch-time limits on the numbers and strings a config can carry, so a typo fails before submission.

Hydra types these values but not their ranges: `launcher.max_parallel=-1` hangs the local runner,
`launcher.poll_s=-1` crashes the follower after the jobs were queued, `resources_default.time_min=1e30`
reaches sbatch, and `container.binary="apptainer --foo"` is a shell string where an argv item belongs
(the executor runs argv lists, never a shell). Each is a `ConfigError` naming the key and the bounds;
the bounds for resources are the stage configs' (`pipeline.stages.config.RESOURCE_BOUNDS`).
"""

from __future__ import annotations

import math
import re
from typing import Any

from omegaconf import DictConfig

from pipeline.errors import ConfigError
from pipeline.plan import resources
from pipeline.stages.config import RESOURCE_BOUNDS

# (key, lowest, highest, integer?, may be null?)
LAUNCHER_BOUNDS = (
    ("poll_s", 0.05, 3600.0, False, False),
    ("max_parallel", 1, 4096, True, True),
    ("requeue_max", 0, 100, True, False),
    ("signal_delay_s", 0, 86400, True, False),
)
# one program name or path: no blanks, quotes or shell metacharacters (`;`, `|`, `$`, backticks)
PROGRAM = re.compile(r"[A-Za-z0-9_./+@-]+")
CONTAINER_PROGRAMS = ("binary", "python")


def number(value: Any, key: str, low: float, high: float, integer: bool, nullable: bool = False) -> None:
    """`value` is a finite number in [low, high] (an int where `integer`), else a ConfigError."""
    if value is None and nullable:
        return
    kind = "an integer" if integer else "a number"
    expected = f"{kind} in [{low}, {high}]" + (" or null" if nullable else "")
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(key, f"expected {expected}, got {value!r}")
    if integer and value != int(value):
        raise ConfigError(key, f"expected {expected}, got {value!r}")


def check_launcher(cfg: DictConfig) -> None:
    """Every launcher number in range; `additional_parameters` a mapping of sbatch options."""
    launcher = cfg.get("launcher") or {}
    for name, low, high, integer, nullable in LAUNCHER_BOUNDS:
        if name in launcher:
            number(launcher.get(name), f"launcher.{name}", low, high, integer, nullable)
    extra = launcher.get("additional_parameters")
    if extra is not None and not hasattr(extra, "items"):
        raise ConfigError(
            "launcher.additional_parameters", f"expected a mapping of sbatch options, got {extra!r}"
        )


def check_container(cfg: DictConfig) -> None:
    """`container.binary` / `container.python` are one program each; `extra_args` and `binds` are lists
    of strings (each one argv item). A shell string is refused, never split."""
    con = cfg.get("container") or {}
    for name in CONTAINER_PROGRAMS:
        value = con.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not PROGRAM.fullmatch(value):
            raise ConfigError(
                f"container.{name}",
                f"expected one program name or path (no spaces, quotes or shell characters), got {value!r}; "
                "put extra options in container.extra_args as a list",
            )
    for name in ("extra_args", "binds"):
        value = con.get(name)
        if value is None:
            continue
        items = list(value) if not isinstance(value, str) and hasattr(value, "__iter__") else None
        if items is None or not all(isinstance(v, str) for v in items):
            raise ConfigError(f"container.{name}", f"expected a list of strings (argv items), got {value!r}")


def check_resources(cfg: DictConfig, jobs: list[tuple[str, str | None]]) -> None:
    """Every job's effective resources (part -> stage -> resources_default) inside the stage configs'
    bounds, naming the key each value came from; `resources_default` itself too, even where every
    stage overrides a value (it is the layer a new stage or a plugin inherits)."""
    default = cfg.get("resources_default") or {}
    for key, low, high in RESOURCE_BOUNDS:
        if default.get(key) is not None:
            number(default.get(key), f"resources_default.{key}", low, high, integer=key != "mem_gb")
    for name, part in jobs:
        res = resources(cfg, name, part)
        for key, low, high in RESOURCE_BOUNDS:
            value = res.get(key)
            if value is None:
                continue
            source = _source(cfg, name, part, key)
            number(value, source, low, high, integer=key != "mem_gb")


def _source(cfg: DictConfig, name: str, part: str | None, key: str) -> str:
    """The config key a job's resource value came from (the most specific layer that sets it)."""
    stage = (cfg.get("stages") or {}).get(name) or {}
    if part and ((stage.get("part_resources") or {}).get(part) or {}).get(key) is not None:
        return f"stages.{name}.part_resources.{part}.{key}"
    if (stage.get("resources") or {}).get(key) is not None:
        return f"stages.{name}.resources.{key}"
    return f"resources_default.{key}"


def check_all(cfg: DictConfig, jobs: list[tuple[str, str | None]]) -> None:
    """Everything above, once, at launch (nothing is on disk yet)."""
    check_launcher(cfg)
    check_container(cfg)
    check_resources(cfg, jobs)
