"""teacher_forced: ground-truth observations into each model, its actions against the dataset's.

When a policy scores zero in closed loop, the first day goes into proving the checkpoint is the right
one, the data pairing is intact and the model is not collapsed (reference 004). This stage makes that
evidence standing: provenance (sha256 of every checkpoint file vs a pinned digest or merge log), the
same seeded, stratified samples for every model (a manifest with the data's fingerprint), per-dim /
per-step error in dataset and normalized units, paired comparisons with a bootstrap interval and a
Wilcoxon p-value, and, for stochastic models, repeatability before any conclusion (reference 002).
Every model is fed what it declares as LeRobot's loader feeds it (inputs.py: cameras decoded once
through the frame reader, the task text, past frames), and the baseline is asked, as a witness, which
camera and vector convention fits it best (probes.py: BGR, x255, /255, exchanged cameras; a vector
input's dims exchanged, sign-flipped or in other angle units; the targets in other units).

`stages.teacher_forced.models` lists the models; empty means `model.path` alone, loaded with the loader
its own `config.json` calls for (a LeRobot policy type: `load_lerobot`). Nothing beside the dataset
decides what is scored. Neither a listed model nor a `model.path` with a known loader: the stage is
skipped, naming the keys that would run it.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.errors import ConfigError, InputError
from pipeline.inputs import Input
from pipeline.readers.lerobot_paths import shown
from pipeline.readers.rename import rename_map, sources
from pipeline.record.records import StageResult
from pipeline.stages import StageContext, stage_config
from pipeline.stages.config import Resources, StageConfig
from pipeline.storage.files import parse_json, read_text

NAME = "teacher_forced"
SEVERITIES = ("hard", "soft")
LEROBOT_LOADER = "pipeline.stages.teacher_forced.models:load_lerobot"
# the policy types lerobot 0.4.4 registers (`PreTrainedConfig` choices): their config.json `type` names
# the loader. A model of another type names its loader in stages.teacher_forced.models.
LEROBOT_POLICY_TYPES = frozenset(
    ("act", "diffusion", "groot", "pi0", "pi05", "pi0_fast", "reward_classifier", "sac", "sarm", "smolvla",
     "tdmpc", "vqbet", "wall_x", "xvla")
)  # fmt: skip


@dataclass
class ModelSpec:
    """One model under test. `loader` is `module:function(path, device)`; `seeds` are the artifact's
    own seeds (training, sampling), which estimator seeds must not share."""

    name: str = ""
    path: str | None = None
    loader: str | None = None
    expected_sha256: str | None = None  # a file's sha256, or a directory's listing digest
    manifest: str | None = None  # merge log / manifest of `path sha256` lines (paths inside the checkpoint)
    inputs: list[str] = field(default_factory=list)  # observation keys; empty: the model's own list
    seeds: list[int] = field(default_factory=list)
    stochastic: bool = False  # true: score under every estimator seed (repeatability gate)


@dataclass
class TeacherForcedConfig(StageConfig):
    """Thresholds and choices; the defaults follow the Coffee Nominal investigation (96 paired samples)."""

    resources: Resources = field(default_factory=lambda: Resources(time_min=30, gpus_per_node=0))
    models: list[ModelSpec] = field(default_factory=list)  # empty: model.path, by its config.json's type
    baseline: str | None = None  # the reference model's name; None: the first listed
    action_key: str = "action"
    samples: int = 96
    seed: int = 0  # sample selection
    episodes: list[int] = field(default_factory=list)  # sample only these episodes (empty: all)
    subset_column: str | None = None  # e.g. task_index: one subset per value
    subset_episodes: dict[str, list[int]] = field(default_factory=dict)  # e.g. {recovery: [10, 11]}
    sample_manifest: str | None = None  # reuse (and verify) this manifest; written there if absent
    horizon: int = 1  # chunk steps compared with the dataset's next actions
    gripper_dims: list[int] | None = None  # None: action dims whose name contains "gripper"
    batch_size: int = 256
    device: str = "auto"  # auto | cpu | cuda (cuda needs resources.gpus_per_node >= 1)
    require_provenance: bool = False  # true: a model without expected_sha256/manifest is unverifiable
    collapse_ratio: float = 0.05  # output std across samples below 5 % of the data's: inactive
    max_l1: float | None = None  # mean normalized L1 above this: hard finding (None: off)
    baseline_ratio: float = 3.0  # mean error above 3x the baseline's (and the CI excludes 0): finding
    baseline_severity: str = "soft"
    min_pairs: int = 64  # fewer paired samples cannot clear a comparison (reference 002's floor)
    subset_ratio: float = 2.0  # one subset's error above 2x the others': the covariate-shift signature
    subset_severity: str = "soft"
    bootstrap_resamples: int = 2000
    confidence: float = 0.95
    estimator_seeds: list[int] = field(default_factory=lambda: [9300, 9301, 9302, 9303])
    repeatability_min: float = 0.9  # split-half Spearman below this: unverifiable
    reference_column: str | None = None  # per-sample reference measure (a dataset column) to correlate
    permutations: int = 2000
    permutation_seed: int = 9100
    plots: bool = True
    worst_samples: int = 3
    probe_models: list[str] | None = None  # counterfactual probes (probes.py); None: the baseline, []: off
    probe_margin: float = 0.1  # an alternative must cut the error by >= 10 % (and its CI exclude 0)
    probe_max_shift: int = 5  # each camera's frames shifted +-1..+-this many rows in time (0: none)
    probe_rounds: int = 8  # greedy passes at most (each keeps one alternative; the last finds none)
    probe_max_alternatives: int = 400  # alternatives tried at most (cameras, targets, then vectors)

    def validate(self, key: str) -> None:
        super().validate(key)
        for name, low in (("samples", 4), ("horizon", 1), ("batch_size", 1), ("bootstrap_resamples", 100)):
            if getattr(self, name) < low:
                raise ConfigError(f"{key}.{name}", f"expected >= {low}, got {getattr(self, name)}")
        for name in ("baseline_severity", "subset_severity"):
            if getattr(self, name) not in SEVERITIES:
                raise ConfigError(f"{key}.{name}", f"expected hard | soft, got {getattr(self, name)!r}")
        if not 0 < self.confidence < 1 or not 0 < self.repeatability_min <= 1:
            raise ConfigError(f"{key}.confidence", "confidence and repeatability_min must lie in (0, 1]")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"{key}.device", f"expected auto | cpu | cuda[:N], got {self.device!r}")
        if self.device.startswith("cuda") and not (self.resources.gpus_per_node or 0) >= 1:
            raise ConfigError(f"{key}.resources.gpus_per_node", "device=cuda needs a GPU: set it to >= 1")
        names = [m.name for m in self.models]
        if any(not n for n in names) or len(set(names)) != len(names):
            raise ConfigError(f"{key}.models", f"every model needs a unique non-empty name, got {names}")
        if self.baseline and names and self.baseline not in names:
            raise ConfigError(f"{key}.baseline", f"{self.baseline!r} is not one of the models {names}")
        if not 0 < self.probe_margin < 1:
            raise ConfigError(
                f"{key}.probe_margin", f"expected a fraction in (0, 1), got {self.probe_margin}"
            )
        unknown = [n for n in self.probe_models or [] if names and n not in names]
        if unknown:
            raise ConfigError(f"{key}.probe_models", f"{unknown} are not among the models {names}")
        if self.probe_max_shift < 0:
            raise ConfigError(
                f"{key}.probe_max_shift", f"expected a frame count >= 0, got {self.probe_max_shift}"
            )
        for name in ("probe_rounds", "probe_max_alternatives"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{key}.{name}", f"expected >= 1, got {getattr(self, name)}")
        if self.min_pairs < 2:
            raise ConfigError(f"{key}.min_pairs", f"expected >= 2, got {self.min_pairs}")
        for i, m in enumerate(self.models):
            if m.path and not m.loader:
                raise ConfigError(f"{key}.models[{i}].loader", "expected 'module:function' for the path")
        from pipeline.stages.teacher_forced.repeatability import check_seeds  # numpy: not at launch import

        check_seeds(self.estimator_seeds, {m.name: m.seeds for m in self.models}, key)
        for i, m in enumerate(self.models):
            if m.loader:
                loader_installed(m.loader, f"{key}.models[{i}].loader")


def loader_installed(loader: str, key: str) -> None:
    """At launch: the loader's module exists and the packages it declares (`fn.requires`) are installed,
    so a missing `lerobot` is one line now, not a stage error after the queue."""
    module, _, function = loader.partition(":")
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found or not function:
        raise ConfigError(key, f"{loader!r}: module {module!r} is not installed (expected 'module:function')")
    fn = getattr(importlib.import_module(module), function, None)
    if fn is None:
        raise ConfigError(key, f"{loader!r}: {module} has no {function!r}")
    missing = [p for p in getattr(fn, "requires", ()) if importlib.util.find_spec(p) is None]
    if missing:
        raise ConfigError(key, f"{loader!r} needs the package(s) {missing}, not installed here")


def model_loader(path: str | Path) -> str | None:
    """The loader a model folder's own `config.json` calls for (its `type` a LeRobot policy type), or
    None when the files do not say (no config.json, another type)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    data = parse_json(read_text(config, "a model config"), config, "a model config")
    kind = data.get("type") if isinstance(data, dict) else None
    if kind is not None and not isinstance(kind, str):  # a list is unhashable: no set lookup on it
        raise InputError(
            f"{config}: field 'type' is {shown(kind)}; expected a policy type name, a string such as 'act'",
            path=config,
            field="type",
        )
    return LEROBOT_LOADER if kind in LEROBOT_POLICY_TYPES else None


def model_specs(cfg: Any, tf: TeacherForcedConfig) -> list[ModelSpec]:
    """`stages.teacher_forced.models`, else `model.path` as the one (baseline) model, or none."""
    if tf.models:
        return list(tf.models)
    path = (cfg.get("model") or {}).get("path")
    loader = model_loader(path) if path else None
    if not path or not loader:
        return []
    name = str((cfg.get("model") or {}).get("name") or "model")
    return [ModelSpec(name=name, path=str(path), loader=loader)]


def unmet(cfg: Any) -> tuple[str, ...]:
    """At launch: a `model.path` whose files name no loader leaves the stage nothing it can load (it is
    skipped); one whose loader needs a package not installed here (lerobot) is exit 2, as a listed
    model's is (`loader_installed`)."""
    if ((cfg.get("stages") or {}).get(NAME) or {}).get("models"):
        return ()
    path = (cfg.get("model") or {}).get("path")
    if not path or not Path(str(path)).is_dir():
        return ()  # launch_inputs names a missing path; the run names one that is not a folder
    try:
        found = model_loader(str(path))
    except InputError:
        return ()  # an unreadable config.json: the stage's run records it as an error row
    if found is None:
        return (f"stages.{NAME}.models (model.path's config.json names no known loader)",)
    loader_installed(found, "model.path")
    return ()


INPUTS = (
    "dataset",
    "model",
    Input("stages.teacher_forced.models[*].path", "checkpoint", whole=True),
    Input("stages.teacher_forced.models[*].manifest", "file", whole=True),
    Input("stages.teacher_forced.sample_manifest", "optional", whole=True),
)


def run(cfg: DictConfig, ctx: StageContext) -> StageResult:
    from pipeline.stages.teacher_forced.evaluate import evaluate

    tf = ctx.config if isinstance(ctx.config, TeacherForcedConfig) else stage_config(cfg, NAME)
    assert isinstance(tf, TeacherForcedConfig)
    dataset = (cfg.get("dataset") or {}).get("path")
    specs = model_specs(cfg, tf)
    if not specs:
        reason = f"no model to score: set stages.{NAME}.models, or model.path to a LeRobot policy folder"
        return StageResult(NAME, "skipped", provenance={"reason": reason})
    if not dataset:
        raise InputError("dataset.path: the teacher-forced stage needs a dataset", field="dataset.path")
    from pipeline.stages.teacher_forced.repeatability import check_seeds

    try:
        check_seeds(tf.estimator_seeds, {m.name: m.seeds for m in specs}, f"stages.{NAME}")
    except ConfigError as exc:
        raise InputError(str(exc), field=exc.key) from exc
    baseline = tf.baseline or specs[0].name
    source = sources(rename_map(cfg))
    return evaluate(tf, specs, baseline, dict(tf.subset_episodes), Path(dataset), ctx, source)


__all__ = ["ModelSpec", "TeacherForcedConfig", "model_loader", "model_specs", "run"]
