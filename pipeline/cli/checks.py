"""Launch-time validation of the config (`validate`) and the limits on its numbers and strings, so a typo
fails before submission.

Hydra types these values but not their ranges: `launcher.max_parallel=-1` hangs the local runner,
`launcher.poll_s=-1` crashes the follower after the jobs were queued, `resources_default.time_min=1e30`
reaches sbatch, and `container.binary="apptainer --foo"` is a shell string where an argv item belongs
(the executor runs argv lists, never a shell). Each is a `ConfigError` naming the key and the bounds;
the bounds for resources are the stage configs' (`pipeline.stages.config.RESOURCE_BOUNDS`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline import stages
from pipeline.errors import ConfigError, InputError, one_line
from pipeline.readers.lerobot_command import training_argv
from pipeline.readers.sif import read_sif
from pipeline.run import chain as chain_module
from pipeline.run.plan import resources
from pipeline.stages import container_image
from pipeline.stages.config import RESOURCE_BOUNDS, RESOURCE_KEYS, GateConfig, typed

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


def validate(cfg: DictConfig, registry: dict[str, stages.Stage]) -> None:
    if cfg.stage.name != "full" and cfg.stage.name not in registry:
        raise ConfigError(
            "stage", f"unknown stage {cfg.stage.name!r}; use full or one of {', '.join(registry)}"
        )
    unknown = [name for name in cfg.get("skip") or () if name not in registry]
    if unknown:
        raise ConfigError("skip", f"unknown stage(s) {unknown}; registered: {', '.join(registry)}")
    _validate_resources(cfg, registry)
    _validate_limits(cfg, registry)
    if cfg.container.kind == "apptainer":
        if not cfg.container.image:
            raise ConfigError(
                "container.image", "container=apptainer needs container.image=/path/to/image.sif"
            )
        if not Path(cfg.container.image).is_file():
            raise ConfigError("container.image", f"{cfg.container.image} does not exist or is not a file")
    elif cfg.container.kind != "none":
        raise ConfigError("container.kind", f"{cfg.container.kind!r} is not one of none, apptainer")
    container_image.validate(cfg)  # pins parse; the apptainer binary exists before anything is submitted
    if cfg.container.kind == "apptainer":
        try:  # the header and descriptors only: microseconds, and "not a SIF" is named here, not in a job log
            read_sif(cfg.container.image)
        except InputError as exc:
            raise ConfigError("container.image", str(exc)) from None
    check_chain(cfg)
    _validate_stage_configs(cfg, registry)


def _validate_stage_configs(cfg: DictConfig, registry: dict[str, stages.Stage]) -> None:
    """Every registered stage's section as its typed dataclass: types and ranges, once, at launch."""
    try:
        plain = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    except OmegaConfBaseException as exc:
        raise ConfigError(str(getattr(exc, "full_key", None) or "config"), one_line(exc)) from None
    assert isinstance(plain, DictConfig)
    for name in registry:
        stages.stage_config(plain, name)
    typed(GateConfig, plain.stages.get("gate"), "stages.gate")


def _validate_resources(cfg: DictConfig, registry: dict[str, stages.Stage]) -> None:
    for name, section in cfg.stages.items():
        blocks = {"resources": (section or {}).get("resources") or {}}
        blocks |= {
            f"part_resources.{p}": r or {} for p, r in ((section or {}).get("part_resources") or {}).items()
        }
        for where, block in blocks.items():
            extra = set(block) - set(RESOURCE_KEYS)
            if extra:
                raise ConfigError(
                    f"stages.{name}.{where}", f"unknown key(s) {sorted(extra)}; known: {RESOURCE_KEYS}"
                )
    jobs = [(name, None) for name in [*registry, "gate"]]
    jobs += [(name, part) for name, stage in registry.items() for part in stage.parts]
    for name, part in jobs:
        res = resources(cfg, name, part)
        where = f"stages.{name}.part_resources.{part}" if part else f"stages.{name}.resources"
        for key, floor in (("time_min", 1), ("cpus_per_task", 1), ("mem_gb", 0.001), ("gpus_per_node", 0)):
            if not isinstance(res[key], (int, float)) or res[key] < floor:
                raise ConfigError(f"{where}.{key}", f"expected a number >= {floor}, got {res[key]!r}")


def _validate_limits(cfg: DictConfig, registry: dict[str, stages.Stage]) -> None:
    """Ranges of the launcher numbers, argv-only container programs, resource bounds (launch_checks)."""
    jobs = [(name, None) for name in [*registry, "gate"]]
    jobs += [(name, part) for name, stage in registry.items() for part in stage.parts]
    check_all(cfg, jobs)


def check_chain(cfg: DictConfig) -> None:
    """The training job chained on the gate: `chain.sbatch` (a script) or the command typed after `--`,
    not both; `chain.args` (optional) are sbatch options, one argv item each (`--partition=gpu`), never
    a shell string: they reach sbatch as given; `training.env` names variables a script can set."""
    chain = cfg.get("chain") or {}
    command = training_argv(cfg)
    if chain.get("sbatch") and not Path(str(chain.sbatch)).is_file():
        raise ConfigError("chain.sbatch", f"{chain.sbatch} does not exist")
    if chain.get("sbatch") and command:
        raise ConfigError(
            "chain.sbatch",
            f"{chain.sbatch} and the command after `--` ({command[0]}) both name the training job: give one",
        )
    if command:
        chain_module.env_lines(cfg)
    args = chain.get("args")
    if args is None:
        return
    items = list(args) if not isinstance(args, str) and hasattr(args, "__iter__") else None
    if items is None or not all(isinstance(a, str) and a.startswith("-") and " " not in a for a in items):
        raise ConfigError(
            "chain.args",
            "expected a list of sbatch options, one item each, quoted for Hydra: "
            f'\'+chain.args=["--partition=gpu","--gpus-per-node=8"]\', got {args!r}',
        )
    if not chain.get("sbatch") and not command:
        raise ConfigError(
            "chain.args",
            "sbatch options without a job to chain: set +chain.sbatch=<script> or give the training "
            "command after `--`",
        )
