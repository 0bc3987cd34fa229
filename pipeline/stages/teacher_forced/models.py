"""Models under test: loaded by a configured `module:function`, driven through one batched call.

A loader is `fn(path: str, device: str) -> object`. The object is used through the first of:
`predict(batch) -> actions` (numpy dict in, (B, D) or (B, H, D) out), LeRobot's
`predict_action_chunk(batch)` or `select_action(batch)` (torch dict on the device in; the task text
stays a list of str). It may declare `input_features` (the keys it reads, or LeRobot's typed features)
and `n_obs_steps`; inputs.py decides what each key gets (cameras as float 0-1 [B,3,H,W]).
`load_lerobot` adapts a LeRobot policy saved in a local directory when the optional `lerobot` package
is importable. Nothing is unpickled here: loaders
are expected to read safetensors/JSON, as the shipped ones do.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.errors import InputError
from pipeline.progress import progress
from pipeline.readers.files import refuse_pickles
from pipeline.stages.config import resolve_callable as resolve

Predict = Callable[[Mapping[str, np.ndarray]], np.ndarray]
LONG = 50  # batches: from here on a progress bar shows the run is alive


def device_for(want: str) -> str:
    """`auto`: the GPU when torch sees one, else the CPU."""
    if want == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return want


@dataclass
class Loaded:
    """One model ready to score: the object, the keys it reads and its batched predict."""

    name: str
    obj: Any
    inputs: list[str]
    predict: Predict


def load(name: str, path: str, loader: str, device: str, inputs: Sequence[str], key: str) -> Loaded:
    obj = resolve(loader, f"{key}.loader")(path, device)
    keys = list(inputs) or list(getattr(obj, "input_features", None) or ["observation.state"])
    return Loaded(name, obj, keys, adapt(obj, device, key))


def adapt(obj: Any, device: str, key: str) -> Predict:
    """The object's batched call as numpy-in / numpy (B, H, D)-out."""
    if hasattr(obj, "predict"):
        return lambda batch: as_chunk(obj.predict(batch))
    for method in ("predict_action_chunk", "select_action"):
        if hasattr(obj, method):
            call = getattr(obj, method)

            def run(batch: Mapping[str, np.ndarray], call: Callable[..., Any] = call) -> np.ndarray:
                if hasattr(obj, "reset"):
                    obj.reset()
                tensors = {  # copies (the stage's arrays are shared); the task text stays a list of str
                    k: v if isinstance(v, list) else torch.tensor(v, device=device) for k, v in batch.items()
                }
                return as_chunk(call(tensors))

            return run
    raise InputError(
        f"{key}.loader: returned {type(obj).__name__}, which has none of predict / "
        "predict_action_chunk / select_action",
        field=f"{key}.loader",
    )


def as_chunk(actions: Any) -> np.ndarray:
    """Any (B, D) / (B, H, D) tensor or array as float32 numpy (B, H, D)."""
    if isinstance(actions, torch.Tensor):
        actions = actions.detach().float().cpu().numpy()
    out = np.asarray(actions, dtype=np.float32)
    return out[:, None, :] if out.ndim == 2 else out


def infer(
    predict: Predict, batch: Mapping[str, np.ndarray], size: int, seed: int | None, label: str
) -> np.ndarray:
    """All samples through the model in batches of `size` (a progress bar when it takes many batches)."""
    if seed is not None:
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
    total = len(next(iter(batch.values())))
    starts = list(range(0, total, size))
    parts = []
    with torch.inference_mode(), contextlib.ExitStack() as stack:
        advance = stack.enter_context(progress(label, len(starts))) if len(starts) >= LONG else None
        for start in starts:
            parts.append(predict({k: v[start : start + size] for k, v in batch.items()}))
            if advance is not None:
                advance()
    return np.concatenate(parts) if parts else np.zeros((0, 1, 0), np.float32)


class LeRobotModel:
    """A LeRobot policy with its saved pre/post processors, called on a whole batch at once."""

    def __init__(self, policy: Any, pre: Any, post: Any, inputs: list[str]) -> None:
        self.policy, self.pre, self.post, self.input_features = policy, pre, post, inputs

    def predict_action_chunk(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        prepared = self.pre(dict(batch))
        if hasattr(self.policy, "predict_action_chunk"):
            actions = self.policy.predict_action_chunk(prepared)
        else:
            self.policy.reset()
            actions = self.policy.select_action(prepared)
        return self.post(actions)


def load_lerobot(path: str, device: str) -> LeRobotModel:
    """A LeRobot policy from a local directory (config.json, model.safetensors, processors)."""
    if importlib.util.find_spec("lerobot") is None:
        raise InputError(
            f"{path}: the lerobot loader needs the optional 'lerobot' package (pip install lerobot)",
            path=path,
            field="loader",
        )
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    refuse_pickles(Path(path), "a LeRobot policy")
    root = str(Path(path))
    config = PreTrainedConfig.from_pretrained(root)
    config.device = device
    policy = get_policy_class(config.type).from_pretrained(root, config=config)
    policy.to(device).eval()
    pre, post = make_pre_post_processors(config, pretrained_path=root)
    inputs = list(config.input_features)  # cameras included: the stage decodes them (inputs.py)
    return LeRobotModel(policy, pre, post, inputs)


load_lerobot.requires = ("lerobot",)  # type: ignore[attr-defined]  # checked at launch
