"""The finetune contract as a user launches it (`launcher=local`): a base whose input_features the dataset
cannot fill after the rename map blocks with one hard row naming the feature and both specs, a matching
base clears, a training config with no base (`--policy.type=act`) is judged against the dataset with the
base's rows skipped, and a dataset alone is a check of its own. The `stage=contract` launches run the
stage and the gate's merge in this process (tests/stages/contract/in_process.py): what is tested is the
contract's rows and the gate they make, not the launch; `stage=full` with a dataset alone launches."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import DemoCache, gate_of, run_dir_of
from tests.in_process_launch import launch_here
from tests.stages.contract.helpers import copy_with, edit_stats
from tests.stages.contract.in_process import contract_run
from tests.stages.contract.lerobot_pack import policy_folder


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_cache: DemoCache) -> Path:
    """The session's default demo (checkpoint, dataset, training config) copied where a user keeps it."""
    return demo_cache.seed(tmp_path_factory.mktemp("finetune"))


def _training(demo: Path, out: Path, **extra: object) -> Path:
    """The demo's training config pointing at the demo base, plus `extra` top-level fields."""
    data = yaml.safe_load((demo / "training.yaml").read_text())
    data["policy"]["pretrained_path"] = str(demo / "model")
    data["dataset"]["root"] = str(demo / "dataset")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "training.yaml"
    path.write_text(yaml.safe_dump({**data, **extra}))
    return path


def _contract_run(cwd: Path, *overrides: str) -> tuple[int, dict, dict[str, dict]]:
    return contract_run(cwd, *overrides)


def _blocking(checks: dict[str, dict]) -> dict[str, dict]:
    return {
        k: c
        for k, c in checks.items()
        if c["verdict"] == "error" or (c["verdict"] == "mismatch" and c["severity"] == "hard")
    }


def widen_state(dataset: Path, out: Path) -> Path:
    """A copy of a LeRobot dataset whose observation.state has one dim more (another embodiment's
    recording): data, info.json's feature and meta/stats.json all say 12 where the base was built on 11."""
    copy_with(dataset, out, "observation.state", lambda v: np.concatenate([v, 0.5 * v[:, :1]], axis=1))
    info_path = out / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    feature = info["features"]["observation.state"]
    width = int(feature["shape"][0])
    feature["shape"] = [width + 1]
    if isinstance(feature.get("names"), list):
        feature["names"] = [*feature["names"], "extra.pos"]
    info_path.write_text(json.dumps(info, indent=2))

    def add_dim(stats: dict) -> None:
        for values in stats["observation.state"].values():
            if isinstance(values, list) and len(values) == width:
                values.append(values[0])

    edit_stats(out, add_dim)
    return out


def test_rename_onto_a_camera_the_base_lacks_blocks(demo: Path, tmp_path: Path) -> None:
    rename = {"observation.images.front": "observation.images.camera1"}
    training = _training(demo, tmp_path / "cfg", rename_map=rename)
    code, gate, checks = _contract_run(
        tmp_path / "run",
        f"model.path={demo / 'model'}",
        f"dataset.path={demo / 'dataset'}",
        f"training.path={training}",
    )
    assert code == 3 and gate["gate"] == "blocked"
    row = checks["contract.layout.key:observation.images.front"]
    assert (row["verdict"], row["severity"]) == ("mismatch", "hard")
    assert "VISUAL (3, 64, 64)" in row["message"]  # the base's spec
    assert "'observation.images.front' VISUAL (3, 64, 64)" in row["message"]  # the dataset's camera, renamed
    assert "observation.images.camera1" in row["message"] and row["evidence"]["rename_map"] == rename
    assert row["evidence"]["renamed_away"] == rename and row["actual"] is None
    assert checks["contract.layout.key:observation.images.wrist"]["verdict"] == "match"
    assert "contract.frames.cameras" not in checks  # the camera's one row is layout.key
    assert any("layout.key:observation.images.front" in r for r in gate["reasons"])


def test_a_state_wider_than_the_base_blocks(demo: Path, tmp_path: Path) -> None:
    wide = widen_state(demo / "dataset", tmp_path / "wide")
    code, gate, checks = _contract_run(
        tmp_path / "run",
        f"model.path={demo / 'model'}",
        f"dataset.path={wide}",
        f"training.path={_training(demo, tmp_path / 'cfg')}",
    )
    assert code == 3 and gate["gate"] == "blocked"
    shape = checks["contract.layout.shape:observation.state"]
    assert (shape["verdict"], shape["severity"], shape["expected"], shape["actual"]) == (
        "mismatch",
        "hard",
        11,
        12,
    )
    assert "STATE (11,)" in shape["message"] and "'observation.state' STATE (12,)" in shape["message"]
    assert shape["evidence"]["A"] == "STATE (11,)"
    assert not [k for k, c in checks.items() if c["verdict"] == "error"]  # every check copes with the width
    stats = checks["contract.normalization.stats:observation.state"]  # the base's normalizer cannot be filled
    assert (stats["verdict"], stats["severity"]) == ("mismatch", "hard")
    assert "width [12]" in stats["message"] and "STATE (11,)" in stats["message"]
    assert stats["evidence"]["widths"]["q01"] == 12


def test_a_base_whose_inputs_match_is_clear(demo: Path, tmp_path: Path) -> None:
    code, gate, checks = _contract_run(
        tmp_path / "run",
        f"model.path={demo / 'model'}",
        f"dataset.path={demo / 'dataset'}",
        f"training.path={_training(demo, tmp_path / 'cfg')}",
    )
    assert code == 0 and gate["gate"] == "clear", gate["reasons"]
    assert _blocking(checks) == {}
    for camera in ("observation.images.front", "observation.images.wrist"):
        row = checks[f"contract.layout.key:{camera}"]
        assert row["verdict"] == "match" and row["expected"] == row["actual"] == [3, 64, 64]
    assert "contract.inputs" not in checks  # every source given: nothing skipped


def test_a_fresh_act_policy_is_judged_against_the_dataset(
    demo: Path, real_data: Path, tmp_path: Path
) -> None:
    """lerobot-train's own train_config.json of a `--policy.type=act` run (no pretrained_path)."""
    training = policy_folder(real_data, "act_trained") / "train_config.json"
    assert json.loads(training.read_text())["policy"]["pretrained_path"] is None
    code, gate, checks = _contract_run(
        tmp_path / "run", f"dataset.path={demo / 'dataset'}", f"training.path={training}"
    )
    assert code == 0 and gate["gate"] == "clear", gate["reasons"]
    skipped = checks["contract.inputs"]
    assert (skipped["verdict"], skipped["feature"]) == ("skipped", "model.path")
    assert (
        "fresh act policy" in skipped["message"]
        and "normalization.mode" in skipped["evidence"]["needs_model"]
    )
    assert not any(k.startswith(("contract.reload.", "contract.normalization.mode")) for k in checks)
    # B against C: keys and widths, the mapping's stats, ACT's window (chunk_size 100) against the episodes
    assert checks["contract.layout.shape:observation.state"]["verdict"] == "match"
    assert checks["contract.normalization.stats:observation.state"]["configured"] == "MEAN_STD"
    short = checks["contract.health.episodes.short"]
    assert short["verdict"] == "match" and short["expected"] == ">= 100 frames"


def test_a_dataset_alone_is_a_check(demo: Path, tmp_path: Path) -> None:
    code, gate, checks = _contract_run(tmp_path / "run", f"dataset.path={demo / 'dataset'}")
    assert code == 0 and gate["gate"] == "clear", gate["reasons"]
    skipped = checks["contract.inputs"]
    assert skipped["verdict"] == "skipped" and skipped["evidence"]["set"] == ["model.path", "training.path"]
    assert "normalization.mode" in skipped["evidence"]["needs_model"]
    assert "health.episodes.short" in skipped["evidence"]["needs_training"]
    found = {k.split(":")[0] for k in checks}
    # health, stats against meta/stats.json, video integrity, alignment, what the metadata claims
    assert {
        "contract.health.episodes.duplicates",
        "contract.normalization.stale",
        "contract.frames.health",
        "contract.frames.lag",
        "contract.layout.frames",
    } <= found
    assert not [k for k in checks if k.startswith(("contract.layout.key", "contract.normalization.mode"))]


def test_a_dataset_alone_with_a_duplicated_episode_blocks(tmp_path: Path, real_data: Path) -> None:
    from tests.stages.contract.health_faults import planted

    dataset, expected = planted("v3.0", "duplicate", tmp_path / "dup")
    code, gate, checks = _contract_run(tmp_path / "run", f"dataset.path={dataset}")
    assert code == 3 and gate["gate"] == "blocked"
    row = checks["contract.health.episodes.duplicates"]
    assert (row["verdict"], row["severity"]) == ("mismatch", "hard")
    assert checks["contract.inputs"]["verdict"] == "skipped"


def test_stage_full_with_a_dataset_alone_runs_and_skips_what_needs_more(demo: Path, tmp_path: Path) -> None:
    cwd = tmp_path / "run"
    cwd.mkdir()
    proc = launch_here(
        cwd, "launcher=local", "launcher.poll_s=0.2", "stage=full", f"dataset.path={demo / 'dataset'}"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gate = gate_of(run_dir_of(cwd, proc))
    by_stage = {s["stage"]: s for s in gate["stages"]}
    assert by_stage["contract"]["status"] in ("pass", "warn") and gate["gate"] == "clear"
    for name in ("teacher_forced", "determinism", "render_cache"):
        assert by_stage[name]["status"] == "skipped" and not by_stage[name]["checks"], name
        assert by_stage[name]["provenance"]["needs"], name
    assert gate["sources"]["model"].get("path") in (None, "")  # the demo filled nothing


def test_a_rename_that_sends_the_state_elsewhere_leaves_the_base_state_unfed(demo: Path) -> None:
    """LeRobot renames before the normalizer: the dataset's observation.state renamed onto a key the base
    lacks no longer provides the base's observation.state, though the names still agree."""
    from pipeline.readers import read_dataset, read_model
    from pipeline.readers.base import Contract
    from pipeline.stages.contract import reconcile
    from tests.stages.contract.helpers import OPTIONS, STAGE_CFG

    b = Contract("B", "lerobot_train_config", "train_config.json")
    b.hints["rename_map"] = {"observation.state": "observation.state_ee"}
    checks, _ = reconcile(read_model(demo / "model"), b, read_dataset(demo / "dataset", OPTIONS), STAGE_CFG)
    row = next(c for c in checks if c.id == "contract.layout.key:observation.state")
    assert row.blocking and row.evidence["renamed_away"] == b.hints["rename_map"]
    assert "observation.state_ee" in row.message and "rename_map in force" in row.message


def test_a_renamed_input_the_dataset_stats_do_not_name_trains_unnormalized(demo: Path) -> None:
    """lerobot-train normalizes with the dataset's stats keyed as the dataset names them, after the
    rename map renamed the inputs: a model input fed from another dataset key has no stats under its own
    name and passes through unnormalized. The contract says so without the determinism reload (hard
    where the mode reads stats), and says IDENTITY loses nothing."""
    from dataclasses import replace

    from pipeline.readers import read_dataset, read_model
    from pipeline.readers.base import Contract
    from pipeline.stages.contract import reconcile
    from tests.stages.contract.helpers import OPTIONS, STAGE_CFG

    a, c = read_model(demo / "model"), read_dataset(demo / "dataset", OPTIONS)
    b = Contract("B", "lerobot_train_config", "train_config.json")
    b.features = {k: f for k, f in a.features.items() if k != "observation.state"}
    b.features["observation.joints"] = replace(a.features["observation.state"], key="observation.joints")
    b.hints["rename_map"] = {"observation.state": "observation.joints"}
    checks, _ = reconcile(a, b, c, STAGE_CFG)
    row = next(ch for ch in checks if ch.id == "contract.normalization.renamed:observation.joints")
    assert row.blocking and row.evidence["dataset_key"] == "observation.state"
    assert "unnormalized" in row.message and "held under the dataset's name observation.state" in row.message
    b.norm_map = {**a.norm_map, "STATE": "IDENTITY"}
    checks, _ = reconcile(a, b, c, STAGE_CFG)
    row = next(ch for ch in checks if ch.id == "contract.normalization.renamed:observation.joints")
    assert row.verdict == "match" and "IDENTITY reads no stats" in row.message
    plain = Contract("B", "lerobot_train_config", "train_config.json")
    checks, _ = reconcile(a, plain, c, STAGE_CFG)
    assert not [ch for ch in checks if ch.id.startswith("contract.normalization.renamed:")]
