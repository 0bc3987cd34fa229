"""Typed stage configs: each stage's thresholds are fields with their defaults in one place.

A stage declares `config=MyConfig` (a dataclass deriving from `StageConfig`) when it registers. The
registry stores every stage's dataclass in Hydra's ConfigStore under `stages.<name>`, so overrides such
as `stages.contract.rank_error=0.01` are type-checked by OmegaConf while the config is composed, and
`validate()` checks ranges once at launch (a `ConfigError` naming the key). Inside a job the stage gets
the same dataclass instance as `ctx.config`: no casts where values are used.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline.errors import ConfigError, InputError

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

    def validate(self, key: str) -> None:
        """Bounds a Slurm request can have; a typo such as `mem_gb=0` fails at launch, not in sbatch."""
        for name, low, high in RESOURCE_BOUNDS:
            value = getattr(self, name)
            require(
                value is None or low <= value <= high, f"{key}.{name}", f"a number in [{low}, {high}]", value
            )


# (field, lowest, highest): mem_gb in GiB (16 TiB ceiling), time_min up to 14 days
RESOURCE_BOUNDS = (
    ("time_min", 1, 20160),
    ("gpus_per_node", 0, 64),
    ("cpus_per_task", 1, 1024),
    ("mem_gb", 0.001, 16384),
)


def require(ok: bool, key: str, expected: str, got: Any) -> None:
    """One range check: `ConfigError("stages.x.field", "expected ..., got ...")` when `ok` is false."""
    if not ok:
        raise ConfigError(key, f"expected {expected}, got {got!r}")


@dataclass
class StageConfig:
    """What every stage's config has; a stage's own dataclass adds its thresholds."""

    resources: Resources = field(default_factory=Resources)
    part_resources: dict[str, Resources] = field(default_factory=dict)
    reuse: bool = True  # false: this stage always runs (never taken from this run's past or the history)

    def validate(self, key: str) -> None:
        """Range checks beyond the types; raise `ConfigError(f"{key}.<field>", ...)`. `key` is
        `stages.<name>`. Subclasses extend it (call super)."""
        self.resources.validate(f"{key}.resources")
        for part, res in self.part_resources.items():
            res.validate(f"{key}.part_resources.{part}")


@dataclass
class GateConfig(StageConfig):
    """`stages.gate`: the gate merges the stage results; cheap, so small resources."""

    resources: Resources = field(default_factory=lambda: Resources(time_min=10, mem_gb=1))


C = TypeVar("C", bound=StageConfig)


def typed(cls: type[C], section: Any, key: str) -> C:
    """The stage's section of a composed or saved config as its dataclass, validated."""
    raw = section if section is not None else {}
    try:
        merged = OmegaConf.merge(_schema(cls), raw)
        obj = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        where = f"{key}.{exc.full_key}" if getattr(exc, "full_key", None) else key
        raise ConfigError(where, _short(exc)) from None
    assert isinstance(obj, cls)
    obj.validate(key)
    return obj


@functools.cache
def _schema(cls: type[StageConfig]) -> DictConfig:
    """The class's structured config, built once per process (0.1 s for the contract's, and a launch
    types each section three or four times); `OmegaConf.merge` copies it, so it is never changed."""
    return OmegaConf.structured(cls)


def settings(cls: type[C], cfg: Any, given: Any, name: str) -> C:
    """A stage's config inside `run`: the job's validated `ctx.config` (`given`), or, where a stage is
    called directly (unit tests, a notebook), its section of `cfg` typed and validated here."""
    if isinstance(given, cls):
        return given
    return typed(cls, section(cfg, name), f"stages.{name}")


def store_registered(configs: dict[str, type[StageConfig]]) -> None:
    """Hydra's `stages/registered` node: every registered stage's config class plus the gate's.

    `pipeline/conf/config.yaml` selects it (`- stages: registered`), so a new stage's settings reach the
    composed config (`--cfg job`, overrides without `+`) from its dataclass alone. It is refreshed on each
    `register`; Hydra reads it when it composes, after `stages.load()` has imported the stages.
    """
    node = {name: _schema(cls) for name, cls in {**configs, "gate": GateConfig}.items()}
    ConfigStore.instance().store(group="stages", name="registered", node=node)


def as_dict(config: StageConfig) -> dict[str, Any]:
    """Plain JSON-able form (fingerprints, evidence)."""
    return dataclasses.asdict(config)


def _short(exc: OmegaConfBaseException) -> str:
    return str(exc).splitlines()[0]


def section(cfg: DictConfig, name: str) -> Any:
    stages = cfg.get("stages") or {}
    return stages.get(name)


store_registered({})  # the gate's entry exists even before any stage registers


def resolve_callable(spec: str, key: str) -> Callable[..., Any]:
    """`package.module:function` named in config -> the function; an InputError naming the key otherwise.

    Loaders, proprio functions and other hooks are referenced this way, so a user's code plugs in
    without editing the stage (and nothing is built from a shell string).
    """
    module_name, sep, attr = str(spec).partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{key}: expected 'module:function', got {spec!r}", field=key)
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"{key}: cannot import {spec!r}: {exc}", field=key) from exc
    if not callable(found):
        raise InputError(f"{key}: {spec!r} is not callable", field=key)
    return found
