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
from pipeline.normalization import (
    ABSENT_MODE,
    LEGACY_MODES,
    OWN_NORMALIZED_TYPES,
    OWN_NORMALIZER_FLAGS,
    lerobot_modes,
    unflatten_stats,
)
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
from pipeline.readers.lerobot_paths import shown
from pipeline.readers.lerobot_windows import checked_config, delta_indices
from pipeline.readers.model_formats import apply_mode_option, read_card, read_openpi, read_openvla
from pipeline.storage.files import regular_file

LEGACY_PREFIXES = ("normalize_inputs.buffer_", "normalize_targets.buffer_", "unnormalize_outputs.buffer_")
CARD_NAMES = ("contract.yaml", "contract.yml")
# config.json fields that size a training sample's window (observation steps, action chunk / horizon)
WINDOW_FIELDS = (
    "n_obs_steps",
    "chunk_size",
    "horizon",
    "n_action_steps",
    "action_horizon",
    "action_chunk_size",
    "n_action_pred_token",  # VQ-BeT: its action window is n_action_pred_token + action_chunk_size - 1
    "drop_n_last_frames",  # diffusion: frames at an episode's end never start a sample
)


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
    """One processor JSON: its normalizing steps with features, norm_map, eps and their stats.

    The step index in the state file name varies per policy, so the state file is taken from the step's
    own `state_file` field, resolved inside the checkpoint directory. A step LeRobot could not name from
    its registry is saved under `class` (the reward classifier's identity step), and is read so too.
    """
    data = read_json(path, "a LeRobot processor pipeline")
    steps = require(data, "steps", path, "a list of processor steps")
    if not isinstance(steps, list):
        raise InputError(f"{path}: field 'steps' must be a list", path=path, field="steps")
    names, found = [], []
    for index, step in enumerate(steps):
        name = step.get("registry_name") or step.get("class") if isinstance(step, dict) else None
        if not name:
            require(
                step, "registry_name", path, "a registered step name, or the step's class", f"steps[{index}]"
            )
        names.append(str(name))
        entry = _normalizing_step(path, root, index, str(name), step)
        if entry is not None:
            found.append(entry)
    return {"path": str(path), "name": data.get("name"), "steps": names, "normalizers": found}


def _normalizing_step(
    path: Path, root: Path | None, index: int, name: str, step: dict[str, Any]
) -> dict[str, Any] | None:
    """LeRobot's (un)normalizer step, or a policy's own step that normalizes inside itself (a flag of
    `OWN_NORMALIZER_FLAGS` in its config: its mode, its feature types fixed by that policy's code)."""
    config, state_file = step.get("config", {}), step.get("state_file")
    config = {} if config is None else config
    for field, value, want in (
        ("config", config, dict),
        ("state_file", "" if state_file is None else state_file, str),
    ):
        if not isinstance(value, want):
            raise InputError(
                f"{path}: field 'steps[{index}].{field}' is {shown(value)}; expected "
                + ("an object of the step's settings" if want is dict else "a file name in the checkpoint"),
                path=path,
                field=f"steps[{index}].{field}",
            )
    own = next((mode for flag, mode in OWN_NORMALIZER_FLAGS.items() if config.get(flag) is not None), None)
    if "normalizer" not in name and own is None:
        return None
    where = f"steps[{index}].config"
    entry: dict[str, Any] = {
        "index": index,
        "registry_name": name,
        "eps": config.get("eps"),
        "features": typed_features(config.get("features"), path, f"{where}.features"),
        "norm_map": norm_map_of(config.get("norm_map"), path, f"{where}.norm_map"),
        "own": None,
        "state_file": state_file,
        "stats": None,
    }
    if own is not None and "normalizer" not in name:
        flag = next(f for f in OWN_NORMALIZER_FLAGS if config.get(f) is not None)
        entry["own"] = {"flag": flag, "value": config[flag], "mode": own if config[flag] else ABSENT_MODE}
    if entry["state_file"]:
        try:
            state = inside(root or path.parent, entry["state_file"], f"steps[{index}].state_file")
        except InputError as exc:  # name the processor file whose field points out
            raise InputError(f"{path}: {exc}", path=path, field=exc.field) from exc
        if state.exists() or state.is_symlink():
            entry["stats"] = unflatten_stats(read_safetensors(state))
    return entry


def _read_lerobot(target: Path, options: dict[str, Any]) -> Contract:
    if target.is_file():  # a processor JSON on its own (no config.json next to it)
        proc = read_processor(target)
        contract = Contract("A", "lerobot_processor", str(target))
        _adopt_processor(contract, proc, "pre")
        return contract
    config_path = target / "config.json"
    config = checked_config(read_json(config_path, "a LeRobot policy config"), config_path)
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
    declared = norm_map_of(config.get("normalization_mapping"), config_path, "normalization_mapping")
    contract.norm_map, absent = lerobot_modes(declared, (f.type for f in contract.features.values()))
    contract.hints["policy_type"] = config.get("type")
    contract.hints["window"] = window_fields(config)
    if (deltas := delta_indices(config)) is not None:
        contract.hints["delta_indices"] = deltas
    contract.hints["config"] = {"features": list(contract.features), "norm_map": dict(contract.norm_map)}
    if absent:
        contract.hints["absent_modes"] = absent
    for label in ("pre", "post"):
        proc_path = _processor_file(target, label)
        if proc_path is None:
            contract.notes.append(f"no policy_{label}processor*.json in {target}")
            continue
        _adopt_processor(contract, read_processor(proc_path, target), label)
    _own_normalizers(contract)
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


def window_fields(config: dict[str, Any]) -> dict[str, int]:
    """The fields of a policy's config.json that set how many frames one training sample spans (LeRobot
    builds its `delta_timestamps` from them): observation steps, chunk / horizon, executed steps."""
    return {k: int(v) for k in WINDOW_FIELDS if isinstance(v := config.get(k), int) and v > 0}


def _own_normalizers(contract: Contract) -> None:
    """Where a policy normalizes inside its own steps (GR00T), those steps decide the mode of the types
    they handle, whatever `normalization_mapping` says: LeRobot builds them with their flag, not with
    the mapping. The step gets the features of those types, and A's mode is the step's."""
    own: dict[str, str] = {}
    for label in ("pre", "post"):
        for step in (contract.hints.get(label) or {}).get("normalizers", []):
            if not step["own"]:
                continue
            types = OWN_NORMALIZED_TYPES[label]
            step["features"] = {k: f for k, f in contract.features.items() if f.type in types}
            step["norm_map"] = dict.fromkeys(types, step["own"]["mode"])
            for ftype in types:
                own.setdefault(
                    ftype, f"{step['registry_name']} ({step['own']['flag']}: {step['own']['value']})"
                )
                contract.norm_map[ftype] = step["own"]["mode"]
    if own:
        contract.hints["own_normalizer"] = own


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
    contract.hints["window"] = window_fields(config)
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
