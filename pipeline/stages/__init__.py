"""The stage registry: every check the gate can run, registered by name against one interface.

A stage is a module with one entry `run(cfg, ctx) -> StageResult`. It registers itself with
`register(Stage(...))`, declaring every path it reads (`inputs`: `pipeline.inputs.Input`, or the shorthand
`"model"`, `"dataset"`, ... for a top-level section's `path`), from which launch validates them and the
plan fingerprints them, so nothing a stage reads can change unseen under a reused result, and which
stages it must run after. A stage may also declare `parts`: jobs that run
before its main job and in parallel with each other (e.g. the determinism twins); the main job then
merges what they wrote.

Extra stages live outside the package and are named in the config (`plugins: [my_pkg.my_stage]`);
they are imported on the login node and again inside every job.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.errors import InputError
from pipeline.inputs import SECTIONS, Input
from pipeline.record.records import Check, Rows, StageResult
from pipeline.record.runfolder import RunFolder
from pipeline.stages.config import StageConfig, store_registered, typed

BUILTIN_MODULES = (
    "pipeline.stages.container_check",
    "pipeline.stages.checkpoint_storage",
    "pipeline.stages.contract",
    "pipeline.stages.determinism",
    "pipeline.stages.teacher_forced",
    "pipeline.stages.render_cache",
)
INPUT_KINDS = tuple(SECTIONS)


@dataclass(frozen=True)
class StageContext:
    """Where a running stage reads and writes; one per job (a part gets its own `part`)."""

    run_dir: Path
    stage: str
    part: str | None = None
    fingerprints: dict[str, str] = field(default_factory=dict)
    config: Any = None  # the stage's typed config (its `Stage.config` dataclass), validated
    cpus: int | None = None  # the CPUs the job asked for (its resources' cpus_per_task); None: not a job

    @property
    def folder(self) -> RunFolder:
        return RunFolder(self.run_dir)

    @property
    def artifacts_dir(self) -> Path:
        return self.folder.artifacts_dir(self.stage)

    @property
    def state_dir(self) -> Path:
        """Scratch that survives a requeue: a resumed job finds here what it saved before preemption."""
        return self.folder.state_dir(self.stage, self.part)

    def part_dir(self, part: str) -> Path:
        """What part `part` of this stage left for the main job to merge."""
        return self.folder.part_dir(self.stage, part)


RunFn = Callable[[DictConfig, StageContext], StageResult]
PartFn = Callable[[DictConfig, StageContext], Any]


@dataclass(frozen=True)
class Stage:
    name: str
    run: RunFn
    inputs: tuple[Input | str, ...] = ()
    after: tuple[str, ...] = ("container_check",)
    parts: tuple[str, ...] = ()
    run_part: PartFn | None = None
    category: str = "container"
    description: str = ""
    config: type[StageConfig] | None = None  # None: the stage has no settings of its own
    # array(typed config, composed config) -> number of tasks of one Slurm job array (part "task",
    # run_part per task; ctx.part is "task-XXXX"); 1 or None: no array. Decided at launch, e.g. budgets x
    # shards, or the dataset's rows over `shard_rows` (read from its metadata on the login node).
    array: Callable[[Any, Any], int] | None = None
    # The config keys without which the stage has nothing to judge ("a|b": either will do): a launch
    # that sets none of them skips the stage under stage=full (a `skipped` row naming them) and refuses
    # `stage=<name>` with exit 2, so a record never passes a stage that had no input to read.
    needs: tuple[str, ...] = ()
    # More keys the stage still lacks given what was set (e.g. a model whose loader cannot be told from
    # its files), as `needs` names them; None: `needs` says it all.
    unmet: Callable[[Any], tuple[str, ...]] | None = None
    # The `needs` keys the stage derives itself from the rest of the config (determinism's train_cmd from
    # a lerobot-train `training.command`): they count as set here, but name no input of the user's, so
    # they never turn the demo off. None: it derives none.
    derives: Callable[[Any], tuple[str, ...]] | None = None

    @property
    def rows(self) -> Rows:
        """The one row builder for this stage's checks."""
        return Rows(self.name, self.category)

    @property
    def builtin(self) -> bool:
        return self.run.__module__.startswith("pipeline.stages.")

    @property
    def declared_inputs(self) -> tuple[Input, ...]:
        """Every input as an `Input`. A plugin's shorthand section is read by its own code, so launch
        can only ask that it exists; its files are fingerprinted as the built-in ones are."""
        found = []
        for item in self.inputs:
            if isinstance(item, Input):
                found.append(item)
            else:
                short = SECTIONS[item]
                found.append(short if self.builtin else dataclasses.replace(short, kind="exists"))
        return tuple(found)

    def __post_init__(self) -> None:
        unknown = {i for i in self.inputs if isinstance(i, str)} - set(INPUT_KINDS)
        if unknown:
            raise ValueError(f"stage {self.name}: unknown inputs {sorted(unknown)}; known: {INPUT_KINDS}")
        if (self.parts or self.array) and self.run_part is None:
            raise ValueError(f"stage {self.name}: declares parts but no run_part")


_REGISTRY: dict[str, Stage] = {}


def register(stage: Stage) -> Stage:
    """Add a stage and its config (Hydra's `stages/registered` node); names are unique."""
    if stage.name in _REGISTRY and _REGISTRY[stage.name] is not stage:
        raise InputError(
            f"stage {stage.name!r} is registered twice ({_REGISTRY[stage.name].run.__module__} and "
            f"{stage.run.__module__}); stage names must be unique",
            field="plugins",
        )
    _REGISTRY[stage.name] = stage
    if stage.config is not None:
        store_registered({n: s.config for n, s in _REGISTRY.items() if s.config is not None})
    return stage


def stage_config(cfg: DictConfig, name: str) -> StageConfig | None:
    """Stage `name`'s section of `cfg` as its typed, validated dataclass (ConfigError names the key)."""
    cls = get(name).config
    return None if cls is None else typed(cls, (cfg.get("stages") or {}).get(name), f"stages.{name}")


def load(plugins: Iterable[str] = ()) -> dict[str, Stage]:
    """Import the built-in stages and the configured plugins; returns the registry in run order."""
    for module in (*BUILTIN_MODULES, *plugins):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - a plugin failing at import is a config error
            raise InputError(
                f"plugins: cannot import stage module {module!r}: {exc}", field="plugins"
            ) from exc
    return dict(_REGISTRY)


def get(name: str) -> Stage:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise InputError(f"stage: unknown stage {name!r}; registered: {known}", field="stage") from None


def is_set(cfg: Any, key: str) -> bool:
    """Whether dotted `key` holds a value in `cfg` (None, "" and empty lists or mappings do not)."""
    node = cfg
    for part in key.split("."):
        node = node.get(part) if hasattr(node, "get") else None
        if node is None:
            return False
    return node not in ("", [], {}) and not (hasattr(node, "__len__") and len(node) == 0)


def missing_keys(stage: Stage, cfg: Any) -> tuple[str, ...]:
    """The `needs` entries `cfg` leaves unset, then the stage's own `unmet` ones: empty when it can run.
    The reason a stage is skipped names these, so the user knows which keys would run it."""
    derived = set(stage.derives(cfg)) if stage.derives else set()
    missing = tuple(n for n in stage.needs if not any(is_set(cfg, k) or k in derived for k in n.split("|")))
    if missing or stage.unmet is None:
        return missing
    return tuple(stage.unmet(cfg))


def skip_reason(stage: Stage, missing: tuple[str, ...]) -> str:
    keys = ", ".join(k.replace("|", " or ") for k in missing)
    return f"{stage.name} skipped: no input to judge; set {keys} to run it"


def error_check(stage: str, exc: BaseException, category: str = "container") -> Check:
    """The row a stage records when its input is bad or it crashed: the message is the finding."""
    evidence: dict[str, Any] = {"exception": type(exc).__name__}
    if isinstance(exc, InputError):
        evidence.update({"path": exc.path, "field": exc.field})
    return Rows(stage, category)("error", stage, "error", str(exc), evidence=evidence)
