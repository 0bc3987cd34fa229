"""The demo build's rollouts and trainings are kept between builds (pipeline/demo/memo.py): a second build
with the same settings, and demo=faulty after the default, make neither again, and what they write is
what a build without the cache writes (bookkeeping that names the folder or the time aside)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.demo import build as build_module
from pipeline.demo import memo
from pipeline.record.runfolder import CONF_DIR
from tests.build_ledger import LEDGER

SMALL = {"seed": 4, "episodes": 3, "steps": 30, "train_steps": 20, "hidden": 16, "cameras": {"size": 16}}
FAULTY = {**yaml.safe_load((CONF_DIR / "demo" / "faulty.yaml").read_text()), **SMALL}
# where a checkpoint was saved and when (the storage layer's sidecars) and the digests over them
BOOKKEEPING = {"model.json", "checkpoints.manifest.jsonl", "demo.json"}


def files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in BOOKKEEPING and p.suffix != ".sha256"
    }


def never(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("made again although the cache holds it")


def test_a_second_build_and_the_faulty_one_reuse_the_rollouts_and_trainings(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PREFLIGHT_CACHE", str(tmp_path / "cache"))
    with LEDGER.allow_rebuild():
        build_module.build(SMALL, tmp_path / "first")
        assert len(list((memo.root() / "demo-policies").iterdir())) == 2  # base and noise_injected
        with monkeypatch.context() as m:
            m.setattr(build_module, "generate_episodes", never)
            m.setattr(build_module, "train_policy", never)
            m.setattr("pipeline.demo.teacher_forced.train_policy", never)
            build_module.build(SMALL, tmp_path / "second")
            build_module.build(FAULTY, tmp_path / "faulty")
        monkeypatch.setenv("PREFLIGHT_CACHE", str(tmp_path / "other_cache"))
        build_module.build(FAULTY, tmp_path / "faulty_uncached")
    assert files(tmp_path / "second") == files(tmp_path / "first")
    assert files(tmp_path / "faulty") == files(tmp_path / "faulty_uncached")
    assert any(name.endswith("model.safetensors") for name in files(tmp_path / "faulty"))


def test_a_damaged_entry_is_made_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PREFLIGHT_CACHE", str(tmp_path / "cache"))
    made = memo.episodes(2, 5, 0, lambda: [{"state": np.full((5, 2), i, np.float32)} for i in range(2)])
    (kept,) = (memo.root() / "demo-episodes").iterdir()
    assert np.array_equal(memo.episodes(2, 5, 0, never)[1]["state"], made[1]["state"])
    kept.write_bytes(b"not an npz")
    again = memo.episodes(2, 5, 0, lambda: made)
    assert again is made and np.load(kept)["1/state"].shape == (5, 2)


@pytest.mark.parametrize("change", [{"seed": 1}, {"steps": 21}, {"hidden": 8}])
def test_a_policy_key_covers_its_settings_and_the_data(change: dict) -> None:
    data = [{"state": np.zeros((4, 2), np.float32)}]
    fit = {"seed": 0, "steps": 20, "hidden": 16}
    assert memo.key("policy", fit, arrays=data) != memo.key("policy", {**fit, **change}, arrays=data)
    shifted = [{"state": np.ones((4, 2), np.float32)}]
    assert memo.key("policy", fit, arrays=data) != memo.key("policy", fit, arrays=shifted)


def test_a_damaged_policy_is_trained_again_and_replaced(tmp_path, monkeypatch) -> None:
    from pipeline.demo.policy import DemoPolicy, default_spec

    monkeypatch.setenv("PREFLIGHT_CACHE", str(tmp_path / "cache"))
    data = [{"state": np.zeros((4, 2), np.float32)}]
    made = DemoPolicy(2, 2, 8)
    made.final_loss = 0.5
    stats = {k: {"mean": np.zeros(2), "std": np.ones(2)} for k in ("observation.state", "action")}
    trained = (made, stats, default_spec(2, 2))
    assert memo.policy(data, {"seed": 0}, lambda: trained) is trained
    (kept,) = (memo.root() / "demo-policies").iterdir()
    assert memo.policy(data, {"seed": 0}, never)[0].final_loss == 0.5
    (kept / "model.safetensors").write_bytes(b"damaged")
    assert memo.policy(data, {"seed": 0}, lambda: trained) is trained
    assert memo.policy(data, {"seed": 0}, never)[0].final_loss == 0.5
