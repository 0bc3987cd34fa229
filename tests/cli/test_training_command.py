"""The lerobot-train command after `--` names A, B and C: a base by Hub id in the local Hugging Face
cache, a dataset by repo id under HF_LEROBOT_HOME, and B composed from the same argv (here by our
reader: lerobot is not in this venv; scripts/test_lerobot.sh runs lerobot's own composition)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from pipeline.errors import InputError
from tests.conftest import DemoCache, gate_of, launch, run_dir_of
from tests.in_process_launch import launch_here

BASE_ID, DATA_ID = "acme/pick_base", "acme/so101_pick"
COMMIT = "0" * 40


def hub_snapshot(cache: Path, repo_id: str, folder: Path) -> Path:
    """A model repo in huggingface_hub's cache layout: models--org--name/{refs/main, snapshots/<sha>}."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(folder, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return repo / "snapshots" / COMMIT


@pytest.fixture()
def hf_home(tmp_path, monkeypatch, demo_cache: DemoCache) -> dict[str, Path]:
    seed = demo_cache.seed(tmp_path / "seed")
    hub, home = tmp_path / "hf" / "hub", tmp_path / "hf" / "lerobot"
    base = hub_snapshot(hub, BASE_ID, seed / "model")
    shutil.copytree(seed / "dataset", home / DATA_ID)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_LEROBOT_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return {"base": base, "dataset": home / DATA_ID, "hub": hub}


def test_a_lerobot_train_line_alone_names_a_b_and_c_and_clears(tmp_path, hf_home):
    cwd = tmp_path / "run"
    cwd.mkdir()
    big = "--job_name=" + "x" * 120_000  # near Linux's limit on one argv item: the record quotes it capped
    command = ["lerobot-train", f"--policy.path={BASE_ID}", f"--dataset.repo_id={DATA_ID}", "--steps=10", big]
    proc = launch_here(cwd, "stage=contract", "launcher=local", "wait=true", "--", *command, seed_demo=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"base {hf_home['base']}" in proc.stdout and "composed by hpc-preflight" in proc.stdout
    run = run_dir_of(cwd, proc)
    composed = json.loads((run / "train_config.json").read_text())
    assert composed["policy"]["pretrained_path"] == str(hf_home["base"])
    assert composed["composed_by"]["argv"] == command and composed["dataset"]["repo_id"] == DATA_ID
    gate = gate_of(run)
    assert gate["gate"] == "clear"
    sources = json.dumps(gate["sources"])
    assert str(hf_home["base"]) in sources and str(hf_home["dataset"]) in sources
    assert "train_config.json" in sources
    assert gate["sources"]["training"]["command"][:4] == command[:4]
    assert gate["sources"]["training"]["command"][4].endswith(f"… ({len(big) - 2048} bytes cut)")
    records = [run / "gate.json", *(cwd / "audit_logs").rglob("*.md")]
    assert len(records) > 1 and not any("x" * 2049 in p.read_text() for p in records)  # capped everywhere
    assert gate["sources"]["training"]["composed_by"] == "hpc-preflight"
    contract = next(s for s in gate["stages"] if s["stage"] == "contract")
    row = next(c for c in contract["checks"] if c["id"] == "contract.training.composed")
    assert (row["verdict"], row["severity"]) == ("mismatch", "soft") and "lerobot did not compose" in row[
        "message"
    ]


def test_no_base_policy_type_on_the_demo_dataset_clears_with_the_base_side_skipped(tmp_path, hf_home):
    command = ["lerobot-train", "--policy.type=act", f"--dataset.repo_id={DATA_ID}"]
    proc = launch_here(
        tmp_path, "stage=contract", "launcher=local", "wait=true", "--", *command, seed_demo=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "no base (--policy.type=act)" in proc.stdout
    stage = next(s for s in gate_of(run_dir_of(tmp_path, proc))["stages"] if s["stage"] == "contract")
    skipped = [c for c in stage["checks"] if c["verdict"] == "skipped"]
    assert skipped and "model.path" in skipped[0]["message"]


REAL_ACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "real" / "lerobot-0.4.4" / "act_trained"


@pytest.mark.skipif(not REAL_ACT.is_dir(), reason=f"needs the real lerobot 0.4.4 pack at {REAL_ACT}")
def test_the_real_clients_act_by_hub_id_gives_no_false_hard_row(tmp_path, hf_home):
    """act_trained: a state-only ACT that lerobot-train 0.4.4 trained on the demo dataset."""
    hub_snapshot(hf_home["hub"], "acme/act_trained", REAL_ACT / "pretrained_model")
    command = ["lerobot-train", "--policy.path=acme/act_trained", f"--dataset.repo_id={DATA_ID}"]
    proc = launch_here(
        tmp_path, "stage=contract", "launcher=local", "wait=true", "--", *command, seed_demo=False
    )
    stage = next(s for s in gate_of(run_dir_of(tmp_path, proc))["stages"] if s["stage"] == "contract")
    bad = ("mismatch", "error")
    hard = [c["id"] for c in stage["checks"] if c["verdict"] in bad and c["severity"] == "hard"]
    assert proc.returncode == 0 and not hard, (hard, proc.stdout[-2000:])


def test_a_hub_id_not_in_the_cache_is_one_line_and_nothing_submitted(tmp_path, hf_home):
    command = ["lerobot-train", "--policy.path=acme/never_fetched", f"--dataset.repo_id={DATA_ID}"]
    proc = launch_here(tmp_path, "stage=contract", "launcher=local", "--", *command, seed_demo=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert "acme/never_fetched" in line and str(hf_home["hub"]) in line
    assert "huggingface-cli download acme/never_fetched" in line
    assert not (tmp_path / "preflight" / "runs").exists()


def test_a_dataset_repo_id_not_under_the_lerobot_home_is_one_line(tmp_path, hf_home):
    command = ["lerobot-train", f"--policy.path={BASE_ID}", "--dataset.repo_id=acme/missing"]
    proc = launch_here(tmp_path, "stage=contract", "launcher=local", "--", *command, seed_demo=False)
    assert proc.returncode == 2
    assert "acme/missing" in proc.stdout and "--repo-type dataset" in proc.stdout


@pytest.mark.lerobot
def test_lerobots_own_parser_composes_b_where_lerobot_is_importable(tmp_path, hf_home):
    """In the lerobot venv (scripts/test_lerobot.sh): B is lerobot's composition of the same argv."""
    pytest.importorskip("lerobot", reason="needs lerobot (scripts/test_lerobot.sh builds a venv with it)")
    hub_snapshot(hf_home["hub"], "acme/act_trained", REAL_ACT / "pretrained_model")
    command = ["lerobot-train", "--policy.path=acme/act_trained", f"--dataset.repo_id={DATA_ID}", "--steps=7",
               "--policy.device=cpu", "--policy.push_to_hub=false"]  # fmt: skip
    proc = launch(tmp_path, "stage=contract", "launcher=local", "wait=true", "--", *command, seed_demo=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "composed by lerobot" in proc.stdout
    composed = json.loads((run_dir_of(tmp_path, proc) / "train_config.json").read_text())
    assert composed["composed_by"] == {"tool": "lerobot", "argv": command}
    assert composed["steps"] == 7 and composed["policy"]["type"] == "act"
    assert composed["dataset"]["repo_id"] == DATA_ID


@pytest.mark.lerobot
def test_stage_full_in_front_of_a_lerobot_train_line_is_clear(tmp_path, hf_home):
    """The whole gate from the typed line alone, in the lerobot venv: A by Hub id, C by repo id, B
    composed by lerobot, determinism running the same command through the wrapper."""
    pytest.importorskip("lerobot", reason="needs lerobot (scripts/test_lerobot.sh builds a venv with it)")
    hub_snapshot(hf_home["hub"], "acme/act_trained", REAL_ACT / "pretrained_model")
    command = [
        "lerobot-train", "--policy.path=acme/act_trained", f"--dataset.repo_id={DATA_ID}", "--steps=3",
        "--policy.device=cpu", "--batch_size=4", "--num_workers=0", "--dataset.video_backend=pyav",
    ]  # fmt: skip
    proc = launch(
        tmp_path, "stage=full", "launcher=local", "wait=true", "stages.determinism.steps=3",
        "stages.determinism.reload.enabled=false", "--", *command, seed_demo=False, timeout=1500,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    run = run_dir_of(tmp_path, proc)
    gate = gate_of(run)
    assert gate["gate"] == "clear" and gate["sources"]["training"]["command"] == command
    assert json.loads((run / "train_config.json").read_text())["composed_by"]["tool"] == "lerobot"
    ran = {s["stage"]: s["status"] for s in gate["stages"]}
    assert ran["determinism"] == "pass" and ran["contract"] in ("pass", "warn"), ran


@pytest.mark.lerobot
def test_a_job_with_lerobot_composes_b_again_when_the_launch_could_not(tmp_path, hf_home):
    """A login node without lerobot composed B with our reader; the job in the training image has
    lerobot and composes it again, over the run folder's copy, which is then what is judged."""
    pytest.importorskip("lerobot", reason="needs lerobot (scripts/test_lerobot.sh builds a venv with it)")
    from omegaconf import OmegaConf

    from pipeline.stages.contract import composed

    # the base as a folder: in this process huggingface_hub may have read another test's HF_HUB_CACHE at
    # its import (a job imports it fresh with its own environment); the Hub lookup is the launch tests'
    base = REAL_ACT / "pretrained_model"
    command = ["lerobot-train", f"--policy.path={base}", f"--dataset.repo_id={DATA_ID}", "--steps=9"]
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps({"policy": {"type": "act"}}))
    cfg = OmegaConf.create({
        "run_dir": str(tmp_path), "dataset": {"path": str(hf_home["dataset"])},
        "training": {"path": str(ours), "composed_by": "hpc-preflight", "command": command},
    })  # fmt: skip
    path, rows = composed.training_config(cfg)
    assert path == str(tmp_path / "train_config.json") and rows[0].verdict == "match"
    assert "lerobot (in the job)" in rows[0].message
    written = json.loads(Path(path).read_text())
    assert written["composed_by"]["tool"] == "lerobot" and written["steps"] == 9


def test_a_command_that_is_not_lerobot_train_with_no_input_is_refused_not_judged_on_the_demo(tmp_path):
    proc = launch_here(tmp_path, "stage=full", "launcher=local", "--", "python", "train.py", seed_demo=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert "training.command" in line and "python train.py is not lerobot-train" in line
    assert not (tmp_path / "preflight" / "demo").exists() and not (tmp_path / "preflight" / "runs").exists()


@pytest.mark.parametrize(
    ("typed", "key"),
    [(["--"], "training.command"), (["dataset.path=''"], "dataset.path"), (["model.path= "], "model.path")],
)
def test_an_input_typed_empty_is_one_line_never_the_demo(typed, key, tmp_path, monkeypatch, capsys):
    """The demo stands in only where no input was named; `--` alone or an empty path was typed."""
    from pipeline import launch as launch_module

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["preflight-launch", "stage=contract", "launcher=local", *typed])
    with pytest.raises(SystemExit) as exit_:
        launch_module.cli()
    lines = capsys.readouterr().out.strip().splitlines()
    assert exit_.value.code == 2 and len(lines) == 1 and lines[0].startswith(f"config error: {key}: ")
    assert not (tmp_path / "preflight").exists()


def composed(argv: list[str], dataset: Path, base: Path | None = None) -> tuple[dict, str]:
    from pipeline.cli import training_command
    from pipeline.readers import lerobot_command

    command = lerobot_command.parse(argv)
    assert command is not None
    return training_command.compose(command, base, dataset)


def test_episode_ids_the_dataset_does_not_have_are_named(hf_home):
    total = json.loads((hf_home["dataset"] / "meta" / "info.json").read_text())["total_episodes"]
    for ids, named in (([-1, -5], "-5, -1"), ([0, total + 979], str(total + 979))):
        argv = [
            "lerobot-train",
            "--policy.type=act",
            f"--dataset.repo_id={DATA_ID}",
            f"--dataset.episodes={ids}",
        ]
        with pytest.raises(InputError, match="--dataset.episodes names episode") as err:
            composed(argv, hf_home["dataset"])
        assert f"episode(s) {named} that" in str(err.value) and f"it has {total}" in str(err.value)
    argv[-1] = f"--dataset.episodes=[0, {total - 1}]"
    assert composed(argv, hf_home["dataset"])[0]["dataset"]["episodes"] == [0, total - 1]


@pytest.mark.parametrize(
    "flag", ["--steps=0", "--steps=-1", "--batch_size=0", "--save_freq=0", "--num_workers=-2"]
)
def test_a_count_lerobot_cannot_train_with_is_named(flag, hf_home):
    argv = ["lerobot-train", "--policy.type=act", f"--dataset.repo_id={DATA_ID}", flag]
    with pytest.raises(InputError, match="expected (a positive integer|an integer >= 0)") as err:
        composed(argv, hf_home["dataset"])
    assert str(err.value).startswith(f"training.command: {flag.split('=')[0]}=")


def test_an_unknown_policy_type_names_the_known_ones_in_one_line(hf_home):
    argv = ["lerobot-train", "--policy.type=nonexistent", f"--dataset.repo_id={DATA_ID}"]
    with pytest.raises(InputError, match="--policy.type=nonexistent is not a policy type") as err:
        composed(argv, hf_home["dataset"])
    assert "known: " in str(err.value) and "act" in str(err.value) and "\n" not in str(err.value)


def test_a_config_path_is_read_with_the_flags_over_it_and_a_fifo_is_refused(tmp_path, hf_home):
    config = {"steps": 40, "batch_size": 2, "policy": {"type": "act", "chunk_size": 10}, "dataset": {}}
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(config))
    argv = ["lerobot-train", f"--config_path={tmp_path / 'train.yaml'}", f"--dataset.repo_id={DATA_ID}",
            "--steps=12", "--policy.chunk_size=5"]  # fmt: skip
    b, by = composed(argv, hf_home["dataset"])
    assert by == "hpc-preflight" and (b["steps"], b["batch_size"]) == (12, 2)
    assert b["policy"]["chunk_size"] == 5 and b["dataset"]["repo_id"] == DATA_ID
    (tmp_path / "train.yaml").write_text(yaml.safe_dump({**config, "batch_size": 0}))
    with pytest.raises(InputError, match="--batch_size=0"):
        composed(argv, hf_home["dataset"])  # a count from the file is judged as one typed
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(InputError, match="--config_path=.*fifo.json.*FIFO"):
        composed(["lerobot-train", f"--config_path={tmp_path / 'fifo.json'}"], hf_home["dataset"])


@pytest.mark.skipif(not REAL_ACT.is_dir(), reason=f"needs the real lerobot 0.4.4 pack at {REAL_ACT}")
def test_a_resumed_run_is_judged_on_its_checkpoints_own_config_and_weights(tmp_path, hf_home):
    """lerobot resumes from `--config_path=<checkpoint>/pretrained_model/train_config.json`: the weights
    beside it are A, that config (flags over it) is B; without it, one line."""
    from pipeline.readers import lerobot_command

    with pytest.raises(InputError, match="--resume=true needs --config_path"):
        lerobot_command.parse(["lerobot-train", "--resume=true", f"--dataset.repo_id={DATA_ID}"])
    saved = tmp_path / "outputs" / "checkpoints" / "000050" / "pretrained_model"
    shutil.copytree(REAL_ACT / "pretrained_model", saved)
    argv = ["lerobot-train", f"--config_path={saved / 'train_config.json'}", "--resume=true",
            f"--dataset.repo_id={DATA_ID}", "--steps=80"]  # fmt: skip
    command = lerobot_command.parse(argv)
    assert command is not None and command.policy_path == str(saved) and command.policy_type == "act"
    b, _ = composed(argv, hf_home["dataset"], base=saved)
    assert b["steps"] == 80 and b["batch_size"] == 4 and b["policy"]["pretrained_path"] == str(saved)


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("--steps=0", "--steps=0: expected a positive integer"),
        ("--policy.type=nope", "--policy.type=nope is"),
    ],
)
def test_a_refused_training_flag_is_one_exit_2_line_at_launch(
    flag, said, tmp_path, hf_home, monkeypatch, capsys
):
    from pipeline import launch as launch_module

    monkeypatch.chdir(tmp_path)
    argv = ["stage=contract", "launcher=local", "--", "lerobot-train", f"--dataset.repo_id={DATA_ID}", flag]
    argv += [] if "policy.type" in flag else ["--policy.type=act"]
    monkeypatch.setattr("sys.argv", ["preflight-launch", *argv])
    with pytest.raises(SystemExit) as exit_:
        launch_module.cli()
    lines = capsys.readouterr().out.strip().splitlines()
    assert exit_.value.code == 2 and len(lines) == 1 and said in lines[0], lines
    assert not (tmp_path / "preflight" / "runs").exists()


@pytest.mark.lerobot
def test_with_lerobot_composing_b_a_zero_count_and_an_unknown_type_are_still_one_line(hf_home, capsys):
    pytest.importorskip("lerobot", reason="needs lerobot (scripts/test_lerobot.sh builds a venv with it)")
    argv = ["lerobot-train", "--policy.type=act", f"--dataset.repo_id={DATA_ID}", "--steps=0",
            "--policy.device=cpu", "--policy.push_to_hub=false"]  # fmt: skip
    with pytest.raises(InputError, match="--steps=0: expected a positive integer"):
        composed(argv, hf_home["dataset"])
    argv[1] = "--policy.type=nonexistent"
    with pytest.raises(InputError, match="--policy.type=nonexistent is not a policy type") as err:
        composed(argv, hf_home["dataset"])
    assert "diffusion" in str(err.value) and "usage:" not in capsys.readouterr().out


@pytest.mark.parametrize("repo_id", ["../elsewhere/so101", "ABSOLUTE"])
def test_a_repo_id_that_leaves_the_lerobot_home_names_the_folder_read(
    repo_id, tmp_path, hf_home, monkeypatch, capsys
):
    """lerobot reads such a repo id too, so no block: the launch line names the folder the gate judged."""
    from pipeline import launch as launch_module

    outside = tmp_path / "hf" / "elsewhere" / "so101"
    shutil.copytree(hf_home["dataset"], outside)
    repo_id = str(outside) if repo_id == "ABSOLUTE" else repo_id
    monkeypatch.chdir(tmp_path)
    argv = ["stage=contract", "launcher=local", "dry_run=true", "--", "lerobot-train", "--policy.type=act",
            f"--dataset.repo_id={repo_id}"]  # fmt: skip
    monkeypatch.setattr("sys.argv", ["preflight-launch", *argv])
    with pytest.raises(SystemExit) as exit_:
        launch_module.cli()
    out = capsys.readouterr().out
    assert exit_.value.code == 0, out[-2000:]
    line = next(x for x in out.splitlines() if f"--dataset.repo_id={repo_id} is not <org>/<name>" in x)
    assert f"the dataset read is {outside}, outside {hf_home['dataset'].parents[1].resolve()}" in line


def test_an_empty_episode_list_says_nothing_was_selected(hf_home):
    argv = ["lerobot-train", "--policy.type=act", f"--dataset.repo_id={DATA_ID}", "--dataset.episodes=[]"]
    with pytest.raises(InputError, match=r"--dataset.episodes=\[\] selects no episode"):
        composed(argv, hf_home["dataset"])


def test_a_resumed_checkpoint_without_its_weights_is_refused(tmp_path, hf_home):
    saved = tmp_path / "checkpoints" / "000050" / "pretrained_model"
    saved.mkdir(parents=True)
    shutil.copy(hf_home["base"] / "config.json", saved / "config.json")
    (saved / "train_config.json").write_text(json.dumps({"policy": {"type": "act"}, "dataset": {}}))
    argv = ["lerobot-train", f"--config_path={saved / 'train_config.json'}", "--resume=true",
            f"--dataset.repo_id={DATA_ID}"]  # fmt: skip
    with pytest.raises(InputError, match=r"--resume=true: .*model.safetensors: file not found") as err:
        composed(argv, hf_home["dataset"], base=saved)
    assert "\n" not in str(err.value)


def test_a_base_whose_config_declares_wider_features_than_its_stats_is_no_crash():
    """A checkpoint whose config.json is a link to another policy's: its features name more dims than
    its weights' stats hold; the action relation says the stats do not pair, never an IndexError."""
    import numpy as np

    from pipeline.readers.base import Contract, DatasetContract, Feature
    from pipeline.stages.contract.config import ContractConfig
    from pipeline.stages.contract.relation import base_relation
    from pipeline.stages.contract.rows import Sources

    a = Contract("A", "lerobot", "ckpt")
    a.features = {"observation.state": Feature("observation.state", "state", (14,)),
                  "action": Feature("action", "action", (14,))}  # fmt: skip
    six = {"mean": np.zeros(6), "std": np.ones(6)}
    a.stats = {"observation.state": six, "action": six}
    src = Sources(
        a, Contract("B", "lerobot_train_config", "b"), DatasetContract("C", "lerobot", "c"), ContractConfig()
    )
    assert base_relation(src) == {
        "mode": None,
        "reason": "A's stats are narrower than its declared state/action features",
    }
