"""(A) readers on the real checkpoint-contract files; every asserted value was checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.errors import InputError
from pipeline.readers.model import read_model, read_processor
from pipeline.readers.training import read_training

GOLDEN = ("huggingface__lerobot", "tests", "artifacts", "processors", "golden")


def test_lerobot_act_checkpoint_without_state_files(real_data: Path) -> None:
    a = read_model(real_data / "Bestpart-Irene__RoboPour")
    assert a.kind == "lerobot"
    assert {k: (f.role, f.shape) for k, f in a.features.items()} == {
        "observation.state": ("state", (6,)),
        "observation.images.top": ("image", (3, 720, 1280)),
        "observation.images.wrist": ("image", (3, 1080, 1920)),
        "action": ("action", (6,)),
    }
    assert a.norm_map == {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    pre = a.hints["pre"]["normalizers"][0]
    assert (
        pre["index"] == 3
        and pre["state_file"] == "policy_preprocessor_step_3_normalizer_processor.safetensors"
    )
    assert pre["eps"] == 1e-08 and pre["stats"] is None  # the LFS-only safetensors were not copied
    post = a.hints["post"]["normalizers"][0]
    assert post["registry_name"] == "unnormalizer_processor" and list(post["features"]) == ["action"]
    assert a.stats == {}


def test_lerobot_libero_act_has_no_postprocessor(real_data: Path) -> None:
    a = read_model(real_data / "miraitowa-gif__libero-act-artifacts")
    assert [k for k, f in a.features.items() if f.role == "image"] == [
        "observation.images.image",
        "observation.images.image2",
    ]
    assert a.features["observation.state"].shape == (8,) and a.features["action"].shape == (7,)
    assert "post" not in a.hints and any("postprocessor" in n for n in a.notes)


@pytest.mark.parametrize(
    "policy, pre_map, post_map",
    [
        ("act", {"ACTION": "MEAN_STD", "STATE": "MEAN_STD", "VISUAL": "MEAN_STD"}, None),
        ("diffusion", {"ACTION": "MIN_MAX", "STATE": "MIN_MAX", "VISUAL": "MEAN_STD"}, None),
        ("pi05", {"ACTION": "QUANTILES", "STATE": "QUANTILES", "VISUAL": "IDENTITY"}, None),
        ("molmoact2", {"ACTION": "QUANTILES", "STATE": "QUANTILES", "VISUAL": "IDENTITY"}, None),
        (
            "lingbot_va",
            {"ACTION": "IDENTITY", "STATE": "IDENTITY", "VISUAL": "IDENTITY"},
            {"ACTION": "QUANTILES"},
        ),
        ("vla_jepa", {"ACTION": "MIN_MAX", "STATE": "MEAN_STD", "VISUAL": "IDENTITY"}, None),
    ],
)
def test_golden_processors(real_data: Path, policy: str, pre_map: dict, post_map: dict | None) -> None:
    folder = real_data.joinpath(*GOLDEN)
    pre = read_processor(folder / f"{policy}_pre.json")["normalizers"]
    post = read_processor(folder / f"{policy}_post.json")["normalizers"]
    assert len(pre) == 1 and pre[0]["norm_map"] == pre_map
    assert post[0]["norm_map"] == (post_map or pre_map)  # lingbot_va: pre and post disagree in the file
    assert "unnormalizer" in post[0]["registry_name"]


def test_every_golden_processor_parses(real_data: Path) -> None:
    folder = real_data.joinpath(*GOLDEN)
    files = sorted(folder.glob("*_p*.json"))
    assert len(files) == 38
    without = [f.name for f in files if not read_processor(f)["normalizers"]]
    assert without == []
    # groot normalizes inside its own steps (min-max by their normalize_min_max flag)
    own = {f.name: [s["own"] for s in read_processor(f)["normalizers"]] for f in files if "groot" in f.name}
    assert {name: [o and o["mode"] for o in steps] for name, steps in own.items()} == {
        "groot_post.json": ["MIN_MAX"],
        "groot_pre.json": ["MIN_MAX"],
    }
    a = read_model(folder / "pi05_pre.json")
    assert a.kind == "lerobot_processor" and a.norm_map["STATE"] == "QUANTILES"
    assert json.loads((folder / "manifest.json").read_text())["covered"][0] == "act"


def test_openpi_norm_stats_and_near_match_pair(real_data: Path) -> None:
    zwbx = read_model(
        real_data / "zwbx__openpi/assets/pi05_libero/physical-intelligence/libero/norm_stats.json"
    )
    yan = read_model(
        real_data / "Yaneosian__pi05-lora-finetune-libero/assets/physical-intelligence/libero/norm_stats.json"
    )
    assert zwbx.kind == "openpi" and zwbx.norm_map == {"STATE": "QUANTILES", "ACTION": "QUANTILES"}
    assert "pi05_libero" in zwbx.hints["mode_source"]
    assert zwbx.features["state"].shape == (8,) and zwbx.features["actions"].role == "action"
    assert zwbx.stats["state"]["q99"][0] == pytest.approx(0.13532010269463068)
    assert yan.stats["state"]["q99"][0] == pytest.approx(0.13545873028039934)
    assert yan.norm_map == {}  # its path names no pi0/pi05 config: the mode is not encoded
    diff = np.abs(zwbx.stats["state"]["q99"] - yan.stats["state"]["q99"]).max()
    assert 2e-4 < diff < 3e-4
    bridge = read_model(real_data / "zwbx__openpi/assets/pi05_simpler/lerobot-pi0-bridge/norm_stats.json")
    assert bridge.features["state"].shape == (8,) and bridge.features["actions"].shape == (7,)


@pytest.mark.parametrize(
    "path",
    [
        "littlespray__b1k-eval-utils/norm_stats.json",
        "littlespray__b1k-eval-utils/assets/behavior-1k/2025-challenge-demos/norm_stats.json",
    ],
)
def test_openpi_padded_32_dims(real_data: Path, path: str) -> None:
    a = read_model(real_data / path)
    assert a.features["state"].shape == (32,) and a.norm_map == {}
    assert np.where(a.stats["state"]["std"] == 0)[0].tolist() == list(range(23, 32))
    assert np.where(a.stats["actions"]["std"] == 0)[0].tolist() == [6, *range(23, 32)]


def test_openvla_statistics(real_data: Path) -> None:
    with pytest.raises(InputError, match="28 datasets .* set model.stats_key"):
        read_model(real_data / "yihann-wang__nora/norm_stats.json")
    nora = read_model(real_data / "yihann-wang__nora/norm_stats.json", {"stats_key": "bridge_orig"})
    assert nora.hints["action_mask"] == [True] * 6 + [False]
    assert nora.hints["num_transitions"] == 2135463
    assert nora.norm_map == {"ACTION": "QUANTILES"} and nora.features["proprio"].role == "state"
    vgm = read_model(real_data / "litwellchi__VgmACT/dataset_statistics.json", {"stats_key": "rlbench"})
    assert vgm.stats["action"]["mean"][6] == pytest.approx(0.4366486668586731)
    assert "action_mask" not in vgm.hints and vgm.hints["num_transitions"] == 3891
    aloha = read_model(real_data / "guanning03__robot-transformer/dataset_statistics.json")
    assert aloha.features["qpos"].shape == (14,) and aloha.norm_map == {"ACTION": "MEAN_STD"}
    assert aloha.hints["num_transitions"] == 1272355 and aloha.hints["num_trajectories"] == 2752


@pytest.mark.parametrize(
    "name, dim", [("pusht", 2), ("xarm_lift_medium", 4), ("aloha_sim_insertion_human", 14)]
)
def test_lerobot_v1_stats(real_data: Path, name: str, dim: int) -> None:
    a = read_model(real_data / "huggingface__lerobot/tests/data" / name / "meta_data" / "stats.safetensors")
    assert a.kind == "lerobot_v1_stats"
    assert a.features["observation.state"].shape == (dim,) and a.features["action"].shape == (dim,)
    assert sorted(a.stats["action"]) == ["max", "mean", "min", "std"]


def test_contract_card_is_inferred(tmp_path: Path) -> None:
    card = {
        "source": "inferred from the base's training repo README",
        "normalization_mapping": {"STATE": "MEAN_STD"},
        "features": {
            "observation.state": {
                "type": "STATE",
                "shape": [2],
                "names": ["x", "y"],
                "stats": {"mean": [0, 1], "std": [1, 2]},
            }
        },
        "action_mode": "delta",
    }
    (tmp_path / "contract.yaml").write_text(yaml.safe_dump(card))
    a = read_model(tmp_path)
    assert a.inferred and a.kind == "contract_card" and a.hints["action_mode"] == "delta"
    assert a.features["observation.state"].names == ["x", "y"]
    (tmp_path / "contract.yaml").write_text(yaml.safe_dump({"features": {}}))
    with pytest.raises(InputError, match="missing field 'source'"):
        read_model(tmp_path)


def test_model_path_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        read_model(tmp_path / "nope")
    with pytest.raises(InputError, match="no base-checkpoint contract found"):
        read_model(tmp_path)
    (tmp_path / "config.json").write_text('{"input_features": {"observation.state": {"type": "STATE"}}}')
    with pytest.raises(InputError, match=r"missing field 'input_features.observation.state.shape'"):
        read_model(tmp_path)


def test_train_config_json(real_data: Path) -> None:
    b = read_training(real_data / "Bestpart-Irene__RoboPour/train_config.json")
    assert b.kind == "lerobot_train_config"
    assert b.norm_map == {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    assert list(b.features) == [
        "observation.state",
        "observation.images.top",
        "observation.images.wrist",
        "action",
    ]
    assert b.hints["dataset"]["repo_id"] == "ganatrask/rec2" and b.hints["rename_map"] == {}


def test_yaml_training_config(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": ["_self_"],
                "policy": {"normalization_mapping": {"STATE": "mean_std"}},
                "features": {"observation.state": {"names": ["a", "b"]}},
                "action_mode": "absolute",
                "camera_order": ["top", "wrist"],
            }
        )
    )
    b = read_training(path)
    assert b.norm_map == {"STATE": "MEAN_STD"} and b.hints["action_mode"] == "absolute"
    assert b.hints["image_order"] == ["top", "wrist"] and b.features["observation.state"].names == ["a", "b"]
    assert any("defaults" in n for n in b.notes)
    path.write_text("policy: 3\n")
    with pytest.raises(InputError, match="field 'policy' must be a mapping"):
        read_training(path)
