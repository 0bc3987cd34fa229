"""The demo's base policy: a small MLP saved and reloaded the way LeRobot saves its policies.

The contract stage reads what this writes as source (A), so the layout follows LeRobot's current
format (`config.json` with `input_features` / `output_features` / `normalization_mapping`,
`policy_preprocessor.json` / `policy_postprocessor.json` with a normalizer step whose state lives in a
safetensors file of flat `<feature>.<stat>` keys, and `model.safetensors`). Loading never unpickles:
JSON and safetensors only.

The stable API (the demo's build, trainers and reload loader import it; stages never do): `DemoPolicy`,
`save_pretrained`, `load_pretrained`, `normalize`, `unnormalize`, `STATE_KEY`, `ENV_KEY`, `ACTION_KEY`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import save_file as save_numpy
from torch import nn

from pipeline.demo.features import ACTION_KEY, ENV_KEY, STATE_KEY
from pipeline.errors import InputError
from pipeline.normalization import AFFINE, flat_stats, unflatten_stats
from pipeline.readers.base import read_json, read_safetensors
from pipeline.storage import save_checkpoint

CAMERA_FEATURES = 32  # each camera encoder's output width
POLICY_TYPE = "demo_mlp"
EPS = 1e-8
DEFAULT_NORM_MAP = {"VISUAL": "MEAN_STD", "STATE": "QUANTILES", "ENV": "QUANTILES", "ACTION": "QUANTILES"}
PRE_FILE = "policy_preprocessor.json"
POST_FILE = "policy_postprocessor.json"
PRE_STATE = "policy_preprocessor_step_2_normalizer_processor.safetensors"
POST_STATE = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"

Stats = dict[str, dict[str, np.ndarray]]


class CameraEncoder(nn.Module):
    """One camera's normalized frames [B, 3, H, W] to a small feature vector. The frame is pooled to 16 px
    first (the arm and cube layout survives; the cost on two CPU cores stays a few ms per batch), and the
    convolutions are unpadded, so a per-channel input affine folds into the first one exactly."""

    def __init__(self, features: int = CAMERA_FEATURES) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.AdaptiveAvgPool2d(16),
            nn.Conv2d(3, 8, 3),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(16 * 4 * 4, features),
            nn.ReLU(),
        )

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.net(frames)


class DemoPolicy(nn.Module):
    """Maps the normalized, concatenated vector inputs plus one encoder's features per camera (in the
    config's camera order) to the normalized action (one step, no chunk)."""

    def __init__(self, state_dim: int, action_dim: int, hidden: int = 64, cameras: int = 0) -> None:
        super().__init__()
        self.state_dim, self.action_dim, self.hidden = int(state_dim), int(action_dim), int(hidden)
        self.cameras = int(cameras)
        self.encoders = nn.ModuleList(CameraEncoder() for _ in range(self.cameras))
        self.net = nn.Sequential(
            nn.Linear(self.state_dim + CAMERA_FEATURES * self.cameras, self.hidden),
            nn.ReLU(),
            nn.Linear(self.hidden, self.hidden),
            nn.ReLU(),
            nn.Linear(self.hidden, self.action_dim),
        )

    def forward(self, state: torch.Tensor, images: Sequence[torch.Tensor] = ()) -> torch.Tensor:
        if len(images) != self.cameras:
            raise ValueError(f"the demo policy reads {self.cameras} camera(s), got {len(images)}")
        features = [encoder(frames) for encoder, frames in zip(self.encoders, images, strict=True)]
        return self.net(torch.cat([state, *features], dim=-1) if features else state)


@dataclass
class PolicySpec:
    """What `config.json` declares: the input/output features (in order), their types and the modes."""

    input_features: dict[str, dict[str, Any]] = field(default_factory=dict)
    output_features: dict[str, dict[str, Any]] = field(default_factory=dict)
    normalization_mapping: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_NORM_MAP))


def default_spec(
    state_dim: int,
    action_dim: int,
    env_dim: int = 0,
    norm_map: Mapping[str, str] | None = None,
    cameras: Mapping[str, Sequence[int]] | None = None,
) -> PolicySpec:
    """Vector inputs first, then each camera (`{key: [3, H, W]}`), in the order the policy reads them."""
    inputs: dict[str, dict[str, Any]] = {STATE_KEY: {"type": "STATE", "shape": [state_dim]}}
    if env_dim:
        inputs[ENV_KEY] = {"type": "ENV", "shape": [env_dim]}
    for key, shape in (cameras or {}).items():
        inputs[key] = {"type": "VISUAL", "shape": [int(d) for d in shape]}
    return PolicySpec(
        inputs, {ACTION_KEY: {"type": "ACTION", "shape": [action_dim]}}, dict(norm_map or DEFAULT_NORM_MAP)
    )


def _mode(spec: PolicySpec, feature: str) -> str:
    ftype = {**spec.input_features, **spec.output_features}[feature]["type"]
    return spec.normalization_mapping.get(ftype, "IDENTITY")


def normalize(x: np.ndarray | torch.Tensor, stats: Mapping[str, np.ndarray], mode: str) -> Any:
    """LeRobot's normalizer: MEAN_STD, MIN_MAX and QUANTILES map to roughly [-1, 1]; IDENTITY passes."""
    lo, scale, shift = _affine(stats, mode, x)
    return x if lo is None else (x - lo) / scale * 2.0 - 1.0 if shift else (x - lo) / scale


def unnormalize(y: np.ndarray | torch.Tensor, stats: Mapping[str, np.ndarray], mode: str) -> Any:
    lo, scale, shift = _affine(stats, mode, y)
    return y if lo is None else (y + 1.0) / 2.0 * scale + lo if shift else y * scale + lo


def _affine(stats: Mapping[str, np.ndarray], mode: str, like: Any) -> tuple[Any, Any, bool]:
    if mode == "IDENTITY":
        return None, None, False
    a, b, shift = AFFINE[mode]
    lo, hi = np.asarray(stats[a], dtype=np.float32), np.asarray(stats[b], dtype=np.float32)
    scale = (hi + EPS) if not shift else (hi - lo + EPS)
    if isinstance(like, torch.Tensor):
        lo, scale = torch.as_tensor(lo, device=like.device), torch.as_tensor(scale, device=like.device)
    return lo, scale, shift


def _normalizer_step(name: str, features: dict[str, Any], norm_map: dict[str, str], state_file: str) -> dict:
    return {
        "registry_name": name,
        "config": {"eps": EPS, "features": features, "norm_map": norm_map},
        "state_file": state_file,
    }


def save_pretrained(
    policy: DemoPolicy,
    stats: Stats,
    out_dir: str | Path,
    spec: PolicySpec | None = None,
    extra_config: Mapping[str, Any] | None = None,
) -> Path:
    """Write the checkpoint directory; `stats[feature][stat]` are the normalizer's baked-in stats."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = spec or default_spec(policy.state_dim, policy.action_dim)
    config = {
        "type": POLICY_TYPE,
        "n_obs_steps": 1,
        "input_features": spec.input_features,
        "output_features": spec.output_features,
        "normalization_mapping": spec.normalization_mapping,
        "hidden": policy.hidden,
        "state_dim": policy.state_dim,
        "action_dim": policy.action_dim,
        "cameras": policy.cameras,
        **(extra_config or {}),
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    every = {**spec.input_features, **spec.output_features}
    pre = {
        "name": "policy_preprocessor",
        "steps": [
            {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
            {"registry_name": "to_batch_processor", "config": {}},
            _normalizer_step("normalizer_processor", every, spec.normalization_mapping, PRE_STATE),
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
        ],
    }
    post = {
        "name": "policy_postprocessor",
        "steps": [
            _normalizer_step(
                "unnormalizer_processor", spec.output_features, spec.normalization_mapping, POST_STATE
            ),
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
        ],
    }
    (out / PRE_FILE).write_text(json.dumps(pre, indent=2) + "\n")
    (out / POST_FILE).write_text(json.dumps(post, indent=2) + "\n")
    save_numpy(flat_stats(stats, list(every)), str(out / PRE_STATE))
    save_numpy(flat_stats(stats, list(spec.output_features)), str(out / POST_STATE))
    weights = {k: v.detach().cpu().contiguous() for k, v in policy.state_dict().items()}
    save_checkpoint(weights, {"format": "demo-policy"}, primary=out, name="model")
    return out


@dataclass
class LoadedPolicy:
    """A reloaded checkpoint: the module, its spec and the stats eval would normalize with."""

    policy: DemoPolicy
    spec: PolicySpec
    stats: Stats

    def mode(self, feature: str) -> str:
        return _mode(self.spec, feature)

    def cameras(self) -> list[str]:
        return camera_keys(self.spec)

    @torch.no_grad()
    def act(self, observations: Mapping[str, np.ndarray]) -> np.ndarray:
        """Raw observations (one row or a batch) in, raw actions out, through the saved normalizers.
        Cameras are float 0-1 [..., 3, H, W], what LeRobot's loader yields."""

        def norm(k: str) -> np.ndarray:
            return normalize(np.asarray(observations[k], np.float32), self.stats.get(k, {}), self.mode(k))

        cams = self.cameras()
        vectors = [norm(k) for k in self.spec.input_features if k not in cams]
        x = torch.as_tensor(np.concatenate(vectors, axis=-1), dtype=torch.float32)
        images = [torch.as_tensor(norm(k), dtype=torch.float32) for k in cams]
        single = x.ndim == 1
        if single:
            x, images = x[None], [i[None] for i in images]
        y = self.policy(x, images).numpy()
        y = y[0] if single else y
        return unnormalize(y, self.stats.get(ACTION_KEY, {}), self.mode(ACTION_KEY))


def camera_keys(spec: PolicySpec) -> list[str]:
    """The VISUAL inputs, in the order the policy's encoders read them."""
    return [k for k, f in spec.input_features.items() if f.get("type") == "VISUAL"]


def load_pretrained(out_dir: str | Path) -> LoadedPolicy:
    """Reload what `save_pretrained` wrote (JSON + safetensors through the validated reader; nothing is
    unpickled)."""
    root = Path(out_dir)
    config = read_json(root / "config.json", "the demo policy's config.json")
    spec = PolicySpec(config["input_features"], config["output_features"], config["normalization_mapping"])
    policy = DemoPolicy(
        config["state_dim"], config["action_dim"], config.get("hidden", 64), config.get("cameras", 0)
    )
    weights = read_safetensors(root / "model.safetensors")  # header validated before any tensor is read
    _check_weights(root / "model.safetensors", weights, policy.state_dict())
    policy.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    policy.eval()
    stats = unflatten_stats(read_safetensors(root / PRE_STATE))
    for feature, values in unflatten_stats(read_safetensors(root / POST_STATE)).items():
        stats.setdefault(feature, {}).update(values)
    return LoadedPolicy(policy, spec, stats)


class WeightsMismatch(InputError):
    """The weights file does not fit the module its config.json describes: a damaged cache entry to the
    demo's build, and to an eval loader a checkpoint that training saved and eval cannot load."""


def _check_weights(path: Path, weights: Mapping[str, np.ndarray], wanted: Mapping[str, torch.Tensor]) -> None:
    """An InputError naming the file and the first tensor that is missing, unexpected or of another shape
    than the module config.json describes (torch's own error is a multi-line RuntimeError naming neither
    the file nor the config)."""
    missing, extra = sorted(set(wanted) - set(weights)), sorted(set(weights) - set(wanted))
    if missing or extra:
        said = [f"lacks tensor(s) {missing[:5]}"] if missing else []
        said += [f"holds tensor(s) the policy config.json does not describe {extra[:5]}"] if extra else []
        raise WeightsMismatch(f"{path}: {'; '.join(said)}", path=path, field=(missing or extra)[0])
    for name, tensor in wanted.items():
        if tuple(weights[name].shape) != tuple(tensor.shape):
            raise WeightsMismatch(
                f"{path}: tensor {name!r} has shape {list(weights[name].shape)}, expected "
                f"{list(tensor.shape)} (the policy config.json describes)",
                path=path,
                field=name,
            )
