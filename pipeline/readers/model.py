"""Readers for (A), the base checkpoint's contract: what the model was built to receive.

Saved runtime artifacts are authoritative because inference reloads them, so each reader reads what the
format's own loader reads: LeRobot's current processor pipeline (config.json + processor JSONs + the
normalizer's safetensors state), LeRobot's legacy in-model buffers and v1 `stats.safetensors`, openpi's
`norm_stats.json`, OpenVLA-style `dataset_statistics.json`, and a user-written contract card for
checkpoints whose contract is implicit (every row from a card is marked inferred).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.normalization import LEGACY_MODES, unflatten_stats
from pipeline.readers.base import (
    Contract,
    Feature,
    as_vector,
    declared_shape,
    inside,
    norm_map_of,
    read_json,
    read_safetensors,
    require,
    role_of,
    typed_features,
)
from pipeline.readers.files import regular_file
from pipeline.readers.model_formats import apply_mode_option, read_card, read_openpi, read_openvla

LEGACY_PREFIXES = ("normalize_inputs.buffer_", "normalize_targets.buffer_", "unnormalize_outputs.buffer_")
CARD_NAMES = ("contract.yaml", "contract.yml")


def read_model(path: str | Path, options: dict[str, Any] | None = None) -> Contract:
    """Dispatch on what the path holds; unknown layouts are an InputError listing what was looked for."""
    target, read = _dispatch(Path(path))
    return read(target, options or {})


def detect_model(path: str | Path) -> Path:
    """What `read_model` would read at `path` (a file or the checkpoint directory), from names and stats
    only, nothing parsed: the cheap "can a reader take this" that launch asks before queueing a job."""
    return _dispatch(Path(path))[0]


def _dispatch(path: Path) -> tuple[Path, Callable[[Path, dict[str, Any]], Contract]]:
    """The first reader whose detector takes `path`, and its target; else the InputError listing all."""
    if not path.exists():
        raise InputError(
            f"{path}: model path does not exist (expected a checkpoint directory or a stats/contract file)",
            path=path,
            field="model.path",
        )
    for detect, read in _READERS:
        target = detect(path)
        if target is not None:
            return target, read
    raise InputError(
        f"{path}: no base-checkpoint contract found (looked for config.json with "
        "input_features, policy_preprocessor*.json, model.safetensors with normalize_* buffers, "
        "stats.safetensors, norm_stats.json, dataset_statistics.json, contract.yaml)",
        path=path,
        field="model.path",
    )


def _find(path: Path, names: tuple[str, ...]) -> Path | None:
    """The first of `names` in `path` (or `path` itself); one that exists but is a directory, FIFO or
    device is an InputError naming it, not "not found" (and is never opened)."""
    if not path.is_dir():
        if path.name in names:
            regular_file(path, path.name)
            return path
        return None
    for name in names:
        if (path / name).exists() or (path / name).is_symlink():
            regular_file(path / name, name)
            return path / name
    return None


def _detect_card(path: Path) -> Path | None:
    return _find(path, CARD_NAMES)


def _detect_lerobot(path: Path) -> Path | None:
    if (
        not path.is_dir()
        and path.suffix == ".json"
        and ("processor" in path.name or path.stem.endswith(("_pre", "_post")))
    ):
        return path
    config = _find(path, ("config.json",))
    return config.parent if config is not None else None


def _detect_v1_stats(path: Path) -> Path | None:
    return _find(path, ("stats.safetensors",))


def _detect_legacy_weights(path: Path) -> Path | None:
    return _find(path, ("model.safetensors",))


def _detect_openpi(path: Path) -> Path | None:
    return _find(path, ("norm_stats.json",))


def _detect_openvla(path: Path) -> Path | None:
    return _find(path, ("dataset_statistics.json",))


# --------------------------------------------------------------------------- LeRobot (current + legacy)


def read_processor(path: Path, root: Path | None = None) -> dict[str, Any]:
    """One processor JSON: its normalizer-like steps with features, norm_map, eps and their stats.

    The step index in the state file name varies per policy, so the state file is taken from the step's
    own `state_file` field, resolved inside the checkpoint directory.
    """
    data = read_json(path, "a LeRobot processor pipeline")
    steps = require(data, "steps", path, "a list of processor steps")
    if not isinstance(steps, list):
        raise InputError(f"{path}: field 'steps' must be a list", path=path, field="steps")
    found = []
    for index, step in enumerate(steps):
        name = require(step, "registry_name", path, "a registered step name", f"steps[{index}]")
        if "normalizer" not in str(name):
            continue
        config = step.get("config") or {}
        entry = {
            "index": index,
            "registry_name": name,
            "eps": config.get("eps"),
            "features": typed_features(config.get("features"), path, f"steps[{index}].config.features"),
            "norm_map": norm_map_of(config.get("norm_map"), path, f"steps[{index}].config.norm_map"),
            "state_file": step.get("state_file"),
            "stats": None,
        }
        if entry["state_file"]:
            try:
                state = inside(root or path.parent, entry["state_file"], f"steps[{index}].state_file")
            except InputError as exc:  # name the processor file whose field points out
                raise InputError(f"{path}: {exc}", path=path, field=exc.field) from exc
            if state.exists() or state.is_symlink():
                entry["stats"] = unflatten_stats(read_safetensors(state))
        found.append(entry)
    return {
        "path": str(path),
        "name": data.get("name"),
        "steps": [s.get("registry_name") for s in steps],
        "normalizers": found,
    }


def _read_lerobot(target: Path, options: dict[str, Any]) -> Contract:
    if target.is_file():  # a processor JSON on its own (no config.json next to it)
        proc = read_processor(target)
        contract = Contract("A", "lerobot_processor", str(target))
        _adopt_processor(contract, proc, "pre")
        return contract
    config_path = target / "config.json"
    config = read_json(config_path, "a LeRobot policy config")
    if "input_features" not in config and ("input_shapes" in config or "input_normalization_modes" in config):
        return _read_legacy(target, config, options)
    contract = Contract("A", "lerobot", str(target))
    contract.features.update(
        typed_features(
            require(config, "input_features", config_path, "the policy's input features"),
            config_path,
            "input_features",
        )
    )
    contract.features.update(typed_features(config.get("output_features"), config_path, "output_features"))
    contract.norm_map = norm_map_of(config.get("normalization_mapping"), config_path, "normalization_mapping")
    contract.hints["policy_type"] = config.get("type")
    contract.hints["config"] = {"features": list(contract.features), "norm_map": dict(contract.norm_map)}
    for label in ("pre", "post"):
        proc_path = _processor_file(target, label)
        if proc_path is None:
            contract.notes.append(f"no policy_{label}processor*.json in {target}")
            continue
        _adopt_processor(contract, read_processor(proc_path, target), label)
    if not contract.stats:
        weights = target / "model.safetensors"
        if weights.is_file():
            legacy = _legacy_buffers(weights, contract.features)
            if legacy:
                contract.stats = legacy
                contract.hints["stats_source"] = f"{weights} (legacy normalize_* buffers)"
    return contract


def _processor_file(root: Path, label: str) -> Path | None:
    exact = root / f"policy_{label}processor.json"
    if exact.is_file():
        return exact
    matches = sorted(root.glob(f"*{label}processor*.json"))
    return matches[0] if matches else None


def _adopt_processor(contract: Contract, proc: dict[str, Any], label: str) -> None:
    """Record what the saved processor (the thing eval reloads) says, for the reload checks."""
    contract.hints[label] = proc
    for step in proc["normalizers"]:
        if not contract.features:
            contract.features.update(step["features"])
        if not contract.norm_map:
            contract.norm_map = dict(step["norm_map"])
        if step["stats"] and label == "pre":
            for feature, stats in step["stats"].items():
                contract.stats.setdefault(feature, {}).update(stats)
        elif step["stats"]:
            for feature, stats in step["stats"].items():
                contract.stats.setdefault(feature, {})
                for stat, value in stats.items():
                    contract.stats[feature].setdefault(stat, value)
        if step["stats"] is not None:
            contract.hints.setdefault("stats_source", step["state_file"])


def _legacy_buffers(weights: Path, features: dict[str, Feature]) -> dict[str, dict[str, np.ndarray]]:
    tensors = read_safetensors(weights, keep=lambda name: name.startswith(LEGACY_PREFIXES))
    by_underscore = {key.replace(".", "_"): key for key in features}
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, value in tensors.items():
        prefix = next((p for p in LEGACY_PREFIXES if name.startswith(p)), None)
        if prefix is None:
            continue
        feature_u, _, stat = name[len(prefix) :].rpartition(".")
        feature = by_underscore.get(feature_u, feature_u)
        out.setdefault(feature, {}).setdefault(stat, np.asarray(value, dtype=np.float64))
    return out


def _read_legacy(target: Path, config: dict[str, Any], options: dict[str, Any]) -> Contract:
    """Pre-processor-era LeRobot: shapes and modes per feature key, stats as buffers in the weights."""
    path = target / "config.json"
    contract = Contract("A", "lerobot_legacy", str(target))
    shapes = {**(config.get("input_shapes") or {}), **(config.get("output_shapes") or {})}
    modes = {
        **(config.get("input_normalization_modes") or {}),
        **(config.get("output_normalization_modes") or {}),
    }
    for key, shape in shapes.items():
        dims = declared_shape(shape, path, f"input_shapes.{key}")
        role = "action" if key in (config.get("output_shapes") or {}) else role_of(key, dims)
        contract.features[key] = Feature(key, role, dims)
    for key, mode in modes.items():
        feature = contract.features.get(key) or Feature(key, role_of(key))
        contract.norm_map.setdefault(feature.type, LEGACY_MODES.get(str(mode).lower(), str(mode).upper()))
    weights = target / "model.safetensors"
    if not weights.is_file():
        raise InputError(
            f"{path}: legacy config but no model.safetensors beside it (expected the normalize_* buffers)",
            path=weights,
            field="model.safetensors",
        )
    contract.stats = _legacy_buffers(weights, contract.features)
    contract.hints["stats_source"] = str(weights)
    return contract


def _read_legacy_weights(target: Path, options: dict[str, Any]) -> Contract:
    contract = Contract("A", "lerobot_legacy", str(target))
    contract.stats = _legacy_buffers(target, {})
    if not contract.stats:
        raise InputError(
            f"{target}: no normalize_inputs/normalize_targets/unnormalize_outputs buffers "
            "(expected a legacy LeRobot model.safetensors)",
            path=target,
            field="buffers",
        )
    for key, stats in contract.stats.items():
        dim = next((v.size for v in stats.values()), None)
        contract.features[key] = Feature(key, role_of(key), (dim,) if dim else None)
    return contract


def _read_v1_stats(target: Path, options: dict[str, Any]) -> Contract:
    """LeRobot v1 dataset-era `stats.safetensors` (`<feature>/<stat>`): stats only, mode unknown."""
    contract = Contract("A", "lerobot_v1_stats", str(target))
    contract.stats = unflatten_stats(read_safetensors(target), sep="/")
    for key, stats in contract.stats.items():
        shape = tuple(next(iter(stats.values())).shape)
        contract.features[key] = Feature(key, role_of(key, shape if len(shape) == 3 else None), shape)
    apply_mode_option(contract, options)
    return contract


_READERS: list[tuple[Callable[[Path], Path | None], Callable[[Path, dict[str, Any]], Contract]]] = [
    (_detect_card, read_card),
    (_detect_lerobot, _read_lerobot),
    (_detect_openpi, read_openpi),
    (_detect_openvla, read_openvla),
    (_detect_v1_stats, _read_v1_stats),
    (_detect_legacy_weights, _read_legacy_weights),
]

__all__ = ["detect_model", "read_model", "read_processor", "unflatten_stats", "as_vector"]
