"""The frames one training sample reads, per LeRobot policy type (issue 31, item 4): restated from
LeRobot 0.4.4's `*_delta_indices` properties and read off each pack folder's own config.json; where
`lerobot` is installed, equal to what the package itself computes for every folder of the pack."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from pipeline.readers import read_model
from pipeline.readers.lerobot_windows import DELTAS, delta_indices, span

PACK = "lerobot-0.4.4"


def configs(real_data: Path) -> dict[str, dict]:
    found = {
        p.parent.parent.name: p for p in sorted((real_data / PACK).rglob("pretrained_model/config.json"))
    }
    if not found:
        pytest.skip(f"no policy folders under {real_data / PACK}")
    return {name: json.loads(path.read_text()) for name, path in found.items()}


def test_every_pack_type_has_its_rule_and_the_spans_follow_lerobot(real_data: Path) -> None:
    found = configs(real_data)
    assert {c["type"] for c in found.values()} <= set(DELTAS)
    spans = {name: span(delta_indices(c)) for name, c in found.items()}
    diffusion, tdmpc, act = found["diffusion"], found["tdmpc"], found["act"]
    assert diffusion["n_obs_steps"] > 1  # the case the generic rule got wrong: one frame too many
    assert spans["diffusion"] == diffusion["horizon"]
    assert spans["tdmpc"] == tdmpc["horizon"] + 1  # horizon + 1 observations
    assert spans["act"] == act["chunk_size"] and spans["sac"] == 1
    vqbet = found["vqbet"]
    want = vqbet["n_action_pred_token"] + vqbet["action_chunk_size"] - 1 + vqbet["n_obs_steps"] - 1
    assert spans["vqbet"] == want


def test_the_model_reader_hands_them_to_the_contract(real_data: Path) -> None:
    contract = read_model(real_data / PACK / "diffusion" / "pretrained_model")
    deltas = contract.hints["delta_indices"]
    n, horizon = (contract.hints["window"][k] for k in ("n_obs_steps", "horizon"))
    assert deltas == {"observation": list(range(1 - n, 1)), "action": list(range(1 - n, 1 - n + horizon))}


def test_an_unknown_type_or_a_missing_field_falls_back() -> None:
    assert delta_indices({"type": "my_policy", "chunk_size": 8}) is None
    assert delta_indices({"type": "act"}) is None  # no chunk_size
    assert delta_indices({"type": "act", "chunk_size": True}) is None
    assert delta_indices({"type": "sac"}) == {}


@pytest.mark.lerobot
@pytest.mark.skipif(
    importlib.util.find_spec("lerobot") is None,
    reason="optional package 'lerobot' not installed (scripts/test_lerobot.sh builds a venv with it)",
)
def test_equal_to_what_lerobot_computes_for_every_pack_folder(real_data: Path) -> None:
    import lerobot.policies.factory  # noqa: F401  # registers every policy type's config class
    from lerobot.configs.policies import PreTrainedConfig

    for name, config in configs(real_data).items():
        folder = next(p.parent for p in (real_data / PACK).rglob(f"{name}/pretrained_model/config.json"))
        theirs = PreTrainedConfig.from_pretrained(str(folder), local_files_only=True)
        want = {
            kind: list(value)
            for kind in ("observation", "action", "reward")
            if (value := getattr(theirs, f"{kind}_delta_indices")) is not None
        }
        assert delta_indices(config) == want, name


def _planted(real_data: Path, tmp_path: Path, name: str, **fields: object) -> Path:
    """A copy of a pack folder whose config.json has `fields` set (the rest as LeRobot wrote it)."""
    folder = tmp_path / name
    shutil.copytree(real_data / PACK / name / "pretrained_model", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | fields))
    return folder


@pytest.mark.parametrize(
    ("name", "fields", "frames", "said"),
    [
        ("act", {"chunk_size": 10**12}, 10**12, "action [0..999999999999] (1000000000000 frames)"),
        ("diffusion", {"n_obs_steps": 10**12, "horizon": 16}, 10**12, "observation [-999999999999..0]"),
        ("vqbet", {"n_obs_steps": 3 * 10**18}, 3 * 10**18 + 6, "observation [-2999999999999999999..0]"),
    ],
)
def test_a_huge_window_is_computed_not_listed(
    real_data: Path, tmp_path: Path, name: str, fields: dict, frames: int, said: str
) -> None:
    """A window of 10**12 frames was a MemoryError building its index list; it is arithmetic now: the
    episodes are all too short for it, and the row can say so. (Sizes past what a list can preallocate:
    on the code before they fail at once; 10**9 filled ~36 GB first.)"""
    from pipeline.stages.contract.health.episodes import sample_window
    from tests.malformed.triple import deadline

    with deadline():
        contract = read_model(_planted(real_data, tmp_path, name, **fields))
        need, rule = sample_window(contract.hints)
    assert need == frames and said in rule, (need, rule)
    json.dumps(contract.hints["delta_indices"])  # the row's evidence stays JSON, and small
    assert len(json.dumps(contract.hints["delta_indices"])) < 1000


def test_a_hostile_value_is_named_in_a_short_message(tmp_path: Path) -> None:
    """A `type` of a million entries or a window field of a 5,000-digit string: one line naming the
    field, its value cut to a few hundred characters (the message lands in a row and a console)."""
    from pipeline.errors import InputError
    from pipeline.readers.lerobot_windows import checked_config

    for field, value in (("type", ["act"] * 10**6), ("chunk_size", "9" * 5000)):
        with pytest.raises(InputError) as info:
            checked_config({"type": "act", field: value}, tmp_path / "config.json")
        assert info.value.field == field and len(str(info.value)) < 600, len(str(info.value))
        assert "config.json" in str(info.value) and "\n" not in str(info.value)
