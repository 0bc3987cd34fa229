"""Fail fast on inputs: a missing model or a dataset that is a text file is refused at launch (exit 2,
one line naming the key and the path, nothing submitted, no run folder), only for the stages selected;
and a part job whose input went bad after launch says so instead of "crashed"."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from pipeline import launch
from pipeline.errors import InputError
from pipeline.record.runfolder import PART_INPUT_ERROR, RunFolder
from pipeline.run import input_checks as launch_inputs
from pipeline.run import jobs
from pipeline.run.plan import build_plan, plan_document
from pipeline.stages.determinism import twins_check
from pipeline.stages.determinism.outcome import read_outcome
from tests.conftest import launch as run_launch
from tests.conftest import other_stages


def inputs(root: Path) -> dict[str, Path]:
    """Real inputs each reader's detection takes: a LeRobot checkpoint folder (config.json), a YAML
    training config, a LeRobot dataset folder (meta/info.json), a release and a cache folder."""
    model, dataset = root / "model", root / "dataset"
    (dataset / "meta").mkdir(parents=True)
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"input_features": {}}))
    (dataset / "meta" / "info.json").write_text("{}")
    training = root / "train.yaml"
    training.write_text("policy: {}\n")
    notes = root / "notes.txt"
    notes.write_text("not a dataset\n")
    for name in ("release", "cache"):
        (root / name).mkdir()
    return {"model": model, "dataset": dataset, "training": training, "notes": notes, "root": root}


def paths(found: dict[str, Path], **changed: Any) -> list[str]:
    values = {k: found[k] for k in ("model", "dataset", "training")} | changed
    return ["~demo", *(f"{k}.path={v}" for k, v in values.items())]


@pytest.fixture
def compose() -> Iterator[Callable[..., Any]]:
    GlobalHydra.instance().clear()
    conf = Path(launch.__file__).parent / "conf"
    launch.stages.load()  # the stages' typed configs in Hydra's ConfigStore, as the launch's cli puts them
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        yield lambda *overrides: hydra_compose("config", overrides=list(overrides))
    GlobalHydra.instance().clear()


def refused(cfg: Any) -> InputError:
    registry = launch.load_registry(cfg)
    with pytest.raises(InputError) as info:
        launch_inputs.check_inputs(launch.resolved_config(cfg, "local"), registry)
    assert "\n" not in str(info.value)
    return info.value


def test_good_inputs_pass(tmp_path: Path, compose: Callable[..., Any]) -> None:
    found = inputs(tmp_path)
    overrides = [f"output_root={tmp_path / 'out'}", f"release.path={tmp_path / 'release'}"]
    cfg = compose(*paths(found), *overrides, f"cache.path={tmp_path / 'cache'}")
    launch_inputs.check_inputs(launch.resolved_config(cfg, "local"), launch.load_registry(cfg))


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("model", "missing", "model path does not exist"),
        ("model", "notes", "no base-checkpoint contract found"),
        ("dataset", "notes", "not a dataset this stage reads"),
        ("dataset", "missing", "dataset path does not exist"),
        ("training", "notes", "expected a .json or .yaml training config"),
        ("training", "root", "no train_config.json"),
    ],
)
def test_bad_input_names_key_path_and_expectation(
    tmp_path: Path, compose: Callable[..., Any], key: str, value: str, expected: str
) -> None:
    found = inputs(tmp_path)
    bad = tmp_path / "no-such-input" if value == "missing" else found[value]
    error = refused(compose(*paths(found, **{key: bad}), f"output_root={tmp_path / 'out'}"))
    assert error.field == f"{key}.path" and error.path == str(bad)
    assert str(error).startswith(f"{key}.path: {bad}: ") and expected in str(error), str(error)


def test_only_selected_stages_are_checked(tmp_path: Path, compose: Callable[..., Any]) -> None:
    found = inputs(tmp_path)
    bad = paths(found, model=tmp_path / "gone", dataset=found["notes"])
    for selection in ("stage=container_check", other_stages("container_check", "render_cache")):
        cfg = compose(*bad, selection, f"output_root={tmp_path / 'out'}")
        launch_inputs.check_inputs(launch.resolved_config(cfg, "local"), launch.load_registry(cfg))
    # checkpoint_storage reads model.path alone: selecting it brings the model check back
    error = refused(compose(*bad, "stage=checkpoint_storage", f"output_root={tmp_path / 'out'}"))
    assert error.field == "model.path"


def test_extra_inputs_of_the_stages(tmp_path: Path, compose: Callable[..., Any]) -> None:
    found = inputs(tmp_path)
    out = f"output_root={tmp_path / 'out'}"
    cases = [
        (["stage=contract", f"+known_good.path={found['notes']}"], "known_good.path"),
        (["stage=render_cache", f"release.path={found['notes']}", f"cache.path={tmp_path / 'cache'}"],
         "release.path"),
        (["stage=determinism", f"stages.determinism.reload.dataset={found['notes']}"],
         "stages.determinism.reload.dataset"),
        (["stage=teacher_forced",
          f"stages.teacher_forced.models=[{{name: m, path: {tmp_path / 'gone.pt'}, loader: 'a:b'}}]"],
         "stages.teacher_forced.models[0].path"),
        ([f"+chain.sbatch={tmp_path / 'release'}"], "chain.sbatch"),
    ]  # fmt: skip
    for overrides, key in cases:
        error = refused(compose(*paths(found), out, *overrides))  # chain.sbatch: a folder, not a file
        assert error.field == key, (overrides, str(error))


def test_plugin_inputs_need_only_exist(
    tmp_path: Path, compose: Callable[..., Any], plugin_stages: None
) -> None:
    found = inputs(tmp_path)
    builtin = "container_check,checkpoint_storage,contract,determinism,teacher_forced,render_cache"
    base = ["plugins=[preflight_watch_stage]", f"skip=[{builtin}]", f"output_root={tmp_path / 'out'}"]
    cfg = compose(*paths(found, dataset=found["notes"]), *base)  # the watch stage reads text
    launch_inputs.check_inputs(launch.resolved_config(cfg, "local"), launch.load_registry(cfg))
    error = refused(compose(*paths(found, dataset=tmp_path / "gone.txt"), *base))
    assert error.field == "dataset.path" and "does not exist" in str(error)


@pytest.mark.parametrize("key, bad", [("model", "gone"), ("dataset", "notes")])
def test_launch_refuses_bad_input_before_anything_is_queued(tmp_path: Path, key: str, bad: str) -> None:
    found = inputs(tmp_path)
    value = tmp_path / "gone" if bad == "gone" else found[bad]
    proc = run_launch(tmp_path, "launcher=local", *paths(found, **{key: value}))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}.path: {value}: "), out
    assert "nothing was submitted" in lines[0]
    assert not (tmp_path / "preflight").exists(), out


def test_part_job_reports_an_input_gone_bad_after_launch(tmp_path: Path, compose: Callable[..., Any]) -> None:
    """The model folder disappears between launch and the twins: both twins record the input error
    (input_error.json, no done.json) and the merge says the runs stopped on a bad input, naming it."""
    found = inputs(tmp_path)
    cfg = compose(*paths(found), "stage=determinism", f"output_root={tmp_path / 'out'}", "run_id=r1")
    registry = launch.load_registry(cfg)
    rcfg = launch.resolved_config(cfg, "local")
    launch_inputs.check_inputs(rcfg, registry)
    folder = RunFolder(Path(rcfg.run_dir))
    folder.write_config(rcfg)
    folder.write_plan(plan_document(build_plan(rcfg, registry, folder)))
    (found["model"] / "config.json").unlink()
    found["model"].rmdir()
    for part in ("twin_a", "twin_b"):
        written = Path(jobs.run_part(folder.root, "determinism", part))
        assert written.name == PART_INPUT_ERROR and not folder.part_done_file("determinism", part).exists()
    a, b = (read_outcome(folder.part_dir("determinism", p), p, "metrics.jsonl") for p in ("twin_a", "twin_b"))
    assert a.input_error and a.input_error.startswith(f"model.path: {found['model']}: ")
    check, _ = twins_check(a, b, steps=4)
    assert check.verdict == "error" and "crashed" not in check.message, check.message
    assert check.message.startswith("twin run stopped on a bad input: twin_a input error: model.path: ")
