"""Malformed inputs, as a hostile or unlucky user makes them (issue 14): every case ends in a named error.

Each case starts from a small valid triple (tests/malformed/triple.py: a contract card as the model (A),
a YAML training config (B), a LeRobot v2.1 dataset (C)), breaks one thing (tests/malformed/*cases.py),
and runs the reader, the waiver loader, the fingerprint or the launch validation on it in-process, under
a SIGALRM timeout (a FIFO or `/dev/zero` must not hang). An error must be an `InputError` /
`ConfigError` naming the file (or key) and a field, on one line, with no traceback text; a bad value in
the data must become a hard row naming the feature. A few representative cases go through the
launcher's own entry as a user's command line would (at the end of this file, in this process:
tests/in_process_launch.py): exit 2 with one line, or exit 3 with an `error` row naming file and field,
and nothing half-written left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import PreflightError, one_line
from pipeline.readers import read_dataset, read_model, read_training
from pipeline.record.fingerprint import digest_path
from pipeline.record.waivers import load_waivers
from tests.malformed import data_cases  # noqa: F401  (registers its cases in CASES)
from tests.malformed.cases import ROW_CASES, WAIVER
from tests.malformed.triple import (
    CASES,
    OPTIONS,
    Case,
    Triple,
    deadline,
    edit_json,
    fifo,
    make_triple,
    put,
    top,
)

# ------------------------------------------------------------------------------------------ the runner


def _call(case: Case, t: Triple, built: Any) -> Any:
    if case.run == "custom":
        return built()
    if case.run == "dataset":
        return read_dataset(t.dataset, OPTIONS)
    if case.run == "model":
        return read_model(t.model.parent)
    if case.run == "training":
        return read_training(t.training)
    if case.run == "waivers":
        return load_waivers(t.root / "waivers.yaml")
    if case.run == "fingerprint":
        return digest_path(t.dataset)
    raise AssertionError(case.run)


def assert_named(exc: PreflightError, file: str, field: str | None) -> None:
    """One line, the file (or key) named, a field set, no traceback text."""
    text = one_line(exc)
    assert "Traceback" not in str(exc) and "\n" not in str(exc).strip(), str(exc)
    assert file in text or file in str(exc.path or ""), f"{file!r} not named in: {text}"
    assert exc.field, f"no field in: {text}"
    if field is not None:
        assert field in exc.field or field in text, f"field {field!r} not in {exc.field!r}: {text}"


def test_at_least_105_classes() -> None:
    names = [c.name for c in CASES] + list(ROW_CASES) + list(LAUNCH_CASES)
    assert len(names) == len(set(names))
    assert len(names) >= 105, len(names)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_malformed_input_is_named(case: Case, tmp_path: Path) -> None:
    t = make_triple(tmp_path)
    with deadline():
        built = case.breaks(t)
        try:
            result = _call(case, t, built)
        except PreflightError as exc:
            assert_named(exc, case.file, case.field)
            return
    assert case.run == "fingerprint", f"{case.name}: accepted silently: {result!r}"
    assert str(result).startswith("sha256:")


@pytest.mark.parametrize("name", list(ROW_CASES))
def test_nonfinite_rows_block(name: str, tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from pipeline.stages.config import typed
    from pipeline.stages.contract import load_sources, reconcile
    from pipeline.stages.contract.config import ContractConfig

    t = make_triple(tmp_path)
    build, dims, total = ROW_CASES[name]
    build(t)
    cfg = OmegaConf.create({k: {"path": str(getattr(t, k))} for k in ("model", "training", "dataset")})
    config = typed(ContractConfig, {}, "stages.contract")
    with deadline():
        checks, _ = reconcile(*load_sources(cfg, config)[:3], config)
    rows = {c.id: c for c in checks if c.id.startswith("contract.finite:")}
    bad = rows["contract.finite:action"]
    assert (bad.verdict, bad.severity, bad.blocking) == ("mismatch", "hard", True)
    assert bad.evidence["dims"] == dims and sum(bad.evidence["counts"]) == total
    assert f"{total} NaN/inf" in bad.message and "action" in bad.message
    assert rows["contract.finite:observation.state"].verdict == "match"


# --------------------------------------------------------------------------- launch config, in-process

LAUNCH_CASES = {
    "launcher_poll_s_negative": (["launcher.poll_s=-1"], "launcher.poll_s"),
    "launcher_poll_s_zero": (["launcher.poll_s=0"], "launcher.poll_s"),
    "launcher_max_parallel_negative": (["launcher.max_parallel=-1"], "launcher.max_parallel"),
    "launcher_max_parallel_zero": (["launcher.max_parallel=0"], "launcher.max_parallel"),
    "launcher_max_parallel_fraction": (["launcher.max_parallel=1.5"], "launcher.max_parallel"),
    "launcher_requeue_max_negative": (["launcher.requeue_max=-1"], "launcher.requeue_max"),
    "launcher_signal_delay_negative": (["launcher.signal_delay_s=-5"], "launcher.signal_delay_s"),
    "launcher_signal_delay_text": (["launcher.signal_delay_s=soon"], "launcher.signal_delay_s"),
    "launcher_additional_parameters_text": (
        ["launcher.additional_parameters=x"],
        "launcher.additional_parameters",
    ),
    "container_binary_with_option": (["container.binary=apptainer --foo"], "container.binary"),
    "container_binary_with_semicolon": (["container.binary='apptainer;rm -rf x'"], "container.binary"),
    "container_python_with_dollar": (["container.python='$(id)'"], "container.python"),
    "container_extra_args_string": (["container.extra_args=--cleanenv --nv"], "container.extra_args"),
    "resources_gpus_per_node_1e6": (
        ["resources_default.gpus_per_node=1e6"],
        "resources_default.gpus_per_node",
    ),
    "resources_cpus_per_task_1e8": (
        ["resources_default.cpus_per_task=1e8"],
        "resources_default.cpus_per_task",
    ),
    "resources_time_min_1e30": (["resources_default.time_min=1e30"], "resources_default.time_min"),
    "resources_mem_gb_negative": (["resources_default.mem_gb=-1"], "mem_gb"),
    "stage_gpus_per_node_1e6": (
        ["stages.contract.resources.gpus_per_node=1000000"],
        "stages.contract.resources.gpus_per_node",
    ),
    "contract_rank_error_zero": (["stages.contract.rank_error=0"], "stages.contract.rank_error"),
    "contract_dynamics_rows_negative": (
        ["stages.contract.dynamics_rows=-5"],
        "stages.contract.dynamics_rows",
    ),
    "plugin_raises_at_import": (["plugins=[malformed_plugin_boom]"], "plugins"),
}
APPTAINER = ("container.binary", "container.python", "container.extra_args")


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Callable[[list[str]], Any]:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import pipeline.launch

    pipeline.launch.stages.load()  # the stages' typed configs in Hydra's ConfigStore, as `cli` puts them

    plugins = tmp_path_factory.mktemp("plugins")
    (plugins / "malformed_plugin_boom.py").write_text("raise RuntimeError('boom at import')\n")
    image = plugins / "image.sif"
    image.write_bytes(b"not really an image")
    sys.path.insert(0, str(plugins))
    GlobalHydra.instance().clear()
    conf = Path(pipeline.launch.__file__).parent / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):

        def build(overrides: list[str]) -> Any:
            extra = []
            if any(o.startswith(APPTAINER) for o in overrides):
                extra = ["container=apptainer", f"container.image={image}"]
            return hydra_compose("config", overrides=[*extra, *overrides])

        yield build
    sys.path.remove(str(plugins))


@pytest.mark.parametrize("name", list(LAUNCH_CASES))
def test_launch_config_is_refused(name: str, compose: Callable[[list[str]], Any]) -> None:
    from pipeline import launch
    from pipeline.errors import ConfigError

    overrides, key = LAUNCH_CASES[name]
    cfg = compose(overrides)
    with deadline(), pytest.raises(ConfigError) as info:
        launch.validate(cfg, launch.load_registry(cfg))
    assert key in info.value.key, one_line(info.value)
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)


# ------------------------------------------------- a representative subset through `pipeline.launch`

LAUNCH_TIMEOUT_S = 300


def _launch(t: Triple, *overrides: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The launch's own entry (`launch.cli`) run in this process (tests/in_process_launch.py: the same
    command line, run folder and exit code, without an interpreter and the contract's imports each)."""
    from tests.in_process_launch import launch_here

    paths = [
        f"{k}.path={getattr(t, k) if k != 'model' else t.model}" for k in ("model", "training", "dataset")
    ]
    with deadline(LAUNCH_TIMEOUT_S):
        proc = launch_here(t.root, "stage=contract", "launcher=local", *paths, *overrides)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    leftovers = [p for p in t.root.rglob("*") if "tmp" in p.name and p.suffix != ".sif" and p.is_file()]
    assert not leftovers, f"half-written files left: {leftovers}"
    return proc, t.root / "preflight" / "runs"


def _plugin(t: Triple) -> str:
    (t.root / "boom_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    return "plugins=[boom_plugin]"


EXIT_2 = {
    "launch_max_parallel_negative": (lambda t: "launcher.max_parallel=-1", "launcher.max_parallel"),
    "launch_container_binary_shell_string": (
        lambda t: (
            (t.root / "i.sif").write_bytes(b"x") and f"container=apptainer container.image={t.root / 'i.sif'}"
        ),
        "container.binary",
    ),
    "launch_waiver_date_2026_13_45": (
        lambda t: (
            put(t.root / "waivers.yaml", WAIVER % "2026-13-45") or f"waivers_file={t.root / 'waivers.yaml'}"
        ),
        "waivers[0].date",
    ),
    "launch_plugin_raises_at_import": (_plugin, "plugins"),
}


@pytest.mark.parametrize("name", list(EXIT_2))
def test_launch_refuses_with_one_line(name: str, tmp_path: Path) -> None:
    t = make_triple(tmp_path)
    make, key = EXIT_2[name]
    overrides = make(t).split(" ")
    if name == "launch_container_binary_shell_string":
        overrides.append("container.binary='apptainer --foo; id'")
    proc, runs = _launch(t, *overrides)
    lines = [line for line in proc.stdout.splitlines() if "error" in line]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and key in lines[0] and "nothing was submitted" in lines[0], proc.stdout
    assert not runs.exists() or not any(runs.iterdir()), "a refused launch left a run folder"


def _name_not_utf8_parquet(t: Triple) -> None:
    (t.parquet.parent / os.fsdecode(b"episode_\xff\xfe.parquet")).write_bytes(b"not parquet")


EXIT_3 = {
    "launch_nan_in_rows": (ROW_CASES["data_nan_rows"][0], "contract.finite:action", "action", None),
    "launch_stats_json_fifo": (lambda t: fifo(t.stats), "contract.error", "stats.json", "stats.json"),
    "launch_file_name_not_utf8": (
        _name_not_utf8_parquet,
        "contract.error",
        "episode_\\xff\\xfe",
        "data file",
    ),
    "launch_data_path_unknown_field": (
        lambda t: edit_json(t.info, top(data_path="data/chunk-{episode_chunk:03d}/{camera_name}.parquet")),
        "contract.health.meta.locations",
        "info.json",
        "data_path",
    ),
}


@pytest.mark.parametrize("name", list(EXIT_3))
def test_launch_records_a_named_row(name: str, tmp_path: Path) -> None:
    t = make_triple(tmp_path)
    breaks, check_id, file, field = EXIT_3[name]
    breaks(t)
    proc, runs = _launch(t)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    (run,) = list(runs.iterdir())
    result = json.loads((run / "stages" / "contract.json").read_text())
    rows = {c["id"]: c for c in result["checks"]}
    assert check_id in rows, sorted(rows)
    row = rows[check_id]
    assert file in row["message"] and "Traceback" not in json.dumps(result), row
    if field is not None:
        assert field in (row["evidence"].get("field") or ""), row
    gate = json.loads((run / "gate.json").read_text())
    assert gate["gate"] == "blocked"
