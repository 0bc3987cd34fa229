"""The stage registry: every check the gate can run, registered by name against one interface.

A stage is a module with one entry `run(cfg, ctx) -> StageResult`. The registry names it without
importing it: the built-in stages are rows of `BUILTIN` below whose functions and config class are
`"module:attribute"` strings, imported on first use (`Entry`). A launch imports only the stages' config
classes (small modules, so Hydra can type every `stages.<name>` key and validation runs at launch); a job
imports its own stage and nothing else. Each row declares every path the stage reads (`inputs`:
`pipeline.inputs.Input`, or the shorthand `"model"`, `"dataset"`, ... for a top-level section's `path`),
from which launch validates them and the plan fingerprints them, so nothing a stage reads can change
unseen under a reused result, and which stages it must run after. A stage may also declare `parts`: jobs
that run before its main job and in parallel with each other (e.g. the determinism twins); the main job
then merges what they wrote.

Extra stages live outside the package and are named in the config (`plugins: [my_pkg.my_stage]`); they
call `register(Stage(...))` when imported, on the login node and again inside every job.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
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
class Entry:
    """A function named as `module:attribute`, imported on its first call: the registry can name every
    stage's code while importing none of it (a job imports its own stage only)."""

    spec: str

    def __post_init__(self) -> None:
        module, sep, attr = self.spec.partition(":")
        if not (module and sep and attr):
            raise ValueError(f"expected 'module:attribute', got {self.spec!r}")

    @property
    def module(self) -> str:
        return self.spec.partition(":")[0]

    def resolve(self) -> Any:
        module, _, attr = self.spec.partition(":")
        return getattr(importlib.import_module(module), attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


def module_of(fn: Any) -> str:
    """The module a stage's function lives in, without importing it where it is still an `Entry`."""
    return fn.module if isinstance(fn, Entry) else str(fn.__module__)


_LAZY_FIELDS = ("run", "run_part", "array", "unmet", "derives")


@dataclass(frozen=True)
class Stage:
    name: str
    run: RunFn  # or "module:function" (an `Entry`, imported on first call); so are the other callables
    inputs: tuple[Input | str, ...] = ()
    after: tuple[str, ...] = ("container_check",)
    parts: tuple[str, ...] = ()
    run_part: PartFn | None = None
    category: str = "container"
    description: str = ""
    # None: the stage has no settings of its own; "module:Class": imported when first asked for (`get`)
    config: type[StageConfig] | str | None = None
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
        return module_of(self.run).startswith("pipeline.stages.")

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
        for name in _LAZY_FIELDS:
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, Entry(getattr(self, name)))
        unknown = {i for i in self.inputs if isinstance(i, str)} - set(INPUT_KINDS)
        if unknown:
            raise ValueError(f"stage {self.name}: unknown inputs {sorted(unknown)}; known: {INPUT_KINDS}")
        if (self.parts or self.array) and self.run_part is None:
            raise ValueError(f"stage {self.name}: declares parts but no run_part")


def lazy_package(package: str, module: str = "stage") -> Callable[[str], Any]:
    """A stage package's module `__getattr__`: its submodules as usual, any other name taken from
    `<package>.<module>` (the stage's code) on first use. Importing the package for its config class then
    imports none of the stage, while `from pipeline.stages.<name> import run` still works."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__


def config_tasks(config: Any, cfg: Any) -> int:
    """A job array as large as the stage's typed config says (`config.tasks()`)."""
    return int(config.tasks())


# The built-in stages, named, not imported: each function and config class is a "module:attribute" string.
# A stage module's own constants (its NAME, parts, inputs) are checked against these rows by its tests.
BUILTIN = (
    Stage(
        name="container_check",
        run="pipeline.stages.container_check:run",
        after=(),
        config="pipeline.stages.settings:ContainerCheckConfig",
        description="the environment the stages run in: packages, CUDA, GL renderer, writable dirs",
    ),
    Stage(
        name="checkpoint_storage",
        run="pipeline.stages.checkpoint_storage:run",
        config="pipeline.stages.settings:CheckpointStorageConfig",
        category="storage",
        inputs=("model",),
        # a checkpoint's size comes from the model's files or is given; with neither there is nothing
        # to budget, so the stage is skipped (stage=full) or refused (stage=checkpoint_storage), like
        # the others, rather than run to an `unverifiable` size row
        needs=("model.path|stages.checkpoint_storage.size_bytes",),
        description="checkpoint size x number kept against free space and quota of checkpoint_dir",
    ),
    Stage(
        name="contract",
        run="pipeline.stages.contract.stage:run",
        run_part="pipeline.stages.contract.stage:run_part",
        array="pipeline.stages.contract.shards:tasks",
        inputs=(
            "model",
            "training",
            "dataset",
            Input("known_good.path", "model", whole=True),
            Input("deploy.path", "file", whole=True),  # D (the contract's deploy.DEPLOY_INPUTS)
            Input("deploy.lines", "optional", whole=True),
        ),
        needs=("dataset.path",),
        unmet="pipeline.stages.contract.sides:unmet",
        category="normalization",
        config="pipeline.stages.contract.config:ContractConfig",
        description="base checkpoint (A) vs training config (B) vs dataset (C): normalization, "
        "layout, encoding, units, reload",
    ),
    Stage(
        name="determinism",
        run="pipeline.stages.determinism.stage:run",
        parts=("twin_a", "twin_b", "control", "ddp", "bare_a", "bare_b"),
        run_part="pipeline.stages.determinism.runner:run_part",
        config="pipeline.stages.determinism.config:DeterminismConfig",
        inputs=("model", "training", "dataset", Input("stages.determinism.reload.dataset", "dataset")),
        category="determinism",
        needs=("stages.determinism.train_cmd",),
        unmet="pipeline.stages.determinism.stage:unmet",
        derives="pipeline.stages.determinism.runner:derived",  # a lerobot-train command after `--`
        description="same-seed twins bit-identical, control differs, DDP ranks agree, reload round trip",
    ),
    Stage(
        name="teacher_forced",
        run="pipeline.stages.teacher_forced:run",
        inputs=(
            "dataset",
            "model",
            Input("stages.teacher_forced.models[*].path", "checkpoint", whole=True),
            Input("stages.teacher_forced.models[*].manifest", "file", whole=True),
            Input("stages.teacher_forced.sample_manifest", "optional", whole=True),
        ),
        category="diagnostics",
        config="pipeline.stages.teacher_forced:TeacherForcedConfig",
        needs=("model.path|stages.teacher_forced.models", "dataset.path"),
        unmet="pipeline.stages.teacher_forced:unmet",
        description="checkpoint provenance, paired teacher-forced action error across models, "
        "repeatability of stochastic models",
    ),
    Stage(
        name="render_cache",
        run="pipeline.stages.render_cache.stage:run",
        run_part="pipeline.stages.render_cache.stage:run_part",
        inputs=("release", "cache"),
        needs=("release.path", "cache.path"),
        category="cache",
        config="pipeline.stages.render_cache.config:RenderCacheConfig",
        array=config_tasks,
        description="frame caches agree with the release and the simulator (reference 003)",
    ),
)
_REGISTRY: dict[str, Stage] = {stage.name: stage for stage in BUILTIN}


def register(stage: Stage) -> Stage:
    """Add a stage (a plugin, when its module is imported); names are unique. Its config joins Hydra's
    `stages/registered` node."""
    if stage.name in _REGISTRY and _REGISTRY[stage.name] is not stage:
        raise InputError(
            f"stage {stage.name!r} is registered twice ({module_of(_REGISTRY[stage.name].run)} and "
            f"{module_of(stage.run)}); stage names must be unique",
            field="plugins",
        )
    _REGISTRY[stage.name] = stage
    if stage.config is not None:
        _store()
    return stage


_STORED: list[dict[str, Any]] = []  # what was last put in the ConfigStore (storing converts every class)


def _store() -> None:
    """Every stage's config class into Hydra's ConfigStore: imports the config modules, not the stages."""
    configs = {n: c for n in list(_REGISTRY) if (c := _resolved(n).config) is not None}
    if _STORED != [configs]:
        store_registered(configs)
        _STORED[:] = [configs]


def _resolved(name: str) -> Stage:
    """The registered stage with its config class imported (the row keeps the class from then on)."""
    stage = _REGISTRY[name]
    if isinstance(stage.config, str):
        module, _, attr = stage.config.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise InputError(f"stage {name}: cannot import its config {stage.config!r}: {exc}") from exc
        stage = dataclasses.replace(stage, config=cls)
        _REGISTRY[name] = stage
    return stage


def stage_config(cfg: DictConfig, name: str) -> StageConfig | None:
    """Stage `name`'s section of `cfg` as its typed, validated dataclass (ConfigError names the key)."""
    cls = get(name).config
    assert not isinstance(cls, str)
    return None if cls is None else typed(cls, (cfg.get("stages") or {}).get(name), f"stages.{name}")


def load(plugins: Iterable[str] = ()) -> dict[str, Stage]:
    """The registry in run order, with the configured plugins imported and every config class in Hydra's
    ConfigStore; no built-in stage's code is imported (a job imports its own, through `get`)."""
    import_plugins(plugins)
    _store()
    return dict(_REGISTRY)


def import_plugins(plugins: Iterable[str]) -> None:
    """The configured plugin modules, which register their stages when imported (a job needs them to find
    a plugin stage by name, and nothing else: `load` also types every config for Hydra)."""
    for module in plugins:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - a plugin failing at import is a config error
            raise InputError(
                f"plugins: cannot import stage module {module!r}: {exc}", field="plugins"
            ) from exc


def get(name: str) -> Stage:
    """One stage, its config class imported; its functions are imported when first called."""
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise InputError(f"stage: unknown stage {name!r}; registered: {known}", field="stage")
    return _resolved(name)


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
