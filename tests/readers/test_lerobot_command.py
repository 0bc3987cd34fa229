"""Reading a lerobot-train command line as lerobot-train reads it (no lerobot needed)."""

from __future__ import annotations

import pytest

from pipeline.errors import InputError
from pipeline.readers import lerobot_command as lc


def test_both_flag_forms_bare_flags_and_the_module_form_are_read():
    cmd = lc.parse(
        ["python", "-m", "lerobot.scripts.lerobot_train", "--policy.path", "a/b", "--dataset.repo_id=c/d",
         "--rename_map={\"x\": \"y\"}", "--dataset.episodes=[0, 2]", "--save_checkpoint"]
    )  # fmt: skip
    assert cmd is not None and cmd.policy_path == "a/b" and cmd.repo_id == "c/d"
    assert cmd.rename_map == {"x": "y"} and cmd.episodes == [0, 2] and cmd.get("save_checkpoint") == "true"
    assert lc.parse(["/opt/venv/bin/lerobot-train", "--policy.type=act"]).policy_type == "act"


def test_a_command_that_is_not_lerobot_train_is_not_read():
    assert lc.parse(["python", "train.py", "--lr", "3e-4"]) is None
    assert lc.parse(["torchrun", "-m", "my.train"]) is None


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["lerobot-train", "oops"], "'oops'"),
        (["lerobot-train", "--rename_map=[1]"], "--rename_map"),
        (["lerobot-train", "--dataset.episodes=[true]"], "--dataset.episodes"),
    ],
)
def test_a_malformed_command_names_the_flag(argv, named):
    with pytest.raises(InputError, match="training.command") as err:
        cmd = lc.parse(argv)
        assert cmd is not None
        _ = cmd.rename_map, cmd.episodes
    assert named in str(err.value)


def test_no_base_composes_b_from_the_type_and_the_dataset_action(tmp_path):
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text(
        '{"features": {"action": {"dtype": "float32", "shape": [6]}}}'
    )
    cmd = lc.parse(["lerobot-train", "--policy.type=act", "--policy.chunk_size=20", "--dataset.root=x"])
    composed = lc.compose_training(cmd, None, tmp_path)
    assert composed["policy"]["type"] == "act" and composed["policy"]["chunk_size"] == 20
    assert composed["policy"]["output_features"] == {"action": {"type": "ACTION", "shape": [6]}}
    assert composed["composed_by"]["tool"] == "hpc-preflight"


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-c", "print(1)", "-m", "lerobot.scripts.lerobot_train", "--policy.type=act"],
        ["python", "script.py", "-m", "lerobot.scripts.lerobot_train"],
        ["python", "-", "-m", "lerobot.scripts.lerobot_train"],
        ["python", "-ccode", "-m", "lerobot.scripts.lerobot_train"],
    ],
)
def test_dash_m_counts_only_where_no_code_or_script_runs_before_it(argv):
    """Python runs the first of `-c`, a script or `-m`: what comes after is that program's argv."""
    assert not lc.is_lerobot_train(argv) and lc.parse(argv) is None


def test_dash_m_after_interpreter_options_is_still_lerobot_train():
    argv = ["python3", "-u", "-X", "dev", "-W", "ignore", "-m", "lerobot.scripts.lerobot_train", "--steps=3"]
    cmd = lc.parse(argv)
    assert cmd is not None and cmd.args == ["--steps=3"]
    assert lc.parse(["python", "-mlerobot.scripts.lerobot_train", "--steps=3"]).args == ["--steps=3"]


@pytest.mark.parametrize("second", [["--policy.path=b/other"], ["--policy.path", "b/other"]])
def test_a_flag_given_twice_is_refused_in_one_line(second):
    with pytest.raises(InputError, match="--policy.path is given twice") as err:
        lc.parse(["lerobot-train", "--policy.path=a/base", *second, "--dataset.repo_id=c/d"])
    assert "'a/base'" in str(err.value) and "'b/other'" in str(err.value) and "\n" not in str(err.value)
