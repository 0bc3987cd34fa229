"""The reload round trip for a LeRobot checkpoint, through the one LeRobot loader teacher_forced uses.

When `stages.determinism.reload.loader` is unset, the smoke checkpoint's own `config.json` chooses the
loader as it does for teacher_forced's `model.path` (`model_loader`: a LeRobot policy `type` ->
`load_lerobot`), so a user who trains with lerobot-train gets the round trip without writing one, and
nothing here comes from the demo. LeRobot's eval reloads the policy with its saved pre/post processors
and normalizes with the stats those processors saved (it re-injects nothing), so the stats judged are
the processors' normalizer states after the load, keyed as their state files key them
(`<feature>.<stat>`), and the stats eval needs are those the normalizer steps' own `features` and
`norm_map` ask for (a type absent from the map is IDENTITY, as LeRobot applies it).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.normalization import ABSENT_MODE, NEEDS
from pipeline.readers import LeRobotData
from pipeline.stages.teacher_forced import LEROBOT_LOADER, model_loader
from pipeline.stages.teacher_forced.models import LeRobotModel, device_for, load_lerobot
from pipeline.trainlog.spec import Reloaded

LOADER = "pipeline.stages.determinism.lerobot_reload:reload_lerobot"
POST_SUFFIX = "@postprocessor"  # a post-processor stat that differs from the pre-processor's same key
# lerobot 0.4.4's NormalizerProcessorStep._apply_transform: `key not in self._tensor_stats` -> the tensor
# as it is, at training (lerobot-train's preprocessor) and at inference alike
WITHOUT_STATS = "lerobot's NormalizerProcessorStep passes an input without stats through unnormalized"


def default_loader(checkpoint: Path) -> str | None:
    """The reload loader the checkpoint's `config.json` calls for, or None when its files do not say."""
    return LOADER if model_loader(checkpoint) == LEROBOT_LOADER else None


def missing_packages(loader: Any) -> list[str]:
    """The packages a loader declares (`fn.requires`) that are not installed here."""
    return [p for p in getattr(loader, "requires", ()) if importlib.util.find_spec(p) is None]


def _value(item: Any) -> str:
    """A LeRobot enum (FeatureType, NormalizationMode) or plain string as its name."""
    return str(getattr(item, "value", item))


def processor_stats(pre: Any, post: Any) -> tuple[dict[str, np.ndarray], list[str]]:
    """The stats LeRobot's processor pipelines normalize and unnormalize with, and the keys their modes
    need: what training used (`pipeline.trainers.lerobot_train` writes it as the intent) and what a
    reload gives eval, read the same way.

    The pre-processor's keys come first; the post-processor's unnormalizer holds the action stats again,
    and where its values differ from the pre-processor's the key is kept beside as `<key>@postprocessor`
    (training wrote one set, so the difference is a finding the intent comparison names)."""
    stats: dict[str, np.ndarray] = {}
    required: list[str] = []
    for pipeline in (pre, post):
        for step in getattr(pipeline, "steps", ()):
            if not hasattr(step, "state_dict") or not hasattr(step, "norm_map"):
                continue
            for key, tensor in step.state_dict().items():
                value = tensor.detach().float().cpu().numpy()
                if key in stats and not np.array_equal(stats[key], value):
                    key = f"{key}{POST_SUFFIX}"
                stats.setdefault(key, value)
            modes = {_value(t): _value(m) for t, m in dict(step.norm_map).items()}
            for feature, spec in dict(step.features).items():
                mode = modes.get(_value(spec.type), ABSENT_MODE)
                required += [f"{feature}.{s}" for s in NEEDS.get(mode, ())]
    return stats, list(dict.fromkeys(required))


def saved_renames(pre: Any) -> dict[str, str]:
    """The rename map the reloaded preprocessor applies first (its `rename_observations_processor`, as
    lerobot-train saved it with `--rename_map`); empty when it renames nothing."""
    out: dict[str, str] = {}
    for step in getattr(pre, "steps", ()):
        out.update({str(k): str(v) for k, v in dict(getattr(step, "rename_map", None) or {}).items()})
    return out


def first_task(dataset: Path) -> str | None:
    """The task text of the dataset's first row (the row the round trip feeds), or None without tasks."""
    data = LeRobotData(dataset)
    tasks = data.tasks()
    if not tasks or "task_index" not in data.features:
        return None
    index = int(data.frames(["task_index"], limit=1)["task_index"][0])
    return tasks[index] if 0 <= index < len(tasks) else None


def forward_of(model: LeRobotModel, device: str, task: str | None) -> Any:
    """Raw observations (numpy, batch of one) -> the raw action eval executes first: the processors
    around one `select_action` after `reset()`, as LeRobot's rollout calls them, with the row's task
    text beside them as LeRobot's loader hands it (a list of str), which a VLA's tokenizer step reads."""

    def forward(sample: Mapping[str, np.ndarray]) -> np.ndarray:
        batch: dict[str, Any] = {k: torch.as_tensor(np.asarray(v), device=device) for k, v in sample.items()}
        if task is not None:
            batch["task"] = [task]
        with torch.inference_mode():
            model.policy.reset()
            action = model.post(model.policy.select_action(model.pre(batch)))
        return action.detach().float().cpu().numpy()

    return forward


def reload_lerobot(checkpoint: Path, dataset: Path) -> Reloaded:
    """`module:function(checkpoint_dir, dataset_dir)` for the determinism stage's reload round trip.

    LeRobot's eval takes the stats from the checkpoint's processors, never from the dataset, so nothing
    is injected (a stat missing from the saved state stays missing, and is named); the dataset gives
    the fed row's task text only."""
    device = device_for("auto")
    model = load_lerobot(str(checkpoint), device)
    stats, required = processor_stats(model.pre, model.post)
    outputs = list(getattr(model.policy.config, "output_features", None) or ["action"])
    return Reloaded(
        stats=stats,
        forward=forward_of(model, device, first_task(dataset)),
        input_features=list(model.input_features),
        output_feature=str(outputs[0]),
        injected=[],
        required=required,
        renames=saved_renames(model.pre),
        without_stats=WITHOUT_STATS,
    )


reload_lerobot.requires = load_lerobot.requires  # type: ignore[attr-defined]
