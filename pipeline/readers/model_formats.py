"""(A) readers for checkpoints whose contract lives in a stats file or a card, not a LeRobot config.

openpi's `norm_stats.json` (the mode is implied by the model family), OpenVLA-style
`dataset_statistics.json` (per-dataset action bounds and masks), and a user-written contract card for
checkpoints whose contract is implicit (every row from a card is marked inferred). `model.py`
dispatches to these; `apply_mode_option` lets the config name a mode a file does not store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.normalization import ROLE_OF_TYPE
from pipeline.readers.base import (
    Contract,
    Feature,
    declared_shape,
    norm_map_of,
    read_json,
    read_yaml,
    require,
    role_of,
    stats_block,
)


def apply_mode_option(contract: Contract, options: dict[str, Any]) -> None:
    modes = options.get("normalization_mapping")
    if modes:
        contract.norm_map.update(norm_map_of(dict(modes), Path(contract.path), "model.normalization_mapping"))
        contract.hints["mode_source"] = "model.normalization_mapping (config)"


def read_openpi(target: Path, options: dict[str, Any]) -> Contract:
    data = read_json(target, "openpi norm_stats.json")
    if isinstance(data, dict) and "norm_stats" not in data and _looks_openvla(data):
        return read_openvla(target, options, data)  # OpenVLA-family repos also name it norm_stats.json
    stats = require(data, "norm_stats", target, "{state: {...}, actions: {...}}")
    if not isinstance(stats, dict):
        raise InputError(f"{target}: field 'norm_stats' must be an object", path=target, field="norm_stats")
    contract = Contract("A", "openpi", str(target))
    for key, block in stats.items():
        contract.stats[key] = stats_block(block, target, f"norm_stats.{key}")
        dim = contract.stats[key]["mean"].size if "mean" in contract.stats[key] else None
        contract.features[key] = Feature(key, role_of(key), (dim,) if dim else None)
    # openpi does not store the mode with the stats: pi05 normalizes with quantiles, pi0 with mean/std.
    family = next((p for p in target.parts if p.startswith(("pi05", "pi0"))), None)
    if family:
        mode = "QUANTILES" if family.startswith("pi05") else "MEAN_STD"
        contract.norm_map = {"STATE": mode, "ACTION": mode}
        contract.hints["mode_source"] = f"inferred from the asset path component '{family}'"
    apply_mode_option(contract, options)
    return contract


def _looks_openvla(data: dict[str, Any]) -> bool:
    return "action" in data or any(isinstance(v, dict) and "action" in v for v in data.values())


def read_openvla(target: Path, options: dict[str, Any], data: Any = None) -> Contract:
    if data is None:
        data = read_json(target, "OpenVLA-style dataset_statistics.json")
    if not isinstance(data, dict) or not data:
        raise InputError(
            f"{target}: expected an object of per-dataset statistics", path=target, field="<root>"
        )
    if "action" in data:  # single-dataset file (ACT/ALOHA style: action, qpos)
        key, entry = None, data
    else:
        key = options.get("stats_key") or (next(iter(data)) if len(data) == 1 else None)
        if key is None:
            raise InputError(
                f"{target}: {len(data)} datasets ({', '.join(list(data)[:8])}, ...); set "
                "model.stats_key to the one this model un-normalizes with",
                path=target,
                field="model.stats_key",
            )
        entry = require(data, key, target, "the dataset named by model.stats_key")
    where = key or ""
    contract = Contract("A", "openvla", str(target))
    contract.hints["stats_key"] = key
    for name, block in entry.items():
        if isinstance(block, dict):
            stats = stats_block(block, target, f"{where}.{name}".strip("."))
            contract.stats[name] = stats
            dim = stats["mean"].size if "mean" in stats else None
            contract.features[name] = Feature(name, role_of(name), (dim,) if dim else None)
        elif name.startswith("num_"):
            contract.hints[name] = block
    mask = contract.stats.get("action", {}).get("mask")
    if mask is not None:
        contract.hints["action_mask"] = [bool(v) for v in mask]
    has_q = "q01" in contract.stats.get("action", {})
    contract.norm_map = {"ACTION": "QUANTILES" if has_q else "MEAN_STD"}
    contract.hints["mode_source"] = (
        "inferred: OpenVLA normalizes actions to bounds q01/q99 (mask keeps the gripper raw)"
        if has_q
        else "inferred: mean/std are the only stats"
    )
    contract.inferred = False
    apply_mode_option(contract, options)
    return contract


def read_card(target: Path, options: dict[str, Any]) -> Contract:
    """A user-written contract card: expectations plus where they come from; every row is inferred."""
    card = read_yaml(target, "a contract card")
    if not isinstance(card, dict):
        raise InputError(f"{target}: a contract card must be a mapping", path=target, field="<root>")
    source = require(card, "source", target, "where these expectations come from (a repo, doc or person)")
    contract = Contract("A", "contract_card", str(target), inferred=True)
    contract.hints["source"] = source
    contract.norm_map = norm_map_of(card.get("normalization_mapping"), target, "normalization_mapping")
    raw = require(card, "features", target, "features with type, shape and optional names")
    if not isinstance(raw or {}, dict):
        raise InputError(f"{target}: field 'features' must be a mapping", path=target, field="features")
    for key, spec in (raw or {}).items():
        ftype = str(require(spec, "type", target, "STATE | ACTION | VISUAL | ENV", f"features.{key}"))
        shape = spec.get("shape")
        role = ROLE_OF_TYPE.get(ftype, "other")
        dims = declared_shape(shape, target, f"features.{key}.shape") if shape is not None else None
        contract.features[key] = Feature(key, role, dims or None, spec.get("names"))
        if "stats" in spec:
            contract.stats[key] = stats_block(spec["stats"], target, f"features.{key}.stats")
    for key in ("action_mode", "image_order", "image_scale", "channel_order", "units"):
        if key in card:
            contract.hints[key] = card[key]
    if not isinstance(card.get("stats") or {}, dict):
        raise InputError(f"{target}: field 'stats' must be a mapping", path=target, field="stats")
    for key, value in (card.get("stats") or {}).items():
        contract.stats[key] = stats_block(value, target, f"stats.{key}")
    return contract
