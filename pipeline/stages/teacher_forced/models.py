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
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.errors import InputError
from pipeline.progress import progress
from pipeline.stages.config import resolve_callable as resolve
from pipeline.storage.files import refuse_pickles

Predict = Callable[[Mapping[str, np.ndarray]], np.ndarray]
LONG = 50  # batches: from here on a progress bar shows the run is alive


def fit_threads(device: str, cpus: int | None) -> None:
    """On the CPU, one torch thread per CPU the job asked for, not one per core of the node.

    Why: torch starts a thread per core it sees, and where the job does not own every core (a Slurm node
    without CPU binding, or the local launcher running jobs side by side) the extra threads spin against
    the other jobs. Measured on 2 cores with other jobs running: this stage took 10.4-11.9 s of CPU and
    23-25 s wall with 2 threads, 4.2 s and 5.6-7.3 s with 1. Only this process's count is set, never
    OMP_NUM_THREADS, so nothing the job starts inherits it."""
    if device == "cpu" and cpus:
        torch.set_num_threads(int(cpus))


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
    """A LeRobot policy with its saved pre/post processors, called on a whole batch at once.

    The chunk is what LeRobot's own rollout executes: after `reset()`, `n_action_steps` calls of
    `select_action` on the same observation (the first runs the model, the rest pop its action queue).
    Not `predict_action_chunk`: for diffusion it stacks observation queues that only `select_action`
    fills (on a fresh policy: an empty stack); and without `reset()` per batch a queue left by the
    previous batch would answer for this one."""

    def __init__(self, policy: Any, pre: Any, post: Any, inputs: list[str]) -> None:
        self.policy, self.pre, self.post, self.input_features = policy, pre, post, inputs
        self.steps = max(1, int(getattr(policy.config, "n_action_steps", 1) or 1))

    def predict_action_chunk(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        self.policy.reset()
        prepared = self.pre(dict(batch))
        steps = [self.policy.select_action(dict(prepared)) for _ in range(self.steps)]
        return self.post(torch.stack(steps, dim=1))


LEROBOT_FILES = ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json")


def lerobot_files(root: Path) -> dict[str, Any]:
    """The files LeRobot's `save_pretrained` writes (policy + both processors, as its training saves
    them), checked here by name: lerobot takes a path it cannot find locally for a Hub repo id and
    tries to download it, which on a cluster node is a hang or a message about the network. Returns the
    preprocessor's JSON (its step names decide which overrides apply)."""
    if not root.is_dir():
        raise InputError(
            f"{root}: a LeRobot policy is a directory (save_pretrained)", path=root, field="path"
        )
    missing = [name for name in LEROBOT_FILES if not (root / name).is_file()]
    processors = {}
    for name in LEROBOT_FILES[2:]:
        if name in missing:
            continue
        processors[name] = _processor(root / name)
        states = [s.get("state_file") for s in processors[name]["steps"] if isinstance(s, dict)]
        missing += [f for f in states if f and (Path(f).name != f or not (root / f).is_file())]
    if missing:
        raise InputError(
            f"{root}: a LeRobot policy directory lacks {missing} (policy.save_pretrained writes config.json "
            "and model.safetensors; preprocessor/postprocessor.save_pretrained write the processor files)",
            path=root,
            field=missing[0],
        )
    return processors[LEROBOT_FILES[2]]


def _processor(path: Path) -> dict[str, Any]:
    """One saved processor pipeline's JSON: an object with a `steps` list, else an error naming it."""
    try:
        loaded = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not readable JSON ({exc})", path=path, field=path.name) from exc
    if not isinstance(loaded, dict) or not isinstance(loaded.get("steps"), list):
        raise InputError(f"{path}: expected a processor pipeline (a 'steps' list)", path=path, field="steps")
    return loaded


def load_lerobot(path: str, device: str) -> LeRobotModel:
    """A LeRobot policy from a local directory (config.json, model.safetensors, processors), on `device`
    whatever device it was trained and saved on (LeRobot's own eval overrides the saved one the same way)."""
    if importlib.util.find_spec("lerobot") is None:
        raise InputError(
            f"{path}: the lerobot loader needs the optional 'lerobot' package (pip install lerobot)",
            path=path,
            field="loader",
        )
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    root = Path(path)
    refuse_pickles(root, "a LeRobot policy")  # first: it names a path that does not exist
    pre_config = lerobot_files(root)
    config = PreTrainedConfig.from_pretrained(str(root), local_files_only=True)
    config.device = device
    policy = get_policy_class(config.type).from_pretrained(str(root), config=config, local_files_only=True)
    policy.to(device).eval()
    steps = {s.get("registry_name") for s in pre_config["steps"] if isinstance(s, dict)}
    overrides = {"device_processor": {"device": device}} if "device_processor" in steps else {}
    pre, post = make_pre_post_processors(config, pretrained_path=str(root), preprocessor_overrides=overrides)
    inputs = list(config.input_features)  # cameras included: the stage decodes them (inputs.py)
    return LeRobotModel(policy, pre, post, inputs)


load_lerobot.requires = ("lerobot",)  # type: ignore[attr-defined]  # checked at launch
