"""Malformed-input cases, part 2: npz, HDF5, safetensors, policy configs, cards, training configs,
openpi stats, waivers, fingerprints, and the NaN/inf rows."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers import read_model
from tests.malformed.triple import (
    BOMB,
    Triple,
    _table,
    cases,
    deep_json,
    deep_yaml,
    fifo,
    folder,
    huge,
    link,
    put,
)


# safetensors (a LeRobot v1 stats.safetensors as the model)
def _st(t: Triple, header: Any = None, raw: bytes | None = None, body: bytes = b"\x00" * 12) -> Any:
    folder_ = t.root / "v1"
    folder_.mkdir(exist_ok=True)
    path = folder_ / "stats.safetensors"
    if raw is None:
        text = header if isinstance(header, (str, bytes)) else json.dumps(header)
        data = text.encode() if isinstance(text, str) else text
        raw = len(data).to_bytes(8, "little") + data + body
    path.write_bytes(raw)
    return lambda: read_model(folder_)


def _tensor(**changes: Any) -> dict[str, Any]:
    return {"action/mean": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12], **changes}}


def _st_case(**kw: Any) -> Callable[[Triple], Any]:
    return lambda t: _st(t, **kw)


def _st_special(make: Callable[[Path], None]) -> Callable[[Triple], Any]:
    def build(t: Triple) -> Any:
        call = _st(t, header=_tensor())
        make(t.root / "v1" / "stats.safetensors")
        return call

    return build


cases(
    "custom",
    "stats.safetensors",
    {
        "safetensors_too_short": (_st_case(raw=b"\x01\x02"), "header"),
        "safetensors_header_length_huge": (_st_case(raw=(2**60).to_bytes(8, "little") + b"{}"), "header"),
        "safetensors_header_not_json": (_st_case(header="{not json"), "header"),
        "safetensors_header_deeply_nested": (_st_case(header=deep_json()), "header"),
        "safetensors_header_list": (_st_case(header=[1, 2]), "header"),
        "safetensors_header_not_utf8": (_st_case(header=b'{"\xff": 1}'), "header"),
        "safetensors_negative_shape": (_st_case(header=_tensor(shape=[-1, -3])), "action/mean.shape"),
        "safetensors_offsets_past_end": (_st_case(header=_tensor(data_offsets=[0, 9999])), "action/mean"),
        "safetensors_unknown_dtype": (_st_case(header=_tensor(dtype="Q7")), "action/mean"),
        "safetensors_shape_does_not_fit": (_st_case(header=_tensor(shape=[5])), "action/mean"),
        "safetensors_tensor_not_object": (_st_case(header={"action/mean": "x"}), "action/mean"),
        "safetensors_fifo": (_st_special(fifo), "stats.safetensors"),
        "safetensors_directory": (_st_special(folder), "stats.safetensors"),
    },
)


# LeRobot policy config.json as the model
POLICY = {
    "type": "act",
    "input_features": {"observation.state": {"type": "STATE", "shape": [3]}},
    "output_features": {"action": {"type": "ACTION", "shape": [3]}},
    "normalization_mapping": {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
}


def _policy(t: Triple, config: Any = None, raw: str | None = None, proc: Any = None) -> Any:
    folder_ = t.root / "policy"
    folder_.mkdir(exist_ok=True)
    put(
        folder_ / "config.json",
        raw if raw is not None else json.dumps(config if config is not None else POLICY),
    )
    if proc is not None:
        put(folder_ / "policy_preprocessor.json", json.dumps(proc))
    return lambda: read_model(folder_)


def _policy_case(**kw: Any) -> Callable[[Triple], Any]:
    return lambda t: _policy(t, **kw)


def _config_dir(t: Triple) -> Any:
    call = _policy(t)
    folder(t.root / "policy" / "config.json")
    put(t.root / "policy" / "policy_preprocessor.json", "{}")
    return call


def _config_fifo(t: Triple) -> Any:
    call = _policy(t)
    fifo(t.root / "policy" / "config.json")
    return call


STEP = {"registry_name": "normalizer_processor", "config": {}}
cases(
    "custom",
    "config.json",
    {
        "config_json_is_directory": (_config_dir, "config.json"),
        "config_json_fifo": (_config_fifo, "config.json"),
        "config_json_invalid": (_policy_case(raw="{"), "line 1"),
        "config_json_deeply_nested": (_policy_case(raw=deep_json()), None),
        "config_input_features_list": (_policy_case(config={"input_features": [1]}), "input_features"),
        "config_shape_six": (
            _policy_case(config={"input_features": {"s": {"type": "STATE", "shape": ["six"]}}}),
            "input_features.s.shape",
        ),
        "config_shape_negative": (
            _policy_case(config={"input_features": {"s": {"type": "STATE", "shape": [-2]}}}),
            "input_features.s.shape",
        ),
        "config_feature_type_missing": (
            _policy_case(config={"input_features": {"s": {"shape": [2]}}}),
            "input_features.s",
        ),
        "config_norm_map_list": (
            _policy_case(config={"input_features": {}, "normalization_mapping": ["MEAN_STD"]}),
            "normalization_mapping",
        ),
        "config_legacy_shape_six": (
            _policy_case(config={"input_shapes": {"observation.state": ["six"]}}),
            "input_shapes",
        ),
        "config_type_a_list": (_policy_case(config={**POLICY, "type": ["act"]}), "type"),
        "config_chunk_size_negative": (_policy_case(config={**POLICY, "chunk_size": -5}), "chunk_size"),
        "config_chunk_size_string": (_policy_case(config={**POLICY, "chunk_size": "100"}), "chunk_size"),
        "config_chunk_size_fraction": (_policy_case(config={**POLICY, "chunk_size": 2.5}), "chunk_size"),
        "config_n_obs_steps_true": (_policy_case(config={**POLICY, "n_obs_steps": True}), "n_obs_steps"),
        "config_horizon_zero": (
            _policy_case(config={**POLICY, "type": "diffusion", "horizon": 0, "n_obs_steps": 2}),
            "horizon",
        ),
    },
)
cases(
    "custom",
    "policy_preprocessor.json",
    {
        "processor_steps_not_list": (_policy_case(proc={"steps": {"a": 1}}), "steps"),
        "processor_state_file_outside": (
            _policy_case(proc={"steps": [{**STEP, "state_file": "../../secret.json"}]}),
            "state_file",
        ),
        "processor_step_not_object": (_policy_case(proc={"steps": [5]}), "steps[0]"),
        "processor_step_config_a_list": (
            _policy_case(proc={"steps": [{**STEP, "config": [{"eps": 1e-8}]}]}),
            "steps[0].config",
        ),
        "processor_state_file_a_number": (
            _policy_case(proc={"steps": [{**STEP, "state_file": 5}]}),
            "steps[0].state_file",
        ),
        "processor_state_file_a_list": (
            _policy_case(proc={"steps": [{**STEP, "state_file": ["a.safetensors"]}]}),
            "steps[0].state_file",
        ),
    },
)

# contract card (YAML) as the model, the training config (YAML), openpi norm_stats.json
CARD_HEAD = "source: test\nnormalization_mapping: {STATE: MEAN_STD}\n"
cases(
    "model",
    "contract.yaml",
    {
        "card_yaml_bomb": (lambda t: put(t.model, CARD_HEAD + BOMB + "features: {}\n"), "contract.yaml"),
        "card_deeply_nested": (lambda t: put(t.model, deep_yaml()), "contract.yaml"),
        "card_invalid_yaml": (lambda t: put(t.model, "a: [\n"), "contract.yaml"),
        "card_not_mapping": (lambda t: put(t.model, "- 1\n- 2\n"), None),
        "card_missing_source": (lambda t: put(t.model, "features: {}\n"), "source"),
        "card_features_list": (lambda t: put(t.model, CARD_HEAD + "features: [1, 2]\n"), "features"),
        "card_feature_not_mapping": (lambda t: put(t.model, CARD_HEAD + "features: {a: 5}\n"), "features.a"),
        "card_shape_six": (
            lambda t: put(t.model, CARD_HEAD + "features: {a: {type: STATE, shape: [six]}}\n"),
            "features.a.shape",
        ),
        "card_shape_negative": (
            lambda t: put(t.model, CARD_HEAD + "features: {a: {type: STATE, shape: [-1]}}\n"),
            "features.a.shape",
        ),
        "card_stats_strings": (
            lambda t: put(t.model, CARD_HEAD + "features: {}\nstats: {a: {mean: [x, y]}}\n"),
            "stats.a.mean",
        ),
        "card_stats_list": (lambda t: put(t.model, CARD_HEAD + "features: {}\nstats: [1]\n"), "stats"),
        "card_bad_date_stays_text": (
            lambda t: put(t.model, "source: 2026-13-45\nfeatures: [1]\n"),
            "features",
        ),
        "card_fifo": (lambda t: fifo(t.model), "contract.yaml"),
        "card_symlink_dev_zero": (lambda t: link(t.model, "/dev/zero"), "contract.yaml"),
    },
)
cases(
    "training",
    "train.yaml",
    {
        "training_yaml_bomb": (lambda t: put(t.training, BOMB + "policy: {}\n"), "train.yaml"),
        "training_deeply_nested": (lambda t: put(t.training, deep_yaml()), "train.yaml"),
        "training_not_mapping": (lambda t: put(t.training, "[1, 2]\n"), None),
        "training_policy_list": (lambda t: put(t.training, "policy: [1]\n"), "policy"),
        "training_norm_map_list": (
            lambda t: put(t.training, "policy: {normalization_mapping: [1]}\n"),
            "normalization_mapping",
        ),
        "training_input_shape_six": (
            lambda t: put(t.training, "policy: {input_features: {s: {type: STATE, shape: [six]}}}\n"),
            "policy.input_features.s.shape",
        ),
        "training_features_shape_negative": (
            lambda t: put(t.training, "features: {s: {shape: [-4]}}\n"),
            "features.s.shape",
        ),
        "training_features_not_mapping": (lambda t: put(t.training, "features: {s: 5}\n"), "features.s"),
        "training_rename_map_list": (lambda t: put(t.training, "rename_map: [a]\n"), "rename_map"),
        "training_fifo": (lambda t: fifo(t.training), "train.yaml"),
        "training_huge": (lambda t: huge(t.training), "train.yaml"),
        "training_not_utf8": (lambda t: put(t.training, b"policy: \xff\xfe\n"), "train.yaml"),
    },
)


def _openpi(text: str) -> Callable[[Triple], Any]:
    def build(t: Triple) -> Any:
        path = t.root / "pi05_x" / "norm_stats.json"
        put(path, text)
        return lambda: read_model(path.parent)

    return build


cases(
    "custom",
    "norm_stats.json",
    {
        "openpi_norm_stats_not_object": (_openpi('{"norm_stats": [1]}'), "norm_stats"),
        "openpi_values_strings": (
            _openpi('{"norm_stats": {"state": {"mean": ["a"]}}}'),
            "norm_stats.state.mean",
        ),
        "openpi_deeply_nested": (_openpi(deep_json()), None),
    },
)

# waivers.yaml (read at launch)
WAIVER = "waivers:\n  - {check: contract.x, justification: ok, who: me, date: %s}\n"
cases(
    "waivers",
    "waivers.yaml",
    {
        "waiver_date_2026_13_45": (
            lambda t: put(t.root / "waivers.yaml", WAIVER % "2026-13-45"),
            "waivers[0].date",
        ),
        "waiver_date_words": (lambda t: put(t.root / "waivers.yaml", WAIVER % "tomorrow"), "waivers[0].date"),
        "waiver_deeply_nested": (lambda t: put(t.root / "waivers.yaml", deep_yaml()), "waivers"),
        "waiver_yaml_bomb": (lambda t: put(t.root / "waivers.yaml", BOMB), "waivers"),
        "waiver_not_a_list": (lambda t: put(t.root / "waivers.yaml", "waivers: {a: 1}\n"), "waivers"),
        "waiver_entry_not_mapping": (lambda t: put(t.root / "waivers.yaml", "waivers: [5]\n"), "waivers"),
        "waiver_missing_who": (
            lambda t: put(
                t.root / "waivers.yaml", "waivers: [{check: a, justification: b, date: 2026-01-01}]\n"
            ),
            "waivers[0].who",
        ),
        "waiver_fifo": (lambda t: fifo(t.root / "waivers.yaml"), "waivers"),
        "waiver_invalid_yaml": (lambda t: put(t.root / "waivers.yaml", "waivers: [\n"), "waivers"),
    },
)


# fingerprints: never hang, never crash on a name; a digest or a named error
def _name_not_utf8(t: Triple) -> None:
    (t.dataset / "data").joinpath(os.fsdecode(b"ep\xff\xfe.parquet")).write_bytes(b"x")


cases(
    "fingerprint",
    "ds",
    {
        "fingerprint_name_not_utf8": (_name_not_utf8, None),
        "fingerprint_fifo_in_dataset": (lambda t: fifo(t.dataset / "data" / "pipe"), None),
        "fingerprint_link_to_dev_zero": (lambda t: link(t.stats, "/dev/zero"), None),
        "fingerprint_link_to_root_of_machine": (lambda t: link(t.dataset / "everything", "/"), None),
        "fingerprint_link_loop": (lambda t: link(t.dataset / "loop", t.dataset / "loop"), None),
        "fingerprint_dangling_link": (lambda t: link(t.dataset / "gone", t.root / "nowhere"), None),
    },
)


# data rows with NaN / inf: the reconciliation's hard row names the feature, the dims and the count
def _nonfinite(value: float, dims: tuple[int, ...]) -> Callable[[Triple], None]:
    def build(t: Triple) -> None:
        table = pq.read_table(t.parquet)
        action = np.array(table.column("action").to_pylist(), dtype=np.float32)
        action[3:7, list(dims)] = value
        _table(t, action=pa.array(action.tolist(), type=pa.list_(pa.float32(), 3)))

    return build


ROW_CASES = {
    "data_nan_rows": (_nonfinite(float("nan"), (1,)), [1], 4),
    "data_inf_rows": (_nonfinite(float("inf"), (0, 2)), [0, 2], 8),
    "data_minus_inf_rows": (_nonfinite(float("-inf"), (2,)), [2], 4),
}
