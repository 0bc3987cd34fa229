"""A, B and C against D: the rows `contract.deploy.<place>.<check>:<feature>`.

The robot line against a real so101_follower dataset (SamueleSandrini/record-test: 480x640 cameras
`front` and `top`, 30 fps, six named joints); the env line against a LeRobot finetune's sources built as
the readers return them (a SmolVLA-style base reading `camera1`/`camera2`, a pi0.5-style base reading
three cameras), with lerobot's own env config where it is importable and the table elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.readers import read_dataset
from pipeline.readers.base import Contract, DatasetContract, Feature
from pipeline.stages.contract import scan_options, sides
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.contract.deploy import deploy_rows
from pipeline.stages.contract.rows import Sources
from tests.conftest import gate_of, run_dir_of
from tests.in_process_launch import launch_here

RECORD_TEST = "SamueleSandrini__record-test"
ROBOT = ["lerobot-record", "--robot.type=so101_follower", "--policy.path=outputs/ckpt"]


def cams(
    front: str = "width: 640, height: 480, fps: 30", top: str = "width: 640, height: 480, fps: 30"
) -> str:
    return f"--robot.cameras={{front: {{type: opencv, {front}}}, top: {{type: opencv, {top}}}}}"


@pytest.fixture(scope="module")
def so101(real_data: Path) -> Sources:
    folder = real_data / RECORD_TEST
    if not (folder / "meta" / "info.json").is_file():
        pytest.skip(f"real data missing: {folder}")
    c = read_dataset(str(folder), scan_options(ContractConfig()))
    a, b = sides.dataset_alone(c)
    return Sources(a, b, c, ContractConfig())


def rows(src: Sources, deploy: list[str] | None = None, training: list[str] | None = None):
    cfg = OmegaConf.create({"training": {"command": training}, "deploy": {"command": deploy}})
    return {ch.id: ch for ch in deploy_rows(cfg, src)}


def blocking(found) -> dict:
    return {k: ch for k, ch in found.items() if ch.blocking}


def test_no_d_no_row(so101: Sources):
    assert rows(so101) == {}


def test_a_matching_record_line_is_clear_and_fills_the_d_column(so101: Sources):
    found = rows(so101, [*ROBOT, cams()])
    assert not blocking(found) and not [ch for ch in found.values() if ch.verdict != "match"]
    front = found["contract.deploy.robot.input:observation.images.front"]
    assert (front.actual, front.deployed) == ("480x640x3", "480x640x3")
    assert found["contract.deploy.robot.names:observation.state"].verdict == "match"
    assert found["contract.deploy.robot.action:action"].verdict == "match"  # 6 motors, as trained
    assert found["contract.deploy.robot.names:action"].verdict == "match"
    assert "so101_follower" in found["contract.deploy.robot.source:so101_follower"].message


def test_cameras_at_another_resolution_block_naming_both_sizes(so101: Sources):
    found = blocking(rows(so101, [*ROBOT, cams(front="width: 1280, height: 720, fps: 30")]))
    assert list(found) == ["contract.deploy.robot.input:observation.images.front"]
    message = found["contract.deploy.robot.input:observation.images.front"].message
    assert "480x640x3" in message and "720x1280x3" in message


def test_another_rate_blocks_naming_both_rates_and_the_chunk_timing(so101: Sources):
    found = blocking(rows(so101, [*ROBOT, cams(top="width: 640, height: 480, fps: 15")]))
    assert list(found) == ["contract.deploy.robot.fps:observation.images.top"]
    assert "30 fps" in found["contract.deploy.robot.fps:observation.images.top"].message
    assert "15 fps" in found["contract.deploy.robot.fps:observation.images.top"].message
    so101.b.hints["window"] = {"n_action_steps": 30}
    try:
        control = rows(so101, [*ROBOT, cams(), "--dataset.fps=15"])["contract.deploy.robot.fps:control"]
    finally:
        so101.b.hints.pop("window")
    assert control.blocking and (control.actual, control.deployed) == (30.0, 15.0)
    assert "1.00 s in training and 2.00 s at D" in control.message


def test_a_rename_map_that_sends_one_camera_to_the_others_input_blocks(so101: Sources):
    swap = '--dataset.rename_map={"observation.images.front": "observation.images.top", '
    swap += '"observation.images.top": "observation.images.front"}'
    found = blocking(rows(so101, [*ROBOT, cams(), swap]))
    assert set(found) == {
        "contract.deploy.robot.camera:observation.images.front",
        "contract.deploy.robot.camera:observation.images.top",
    }
    assert (
        "'observation.images.top' (top camera)"
        in found["contract.deploy.robot.camera:observation.images.front"].message
    )


def test_an_unknown_robot_type_is_soft_and_an_unreadable_line_one_row(so101: Sources):
    found = rows(so101, ["lerobot-record", "--robot.type=my_own_arm", cams()])
    for key in ("input:observation.state", "action:action"):  # D cannot tell: soft, never a guess
        row = found[f"contract.deploy.robot.{key}"]
        assert row.verdict == "mismatch" and row.severity == "soft" and "my_own_arm" in row.message
    assert not blocking(found)
    (only,) = rows(so101, ["python", "serve.py", "--port=1"]).values()  # not a line lerobot reads
    assert only.id == "contract.deploy.eval.read:?" and only.severity == "soft"
    (only,) = rows(so101, ["lerobot-eval", "--policy.path=x"]).values()  # lerobot-eval itself refuses it
    assert (
        only.id == "contract.deploy.eval.read:?" and only.verdict == "error" and "--env.type" in only.message
    )


# --- an env on the training line: a LeRobot finetune whose sources are built as the readers return them


def image(key: str, h: int = 256, w: int = 256) -> Feature:
    return Feature(key, "image", (3, h, w))


def finetune(policy_cams: list[str], dataset_cams: list[str], rename: dict[str, str], policy: str) -> Sources:
    a = Contract("A", "lerobot", "base")
    a.features = {k: image(k) for k in policy_cams}
    a.features["observation.state"] = Feature("observation.state", "state", (8,))
    a.features["action"] = Feature("action", "action", (7,))
    a.hints["policy_type"] = policy
    b = Contract("B", "lerobot_train_config", "train_config.json", hints={"rename_map": rename})
    b.hints["policy_type"] = policy
    c = DatasetContract("C", "lerobot", "libero")
    c.features = {k: Feature(k, "image", (256, 256, 3)) for k in dataset_cams}
    c.features["observation.state"] = Feature("observation.state", "state", (8,))
    c.features["action"] = Feature("action", "action", (7,))
    c.claimed = {"fps": 10}
    return Sources(a, b, c, ContractConfig())


SMOLVLA = ["observation.images.camera1", "observation.images.camera2"]
DATASET = ["observation.images.image", "observation.images.wrist_image"]
COVERS_DATASET = {DATASET[0]: SMOLVLA[0], DATASET[1]: SMOLVLA[1]}


def train_line(rename: dict[str, str]) -> list[str]:
    import json

    return [
        "lerobot-train",
        "--policy.path=lerobot/smolvla_base",
        "--dataset.repo_id=HuggingFaceVLA/libero",
        "--env.type=libero",
        "--env.task=libero_10",
        "--eval_freq=5000",
        f"--rename_map={json.dumps(rename)}",
    ]


def test_a_rename_map_covering_the_dataset_but_not_the_env_blocks_naming_both_sides():
    src = finetune(SMOLVLA, DATASET, COVERS_DATASET, "smolvla")
    found = blocking(rows(src, training=train_line(COVERS_DATASET)))
    missing = found["contract.deploy.eval_env.input:observation.images.camera2"]
    assert "observation.images.image2" in missing.message and "observation.images.camera2" in missing.message
    assert "contract.deploy.eval_env.cameras:visual" in found  # lerobot's own rule: neither a subset


def test_a_rename_map_covering_both_is_clear():
    both = {**COVERS_DATASET, "observation.images.image2": SMOLVLA[1]}
    src = finetune(SMOLVLA, DATASET, both, "smolvla")
    found = rows(src, training=train_line(both))
    assert not blocking(found)
    # LIBERO renders 360x360 by default, the dataset is 256x256: SmolVLA resizes, the aspect is the same
    assert found["contract.deploy.eval_env.input:observation.images.camera1"].severity == "soft"


PI05 = [
    "observation.images.base_0_rgb",
    "observation.images.left_wrist_0_rgb",
    "observation.images.right_wrist_0_rgb",
]


def test_a_three_camera_base_against_a_two_camera_env_gets_lerobots_rule():
    rename = {"observation.images.image": PI05[0], "observation.images.image2": PI05[1]}
    data_rename = {DATASET[0]: PI05[0], DATASET[1]: PI05[1]}
    src = finetune(PI05, DATASET, {**data_rename, **rename}, "pi05")
    found = rows(src, training=train_line({**data_rename, **rename}))
    assert found["contract.deploy.eval_env.cameras:visual"].verdict == "match"  # a subset: lerobot accepts
    third = found[f"contract.deploy.eval_env.input:{PI05[2]}"]
    assert third.verdict == "mismatch" and third.severity == "soft"  # padded in training and at D alike
    unnamed = rows(finetune(PI05, DATASET, data_rename, "pi05"), training=train_line(data_rename))
    rule = unnamed["contract.deploy.eval_env.cameras:visual"]
    assert rule.blocking and "validate_visual_features_consistency" in rule.message


@pytest.mark.lerobot
def test_the_training_env_is_read_by_lerobots_own_env_config():
    pytest.importorskip(
        "lerobot", reason="lerobot is not installed (scripts/test_lerobot.sh builds its venv)"
    )
    src = finetune(SMOLVLA, DATASET, COVERS_DATASET, "smolvla")
    found = rows(src, training=train_line(COVERS_DATASET))
    source = found["contract.deploy.eval_env.source:libero"]
    assert "lerobot's env config" in source.message
    assert found["contract.deploy.eval_env.input:observation.images.camera2"].blocking
    test_a_rename_map_covering_both_is_clear()  # the same judgments on lerobot's own reading of the env
    test_a_three_camera_base_against_a_two_camera_env_gets_lerobots_rule()


def test_a_d_file_whose_front_key_carries_the_top_cameras_frames_blocks(so101: Sources, tmp_path: Path):
    import json

    frames = {"role": "image", "shape": [3, 480, 640], "fps": 30}
    spec = {
        "kind": "sim",
        "fps": 30,
        "features": {
            "observation.images.front": {**frames, "source": "top"},
            "observation.images.top": {**frames, "source": "front"},
        },
    }
    (tmp_path / "d.json").write_text(json.dumps(spec))
    cfg = OmegaConf.create({"deploy": {"path": str(tmp_path / "d.json")}})
    found = {ch.id: ch for ch in deploy_rows(cfg, so101) if ch.blocking}
    row = found["contract.deploy.env.camera:observation.images.front"]
    assert "carries the top camera's frames" in row.message
    assert "contract.deploy.env.camera:observation.images.top" in found


def test_a_deploy_line_typed_after_its_own_double_dash_is_judged_and_named_in_sources(real_data, tmp_path):
    """As a user types it: the launch splits the deploy line off, keeps it for the fingerprint, the
    contract judges it and the record names it among the sources."""
    folder = real_data / RECORD_TEST
    if not (folder / "meta" / "info.json").is_file():
        pytest.skip(f"real data missing: {folder}")
    line = [*ROBOT, cams(front="width: 1280, height: 720, fps: 30")]
    proc = launch_here(
        tmp_path, "launcher=local", "stage=contract", "~demo", f"dataset.path={folder}", "--", *line
    )
    run_dir = run_dir_of(tmp_path, proc)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    gate = gate_of(run_dir)
    assert gate["sources"]["deploy"] == [{"from": "deploy.command", "line": line}]
    assert any(
        r.startswith("contract.deploy.robot.input:observation.images.front: ") for r in gate["reasons"]
    )
    record = next((tmp_path / "audit_logs").glob("*_audit.md")).read_text()
    assert "- deployed (D): `lerobot-record --robot.type=so101_follower" in record
    assert "| 480x640x3 | 720x1280x3 | mismatch | hard |" in record  # actual (C), deployed (D)


def test_a_rate_or_size_lerobot_refuses_is_one_error_row_never_a_crash(so101: Sources):
    zero_wide = "--robot.cameras={front: {type: opencv, width: 0, height: 480}}"
    for line in ([*ROBOT, cams(), "--dataset.fps=0"], [*ROBOT, zero_wide]):
        (only,) = rows(so101, line).values()
        assert only.verdict == "error" and only.blocking and "lerobot refuses it" in only.message


def test_ten_thousand_cameras_give_a_bounded_record(so101: Sources):
    """Each row names the first cameras and counts the rest; a camera the policy never reads gets no rate
    row of its own: the rows stay a few kB however many cameras a line types."""
    import json

    same = {"type": "opencv", "width": 640, "height": 480, "fps": 30}
    many = {"front": same, "top": same, **{f"cam{i}": {**same, "fps": 15} for i in range(10_000)}}
    found = rows(so101, [*ROBOT, f"--robot.cameras={json.dumps(many)}"])
    size = sum(len(json.dumps(c.to_dict(), default=str)) for c in found.values())
    assert len(found) < 20 and size < 60_000, (len(found), size)
    source = found["contract.deploy.robot.source:so101_follower"]
    assert "and 9980 more" in source.message and source.evidence["features_left_out"] == 10_004 - 64
