"""Readers for (B), the training config the run will use.

Two shapes: LeRobot's `train_config.json` (what `lerobot-train` saves next to a checkpoint) and a
Hydra/YAML file with the same layout (`policy.normalization_mapping`, `policy.input_features`, ...).
A YAML file is read as plain YAML with the safe loader: Hydra `defaults:` lists are not composed, which
the contract notes, so point `training.path` at the composed config (`--cfg job` output) when you use them.

What B can add beyond A: a normalization override, feature keys and their order, image keys and their
order, a rename map, declared vector names, and action mode hints (`action_mode: absolute | delta`).
When B says nothing about a field it inherits A's value (LeRobot finetuning keeps the pretrained config),
and the contract records which fields were inherited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.normalization import lerobot_modes
from pipeline.readers.base import (
    Contract,
    Feature,
    declared_shape,
    norm_map_of,
    read_json,
    read_yaml,
    role_of,
    typed_features,
)
from pipeline.readers.lerobot_windows import delta_indices
from pipeline.readers.model import window_fields
from pipeline.storage.files import regular_file

HINT_KEYS = ("action_mode", "image_order", "camera_order", "image_scale", "channel_order", "units")


def read_training(path: str | Path) -> Contract:
    path = training_file(path)
    if path.suffix == ".json":
        data, kind = read_json(path, "LeRobot train_config.json"), "lerobot_train_config"
    else:
        data, kind = read_yaml(path, "a training config"), "yaml"
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: a training config must be a mapping at the top level", path=path, field="<root>"
        )
    return _contract(path, data, kind)


def training_file(path: str | Path) -> Path:
    """The file `read_training` would parse at `path` (a directory resolves to its training config), a
    regular .json/.yaml file, checked by name and stat only: the cheap "can a reader take this"."""
    path = Path(path)
    if path.is_dir():
        for name in ("train_config.json", "train_config.yaml", "training.yaml", "config.yaml"):
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise InputError(
                f"{path}: no train_config.json / train_config.yaml / training.yaml in this "
                "directory (expected the training config the run will use)",
                path=path,
                field="training.path",
            )
    regular_file(path, "the training config")
    if path.suffix not in (".json", ".yaml", ".yml"):
        raise InputError(
            f"{path}: expected a .json or .yaml training config", path=path, field="training.path"
        )
    return path


def _contract(path: Path, data: dict[str, Any], kind: str) -> Contract:
    policy = data.get("policy") or {}
    if not isinstance(policy, dict):
        raise InputError(f"{path}: field 'policy' must be a mapping", path=path, field="policy")
    contract = Contract("B", kind, str(path))
    contract.features.update(typed_features(policy.get("input_features"), path, "policy.input_features"))
    contract.features.update(typed_features(policy.get("output_features"), path, "policy.output_features"))
    contract.norm_map = norm_map_of(policy.get("normalization_mapping"), path, "policy.normalization_mapping")
    if kind == "lerobot_train_config" and "normalization_mapping" in policy:
        # the full policy config lerobot-train runs with: a type it leaves out is passed through
        types = (f.type for f in contract.features.values())
        contract.norm_map, absent = lerobot_modes(contract.norm_map, types)
        if absent:
            contract.hints["absent_modes"] = absent
    _declared_names(contract, data.get("features"), path)
    dataset = data.get("dataset") or {}
    contract.hints["dataset"] = {
        k: dataset.get(k)
        for k in ("repo_id", "root", "use_imagenet_stats")
        if isinstance(dataset, dict) and k in dataset
    }
    if isinstance(dataset, dict) and dataset.get("episodes") is not None:
        contract.hints["dataset"]["episodes"] = episode_list(dataset["episodes"], path)
    contract.hints["pretrained_path"] = policy.get("pretrained_path")
    contract.hints["policy_type"] = policy.get("type")
    # what one training sample spans for a policy built from this config alone (no base: `--policy.type`)
    contract.hints["window"] = window_fields(policy)
    if (deltas := delta_indices(policy)) is not None:
        contract.hints["delta_indices"] = deltas
    rename = data.get("rename_map") or policy.get("rename_map") or {}
    if not isinstance(rename, dict):
        raise InputError(
            f"{path}: field 'rename_map' must map dataset keys to policy keys", path=path, field="rename_map"
        )
    contract.hints["rename_map"] = {str(k): str(v) for k, v in rename.items()}
    for key in HINT_KEYS:
        value = data.get(key, policy.get(key))
        if value is not None:
            contract.hints["image_order" if key == "camera_order" else key] = value
    if "defaults" in data:
        contract.notes.append("Hydra 'defaults' list present: read as plain YAML, not composed")
    return contract


def _declared_names(contract: Contract, raw: Any, path: Path) -> None:
    """Optional `features: {key: {names: [...], shape: [...]}}` declared by the training config."""
    if raw is None:
        return
    if not isinstance(raw, dict):
        raise InputError(
            f"{path}: field 'features' must map feature keys to {{names, shape}}", path=path, field="features"
        )
    for key, spec in raw.items():
        if not isinstance(spec or {}, dict):
            raise InputError(
                f"{path}: field 'features.{key}' must be a mapping with names/shape",
                path=path,
                field=f"features.{key}",
            )
        names = (spec or {}).get("names")
        if names is not None and not isinstance(names, list):
            raise InputError(
                f"{path}: field 'features.{key}.names' must be a list",
                path=path,
                field=f"features.{key}.names",
            )
        feature = contract.features.get(key)
        if feature is None:
            shape = (spec or {}).get("shape") or ([len(names)] if names else None)
            dims = declared_shape(shape, path, f"features.{key}.shape") if shape else None
            feature = Feature(key, role_of(key), dims)
            contract.features[key] = feature
        if names is not None:
            feature.names = [str(n) for n in names]


def episode_list(value: Any, path: Path) -> list[int]:
    """`dataset.episodes`, the episodes lerobot-train loads (all of them when it is null), as indices."""
    ok = isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    )
    if not ok:
        raise InputError(
            f"{path}: field 'dataset.episodes' must be a list of episode indices (or null), got {value!r}",
            path=path,
            field="dataset.episodes",
        )
    return [int(v) for v in value]
