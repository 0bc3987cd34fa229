"""Nothing outside the folders a user gave is judged as their input: a Hub cache ref or snapshot that
points out of the cache, a composed training config swapped or linked after the launch wrote it, a FIFO
where lerobot would open the base's config.json, a folder where the launch writes B. Each is one line
naming the file (exit 2 at launch, an InputError in the job), never a clear gate on someone else's files.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.cli import training_command
from pipeline.errors import InputError
from pipeline.readers import hub_cache, lerobot_command
from pipeline.record.runfolder import composed_text
from pipeline.stages.contract import composed
from tests.cli.test_training_command import BASE_ID, COMMIT, DATA_ID, hub_snapshot
from tests.conftest import DemoCache, gate_of, run_dir_of
from tests.in_process_launch import launch_here

RENAME_AWAY = '--rename_map={"observation.state": "observation.elsewhere"}'


@pytest.fixture()
def seed(tmp_path, demo_cache: DemoCache) -> Path:
    return demo_cache.seed(tmp_path / "seed")


@pytest.fixture()
def hub(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def blob_layout(cache: Path, repo_id: str, folder: Path) -> Path:
    """huggingface_hub's real layout: files in blobs/<sha>, the snapshot's entries links into them."""
    repo = hub_cache.repo_folder(cache, repo_id)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for index, item in enumerate(sorted(p for p in folder.iterdir() if p.is_file())):
        blob = repo / "blobs" / f"{index:040x}"
        shutil.copyfile(item, blob)
        (snapshot / item.name).symlink_to(Path("..", "..", "blobs", blob.name))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def test_a_snapshot_of_links_into_its_blobs_is_the_base(hub, seed):
    snapshot = blob_layout(hub, BASE_ID, seed / "model")
    assert lerobot_command.resolve_base(BASE_ID) == snapshot
    assert (snapshot / "config.json").is_symlink()


def test_a_ref_that_points_out_of_the_cache_is_refused(hub, seed, tmp_path):
    shutil.copytree(seed / "model", tmp_path / "outside" / "base")
    repo = hub_cache.repo_folder(hub, BASE_ID)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("../../../../../outside/base")
    with pytest.raises(InputError) as err:
        lerobot_command.resolve_base(BASE_ID)
    assert "refs/main" in str(err.value) and "not a 40-hex commit" in str(err.value)


@pytest.mark.parametrize("what", ["snapshot", "file"])
def test_a_snapshot_or_a_file_in_it_linked_out_of_the_cache_is_refused(hub, seed, tmp_path, what):
    outside = tmp_path / "outside"
    shutil.copytree(seed / "model", outside)
    repo = hub_cache.repo_folder(hub, BASE_ID)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    if what == "snapshot":
        (repo / "snapshots").mkdir()
        (repo / "snapshots" / COMMIT).symlink_to(outside, target_is_directory=True)
    else:
        shutil.copytree(seed / "model", repo / "snapshots" / COMMIT)
        (repo / "snapshots" / COMMIT / "config.json").unlink()
        (repo / "snapshots" / COMMIT / "config.json").symlink_to(outside / "config.json")
    with pytest.raises(InputError) as err:
        lerobot_command.resolve_base(BASE_ID)
    assert str(outside) in str(err.value) and "outside" in str(err.value)


def test_a_ref_out_of_the_cache_at_launch_is_one_line_and_nothing_is_submitted(tmp_path, hub, seed):
    shutil.copytree(seed / "model", tmp_path / "outside" / "base")
    repo = hub_cache.repo_folder(hub, BASE_ID)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("../../../../../outside/base")
    home = tmp_path / "hf" / "lerobot"
    shutil.copytree(seed / "dataset", home / DATA_ID)
    os.environ["HF_LEROBOT_HOME"] = str(home)
    try:
        command = ["lerobot-train", f"--policy.path={BASE_ID}", f"--dataset.repo_id={DATA_ID}"]
        proc = launch_here(tmp_path, "stage=contract", "launcher=local", "--", *command, seed_demo=False)
    finally:
        del os.environ["HF_LEROBOT_HOME"]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert "refs/main" in line and "not a 40-hex commit" in line and "outside/base" in line
    assert not (tmp_path / "preflight" / "runs").exists()


def test_a_fifo_config_json_in_the_base_is_named_before_anything_composes_b(tmp_path, seed):
    base = tmp_path / "base"
    shutil.copytree(seed / "model", base)
    (base / "config.json").unlink()
    os.mkfifo(base / "config.json")
    command = lerobot_command.parse(["lerobot-train", f"--policy.path={base}", "--dataset.root=x"])
    assert command is not None
    with pytest.raises(InputError) as err:
        training_command.compose(command, base, seed / "dataset")
    assert "FIFO" in str(err.value) and "config.json" in str(err.value)


def _job_cfg(tmp_path: Path, composition: dict) -> tuple[OmegaConf, Path]:
    root = tmp_path / "out"
    path, digest = training_command.write_composed(root, composition)
    run = root / "runs" / "r1"
    run.mkdir(parents=True)
    training = {"path": str(path), "composed_by": "lerobot", "composed_sha256": digest, "command": None}
    cfg = OmegaConf.create({"output_root": str(root), "run_dir": str(run), "training": training})
    return cfg, path


@pytest.mark.parametrize("swap", ["symlink", "regular file"])
def test_a_composed_config_swapped_after_the_launch_is_not_judged(tmp_path, swap):
    """The race: the launch wrote B and kept its digest; another writer changes the shared file before
    the contract job reads it."""
    cfg, path = _job_cfg(tmp_path, {"policy": {"type": "act"}, "rename_map": {"a": "b"}})
    _swap_and_expect_refusal(tmp_path, cfg, path, swap)


def test_the_job_judges_the_run_folders_copy_of_what_the_launch_wrote(tmp_path):
    cfg, path = _job_cfg(tmp_path, {"policy": {"type": "act"}})
    judged, rows = composed.training_config(cfg)
    assert Path(judged) == Path(cfg.run_dir) / "train_config.json"
    assert Path(judged).read_text() == path.read_text() == composed_text(cfg)
    assert rows[0].verdict == "match"


def test_a_relaunch_rewrites_a_composed_file_left_as_a_link(tmp_path):
    composition = {"policy": {"type": "act"}, "rename_map": {"a": "b"}}
    root = tmp_path / "out"
    path, _ = training_command.write_composed(root, composition)
    clean = tmp_path / "clean.json"
    clean.write_text("{}")
    path.unlink()
    path.symlink_to(clean)
    again, digest = training_command.write_composed(root, composition)
    assert again == path and not path.is_symlink() and json.loads(path.read_text()) == composition
    assert clean.read_text() == "{}"
    assert len(digest) == 64


def test_a_folder_at_the_composed_path_is_one_line(tmp_path, seed):
    composition = {"policy": {"type": "act"}}
    path, _ = training_command.write_composed(tmp_path / "out", composition)
    path.unlink()
    path.mkdir()
    with pytest.raises(InputError) as err:
        training_command.write_composed(tmp_path / "out", composition)
    assert str(path) in str(err.value) and "is a directory" in str(err.value)


def test_a_relaunch_after_a_swap_still_blocks_on_the_users_own_rename_map(tmp_path, hub, seed):
    """The whole path: a blocking line, its composed file replaced by a link to a clean composition, the
    same line launched again: the gate judges what this launch composed, inside the run folder."""
    hub_snapshot(hub, BASE_ID, seed / "model")
    home = tmp_path / "hf" / "lerobot"
    shutil.copytree(seed / "dataset", home / DATA_ID)
    command = ["lerobot-train", f"--policy.path={BASE_ID}", f"--dataset.repo_id={DATA_ID}", RENAME_AWAY]
    os.environ["HF_LEROBOT_HOME"] = str(home)
    try:
        dry = launch_here(
            tmp_path, "stage=contract", "launcher=local", "dry_run=true", "--", *command, seed_demo=False
        )
        assert dry.returncode == 0, dry.stdout + dry.stderr
        written = next((tmp_path / "preflight" / "composed").glob("*/train_config.json"))
        clean = tmp_path / "clean.json"
        clean.write_text(json.dumps({**json.loads(written.read_text()), "rename_map": {}}))
        written.unlink()
        written.symlink_to(clean)
        proc = launch_here(
            tmp_path, "stage=contract", "launcher=local", "wait=true", "--", *command, seed_demo=False
        )
    finally:
        del os.environ["HF_LEROBOT_HOME"]
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    run = run_dir_of(tmp_path, proc)
    gate = gate_of(run)
    assert gate["gate"] == "blocked"
    assert Path(gate["sources"]["training"]["path"]).resolve().is_relative_to(tmp_path.resolve())
    assert not written.is_symlink()


@pytest.mark.parametrize("swap", ["symlink", "regular file"])
def test_our_own_composition_swapped_after_the_launch_is_not_judged(tmp_path, swap):
    """The same race where neither the launch nor the job can import lerobot: B is our reader's
    composition, and the job judges it only as the launch wrote it (its digest), never the swapped file."""
    try:
        import lerobot  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("lerobot is importable here: the job composes B with it, the path under test is without")
    cfg, path = _job_cfg(tmp_path, {"policy": {"type": "act"}, "rename_map": {"a": "b"}})
    cfg.training.composed_by = "hpc-preflight"
    cfg.training.command = ["lerobot-train", "--policy.type=act", "--dataset.root=x"]
    cfg.dataset = {"path": str(tmp_path / "dataset")}
    judged, rows = composed.training_config(cfg)  # untouched: the run folder's copy of what was written
    assert Path(judged).read_text() == path.read_text() and rows[0].severity == "soft"
    _swap_and_expect_refusal(tmp_path, cfg, path, swap)


def _swap_and_expect_refusal(tmp_path: Path, cfg, path: Path, swap: str) -> None:
    """Replace the composed B by a clean one (a link to it, or its bytes copied over) and expect the
    contract job to refuse it, naming the file and how it changed."""
    clean = tmp_path / "elsewhere" / "train_config.json"
    clean.parent.mkdir()
    clean.write_text(json.dumps({"policy": {"type": "act"}}))
    path.unlink()
    if swap == "symlink":
        path.symlink_to(clean)
    else:
        shutil.copyfile(clean, path)
    with pytest.raises(InputError) as err:
        composed.training_config(cfg)
    assert str(path) in str(err.value)
    assert ("symbolic link" if swap == "symlink" else "changed since it was written") in str(err.value)
