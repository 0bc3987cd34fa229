"""Typed stage configs: each stage's thresholds are fields with their defaults in one place.

A stage declares `config=MyConfig` (a dataclass deriving from `StageConfig`) when it registers. The
registry stores every stage's dataclass in Hydra's ConfigStore under `stages.<name>`, so overrides such
as `stages.contract.rank_error=0.01` are type-checked by OmegaConf while the config is composed, and
`validate()` checks ranges once at launch (a `ConfigError` naming the key). Inside a job the stage gets
the same dataclass instance as `ctx.config`: no casts where values are used.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline.errors import ConfigError

RESOURCE_KEYS = ("partition", "account", "qos", "time_min", "gpus_per_node", "cpus_per_task", "mem_gb")


@dataclass
class Resources:
    """One job's Slurm resources; None keeps the layer below (part -> stage -> resources_default)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int | None = None
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    mem_gb: float | None = None


@dataclass
class StageConfig:
    """What every stage's config has; a stage's own dataclass adds its thresholds."""

    resources: Resources = field(default_factory=Resources)
    part_resources: dict[str, Resources] = field(default_factory=dict)

    def validate(self, key: str) -> None:
        """Range checks beyond the types; raise `ConfigError(f"{key}.<field>", ...)`. `key` is
        `stages.<name>`. Subclasses extend it (call super)."""


C = TypeVar("C", bound=StageConfig)


def typed(cls: type[C], section: Any, key: str) -> C:
    """The stage's section of a composed or saved config as its dataclass, validated."""
    raw = section if section is not None else {}
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls), raw)
        obj = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        where = f"{key}.{exc.full_key}" if getattr(exc, "full_key", None) else key
        raise ConfigError(where, _short(exc)) from None
    assert isinstance(obj, cls)
    obj.validate(key)
    return obj


def as_dict(config: StageConfig) -> dict[str, Any]:
    """Plain JSON-able form (fingerprints, evidence)."""
    return dataclasses.asdict(config)


def _short(exc: OmegaConfBaseException) -> str:
    return str(exc).splitlines()[0]


def section(cfg: DictConfig, name: str) -> Any:
    stages = cfg.get("stages") or {}
    return stages.get(name)
